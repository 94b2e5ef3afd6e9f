"""Program mode (``--mode program``): the model writes one short Python program that prints only the final answer;
graftbench runs it in the sandbox (:mod:`graftbench.programs.sandbox`) and the verifier judges the last line it printed.

The layout is the one of the first program-mode probe (docs/program-mode.md): the problem, then the instruction "Write
one short Python program that prints only the final number.", then a ```` ```python ```` fence already opened, so that
the model's first token is code; the decode stops at the closing fence. On the baseline prompt the instruction is the
user's message (in the chat template where the tokenizer has one) and the fence opens the reply; after a graft (a new
problem, the ``solve`` layout) the query is ``Problem: ...``, the instruction and ``Solution: ```python``, like a
deposited program's text. A recurring problem (the ``answer`` layout) still answers in a few tokens after the answer
cue: it writes no program.

The layout's texts and the prompt and query they make live with the other prompt layouts in
:mod:`graftbench.problems.prompts` (``PROGRAM_*``, :func:`~graftbench.problems.prompts.program_query_text`) but are not
part of the pin (:class:`graftbench.problems.prompts.PromptLayout`), so that adding program mode
changed no artifact's fingerprint; a program-mode run records them in its settings (``program_layout``) instead, and a
run folder resumed under another layout is refused like any other change of settings.

Imports no torch: :mod:`graftbench.results.manifest` re-checks program verdicts from the recorded stdout with
:func:`program_verdict`, and never runs a program.
"""

from __future__ import annotations

from ..problems.prompts import PROGRAM_ANSWER_CUE, PROGRAM_CLOSE, PROGRAM_FENCE
from .sandbox import answer_line
from ..verify.answers import VERIFIER_VERSION, Verdict, verify_answer

# A program-mode sample's record of its program run (graftbench.results.samples.Sample); absent from a sample that ran
# none.
PROGRAM_FIELDS = ("program", "exit_status", "stdout", "stdout_sha256", "stderr_tail", "program_s", "stopped",
                  "isolation")


def extract_program(output: str) -> str:
    """The program in a decoded ``output`` (which starts inside the opened fence): the text before the first
    closing fence, trailing blanks removed, ending in one newline; ``""`` when it holds nothing but blanks. A
    program cut by the token budget is returned as it is (and usually fails to compile)."""
    code = output.split(PROGRAM_CLOSE, 1)[0].rstrip()
    return code + "\n" if code.strip() else ""


def solution_text(program: str) -> str:
    """The solution a verified program is deposited as (the ``{solution}`` of the deposit layout): the program in
    a ```` ```python ```` fence, so the deposit text shows the model a verified program and its final answer."""
    return PROGRAM_FENCE + program.rstrip("\n") + "\n" + PROGRAM_CLOSE


def program_verdict(stdout: str | None, stopped: str | None, key: str, version: int = VERIFIER_VERSION) -> Verdict:
    """Judge a program's run: the last non-empty line of ``stdout`` after :data:`PROGRAM_ANSWER_CUE`, against
    ``key`` (:func:`graftbench.verify.answers.verify_answer` under verifier ``version``). A program that did not end
    normally (``stopped`` not ``None``) or printed nothing has no answer: ``Verdict(None, False)``. Never raises
    on any text; raises ``ValueError`` only for an unknown ``version``."""
    line = answer_line(stdout) if isinstance(stdout, str) and stopped is None else None
    if line is None:
        verify_answer("", key, version=version)  # still refuses an unknown version
        return Verdict(None, False)
    return verify_answer(line, key, cue=PROGRAM_ANSWER_CUE, version=version)


def sample_verdict(sample: dict, version: int = VERIFIER_VERSION,
                   reasoning: tuple[str, str] | None = None) -> Verdict:
    """The verdict of a recorded sample (a :meth:`graftbench.results.samples.Sample.to_json` dict, possibly edited):
    from its recorded ``stdout`` and ``stopped`` when it holds any of :data:`PROGRAM_FIELDS` (a program-mode sample),
    else from its ``output`` after its ``cue``, past the reasoning delimited by ``reasoning`` (the run's layout's;
    verifier 4 on); against its ``key``, under verifier ``version``. Never raises on any content; raises
    ``ValueError`` only for an unknown ``version`` or malformed ``reasoning``."""
    key = sample.get("key") if isinstance(sample.get("key"), str) else ""
    if any(name in sample for name in PROGRAM_FIELDS):
        stdout = sample.get("stdout")
        return program_verdict(stdout if isinstance(stdout, str) else None, sample.get("stopped"), key, version)
    output = sample.get("output")
    return verify_answer(output if isinstance(output, str) else "", key, cue=sample.get("cue") or "",
                         version=version, reasoning=reasoning)
