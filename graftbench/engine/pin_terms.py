"""The pin's fields in each engine's own terms, and the option that sets each: the words of a pin-mismatch message.

A pin (:meth:`graftbench.engine.pin.PinnedConfig.to_dict`) has the same field names on every engine, but not the same
meaning: ``chunk_size`` is torch's prefill forward size and llama.cpp's ``n_batch = n_ubatch``, ``dtype`` is
``gguf`` on llama.cpp (the file's own types), and a llama.cpp pin's ``engine`` dict holds its build and context
settings. :func:`pin_differences` names each field in which a store's pin differs from a run's, as the engine that
made the store calls it, with the option that gives the run the store's value where an option does (``--chunk-size
64``, ``--worker-threads 2``), and nothing where none does (library versions, the CPU). Two engines are one
difference (``--engine``), never shown as two dtypes.

Imports no torch: the Ray driver and the pre-flight use it before any model loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from ..results.pin_engine import ENGINE_WITHOUT_SECTION, engine_of

TORCH = ENGINE_WITHOUT_SECTION  # the torch engine's name: its pins have no engine section
LLAMA = "llama.cpp"
SHOWN_CHARS = 40  # most characters of a recorded value shown in a message (hashes and long strings are cut)


@dataclass(frozen=True)
class Term:
    """One pin field as an engine names it: ``words``, and ``option`` (a command-line option or environment
    setting that gives a run the value, ``{value}`` standing for it and ``{model}`` for the store's model; ``None``
    where nothing does); ``ray_option`` replaces ``option`` for a run over Ray workers (``None``: the same)."""

    words: str
    option: str | None = None
    ray_option: str | None = None


_COMMON = {
    "weights_sha256": Term("weights (SHA-256)", "--model {model}"),
    "tokenizer_sha256": Term("tokenizer (SHA-256)", "--model {model}"),
    "layout": Term("prompt layout (a layout of another graftbench version)"),
    "libraries": Term("library versions (install the versions shown)"),
    "machine": Term("machine architecture"),
    "random_weights": Term("random-weights draw", "--model {model}"),
}
# Each engine's fields: a field absent from its table is not compared (it repeats another on that engine).
TERMS: Mapping[str, Mapping[str, Term]] = MappingProxyType({
    TORCH: MappingProxyType({
        **_COMMON,
        "dtype": Term("dtype", "--dtype {value}"),
        "device": Term("device", "--device {value}"),
        "threads": Term("torch threads", "OMP_NUM_THREADS={value} in the environment", "--worker-threads {value}"),
        "chunk_size": Term("chunk size (tokens per prefill forward)", "--chunk-size {value}"),
        "isa": Term("instruction-set pin", "--isa {value}"),
        "cpu_capability": Term("CPU capability torch runs at (another CPU, or another --isa)"),
        "attn_implementation": Term("attention implementation (another graftbench version)"),
        "cache_class": Term("KV cache class (another graftbench version)"),
        "accelerator": Term("CUDA pin (GPU, driver, toolkit)"),
    }),
    LLAMA: MappingProxyType({
        **_COMMON,
        "weights_sha256": Term("GGUF file (SHA-256)", "--model {model}"),
        "threads": Term("llama.cpp threads", "OMP_NUM_THREADS={value} in the environment"),
        "chunk_size": Term("n_batch = n_ubatch (tokens per llama_decode call)", "--chunk-size {value}"),
        "isa": Term("llama.cpp build (native: compiled for its CPU; portable: one fixed instruction set)",
                    "GRAFTBENCH_LLAMA_BUILD={value} in the environment"),
        "cpu_capability": Term("llama.cpp build's CPU features (its system info, or the portable build's instruction "
                               "sets)"),
        "engine.build_cmake_args": Term("portable build's CMake options (rebuild with make llama-portable)"),
        "engine.build_library_sha256": Term("portable build's libraries (SHA-256; rebuild with make llama-portable)"),
        "engine.build_compiler": Term("portable build's compiler"),
        "engine.llama_cpp_python": Term("llama-cpp-python version (the llama.cpp build)"),
        "engine.n_ctx": Term("context size (tokens)"),
        "engine.flash_attn": Term("flash attention", "--flash-attn / --no-flash-attn"),
        "engine.type_k": Term("KV cache type", "--kv-type {value}"),
        "engine.extra_buffers": Term("weight repacking (extra buffers)"),
        "engine.swa_full": Term("sliding-window cache mode"),
    }),
})


def _flat(pin: dict) -> dict:
    """The pin's fields, with an ``engine`` dict's fields as ``engine.<name>``."""
    flat = {k: v for k, v in pin.items() if k != "engine"}
    engine = pin.get("engine")
    if isinstance(engine, dict):
        flat.update({f"engine.{k}": v for k, v in engine.items()})
    return flat


def shown(value) -> str:
    """A recorded value for a message: a string as it is, a SHA-256 cut to 12 hex digits, anything cut to
    :data:`SHOWN_CHARS` characters."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) == 64 and all(c in "0123456789abcdef" for c in text):
        return text[:12]
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 1] + "…"


def _option(term: Term, field: str, value, model: str, ray: bool) -> str | None:
    template = term.ray_option if ray and term.ray_option else term.option
    if template is None:
        return None
    if field == "engine.flash_attn":
        return "--flash-attn" if value else "--no-flash-attn"
    return template.format(value=value, model=model)


def _difference(term: Term, field: str, held, run, model: str, ray: bool) -> str:
    if isinstance(held, dict) and isinstance(run, dict):  # library versions, the CUDA pin: name the entries
        names = sorted(k for k in set(held) | set(run) if held.get(k) != run.get(k))
        inner = ", ".join(f"{k} {shown(held.get(k))} (this run {shown(run.get(k))})" for k in names)
        return f"{term.words}: {inner}"
    option = _option(term, field, held, model, ray)
    fix = f": pass {option}" if option and not option.startswith(("OMP_", "GRAFTBENCH_")) else f": set {option}" if option else ""
    return f"{term.words} {shown(held)} (this run {shown(run)}{fix})"


def pin_differences(held: dict, run: dict, ray: bool = False) -> list[str]:
    """Each field in which the pin ``held`` (a store's, possibly partial: only the fields its records hold) differs
    from the run's pin ``run`` (possibly partial: only the fields known before the model loads), in the terms of
    ``held``'s engine, with the option that gives the run ``held``'s value where one does (``ray``: a run over Ray
    workers, whose threads are ``--worker-threads``). Only fields both pins hold are compared. Two engines give one
    difference, the engine. Empty when no compared field differs."""
    engine, run_engine = engine_of(held), engine_of(run)
    if engine != run_engine:
        return [f"engine {shown(engine)} (this run {shown(run_engine)}: pass --engine {shown(engine)})"]
    terms = TERMS.get(engine, TERMS[TORCH])
    flat_held, flat_run = _flat(held), _flat(run)
    model = shown(held.get("model", "?"))
    return [_difference(terms[field], field, flat_held[field], flat_run[field], model, ray)
            for field in terms if field in flat_held and field in flat_run and flat_held[field] != flat_run[field]]
