"""The replays of the committed exactness expectations, run in background processes while the rest of the suite runs.

Each replay is ``graftbench check-exact --expect FILE --limit 5 --log <its own log>`` in a fresh process (the
expectation's instruction-set pin must be set before torch is imported), one lane per model so that each model is de-quantized
once, the lanes side by side, each replay at 1 thread (its pin) and at the lowest CPU priority: the suite's own tests
keep the CPU they would have, and the replays take the time a core is idle. What each replay computes and prints
does not depend on when it runs; the test reads each outcome once it is done (``Replays.results``): the finished
process and the one replay record it logged, which the test judges
(:func:`graftbench.eval.replay_committed.judge`), so that a crash is told from a completed comparison.

A lane starts when its model is in the session's model cache (``model_ready``) or, at the latest, when the
replays' outcomes are asked for, so that a replay never de-quantizes a model the session is de-quantizing too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from graftbench.eval.replay_committed import logged_record, replay_arguments
from graftbench.results import layout
from graftbench.util import isa

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / layout.MANIFESTS
BUNDLED_MODELS = ("smollm2-135m", "gemma3-270m")  # installed by `make`; optional models replay via `make replay-exact`


def _bundled(path: Path) -> bool:
    """A torch expectation of a bundled model (llama.cpp certificates replay in tests/engine/test_llama_cpp.py)."""
    config = json.loads(path.read_text())["config"]
    return config["model"] in BUNDLED_MODELS and "engine" not in config


# The kinds' folders that hold expectations of the bundled models: the reference kind's first (where the first
# recordings lie), then every other kind's by name (make record-exact-cpu CPU=<kind>); a GPU's folder holds
# random-weights certificates only.
REFERENCE_FOLDER = layout.manifest_folder(ROOT, layout.REFERENCE_KIND)
_OTHER_FOLDERS = [f for f in layout.manifest_folders(ROOT) if f != REFERENCE_FOLDER]
EXPECTATION_FOLDERS = [f for f in [REFERENCE_FOLDER, *_OTHER_FOLDERS] if any(_bundled(p) for p in f.glob("exact-*.json"))]
# Each expectation by its path under manifests/ (<kind>/exact-<model>[-bf16].json)
COMMITTED = sorted(str(p.relative_to(RESULTS)) for folder in EXPECTATION_FOLDERS for p in folder.glob("exact-*.json")
                   if _bundled(p))
REPLAY_PAIRS = 5
REPLAY_TEST = "test_committed_expectation_replays_on_this_machine"
NICE = 19  # while the suite runs: a replay never takes a core from a test that wants it
# The replay command at a given niceness: set it (and, on Linux, die with the test process), say so on one line,
# then exec, so that every thread torch starts inherits it
_LAUNCH = ("import os, sys\n"
           "try:\n"
           "    import ctypes, signal\n"
           "    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG\n"
           "except (OSError, AttributeError):\n"
           "    pass\n"
           "os.nice(int(sys.argv[1]))\n"
           "print('niced', flush=True)\n"
           "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])")


def recorded_on(expected: dict) -> str:
    return expected["environment"].get("cpu_capability_native") or expected["config"]["cpu_capability"]


def cannot_run(name: str, expected: dict) -> str | None:
    """Why this CPU cannot run the expectation's pin (a skip reason naming both capabilities), else ``None``."""
    pin, here = expected["config"], isa.native_capability()
    pin_isa = pin.get("isa", "native")
    if not isa.supported(pin_isa):
        return f"{name} is pinned to --isa {pin_isa} (recorded on {recorded_on(expected)}); this CPU offers {here}"
    if pin_isa == "native" and pin["cpu_capability"] != here:
        return f"{name} is pinned to the native kernels of {pin['cpu_capability']}; this CPU is {here}"
    return None


def lanes() -> dict[str, list[str]]:
    """The runnable committed expectations by model, in name order."""
    by_model: dict[str, list[str]] = {}
    for name in COMMITTED:
        expected = json.loads((RESULTS / name).read_text())
        if cannot_run(name, expected) is None:
            by_model.setdefault(expected["config"]["model"], []).append(name)
    return by_model


@dataclass(frozen=True)
class Replayed:
    """One finished replay: its process (``stdout``, ``stderr``, ``returncode``) and the replay record it logged
    (``None`` when it logged none: it crashed or was killed before its comparison ended)."""

    process: subprocess.CompletedProcess
    record: dict | None

    @property
    def output(self) -> str:
        return self.process.stdout + self.process.stderr


class Replays:
    """The background replays of one test session: ``model_ready(model)`` starts that model's lane, ``results()``
    starts the rest and waits for every outcome, ``stop()`` ends what still runs (the session ends early)."""

    def __init__(self) -> None:
        self._lanes = lanes()
        self._outcomes: dict[str, Future] = {name: Future() for names in self._lanes.values() for name in names}
        self._started: set[str] = set()
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._stopped = False
        self._nice = NICE
        # The environment as the session set it up (hermetic caches), read now: a test may change os.environ
        # (a cache of its own, a store) while a lane starts its next replay.
        self._env = {k: v for k, v in os.environ.items() if k != "GRAFTBENCH_ISA"}
        work = Path(self._env["GRAFTBENCH_CACHE"]).parent / "replays"
        self._env.update(GRAFTBENCH_RUNS_DIR=str(work / "runs"), GRAFTBENCH_STORE=str(work / "store"))
        self._logs = work / "logs"  # one replay log per expectation: the record its replay wrote, or none

    def model_ready(self, model: str) -> None:
        """Start ``model``'s lane (once); a model with no runnable expectation has none."""
        with self._lock:
            if model in self._started or model not in self._lanes or self._stopped:
                return
            self._started.add(model)
        threading.Thread(target=self._run_lane, args=(self._lanes[model],), daemon=True,
                         name=f"replays-{model}").start()

    def results(self) -> dict[str, Replayed]:
        """Every runnable expectation's finished replay by name (the lanes not started yet start now). The test
        process waits from now on: the replays still to come run at normal priority, and those running are raised
        to it where this process may (a machine shared with other work would starve them otherwise)."""
        with self._lock:
            self._nice = 0
            running = list(self._running)
        for process in running:
            _raise_priority(process.pid)
        for model in self._lanes:
            self.model_ready(model)
        return {name: outcome.result() for name, outcome in self._outcomes.items()}

    def stop(self) -> None:
        """Kill the replays still running and start no more."""
        with self._lock:
            self._stopped = True
            running = list(self._running)
        for process in running:
            process.kill()

    def _run_lane(self, names: list[str]) -> None:
        for name in names:
            try:
                self._outcomes[name].set_result(self._replay(name))
            except BaseException as exc:  # the test that reads this outcome reports it
                self._outcomes[name].set_exception(exc)

    def _replay(self, name: str) -> Replayed:
        log = self._logs / (name.replace("/", "--") + ".jsonl")
        log.parent.mkdir(parents=True, exist_ok=True)
        log.unlink(missing_ok=True)
        with self._lock:  # the niceness is read and the process registered at once: results() sees it or sets it
            if self._stopped:
                raise RuntimeError(f"the session ended before {name} was replayed")
            command = [sys.executable, "-c", _LAUNCH, str(self._nice),
                       *replay_arguments(RESULTS / name, REPLAY_PAIRS, log)]
            process = subprocess.Popen(command, cwd=ROOT, env=self._env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True)
            process.stdout.readline()  # the launcher's line: its niceness is set, so results() can raise it
            self._running.add(process)
        try:
            stdout, stderr = process.communicate(timeout=3600)
        finally:
            with self._lock:
                self._running.discard(process)
            if process.poll() is None:
                process.kill()
                process.wait()
        return Replayed(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr),
                        logged_record(log))


def _raise_priority(pid: int) -> None:
    """Set every thread of process ``pid`` to niceness 0, where permitted (raising a priority needs privileges
    some machines do not give; there the replay keeps its niceness, and a machine with no other work gives it the
    cores all the same)."""
    try:
        threads = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        threads = [pid]
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, 0)
        except OSError:
            pass


_session_replays: Replays | None = None


def start_session_replays() -> Replays:
    """The session's background replays (created once; lanes start with :meth:`Replays.model_ready`)."""
    global _session_replays
    if _session_replays is None:
        _session_replays = Replays()
    return _session_replays


def session_replays() -> Replays | None:
    """The session's background replays, when the session runs the replay test."""
    return _session_replays
