"""A record that a cached tokenizer folder was checked once, so that later loads skip re-serializing it.

:func:`graftbench.engine.torch.loading.load_model` builds a cached GGUF model's tokenizer with the ``tokenizers`` library and
accepts it only when its serialized form hashes to the digest recorded when the folder was written (the tokenizer
as its ``transformers`` class builds it). Serializing and hashing costs about 0.7 s a load for Gemma 3's 33 MB
``tokenizer.json`` (by hand on an Intel Xeon, 2026-12-03). That result is a function of the files read and of the
two libraries that build and serialize the tokenizer, so after one check that passed, :data:`RECORD` keeps the
SHA-256 of each file, both library versions and the digest; a load whose files and versions match it takes the
digest from it. Any other file content, library version, or an unreadable record means a full check again.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

from ..util.durable import write_file_atomic
from ..util.hashing import sha256_file

RECORD = "tokenizer.checked.json"
FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "tokenizer.sha256")
LIBRARIES = ("tokenizers", "transformers")


def _state(folder: Path) -> dict:
    """What the check's result depends on: each of :data:`FILES` present in ``folder`` with its SHA-256 (absent
    files left out) and the installed versions of :data:`LIBRARIES`."""
    files = {name: sha256_file(folder / name) for name in FILES if (folder / name).is_file()}
    return {"files": files, "libraries": {name: version(name) for name in LIBRARIES}}


def checked_digest(folder: Path) -> str | None:
    """The tokenizer digest a passed check recorded in ``folder``, when the folder's files and the installed
    libraries are the ones it was recorded with; ``None`` when there is no record, it cannot be read or parsed, or
    anything it depends on changed."""
    try:
        record = json.loads((folder / RECORD).read_text())
        digest = record.pop("digest")
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return None
    return digest if isinstance(digest, str) and record == _state(folder) else None


def record_check(folder: Path, digest: str) -> None:
    """Record that the tokenizer in ``folder`` serialized to ``digest`` (a check that passed). A folder that cannot
    be written (read-only cache, full disk) keeps no record: later loads check in full, as before."""
    body = json.dumps({**_state(folder), "digest": digest}, indent=1, sort_keys=True).encode()
    try:
        write_file_atomic(folder / RECORD, body)
    except OSError:
        pass
