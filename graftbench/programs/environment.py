"""The program environment: the only files a model-written program can see, copied out of the installation graftbench
runs in into a read-only folder of their own (one Python interpreter, its standard library and :data:`PACKAGES`), with
a reduced ``/etc``.

Program mode scores a program's printed answer against the key, so the program must not reach graftbench (whose
problem-set generators it is scored on), the environment graftbench runs in (every other installed package), the
problem files, the store, run folders or the host's ``/etc``. The sandbox (:mod:`graftbench.programs.bwrap`) binds
only what an :class:`Environment` lists.

A build (:func:`build`, ``make program-env``, ``python -m graftbench.programs.environment``) copies:

- the interpreter (the real file behind ``sys.executable``) and the ``libpython`` files beside its base installation;
- the standard library, less :data:`STDLIB_LEFT_OUT` (other packages' ``site-packages``, the test suite, the GUI
  modules, ``ensurepip``'s bundled wheels, the static library);
- each package of :data:`PACKAGES` as its installer recorded it (the files its ``RECORD`` names, bytecode included);
- an ``/etc`` of three generated files (:func:`etc_files`: ``passwd`` and ``group`` naming root and the sandbox's
  user, ``nsswitch.conf`` reading them).

It goes into ``<sys.prefix>/graftbench-program-env/<key>/``: ``prefix/`` (bound inside the sandbox at the base
interpreter's own path, where the interpreter's run path finds ``libpython``), ``etc/`` (bound at ``/etc``) and
``environment.json`` (:class:`Environment`'s record, written last). ``key`` is the first 32 hex digits of a SHA-256
over every source file's destination, size, modification time and mode, :data:`PACKAGES`, :data:`FORMAT` and
``/etc``'s text: a changed source
(an upgraded package, a rebuilt interpreter) gives another key, so a stale build is never used; :func:`load` then
refuses (:class:`ProgramEnvironmentError`) until it is rebuilt. The build records the SHA-256 of its own content
(every file's path, mode and bytes) and the system library folders the interpreter and the packages' extension
modules load from (read with ``ldd``; bound read-only, nothing else of ``/usr``). Imports no torch.
"""

from __future__ import annotations

import grp
import hashlib
import importlib.metadata
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# What programs may import beyond the standard library: sympy (exact arithmetic, number theory, solving), mpmath
# (sympy's arbitrary-precision floats, which it imports), numpy (arrays). Committed program-mode runs import nothing
# else.
PACKAGES = ("sympy", "mpmath", "numpy")
FORMAT = 1  # what a build copies and how; a change gives every installation a new key
FOLDER = "graftbench-program-env"  # below sys.prefix
RECORD = "environment.json"
# Top-level entries of the standard library folder a program is not given.
STDLIB_LEFT_OUT = frozenset({"site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo",
                             "turtle.py", "ensurepip", "__phello__"})
STDLIB_LEFT_OUT_PREFIXES = ("config-",)  # config-3.11-x86_64-linux-gnu: the static library and build files
NOBODY = 65534  # the user and group when the system names none
BUILD_HINT = "run `make program-env` (or `python -m graftbench.programs.environment`)"


class ProgramEnvironmentError(RuntimeError):
    """The program environment cannot be built or is not built (its message names why, in one line)."""


def ids() -> tuple[int, int]:
    """The user and group id programs run as: ``nobody`` and ``nogroup`` (or 65534)."""
    try:
        uid = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        uid = NOBODY
    for name in ("nogroup", "nobody"):
        try:
            return uid, grp.getgrnam(name).gr_gid
        except KeyError:
            continue
    return uid, NOBODY


def etc_files() -> dict[str, str]:
    """The ``/etc`` a program sees, by file name: root and the sandbox's user (:func:`ids`) and how to read them;
    nothing of the host's ``/etc``."""
    uid, gid = ids()
    return {"passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:{uid}:{gid}:nobody:/nonexistent:"
                      "/usr/sbin/nologin\n",
            "group": f"root:x:0:\nnogroup:x:{gid}:\n",
            "nsswitch.conf": "passwd: files\ngroup: files\n"}


@dataclass(frozen=True)
class Environment:
    """A built program environment. ``path``: its folder on the host; ``prefix``: where its ``prefix/`` is bound
    inside the sandbox (the base interpreter's real path); ``python``: the interpreter's path inside the sandbox;
    ``record``: its ``environment.json`` (``key``, ``sha256`` of its content, ``packages`` by version,
    ``system_libraries``, ``files``, ``bytes``)."""

    path: Path
    prefix: str
    python: str
    record: dict

    def binds(self) -> list[tuple[str, str]]:
        """(host path, sandbox path) pairs, each bound read-only: the environment's prefix, its ``/etc``, and the
        system library folders it loads from."""
        return [(str(self.path / "prefix"), self.prefix), (str(self.path / "etc"), "/etc"),
                *((folder, folder) for folder in self.record["system_libraries"])]

    def describe(self) -> str:
        """What a program can see of the file system, in one line (part of the sandbox's recorded isolation)."""
        packages = ", ".join(f"{name} {version}" for name, version in self.record["packages"].items())
        return (f"program environment {self.record['sha256'][:16]} at {self.prefix} (Python "
                f"{self.record['python_version']}, its standard library, {packages}); /etc of "
                f"{', '.join(sorted(etc_files()))}; system libraries {', '.join(self.record['system_libraries'])}")


def _base() -> Path:
    """The base interpreter's installation (real path). Raises :class:`ProgramEnvironmentError` for a system
    interpreter under ``/usr``, whose prefix is the system's own folder."""
    base = Path(os.path.realpath(sys.base_prefix))
    if base == Path("/usr") or Path("/usr") in base.parents or base == Path("/"):
        raise ProgramEnvironmentError(f"the program environment needs an interpreter installed outside /usr (pyenv, a "
                                f"python.org or uv build); this one is installed at {base}")
    return base


def _interpreter(base: Path) -> Path:
    """The interpreter's real file, below ``base``."""
    for candidate in (sys.executable, getattr(sys, "_base_executable", "")):
        real = Path(os.path.realpath(candidate)) if candidate else None
        if real is not None and base in real.parents and real.is_file():
            return real
    raise ProgramEnvironmentError(f"no interpreter of {base} found behind {sys.executable}")


def _walk(folder: Path, relative: PurePosixPath, skip_top: bool) -> dict[str, Path]:
    found = {}
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if skip_top and (entry.name in STDLIB_LEFT_OUT or entry.name.startswith(STDLIB_LEFT_OUT_PREFIXES)):
            continue
        path, rel = Path(entry.path), relative / entry.name
        if entry.is_dir(follow_symlinks=False):
            found.update(_walk(path, rel, False))
        elif entry.is_file(follow_symlinks=False) or entry.is_symlink():
            found[str(rel)] = path
    return found


def _package_files(name: str, site: PurePosixPath) -> dict[str, Path]:
    """The files distribution ``name`` recorded (relative to the site folder), by destination below the prefix."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ProgramEnvironmentError(f"program mode offers {name}, which is not installed beside graftbench "
                                f"({sys.prefix})") from exc
    if dist.files is None:
        raise ProgramEnvironmentError(f"{name} {dist.version} lists no files (no RECORD): reinstall it with pip")
    found = {}
    for item in dist.files:
        parts = PurePosixPath(str(item)).parts
        if ".." in parts or PurePosixPath(str(item)).is_absolute():
            continue  # a script or data file outside the site folder (e.g. bin/isympy): not a module
        source = Path(dist.locate_file(item))
        if source.is_file() or source.is_symlink():
            found[str(site / PurePosixPath(*parts))] = source
    return found


def sources() -> tuple[Path, dict[str, Path]]:
    """The base installation and every file a build copies, by destination below ``prefix/`` (POSIX relative
    path) -> source file. Raises :class:`ProgramEnvironmentError` (a package missing, an interpreter under ``/usr``)."""
    base = _base()
    interpreter = _interpreter(base)
    found = {str(PurePosixPath(*interpreter.relative_to(base).parts)): interpreter}
    libdir = base / "lib"
    for entry in sorted(libdir.glob("libpython*")):
        found[f"lib/{entry.name}"] = entry
    stdlib = Path(os.path.realpath(sysconfig.get_paths()["stdlib"]))
    found.update(_walk(stdlib, PurePosixPath(*stdlib.relative_to(base).parts), True))
    site = PurePosixPath(*Path(sysconfig.get_paths(vars={"base": str(base), "platbase": str(base)})["purelib"])
                         .relative_to(base).parts)
    for name in PACKAGES:
        found.update(_package_files(name, site))
    return base, found


def key(found: dict[str, Path]) -> str:
    """The build's key: SHA-256 (hex) over :data:`FORMAT`, :data:`PACKAGES`, ``/etc``'s files and each source's
    destination, size, modification time (ns) and mode."""
    digest = hashlib.sha256(json.dumps([FORMAT, PACKAGES, etc_files()]).encode())
    for destination in sorted(found):
        info = os.lstat(found[destination])
        digest.update(f"{destination}\0{info.st_size}\0{info.st_mtime_ns}\0{info.st_mode}\n".encode())
    return digest.hexdigest()


def root() -> Path:
    """The folder builds go into: ``<sys.prefix>/graftbench-program-env``."""
    return Path(sys.prefix) / FOLDER


def content_sha256(folder: Path) -> tuple[str, int, int]:
    """SHA-256 (hex) of a build's content (each entry's relative path, type, mode, and bytes or link target, in
    sorted order; its record :data:`RECORD` left out), its number of files and their bytes."""
    digest, files, size = hashlib.sha256(), 0, 0
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        names = [n for n in filenames if not (dirpath == str(folder) and n == RECORD)]
        for name in sorted(names) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = os.path.join(dirpath, name)
            info = os.lstat(path)
            rel = os.path.relpath(path, folder)
            if stat.S_ISLNK(info.st_mode):
                digest.update(f"L\0{rel}\0{os.readlink(path)}\n".encode())
                continue
            digest.update(f"F\0{rel}\0{stat.S_IMODE(info.st_mode):o}\0{info.st_size}\n".encode())
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            files += 1
            size += info.st_size
    return digest.hexdigest(), files, size


# The only host folders a program's libraries may be bound from: the system's. A library that resolves anywhere
# else (a virtual environment, a checkout, /etc) refuses the build rather than binding that folder into the sandbox.
SYSTEM_LIBRARY_FOLDERS = ("/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/usr/local/lib/")


def _libraries(files: list[Path], prefix: Path, base: Path) -> list[str]:
    """The system folders ``files`` (ELF binaries copied into the build's ``prefix``) load libraries from, read
    with ``ldd``: each library's real folder and the folder the loader names it by (``/lib64`` -> ``/usr/lib64``).
    A library in the build, or below ``base`` and copied into the build (``libpython`` through the interpreter's
    run path), needs no bind. Raises :class:`ProgramEnvironmentError` for a library not found, one of ``base``
    not copied, or one in a folder outside :data:`SYSTEM_LIBRARY_FOLDERS`."""
    ldd = shutil.which("ldd", path="/usr/bin:/bin")
    if ldd is None:
        raise ProgramEnvironmentError("ldd is not installed: install libc-bin (`apt-get install libc-bin`)")
    folders = set()
    for path in files:
        listing = subprocess.run([ldd, str(path)], capture_output=True, text=True, env={}, check=False).stdout
        for line in listing.splitlines():
            if "not found" in line:
                raise ProgramEnvironmentError(f"{path.name} needs a library that is not installed: {line.strip()}")
            target = (line.split("=>", 1)[1] if "=>" in line else line).split("(", 1)[0].strip()
            if not target.startswith("/"):
                continue  # linux-vdso: the kernel's
            real = Path(os.path.realpath(target))
            if prefix in real.parents:
                continue
            if base in real.parents:
                if not (prefix / real.relative_to(base)).exists():
                    raise ProgramEnvironmentError(f"{path.name} loads {real}, which the build does not copy")
                continue
            named = os.path.realpath(os.path.dirname(target))
            for folder in (str(real.parent), named):
                if not (folder + "/").startswith(SYSTEM_LIBRARY_FOLDERS):
                    raise ProgramEnvironmentError(
                        f"{path.name} loads {real} from {folder}, which is not a system library folder "
                        f"({', '.join(SYSTEM_LIBRARY_FOLDERS)}): the sandbox binds no other folder of the host")
                folders.add(folder)
    return sorted(folders)


def _elf_files(prefix: Path) -> list[Path]:
    found = []
    for dirpath, _, filenames in os.walk(prefix):
        for name in filenames:
            path = Path(dirpath) / name
            if not path.is_symlink() and (name.endswith(".so") or ".so." in name or path.parent.name == "bin"):
                with open(path, "rb") as handle:
                    if handle.read(4) == b"\x7fELF":
                        found.append(path)
    return sorted(found)


def _read_only(folder: Path) -> None:
    """Remove every write permission below ``folder`` (the sandbox binds it read-only as well)."""
    for dirpath, dirnames, filenames in os.walk(folder, topdown=False):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & ~0o222)
        os.chmod(dirpath, stat.S_IMODE(os.lstat(dirpath).st_mode) & ~0o222)


def _copy(found: dict[str, Path], prefix: Path, base: Path) -> None:
    for destination, source in found.items():
        target = prefix / destination
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            link = os.readlink(source)
            resolved = Path(os.path.realpath(source))
            if os.path.isabs(link) or (base not in resolved.parents and Path(sys.prefix) not in resolved.parents):
                shutil.copy2(source, target)  # a link out of the tree: its content
            else:
                os.symlink(link, target)
        else:
            shutil.copy2(source, target)


def build() -> Environment:
    """Build the program environment of this installation unless it is built, and return it. Copies into a
    temporary folder beside the final one, checks the libraries, hashes the content, writes the record and
    renames the folder into place (a concurrent build of the same key keeps the first). Raises
    :class:`ProgramEnvironmentError` (a package missing, a library not found, an interpreter under ``/usr``) and
    ``OSError`` (the folder cannot be written)."""
    base, found = sources()
    build_key = key(found)
    final = root() / build_key[:32]
    if (final / RECORD).is_file():
        return load()
    work = root() / f".{build_key[:32]}.building-{os.getpid()}"
    if work.exists():
        _remove(work)  # left by a build of this process id that was killed
    (work / "etc").mkdir(parents=True)
    _copy(found, work / "prefix", base)
    for name, text in etc_files().items():
        (work / "etc" / name).write_text(text, encoding="ascii")
    libraries = _libraries(_elf_files(work / "prefix"), work / "prefix", base)
    _read_only(work / "prefix")
    _read_only(work / "etc")
    digest, files, size = content_sha256(work)
    packages = {name: importlib.metadata.version(name) for name in PACKAGES}
    record = {"format": FORMAT, "key": build_key, "sha256": digest, "files": files, "bytes": size,
              "prefix": str(base), "python": str(PurePosixPath(*_interpreter(base).relative_to(base).parts)),
              "python_version": ".".join(map(str, sys.version_info[:3])), "packages": packages,
              "system_libraries": libraries, "etc": sorted(etc_files())}
    (work / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    _read_only(work)  # the record and the folder itself
    try:
        os.rename(work, final)
    except OSError:
        if not (final / RECORD).is_file():
            raise
        _remove(work)  # another process built the same key meanwhile
    return load()


def _remove(folder: Path) -> None:
    for dirpath, _, _ in os.walk(folder):
        os.chmod(dirpath, 0o755)
    shutil.rmtree(folder)


def load() -> Environment:
    """The built program environment of this installation, its content hashed again (a few hundred MiB: about a
    second) and checked against the SHA-256 its record states, so the isolation a run records names bytes that were
    checked. Raises :class:`ProgramEnvironmentError` when it is not built, stale (its sources changed since), or its
    content differs from its record, naming how to build it."""
    base, found = sources()
    build_key = key(found)
    folder = root() / build_key[:32]
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict) or record.get("key") != build_key or record.get("format") != FORMAT:
        built = sorted(p.name for p in root().glob("*") if not p.name.startswith(".")) if root().is_dir() else []
        state = "is stale (its sources changed since it was built)" if built else "is not built"
        raise ProgramEnvironmentError(f"the program environment of {sys.prefix} {state}: {BUILD_HINT}")
    digest, _, _ = content_sha256(folder)
    if digest != record.get("sha256"):
        raise ProgramEnvironmentError(f"the program environment at {folder} does not hold what its record states "
                                      f"(content SHA-256 {digest[:16]}, recorded {str(record.get('sha256'))[:16]}): "
                                      f"delete the folder, then {BUILD_HINT}")
    return Environment(path=folder, prefix=str(base), python=str(base / record["python"]), record=record)


def main() -> int:
    """Build the program environment (``make program-env``) and print where it is and what it holds; on an
    installation that cannot have one, print why and return 0 (program mode then refuses to start, naming it)."""
    try:
        found = build()
    except ProgramEnvironmentError as exc:
        print(f"program mode unavailable: {exc}")
        return 0
    print(f"program environment: {found.path} ({found.record['files']} files, {found.record['bytes'] >> 20} MiB)")
    print(found.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
