"""Load a resolved model for the torch engine: GGUF weights de-quantized once by ``transformers`` and cached as
safetensors, a local folder or hub id through ``from_pretrained``, or a random-weights model, at a dtype and device."""

from __future__ import annotations

import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from ...store.tensor_hashing import tensors_sha256
from ...util.hub_access import OFFLINE_HINT, one_line
from ...settings import DEFAULT_DTYPE, DEFAULT_MODEL, cache_root
from ..models import (
    ModelError,
    ResolvedModel,
    _check_hub_model,
    _folder_weights_sha256,
    _load_cached_tokenizer,
    _save_checkpoint,
    _staging,
    _write_dequantized,
    dequantized_dir,
    family_tokenizer,
    gguf_weights_sha256,
    resolve_model,
    tokenizer_sha256,
)


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass
class LoadedModel:
    """A loaded causal LM with its tokenizer and fingerprints.

    ``weights_sha256`` is the GGUF file's SHA-256 (or, for folders, of the weight files' hashes);
    ``tokenizer_sha256`` hashes the serialized tokenizer and chat template. ``load_s`` is seconds spent in
    loading (imports excluded); ``from_cache`` says whether de-quantized weights were reused. A random-weights
    model (``random:<name>``) has ``weights_sha256`` of its generated tensors and its ``random_weights`` record.
    """

    spec: str
    resolved: ResolvedModel
    model: torch.nn.Module
    tokenizer: object
    dtype: str
    weights_sha256: str
    tokenizer_sha256: str
    load_s: float
    from_cache: bool
    random_weights: dict | None = None  # the pin's record of a random-weights model (graftbench.engine.torch.random_weights)


def cast_dir(folder: Path, dtype: str) -> Path:
    """Where the de-quantized checkpoint in ``folder`` keeps its copy cast to ``dtype`` (``folder`` itself for
    float32, the dtype it is written in)."""
    return folder if dtype == "float32" else folder / dtype


def _write_cast(model: torch.nn.Module, target: Path) -> None:
    """Save ``model`` (loaded from the float32 checkpoint in another dtype) as that dtype's cached copy ``target``
    (:func:`cast_dir`).

    Later loads map its bytes instead of casting 4-byte weights (Gemma 3 in bfloat16: 0.17-0.28 s against
    0.63-0.99 s for ``from_pretrained``, measured by hand here on 2026-12-02); the values are the ones the cast
    gives, every tensor in the dtype ``from_pretrained`` gave it (tested equal tensor by tensor). A copy that
    cannot be written (a full disk, a read-only cache) is skipped with a warning: the load has its model already.
    """
    try:
        with _staging(target) as staging:
            _save_checkpoint(model, staging)
    except OSError as exc:
        warnings.warn(f"could not cache the {target.name} copy of {target.parent} ({exc}); the next load casts again",
                      stacklevel=3)


def load_model(spec: str = DEFAULT_MODEL, dtype: str = DEFAULT_DTYPE, device: str = "cpu") -> LoadedModel:
    """Load a model and tokenizer in ``dtype`` (``float32`` or ``bfloat16``) onto ``device`` (a resolved torch
    device string, :func:`graftbench.engine.device.resolve`), in eval mode.

    A GGUF file is de-quantized to float32 once into the cache (:func:`dequantized_dir`); a load in another dtype
    casts that checkpoint and keeps the cast copy beside it (:func:`cast_dir`) for the next load. The weights are
    loaded on the CPU and then moved to ``device``. ``random:<name>[@seed]`` builds a random-weights model
    (:func:`load_random`).

    Raises :class:`ModelError` for an unknown dtype, a spec that cannot be resolved, a GGUF file that cannot be
    read or is damaged (:func:`graftbench.engine.models.check_gguf`: the message names the file and what is wrong),
    or a hub id that cannot be reached (the message says to pass a local folder or ``.gguf`` file instead).
    """
    if dtype not in DTYPES:
        raise ModelError(f"dtype '{dtype}' is not supported; choose one of {', '.join(DTYPES)}")
    from .random_weights import is_random

    if is_random(spec):
        return load_random(spec, dtype, device)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .attention import ATTENTION

    start = time.perf_counter()
    resolved = resolve_model(spec)
    from_cache = False
    if resolved.kind == "gguf":
        weights_sha = gguf_weights_sha256(resolved)
        folder = dequantized_dir(weights_sha)
        from_cache = (folder / "model.safetensors").is_file()
        if not from_cache:
            _write_dequantized(Path(resolved.path), folder)
            shutil.rmtree(cache_root() / "weights" / weights_sha, ignore_errors=True)  # the v1 copy, superseded
        cast = cast_dir(folder, dtype)
        cast_to_write = None if (cast / "model.safetensors").is_file() else cast
        source = str(folder if cast_to_write else cast)
    else:
        source, cast_to_write = resolved.path, None
        weights_sha = _folder_weights_sha256(Path(source)) if resolved.kind == "folder" else ""
    if resolved.kind == "hub":
        _check_hub_model(spec)
    try:
        # safetensors only: a folder's pytorch_model.bin would be unpickled by torch.load
        model = AutoModelForCausalLM.from_pretrained(source, dtype=DTYPES[dtype], use_safetensors=True,
                                                     attn_implementation=ATTENTION)
        if cast_to_write is not None:
            _write_cast(model, cast_to_write)
        if resolved.kind == "gguf":
            tokenizer, tokenizer_digest = _load_cached_tokenizer(folder)
        else:
            tokenizer = AutoTokenizer.from_pretrained(source)
            tokenizer_digest = tokenizer_sha256(tokenizer)
    except OSError as exc:
        raise ModelError(f"model '{spec}' could not be loaded ({one_line(exc)}); {OFFLINE_HINT}") from exc
    if resolved.kind == "hub":
        weights_sha = _hub_weights_sha256(model)
    model.eval()
    if device != "cpu":
        model.to(device)
    return LoadedModel(
        spec=spec,
        resolved=resolved,
        model=model,
        tokenizer=tokenizer,
        dtype=dtype,
        weights_sha256=weights_sha,
        tokenizer_sha256=tokenizer_digest,
        load_s=time.perf_counter() - start,
        from_cache=from_cache,
    )


def _hub_weights_sha256(model: torch.nn.Module) -> str:
    """SHA-256 over each state-dict entry in name order: its name (UTF-8) then its tensor's raw bytes."""
    entries = sorted(model.state_dict().items())
    return tensors_sha256(part for name, tensor in entries for part in (name.encode(), tensor))


def load_random(spec: str, dtype: str, device: str = "cpu") -> LoadedModel:
    """Build the random-weights model ``random:<name>[@seed]`` (:mod:`graftbench.engine.torch.random_weights`: weights drawn
    on the CPU, hashed, then moved to ``device``) with the tokenizer of its family's bundled model
    (:func:`family_tokenizer`).

    Raises :class:`ModelError` for a name that is not bundled, or a family tokenizer that cannot be found."""
    from . import random_weights
    from .attention import ATTENTION

    start = time.perf_counter()
    try:
        parsed = random_weights.parse_spec(spec)
    except random_weights.RandomModelError as exc:
        raise ModelError(str(exc)) from exc
    config = random_weights.load_config_dict(parsed.name)
    tokenizer, tokenizer_digest = family_tokenizer(config["_family_tokenizer"])
    model, weights_sha = random_weights.build(config, parsed.seed, DTYPES[dtype], ATTENTION)
    if device != "cpu":
        model.to(device)
    return LoadedModel(spec=spec, resolved=ResolvedModel(spec, "random", parsed.name), model=model,
                       tokenizer=tokenizer, dtype=dtype, weights_sha256=weights_sha, tokenizer_sha256=tokenizer_digest,
                       load_s=time.perf_counter() - start, from_cache=False,
                       random_weights=random_weights.pin_record(parsed, config))
