"""Reasoning blocks in a model's output: the text a thinking model writes between its reasoning delimiters
(``<think>`` ... ``</think>``) before it answers. From verifier 4 on the answer is read only from the text after the
reasoning; an output cut inside its reasoning has no answer (lighteval's ``--remove-reasoning-tags``,
lm-evaluation-harness's ``think_end_token`` do the same).

The delimiters are named by the prompt layout of the model's run (:class:`graftbench.problems.prompts.PromptLayout`
``reasoning``); this module receives them as arguments, so it imports nothing from ``problems``. Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

THINK_TAGS = ("<think>", "</think>")  # the delimiters of Qwen3, QwQ, DeepSeek-R1 and the models distilled from it


@dataclass(frozen=True)
class ReasoningSplit:
    """An output split at its reasoning: ``answer_start`` is the index (characters) of the first character after the
    last closing delimiter (0 when the text has no reasoning), ``cut`` is true when a reasoning block was opened and
    never closed (the answer text is then empty: the output stopped while thinking)."""

    answer_start: int
    cut: bool

    def answer_text(self, text: str) -> str:
        """The part of ``text`` an answer may be read from: after the reasoning, nothing when :attr:`cut`."""
        return "" if self.cut else text[self.answer_start:]


def check_delimiters(delimiters: Sequence[str] | None) -> tuple[str, str] | None:
    """``delimiters`` as an ``(open, close)`` pair of non-empty strings, ``None`` for none (an empty sequence
    included); raises ``ValueError`` naming what is wrong with another value."""
    if delimiters is None or (not isinstance(delimiters, str) and len(delimiters) == 0):
        return None
    if isinstance(delimiters, str) or len(delimiters) != 2 or not all(isinstance(d, str) and d for d in delimiters):
        raise ValueError(f"reasoning delimiters must be two non-empty strings (open, close), not {delimiters!r}")
    return delimiters[0], delimiters[1]


def split_reasoning(text: str, delimiters: Sequence[str] | None) -> ReasoningSplit:
    """Where the reasoning of ``text`` ends, under ``delimiters`` ``(open, close)`` (``None``: no reasoning).

    The answer follows the *last* closing delimiter (a model that opens its block in the prompt writes only the
    closing one). Without a closing delimiter, an opening one means the output was cut while reasoning
    (:attr:`ReasoningSplit.cut`); without either, the whole text is the answer text. Raises ``ValueError`` for
    malformed ``delimiters`` (:func:`check_delimiters`)."""
    pair = check_delimiters(delimiters)
    if pair is None or not isinstance(text, str):
        return ReasoningSplit(0, False)
    opening, closing = pair
    end = text.rfind(closing)
    if end >= 0:
        return ReasoningSplit(end + len(closing), False)
    return ReasoningSplit(0, opening in text)


def thinking_tokens(token_ids: Sequence[int], decode: Callable[[Sequence[int]], str], cue: str,
                    delimiters: Sequence[str] | None) -> int | None:
    """How many of the decoded ``token_ids`` are reasoning (tokens): those up to and including the token that
    completes the last closing delimiter of ``cue + decode(ids)``; all of them when the output was cut inside its
    reasoning; 0 when it has none. ``None`` when ``delimiters`` is ``None`` (the layout names no reasoning).

    ``decode`` turns a prefix of ids into text (the run's tokenizer). A binary search over prefixes: about
    log2(n) decodes. Raises ``ValueError`` for malformed ``delimiters``."""
    pair = check_delimiters(delimiters)
    if pair is None:
        return None
    text = cue + decode(list(token_ids))
    split = split_reasoning(text, pair)
    if split.cut:
        return len(token_ids)
    if split.answer_start == 0:
        return 0
    closing = pair[1]
    count = text.count(closing)
    if cue.count(closing) >= count:
        return 0  # the reasoning ended in the prompt: no decoded token is reasoning
    low, high = 1, len(token_ids)  # the shortest prefix whose text holds every closing delimiter of the whole
    while low < high:
        middle = (low + high) // 2
        if (cue + decode(list(token_ids[:middle]))).count(closing) >= count:
            high = middle
        else:
            low = middle + 1
    return low
