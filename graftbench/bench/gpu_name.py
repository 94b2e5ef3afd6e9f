"""The prepared GPU script's helpers: the folder a GPU's manifests go in, and the tokenizer files that travel.

The manifests of a CUDA run go under ``manifests/<gpu>/`` (its TTFT result under ``results/<gpu>/bench/``),
``<gpu>`` the device's name as a plain folder name (``nvidia-h200``, a MIG slice's profile appended): a kind of
machine, as :mod:`graftbench.results.layout` lays the results out. The GPU host has no network and no bundled GGUF
files: the random-weights models' tokenizers travel as their files alone, in the cache layout
:func:`graftbench.engine.models.family_tokenizer` reads.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

# The files of a de-quantized cache folder that make its tokenizer (never the weights).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "tokenizer.sha256",
                   "special_tokens_map.json")


def folder_name(device: str) -> str:
    """The ``results/`` folder of ``device`` (``cuda``, ``cuda:N``; ``cpu`` gives ``cpu``): the lowercased
    device name with runs of other characters as ``-``."""
    from ..engine.device import resolve

    resolved = resolve(device)
    if resolved == "cpu":
        return "cpu"
    import torch

    return re.sub(r"[^a-z0-9.]+", "-", torch.cuda.get_device_name(torch.device(resolved)).lower()).strip("-")


def copy_tokenizers(cache: str, families: tuple[str, ...] = ("gemma3-270m", "qwen2.5-coder-0.5b")) -> list[Path]:
    """Copy the tokenizer files of each bundled family alias (its de-quantized cache folder, made first when
    missing) into ``cache`` in the same layout; returns the folders written. Raises
    :class:`graftbench.engine.models.ModelError` when an alias's tokenizer cannot be made (its packages missing)."""
    from ..engine.models import ALIASES, dequantized_dir, family_tokenizer

    written = []
    for alias in families:
        family_tokenizer(alias)  # makes the cache folder when it is missing
        source = dequantized_dir(ALIASES[alias].sha256)
        target = Path(cache) / source.parent.name / source.name
        target.mkdir(parents=True, exist_ok=True)
        for name in TOKENIZER_FILES:
            if (source / name).is_file():
                shutil.copy2(source / name, target / name)
        written.append(target)
    return written
