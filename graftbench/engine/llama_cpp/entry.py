"""The llama.cpp engine as the registry opens it (:class:`graftbench.engine.base.EngineFactory`): its capabilities,
the options it takes and how it loads a GGUF file; importing this module imports neither llama.cpp nor torch."""

from __future__ import annotations

import os

from . import CAPABILITIES, NAME
from ..base import EngineOpenError, EngineOptions, EngineSession


class LlamaCppEngineFactory:
    """The llama.cpp engine: a GGUF file run by llama.cpp with its weights as stored
    (:func:`graftbench.engine.llama_cpp.session.open_llama_session`; needs the ``llama`` extra)."""

    name = NAME
    capabilities = CAPABILITIES
    options = frozenset({"threads", "kv_type", "flash_attn", "n_ctx"})
    pinned_dtype = "gguf"  # the weights as the file stores them
    benchmark_module = "graftbench.engine.llama_cpp.bench_ops"  # its benchmark operations (base.BENCHMARK)
    isa_variable = "GRAFTBENCH_LLAMA_BUILD"  # the environment variable that picks a process's build (its isa pin)

    def open(self, options: EngineOptions) -> EngineSession:
        """Load the GGUF file ``options.model`` with ``options.kv_type`` and flash attention (default: on for a
        quantized KV cache) and pin it. Raises :class:`graftbench.engine.models.ModelError` for a model that is not
        a GGUF file, ``ValueError`` for a bad option and :class:`graftbench.engine.base.EngineOpenError` when the
        extra is missing, the file is absent or llama.cpp cannot load it."""
        try:
            from .engine import DEFAULT_N_CTX, LlamaCppError
            from .session import open_llama_session
        except ImportError as exc:
            raise EngineOpenError(f"--engine llama.cpp: {exc}") from exc
        try:
            return open_llama_session(options.model, chunk_size=options.chunk_size, threads=options.threads,
                                      kv_type=options.kv_type, flash_attn=flash_attn_of(options),
                                      n_ctx=options.n_ctx or DEFAULT_N_CTX)
        except (FileNotFoundError, LlamaCppError) as exc:
            raise EngineOpenError(str(exc)) from exc

    def loading_text(self, options: EngineOptions) -> str:
        """``loading MODEL on llama.cpp (KV TYPE)``."""
        return f"loading {options.model} on llama.cpp (KV {options.kv_type})"

    def fixed_pin(self) -> dict:
        """``dtype`` ``gguf`` (the weights as stored) and ``isa`` the build this process loads
        (:data:`graftbench.engine.llama_cpp.portable_build.ENV_VAR`, ``native`` when unset)."""
        from .portable_build import ENV_VAR

        return {"dtype": self.pinned_dtype, "isa": os.environ.get(ENV_VAR) or "native"}

    def adopt_pin(self, pin: dict) -> None:
        """Load the llama.cpp build the recorded pin names (its ``engine.build``: ``portable``; none: ``native``;
        :func:`graftbench.engine.llama_cpp.portable_build.select`). Raises
        :class:`graftbench.engine.base.EngineOpenError` when it cannot be loaded."""
        from .portable_build import LlamaBuildError, select

        try:
            select(str((pin.get("engine") or {}).get("build", "native")))
        except LlamaBuildError as exc:
            raise EngineOpenError(str(exc)) from exc

    def why_not_runnable(self, pin: dict) -> str | None:
        """A portable build the pin names that was not made here (``make llama-portable``); another build or
        version is no reason: the replay compares it (not comparable if another)."""
        if (pin.get("engine") or {}).get("build") != "portable":
            return None
        from .portable_build import LlamaBuildError, identity

        try:
            identity()
        except LlamaBuildError as exc:
            return str(exc)
        return None

    def replay_options(self, pin: dict) -> dict:
        """The :class:`graftbench.engine.base.EngineOptions` fields that reopen llama.cpp under ``pin`` (its
        ``engine`` dict holds the KV type, flash attention and context size)."""
        engine = pin["engine"]
        return {"model": pin["model"], "chunk_size": pin["chunk_size"], "threads": pin["threads"],
                "kv_type": engine["type_k"], "flash_attn": engine["flash_attn"], "n_ctx": engine["n_ctx"]}


def flash_attn_of(options: EngineOptions) -> bool:
    """Flash attention as asked, else on for a quantized KV cache (which needs it) and off for f16."""
    return options.flash_attn if options.flash_attn is not None else options.kv_type != "f16"


ENGINE = LlamaCppEngineFactory()
