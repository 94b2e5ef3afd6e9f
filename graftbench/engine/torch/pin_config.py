"""The torch engine's pin: the torch-side settings a process applies after importing torch, and the pinned config of a
loaded model on this machine (:class:`graftbench.engine.pin.PinnedConfig`)."""

from __future__ import annotations

import platform

from ...problems.prompts import PromptLayout, reasoning_delimiters
from ...settings import CERTIFIED_KERNELS, DEFAULT_CHUNK_SIZE
from ...util.isa import current as current_isa
from ..pin import PinnedConfig, check_kernels, library_versions


def configure_torch() -> str:
    """After torch is imported: apply the torch-side half of the pin this process carries; returns its name."""
    import torch

    isa = current_isa()
    if isa != "native":
        torch.backends.mkldnn.enabled = False
    return isa


def build_config(loaded, chunk_size: int = DEFAULT_CHUNK_SIZE, layout: PromptLayout | None = None,
                 kernels: str = CERTIFIED_KERNELS) -> PinnedConfig:
    """Pin the config of a :class:`graftbench.engine.torch.loading.LoadedModel` on this machine, run under ``kernels``
    (:data:`graftbench.settings.KERNEL_CONFIGS`; the CUDA settings it stands for are made by
    :func:`graftbench.engine.torch.cuda_determinism.configure` before the model loads).

    Raises ``ValueError`` if ``chunk_size`` is not a positive number of tokens or ``kernels`` is not a kernel
    configuration.
    """
    import torch

    from .kv_cache import CACHE_CLASS

    if chunk_size < 1:
        raise ValueError(f"chunk size must be a positive number of tokens, got {chunk_size}")
    check_kernels(kernels)
    from .cuda_determinism import record

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
