"""The pinned config: everything that fixes the numbers (its fingerprint: :mod:`graftbench.results.fingerprint`).

Two runs whose fingerprints are equal are expected to produce byte-identical logits; an artifact is grafted only
under the fingerprint it was deposited with.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass, field, fields
from importlib import metadata

from ..problems.prompts import PromptLayout, reasoning_delimiters
from ..results.fingerprint import UNPINNED_FIELDS, pin_fingerprint
from ..settings import CERTIFIED_KERNELS, DEFAULT_CHUNK_SIZE, KERNEL_CONFIGS
from ..util.isa import current as current_isa

PINNED_LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "gguf", "accelerate")


# Pin fields added after pins were committed, left out of a pin while they hold their default: ``engine`` (another
# engine's own fields; empty is torch), ``accelerator`` (the CUDA pin, graftbench.engine.cuda_pin; empty on the
# CPU), ``random_weights`` (graftbench.engine.random_weights; empty for real weights) and ``kernels`` (``certified``
# unless ``--kernels fast``).
OMITTED_AT_DEFAULT = ("engine", "accelerator", "random_weights", "kernels")


@dataclass(frozen=True)
class PinnedConfig:
    """Everything that fixes the logits of a run.

    ``attn_implementation`` names the attention function (``graftbench_sdpa``, :mod:`graftbench.engine.attention`) and
    ``cache_class`` the KV cache's layer class (``preallocated``, :mod:`graftbench.engine.kv_cache`).
    ``isa`` is the instruction-set pin (:mod:`graftbench.util.isa`): ``native`` or ``avx2``; ``cpu_capability`` is
    the capability torch's kernels run at under it (``AVX2`` on every AVX2-capable CPU under ``avx2``).
    ``chunk_size`` is in tokens: a segment (artifact, chained artifact, query) of n tokens is prefilled in
    forwards of ``chunk_size`` tokens starting at the segment's first token, the last one shorter.
    ``engine`` holds another engine's own pin fields (``engine`` names it, e.g. ``llama.cpp``:
    :meth:`graftbench.engine.llama_cpp.LlamaCppEngine.pin_fields`); empty (absent from :meth:`to_dict`) is torch.
    ``device`` is the device's kind (``cpu`` or ``cuda``); ``accelerator`` the CUDA pin of a CUDA run
    (:mod:`graftbench.engine.cuda_pin`), ``random_weights`` the draw of a random-weights model
    (:mod:`graftbench.engine.random_weights`); all three empty otherwise and then left out of :meth:`to_dict`.
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


def configure_torch() -> str:
    """After torch is imported: apply the torch-side half of the pin this process carries; returns its name."""
    import torch

    isa = current_isa()
    if isa != "native":
        torch.backends.mkldnn.enabled = False
    return isa


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


def build_config(loaded, chunk_size: int = DEFAULT_CHUNK_SIZE, layout: PromptLayout | None = None,
                 kernels: str = CERTIFIED_KERNELS) -> PinnedConfig:
    """Pin the config of a :class:`graftbench.engine.models.LoadedModel` on this machine, run under ``kernels``
    (:data:`graftbench.settings.KERNEL_CONFIGS`; the CUDA settings it stands for are made by
    :func:`graftbench.engine.cuda_pin.configure` before the model loads).

    Raises ``ValueError`` if ``chunk_size`` is not a positive number of tokens or ``kernels`` is not a kernel
    configuration.
    """
    import torch

    from .kv_cache import CACHE_CLASS

    if chunk_size < 1:
        raise ValueError(f"chunk size must be a positive number of tokens, got {chunk_size}")
    check_kernels(kernels)
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
        layout=layout or PromptLayout(reasoning=reasoning_delimiters(loaded.spec)),
        libraries=library_versions(),
        cpu_capability=capability,
        machine=platform.machine(),
        isa=current_isa(),
        cache_class=CACHE_CLASS,
        accelerator=accelerator,
        random_weights=getattr(loaded, "random_weights", None) or {},
        kernels=kernels,
    )


def check_kernels(kernels: str) -> str:
    """``kernels`` when it names a kernel configuration; raises ``ValueError`` naming the choices otherwise."""
    if kernels not in KERNEL_CONFIGS:
        raise ValueError(f"kernels {kernels!r} is not one of {', '.join(KERNEL_CONFIGS)}")
    return kernels
