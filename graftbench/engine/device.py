"""``--device auto|cpu|cuda|cuda:N``: where the model runs (*torch-free* until a name is resolved).

``auto`` is CUDA when torch sees a CUDA device, else the CPU. The pin records the device's kind (``cpu`` or
``cuda``) in its ``device`` field, and what identifies a CUDA device in its ``accelerator`` field
(:mod:`graftbench.engine.torch.cuda_determinism`), so two runs on equal GPUs at different indexes share a pin.
"""

from __future__ import annotations

import re

DEVICE_NAMES = ("auto", "cpu", "cuda", "cuda:N")
DEFAULT_DEVICE = "auto"
_NAME = re.compile(r"auto|cpu|cuda(?::\d{1,3})?")
# The default dtype per device kind when a caller leaves it open: CPU float32 (the committed expectations),
# CUDA bfloat16 (the GPU's native matmul type).
DEFAULT_DTYPES = {"cpu": "float32", "cuda": "bfloat16"}
AUTO_DTYPE = "auto"  # --dtype's default: DEFAULT_DTYPES for the run's device


class DeviceError(ValueError):
    """A device name that is not one of :data:`DEVICE_NAMES`, or a CUDA device this machine does not have."""


def check_name(name: str) -> str:
    """``name`` when it is ``auto``, ``cpu``, ``cuda`` or ``cuda:N``; raises :class:`DeviceError` naming it."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise DeviceError(f"device {name!r} is not one of {', '.join(DEVICE_NAMES)}")
    return name


def resolve(name: str = DEFAULT_DEVICE, cuda=None) -> str:
    """The torch device string for ``name``: ``cpu``, or ``cuda:N`` (``cuda`` is ``cuda:0``; ``auto`` is
    ``cuda:0`` when CUDA is available, else ``cpu``). ``cuda`` stands in for ``torch.cuda`` (tests).

    Raises :class:`DeviceError` for a bad name, or a CUDA device that is not available (naming how many are).
    """
    check_name(name)
    if name == "cpu":
        return "cpu"
    if cuda is None:
        import torch

        cuda = torch.cuda
    available = cuda.is_available()
    if name == "auto":
        return "cuda:0" if available else "cpu"
    index = int(name.split(":")[1]) if ":" in name else 0
    count = cuda.device_count() if available else 0
    if index >= count:
        raise DeviceError(f"device {name!r} is not available: this machine has {count} CUDA device(s)"
                          + ("" if available else " (torch sees no CUDA; is this torch's CPU build?)"))
    return f"cuda:{index}"


def kind(device: str) -> str:
    """``cpu`` or ``cuda`` for a resolved device string (``cuda:1`` -> ``cuda``)."""
    return device.split(":")[0]


def default_dtype(device: str) -> str:
    """The dtype a run on ``device`` (resolved) takes when none is given: :data:`DEFAULT_DTYPES`."""
    return DEFAULT_DTYPES[kind(device)]


def dtype_for(dtype: str, device: str = DEFAULT_DEVICE, cuda=None) -> str:
    """The dtype a run takes: ``dtype`` itself unless it is ``auto``, which is :func:`default_dtype` of the device
    ``device`` names (``cpu``: float32, ``cuda``/``cuda:N``: bfloat16, both without importing torch; ``auto``:
    resolved with :func:`resolve`, so float32 where torch sees no CUDA). ``cuda`` stands in for ``torch.cuda``.

    Raises :class:`DeviceError` as :func:`resolve` does (for ``auto`` only when the device must be resolved).
    """
    if dtype != AUTO_DTYPE:
        return dtype
    check_name(device)
    return default_dtype(resolve(device, cuda) if device == "auto" else "cuda" if device != "cpu" else "cpu")
