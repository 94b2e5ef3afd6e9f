"""A loaded model with its pinned config, and the prompt token streams built from the pinned layout."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import forward
from .pin import PinnedConfig, build_config, configure_torch
from .kv_pool import NO_POOL, PoolReport, reserve_tokens
from .models import LoadedModel, load_model
from ..settings import DEFAULT_CHUNK_SIZE, DEFAULT_DTYPE, DEFAULT_MODEL


@dataclass
class Session:
    """Everything a command needs to run the model: weights, tokenizer, EOS ids and the pinned config."""

    loaded: LoadedModel
    config: PinnedConfig
    eos_ids: set[int]
    kv_pool: PoolReport = NO_POOL

    @property
    def model(self):
        return self.loaded.model

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    @property
    def device(self) -> str:
        """The torch device the weights live on (``cpu``, ``cuda:N``); the pin records only its kind."""
        return str(forward.model_device(self.model))

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

    @property
    def context_window(self) -> int:
        """The model's maximum positions (tokens)."""
        return int(getattr(self.model.config.get_text_config(), "max_position_embeddings", 8192))


def open_session(model: str = DEFAULT_MODEL, dtype: str = DEFAULT_DTYPE, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 threads: int | None = None, kv_pool_tokens: int = 0, device: str = "cpu") -> Session:
    """Load ``model`` in ``dtype`` and pin the config. ``threads`` sets torch's intra-op thread count (part of the pin).
    The instruction-set pin is the one this process was started under (:func:`graftbench.util.isa.apply`).
    ``kv_pool_tokens`` > 0 faults in KV memory for that many tokens once, after the load
    (:mod:`graftbench.engine.kv_pool`: a fresh process's first graft then reads into resident pages); the pool does not
    change any logits. ``device`` is a torch device string (``cpu``, ``cuda:N``;
    :func:`graftbench.engine.device.resolve`): on CUDA the CUDA pin's settings are made before the model loads
    (:func:`graftbench.engine.cuda_pin.configure`) and recorded in the pin.

    Raises :class:`graftbench.engine.models.ModelError` for a model that cannot be loaded, ``ValueError`` for a negative
    ``kv_pool_tokens``.
    """
    if kv_pool_tokens < 0:
        raise ValueError(f"kv_pool_tokens must be >= 0, got {kv_pool_tokens}")
    configure_torch()
    if threads:
        torch.set_num_threads(threads)
    if device != "cpu":
        from .cuda_pin import configure

        configure()
    loaded = load_model(model, dtype=dtype, device=device)
    config = build_config(loaded, chunk_size=chunk_size)
    pool = reserve_tokens(loaded.model, kv_pool_tokens)
    return Session(loaded, config, forward.eos_token_ids(loaded.model, loaded.tokenizer), pool)
