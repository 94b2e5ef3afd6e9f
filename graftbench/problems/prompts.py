"""The prompt layouts: the texts that turn problems into token streams (the ``PromptLayout`` is part of the pin;
the program layout is not)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Prompt layouts. The deposit text states the problem, then at once its final answer, then the solution ending in
# the same final-answer line. It serves both query layouts: a recurring problem's query repeats the problem and ends
# with the answer cue, so a small model copies the answer (measured on smollm2-135m over AIME 2024: 29 of 30 in
# this layout against 23-24 of 30 in a chat layout; 29 of 30 again with the closing line added, against 27 of 30
# with the answer only at the end);
# a new problem's query ends with the solution cue, and the model writes a solution that ends like the example's.
ANSWER_CUE = "Final answer:"
DEPOSIT_LAYOUT = ("Problem: {problem}\n" + ANSWER_CUE + " {answer}\nSolution: {solution}\n" + ANSWER_CUE
                  + " {answer}\n\n")
QUERY_LAYOUT = "Problem: {problem}\n" + ANSWER_CUE
SOLVE_INSTRUCTION = "Solve the following problem. Put the final answer in \\boxed{{}}.\n\n{problem}"
# The solve layout (a new problem after a grafted worked example, Minerva-style): the query ends at the solution
# cue, the model writes a solution and its final-answer line, like the example; the decode stops once that line is
# complete, or when the model starts another problem.
SOLUTION_CUE = "Solution:"
SOLVE_QUERY_LAYOUT = "Problem: {problem}\n" + SOLUTION_CUE
SOLVE_STOP = r"Final answer:[^\n]*\S[^\n]*\n|\nProblem:"
QUERY_LAYOUTS = ("answer", "solve")

# Reasoning delimiters: what a thinking model writes its reasoning between before it answers. The verifier reads the
# answer only after them (graftbench.verify.reasoning, from verifier 4 on). A model whose name holds one of these
# markers gets its delimiters in its layout (:func:`reasoning_delimiters`); the layout of any other model names
# none, and its pin is the one it had before reasoning delimiters existed.
THINK_TAGS = ("<think>", "</think>")
REASONING_MODELS = (("qwen3", THINK_TAGS), ("qwq", THINK_TAGS), ("deepseek-r1", THINK_TAGS),
                    ("r1-distill", THINK_TAGS), ("smollm3", THINK_TAGS), ("magistral", ("[THINK]", "[/THINK]")))


def reasoning_delimiters(model: str) -> tuple[str, str] | tuple[()]:
    """The ``(open, close)`` reasoning delimiters of the model named ``model`` (an alias, hub id or path), by the
    first marker of :data:`REASONING_MODELS` its lower-cased name holds; ``()`` for a model that does not think."""
    name = str(model).lower()
    return next((pair for marker, pair in REASONING_MODELS if marker in name), ())

# Program mode (graftbench.programs.mode): the layout of the first probe on qwen2.5-coder-0.5b (docs/program-mode.md).
# The baseline's user message is the problem and the instruction, and the reply opens a ```python fence so the first
# decoded token is code; after a graft a new problem's query mirrors a deposited program's text. The decode stops at
# the closing fence. Not part of the pin (adding program mode changed no artifact's fingerprint): a program-mode run
# records PROGRAM_LAYOUT in its settings.
PROGRAM_INSTRUCTION = "Write one short Python program that prints only the final number."
PROGRAM_FENCE = "```python\n"
PROGRAM_CLOSE = "```"
PROGRAM_PROMPT = "{problem}\n\n" + PROGRAM_INSTRUCTION
PROGRAM_QUERY = "Problem: {problem}\n" + PROGRAM_INSTRUCTION + "\nSolution: " + PROGRAM_FENCE
PROGRAM_ANSWER_CUE = ANSWER_CUE + "\n"  # what the verifier reads before a program's last printed line
PROGRAM_LAYOUT = {"prompt": PROGRAM_PROMPT, "fence": PROGRAM_FENCE, "close": PROGRAM_CLOSE, "query": PROGRAM_QUERY,
                  "answer_cue": PROGRAM_ANSWER_CUE}


def program_prompt_text(problem: str) -> str:
    """Program mode's baseline instruction for ``problem``
    (:meth:`graftbench.engine.torch.session.TorchSession.program_prompt_ids` adds the fence)."""
    return PROGRAM_PROMPT.format(problem=problem)


def program_query_text(problem: str) -> str:
    """Program mode's query after a graft for a new ``problem``: the problem, the instruction and the opened
    fence."""
    return PROGRAM_QUERY.format(problem=problem)


@dataclass(frozen=True)
class PromptLayout:
    """The text templates that turn problems into token streams (part of the pin).

    ``query``/``answer_cue``/``query_stop``: the ``answer`` layout (a recurring problem answers after the cue, up to
    a newline). ``solve_query``/``solve_stop``: the ``solve`` layout (a new problem is solved in full after the
    grafted example; ``solve_stop`` is a regular expression on the decoded text). ``reasoning``: the model's
    reasoning delimiters ``(open, close)`` (:func:`reasoning_delimiters`), ``()`` for a model that does not think;
    an empty one is left out of the pin (:meth:`graftbench.engine.pin.PinnedConfig.to_dict`), so every pin recorded
    before it existed stays. Raises ``ValueError`` for a ``reasoning`` that is not two non-empty strings.
    """

    solve_instruction: str = SOLVE_INSTRUCTION
    deposit: str = DEPOSIT_LAYOUT
    query: str = QUERY_LAYOUT
    answer_cue: str = ANSWER_CUE
    query_stop: str = "\n"
    solve_query: str = SOLVE_QUERY_LAYOUT
    solve_stop: str = SOLVE_STOP
    reasoning: tuple[str, ...] = ()

    def __post_init__(self):
        pair = tuple(self.reasoning)  # a recorded layout read back from JSON holds a list
        if pair and (len(pair) != 2 or not all(isinstance(d, str) and d for d in pair)):
            raise ValueError(f"reasoning delimiters must be two non-empty strings (open, close), not {pair!r}")
        object.__setattr__(self, "reasoning", pair)

    @property
    def reasoning_pair(self) -> tuple[str, str] | None:
        """:attr:`reasoning` as the verifier takes it: ``(open, close)``, or ``None`` for a model that does not
        think."""
        return (self.reasoning[0], self.reasoning[1]) if self.reasoning else None

    def deposit_text(self, problem: str, answer: str, solution: str) -> str:
        """The text a verified solution is deposited as (its KV state is the artifact)."""
        return self.deposit.format(problem=problem, answer=answer, solution=solution)

    def query_text(self, problem: str, layout: str) -> str:
        """The text that follows a graft: ``layout`` ``answer`` or ``solve``. Raises ``ValueError`` for another."""
        if layout not in QUERY_LAYOUTS:
            raise ValueError(f"layout {layout!r} is not one of {', '.join(QUERY_LAYOUTS)}")
        return (self.query if layout == "answer" else self.solve_query).format(problem=problem)

    def cue(self, layout: str) -> str:
        """What the verifier reads before the output: the answer cue for ``answer`` (the output continues it),
        nothing for ``solve`` (the output writes its own final-answer line)."""
        return self.answer_cue if layout == "answer" else ""

    def stop(self, layout: str) -> str | re.Pattern:
        """The decode's stop for ``layout``: the newline after the answer, or the compiled ``solve_stop``."""
        return self.query_stop if layout == "answer" else re.compile(self.solve_stop)
