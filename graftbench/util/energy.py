"""Energy: measured where the machine exposes a counter, otherwise a declared estimate. Never unlabelled.

Methods, in order of preference:

- ``nvml``: GPU board energy from NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``,
  millijoules since the driver loaded; Volta and newer), when the model runs on a CUDA device and ``pynvml`` (the
  ``nvidia-ml-py`` package, extra ``gpu``) is importable. It counts the whole board, so concurrent work on the
  same GPU is included.
- ``rapl``: CPU package energy from Linux powercap (``/sys/class/powercap/intel-rapl:*/energy_uj``, microjoules,
  also used by AMD's RAPL driver), when readable.
- ``estimate``: ``joules = process CPU seconds (user + system) x WATTS_PER_BUSY_CORE``. The constant is declared,
  not measured: 10 W per busy core, roughly a server x86 core's share of package power under load (e.g. a
  280 W TDP, 64-core EPYC 7763 gives 4.4 W/core at TDP over all cores; 10 W allows for the uncore and memory
  share when few cores are busy). It makes ratios between runs on one machine meaningful, not absolute joules.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

WATTS_PER_BUSY_CORE = 10.0
ESTIMATE_FORMULA = f"joules = process CPU seconds (user+system) x {WATTS_PER_BUSY_CORE} W per busy core (declared)"


@dataclass(frozen=True)
class EnergyMethod:
    """How energy figures were obtained: ``name`` is ``nvml``, ``rapl`` or ``estimate``; ``detail`` says more."""

    name: str
    detail: str


def _rapl_files() -> list[str]:
    files = sorted(glob.glob("/sys/class/powercap/intel-rapl:[0-9]*/energy_uj"))
    readable = []
    for path in files:
        try:
            with open(path) as handle:
                int(handle.read())
            readable.append(path)
        except (OSError, ValueError):
            continue
    return readable


def nvml_name(device: str, visible: str | None = None) -> int | str:
    """NVML's name for CUDA device ``device`` (``cuda`` or ``cuda:N``): an index, or a UUID (``GPU-...``). CUDA
    numbers only the devices ``CUDA_VISIBLE_DEVICES`` lists (``visible``; the environment's when ``None``), NVML
    every device of the machine, so ``cuda:N`` is that list's N-th entry when it is set (as Ray sets it for a worker
    holding a GPU), else NVML's device N. Raises ``IndexError`` when the list has no N-th entry."""
    index = int(device.partition(":")[2] or 0)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if not visible:
        return index
    entry = [part.strip() for part in visible.split(",")][index]
    return int(entry) if entry.isdigit() else entry


def _nvml_handle(device: str):
    """The NVML handle of CUDA device ``device`` (``cuda`` or ``cuda:N``, :func:`nvml_name`), or ``None`` where NVML
    or its energy counter is not available (no ``pynvml``, no driver, a GPU older than Volta, a MIG slice)."""
    if not device.startswith("cuda"):
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        name = nvml_name(device)
        handle = (pynvml.nvmlDeviceGetHandleByIndex(name) if isinstance(name, int)
                  else pynvml.nvmlDeviceGetHandleByUUID(name))
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        return handle
    except Exception:  # ImportError, IndexError, or any pynvml.NVMLError: fall back to the next method
        return None


class EnergyMeter:
    """Reads energy in joules; call :meth:`read` before and after a piece of work and subtract.

    ``device`` is where the model runs (``cpu``, ``cuda:0``): NVML is used for a CUDA device, RAPL or the estimate
    otherwise. ``method`` says how the figure is obtained. Counters that wrap are not corrected (runs here are short
    against RAPL's wrap period of minutes to hours at these powers); a negative difference is reported as is.
    """

    def __init__(self, prefer: str | None = None, device: str = "cpu"):
        self._nvml = _nvml_handle(device) if prefer in (None, "nvml") else None
        self._rapl = _rapl_files() if prefer in (None, "rapl") and self._nvml is None else []
        if self._nvml is not None:
            self.method = EnergyMethod("nvml", f"NVML total energy of {device}")
        elif self._rapl:
            self.method = EnergyMethod("rapl", f"Linux powercap RAPL, {len(self._rapl)} package counter(s)")
        else:
            self.method = EnergyMethod("estimate", ESTIMATE_FORMULA)

    def read(self) -> float:
        """Cumulative joules since an arbitrary origin."""
        if self._nvml is not None:
            import pynvml

            return pynvml.nvmlDeviceGetTotalEnergyConsumption(self._nvml) / 1e3
        if self._rapl:
            total = 0
            for path in self._rapl:
                with open(path) as handle:
                    total += int(handle.read())
            return total / 1e6
        times = os.times()
        return (times.user + times.system) * WATTS_PER_BUSY_CORE

    def describe(self) -> dict:
        """The method as a JSON-ready dict (goes into every manifest)."""
        return {"method": self.method.name, "detail": self.method.detail, "measured": self.method.name != "estimate"}
