"""Replay the committed CPU exactness expectations this machine can run, each in a fresh process, and judge each
outcome from the replay record it logged, never from its exit status alone.

A replay is ``graftbench check-exact --expect FILE --limit N --log <its own log>`` in a fresh process (the
expectation's instruction-set pin must be set before torch is imported). Its own log holds the one record
(:func:`graftbench.results.exact_manifest.replay_record`) that the replay writes once its comparison is done, so
the record tells what happened:

- :data:`EQUAL`: every pair asked for compared, all equal;
- :data:`DIFFERS`: a completed comparison that found a differing hash, on a kind of CPU the expectation is known
  to reproduce on (the one it was recorded on, or one with an equal logged replay,
  :func:`graftbench.results.exact_manifest.known_to_reproduce`): a failure;
- :data:`DIFFERS_UNPROVEN`: the same on a kind of CPU not proven to reproduce: a finding, logged, not a failure;
- :data:`NOT_COMPARABLE`: the pin differs (the record names the fields), nothing compared;
- :data:`FAILED`: no record (the process crashed or was killed before its comparison ended), a record of another
  expectation or of fewer pairs than asked with no difference, or an exit status that contradicts the record: a
  failure everywhere.

Asked to (``check-exact --expect FILE --across-cpu-kinds``, ``make replay-exact REPLAY_ACROSS_CPU_KINDS=1``), a
llama.cpp expectation whose pin differs from this machine's only in the CPU features llama.cpp detected
(:func:`cpu_feature_difference`: ``cpu_capability`` and ``engine.system_info``, and in those only instruction-set
terms such as ``AVX_VNNI``) is compared anyway. Its record keeps those fields in ``pin_differences`` and names the
features in ``across_cpu_kinds``, so it never verifies a CPU
(:func:`graftbench.results.exact_manifest.verified_cpus` skips a record with pin differences):

- :data:`EQUAL_ACROSS`: every pair asked for compared, all equal, on another kind of CPU: logged, not a replay on
  the recorded kind;
- :data:`DIFFERS_ACROSS`: a completed comparison that found a difference there: logged, never a failure.

:func:`replay_committed` (``make replay-exact``) replays every committed CPU expectation whose model and libraries
are installed, appends each completed comparison (equal or not) and each not-comparable pin to the replay log, and
:func:`exit_status` is non-zero when any replay failed or differed where it should reproduce. The test suite
judges its replays with the same :func:`judge`.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..results import layout
from ..results.exact_manifest import append_replay_log, known_to_reproduce, read_replay_log, replay_log_refusal
from ..util import isa

EQUAL = "equal"
DIFFERS = "differs"
DIFFERS_UNPROVEN = "differs on a kind of CPU not proven to reproduce"
NOT_COMPARABLE = "not comparable"
FAILED = "failed"
NOT_RUN = "not run here"
EQUAL_ACROSS = "equal on another kind of CPU"
DIFFERS_ACROSS = "differs on another kind of CPU"
FAILING = frozenset({DIFFERS, FAILED})  # the verdicts that make replay-exact (and a test) fail
# The pin fields that hold llama.cpp's system_info (the CPU features its CPU backend was built for and detected).
CPU_FEATURE_FIELDS = ("cpu_capability", "engine.system_info")
# The instruction-set terms of llama.cpp's system_info (ggml-cpu's ggml_backend_cpu_get_features); its other terms
# (LLAMAFILE, OPENMP, REPACK, KLEIDIAI, ...) are build switches, another code path: never tolerated.
INSTRUCTION_SET_FEATURES = frozenset({
    "SSE3", "SSSE3", "AVX", "AVX_VNNI", "AVX2", "F16C", "FMA", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI",
    "AVX512_BF16", "AMX_INT8", "NEON", "ARM_FMA", "FP16_VA", "MATMUL_INT8", "SVE", "DOTPROD", "SVE_CNT", "SME",
    "RISCV_V", "VSX", "WASM_SIMD", "VXE", "NNPA"})
REPLAY_TIMEOUT_S = 6 * 3600  # the longest committed replay (qwen2.5-coder-1.5b, bfloat16, 5 pairs, 1 thread) takes
# well under an hour on the machines it was recorded on; a replay past this is hung, and judged FAILED


@dataclass(frozen=True)
class Outcome:
    """One expectation's replay, judged: ``name`` (its path, as given), ``verdict`` (one of the constants above),
    ``detail`` (one line: the counts, the first difference and both CPUs, the differing pin fields, or why it
    failed or did not run) and ``record`` (the replay record it logged; ``None`` when it logged none)."""

    name: str
    verdict: str
    detail: str
    record: dict | None = None

    @property
    def failed(self) -> bool:
        """Whether this outcome fails a replay run: a crash, or a difference where the expectation should reproduce."""
        return self.verdict in FAILING

    @property
    def completed(self) -> bool:
        """Whether a comparison ran to its end (equal or with a recorded difference), on the recorded pin or, asked
        to, across CPU kinds."""
        return self.verdict in (EQUAL, DIFFERS, DIFFERS_UNPROVEN, EQUAL_ACROSS, DIFFERS_ACROSS)

    @property
    def kept(self) -> bool:
        """Whether the replay log keeps this outcome's record: a completed comparison, or a pin found not comparable
        (which says where the expectation could not be compared, and verifies no CPU:
        :func:`graftbench.results.exact_manifest.verified_cpus` skips a record with pin differences)."""
        return self.completed or self.verdict == NOT_COMPARABLE


def pairs_asked(expected: dict, limit: int | None) -> int:
    """The pairs a replay of ``expected`` with ``--limit limit`` compares when every one is equal."""
    total = len(expected["pairs"])
    return min(limit, total) if limit else total


def judge(name: str, expected: dict, record: dict | None, returncode: int, output: str, limit: int | None,
          known_records: list[dict], here: dict) -> Outcome:
    """The verdict on one replay of ``expected`` (the manifest at ``name``) asked for ``limit`` pairs, from the one
    record it logged (``None`` if none), its exit status and its output (stdout and stderr: its last line is quoted
    when the replay failed). ``known_records`` are the replay log's records before this replay, ``here`` this CPU
    (:func:`graftbench.util.isa.environment`): together they say whether the expectation is known to reproduce here.
    """
    last_line = (output.strip().splitlines() or ["(no output)"])[-1]
    if record is None:
        return Outcome(name, FAILED, f"no replay record logged (exit status {returncode}): {last_line}")
    if record.get("expectation_sha256") != expected.get("manifest_sha256"):
        return Outcome(name, FAILED, f"the logged record is of expectation {str(record.get('expectation_sha256'))[:16]},"
                                     f" not {str(expected.get('manifest_sha256'))[:16]}", record)
    compared, difference = record.get("compared"), record.get("first_difference")
    if record.get("across_cpu_kinds") is not None:
        return _judge_across(name, expected, record, returncode, last_line, limit, here)
    if record.get("pin_differences"):
        fields = ", ".join(record["pin_differences"])
        if returncode != 1 or compared:
            return Outcome(name, FAILED, f"a not-comparable record (pin differs in {fields}) with {compared} "
                                         f"compared and exit status {returncode}: {last_line}", record)
        return Outcome(name, NOT_COMPARABLE, f"this machine's pin differs in {fields}", record)
    cpus = f"recorded on {isa.describe_cpu(expected.get('environment', {}))}, replayed on {isa.describe_cpu(here)}"
    differs = DIFFERS if difference is not None and known_to_reproduce(expected, known_records, here) \
        else DIFFERS_UNPROVEN
    return _judge_completed(name, record, returncode, last_line, pairs_asked(expected, limit), cpus, "",
                            (EQUAL, differs))


def _counts_agree(compared, equal, difference, returncode: int, asked: int) -> bool:
    """Whether a completed replay record's counts and exit status agree with what it recorded: with no difference,
    every pair asked compared and equal and exit status 0; with one, exit status 1 and every pair before the first
    difference equal."""
    if difference is None:
        return (compared, equal, returncode) == (asked, asked, 0)
    return returncode == 1 and isinstance(compared, int) and 0 < compared <= asked and equal == compared - 1


def _judge_across(name: str, expected: dict, record: dict, returncode: int, last_line: str, limit: int | None,
                  here: dict) -> Outcome:
    """The verdict on a record of a comparison across CPU kinds (``across_cpu_kinds`` set): :data:`EQUAL_ACROSS`,
    :data:`DIFFERS_ACROSS`, or :data:`FAILED` when its pin differences are not CPU features alone, or its counts or
    exit status contradict it."""
    fields = record.get("pin_differences") or []
    if not fields or not set(fields) <= set(CPU_FEATURE_FIELDS):
        return Outcome(name, FAILED, f"a record compared across CPU kinds whose pin differs in "
                                     f"{', '.join(fields) or 'nothing'}, not in CPU features alone", record)
    features = record["across_cpu_kinds"]
    cpus = (f"pin differs in {', '.join(fields)}: {describe_features(features)}; recorded on "
            f"{isa.describe_cpu(expected.get('environment', {}))}, compared on {isa.describe_cpu(here)}")
    return _judge_completed(name, record, returncode, last_line, pairs_asked(expected, limit), cpus,
                            " across CPU kinds", (EQUAL_ACROSS, DIFFERS_ACROSS))


def _judge_completed(name: str, record: dict, returncode: int, last_line: str, asked: int, cpus: str, where: str,
                     verdicts: tuple[str, str]) -> Outcome:
    """The verdict on a comparable record of ``asked`` pairs: ``verdicts`` (equal, differs) when its counts and exit
    status agree with it (:func:`_counts_agree`), else :data:`FAILED` saying how they contradict it; ``cpus`` names
    where it was recorded and replayed, ``where`` is put after what the message says was compared or recorded
    (``" across CPU kinds"``, or ``""``)."""
    compared, equal, difference = record.get("compared"), record.get("equal"), record.get("first_difference")
    agree = _counts_agree(compared, equal, difference, returncode, asked)
    if difference is None:
        if not agree:
            return Outcome(name, FAILED, f"{compared} compared, {equal} equal of {asked} asked{where}, no difference "
                                         f"recorded, exit status {returncode}: {last_line}", record)
        return Outcome(name, verdicts[0], f"{compared} compared, {equal} equal ({cpus})", record)
    if not agree:
        return Outcome(name, FAILED, f"a difference recorded{where} ({difference}) with {compared} compared, {equal} "
                                     f"equal and exit status {returncode}: {last_line}", record)
    return Outcome(name, verdicts[1], f"{compared} compared, {equal} equal, first difference {difference} ({cpus})",
                   record)


def system_info_terms(text: str) -> dict[str, str] | None:
    """llama.cpp's system_info (``CPU : SSE3 = 1 | AVX = 1 | ... |``) as ``{term: value}``; ``None`` when ``text``
    is not one CPU backend's list of ``NAME = VALUE`` terms."""
    if not isinstance(text, str) or not text.startswith("CPU :"):
        return None
    terms = {}
    for piece in text.removeprefix("CPU :").split("|"):
        if not piece.strip():
            continue
        term, sep, value = (part.strip() for part in piece.partition("="))
        if not sep or not term or not value or term in terms:
            return None
        terms[term] = value
    return terms


def cpu_feature_difference(recorded: dict, here: dict) -> dict | None:
    """How the config pin ``here`` (this machine's llama.cpp session's) differs from the expectation's pin
    ``recorded`` when it differs in the CPU features llama.cpp detected alone: ``{"fields": the differing
    :data:`CPU_FEATURE_FIELDS`, "recorded_only": [terms], "replayed_only": [terms]}`` (terms as ``NAME = VALUE``).
    ``None`` when the pins are equal, or differ in any other field (the llama.cpp version, a build switch such as
    ``OPENMP``, the model, the cache, ...), or a system_info is not one (:func:`system_info_terms`)."""
    from ..results.exact_manifest import pin_differences

    fields = pin_differences(recorded, here)
    if not fields or not set(fields) <= set(CPU_FEATURE_FIELDS):
        return None
    recorded_only, replayed_only = set(), set()
    for field in fields:
        before, after = (system_info_terms(_field(pin, field)) for pin in (recorded, here))
        if before is None or after is None:
            return None
        recorded_only |= {f"{k} = {v}" for k, v in before.items() if after.get(k) != v}
        replayed_only |= {f"{k} = {v}" for k, v in after.items() if before.get(k) != v}
    if any(term.split(" = ")[0] not in INSTRUCTION_SET_FEATURES for term in recorded_only | replayed_only):
        return None
    return {"fields": fields, "recorded_only": sorted(recorded_only), "replayed_only": sorted(replayed_only)}


def _field(pin: dict, dotted: str):
    for part in dotted.split("."):
        pin = pin.get(part) if isinstance(pin, dict) else None
    return pin


def adopt_cpu_features(expected: dict, here: dict) -> tuple[dict, dict] | None:
    """For ``check-exact --expect --across-cpu-kinds``: when the pin ``here`` differs from ``expected``'s only in CPU
    features (:func:`cpu_feature_difference`), the expectation to compare the pairs against (``expected`` with
    this machine's values in those fields, its pair hashes unchanged) and the difference; else ``None`` (equal pins
    replay as ever; any other difference stays not comparable)."""
    difference = cpu_feature_difference(expected["config"], here)
    if difference is None:
        return None
    config = {**expected["config"], "engine": dict(expected["config"].get("engine") or {})}
    for field in difference["fields"]:
        *parents, last = field.split(".")
        target = config
        for part in parents:
            target = target[part]
        target[last] = _field(here, field)
    return {**expected, "config": config}, difference


def describe_features(difference: dict) -> str:
    """One phrase naming the CPU features of a :func:`cpu_feature_difference` (or a record's ``across_cpu_kinds``)."""
    parts = [f"{', '.join(difference[key])} {where}" for key, where in
             (("recorded_only", "recorded, not here"), ("replayed_only", "here, not recorded")) if difference.get(key)]
    return "; ".join(parts) or "no feature named"


def replay_arguments(expectation: Path, limit: int, log: Path, across_cpu_kinds: bool = False) -> list[str]:
    """The arguments after the Python executable that replay ``expectation`` (``limit`` pairs) in a fresh process
    and log its one record to ``log``; ``across_cpu_kinds``: compare its pairs where the pin differs in CPU features
    alone (``--across-cpu-kinds``)."""
    return ["-m", "graftbench.cli.app", "check-exact", "--expect", str(expectation), "--limit", str(limit),
            "--log", str(log), *(["--across-cpu-kinds"] if across_cpu_kinds else [])]


def logged_record(log: Path) -> dict | None:
    """The one record a replay wrote to its own ``log`` (``None`` when the file is absent or empty).

    Raises:
        ValueError: the log holds more than one record (it was not this replay's own), or a line is not a JSON
            object (:func:`graftbench.results.exact_manifest.read_replay_log`).
    """
    records = read_replay_log(log)
    if len(records) > 1:
        raise ValueError(f"{log}: {len(records)} replay records, expected one (a replay's own log)")
    return records[0] if records else None


def replay_once(root: Path, expectation: Path, limit: int, work: Path, env: dict[str, str] | None = None,
                timeout_s: float = REPLAY_TIMEOUT_S, across_cpu_kinds: bool = False,
                ) -> tuple[subprocess.CompletedProcess, dict | None]:
    """Replay ``expectation`` (``limit`` pairs) in a fresh process run in ``root`` with environment ``env`` (this
    process's when ``None``), logging to a new file under ``work``; returns the finished process (stdout and stderr
    as text) and the record it logged (``None`` if none). A replay past ``timeout_s`` seconds is killed, and its
    process returned with exit status -9 (its record, if it wrote one, still read). ``across_cpu_kinds``: as
    :func:`replay_arguments`."""
    work.mkdir(parents=True, exist_ok=True)
    handle, log_name = tempfile.mkstemp(prefix="replay-", suffix=".jsonl", dir=work)
    os.close(handle)
    log = Path(log_name)
    log.unlink()  # the replay creates it; an empty file left would read as "no record"
    command = [sys.executable, *replay_arguments(expectation, limit, log, across_cpu_kinds)]
    try:
        done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        output = [text.decode("utf-8", "replace") if isinstance(text, bytes) else (text or "")
                  for text in (exc.stdout, exc.stderr)]
        done = subprocess.CompletedProcess(command, -9, output[0],
                                           output[1] + f"\nkilled after {timeout_s} s")
    return done, logged_record(log)


def committed_cpu_expectations(root: Path) -> list[Path]:
    """Every committed exactness expectation recorded on a CPU (``config.device`` ``cpu`` or absent), under
    ``root/manifests/<kind>/``, in path order. A GPU's certificates replay on their GPU (docs/gpu.md)."""
    found = []
    for folder in layout.manifest_folders(root):
        for path in sorted(folder.glob("exact-*.json")):
            if json.loads(path.read_text())["config"].get("device", "cpu") == "cpu":
                found.append(path)
    return found


def why_not_runnable(expected: dict) -> str | None:
    """Why this machine cannot replay ``expected`` at all (a reason naming what is missing), else ``None``: a
    library its pin records that is not installed (an engine's bindings included), a packaged model whose packages
    are not installed (``make models``), an engine not registered here, or what the pin's engine says this machine
    cannot run (:meth:`graftbench.engine.base.EngineFactory.why_not_runnable`: an instruction-set pin this CPU cannot
    run, a llama.cpp build not made here). A library at another version, or another build, is no reason here: the
    replay runs and reports it as not comparable."""
    pin = expected["config"]
    missing = [name for name in sorted(pin.get("libraries") or {}) if not _installed(name)]
    if missing:
        return f"{', '.join(missing)} not installed"
    model_missing = _model_missing(pin["model"])
    if model_missing:
        return model_missing
    from ..engine.pin_terms import engine_of
    from ..engine.registry import get

    try:
        factory = get(engine_of(pin))
    except ValueError as exc:  # an engine not registered here, or whose module cannot be imported
        return str(exc)
    return factory.why_not_runnable(pin)


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _model_missing(spec: str) -> str | None:
    """Why the packaged model ``spec`` is not installed (its first missing package), or ``None`` (installed, or not
    a packaged alias: a ``random:`` model is generated, and any other spec is left to the replay to resolve)."""
    from ..engine.model_packages import PackagedWeightsError, locate_part
    from ..engine.models import ALIASES

    weights = ALIASES.get(spec)
    if weights is None:
        return None
    try:
        for part in weights.parts:
            locate_part(part, weights.install)
    except PackagedWeightsError as exc:
        return f"model {spec}: {exc}"
    return None


def replay_committed(root: Path, limit: int, log: Path, only: list[Path] | None = None,
                     say: Callable[[str], None] = print, across_cpu_kinds: bool = False) -> list[Outcome]:
    """Replay ``limit`` pairs of every committed CPU expectation under ``root`` (or of the files ``only``) that
    this machine can run, one at a time, each in a fresh process; append the record of each completed comparison and
    of each pin found not comparable (:attr:`Outcome.kept`) to the replay log ``log`` as it comes, and say each
    outcome on one line. Returns the outcomes, those not run
    included (:data:`NOT_RUN`, with the reason). ``across_cpu_kinds``: the llama.cpp expectations are replayed with
    ``--across-cpu-kinds`` (:data:`EQUAL_ACROSS`, :data:`DIFFERS_ACROSS`); the torch ones as ever.

    Raises:
        ValueError: a file of ``only`` is not a committed CPU expectation, the replay log cannot be read, or it may
            not take this CPU's records (:func:`graftbench.results.exact_manifest.replay_log_refusal`: an emulated
            CPU, or one not checked for emulation, never logs to the replay log of CPUs).
    """
    root = Path(root)
    refusal = replay_log_refusal(Path(log), isa.environment())
    if refusal:
        raise ValueError(refusal)
    committed = committed_cpu_expectations(root)
    if only:
        chosen = [Path(p) if Path(p).is_absolute() else root / p for p in only]
        unknown = [str(p) for p in chosen if p.resolve() not in {c.resolve() for c in committed}]
        if unknown:
            raise ValueError(f"not a committed CPU expectation under {root / layout.MANIFESTS}: {', '.join(unknown)}")
        committed = chosen
    env = {k: v for k, v in os.environ.items() if k != isa.ENV_VAR}  # each replay adopts its own pin
    here, outcomes = isa.environment(), []
    with tempfile.TemporaryDirectory(prefix="replay-exact-") as work:
        for path in committed:
            name = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
            expected = json.loads(path.read_text())
            reason = why_not_runnable(expected)
            if reason is not None:
                outcome = Outcome(name, NOT_RUN, reason)
            else:
                known = read_replay_log(log)
                across = across_cpu_kinds and bool(expected["config"].get("engine"))
                done, record = replay_once(root, path, limit, Path(work), env, across_cpu_kinds=across)
                outcome = judge(name, expected, record, done.returncode, done.stdout + done.stderr, limit, known, here)
                if outcome.kept:
                    append_replay_log(log, outcome.record)
            say(f"{name}: {outcome.verdict}: {outcome.detail}")
            outcomes.append(outcome)
    return outcomes


def summary(outcomes: list[Outcome]) -> str:
    """One line: how many replays ended in each verdict, the failing ones named."""
    counts = {}
    for outcome in outcomes:
        counts[outcome.verdict] = counts.get(outcome.verdict, 0) + 1
    line = "; ".join(f"{count} {verdict}" for verdict, count in counts.items()) or "no committed CPU expectation"
    failing = [o.name for o in outcomes if o.failed]
    return line + (f". Failed: {', '.join(failing)}" if failing else "")


def exit_status(outcomes: list[Outcome]) -> int:
    """1 when any replay failed (:data:`FAILED`) or differed where it should reproduce (:data:`DIFFERS`), else 0:
    a difference on a kind of CPU not proven to reproduce or across CPU kinds, a pin that is not comparable and an
    expectation this machine cannot run are reported, not failures."""
    return 1 if any(outcome.failed for outcome in outcomes) else 0


def main(root: str, limit: int, log: str, only: list[str] | None = None, across_cpu_kinds: bool = False) -> int:
    """``make replay-exact``: :func:`replay_committed`, then the :func:`summary` line; returns :func:`exit_status`,
    or 2 after one ``error:`` line when nothing could be replayed (a file that is not a committed expectation, a
    replay log that cannot be read or may not take this CPU's records)."""
    try:
        outcomes = replay_committed(Path(root), limit, Path(log), [Path(p) for p in only or []] or None,
                                    across_cpu_kinds=across_cpu_kinds)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(summary(outcomes))
    return exit_status(outcomes)
