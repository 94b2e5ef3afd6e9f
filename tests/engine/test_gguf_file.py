"""A damaged or unreadable model file is refused naming the file and what is wrong (graftbench/engine/gguf_file.py),
on every engine, before a library that does not name it reads it (``transformers`` said ``cannot reshape array of
size ...`` for a truncated GGUF, ``cannot mmap an empty file`` for an empty one)."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.engine.gguf_file import GGUFFileError, check_gguf_file

from tests.prereqs import need


def _tiny_gguf(path):
    """A small sound GGUF file (version 3, a 64-byte alignment, a string array, a float32 and a float16 tensor)
    written by the gguf library; returns its bytes."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("general.alignment", 64)
    writer.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    writer.add_tensor("t0", np.arange(64, dtype=np.float32).reshape(2, 32))
    writer.add_tensor("t1", np.ones((32,), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


def test_a_sound_gguf_file_passes_and_its_last_tensor_ends_at_the_files_last_byte(tmp_path):
    import gguf

    data = _tiny_gguf(tmp_path / "tiny.gguf")
    check_gguf_file(tmp_path / "tiny.gguf")
    reader = gguf.GGUFReader(str(tmp_path / "tiny.gguf"))
    assert max(t.data_offset + t.n_bytes for t in reader.tensors) == len(data)  # so one byte less is truncated
    (tmp_path / "short.gguf").write_bytes(data[:-1])
    with pytest.raises(GGUFFileError, match=rf"short\.gguf' is truncated: its 2 tensors need {len(data)} bytes, "
                                            rf"the file holds {len(data) - 1}"):
        check_gguf_file(tmp_path / "short.gguf")


def test_the_bundled_models_gguf_file_passes():
    from graftbench.engine.models import packaged_path

    path, _ = packaged_path("smollm2-135m")
    check_gguf_file(path)  # its Q4_1, Q8_0 and float32 tensors end within the file


@pytest.mark.parametrize("damage, what", [
    (lambda data: b"", "is empty (0 bytes)"),
    (lambda data: b"hello world\n", "is not a GGUF file: it starts with b'hell'"),
    (lambda data: data[:40], "has a damaged GGUF header (40 bytes): the header ends at byte 40"),
    (lambda data: data[:4] + (7).to_bytes(4, "little") + data[8:], "GGUF version 7 is not one graftbench reads"),
    (lambda data: data[:300], "is truncated: its 2 tensors need 576 bytes, the file holds 300"),
])
def test_a_damaged_file_is_refused_naming_it_and_what_is_wrong(tmp_path, damage, what):
    data = _tiny_gguf(tmp_path / "tiny.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(damage(data))
    with pytest.raises(GGUFFileError) as caught:
        check_gguf_file(bad)
    assert str(caught.value).startswith(f"model file '{bad}' ") and what in str(caught.value)


def test_a_file_that_cannot_be_read_is_refused_naming_it(tmp_path):
    folder = tmp_path / "folder.gguf"
    folder.mkdir()
    with pytest.raises(GGUFFileError, match=r"folder\.gguf' cannot be read: Is a directory"):
        check_gguf_file(folder)


def _llama_cpp_importable() -> str | None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError as exc:
        return f"llama-cpp-python is not importable ({exc})"
    return None


@pytest.mark.parametrize("engine", ["torch", "llama.cpp"])
def test_solve_on_a_damaged_model_file_fails_naming_the_file_on_every_engine(tmp_path, engine):
    if engine == "llama.cpp":
        need("llama.cpp", _llama_cpp_importable())
    data = _tiny_gguf(tmp_path / "tiny.gguf")
    cases = {"truncated.gguf": (data[:-1], "is truncated"), "empty.gguf": (b"", "is empty (0 bytes)"),
             "text.gguf": (b"not a model\n", "is not a GGUF file")}
    (tmp_path / "folder.gguf").mkdir()
    result = CliRunner().invoke(app, ["solve", "--model", str(tmp_path / "folder.gguf"), "--engine", engine,
                                      "--limit", "1"])
    assert result.exit_code == 2 and "folder.gguf' cannot be read: it is not a regular file" in \
        " ".join(result.output.split()), result.output
    for name, (content, what) in cases.items():
        (tmp_path / name).write_bytes(content)
        result = CliRunner().invoke(app, ["solve", "--model", str(tmp_path / name), "--engine", engine,
                                          "--limit", "1", "--max-new-tokens", "1"])
        assert result.exit_code == 2, (name, result.output)
        assert f"model file '{tmp_path / name}' {what}" in " ".join(result.output.split()), result.output
        assert "Traceback" not in result.output and "reshape" not in result.output and "mmap" not in result.output
