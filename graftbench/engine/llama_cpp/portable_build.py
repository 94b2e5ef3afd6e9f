"""Which llama.cpp build a process loads: ``native`` (the venv's llama-cpp-python, compiled with ``-march=native``) or
``portable`` (the same version compiled for one fixed x86 instruction set by ``make llama-portable``), and the portable
build's identity for the pin.

The portable build lives in its own folder (default ``.llama-portable/`` in the checkout; ``GRAFTBENCH_LLAMA_PORTABLE``
names another): ``site/llama_cpp/lib/`` holds its shared libraries and ``build.json`` its record (version, CMake
options, the libraries' SHA-256, the compiler), written once after the build by ``python -m
graftbench.engine.llama_cpp.portable_build <folder> --cmake-args '...'``. llama-cpp-python reads
``LLAMA_CPP_LIB_PATH`` once, when its bindings are imported, so :func:`select` sets it before the first import and a
process that already loaded one build is refused another.

Invariants: the native build's pin is what it was (its ``system_info``, ``isa`` ``native``); a portable build's pin
carries :func:`identity` in place of the CPU features llama.cpp reports, and its libraries are re-hashed at every
load, so a rebuilt or altered folder never passes for the recorded one.

Imports no llama_cpp and no torch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from importlib import metadata
from pathlib import Path

ENV_VAR = "GRAFTBENCH_LLAMA_BUILD"
FOLDER_VAR = "GRAFTBENCH_LLAMA_PORTABLE"
LIB_PATH_VAR = "LLAMA_CPP_LIB_PATH"  # llama-cpp-python's own override of its library folder
BUILDS = ("native", "portable")
RECORD = "build.json"
LIB_SUBDIR = Path("site") / "llama_cpp" / "lib"
LIB_PATTERN = re.compile(r"^lib(llama|ggml[\w-]*)\.so$")  # the libraries llama-cpp-python's libllama.so loads
COMPILER_PATTERN = re.compile(rb"(GCC: \([^)\x00]{0,80}\) [0-9][0-9.]*|clang version [0-9][^\x00]{0,80})")


class LlamaBuildError(RuntimeError):
    """A build that cannot be selected: unknown name, a portable folder that is missing, unrecorded or altered, or a
    process that already loaded the other build. The message names the build and what to do."""


def default_folder() -> Path:
    """The portable build's folder: ``GRAFTBENCH_LLAMA_PORTABLE`` where set, else ``.llama-portable/`` at the root of
    this checkout."""
    return Path(os.environ.get(FOLDER_VAR) or Path(__file__).resolve().parents[3] / ".llama-portable")


def check_name(build: str) -> str:
    """Return ``build`` if it is one of :data:`BUILDS`; raises :class:`LlamaBuildError` otherwise."""
    if build not in BUILDS:
        raise LlamaBuildError(f"unknown llama.cpp build {build!r}: choose one of {', '.join(BUILDS)} ({ENV_VAR})")
    return build


def current() -> str:
    """The build this process asks for: ``GRAFTBENCH_LLAMA_BUILD``, ``native`` when unset. Raises
    :class:`LlamaBuildError` for an unknown name."""
    return check_name(os.environ.get(ENV_VAR) or "native")


def libraries_sha256(lib_dir: Path) -> str:
    """SHA-256 over the shared libraries in ``lib_dir`` that make the build (``libllama.so``, ``libggml*.so``,
    symlinks resolved): the hex digest of the lines ``<name> <sha256 of its bytes>``, sorted by name.

    Raises :class:`LlamaBuildError` when the folder holds no ``libllama.so``."""
    names = [p.name for p in build_libraries(lib_dir)]
    if "libllama.so" not in names:
        raise LlamaBuildError(f"{lib_dir} holds no libllama.so: build the portable llama.cpp with `make llama-portable`")
    lines = [f"{name} {hashlib.sha256((lib_dir / name).resolve().read_bytes()).hexdigest()}\n" for name in names]
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def compiler_of(library: Path) -> str:
    """The compiler named in ``library``'s ``.comment`` section (``GCC: (Debian 12.2.0-14) 12.2.0``, ``clang version
    ...``), ``""`` where none is found."""
    match = COMPILER_PATTERN.search(library.resolve().read_bytes())
    return match.group(1).decode("ascii", "replace") if match else ""


def instruction_sets(cmake_args: str) -> list[str]:
    """The ``GGML_<ISA>=ON`` options of ``cmake_args`` (``-DGGML_AVX2=ON`` → ``AVX2``), in their order; the build
    flags that are not instruction sets (``NATIVE``, ``BACKEND_DL``, ``BLAS``, ...) are left out."""
    not_isa = {"NATIVE", "BACKEND_DL", "CPU_ALL_VARIANTS", "BLAS", "LLAMAFILE", "OPENMP"}
    return [name for name, value in re.findall(r"-DGGML_(\w+)=(\w+)", cmake_args)
            if value.upper() == "ON" and name not in not_isa]


def build_libraries(lib_dir: Path) -> list[Path]:
    """The shared libraries in ``lib_dir`` that make the build (``libllama.so``, ``libggml*.so``), by name."""
    return sorted(p for p in lib_dir.glob("lib*.so") if LIB_PATTERN.match(p.name)) if lib_dir.is_dir() else []


def check_instructions(lib_dir: Path) -> None:
    """Disassemble the build's libraries (:mod:`graftbench.engine.llama_cpp.instruction_audit`) and raise
    :class:`LlamaBuildError` naming each library and class of instruction the portable build must not hold (AVX-512,
    AMX, VNNI, BF16, approximate reciprocals, CPUID), or when the disassembly cannot be made."""
    from .instruction_audit import AuditError, audit, findings

    try:
        found = findings(audit(build_libraries(lib_dir)))
    except AuditError as exc:
        raise LlamaBuildError(f"cannot audit the portable build's instructions: {exc}") from exc
    if found:
        raise LlamaBuildError(f"the build in {lib_dir} is not portable, its libraries hold {'; '.join(found)}: check "
                              "the compiler flags (CMAKE_ARGS) and rebuild with `make llama-portable`")


def record(folder: Path, cmake_args: str) -> dict:
    """Write ``folder/build.json`` for the build just installed under ``folder/site``: llama-cpp-python's version (from
    the installed package's metadata), ``cmake_args``, :func:`libraries_sha256` and :func:`compiler_of` the CPU
    backend's library, once :func:`check_instructions` found none the portable build must not hold. Returns the
    record. Raises :class:`LlamaBuildError` when the folder holds no build or its instructions are not portable."""
    lib_dir = folder / LIB_SUBDIR
    libraries_sha256(lib_dir)  # a folder without a build is refused before anything is disassembled
    check_instructions(lib_dir)
    version = next((d.version for d in metadata.distributions(path=[str(folder / "site")])
                    if d.metadata["Name"] == "llama_cpp_python" or d.metadata["Name"] == "llama-cpp-python"), "")
    cpu_lib = lib_dir / "libggml-cpu.so"
    entry = {
        "llama_cpp_python": version,
        "cmake_args": " ".join(cmake_args.split()),
        "library_sha256": libraries_sha256(lib_dir),
        "compiler": compiler_of(cpu_lib if cpu_lib.exists() else lib_dir / "libllama.so"),
    }
    (folder / RECORD).write_text(json.dumps(entry, indent=2) + "\n")
    return entry


def identity(folder: Path | None = None) -> dict:
    """The portable build's identity for the pin: ``build`` (``portable``), ``llama_cpp_python`` (its version),
    ``cmake_args``, ``library_sha256`` (re-hashed now) and ``compiler``.

    Raises :class:`LlamaBuildError` when the folder is missing, unrecorded, of another llama-cpp-python version than
    the installed bindings, or its libraries differ from the record (rebuild with ``make llama-portable``)."""
    folder = folder or default_folder()
    path = folder / RECORD
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LlamaBuildError(f"no portable llama.cpp build recorded at {path} ({exc}): run `make llama-portable`")
    found = libraries_sha256(folder / LIB_SUBDIR)
    if found != entry.get("library_sha256"):
        raise LlamaBuildError(f"the portable build in {folder} is not the one recorded in {path} (libraries SHA-256 "
                              f"{found[:12]}, recorded {str(entry.get('library_sha256'))[:12]}): run `make llama-portable`")
    installed = metadata.version("llama-cpp-python")
    if entry.get("llama_cpp_python") != installed:
        raise LlamaBuildError(f"the portable build in {folder} is llama-cpp-python {entry.get('llama_cpp_python')}, "
                              f"the installed bindings are {installed}: run `make llama-portable`")
    return {"build": "portable", "llama_cpp_python": installed, "cmake_args": entry.get("cmake_args", ""),
            "library_sha256": found, "compiler": entry.get("compiler", "")}


def select(build: str | None = None) -> str:
    """Make this process load ``build`` (default :func:`current`) when llama-cpp-python is first imported: set
    ``LLAMA_CPP_LIB_PATH`` to the portable build's libraries, or unset it for the native build. Returns the build.

    Raises :class:`LlamaBuildError` for an unknown build, a missing portable build, or a process whose bindings are
    already loaded from another folder (start a fresh process with ``GRAFTBENCH_LLAMA_BUILD`` set)."""
    build = check_name(build or current())
    wanted = str((default_folder() / LIB_SUBDIR).resolve()) if build == "portable" else None
    if build == "portable":
        identity()
    if "llama_cpp.llama_cpp" in sys.modules:
        loaded = os.environ.get(LIB_PATH_VAR)
        if (loaded and str(Path(loaded).resolve())) != wanted:
            raise LlamaBuildError(f"llama.cpp is already loaded in this process from {loaded or 'the native build'}; "
                                  f"the {build} build needs a fresh process ({ENV_VAR}={build})")
        return build
    if wanted is None:
        os.environ.pop(LIB_PATH_VAR, None)
    else:
        os.environ[LIB_PATH_VAR] = wanted
    os.environ[ENV_VAR] = build
    return build


def main(argv: list[str] | None = None) -> int:
    """``python -m graftbench.engine.llama_cpp.portable_build FOLDER --cmake-args ARGS``: record the build just
    installed under ``FOLDER/site`` (the Makefile's ``llama-portable`` target) and print the record."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--cmake-args", required=True)
    args = parser.parse_args(argv)
    try:
        print(json.dumps(record(args.folder, args.cmake_args), indent=2))
    except LlamaBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
