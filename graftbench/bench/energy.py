"""Joules per prefill token, per decode token and per graft, read from the device's energy counter with its idle
power subtracted, and the recurring case's energy ratio modelled from them (``bench --only energy``).

On a GPU the counter is NVML's board energy (:class:`graftbench.util.energy.EnergyMeter`); on the CPU it is RAPL or
the declared estimate, and the result says which (``energy.method``). Each figure is one window of work between two
reads of the counter, the device synchronized before each read, with the idle power measured first over
``idle_s`` seconds of sleep and subtracted as ``idle_w × seconds`` (so what remains is the work's own joules, not the
board's floor). NVML updates its counter at the driver's interval (tens of milliseconds), so each window is made
long enough by repeating its work: ``repeats`` prefills, ``decode_tokens`` decode steps, ``repeats`` grafts.

The modelled ratio (:func:`modelled_ratio`) multiplies these joules by the token counts of two committed CPU runs
(a baseline and its recurring run: prefill tokens, decode tokens, grafts from their manifests' totals). It is a
model, labelled as one: the GPU ran none of those problems.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..engine.base import EngineSession
from ..engine.registry import benchmark_ops
from ..store.folder import Store
from ..util.energy import EnergyMeter
from .memory import DECODE_ROOM
from .ttft import deposit_tokens

_ROOT = Path(__file__).resolve().parents[2]
_MANIFESTS = _ROOT / "manifests" / "amd-epyc-avx512"
# The committed CPU runs whose token counts the modelled ratio uses: AIME 2024 on smollm2-135m, the baseline and the
# recurring run (each problem grafted with its own verified solution)
MODELLED_RUNS = (_MANIFESTS / "aime2024-smollm2-135m-baseline.json",
                 _MANIFESTS / "aime2024-smollm2-135m-recurring.json")
MODELLED_LABEL = ("modelled: this device's joules per token and per graft times the token counts of the committed "
                  "CPU runs named; the device ran none of those problems")


def _window(session: EngineSession, meter: EnergyMeter, work) -> tuple[float, float, object]:
    """``(joules, seconds, result)`` of ``work()``, the device's queued work waited for before each counter read (a
    CUDA device; nothing on the CPU)."""
    sync = benchmark_ops(session.engine_name).synchronize
    sync(session)
    joules, started = meter.read(), time.perf_counter()
    result = work()
    sync(session)
    return meter.read() - joules, time.perf_counter() - started, result


def measure_energy(session: EngineSession, store_root: Path, context: list[int], query: list[int], prefill_tokens: int,
                   decode_tokens: int, repeats: int = 3, idle_s: float = 5.0, meter: EnergyMeter | None = None) -> dict:
    """Idle power, then joules per prefill token (``repeats`` chunked prefills of ``context[:prefill_tokens]``),
    per decode token (``decode_tokens`` greedy steps after the prefill, no EOS), and per graft (``repeats`` reads
    and restores of that prefix deposited as an artifact, each with ``query`` prefilled after it), each with the
    idle power times its seconds subtracted (``*_net_j``) and as measured (``*_j``).

    Raises ``ValueError`` when ``context`` is shorter than ``prefill_tokens`` or a count is not positive.
    """
    if len(context) < prefill_tokens or min(prefill_tokens, decode_tokens, repeats) < 1 or idle_s <= 0:
        raise ValueError(f"energy needs {prefill_tokens} context tokens (the problems give {len(context)}) and "
                         f"positive decode tokens ({decode_tokens}), repeats ({repeats}) and idle seconds ({idle_s})")
    meter = meter or EnergyMeter(device=session.device)
    ops, ids = benchmark_ops(session.engine_name), context[:prefill_tokens]
    idle_j, idle_seconds, _ = _window(session, meter, lambda: time.sleep(idle_s))
    idle_w = idle_j / idle_seconds

    def prefills():
        for _ in range(repeats):
            cache = ops.new_cache(session)
            logits = ops.prefill(session, cache, ids)
        return cache, logits

    prefill_j, prefill_s, (cache, logits) = _window(session, meter, prefills)
    decode_j, decode_s, decoded = _window(session, meter, lambda: ops.greedy_decode(
        session, cache, logits, decode_tokens, set()))
    store = Store(store_root)
    artifact_id = deposit_tokens(session, store, ids)

    def grafts():
        for _ in range(repeats):
            grafted = ops.restore(session, store.read(artifact_id, room=len(query) + DECODE_ROOM))
            ops.prefill(session, grafted, query)

    graft_j, graft_s, _ = _window(session, meter, grafts)
    decoded_tokens = len(decoded.token_ids)
    rows = {"prefill": (prefill_j, prefill_s, repeats * prefill_tokens),
            "decode": (decode_j, decode_s, decoded_tokens), "graft": (graft_j, graft_s, repeats)}
    per = {name: {"j": j, "s": s, "count": n, "net_j": j - idle_w * s, "j_per_unit": (j - idle_w * s) / n}
           for name, (j, s, n) in rows.items()}
    return {"energy": meter.describe(), "idle": {"s": idle_seconds, "j": idle_j, "w": idle_w},
            "prefill_tokens": prefill_tokens, "query_tokens": len(query), "repeats": repeats,
            "windows": per, "j_per_prefill_token": per["prefill"]["j_per_unit"],
            "j_per_decode_token": per["decode"]["j_per_unit"], "j_per_graft": per["graft"]["j_per_unit"]}


def run_totals(manifest_path: Path) -> dict:
    """The token counts of a committed run manifest: ``prefill_tokens``, ``decode_tokens``, ``grafts``,
    ``samples`` from its totals, and its path (relative to the checkout when inside it). Raises ``ValueError`` naming the file when one is missing."""
    totals = json.loads(Path(manifest_path).read_text()).get("totals", {})
    missing = [k for k in ("prefill_tokens", "decode_tokens", "grafts", "samples") if not isinstance(totals.get(k), int)]
    if missing:
        raise ValueError(f"{manifest_path}: its totals lack {', '.join(missing)}")
    path = Path(manifest_path).resolve()
    shown = path.relative_to(_ROOT) if path.is_relative_to(_ROOT) else path
    return {"manifest": str(shown), **{k: totals[k] for k in ("prefill_tokens", "decode_tokens", "grafts",
                                                                       "samples")}}


def modelled_ratio(measured: dict, baseline: dict, recurring: dict) -> dict:
    """The recurring case's energy ratio, baseline over recurring, modelled (:data:`MODELLED_LABEL`): each run's
    joules = prefill tokens × J per prefill token + decode tokens × J per decode token + grafts × J per graft, from
    ``measured`` (:func:`measure_energy`) and the runs' totals (:func:`run_totals`)."""
    def joules(run: dict) -> float:
        return (run["prefill_tokens"] * measured["j_per_prefill_token"] + run["decode_tokens"]
                * measured["j_per_decode_token"] + run["grafts"] * measured["j_per_graft"])

    base, rec = joules(baseline), joules(recurring)
    return {"label": MODELLED_LABEL, "baseline": {**baseline, "modelled_j": base},
            "recurring": {**recurring, "modelled_j": rec}, "ratio": base / rec if rec else None}


def energy_markdown(result: dict) -> str:
    """The energy section as markdown: the method, idle power, and joules per unit, measured and net."""
    e = result["energy_per_token"]
    lines = [f"# Energy: {result['environment'].get('model')}", "",
             f"Method: {e['energy']['method']} ({e['energy']['detail']}); idle {e['idle']['w']:.1f} W over "
             f"{e['idle']['s']:.1f} s, subtracted.", "", "| work | count | seconds | joules | net joules | net J each |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, unit in (("prefill", "token"), ("decode", "token"), ("graft", "graft")):
        w = e["windows"][name]
        lines.append(f"| {name} | {w['count']:,} {unit}s | {w['s']:.3f} | {w['j']:.2f} | {w['net_j']:.2f} "
                     f"| {w['j_per_unit']:.5f} |")
    ratio = result.get("energy_ratio")
    if ratio:
        lines += ["", f"Recurring case, {ratio['label']}: baseline {ratio['baseline']['modelled_j']:.1f} J over "
                  f"recurring {ratio['recurring']['modelled_j']:.1f} J = {ratio['ratio']:.1f}× "
                  f"({ratio['baseline']['manifest']}, {ratio['recurring']['manifest']})."]
    return "\n".join(lines)
