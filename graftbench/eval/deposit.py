"""Deposit verified solutions as artifacts: re-verify each against its key, refuse the rest, prefill and store.

A program-mode sample is re-verified by running its program again in the sandbox (only when the deposit runs in
program mode: a text-mode deposit never runs code and refuses it); its deposit text shows the verified program
(:func:`graftbench.programs.mode.solution_text`) between the problem's final-answer lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..store.codec import ArtifactError
from ..util.hashing import sha256_text
from ..problems.types import Problem, family, normalize_problem_text, problem_key, problem_text_sha256
from ..programs.mode import program_verdict, solution_text
from ..results.samples import Sample
from ..programs.sandbox import Sandbox, open_sandbox
from ..engine.base import EngineSession
from ..settings import SandboxLimits
from ..store.folder import Store
from ..store.writers import kind_refusal, this_kind
from ..verify.answers import verify_answer

QUERY_MARGIN = 64  # tokens kept free after an artifact for the query's answer decode


@dataclass(frozen=True)
class DepositItem:
    """One solution offered for deposit: from a problem set's ``solution`` field (``source="reference"``) or from a
    solve run's verified sample (``source="solve:<run>"``). A program-mode sample carries its ``program``; its
    ``solution`` is then the program's deposit text."""

    problem: Problem
    solution: str
    source: str
    program: str | None = None


@dataclass
class DepositReport:
    """``deposited``: (problem id, artifact id, tokens, newly written); ``refused``: (problem id, reason);
    ``reused``: ids of the deposited artifacts the store already held intact, taken without a prefill (see
    :func:`stored_artifact`); ``prefilled_keys``: problem keys of the items prefilled; ``other_pins``: for each
    other config fingerprint of the store, how many of those prefilled problems it already held (a deposit under
    another pin, e.g. another thread count, which this one could not reuse); ``cleaned``: temporary files of
    killed writers removed when the store was opened."""

    deposited: list[tuple[str, str, int, bool]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    reused: set[str] = field(default_factory=set)
    prefilled_keys: list[str] = field(default_factory=list)
    other_pins: dict[str, int] = field(default_factory=dict)
    cleaned: list = field(default_factory=list)


def items_from_problems(problems: list[Problem]) -> list[DepositItem]:
    """Reference solutions of the problems that have one."""
    return [DepositItem(p, p.solution, "reference") for p in problems if p.solution]


def items_from_samples(samples: list[Sample], problems: list[Problem], run_name: str) -> list[DepositItem]:
    """The outputs of a run's samples recorded as correct, paired with their problems by id. A sample of a graft
    run in the ``answer`` layout is left out: its output is only the answer after the grafted example's cue, not a
    solution (a ``solve``-layout graft sample is a whole solution and is offered)."""
    by_id = {p.id: p for p in problems}
    return [item_from_sample(by_id[s.problem_id], s, f"solve:{run_name}")
            for s in samples if s.correct and s.problem_id in by_id and s.layout != "answer"]


def item_from_sample(problem: Problem, sample: Sample, source: str) -> DepositItem:
    """A sample offered for deposit: its output, or for a program-mode sample its program (in its deposit text)."""
    program = getattr(sample, "program", None)
    if program is not None:
        return DepositItem(problem, solution_text(program), source, program=program)
    return DepositItem(problem, sample.output, source)


def deposit_meta(session: EngineSession, problem: Problem, ids: list[int], source: str) -> dict:
    """The header fields a deposit writes besides the pin: the problem's id, family, routing key and normalized
    text, text SHA-256, answer key, the solution's source, and the SHA-256 of the deposit text (its ``ids``
    decoded). They make the artifact routable and name the example a grafted sample saw."""
    return {
        "problem_id": problem.id,
        "family": family(problem),
        "problem_key": problem_key(problem),
        "problem_text": normalize_problem_text(problem.problem),
        "problem_sha256": problem_text_sha256(problem.problem),
        "answer": problem.answer,
        "source": source,
        "text_sha256": sha256_text(session.tokenizer.decode(ids)),
    }


def _deposit_one(session: EngineSession, store: Store, item: DepositItem, report: DepositReport,
                 recompute: bool) -> str | None:
    """Deposit one verified item into ``report`` (prefilled, or reused when the store holds it and not
    ``recompute``); returns why it is refused when its deposit text does not fit the context window."""
    problem = item.problem
    ids = session.deposit_ids(problem.problem, problem.answer, item.solution)
    limit = session.context_window - len(session.query_ids(problem.problem)) - QUERY_MARGIN
    if len(ids) > limit:
        return f"deposit text is {len(ids)} tokens, over the {limit} that fit"
    meta = deposit_meta(session, problem, ids, item.source)
    held = None if recompute else stored_artifact(session, store, ids, meta)
    if held is not None:
        report.reused.add(held)
        report.deposited.append((problem.id, held, len(ids), False))
        return None
    data = session.build_artifact(ids, meta)
    artifact_id, written = store.put_reporting(data, session.config.to_dict())
    report.prefilled_keys.append(meta["problem_key"])
    report.deposited.append((problem.id, artifact_id, len(ids), written))
    return None


def _refusal(item: DepositItem, mode: str, limits: SandboxLimits, sandbox: Sandbox | None) -> str | None:
    """Why the item is refused (its answer does not verify against the key, or its program cannot be re-run in
    this mode), or ``None`` when it verifies. ``sandbox``: where a program runs (not ``None`` in program mode when
    the item has a program)."""
    problem = item.problem
    if item.program is None:
        verdict = verify_answer(item.solution, problem.answer)
        return None if verdict.correct else \
            f"final answer {verdict.extracted!r} does not verify against key {problem.answer!r}"
    if mode != "program":
        return "a program-mode sample: deposit with --mode program to re-run its program in the sandbox"
    result = sandbox.run(item.program, limits)
    if program_verdict(result.stdout, result.stopped, problem.answer).correct:
        return None
    what = f"stopped ({result.stopped})" if result.stopped else f"printed {result.answer!r}"
    return f"its program {what}: does not verify against key {problem.answer!r}"


def stored_artifact(session: EngineSession, store: Store, ids: list[int], meta: dict) -> str | None:
    """The id of an intact artifact in ``store`` that a deposit of token ids ``ids`` (shape ``[n_tokens]``) with
    header fields ``meta`` (:func:`deposit_meta`) would write again, or ``None``.

    It must be a top-level artifact under the session's config fingerprint (weights, tokenizer, dtype, chunk
    schedule, kernels, engine: the pin), pass every check of :meth:`Store.audit` (SHA-256 of the file against its
    id, of the payload against its header; a torch KV artifact or a llama.cpp state alike), hold the same token ids at positions ``[0, n_tokens)`` and carry the
    same ``meta`` fields. The exactness contract says a prefill of the same ids under the same pin gives the same
    bytes, so such a deposit is taken as it is; ``deposit --recompute`` prefills anyway and checks it. A damaged
    copy is not held: the deposit prefills and replaces it. Nor is one whose writers were all of another kind of
    CPU, or that records none, under a pin not proven portable (:func:`graftbench.store.writers.kind_refusal`): the
    same pin may compute other bytes here, so the deposit prefills (equal bytes keep the one copy and add this
    machine's writer record)."""
    here, fingerprint = this_kind(), session.config.fingerprint
    for artifact_id in store.exact_ids(fingerprint, meta["problem_key"], len(ids)):
        if kind_refusal(fingerprint, store.writer_kinds(artifact_id), here, assume_kind=False) is not None:
            continue
        try:
            header = store.audit(artifact_id)
            token_ids = store.token_ids(artifact_id)
        except ArtifactError:
            continue
        if (header.get("positions") == [0, len(ids)] and token_ids == ids
                and all(header.get(name) == value for name, value in meta.items())):
            return artifact_id
    return None


def deposit_items(session: EngineSession, store: Store, items: list[DepositItem],
            on_item: Callable[[DepositItem], None] | None = None, mode: str = "text",
            limits: SandboxLimits = SandboxLimits(), recompute: bool = False,
            sandbox: Sandbox | None = None) -> DepositReport:
    """Re-verify each item's final answer against its key, then prefill its deposit text with the pinned chunk
    schedule and write the artifact. Unverified or over-long items are refused and listed, never deposited. An
    item whose artifact the store already holds intact (:func:`stored_artifact`) is reported as deposited and
    listed in ``reused`` without a prefill, unless ``recompute`` (then its bytes are rebuilt, and equal bytes
    keep the one copy). ``other_pins`` of the report counts the prefilled problems that the store held under
    another pin.

    An item with a ``program`` is re-verified by running it in ``sandbox`` under ``limits`` when ``mode`` is
    ``program`` (opened here, :func:`graftbench.programs.sandbox.open_sandbox`, when ``None`` and an item has a
    program), and refused otherwise. Raises :class:`graftbench.programs.sandbox.SandboxError` when no sandbox can
    be started.
    """
    if mode == "program" and sandbox is None and any(item.program is not None for item in items):
        sandbox = open_sandbox()
    report = DepositReport()
    for item in items:
        refusal = _refusal(item, mode, limits, sandbox)
        if refusal is None:
            refusal = _deposit_one(session, store, item, report, recompute)
        if refusal is not None:
            report.refused.append((item.problem.id, refusal))
        if on_item:
            on_item(item)
    if report.prefilled_keys:
        report.other_pins = store.other_pins_holding(session.config.fingerprint, report.prefilled_keys)
    return report
