"""The prompts' token ids, built from the pinned layout with graftbench's tokenizer: the same for every engine."""

from __future__ import annotations


class PromptIds:
    """Token id streams of the baseline prompt, the graft query and the deposit text. A mixin: the class using it
    has ``tokenizer`` (a ``transformers`` tokenizer) and ``config`` (a :class:`graftbench.engine.pin.PinnedConfig`,
    whose ``layout`` holds the texts)."""

    def solve_prompt_ids(self, problem: str) -> list[int]:
        """Baseline prompt: the chat template (with generation prompt) where the tokenizer has one, else the
        instruction as plain text. Returns token ids."""
        text = self.config.layout.solve_instruction.format(problem=problem)
        if self.tokenizer.chat_template:
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=False
            )
            return list(ids["input_ids"] if isinstance(ids, dict) else ids)
        return self.tokenizer(text + "\n\nSolution:").input_ids

    def program_prompt_ids(self, problem: str) -> list[int]:
        """Program mode's baseline prompt: the problem and the program instruction as the user's message (chat
        template with generation prompt where the tokenizer has one, else plain text), then the opened
        ```` ```python ```` fence, so the first decoded token is code. Returns token ids."""
        from ..problems.prompts import PROGRAM_FENCE, program_prompt_text

        text = program_prompt_text(problem)
        if self.tokenizer.chat_template:
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=False
            )
            ids = list(ids["input_ids"] if isinstance(ids, dict) else ids)
            return ids + self.tokenizer(PROGRAM_FENCE, add_special_tokens=False).input_ids
        return self.tokenizer(text + "\n\n" + PROGRAM_FENCE).input_ids

    def program_query_ids(self, problem: str) -> list[int]:
        """Program mode's query after a graft for a new problem
        (:func:`graftbench.problems.prompts.program_query_text`), without start tokens: it follows an artifact."""
        from ..problems.prompts import program_query_text

        return self.tokenizer(program_query_text(problem), add_special_tokens=False).input_ids

    def deposit_ids(self, problem: str, answer: str, solution: str) -> list[int]:
        """Token ids of a deposit text in the pinned layout, with the tokenizer's start tokens (e.g. BOS)."""
        return self.tokenizer(self.config.layout.deposit_text(problem, answer, solution)).input_ids

    def query_ids(self, problem: str, layout: str = "answer") -> list[int]:
        """Token ids of the graft query in ``layout`` (``answer``: the problem, then the answer cue; ``solve``: the
        problem, then the solution cue), without start tokens: it follows an artifact. Raises ``ValueError`` for
        another layout."""
        text = self.config.layout.query_text(problem, layout)
        return self.tokenizer(text, add_special_tokens=False).input_ids
