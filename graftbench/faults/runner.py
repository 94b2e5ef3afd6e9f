"""Fault injection: every fault of the reliability issue, applied one by one to a real store and real runs.

For each fault it records whether graftbench survived it (refused with the named check and fell back, resumed,
stayed consistent, gave a clear error) and what was lost, counted from an inventory of the store (index rows whose
file is intact) and of the samples files (complete lines), taken before and after the fault. It prints a table and
the totals: faults tried, faults survived, artifacts lost, samples lost.

    .venv/bin/python benchmarks/faults.py --out results/amd-epyc-avx512/bench/faults.txt

The faults come from :mod:`graftbench.faults.catalogue`, the subprocesses and the full disk from
:mod:`graftbench.faults.harness`, and the scenarios it shares with the tests from
:mod:`graftbench.faults.scenarios`.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..store.codec import ArtifactError
from ..store.ids import artifact_id_of
from ..problems.types import Problem, problem_key
from ..settings import EvalSettings
from ..store.folder import Store
from . import scenarios, store_faults
from .catalogue import (
    ARTIFACT_FAULTS,
    ESCAPING_IDS,
    ESCAPING_RUN_NAMES,
    MANIFEST_EDITS,
    PROBLEM_SET_FAULTS,
    ArtifactFault,
    Lab,
    escaping_artifact_entry,
    mutate_artifact,
    tiny_problem,
    write_problem_set,
)
from .harness import DEPOSIT_CODE, HUB_CODE, IMPORT_ROOT, lines_of, session_args, sigkill, start_python, wait_for_line
from .scenarios import count_losses, inventory, store_consistent

# --------------------------------------------------------------------------------------------- the bench


@dataclass
class Outcome:
    """What one fault did: whether graftbench survived it, a short detail, and sample lines lost that the
    before/after inventory cannot see (lines present at the moment of a kill)."""

    survived: bool
    detail: str
    samples_lost: int = 0


@dataclass
class Row:
    """One line of the report."""

    category: str
    fault: str
    survived: bool
    artifacts_lost: int
    samples_lost: int
    detail: str


class Bench:
    """A temporary folder with a real store (``store/``, deposited at setup), a baseline solve run and a graft
    eval run (``runs/``), and a second store for the artifact faults. Each fault goes through :meth:`run`, which
    takes the inventory of the store and of every samples file before and after it."""

    def __init__(self, session, root: Path, seed: int = 0):
        self.session, self.root, self.rng = session, root, random.Random(seed)
        self.main, self.runs = root / "store", root / "runs"
        self.lab = Lab(session, Store(root / "fault-store"))
        self.problems = [tiny_problem(i) for i in range(4)]
        self.rows: list[Row] = []
        self._next = 100

    # ---- helpers

    def fresh_problems(self, n: int) -> list[Problem]:
        """``n`` problems never used before in this bench."""
        self._next += n
        return [tiny_problem(i) for i in range(self._next - n, self._next)]

    def problems_file(self, problems: list[Problem]) -> Path:
        """The problems as a JSON Lines file (for subprocesses and resumes to load the same set)."""
        return write_problem_set(self.root / "sets" / f"{problems[0].id}.jsonl", problems)

    def eval(self, problems, name, **settings):
        """A run over ``problems`` in ``runs/`` (graft runs use the main store unless ``store_root`` is given)."""
        from ..eval.eval_run import run_eval

        store_root = settings.pop("store_root", self.main)
        on_sample = settings.pop("on_sample", None)
        return run_eval(self.session, problems, "faults", name, EvalSettings(**settings), runs_root=self.runs,
                        store_root=store_root, on_sample=on_sample)

    def setup(self) -> None:
        """Deposit the baseline problems into the main store, then a solve run and a graft eval run."""
        from ..eval.deposit import deposit_items, items_from_problems

        deposit_items(self.session, Store(self.main), items_from_problems(self.problems))
        self.eval(self.problems, "baseline", max_new_tokens=6)
        self.eval(self.problems, "graft", max_new_tokens=6, graft=True, certify=True)

    def protected(self) -> dict:
        """The inventory of what must never be lost: the main store and every samples file."""
        return inventory([self.main], sorted(self.runs.glob("*/samples.jsonl")))

    def run(self, category: str, fault: str, action: Callable[[], Outcome]) -> Row:
        """Apply one fault between two inventories and record its row."""
        before = self.protected()
        started = time.perf_counter()
        try:
            outcome = action()
        except Exception as exc:  # a fault that escapes as an unexpected error is a failure, and is reported
            outcome = Outcome(False, f"raised {type(exc).__name__}: {exc}"[:120])
        artifacts_lost, samples_lost = count_losses(before, self.protected())
        detail = outcome.detail.replace(str(self.root), "<tmp>")
        row = Row(category, fault, outcome.survived, artifacts_lost, samples_lost + outcome.samples_lost, detail)
        self.rows.append(row)
        print(f"  {'ok ' if row.survived else 'FAIL'} {category}: {fault} ({time.perf_counter() - started:.1f}s)",
              file=sys.stderr, flush=True)
        return row

    # ---- artifact faults

    def artifact_fault(self, fault: ArtifactFault) -> Outcome:
        """Build the fault, graft it (must be refused with its check), then eval --graft (must fall back)."""
        (problem,) = self.fresh_problems(1)
        artifact_id = fault.build(self.lab, problem)
        error = scenarios.graft_refusal(self.session, self.lab.store, artifact_id)
        if error is None:
            return Outcome(False, "grafted without an error")
        refused = error.check == fault.check and error.artifact_id == artifact_id
        sample = self.eval([problem], f"fault-{problem.id}", max_new_tokens=4, graft=True,
                           store_root=self.lab.store.root).samples[0]
        fallback = sample.fallback or ""
        fell_back = sample.mode == "baseline" and fallback.startswith(f"{fault.check}:") and artifact_id[:16] in fallback
        unpickled = (self.lab.store.root / "UNPICKLED").exists()
        return Outcome(refused and fell_back and not unpickled, f"fallback: {fallback[:80]}")

    def reader_fuzz(self, n: int = 1000) -> Outcome:
        """``n`` random mutations of a real artifact read under its id: every one must raise ArtifactError."""
        from ..store.codec import decode_artifact

        (problem,) = self.fresh_problems(1)
        ids = self.session.deposit_ids(problem.problem, problem.answer, problem.solution)[:12]
        data, _ = self.lab.build(problem, ids=ids)
        artifact_id = artifact_id_of(data)
        refused, other = 0, []
        for _ in range(n):
            mutated = mutate_artifact(data, self.rng)
            try:
                decode_artifact(artifact_id, mutated)
                other.append("returned an artifact" if mutated != data else "unchanged")
            except ArtifactError:
                refused += 1
            except Exception as exc:  # noqa: BLE001 - what is counted here is exactly an error of another type
                other.append(type(exc).__name__)
        unchanged = other.count("unchanged")
        return Outcome(refused + unchanged == n, f"{refused} refused with ArtifactError, {unchanged} mutations were no-ops, "
                       f"other: {sorted(set(other) - {'unchanged'}) or 'none'}")

    # ---- path escapes

    def escaping_ids(self) -> Outcome:
        """Ids with ``../``, absolute paths, NUL bytes, newlines: refused by the id check before any file access."""
        checks = []
        for bad in ESCAPING_IDS:
            try:
                Store(self.main).read(bad)
                checks.append("read")
            except ArtifactError as exc:
                checks.append(exc.check)
        return Outcome(checks == ["id"] * len(ESCAPING_IDS), f"{checks.count('id')} of {len(ESCAPING_IDS)} refused (id check)")

    def escaping_run_names(self) -> Outcome:
        """Run names that would leave ``runs/``: refused before anything is written."""
        from ..results.runs import RunError

        refused = 0
        for bad in ESCAPING_RUN_NAMES:
            try:
                self.eval(self.problems[:1], bad, max_new_tokens=4)
            except RunError:
                refused += 1
        created = [p for p in (self.root / "escape", Path("/tmp/abs"), self.root / "b") if p.exists()]
        return Outcome(refused == len(ESCAPING_RUN_NAMES) and not created,
                       f"{refused} of {len(ESCAPING_RUN_NAMES)} refused; nothing created outside runs/")

    def manifest_escaping_id(self) -> Outcome:
        """A manifest listing an artifact id that leaves the store: a mismatch, and no file outside is read."""
        manifest = json.loads((self.runs / "graft" / "manifest.json").read_text())
        expected, mismatches = scenarios.apply_manifest_edit(manifest, escaping_artifact_entry,
                                                             self.root / "escaping-manifest.json", self.main)
        flagged = any(expected in m for m in mismatches)
        return Outcome(flagged, next((m for m in mismatches if "hex digits" in m), "not flagged")[:90])

    # ---- crashes

    def kill_put(self, point: str) -> Outcome:
        """SIGKILL a depositing process at a named point of :meth:`Store.put`; the next deposit must complete."""
        (problem,) = self.fresh_problems(1)
        data, _ = self.lab.build(problem)
        code = scenarios.kill_put(self.main, data, point, self.root / "payloads")
        store, artifact_id = Store(self.main), artifact_id_of(data)
        visible = artifact_id in store.ids()
        damage = store_consistent(self.main)
        store.put(data)
        completed = artifact_id in store.ids() and store.read(artifact_id).id == artifact_id
        temporaries = len(store.inventory()["temporaries"])
        return Outcome(code == -signal.SIGKILL and not visible and not damage and completed,
                       f"exit {code}; indexed after kill: {visible}; damage: {damage or 'none'}; next deposit "
                       f"completed: {completed}; invisible .tmp files: {temporaries}")

    def kill_deposit_randomly(self) -> Outcome:
        """SIGKILL a real ``deposit`` (model prefill, write, index) after a random delay; then deposit again."""
        from ..eval.deposit import deposit_items, items_from_problems

        problems = self.fresh_problems(4)
        proc = start_python(DEPOSIT_CODE, [*session_args(self.session), self.problems_file(problems), self.main])
        ready = wait_for_line(proc, "READY")
        store, keys = Store(self.main), {problem_key(p) for p in problems}
        wait_for, delay = self.rng.randrange(4), self.rng.uniform(0.0, 0.4)

        def indexed() -> int:
            return sum(1 for k in keys if store.find_exact(self.session.config.fingerprint, k))

        while proc.poll() is None and indexed() < wait_for:
            time.sleep(0.005)
        time.sleep(delay)
        code = sigkill(proc)
        before = indexed()
        damage = store_consistent(self.main)
        report = deposit_items(self.session, store, items_from_problems(problems))
        after = sum(1 for k in keys if store.find_exact(self.session.config.fingerprint, k))
        ok = ready and not damage and after == 4 and not report.refused and not store_consistent(self.main)
        return Outcome(ok, f"killed {delay:.2f}s after deposit {wait_for} (exit {code}); {before} of 4 indexed at the kill; "
                           f"damage: {damage or 'none'}; {after} of 4 after the next deposit")

    def kill_solve(self, mode: str) -> Outcome:
        """Record 2 of 5 samples, then a solve process resumes the run and is SIGKILLed: at a named point
        (``sample-torn``, ``sample-before-append``) or as soon as it records one more (``random``). Resuming
        must record each problem exactly once and keep every line recorded before byte-identical."""
        problems = self.fresh_problems(5)
        path = self.problems_file(problems)
        solve = scenarios.kill_a_resumed_solve(self.session, path, self.runs, f"kill-{mode}", mode)
        prior, at_kill, after = (lines_of(b) for b in (solve.prior, solve.at_kill, solve.after))
        torn = solve.at_kill[-1:] != b"\n"
        ids = [json.loads(line)["problem_id"] for line in after]
        lost = sum(1 for i, line in enumerate(at_kill) if i >= len(after) or after[i] != line)
        ok = (solve.exit_code == -signal.SIGKILL and ids == [p.id for p in problems]
              and after[: len(prior)] == prior and not lost)
        return Outcome(ok, f"exit {solve.exit_code}; {len(at_kill)} lines at the kill (torn tail: {torn}), {len(after)} "
                           f"after resume, each problem once: {ids == [p.id for p in problems]}", samples_lost=lost)

    # ---- concurrency

    def concurrent_deposits(self, same: bool) -> Outcome:
        """Two processes put artifacts into the main store at once (the same ones in opposite orders, or
        different ones), three rounds each, while this process reads every indexed artifact."""
        artifacts = [self.lab.build(p)[0] for p in self.fresh_problems(6)]
        temporaries = Store(self.main).inventory()["temporaries"]
        puts = scenarios.put_concurrently(self.main, artifacts, same, self.root / "payloads", rounds=3)
        inv = Store(self.main).inventory()
        expected = {artifact_id_of(d) for d in artifacts}
        ok = (puts.exit_codes == [0, 0] and expected <= set(inv["indexed"]) & set(inv["intact"])
              and inv["temporaries"] == temporaries and not puts.refused and not store_consistent(self.main))
        return Outcome(ok, f"exits {puts.exit_codes}; {len(expected)} artifacts indexed and intact: "
                           f"{expected <= set(inv['indexed']) & set(inv['intact'])}; {puts.reads} concurrent reads, "
                           f"{len(puts.refused)} refused")

    # ---- full disk

    def disk_full_deposit(self, where: str) -> Outcome:
        """A deposit on a full disk (``file``: the artifact write; ``index``: the SQLite insert) must raise
        StorageError (ENOSPC for the file) and leave the store as it was; with space back it completes."""
        (problem,) = self.fresh_problems(1)
        full = scenarios.deposit_on_a_full_disk(self.session, Store(self.main), problem, where)
        unchanged, error = full.after == full.before, full.error
        ok = (error is not None and unchanged and len(full.retry.deposited) == 1
              and (where == "index" or error.errno == errno.ENOSPC))
        return Outcome(ok, f"store unchanged: {unchanged}; error: {error}"[:150])

    def disk_full_solve(self) -> Outcome:
        """The disk fills after the first sample of a solve: StorageError, the samples file keeps exactly the
        first line, no manifest; with space back the run resumes and completes."""
        problems = self.fresh_problems(3)
        full = scenarios.solve_on_a_full_disk(self.session, problems, self.runs, "disk-full")
        unchanged, error = full.after_error == full.at_fill, full.error
        ok = (error is not None and error.errno == errno.ENOSPC and unchanged and not full.manifest_written
              and [s.problem_id for s in full.resumed.samples] == [p.id for p in problems])
        return Outcome(ok, f"samples file unchanged: {unchanged}; error: {error}"[:150])

    def disk_full_manifest(self) -> Outcome:
        """Rewriting a manifest on a full disk: StorageError, the old manifest intact, no temporary file left."""
        path = self.runs / "baseline" / "manifest.json"
        before = path.read_bytes()
        error = scenarios.write_manifest_on_a_full_disk(json.loads(before), path, free=100)
        intact = path.read_bytes() == before and not list(path.parent.glob(".tmp-*"))
        return Outcome(error is not None and error.errno == errno.ENOSPC and intact,
                       f"old manifest intact: {intact}; error: {error}"[:150])

    # ---- bad inputs

    def bad_problem_set(self, filename: str, content: bytes, where: str) -> Outcome:
        """A bad problem-set file must raise ProblemSetError naming the file and the row (or line)."""
        path = self.root / "bad-sets" / filename
        error = scenarios.problem_set_error(path, content)
        if error is None:
            return Outcome(False, "loaded")
        message = str(error).replace(str(path.parent) + "/", "")
        return Outcome(filename in str(error) and where in str(error), message[:110])

    def offline_hub_id(self) -> Outcome:
        """A hub id that cannot be reached offline: an error that names the id and says what to do."""
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
        done = subprocess.run([sys.executable, "-c", HUB_CODE], capture_output=True, text=True, env=env, cwd=IMPORT_ROOT,
                              timeout=300)
        out = done.stdout.strip()
        ok = out.startswith("graftbench-no-such-owner/no-such-problem-set:") and "local file" in out
        return Outcome(ok, out[:110])

    def manifest_edit(self, edit: Callable[[dict], str]) -> Outcome:
        """One field of the graft run's manifest changed (not re-sealed): verify-manifest must fail naming it."""
        manifest = json.loads((self.runs / "graft" / "manifest.json").read_text())
        expected, mismatches = scenarios.apply_manifest_edit(manifest, edit, self.root / "edited-manifest.json",
                                                             self.main)
        named = [m for m in mismatches if expected in m]
        return Outcome(bool(named), (named or mismatches or ["verified: edit not caught"])[0][:110])

    # ---- all of it

    def run_all(self) -> None:
        """Every fault, one by one."""
        for fault in ARTIFACT_FAULTS:
            self.run("artifact", fault.name, lambda f=fault: self.artifact_fault(f))
        self.run("artifact", "1,000 mutated artifacts read under their id", self.reader_fuzz)
        self.run("path", "artifact ids that leave the store", self.escaping_ids)
        self.run("path", "run names that leave runs/", self.escaping_run_names)
        self.run("path", "manifest naming an artifact outside the store", self.manifest_escaping_id)
        for point in ("deposit-before-rename", "deposit-before-index"):
            self.run("crash", f"SIGKILL deposit at {point}", lambda p=point: self.kill_put(p))
        for i in range(3):
            self.run("crash", f"SIGKILL deposit at a random point ({i + 1})", self.kill_deposit_randomly)
        for mode in ("sample-torn", "sample-before-append", "random"):
            self.run("crash", f"SIGKILL solve at {mode}", lambda m=mode: self.kill_solve(m))
        self.run("concurrency", "two processes deposit the same artifacts", lambda: self.concurrent_deposits(True))
        self.run("concurrency", "two processes deposit different artifacts", lambda: self.concurrent_deposits(False))
        for name, fault in store_faults.FAULTS:
            self.run("store", name, lambda f=fault: Outcome(*f(self)))
        self.run("disk full", "writing an artifact", lambda: self.disk_full_deposit("file"))
        self.run("disk full", "inserting an index row", lambda: self.disk_full_deposit("index"))
        self.run("disk full", "appending a sample", self.disk_full_solve)
        self.run("disk full", "writing a manifest", self.disk_full_manifest)
        for name, filename, content, where in PROBLEM_SET_FAULTS:
            self.run("problem set", name, lambda f=filename, c=content, w=where: self.bad_problem_set(f, c, w))
        self.run("problem set", "hub id unreachable offline", self.offline_hub_id)
        for name, edit in MANIFEST_EDITS:
            self.run("manifest", name, lambda e=edit: self.manifest_edit(e))


def report(rows: list[Row], seconds: float, console) -> bool:
    """Print the table and the totals; True when every fault was survived with nothing lost."""
    from rich.table import Table

    table = Table(title="graftbench fault injection", show_lines=False)
    for column, justify in (("category", "left"), ("fault", "left"), ("survived", "center"), ("artifacts lost", "right"),
                            ("samples lost", "right"), ("detail", "left")):
        table.add_column(column, justify=justify, overflow="fold")
    for row in rows:
        table.add_row(row.category, row.fault, "yes" if row.survived else "NO", str(row.artifacts_lost),
                      str(row.samples_lost), row.detail)
    console.print(table)
    survived = sum(r.survived for r in rows)
    artifacts, samples = sum(r.artifacts_lost for r in rows), sum(r.samples_lost for r in rows)
    console.print(f"faults tried: {len(rows)}   faults survived: {survived}   artifacts lost: {artifacts}   "
                  f"samples lost: {samples}   ({seconds:.0f} s)")
    return survived == len(rows) and artifacts == 0 and samples == 0


def main(argv: list[str] | None = None) -> int:
    """Run every fault against a fresh store in a temporary folder; print (and with ``--out`` write) the report: the
    model's pin (thread count included), the machine, date and code version
    (:func:`graftbench.util.provenance.provenance_text`), the table, and the totals on the last line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the report to this text file")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from rich.console import Console

    from ..engine.registry import DEFAULT_ENGINE, fault_ops
    from ..util.provenance import code_version, provenance, provenance_text

    code = code_version()  # at the start: the checkout may move during the run
    started = time.perf_counter()
    session = fault_ops(DEFAULT_ENGINE).open_for_faults(args.model)
    with tempfile.TemporaryDirectory(prefix="graftbench-faults-") as tmp:
        bench = Bench(session, Path(tmp), args.seed)
        bench.setup()
        bench.run_all()
    console = Console(record=True, width=200)
    console.print(f"model {session.config.model} ({session.config.dtype}, chunk size {session.config.chunk_size}, "
                  f"{session.config.threads} threads, config {session.config.fingerprint[:16]}); seed {args.seed}",
                  markup=False)
    console.print(provenance_text(provenance(code=code)), markup=False)  # plain text: the report is a text file
    ok = report(bench.rows, time.perf_counter() - started, console)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(console.export_text())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
