"""A run written the way lm-evaluation-harness writes its output (``results_<date>.json`` and
``samples_<task>_<date>.jsonl``), so that tools reading lm-eval's files read graftbench runs. Imports no torch.

The field names follow lm-eval 0.4 (``lm_eval/evaluator.py`` and ``lm_eval/loggers/evaluation_tracker.py``):
``results`` maps the task to ``{"alias", "acc,none", "acc_stderr,none", …}`` (metric ``,`` filter), beside
``group_subtasks``, ``configs``, ``versions``, ``n-shot``, ``higher_is_better``, ``n-samples``, ``config``,
``task_hashes`` and the tracker's ``model_name`` and times. One line of the samples file per problem (lm-eval's
``doc_id``), with ``doc``, ``target``, ``arguments`` (as lm-eval sanitizes them: ``{"gen_args_0": {"arg_0": prompt,
"arg_1": generation kwargs}}``), ``resps`` (``[[output, …]]``: one response per sample of the problem), ``filtered_resps``
(the extracted answer; ``[[answer, …]]`` with several samples), ``filter`` (``none``), ``metrics``, ``doc_hash``,
``prompt_hash``, ``target_hash`` (SHA-256 hex, as lm-eval's ``hash_string``) and the metric ``acc`` (the problem's
mean correctness).

What differs, because a manifest never holds problem texts: ``doc`` holds the problem's id, text SHA-256, key and
family, and ``arg_0`` is the prompt layout's template (``{problem}`` left in place), not the rendered prompt.
graftbench's own per-sample fields are kept under ``graftbench``. The date in the file names is the run's
``created_utc`` (``2025-01-31T12-00-00``, lm-eval's ``isoformat`` with ``:`` replaced), so files are reproducible.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from ..results.metrics import family_of

if TYPE_CHECKING:
    from .compare import RunEntry

METRIC = "acc"
FILTER = "none"


def hash_string(text: str) -> str:
    """SHA-256 hex digest of ``text`` (UTF-8), as lm-eval's ``hash_string``."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def date_id(manifest: dict) -> str:
    """The run's ``created_utc`` as lm-eval's file-name date (``2025-01-31T12-00-00``); ``unknown-date`` when the
    manifest has none."""
    created = manifest.get("created_utc")
    try:
        return datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").isoformat().replace(":", "-")
    except (TypeError, ValueError):
        return "unknown-date"


def task_name(manifest: dict) -> str:
    """``graftbench_<problem set>``: the problem set source's file stem (or ``builtin``), in lm-eval's task-name
    characters (letters, digits, ``_``; no ``-``, which lm-eval's file-name parsing does not expect)."""
    problem_set = manifest.get("problem_set")
    source = str(problem_set.get("source", "problems")) if isinstance(problem_set, dict) else "problems"
    stem = Path(source).stem or source
    return "graftbench_" + re.sub(r"[^A-Za-z0-9]+", "_", stem).strip("_").lower()


def _prompt_template(run: RunEntry) -> str:
    config = run.manifest.get("config")
    layout = config.get("layout") if isinstance(config, dict) else None
    if not isinstance(layout, dict):
        return "{problem}"
    return str(layout.get("query" if run.mode == "graft" else "solve_instruction", "{problem}"))


def _generation_kwargs(run: RunEntry) -> dict:
    settings = run.manifest.get("settings") if isinstance(run.manifest.get("settings"), dict) else {}
    config = run.manifest.get("config") if isinstance(run.manifest.get("config"), dict) else {}
    layout = config.get("layout") if isinstance(config.get("layout"), dict) else {}
    until = [layout["query_stop"]] if run.mode == "graft" and isinstance(layout.get("query_stop"), str) else []
    return {"until": until, "max_gen_toks": settings.get("max_new_tokens"), "do_sample": False, "temperature": 0.0}


def _by_problem(run: RunEntry) -> list[tuple[dict, list[dict]]]:
    grouped: dict[str, list[dict]] = {}
    for sample in run.manifest["samples"]:
        grouped.setdefault(sample["problem_id"], []).append(sample)
    rows = []
    for problem in run.manifest["problems"]:
        samples = sorted(grouped.get(problem["id"], []), key=lambda s: s.get("sample_index") or 0)
        if samples:
            rows.append((problem, samples))
    return rows


def lm_eval_samples(run: RunEntry) -> list[dict]:
    """One lm-eval sample record per problem with samples, in the manifest's problem order (``doc_id`` 0, 1, …)."""
    prompt, kwargs = _prompt_template(run), _generation_kwargs(run)
    records = []
    for doc_id, (problem, samples) in enumerate(_by_problem(run)):
        doc = {"id": problem["id"], "problem_sha256": problem.get("problem_sha256"), "answer": problem.get("key"),
               "family": family_of(problem)}
        answers = [s.get("extracted") or "" for s in samples]
        target = str(problem.get("key"))
        records.append({
            "doc_id": doc_id,
            "doc": doc,
            "target": target,
            "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": kwargs}},
            "resps": [[s.get("output", "") for s in samples]],
            "filtered_resps": answers if len(samples) == 1 else [answers],
            "filter": FILTER,
            "metrics": [METRIC],
            "doc_hash": hash_string(json.dumps(doc, indent=2, ensure_ascii=False)),
            "prompt_hash": hash_string(prompt),
            "target_hash": hash_string(target),
            METRIC: sum(1 for s in samples if s["correct"] is True) / len(samples),
            "graftbench": {key: [s.get(key) for s in samples] for key in
                           ("sample_index", "mode", "correct", "decode_tokens", "ttft_s", "wall_s", "energy_j",
                            "finish_reason", "artifact_id", "example_answer", "copied", "layout", "seed")},
        })
    return records


def _stderr(values: list[float]):
    """lm-eval's ``mean_stderr``: the sample standard deviation (n − 1) over sqrt(n); ``N/A`` below two values."""
    n = len(values)
    if n < 2:
        return "N/A"
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def lm_eval_results(run: RunEntry, samples: list[dict], seed: int = 0, resamples: int = 0) -> dict:
    """The ``results_<date>.json`` document of one run, from its lm-eval ``samples`` records: ``acc`` (avg@N) with
    its standard error, pass@1 and maj@N from the run's summary (without a standard error), lm-eval's config and
    version fields, and ``task_hashes`` over the samples' hashes."""
    task, s = task_name(run.manifest), run.summary
    values = [r[METRIC] for r in samples]
    n_samples = s["samples_per_problem"]["max"] if s["samples_per_problem"] else 0
    metrics = {"alias": task, f"{METRIC},{FILTER}": s["avg_at_n"], f"{METRIC}_stderr,{FILTER}": _stderr(values)}
    if s["pass_at_k"]:
        metrics[f"pass@1,{FILTER}"] = s["pass_at_k"]["1"]
        metrics[f"pass@1_stderr,{FILTER}"] = "N/A"
    metrics[f"maj@{n_samples},{FILTER}"] = s["maj_at_n"]
    metrics[f"maj@{n_samples}_stderr,{FILTER}"] = "N/A"
    config = run.manifest.get("config") if isinstance(run.manifest.get("config"), dict) else {}
    problem_set = run.manifest.get("problem_set") if isinstance(run.manifest.get("problem_set"), dict) else {}
    created = run.manifest.get("created_utc")
    try:
        date = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except (TypeError, ValueError):
        date = None
    return {
        "results": {task: metrics},
        "group_subtasks": {task: []},
        "configs": {task: {
            "task": task, "dataset_path": problem_set.get("source"), "test_split": "test",
            "output_type": "generate_until", "repeats": n_samples, "num_fewshot": 0,
            "generation_kwargs": _generation_kwargs(run),
            "metric_list": [{"metric": METRIC, "aggregation": "mean", "higher_is_better": True}],
            "metadata": {"version": 1.0, "graftbench_run": run.manifest.get("run"), "mode": run.mode,
                         "manifest_sha256": run.manifest.get("manifest_sha256"),
                         "problem_set_sha256": problem_set.get("sha256")},
        }},
        "versions": {task: 1.0},
        "n-shot": {task: 0},
        "higher_is_better": {task: {METRIC: True, "pass@1": True, f"maj@{n_samples}": True}},
        "n-samples": {task: {"original": s["problems_listed"], "effective": s["problems"]}},
        "config": {"model": "graftbench", "model_args": f"model={config.get('model')},dtype={config.get('dtype')}",
                   "batch_size": 1, "batch_sizes": [], "device": config.get("device"), "use_cache": None,
                   "limit": None, "bootstrap_iters": resamples, "gen_kwargs": None, "random_seed": seed,
                   "numpy_seed": seed, "torch_seed": None, "fewshot_seed": None},
        "git_hash": None,
        "date": date,
        "task_hashes": {task: hash_string("".join(r["doc_hash"] + r["prompt_hash"] + r["target_hash"]
                                                  for r in samples))},
        "model_source": "graftbench",
        "model_name": str(config.get("model")),
        "model_name_sanitized": re.sub(r"[\"<>:/|\\?*\[\]]+", "__", str(config.get("model"))),
        "total_evaluation_time_seconds": str(s["wall_s"]),
    }


def write_lm_eval(run: RunEntry, folder: Path, seed: int = 0, resamples: int = 0) -> list[Path]:
    """Write ``results_<date>.json`` and ``samples_<task>_<date>.jsonl`` of one run into ``folder`` (created);
    returns both paths. Raises ``OSError`` when they cannot be written."""
    folder.mkdir(parents=True, exist_ok=True)
    date, task = date_id(run.manifest), task_name(run.manifest)
    samples = lm_eval_samples(run)
    results_path = folder / f"results_{date}.json"
    samples_path = folder / f"samples_{task}_{date}.jsonl"
    results_path.write_text(json.dumps(lm_eval_results(run, samples, seed, resamples), indent=2, ensure_ascii=False)
                            + "\n", encoding="utf-8")
    samples_path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in samples), encoding="utf-8")
    return [results_path, samples_path]
