"""The pinned config: everything that fixes the numbers, and its fingerprint.

Two runs whose fingerprints are equal are expected to produce byte-identical logits; an artifact is grafted only
under the fingerprint it was deposited with.
"""

from __future__ import annotations

import platform
import re
from dataclasses import asdict, dataclass, field
from importlib import metadata

from .hashing import sha256_json
from .settings import DEFAULT_CHUNK_SIZE

PINNED_LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "gguf", "accelerate")

# Prompt layouts. The deposit text states the problem, then at once its final answer, then the solution ending in
# the same final-answer line. It serves both query layouts: a recurring problem's query repeats the problem and ends
# with the answer cue, so a small model copies the answer (measured on smollm2-135m over AIME 2024: 29 of 30 in
# this layout against 23-24 of 30 in a chat layout; 29 of 30 again with the closing line added, against 27 of 30
# with the answer only at the end);
# a new problem's query ends with the solution cue, and the model writes a solution that ends like the example's.
ANSWER_CUE = "Final answer:"
DEPOSIT_LAYOUT = ("Problem: {problem}\n" + ANSWER_CUE + " {answer}\nSolution: {solution}\n" + ANSWER_CUE
                  + " {answer}\n\n")
QUERY_LAYOUT = "Problem: {problem}\n" + ANSWER_CUE
SOLVE_INSTRUCTION = "Solve the following problem. Put the final answer in \\boxed{{}}.\n\n{problem}"
# The solve layout (a new problem after a grafted worked example, Minerva-style): the query ends at the solution
# cue, the model writes a solution and its final-answer line, like the example; the decode stops once that line is
# complete, or when the model starts another problem.
SOLUTION_CUE = "Solution:"
SOLVE_QUERY_LAYOUT = "Problem: {problem}\n" + SOLUTION_CUE
SOLVE_STOP = r"Final answer:[^\n]*\S[^\n]*\n|\nProblem:"
QUERY_LAYOUTS = ("answer", "solve")

# Program mode (graftbench.program_mode): the layout of the first probe on qwen2.5-coder-0.5b (docs/program-mode.md).
# The baseline's user message is the problem and the instruction, and the reply opens a ```python fence so the first
# decoded token is code; after a graft a new problem's query mirrors a deposited program's text. The decode stops at
# the closing fence. Not part of the pin (adding program mode changed no artifact's fingerprint): a program-mode run
# records PROGRAM_LAYOUT in its settings.
PROGRAM_INSTRUCTION = "Write one short Python program that prints only the final number."
PROGRAM_FENCE = "```python\n"
PROGRAM_CLOSE = "```"
PROGRAM_PROMPT = "{problem}\n\n" + PROGRAM_INSTRUCTION
PROGRAM_QUERY = "Problem: {problem}\n" + PROGRAM_INSTRUCTION + "\nSolution: " + PROGRAM_FENCE
PROGRAM_ANSWER_CUE = ANSWER_CUE + "\n"  # what the verifier reads before a program's last printed line
PROGRAM_LAYOUT = {"prompt": PROGRAM_PROMPT, "fence": PROGRAM_FENCE, "close": PROGRAM_CLOSE, "query": PROGRAM_QUERY,
                  "answer_cue": PROGRAM_ANSWER_CUE}


@dataclass(frozen=True)
class PromptLayout:
    """The text templates that turn problems into token streams (part of the pin).

    ``query``/``answer_cue``/``query_stop``: the ``answer`` layout (a recurring problem answers after the cue, up to
    a newline). ``solve_query``/``solve_stop``: the ``solve`` layout (a new problem is solved in full after the
    grafted example; ``solve_stop`` is a regular expression on the decoded text).
    """

    solve_instruction: str = SOLVE_INSTRUCTION
    deposit: str = DEPOSIT_LAYOUT
    query: str = QUERY_LAYOUT
    answer_cue: str = ANSWER_CUE
    query_stop: str = "\n"
    solve_query: str = SOLVE_QUERY_LAYOUT
    solve_stop: str = SOLVE_STOP

    def deposit_text(self, problem: str, answer: str, solution: str) -> str:
        """The text a verified solution is deposited as (its KV state is the artifact)."""
        return self.deposit.format(problem=problem, answer=answer, solution=solution)

    def query_text(self, problem: str, layout: str) -> str:
        """The text that follows a graft: ``layout`` ``answer`` or ``solve``. Raises ``ValueError`` for another."""
        if layout not in QUERY_LAYOUTS:
            raise ValueError(f"layout {layout!r} is not one of {', '.join(QUERY_LAYOUTS)}")
        return (self.query if layout == "answer" else self.solve_query).format(problem=problem)

    def cue(self, layout: str) -> str:
        """What the verifier reads before the output: the answer cue for ``answer`` (the output continues it),
        nothing for ``solve`` (the output writes its own final-answer line)."""
        return self.answer_cue if layout == "answer" else ""

    def stop(self, layout: str) -> str | re.Pattern:
        """The decode's stop for ``layout``: the newline after the answer, or the compiled ``solve_stop``."""
        return self.query_stop if layout == "answer" else re.compile(self.solve_stop)


# Fields of the pin that do not change a byte: the model's display name (an alias and a path to the same GGUF are one
# pin). The fingerprint leaves them out, and so do a manifest's fingerprint check and an expectation's replay.
UNPINNED_FIELDS = ("model",)


def pin_fingerprint(pin: dict) -> str:
    """SHA-256 of the canonical JSON of a pin (a :meth:`PinnedConfig.to_dict`) without :data:`UNPINNED_FIELDS`."""
    return sha256_json({k: v for k, v in pin.items() if k not in UNPINNED_FIELDS})


# Pin fields added after pins were committed, left out of a pin while empty: ``accelerator`` (the CUDA pin,
# graftbench.cuda_pin; empty on the CPU) and ``random_weights`` (graftbench.random_weights; empty for real weights).
OMITTED_WHEN_EMPTY = ("accelerator", "random_weights")


@dataclass(frozen=True)
class PinnedConfig:
    """Everything that fixes the logits of a run.

    ``attn_implementation`` names the attention function (``graftbench_sdpa``, :mod:`graftbench.attention`) and
    ``cache_class`` the KV cache's layer class (``preallocated``, :mod:`graftbench.kv_cache`).
    ``isa`` is the instruction-set pin (:mod:`graftbench.isa`): ``native`` or ``avx2``; ``cpu_capability`` is
    the capability torch's kernels run at under it (``AVX2`` on every AVX2-capable CPU under ``avx2``).
    ``chunk_size`` is in tokens: a segment (artifact, chained artifact, query) of n tokens is prefilled in
    forwards of ``chunk_size`` tokens starting at the segment's first token, the last one shorter.
    ``device`` is the device's kind (``cpu`` or ``cuda``); ``accelerator`` the CUDA pin of a CUDA run
    (:mod:`graftbench.cuda_pin`), ``random_weights`` the draw of a random-weights model
    (:mod:`graftbench.random_weights`); both empty otherwise and then left out of :meth:`to_dict`.
    """

    model: str
    weights_sha256: str
    tokenizer_sha256: str
    dtype: str
    device: str
    threads: int
    attn_implementation: str
    chunk_size: int
    layout: PromptLayout
    libraries: dict[str, str] = field(default_factory=dict)
    cpu_capability: str = ""
    machine: str = ""
    isa: str = "native"
    cache_class: str = ""
    accelerator: dict = field(default_factory=dict)
    random_weights: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """A JSON-ready dict of every field, less the :data:`OMITTED_WHEN_EMPTY` fields that are empty (a CPU run
        with real weights: its fingerprint is the one it had before those fields existed)."""
        pin = asdict(self)
        for name in OMITTED_WHEN_EMPTY:
            if not pin[name]:
                del pin[name]
        return pin

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the canonical JSON of every field except :data:`UNPINNED_FIELDS`."""
        return pin_fingerprint(self.to_dict())


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries that can change the numbers."""
    versions = {}
    for name in PINNED_LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def build_config(loaded, chunk_size: int = DEFAULT_CHUNK_SIZE, layout: PromptLayout | None = None) -> PinnedConfig:
    """Pin the config of a :class:`graftbench.models.LoadedModel` on this machine.

    Raises ``ValueError`` if ``chunk_size`` is not a positive number of tokens.
    """
    import torch

    from .isa import current
    from .kv_cache import CACHE_CLASS

    if chunk_size < 1:
        raise ValueError(f"chunk size must be a positive number of tokens, got {chunk_size}")
    from .cuda_pin import record

    device = str(next(loaded.model.parameters()).device)
    if device.startswith("cuda"):
        capability = torch.cuda.get_device_name(torch.device(device))
        accelerator = record(device)
    else:
        capability, accelerator = torch.backends.cpu.get_cpu_capability(), {}
    return PinnedConfig(
        model=loaded.spec,
        weights_sha256=loaded.weights_sha256,
        tokenizer_sha256=loaded.tokenizer_sha256,
        dtype=loaded.dtype,
        device=device.split(":")[0],
        threads=torch.get_num_threads(),
        attn_implementation=str(loaded.model.config._attn_implementation),
        chunk_size=chunk_size,
        layout=layout or PromptLayout(),
        libraries=library_versions(),
        cpu_capability=capability,
        machine=platform.machine(),
        isa=current(),
        cache_class=CACHE_CLASS,
        accelerator=accelerator,
        random_weights=getattr(loaded, "random_weights", None) or {},
    )
