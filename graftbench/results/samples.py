"""The typed results of a solve or eval run: what one prefill-or-graft produced (:class:`Attempt`) and the sample
recorded for one problem (:class:`Sample`).

A sample is written to ``samples.jsonl`` and into the manifest as :meth:`Sample.to_json`; a resumed run reads it
back with :meth:`Sample.from_json`. The manifest side (:mod:`graftbench.results.manifest`) works on that JSON, since it
re-checks what was written, not what a process held in memory.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from ..programs.mode import PROGRAM_FIELDS

OPTIONAL_FIELDS = ("thinking_tokens",)  # fields a sample written before they existed does not hold


@dataclass
class Decoded:
    """Result of a greedy decode: generated ``token_ids`` (the EOS token included when hit), their text (EOS
    excluded), ``finish_reason`` (``eos``, ``stop`` or ``budget``) and seconds to the first token."""

    token_ids: list[int]
    text: str
    finish_reason: str
    first_token_s: float
    decode_s: float


@dataclass(frozen=True)
class Attempt:
    """One problem's prompt run and decode, before verification.

    ``cue`` is the answer cue the query ended with (``""`` for the baseline prompt); token counts are in tokens:
    ``prefill_tokens`` computed for the prompt or query, ``prefill_tokens_saved`` and ``artifact_tokens`` restored
    from the grafted chain; ``logits_sha256`` hashes the logits the decode started from. ``certify_segments`` holds
    the chain's token ids and the query when a ``--certify`` recompute is to follow. ``decoded`` holds one decode
    per sample (one for greedy). ``layout`` is the query's layout after a graft (``answer`` or ``solve``; ``None``
    for the baseline prompt); ``example_id`` and ``example_answer`` name the grafted example and its key.
    ``program`` says whether each decode is a program to run in the sandbox (program mode, outside the ``answer``
    layout).
    """

    cue: str
    prefill_tokens: int
    prefill_tokens_saved: int
    artifact_id: str | None
    artifact_tokens: int
    logits_sha256: str
    decoded: tuple[Decoded, ...]
    certify_segments: tuple[list[list[int]], list[int]] | None = None
    layout: str | None = None
    example_id: str | None = None
    example_answer: str | None = None
    program: bool = False


@dataclass(frozen=True)
class Sample:
    """The record of one problem in a run (docs/manifests.md lists the fields).

    Units: tokens for ``*_tokens``; seconds for ``ttft_s``, ``wall_s`` (routing, restore or prefill and decode) and
    ``certify_s`` (the audit recompute, timed apart); joules for ``energy_j``. ``mode`` is ``graft`` or
    ``baseline``; ``route`` the router's kind (``exact``, ``similar``, ``none``) when grafting was asked for;
    ``fallback`` the refusal (``<check>: <reason>``) when the routed artifact was refused.

    Several samples of one problem (``--samples N``) share the prompt or graft and are told apart by
    ``sample_index`` (0..N-1); ``seed`` is the sample's own seed when it was sampled (``None`` when greedy), and
    ``wall_s``/``energy_j`` are the problem's totals split evenly over its samples. ``layout`` is the query's layout
    after a graft (``answer``/``solve``, ``None`` for the baseline prompt). On a grafted sample ``example_id`` and
    ``example_answer`` name the grafted example and its key; on a similar route, ``copied`` says whether the
    extracted answer equals the example's answer (a copy, whatever the question asked).

    Program mode (:mod:`graftbench.programs.mode`): ``program`` is the program extracted from ``output`` and run in
    the sandbox (:meth:`graftbench.programs.sandbox.Sandbox.run`); ``exit_status`` its exit code (128 + N when killed by
    signal N, -9 when graftbench killed it, -1 when its text was over the limit and it was not run); ``stdout`` what
    it printed (at most the sandbox's ``output_bytes``, decoded as UTF-8) and ``stdout_sha256`` its hash;
    ``stderr_tail`` the end of its stderr; ``program_s`` the run's wall seconds (not counted in ``wall_s``);
    ``stopped`` why it did not end normally (``None``, ``timeout``, ``memory``, ``output``, ``crashed``,
    ``forbidden``); ``isolation`` how it was contained.
    ``extracted`` and ``correct`` then judge the last non-empty line of ``stdout``. All are ``None`` (and left out
    of :meth:`to_json`) for a sample that ran no program.

    ``thinking_tokens`` is how many of the ``decode_tokens`` were the model's reasoning (up to and including its
    closing delimiter; all of them when the output was cut inside it), for a run whose layout names reasoning
    delimiters (:attr:`graftbench.problems.prompts.PromptLayout.reasoning`); ``None`` (and left out of
    :meth:`to_json`) otherwise.
    """

    problem_id: str
    problem_sha256: str
    key: str
    mode: str
    route: str | None
    similarity: float | None
    fallback: str | None
    cue: str
    prefill_tokens: int
    prefill_tokens_saved: int
    artifact_id: str | None
    artifact_tokens: int
    logits_sha256: str
    output: str
    output_sha256: str
    extracted: str | None
    correct: bool
    finish_reason: str
    decode_tokens: int
    ttft_s: float
    wall_s: float
    energy_j: float
    certificate_sha256: str | None
    certify_s: float | None
    certified: bool | None
    sample_index: int = 0
    seed: int | None = None
    layout: str | None = None
    example_id: str | None = None
    example_answer: str | None = None
    copied: bool | None = None
    program: str | None = None
    exit_status: int | None = None
    stdout: str | None = None
    stdout_sha256: str | None = None
    stderr_tail: str | None = None
    program_s: float | None = None
    stopped: str | None = None
    isolation: str | None = None
    thinking_tokens: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready dict written to ``samples.jsonl`` and the manifest. A sample that ran no program leaves
        out :data:`PROGRAM_FIELDS`, so text-mode samples are written exactly as before program mode existed."""
        record = asdict(self)
        if self.program is None:
            for name in PROGRAM_FIELDS:
                del record[name]
        if self.thinking_tokens is None:
            del record["thinking_tokens"]  # a model that does not think: the sample as written before
        return record

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> "Sample":
        """Read a sample back (:data:`PROGRAM_FIELDS` may be absent); raises ``ValueError`` naming the missing or
        unexpected fields."""
        names = {f.name for f in fields(cls)}
        missing = sorted(names - set(record) - set(PROGRAM_FIELDS) - set(OPTIONAL_FIELDS))
        extra = sorted(set(record) - names)
        if missing or extra:
            raise ValueError(f"sample {record.get('problem_id')!r}: missing fields {missing}, unexpected {extra}")
        return cls(**record)

    @property
    def progress_label(self) -> str:
        """The progress line's tail: id, verdict and decode tokens."""
        name = self.problem_id if self.seed is None else self.sample_id
        stopped = f" ({self.stopped})" if self.stopped else ""
        return f"{name} {'✓' if self.correct else '✗'} {self.decode_tokens} tok{stopped}"

    @property
    def sample_id(self) -> str:
        """``<problem_id>#<sample_index>``: the sample's name in a manifest."""
        return f"{self.problem_id}#{self.sample_index}"
