"""Write a report's files: ``report.md``, ``summary.json``, the PNG plots (:mod:`graftbench.report.plots`) and, on
request, lm-evaluation-harness files (:mod:`graftbench.report.lmeval`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..util.durable import write_atomic
from .compare import Report, markdown, summaries_json
from .lmeval import write_lm_eval
from .plots import write_plots


def write_report(report: Report, out_dir: str | Path, lm_eval: bool = False) -> list[Path]:
    """Write ``report.md``, ``summary.json`` and the PNG plots into ``out_dir`` (created), and with ``lm_eval`` each
    run's lm-evaluation-harness files under ``lm-eval/<run label>/``. Returns the paths written. Raises ``OSError``
    when the folder cannot be written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(report, out)
    written = [*plots]
    md = out / "report.md"
    write_atomic(md, markdown(report, [p.name for p in plots]))
    summary = out / "summary.json"
    write_atomic(summary, json.dumps(summaries_json(report), indent=2, ensure_ascii=False) + "\n")
    written += [md, summary]
    if lm_eval:
        for run, name in zip(report.runs, lm_eval_folder_names([run.label for run in report.runs])):
            written += write_lm_eval(run, out / "lm-eval" / name, report.seed, report.resamples)
    return written


def lm_eval_folder_names(labels: list[str]) -> list[str]:
    """One folder name under ``lm-eval/`` per run label, in order: the label with every character but letters,
    digits, ``.``, ``_`` and ``-`` as ``_``, never ``.`` or ``..`` (a label of dots alone becomes underscores, so no
    run's files land outside its folder), and distinct (a name already taken gets ``-2``, ``-3``, …, so no run's
    files overwrite another's)."""
    names, taken = [], set()
    for label in labels:
        base = re.sub(r"[^A-Za-z0-9._-]", "_", label) or "_"
        if not base.strip("."):
            base = "_" * len(base)
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}-{n}"
        taken.add(name)
        names.append(name)
    return names
