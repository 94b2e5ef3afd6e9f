"""Run every benchmark section for one model, in one process, one after another (never two timed things at once)."""

from __future__ import annotations

import os
import platform
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from ..util import isa
from ..util.checkout import checkout_commit
from ..problems.types import Problem
from ..engine.base import EngineSession
from ..engine.registry import benchmark_ops
from ..settings import BenchSettings
from ..store.folder import Store
from ..results.model_names import model_name
from .batched import measure_batched
from .batched import target as batched_target
from ..settings import BatchedSettings
from .decode import measure_decode, measure_decode_after_graft
from .head_to_head import RESTORE_PARTS, measure_head_to_head
from .load import measure_load
from .peer import measure_peer
from .restore import measure_restore
from .store_scale import measure_store_scale, vocabulary
from .energy import MODELLED_RUNS, measure_energy, modelled_ratio, run_totals
from .sample_counts import SAMPLE_COUNTS, measure_sample_counts
from .ttft import measure_size
from .workload import build_workload

FORMAT = "graftbench.bench/1"


def _decode_target(decode: dict) -> dict:
    """Issue #4's decode target (#14: "stays"): graftbench's greedy decode at least as fast as ``generate``."""
    return {"target": ">= 1.0x", "issue": 4, "measured": decode["ratio"], "met": decode["ratio"] >= 1.0}


def targets(result: dict) -> dict:
    """Each target of issues #4 and #14 with its goal, the issue it comes from, its measured value and whether it
    was met (``None`` when not measured: the llama.cpp ratios need the peer row). A run of one section alone has
    that section's target only (batched samples; decode against ``generate``). Where both issues set a goal for
    one figure, #14's (the later, stricter) is used.
    """
    rows = {}

    def add(name, issue, target, measured, met):
        rows[name] = {"target": target, "issue": issue, "measured": measured, "met": met}

    if "ttft" not in result:
        if "batched_samples" in result:
            rows["batched_samples_decode_ratio"] = {**batched_target(result["batched_samples"]), "issue": 14}
        if "decode" in result:
            rows["decode_ratio_vs_generate"] = _decode_target(result["decode"])
        if "store_scale" in result:
            _store_scale_targets(result["store_scale"], add)
        _head_to_head_targets(result.get("head_to_head"), add)
        return rows
    by_tokens = {row["tokens"]: row for row in result["ttft"]}
    largest = result["ttft"][-1]

    for tokens, goal in ((4096, 120), (8192, 250)):
        measured = by_tokens[tokens]["ttft_ratio"]["query_1"] if tokens in by_tokens else None
        add(f"ttft_ratio_{tokens}_tokens_1_token_query", 14, f">= {goal}x", measured,
            None if measured is None else measured >= goal)
    _peer_targets(result, largest, add)
    _head_to_head_targets(result.get("head_to_head"), add)
    after = result.get("decode_after_graft")
    if after:
        add(f"decode_after_{after['context_tokens']}_token_graft_vs_empty_cache", 14, ">= 0.8x", after["ratio"],
            after["ratio"] >= 0.8)
    graft_median = largest["graft"]["query_1/xxh3_128"]["total_s"]["median"]
    first = largest["graft_memory"]["first_graft_in_process_s"] / graft_median
    add(f"first_graft_in_a_fresh_process_over_median_{largest['tokens']}_tokens", 14, "<= 1.5x", first, first <= 1.5)
    pooled = largest.get("first_graft_with_kv_pool")
    if pooled:
        ratio = pooled["first_graft_in_process_s"] / graft_median
        add(f"first_graft_in_a_fresh_process_with_kv_pool_over_median_{largest['tokens']}_tokens", 14,
            f"<= 1.5x (pool reserved at open in {pooled['kv_pool_s']:.2f} s)", ratio, ratio <= 1.5)
    fraction = result["restore"]["restore_fraction_of_raw_read"]
    add("restore_fraction_of_raw_read", 4, ">= 0.5", fraction, fraction >= 0.5)
    flips = result["restore"]["bit_flips"]
    add("bit_flips_caught", 4, "all", f"{flips['caught']}/{flips['tried']}", flips["caught"] == flips["tried"])
    rows["decode_ratio_vs_generate"] = _decode_target(result["decode"])
    warm = min(row["load_s"] for row in result["load"]["warm"])
    add("warm_load_s", 4, "<= 2 s", warm, warm <= 2.0)
    memory = max(row["graft_memory_ratio"] for row in result["ttft"])
    add("graft_memory_over_artifact_bytes", 4, "<= 1.5x", memory, memory <= 1.5)
    _store_scale_targets(result["store_scale"], add)
    if "batched_samples" in result:
        rows["batched_samples_decode_ratio"] = {**batched_target(result["batched_samples"]), "issue": 14}
    return rows


def _store_scale_targets(scale: list[dict], add) -> None:
    """#4's flat lookups (each kind at most 2× slower, at most 16 MiB more resident, smallest store to largest) and
    #14's similarity lookup (similar and none, at most 5 ms at the largest store); nothing with one store size."""
    if len(scale) < 2:
        return
    ratios = {k: scale[-1]["lookup_s"][k]["median"] / scale[0]["lookup_s"][k]["median"] for k in scale[0]["lookup_s"]}
    growth = scale[-1]["rss_bytes"] - scale[0]["rss_bytes"]
    add("store_lookup_growth", 4, f"flat from {scale[0]['artifacts']:,} to {scale[-1]['artifacts']:,} artifacts: "
        "each lookup kind <= 2x slower, <= 16 MiB more resident",
        {**{f"{k}_ratio": v for k, v in ratios.items()}, "rss_growth_mib": growth / 2**20},
        max(ratios.values()) <= 2.0 and growth <= 16 << 20)
    slowest = max(scale[-1]["lookup_s"][k]["median"] for k in ("similar", "none")) * 1e3
    add(f"similarity_lookup_ms_at_{scale[-1]['artifacts']}_artifacts", 14, "<= 5 ms (similar and none)",
        slowest, slowest <= 5.0)


def _peer_targets(result: dict, largest: dict, add) -> None:
    """#14's two ratios against llama.cpp at the largest size: its state load over graftbench's restore (read,
    integrity check, parse, checks, on a GPU the to-device copy, rebuild; the query forward apart), and its state
    load + 1-token query over graftbench's graft + 1-token query. ``None`` (not met, not failed) without a peer row of that size."""
    tokens = largest["tokens"]
    peer = {row["n"]: row for row in result.get("peer", {}).get("sizes", [])}.get(tokens)
    parts = largest["graft"]["query_1/xxh3_128"]
    restore = sum(parts[k]["median"] for k in RESTORE_PARTS if k in parts)
    restore_ratio = peer["load_state_s"]["median"] / restore if peer else None
    graft_ratio = peer["ttft_restore_1tok_s"]["median"] / parts["total_s"]["median"] if peer else None
    add(f"restore_vs_llama_cpp_state_load_{tokens}_tokens", 14, ">= 1.0x (llama.cpp s / graftbench s)",
        restore_ratio, None if restore_ratio is None else restore_ratio >= 1.0)
    add(f"graft_1_token_vs_llama_cpp_state_load_1_token_{tokens}_tokens", 14, ">= 1.0x (llama.cpp s / graftbench s)",
        graft_ratio, None if graft_ratio is None else graft_ratio >= 1.0)


def _head_to_head_targets(h2h: dict | None, add) -> None:
    """#14's two llama.cpp ratios from the alternating section (:mod:`.head_to_head`), where it ran."""
    if not h2h or "skipped" in h2h:
        return
    goal = ">= 1.0x (llama.cpp s / graftbench s, alternating repetitions)"
    add(f"restore_vs_llama_cpp_state_load_{h2h['tokens']}_tokens_alternating", 14, goal, h2h["restore_ratio"],
        h2h["restore_ratio"] >= 1.0)
    add(f"graft_1_token_vs_llama_cpp_state_load_1_token_{h2h['tokens']}_tokens_alternating", 14, goal,
        h2h["graft_ratio"], h2h["graft_ratio"] >= 1.0)


def _threads(session: EngineSession) -> int:
    """The intra-op threads the session's engine runs with in this process."""
    return benchmark_ops(session.engine_name).intra_op_threads()


def environment(session: EngineSession) -> dict:
    """Machine, libraries and pinned config the figures were measured with."""
    return {"machine": platform.platform(), "processor": isa.cpu_model() or platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch_threads": _threads(session),
            "python": platform.python_version(), "libraries": session.config.libraries,
            "config_fingerprint": session.config.fingerprint, "chunk_size": session.config.chunk_size,
            "model": model_name(session.config.to_dict()), "dtype": session.config.dtype,
            **({"accelerator": session.config.accelerator} if session.config.accelerator else {}),
            **({} if session.config.certified else {"kernels": session.config.kernels}),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "graftbench_commit": checkout_commit()}


SECTIONS = ("batched-samples", "energy", "head-to-head", "load-decode", "sample-counts", "store-scale",
            "ttft")  # sections that run alone with ``--only``


def _load_and_decode(session: EngineSession, model: str, settings: BenchSettings, workload, task, result: dict,
                     decode: bool = True) -> None:
    """Decode against ``generate`` (when ``decode``) and model load, cold and warm, into ``result``."""
    if decode:
        task("decode against transformers generate", 1)
        result["decode"] = measure_decode(session, workload.decode_prompt, settings.decode_tokens,
                                          settings.decode_repeats)
    task("model load, cold and warm", 1)
    result["load"] = measure_load(model, session.config.dtype, settings.cold_load)


def run_bench(session: EngineSession, model: str, problems: list[Problem], problems_source: str, settings: BenchSettings,
              progress=None, batched: BatchedSettings | None = None, only: str | None = None) -> dict:
    """Measure every section for ``session``'s model, or with ``only`` one section alone (``batched-samples``: that
    row; ``load-decode``: decode against ``generate`` and model load, for comparing models and dtypes;
    ``head-to-head``: the graft against llama.cpp's state load at the largest size, alternating;
    ``store-scale``: router lookups at ``settings.store_sizes`` artifacts, which need no model); returns the result
    dict (see :mod:`.report`; :mod:`.batched` for the row alone).

    ``batched`` sets the batched-samples row (its defaults when ``None``). ``progress`` (a
    ``rich.progress.Progress``) gets one task per section. Raises ``ValueError`` when the problems cannot give the
    largest artifact size, or for an unknown ``only``.
    """
    if only is not None and only not in SECTIONS:
        raise ValueError(f"--only must be one of {', '.join(SECTIONS)}, got {only!r}")
    batched = batched or BatchedSettings()
    task = _tasks(progress)
    if only == "store-scale":
        return _store_scale_alone(session, problems, problems_source, settings, task)
    sizes = [batched.artifact_tokens] if only in ("batched-samples", "load-decode") else settings.sizes
    workload = build_workload(session, problems, max(*sizes, batched.artifact_tokens))
    result = {"format": FORMAT, "smoke": settings.smoke, "settings": {} if only else _settings_dict(settings),
              "environment": environment(session), "problems": problems_source,
              "workload": {"query_problem": workload.query_problem, "query_tokens": len(workload.query),
                           "query_lengths": workload.query_lengths, "decode_prompt_tokens": len(workload.decode_prompt)}}
    if only:
        result["only"] = only
    if only in ("load-decode", "head-to-head"):
        if only == "load-decode":
            _load_and_decode(session, model, settings, workload, task, result)
        else:
            _head_to_head(session, settings, workload, task, result)
        task(None, 0)
        result["targets"] = targets(result)
        return result
    if only in ("ttft", "energy", "sample-counts"):
        with tempfile.TemporaryDirectory(prefix="graftbench-bench-") as folder:
            {"ttft": _ttft, "energy": _energy, "sample-counts": _sample_counts}[only](
                session, model, settings, workload, Path(folder), task, result)
        task(None, 0)
        return result
    with tempfile.TemporaryDirectory(prefix="graftbench-bench-") as folder:
        if not only:
            _main_sections(session, model, problems, settings, workload, Path(folder), task, result)
        step = task(f"batched samples: {batched.samples} in one batch against one at a time", 2 * batched.repeats)
        result["batched_samples"] = measure_batched(session, Path(folder) / "batched", workload.context,
                                                    workload.query, workload.query_problem, batched, step)
    if not only:
        task("llama.cpp peer row", 1)
        result["peer"] = measure_peer(session, settings.peer_python, workload, settings.sizes, settings.repeats,
                                      settings.decode_tokens, _threads(session))
        _head_to_head(session, settings, workload, task, result)
    task(None, 0)
    result["targets"] = targets(result)
    return result


def _head_to_head(session: EngineSession, settings: BenchSettings, workload, task, result: dict) -> None:
    """graftbench's graft against llama.cpp's state load at the largest size, alternating (:mod:`.head_to_head`)."""
    tokens = max(settings.sizes)
    step = task(f"graft against llama.cpp's state load at {tokens:,} tokens, alternating", settings.head_to_head_repeats)
    with tempfile.TemporaryDirectory(prefix="graftbench-bench-") as folder:
        result["head_to_head"] = measure_head_to_head(session, settings.peer_python, workload, Path(folder), tokens,
                                                      settings.head_to_head_repeats, _threads(session), step)


def _store_scale_alone(session: EngineSession, problems: list[Problem], problems_source: str, settings: BenchSettings,
                       task) -> dict:
    """The store-scale section alone (``--only store-scale``): lookups and memory at ``settings.store_sizes``
    artifacts, in a temporary folder, with its targets."""
    result = {"format": FORMAT, "smoke": settings.smoke, "settings": {"store_sizes": sorted(settings.store_sizes)},
              "environment": environment(session), "problems": problems_source, "only": "store-scale"}
    step = task("store scale", max(settings.store_sizes))
    with tempfile.TemporaryDirectory(prefix="graftbench-bench-") as folder:
        result["store_scale"] = measure_store_scale(Path(folder), settings.store_sizes, vocabulary(problems), step)
    task(None, 0)
    result["targets"] = targets(result)
    return result


def _ttft(session: EngineSession, model: str, settings: BenchSettings, workload, folder: Path, task, result: dict) -> None:
    """Time to first token, graft against chunked prefill, at each of ``settings.sizes`` (the ``ttft`` section)."""
    step = task("TTFT: prefill against graft", len(settings.sizes) * (settings.repeats + 1))
    result["ttft"] = [measure_size(session, model, folder / "ttft", workload.context[:n], workload.query,
                                   settings.repeats, settings.graft_repeats, step, settings.memory_probes)
                      for n in settings.sizes]


def _energy(session: EngineSession, model: str, settings: BenchSettings, workload, folder: Path, task, result: dict) -> None:
    """Joules per prefill token, decode token and graft at the largest of ``settings.sizes``, idle power
    subtracted, and the recurring case's ratio modelled from the committed CPU runs (:mod:`.energy`)."""
    task(f"energy at {max(settings.sizes):,} tokens", 1)
    measured = measure_energy(session, folder / "energy", workload.context, workload.query, max(settings.sizes),
                              settings.decode_tokens, settings.repeats)
    result["energy_per_token"] = measured
    runs = [path for path in MODELLED_RUNS if path.is_file()]
    if len(runs) == len(MODELLED_RUNS):
        result["energy_ratio"] = modelled_ratio(measured, *(run_totals(path) for path in runs))


def _sample_counts(session: EngineSession, model: str, settings: BenchSettings, workload, folder: Path, task,
                   result: dict) -> None:
    """Decode tokens/s for 1, 4 and 16 samples after one graft of the largest of ``settings.sizes``, under the
    session's kernels (:mod:`.sample_counts`)."""
    step = task("decode after one graft: 1, 4, 16 samples", len(SAMPLE_COUNTS))
    result["sample_counts"] = measure_sample_counts(session, folder / "counts", workload.context, workload.query,
                                                    workload.query_problem, max(settings.sizes),
                                                    settings.decode_tokens, repeats=settings.repeats, on_step=step)


def _main_sections(session: EngineSession, model: str, problems: list[Problem], settings: BenchSettings, workload,
                   folder: Path, task, result: dict) -> None:
    """TTFT, restore, decode (against generate, and after the largest graft), load and store scale, one after
    another, into ``result``."""
    _ttft(session, model, settings, workload, folder, task, result)
    store = Store(folder / "ttft")
    largest = result["ttft"][-1]["artifact_id"]
    task("restore throughput", 1)
    result["restore"] = measure_restore(session, store, largest, max(settings.graft_repeats, 3), settings.bit_flips)
    task("decode against transformers generate", 1)
    result["decode"] = measure_decode(session, workload.decode_prompt, settings.decode_tokens, settings.decode_repeats)
    task(f"decode after a {result['ttft'][-1]['tokens']:,}-token graft against an empty cache", 1)
    result["decode_after_graft"] = measure_decode_after_graft(session, store, largest, result["ttft"][-1]["tokens"],
                                                              workload.query, settings.decode_tokens,
                                                              settings.decode_repeats)
    _load_and_decode(session, model, settings, workload, task, result, decode=False)
    step = task("store scale", max(settings.store_sizes))
    result["store_scale"] = measure_store_scale(folder / "scale", settings.store_sizes, vocabulary(problems), step)


def _settings_dict(settings: BenchSettings) -> dict:
    out = asdict(settings)
    out["peer_python"] = str(settings.peer_python) if settings.peer_python else None
    return out


def _tasks(progress):
    """``task(description, total)`` finishes the previous section's bar and starts one; returns its advance."""
    state = {"task": None, "total": 0}

    def task(description, total):
        if progress is None:
            return lambda n=1: None
        if state["task"] is not None:
            progress.update(state["task"], completed=state["total"])
        if description is None:
            return lambda n=1: None
        state["task"], state["total"] = progress.add_task(description, total=total), total
        return lambda n=1: progress.advance(state["task"], n)

    return task
