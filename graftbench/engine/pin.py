"""The pinned config: everything that fixes the numbers (its fingerprint: :mod:`graftbench.results.fingerprint`).

Two runs whose fingerprints are equal are expected to produce byte-identical logits; an artifact is grafted only
under the fingerprint it was deposited with.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from importlib import metadata

from ..problems.prompts import PromptLayout
from ..results.fingerprint import pin_fingerprint
from ..settings import CERTIFIED_KERNELS, KERNEL_CONFIGS

PINNED_LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "gguf", "accelerate")


# Pin fields added after pins were committed, left out of a pin while they hold their default: ``engine`` (another
# engine's own fields; empty is torch), ``accelerator`` (the CUDA pin, graftbench.engine.torch.cuda_determinism; empty on the
# CPU), ``random_weights`` (graftbench.engine.torch.random_weights; empty for real weights) and ``kernels`` (``certified``
# unless ``--kernels fast``).
OMITTED_AT_DEFAULT = ("engine", "accelerator", "random_weights", "kernels")


@dataclass(frozen=True)
class PinnedConfig:
    """Everything that fixes the logits of a run.

    ``attn_implementation`` names the attention function (``graftbench_sdpa``, :mod:`graftbench.engine.torch.attention`) and
    ``cache_class`` the KV cache's layer class (``preallocated``, :mod:`graftbench.engine.torch.kv_cache`).
    ``isa`` is the instruction-set pin (:mod:`graftbench.util.isa`): ``native`` or ``avx2``; ``cpu_capability`` is
    the capability torch's kernels run at under it (``AVX2`` on every AVX2-capable CPU under ``avx2``).
    ``chunk_size`` is in tokens: a segment (artifact, chained artifact, query) of n tokens is prefilled in
    forwards of ``chunk_size`` tokens starting at the segment's first token, the last one shorter.
    ``engine`` holds another engine's own pin fields (``engine`` names it, e.g. ``llama.cpp``:
    :meth:`graftbench.engine.llama_cpp.engine.LlamaCppEngine.pin_fields`); empty (absent from :meth:`to_dict`) is torch.
    ``device`` is the device's kind (``cpu`` or ``cuda``); ``accelerator`` the CUDA pin of a CUDA run
    (:mod:`graftbench.engine.torch.cuda_determinism`), ``random_weights`` the draw of a random-weights model
    (:mod:`graftbench.engine.torch.random_weights`); all three empty otherwise and then left out of :meth:`to_dict`.
    ``kernels`` is the kernel configuration (``--kernels``, :data:`graftbench.settings.KERNEL_CONFIGS`):
    ``certified`` (left out of :meth:`to_dict`, so every pin recorded before the field existed keeps its
    fingerprint) or ``fast`` (torch's own kernel choice: uncertified, and another pin, so an artifact deposited under
    it is refused by a certified run and the other way round).
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
    engine: dict = field(default_factory=dict)
    accelerator: dict = field(default_factory=dict)
    random_weights: dict = field(default_factory=dict)
    kernels: str = CERTIFIED_KERNELS

    def to_dict(self) -> dict:
        """A JSON-ready dict of every field, less the :data:`OMITTED_AT_DEFAULT` fields that hold their default (a
        certified CPU run with real weights: its fingerprint is the one it had before those fields existed)."""
        pin = asdict(self)
        for name in OMITTED_AT_DEFAULT:
            if pin[name] == _DEFAULTS[name]:
                del pin[name]
        if pin["layout"].get("reasoning"):
            pin["layout"]["reasoning"] = list(pin["layout"]["reasoning"])
        else:  # a model that does not think: the layout pinned before reasoning existed (a layout recorded as a
            # plain dict before then, as a replay adopts it, has no such key)
            pin["layout"].pop("reasoning", None)
        return pin

    @property
    def certified(self) -> bool:
        """Whether the run's kernels are the certified ones (a byte-exactness claim is made only then)."""
        return self.kernels == CERTIFIED_KERNELS

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the canonical JSON of every field except :data:`UNPINNED_FIELDS`."""
        return pin_fingerprint(self.to_dict())


_DEFAULTS = {f.name: (f.default_factory() if callable(f.default_factory) else f.default)
             for f in fields(PinnedConfig)}


def library_versions(names: tuple[str, ...] = PINNED_LIBRARIES) -> dict[str, str]:
    """Installed versions of the libraries ``names`` (default: those that can change the torch engine's numbers);
    ``absent`` for one not installed."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def check_kernels(kernels: str) -> str:
    """``kernels`` when it names a kernel configuration; raises ``ValueError`` naming the choices otherwise."""
    if kernels not in KERNEL_CONFIGS:
        raise ValueError(f"kernels {kernels!r} is not one of {', '.join(KERNEL_CONFIGS)}")
    return kernels
