"""What ``check-exact`` does with a measured run on any engine: the run folder that journals its pairs, and the
tables, files and exit status of its manifest (:mod:`graftbench.cli.exact`)."""

from __future__ import annotations

from pathlib import Path

from .common import console, fail, model_label
from ..util.display_text import visible


def open_run(runs_dir: str, model: str, session, problem_list, code: dict):
    """The run folder that journals each measured pair (``samples.jsonl``, one record a line), named by the model,
    the pin's fingerprint and the problem set's hash, so that a re-run under the same pin resumes it and another
    pin never reads its records; returns it open, with the records already in it, this process's code version
    ``code`` recorded as appending to it (:meth:`graftbench.results.runs.RunDir.open`). Fails with the holder when
    another process has it open."""
    from ..problems.types import problem_set_sha256
    from ..results.runs import RunDir, RunError

    config, problems_sha = session.config, problem_set_sha256(problem_list)
    name = f"exact-{model_label(model)}-{config.dtype}-{config.fingerprint[:12]}-{problems_sha[:8]}"
    run = RunDir(runs_dir, name, key="id")
    try:
        done = run.open({"config_fingerprint": config.fingerprint, "problem_set_sha256": problems_sha}, code)
    except (RunError, OSError) as exc:
        fail(str(exc))
    if done:
        console.print(f"resuming {run.path}: {len(done)} pair records already measured under this pin")
    return run, done


def report_manifest(manifest: dict, run, write_expect: Path | None, note: str = "") -> None:
    """Print the exactness tables (and ``note``), and each control claimed to differ that came out byte-exact on
    some pair; write the manifest into the run folder and to ``write_expect`` when given, print the totals; exit
    with status 1 when a pair is not byte-exact."""
    from ..eval.exactness import controls_without_teeth
    from ..results.manifest import write_manifest
    from .tables import exactness_tables

    for table in exactness_tables(manifest):
        console.print(table)
    for line in controls_without_teeth(manifest):
        console.print(visible(f"a control claimed to differ did not, {line}: on those pairs this check did not "
                              "show that it sees that change"), markup=False, highlight=False)
    if note:
        console.print(note, markup=False, highlight=False)
    try:
        write_manifest(manifest, run.path / "exactness.json")
        if write_expect:
            write_manifest(manifest, write_expect)
    except OSError as exc:
        fail(str(exc))
    totals = manifest["totals"]
    console.print(f"{totals['exact_pairs']} of {totals['pairs']} pairs byte-exact · manifest {run.path / 'exactness.json'}"
                  + (f" · expectation {write_expect}" if write_expect else ""))
    if totals["exact_pairs"] != totals["pairs"]:
        fail("some pairs are not byte-exact", 1)
