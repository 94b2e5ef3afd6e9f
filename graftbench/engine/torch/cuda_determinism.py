"""The CUDA settings that make a CUDA run's bytes reproducible, set before the first forward and recorded in the pin.

cuBLAS promises equal bits only on the same architecture, SM count, toolkit version and a single stream; split-K
and attention split counts depend on the SM count; TF32 and reduced-precision reductions change products;
``CUBLAS_WORKSPACE_CONFIG``, the SDPA backend, eager against compiled and a MIG slice all change which kernel runs.
:func:`configure` sets what graftbench controls (deterministic algorithms, TF32 and reduced-precision reductions
off, the workspace config, one SDPA backend, eager); :func:`record` reads every field back from torch, so the pin
states what held, not what was asked. docs/gpu.md says why each field matters.

A CPU run records nothing here: the pin's ``accelerator`` field is left out when empty, so every CPU pin's
fingerprint is what it was before this module existed.

``--kernels fast`` (:func:`configure` with ``kernels="fast"``) is the other configuration, for a baseline arm that
needs no certificate: deterministic algorithms off, every SDPA backend enabled (torch picks flash, memory-efficient
or cuDNN attention where the shapes and mask allow, math elsewhere), reduced-precision reductions as torch
defaults them, ``CUBLAS_WORKSPACE_CONFIG`` not set; TF32 stays off (it changes a float32 run's precision, not only
its speed), and the model still runs eager (compiling it is not offered: graftbench's cache grows by position, and
a compiled graph would be rebuilt at every new length). :func:`record` reads what holds, so a fast pin's
``accelerator`` differs from a certified one's, and the pin's own ``kernels`` field says ``fast`` on every device.
"""

from __future__ import annotations

import os
import re
from importlib import metadata

from ...settings import CERTIFIED_KERNELS

WORKSPACE_CONFIG = ":4096:8"  # cuBLAS's documented setting for deterministic results with one stream
SDPA_BACKEND = "math"  # the one backend that takes every mask, dtype, head size and grouped KV heads
SDPA_BACKENDS = ("math", "flash", "efficient", "cudnn")
EXECUTION = "eager"  # graftbench never compiles the model (no torch.compile, no CUDA graphs)
_MIG = re.compile(r"\bMIG\s+(\S+)")


def configure(torch=None, kernels: str = CERTIFIED_KERNELS) -> None:
    """Set the CUDA pin's controlled settings in this process, before the first forward. Under ``certified``:
    deterministic algorithms, ``CUBLAS_WORKSPACE_CONFIG`` (only if unset: a value set by the user is kept and
    recorded), TF32 and reduced-precision reductions off, only :data:`SDPA_BACKEND` enabled. Under ``fast``
    (:func:`configure_fast`): torch's own kernel choice. ``torch`` stands in for the module (tests).

    Raises ``ValueError`` for another ``kernels``."""
    if torch is None:
        import torch
    if kernels != CERTIFIED_KERNELS:
        return configure_fast(torch, kernels)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", WORKSPACE_CONFIG)
    # warn_only: an op without a deterministic kernel warns instead of ending a run that has a GPU for minutes;
    # check-exact's hashes are what show the bytes were reproduced
    torch.use_deterministic_algorithms(True, warn_only=True)
    _set_backends(torch, certified=True)


def configure_fast(torch, kernels: str = "fast") -> None:
    """``--kernels fast`` in this process, before the first forward: deterministic algorithms off, every SDPA
    backend enabled, cuDNN's autotuner on, reduced-precision reductions allowed (torch's defaults), TF32 off.
    ``CUBLAS_WORKSPACE_CONFIG`` is left as the environment has it. Raises ``ValueError`` unless ``kernels`` is
    ``fast``."""
    if kernels != "fast":
        raise ValueError(f"kernels {kernels!r} is not one of {CERTIFIED_KERNELS}, fast")
    torch.use_deterministic_algorithms(False)
    _set_backends(torch, certified=False)


def _set_backends(torch, certified: bool) -> None:
    """The backend flags both kernel choices set: TF32 off always; under ``certified`` cuDNN deterministic without
    its autotuner, no reduced-precision reductions and only :data:`SDPA_BACKEND`; otherwise torch's defaults and
    every SDPA backend."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = not certified
    torch.backends.cudnn.deterministic = certified
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = not certified
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = not certified
    for backend in SDPA_BACKENDS:
        enable = getattr(torch.backends.cuda, f"enable_{backend}_sdp", None)
        if enable is not None:
            enable(backend == SDPA_BACKEND or not certified)


def record(device: str, torch=None, nvml=None) -> dict:
    """The CUDA pin of ``device`` (``cuda:N``) as it holds now: a JSON-ready dict of the fields docs/gpu.md lists.
    ``torch`` and ``nvml`` (``pynvml``) stand in for the modules (tests); without NVML the driver is read from
    ``/proc/driver/nvidia/version``, and a MIG slice from the device name."""
    if torch is None:
        import torch
    index = int(device.split(":")[1]) if ":" in device else 0
    props = torch.cuda.get_device_properties(index)
    name = str(props.name)
    return {
        "gpu": name,
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": int(props.multi_processor_count),
        "mig": mig_profile(name, index, nvml),
        "driver": driver_version(nvml),
        "cuda": str(torch.version.cuda),
        "cublas": library_version("cublas"),
        "cudnn": str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else "absent",
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        "deterministic_warn_only": bool(torch.is_deterministic_algorithms_warn_only_enabled()),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "fp16_reduced_precision_reduction": bool(torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction),
        "bf16_reduced_precision_reduction": bool(torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG", ""),
        "sdpa_backends": enabled_sdpa_backends(torch),
        "execution": EXECUTION,
    }


def enabled_sdpa_backends(torch) -> list[str]:
    """The SDPA backends torch would choose among now (after :func:`configure`: only :data:`SDPA_BACKEND`)."""
    enabled = []
    for backend in SDPA_BACKENDS:
        check = getattr(torch.backends.cuda, f"{backend}_sdp_enabled", None)
        if check is not None and check():
            enabled.append(backend)
    return enabled


def mig_profile(name: str, index: int, nvml=None) -> str:
    """The MIG profile the device runs in (e.g. ``3g.71gb``), or ``none``: from the device name torch reports for
    a MIG slice, else from NVML's MIG mode when NVML is importable."""
    match = _MIG.search(name)
    if match:
        return match.group(1)
    nvml = nvml if nvml is not None else _nvml()
    if nvml is None:
        return "none"
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except Exception:  # noqa: BLE001 (NVML raises its own error types; a GPU without MIG support is "none")
        return "none"
    return "enabled (profile unknown)" if current else "none"


def driver_version(nvml=None) -> str:
    """The NVIDIA driver's version: NVML's when importable, else the kernel module's line in
    ``/proc/driver/nvidia/version``, else ``unknown``."""
    nvml = nvml if nvml is not None else _nvml()
    if nvml is not None:
        try:
            value = nvml.nvmlSystemGetDriverVersion()
            return value.decode() if isinstance(value, bytes) else str(value)
        except Exception:  # noqa: BLE001 (NVML's error types; fall through to the kernel module's file)
            pass
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as handle:
            match = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", handle.read())
    except OSError:
        return "unknown"
    return match.group(1) if match else "unknown"


def library_version(name: str) -> str:
    """The version of the NVIDIA wheel that ships ``name`` (``cublas``: ``nvidia-cublas-cu12``,
    ``nvidia-cublas-cu13`` or ``nvidia-cublas``) beside torch, or ``linked into torch`` when none is installed
    (a torch build that bundles its CUDA libraries)."""
    for suffix in ("-cu13", "-cu12", "-cu11", ""):
        try:
            return metadata.version(f"nvidia-{name}{suffix}")
        except metadata.PackageNotFoundError:
            continue
    return "linked into torch"


def _nvml():
    """``pynvml`` initialized, or ``None`` when it is not installed or finds no driver."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 (no driver or no permission: the caller falls back)
        return None
    return pynvml
