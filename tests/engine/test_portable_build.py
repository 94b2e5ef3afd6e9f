"""The portable llama.cpp build: recorded once, re-hashed at every load, chosen per process, and named in the pin in
place of the CPU features the native build reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graftbench.engine import pin_terms
from graftbench.engine.llama_cpp import portable_build as pb

from tests.prereqs import need

CMAKE = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON  -DGGML_FMA=ON -DGGML_AVX512=OFF -DGGML_BLAS=OFF"


@pytest.fixture(autouse=True)
def no_disassembly_of_stand_in_libraries(monkeypatch):
    """The stand-in libraries below are not machine code; the instruction audit of a real build is tested in
    tests/engine/test_instruction_audit.py."""
    monkeypatch.setattr(pb, "check_instructions", lambda lib_dir: None)


def _fake_build(folder, version: str = "0.3.36"):
    """A folder laid out as `make llama-portable` leaves it, with stand-in libraries and package metadata."""
    lib = folder / pb.LIB_SUBDIR
    lib.mkdir(parents=True)
    (lib / "libllama.so.0.5.0").write_bytes(b"\x7fELF llama\x00GCC: (Debian 12.2.0-14) 12.2.0\x00")
    (lib / "libllama.so").symlink_to("libllama.so.0.5.0")
    (lib / "libggml-cpu.so").write_bytes(b"\x7fELF cpu\x00GCC: (Debian 12.2.0-14) 12.2.0\x00rest")
    (lib / "libmtmd.so").write_bytes(b"not part of the build's identity")
    info = folder / "site" / f"llama_cpp_python-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: {version}\n")
    return lib


def test_a_recorded_build_is_identified_by_its_flags_libraries_and_compiler(tmp_path, monkeypatch):
    lib = _fake_build(tmp_path)
    entry = pb.record(tmp_path, CMAKE)
    assert entry["cmake_args"] == " ".join(CMAKE.split()) and entry["compiler"] == "GCC: (Debian 12.2.0-14) 12.2.0"
    assert entry["llama_cpp_python"] == "0.3.36"
    monkeypatch.setattr(pb.metadata, "version", lambda name: "0.3.36")
    assert pb.identity(tmp_path) == {"build": "portable", "llama_cpp_python": "0.3.36", **{
        k: entry[k] for k in ("cmake_args", "library_sha256", "compiler")}}
    (lib / "libmtmd.so").write_bytes(b"changed")  # a library outside the build's identity changes nothing
    assert pb.identity(tmp_path)["library_sha256"] == entry["library_sha256"]
    assert pb.instruction_sets(CMAKE) == ["AVX", "AVX2", "FMA"]


def test_an_altered_or_mismatched_build_is_refused_naming_the_fix(tmp_path, monkeypatch):
    lib = _fake_build(tmp_path)
    pb.record(tmp_path, CMAKE)
    monkeypatch.setattr(pb.metadata, "version", lambda name: "0.3.37")
    with pytest.raises(pb.LlamaBuildError, match="llama-cpp-python 0.3.36, the installed bindings are 0.3.37"):
        pb.identity(tmp_path)
    (lib / "libggml-cpu.so").write_bytes(b"rebuilt")
    with pytest.raises(pb.LlamaBuildError, match="not the one recorded.*make llama-portable"):
        pb.identity(tmp_path)
    with pytest.raises(pb.LlamaBuildError, match="no portable llama.cpp build recorded"):
        pb.identity(tmp_path / "absent")


def test_the_build_is_chosen_by_name_and_a_loaded_process_keeps_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv(pb.ENV_VAR, "fast")
    with pytest.raises(pb.LlamaBuildError, match="unknown llama.cpp build 'fast'"):
        pb.current()
    monkeypatch.setenv(pb.FOLDER_VAR, str(tmp_path / "absent"))
    with pytest.raises(pb.LlamaBuildError, match="make llama-portable"):
        pb.select("portable")
    monkeypatch.setitem(sys.modules, "llama_cpp.llama_cpp", object())  # bindings loaded from the native build
    monkeypatch.delenv(pb.LIB_PATH_VAR, raising=False)
    assert pb.select("native") == "native"
    _fake_build(tmp_path / "b")
    pb.record(tmp_path / "b", CMAKE)
    monkeypatch.setenv(pb.FOLDER_VAR, str(tmp_path / "b"))
    monkeypatch.setattr(pb.metadata, "version", lambda name: "0.3.36")
    with pytest.raises(pb.LlamaBuildError, match="already loaded in this process from the native build"):
        pb.select("portable")


def test_a_portable_pin_against_a_native_one_names_the_build_and_how_to_choose_it():
    native = {"engine": {"engine": "llama.cpp", "system_info": "CPU : AVX512 = 1"}, "isa": "native",
              "cpu_capability": "CPU : AVX512 = 1"}
    portable = {"engine": {"engine": "llama.cpp", "build": "portable", "build_library_sha256": "a" * 64},
                "isa": "portable", "cpu_capability": "portable: AVX AVX2 FMA"}
    found = pin_terms.pin_differences(portable, native)
    assert found[0] == ("llama.cpp build (native: compiled for its CPU; portable: one fixed instruction set) portable"
                        " (this run native: set GRAFTBENCH_LLAMA_BUILD=portable in the environment)")
    assert len(found) == 2 and found[1].startswith("llama.cpp build's CPU features")


def _pin_in_a_fresh_process(build: str) -> dict:
    code = ("import json\n"
            "from graftbench.engine.llama_cpp.session import open_llama_session\n"
            "s = open_llama_session('smollm2-135m', chunk_size=64, threads=1)\n"
            "print(json.dumps(s.config.to_dict()))\n")
    env = {**os.environ, pb.ENV_VAR: build}
    env.pop(pb.LIB_PATH_VAR, None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.model
def test_the_portable_build_loads_in_its_own_process_and_its_pin_names_it():
    try:
        import llama_cpp  # noqa: F401
        found = pb.identity()
    except ImportError as exc:
        need("llama.cpp", f"llama-cpp-python not installed ({exc})")
    except pb.LlamaBuildError as exc:
        need("llama.cpp", str(exc))
    portable, native = _pin_in_a_fresh_process("portable"), _pin_in_a_fresh_process("native")
    assert portable["isa"] == "portable" and native["isa"] == "native"
    assert "system_info" not in portable["engine"] and "system_info" in native["engine"]
    assert portable["engine"]["build_library_sha256"] == found["library_sha256"]
    assert portable["cpu_capability"] == "portable: " + " ".join(pb.instruction_sets(found["cmake_args"]))
    assert "AVX512" not in portable["cpu_capability"] and "AVX2" in portable["cpu_capability"]
    assert {k: v for k, v in portable.items() if k not in ("engine", "isa", "cpu_capability")} == \
        {k: v for k, v in native.items() if k not in ("engine", "isa", "cpu_capability")}
    # built reproducibly: no temporary or checkout path in the libraries whose SHA-256 is the pin's
    checkout = str(Path(__file__).resolve().parents[2]).encode()
    libraries = sorted((pb.default_folder() / pb.LIB_SUBDIR).glob("lib*.so"))
    assert {p.name for p in libraries} >= {"libllama.so", "libggml-cpu.so"}, libraries  # not an empty glob
    for library in libraries:
        data = library.resolve().read_bytes()
        assert b"/pip-install-" not in data and checkout not in data, library.name
