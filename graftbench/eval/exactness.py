"""``check-exact``: the graft against an independent fresh chunked recompute, with negative controls, on any engine.

For each (artifact, query) pair built from real text, the artifact is deposited (prefilled with the pinned chunk
schedule and captured as the store would keep it), grafted into a fresh cache at its own positions, and the query's
logits at every query position are compared with a fresh computation (new cache, same artifact tokens, same chunk
schedule, same query). The contract (docs/exactness.md) is SHA-256 equality of the raw logits bytes, hence KL 0 and
argmax 100%.

The engine does the deposit, the graft, the fresh computation and its negative controls
(:meth:`graftbench.engine.base.EngineSession.exactness`: :mod:`graftbench.engine.torch.exactness`,
:mod:`graftbench.engine.llama_cpp.exactness`); this module builds the pairs, compares, records and replays. Those
controls of the engine's ``must_differ`` are claimed to differ on every pair and recorded as such in the
manifest's settings; the others are reported as measured.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..engine.base import CONTROL_SHIFTS, Deposited, EngineSession
from ..store.tensor_hashing import tensors_sha256
from ..util.hashing import sha256_json
from ..problems.types import Problem

SHIFTS = CONTROL_SHIFTS
SHORT_CAP = 768  # tokens: a short artifact is a problem with its solution, cut here to bound the run's time
LONG_MIN = 2000  # tokens: a long artifact joins problems with their solutions until it reaches this
LONG_CAP = 2400
LONG_PIECE = 1300  # tokens per problem in a long artifact, so that it always joins two or more
@dataclass(frozen=True)
class PairLayout:
    """The text templates ``check-exact`` builds its pairs from, its own and recorded in the exactness manifest's
    settings, so that a change of the deposit or query layout of ``eval`` leaves committed expectations
    comparable. ``deposit`` takes ``problem``, ``answer``, ``solution``; ``query`` takes ``problem``."""

    deposit: str = "Problem: {problem}\nFinal answer: {answer}\nSolution: {solution}\n\n"
    query: str = "Problem: {problem}\nFinal answer:"

    def to_dict(self) -> dict:
        return {"deposit": self.deposit, "query": self.query}


PAIR_LAYOUT = PairLayout()


@dataclass(frozen=True)
class Pair:
    """One (artifact, query) pair: ``kind`` is ``short``, ``long`` or ``cross-window`` (the artifact ends just
    before the sliding window and the query crosses it); token id lists; the problems it was built from."""

    id: str
    kind: str
    problems: tuple[str, ...]
    artifact: list[int]
    query: list[int]

    @property
    def tokens_sha256(self) -> str:
        """SHA-256 of the canonical JSON of ``[artifact, query]`` token ids."""
        return sha256_json([self.artifact, self.query])


def check_pair_source(problems: list[Problem], source: str, n: int) -> None:
    """Check, before any model is loaded, that the problem set ``source`` can give ``n`` distinct pairs.

    Raises ``ValueError`` naming ``source`` when none of its problems has a worked solution (the ``solution``
    field; e.g. ``../shared/data/aime2025.jsonl`` has answers only), or when too few have one for ``n`` pairs.
    """
    usable = sum(1 for p in problems if p.solution)
    if not usable:
        raise ValueError(f"{source}: none of its {len(problems)} problems has a solution (no 'solution' field); "
                         "check-exact builds its pairs from worked solutions: pass a problem set with solutions "
                         "(e.g. ../shared/data/aime2024.jsonl)")
    if n > usable * max(usable - 1, 1):
        raise ValueError(f"{source}: {n} distinct pairs need more problems with solutions than its {usable}; "
                         "pass a smaller --samples")


def build_pairs(session: EngineSession, problems: list[Problem], n: int, layout: PairLayout = PAIR_LAYOUT,
                window: int | None = None) -> list[Pair]:
    """``n`` distinct pairs from problems with solutions: every 5th pair long (two or more problems with their
    solutions, at least ``LONG_MIN`` tokens), every 5th (offset 3) crossing the sliding window (or 512 tokens when
    the model has none), the rest short; in the first pass over the problems odd short pairs query another problem
    than the artifact's. Past ``len(problems)`` pairs the builder starts a new pass whose queries move one problem
    further per pass, so no (artifact, query) pair repeats.

    ``window``: the model's sliding window in tokens (0: none); by default the engine's
    (:attr:`graftbench.engine.base.ExactnessChecks.window`). Only the session's ``tokenizer`` is read otherwise.

    Raises ``ValueError`` when no problem has a solution, or when ``n`` pairs cannot all be distinct.
    """
    usable = [p for p in problems if p.solution]
    if not usable:
        raise ValueError("check-exact needs problems with a solution field (e.g. ../shared/data/aime2024.jsonl)")
    if n > len(usable) * max(len(usable) - 1, 1):
        raise ValueError(f"{n} distinct pairs need more problems with solutions than {len(usable)}")
    tokenizer = session.tokenizer

    def deposit_text(problem: Problem) -> str:
        return layout.deposit.format(problem=problem.problem, answer=problem.answer, solution=problem.solution)

    def query_ids(text: str) -> list[int]:
        return tokenizer(layout.query.format(problem=text), add_special_tokens=False).input_ids

    window = (session.exactness().window if window is None else window) or 512
    pairs = []
    for i in range(n):
        first, shift = usable[i % len(usable)], i // len(usable)
        other = lambda offset: usable[(i + offset + shift) % len(usable)]  # noqa: E731
        deposit = tokenizer(deposit_text(first)).input_ids
        if i % 5 == 4:
            used, deposit = [first], deposit[:LONG_PIECE]
            while len(deposit) < LONG_MIN and len(used) < len(usable):
                nxt = usable[(i + len(used)) % len(usable)]
                used.append(nxt)
                deposit += tokenizer(deposit_text(nxt), add_special_tokens=False).input_ids[:LONG_PIECE]
            pairs.append(Pair(f"pair-{i:03d}", "long", tuple(p.id for p in used), deposit[:LONG_CAP],
                              query_ids(other(1).problem)))
        elif i % 5 == 3:
            query = query_ids(first.problem + "\n" + other(7).problem)
            cut = max(8, window - len(query) // 2)
            pairs.append(Pair(f"pair-{i:03d}", "cross-window", (first.id,), deposit[:cut], query))
        else:
            asked = first if i % 2 == 0 and shift == 0 else other(1)
            pairs.append(Pair(f"pair-{i:03d}", "short", (first.id, asked.id), deposit[:SHORT_CAP],
                              query_ids(asked.problem)))
    return pairs


def compare(reference, other) -> dict:
    """Compare two ``[positions, vocab]`` logits arrays (torch tensors or numpy arrays, as the engine computes them).

    Returns ``equal`` (SHA-256 of raw bytes equal), ``max_abs_delta`` (logits units), ``kl`` (per-position
    KL(reference || other) in nats, computed in float64 from log-softmax) and ``argmax_agreement`` (fraction).
    """
    reference, other = torch.as_tensor(reference), torch.as_tensor(other)
    ref, oth = reference.double(), other.double()
    log_p, log_q = torch.log_softmax(ref, -1), torch.log_softmax(oth, -1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1)
    return {
        "equal": tensors_sha256([reference]) == tensors_sha256([other]),
        "max_abs_delta": float((ref - oth).abs().max()),
        "kl": kl.tolist(),
        "argmax_agreement": float((ref.argmax(-1) == oth.argmax(-1)).double().mean()),
    }


def graft_pair(session: EngineSession, pair: Pair) -> tuple[str, object, Deposited]:
    """Deposit the pair's artifact on the session's engine, graft it at its own positions and run the query.

    Returns (the deposit's digest: an artifact id or a state's SHA-256, the query's logits ``[len(query), vocab]``,
    the :class:`graftbench.engine.base.Deposited`).
    """
    checks = session.exactness()
    deposited = checks.deposit(pair.artifact)
    return deposited.digest, checks.graft_logits(deposited, pair.query), deposited


def controls(session: EngineSession, pair: Pair, fresh, deposited: Deposited) -> dict[str, dict]:
    """Run every negative control the engine has on one pair; returns ``{control name: compare() result}``."""
    checks = session.exactness()
    return {name: compare(reference, other)
            for name, reference, other in checks.controls(pair.artifact, pair.query, fresh, deposited)}


def check_pair(session: EngineSession, pair: Pair, with_controls: bool) -> dict:
    """The exactness record of one pair (JSON-ready): hashes (the deposit under the engine's
    :attr:`~graftbench.engine.base.ExactnessChecks.deposit_field`), graft-vs-fresh figures, and controls if asked."""
    checks = session.exactness()
    digest, grafted, deposited = graft_pair(session, pair)
    fresh = checks.fresh_logits(pair.artifact, pair.query)
    record = {
        "id": pair.id, "kind": pair.kind, "problems": list(pair.problems),
        "artifact_tokens": len(pair.artifact), "query_tokens": len(pair.query),
        "tokens_sha256": pair.tokens_sha256, checks.deposit_field: digest,
        "graft_logits_sha256": session.logits_sha256(grafted), "fresh_logits_sha256": session.logits_sha256(fresh),
        **summarize([compare(fresh, grafted)]),
    }
    if with_controls:
        record["controls"] = {name: summarize([r]) for name, r in controls(session, pair, fresh, deposited).items()}
    return record


def controls_without_teeth(manifest: dict) -> list[str]:
    """The controls an exactness manifest claims to differ (``settings.must_differ``) that came out byte-exact on
    some pair, one line each (``NAME: byte-exact on N of M pairs``); empty when every claimed control differed on
    every pair, or when the manifest claims none (one recorded before the claim was written)."""
    claimed = manifest.get("settings", {}).get("must_differ") or []
    controls = manifest.get("totals", {}).get("controls", {})
    return [f"{name}: byte-exact on {controls[name]['exact_pairs']} of {controls[name]['pairs']} pairs"
            for name in claimed if name in controls and controls[name]["exact_pairs"]]


def summarize(results: list[dict]) -> dict:
    """Aggregate compare() results: all equal, max |Δlogit|, mean / p99 / max KL over all positions, argmax."""
    kls = torch.tensor([k for r in results for k in r["kl"]], dtype=torch.float64)
    return {
        "equal": all(r["equal"] for r in results),
        "max_abs_delta": max(r["max_abs_delta"] for r in results),
        "kl_mean": float(kls.mean()),
        "kl_p99": float(torch.quantile(kls, 0.99)),
        "kl_max": float(kls.max()),
        "argmax_agreement": sum(r["argmax_agreement"] for r in results) / len(results),
    }


def reusable(record: dict | None, pair: Pair, with_controls: bool) -> bool:
    """Whether ``record`` (from an interrupted run under the same pin) was measured on ``pair``'s very tokens, with
    controls exactly when they are asked for now."""
    return (record is not None and record.get("tokens_sha256") == pair.tokens_sha256
            and ("controls" in record) == with_controls)


def measure_pairs(pairs: list[Pair], check, with_controls: bool, control_pairs: int, on_pair=None,
                  done: list[dict] | None = None, on_reused=None) -> list[dict]:
    """The record of each pair: ``check(pair, with_controls_here)`` (controls on the first ``control_pairs`` when
    ``with_controls``), or the last record in ``done`` that is :func:`reusable` for it (then ``on_reused`` is
    called with it); ``on_pair`` is called with each newly measured record."""
    previous = {record["id"]: record for record in done or []}
    records = []
    for i, pair in enumerate(pairs):
        controls_here = with_controls and i < control_pairs
        if reusable(previous.get(pair.id), pair, controls_here):
            records.append(previous[pair.id])
            if on_reused:
                on_reused(records[-1])
            continue
        records.append(check(pair, controls_here))
        if on_pair:
            on_pair(records[-1])
    return records


def run_check_exact(session: EngineSession, problems: list[Problem], source: str, samples: int, with_controls: bool,
                    control_pairs: int, on_pair=None, done: list[dict] | None = None, on_reused=None,
                    command_options: dict | None = None, code: dict | None = None,
                    code_resumed_from: list[dict] | None = None) -> dict:
    """Check ``samples`` pairs on the session's engine (controls on the first ``control_pairs`` when
    ``with_controls``) and return the sealed exactness manifest (see :mod:`graftbench.results.exact_manifest`); the
    engine adds its own settings (:meth:`graftbench.engine.base.ExactnessChecks.settings`: on llama.cpp the engine's
    name and the tokenizer agreement).

    ``done``: records of an interrupted run of the same pin (the caller keeps them per config fingerprint); a
    pair whose id, tokens and controls match one is not measured again (the last matching record counts), and
    ``on_reused`` is called with it; ``on_pair`` is called with each newly measured record (to journal it).
    ``command_options``: the options the command was given (flag to value), recorded in the settings when not
    empty. ``code``: the code version making the check (:func:`graftbench.util.provenance.code_version`, read here
    when ``None``, before any pair), the manifest's ``environment.code`` however long the check takes;
    ``code_resumed_from``: the code versions of the earlier processes that journalled ``done``
    (:attr:`graftbench.results.runs.RunDir.earlier_code`), the manifest's ``environment.code_resumed_from``."""
    from ..results.exact_manifest import build_exactness_manifest
    from ..problems.types import problem_set_sha256
    from ..util.provenance import code_version

    code = code if code is not None else code_version()  # at the start: the checkout may move during the check
    checks = session.exactness()
    pairs = build_pairs(session, problems, samples, PAIR_LAYOUT, window=checks.window)
    records = measure_pairs(pairs, lambda pair, here: check_pair(session, pair, here), with_controls, control_pairs,
                            on_pair, done, on_reused)
    return build_exactness_manifest(
        config=session.config.to_dict(), config_fingerprint=session.config.fingerprint,
        problem_set={"source": source, "sha256": problem_set_sha256(problems), "n": len(problems)},
        settings={"samples": samples, "controls": with_controls, "control_pairs": control_pairs if with_controls else 0,
                  "shifts": list(SHIFTS), "short_cap": SHORT_CAP, "long_min": LONG_MIN, "long_cap": LONG_CAP,
                  "pair_layout": PAIR_LAYOUT.to_dict(), **(checks.control_settings() if with_controls else {}),
                  **checks.settings(problems, PAIR_LAYOUT),
                  **({"command_options": dict(command_options)} if command_options else {})},
        records=records, code=code, code_resumed_from=code_resumed_from,
    )


@dataclass
class Replay:
    """Outcome of replaying an expectation: pairs compared and equal, the first difference (pair id and what),
    and the pin fields that differ (non-empty means not comparable, a failure)."""

    compared: int
    equal: int
    first_difference: str | None
    pin_differences: list[str]

    @property
    def passed(self) -> bool:
        return not self.pin_differences and self.first_difference is None and self.compared == self.equal


def as_recorded(session: EngineSession, recorded_layout: dict) -> EngineSession:
    """``session`` with the eval prompt layout its expectation was recorded under, as a plain dict: an artifact's
    header carries the pin's fingerprint, and the pin holds the eval layout, so without this a later change of
    the eval layout (which check-exact's pairs do not use) would change every replayed artifact id."""
    return replace(session, config=replace(session.config, layout=recorded_layout))


def not_comparable(session: EngineSession, expected: dict, problems: list[Problem]) -> list[str]:
    """What keeps the expectation ``expected`` from being measured again by ``session`` on ``problems``: the pin
    fields that differ (:func:`graftbench.results.exact_manifest.pin_differences`) and ``problem_set.sha256`` when the
    problem set is another; empty when comparable."""
    from ..results.exact_manifest import pin_differences
    from ..problems.types import problem_set_sha256

    differing = pin_differences(expected["config"], session.config.to_dict())
    if problem_set_sha256(problems) != expected["problem_set"]["sha256"]:
        differing.append("problem_set.sha256")
    return differing


def check_extendable(expected: dict, problems: list[Problem], samples: int, differing: list[str]) -> None:
    """Raise ``ValueError`` when the expectation ``expected`` cannot be extended to ``samples`` pairs on
    ``problems``: its seal or totals do not hold (:func:`graftbench.results.exact_manifest.verify_exactness_manifest`),
    ``samples`` is fewer than its pairs (the extension would drop some), or it was recorded on another problem set,
    pair layout or pin (``differing``: the pin fields the caller found to differ, named in the message)."""
    from ..results.exact_manifest import verify_exactness_manifest
    from ..problems.types import problem_set_sha256

    broken = verify_exactness_manifest(expected)
    if broken:
        raise ValueError(f"not a sound expectation: {'; '.join(broken)}")
    differing = list(differing)
    if problem_set_sha256(problems) != expected["problem_set"]["sha256"]:
        differing.append("problem_set.sha256")
    if expected["settings"].get("pair_layout") != PAIR_LAYOUT.to_dict():
        differing.append("settings.pair_layout")
    if samples < len(expected["pairs"]):
        raise ValueError(f"{samples} pairs asked for, fewer than the expectation's {len(expected['pairs'])}")
    if differing:
        raise ValueError(f"cannot extend an expectation recorded under another pin; differing: {', '.join(differing)}")


def extension_base(session: EngineSession, expected: dict, problems: list[Problem],
                   samples: int) -> tuple[EngineSession, list[dict]]:
    """What extending the committed expectation ``expected`` to more pairs starts from: ``session`` with the eval
    layout the expectation was recorded under (:func:`as_recorded`, so new artifact ids match the old ones), and the
    expectation's pair records, to be reused as an interrupted run's records are (:func:`reusable`: same id, tokens
    and controls). Pair ``i`` depends only on ``i`` (:func:`build_pairs`), so the first pairs of a longer list are
    the recorded ones.

    Raises ``ValueError`` as :func:`check_extendable` does, with every pin field that differs (any but the display
    name and the eval layout): its records would not be measurements of this pin."""
    from ..results.exact_manifest import pin_differences

    check_extendable(expected, problems, samples, pin_differences(expected["config"], session.config.to_dict()))
    recorded = as_recorded(session, expected["config"]["layout"])
    if recorded.config.fingerprint != expected["config_fingerprint"]:
        raise ValueError(f"cannot extend: this pin's fingerprint {recorded.config.fingerprint[:12]} is not the "
                         f"expectation's {expected['config_fingerprint'][:12]}")
    return recorded, list(expected["pairs"])


def replay(session: EngineSession, expected: dict, problems: list[Problem], limit: int | None = None,
           on_pair=None, first: int = 0) -> Replay:
    """Recompute the expectation's pairs (the first ``limit``; with ``first``, pairs ``first`` to ``limit`` − 1,
    0-based) under this machine's pin on the session's engine, built with the pair layout the expectation records; stop at the first hash
    that differs. A pin that differs makes the replay not comparable and nothing is computed. Raises
    ``ValueError`` when ``first`` is not a pair of the expectation or ``limit`` is not past it."""
    if not 0 <= first < len(expected["pairs"]) or (limit is not None and limit <= first):
        raise ValueError(f"pairs {first}:{limit if limit is not None else ''} hold none of the expectation's "
                         f"{len(expected['pairs'])} pairs (0-based, the end excluded)")
    differing = not_comparable(session, expected, problems)
    if differing:
        return Replay(0, 0, None, differing)
    records = expected["pairs"][first:limit] if limit else expected["pairs"][first:]
    layout = PairLayout(**expected["settings"]["pair_layout"]) if "pair_layout" in expected["settings"] else \
        PairLayout(deposit=expected["config"]["layout"]["deposit"], query=expected["config"]["layout"]["query"])
    checks = session.exactness()
    pairs = build_pairs(session, problems, expected["settings"]["samples"], layout,
                        window=checks.window)[first: first + len(records)]
    session = as_recorded(session, expected["config"]["layout"])
    field, label = checks.deposit_field, checks.deposit_label
    compared = equal = 0
    for record, pair in zip(records, pairs):
        compared += 1
        if pair.tokens_sha256 != record["tokens_sha256"]:
            return Replay(compared, equal, f"{record['id']}: token ids differ", [])
        digest, logits, _ = graft_pair(session, pair)
        if digest != record[field]:
            return Replay(compared, equal, f"{record['id']}: {label} {digest[:16]} != {record[field][:16]}", [])
        got = session.logits_sha256(logits)
        if got != record["graft_logits_sha256"]:
            return Replay(compared, equal, f"{record['id']}: graft logits {got[:16]} != {record['graft_logits_sha256'][:16]}", [])
        equal += 1
        if on_pair:
            on_pair(record)
    return Replay(compared, equal, None, [])


def replay_and_log(session: EngineSession, expected: dict, problems: list[Problem], limit: int | None = None,
                   log=None, on_pair=None, first: int = 0, code: dict | None = None) -> tuple[Replay, dict]:
    """:func:`replay` (pairs ``first`` to ``limit`` − 1), then the replay record naming both CPUs (and GPUs, on a
    GPU) (:func:`graftbench.results.exact_manifest.replay_record`; ``first_pair`` added when ``first`` > 0),
    appended to the replay log ``log`` (a path) when given; ``code``: the code version replaying (read here, before
    the replay, when ``None``). Returns ``(outcome, record)``."""
    from ..results.exact_manifest import append_replay_log, replay_record
    from ..util.provenance import code_version

    code = code if code is not None else code_version()  # at the start: the checkout may move during the replay
    result = replay(session, expected, problems, limit, on_pair, first)
    record = replay_record(expected, compared=result.compared, equal=result.equal,
                           first_difference=result.first_difference, pin_differences_found=result.pin_differences,
                           replayed_gpu=session.config.accelerator.get("gpu"), code=code)
    if first:
        record["first_pair"] = first
    if log is not None:
        append_replay_log(log, record)
    return result, record
