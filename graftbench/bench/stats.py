"""Repetitions, medians and memory readings for the benchmark."""

from __future__ import annotations

import gc
import statistics
import time
from pathlib import Path
from typing import Callable, Sequence


def summary(values: list[float]) -> dict:
    """``{"median", "min", "max", "n"}`` of repeated measurements (seconds, or whatever unit ``values`` are in).

    Raises ``ValueError`` for no values.
    """
    if not values:
        raise ValueError("no measurements to summarize")
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """Seconds ``fn()`` took (``time.perf_counter``), and what it returned."""
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def alternating(pins: Sequence[str], repeats: int, probe: Callable[[str], dict],
                on_probe: Callable[[dict], None] | None = None) -> dict[str, list[dict]]:
    """``repeats`` rounds of ``probe(pin)`` for each of ``pins`` in turn (the pins alternate, so that each sees the
    machine in the same state), ``on_probe`` called with each result as it comes; returns each pin's results in the
    order they were made."""
    runs: dict[str, list[dict]] = {pin: [] for pin in pins}
    for _ in range(repeats):
        for pin in pins:
            runs[pin].append(probe(pin))
            if on_probe:
                on_probe(runs[pin][-1])
    return runs


def speed_cell(probes: list[dict]) -> dict:
    """One pin's cell of a speed table from its probes: the first probe's ``cpu_capability``, the medians of
    ``prefill_tok_per_s`` and ``decode_tok_per_s`` (tokens/s), and the probes themselves (``runs``)."""
    return {"cpu_capability": probes[0]["cpu_capability"],
            "prefill_tok_per_s": statistics.median(p["prefill_tok_per_s"] for p in probes),
            "decode_tok_per_s": statistics.median(p["decode_tok_per_s"] for p in probes), "runs": probes}


def gb_per_s(n_bytes: int, seconds: float) -> float:
    """Throughput in GB/s (10^9 bytes per second)."""
    return n_bytes / seconds / 1e9


_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"{field} is not in {_STATUS}")


def rss_bytes() -> int:
    """Resident set size of this process now, in bytes (``VmRSS`` of ``/proc/self/status``; Linux only)."""
    return _status_kib("VmRSS") * 1024


class PeakRSS:
    """Peak resident memory of a block, over what was resident when it began, in bytes.

    Resets the kernel's high-water mark (``echo 5 > /proc/self/clear_refs``, proc(5)) at entry and reads
    ``VmHWM`` at exit, so a transient peak inside the block counts. Since Linux 6.2 both ``VmRSS`` and ``VmHWM``
    come from per-CPU batched counters (``percpu_counter_read_positive`` in ``mm/``), read approximately: a block
    that frees what it allocated can read a high-water mark some pages below the resident set read at its start.
    The peak of a block is at least what was resident when it began, so ``increase`` is never below 0 (bytes).
    Raises ``OSError`` off Linux.
    """

    def __enter__(self) -> "PeakRSS":
        gc.collect()
        _CLEAR_REFS.write_text("5")
        self.start = rss_bytes()
        self.increase = 0
        return self

    def __exit__(self, *exc) -> None:
        self.increase = max(0, _status_kib("VmHWM") * 1024 - self.start)
