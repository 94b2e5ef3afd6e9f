#!/usr/bin/env python
"""Fault injection: every fault of the reliability issue, applied one by one to a real store and real runs.

For each fault it records whether graftbench survived it (refused with the named check and fell back, resumed,
stayed consistent, gave a clear error) and what was lost, counted from an inventory of the store (index rows whose
file is intact) and of the samples files (complete lines), taken before and after the fault. It prints a table and
the totals: faults tried, faults survived, artifacts lost, samples lost.

    .venv/bin/python benchmarks/faults.py --out benchmarks/results/faults.txt

The forging helpers and the fault catalogue below are imported by ``tests/test_faults.py``, so the tests and this
script apply the same faults.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import io
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from graftbench import graft
from graftbench.artifact_codec import HEADER_KEY, ArtifactError, decode_header, payload_sha256
from graftbench.artifact_ids import artifact_id_of
from graftbench.evaluate import problem_key
from graftbench.settings import EvalSettings
from graftbench.hashing import sha256_text
from graftbench.problem_types import Problem, normalize_problem_text, problem_text_sha256
from graftbench.store import Store

REPO = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------------------------- forging artifacts


def split_artifact(data: bytes) -> tuple[dict, dict[str, torch.Tensor]]:
    """The graftbench header and the tensors of valid artifact bytes (no tensor checks: for building forgeries)."""
    return decode_header(artifact_id_of(data), data), load_safetensors(data)


def forge(header: dict, tensors: dict, reseal: bool = True, metadata: dict | None = None) -> bytes:
    """Encode ``header`` and ``tensors`` as artifact bytes. With ``reseal`` the header's ``payload_sha256`` is
    recomputed (when the tensor set allows), so that only the check aimed at is left to fail."""
    header = dict(header)
    tensors = {name: t.contiguous() for name, t in tensors.items()}
    if reseal:
        try:
            layers = [(tensors[f"layers.{i}.keys"], tensors[f"layers.{i}.values"]) for i in range(len(header["layers"]))]
            header["payload_sha256"] = payload_sha256(tensors["token_ids"], layers)
        except KeyError:
            pass
    return save_safetensors(tensors, metadata={HEADER_KEY: json.dumps(header, sort_keys=True), **(metadata or {})})


def reforge(data: bytes, header_edit: Callable[[dict], object] | None = None,
            tensors_edit: Callable[[dict], object] | None = None, metadata: dict | None = None) -> bytes:
    """Artifact bytes re-encoded after editing the header and/or the tensors (payload hash resealed)."""
    header, tensors = split_artifact(data)
    if header_edit:
        header_edit(header)
    if tensors_edit:
        tensors_edit(tensors)
    return forge(header, tensors, metadata=metadata)


def flip_bit(data: bytes, bit: int) -> bytes:
    """``data`` with one bit flipped (bit 0 is the lowest bit of the first byte)."""
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def edit_header_in_place(data: bytes, field: str, value: str) -> bytes:
    """``data`` with a header string field's value overwritten by one of the same length, bytes elsewhere kept
    (so that the file keeps its size and only its hash tells)."""
    header, _ = split_artifact(data)
    old = json.dumps(json.dumps(header[field]))[1:-1].encode()  # as it appears inside the metadata string
    new = json.dumps(json.dumps(value))[1:-1].encode()
    assert len(old) == len(new) and data.count(old) == 1
    return data.replace(old, new)


def with_header_text(data: bytes, text: str) -> bytes:
    """The artifact's tensors under an arbitrary graftbench metadata string (e.g. one that is not JSON)."""
    _, tensors = split_artifact(data)
    return save_safetensors(tensors, metadata={HEADER_KEY: text})


def pickle_bomb(marker: Path) -> bytes:
    """Protocol-0 pickle bytes that, if anything ever unpickled them, would create ``marker`` (nothing does)."""
    return f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()


def torch_save_bytes() -> bytes:
    """A ``torch.save`` file (a zip holding a pickle): the format graftbench never loads."""
    buffer = io.BytesIO()
    torch.save({"layers.0.keys": torch.zeros(2)}, buffer)
    return buffer.getvalue()


def _set(**fields) -> Callable[[dict], None]:
    return lambda header: header.update(fields)


def _shift_positions(by: int, layer_state: bool) -> Callable[[dict], None]:
    def edit(header: dict) -> None:
        header["positions"] = [p + by for p in header["positions"]]
        if layer_state:
            for spec in header["layers"]:
                spec["seen"] += by
    return edit


def _to_dtype(dtype: torch.dtype) -> Callable[[dict], None]:
    def edit(tensors: dict) -> None:
        for name in [n for n in tensors if n.startswith("layers.")]:
            tensors[name] = tensors[name].to(dtype)
    return edit


# --------------------------------------------------------------------------------------------- the lab


def tiny_problem(i: int) -> Problem:
    """A small problem with a verified one-line solution: its deposit text is about 40 tokens."""
    a, b = 11 + 7 * i, 23 + 5 * i
    return Problem(f"tiny-{i}", f"What is ${a}+{b}$?", str(a + b), f"Adding, ${a}+{b}={a + b}$. Final answer: {a + b}")


@dataclass
class Lab:
    """A loaded session and a store, with the ways the faults need to build, damage and plant artifacts."""

    session: object
    store: Store

    def meta(self, problem: Problem, ids: list[int]) -> dict:
        """The header fields :func:`graftbench.deposit.deposit` writes (they make the artifact routable)."""
        return {"problem_id": problem.id, "problem_key": problem_key(problem),
                "problem_text": normalize_problem_text(problem.problem), "problem_sha256": problem_text_sha256(problem.problem),
                "answer": problem.answer, "source": "reference", "text_sha256": sha256_text(self.session.tokenizer.decode(ids))}

    def build(self, problem: Problem, config=None, parent=None, ids: list[int] | None = None,
              routable: bool = True) -> tuple[bytes, dict]:
        """Artifact bytes and header for ``problem``'s deposit text (or ``ids``), not yet stored: byte-identical
        to what ``deposit`` writes for a reference solution."""
        ids = ids or self.session.deposit_ids(problem.problem, problem.answer, problem.solution)
        meta = self.meta(problem, ids) if routable else {"source": "reference"}
        return graft.build_artifact(self.session.model, config or self.session.config, ids, meta, parent)

    def deposit(self, problem: Problem) -> str:
        """Build and store a valid artifact for ``problem``; returns its id."""
        return self.store.put(self.build(problem)[0])

    def corrupt(self, problem: Problem, edit: Callable[[bytes], bytes]) -> str:
        """Deposit ``problem`` then rewrite its file in place with ``edit`` (the id and index row stay)."""
        artifact_id = self.deposit(problem)
        path = self.store.path(artifact_id)
        path.write_bytes(edit(path.read_bytes()))
        return artifact_id

    def plant(self, problem: Problem, make: Callable[[bytes], bytes], config=None) -> str:
        """Store ``make(valid bytes)`` under its own hash (a forged, renamed file) with an index row that routes
        ``problem`` to it under this session's config (:meth:`Store.plant`); returns the forged id."""
        data, header = self.build(problem, config=config)
        return self.store.plant(make(data), {**header, "config_fingerprint": self.session.config.fingerprint})

    def chain(self, problem: Problem) -> tuple[str, bytes, dict]:
        """A parent artifact (stored, not routable) and a child for ``problem`` chained after it (built, not
        stored). Returns (parent id, child bytes, child header)."""
        parent_id = self.store.put(self.build(Problem(f"{problem.id}-p", f"Note {problem.id}.", "0", "0"),
                                              routable=False)[0])
        text = f"Problem: {problem.problem}\nFinal answer: {problem.answer}\n\n"
        ids = self.session.tokenizer(text, add_special_tokens=False).input_ids
        data, header = self.build(problem, parent=self.store.read(parent_id), ids=ids)
        return parent_id, data, header


def _in_place(edit: Callable[[bytes], bytes]):
    return lambda lab, problem: lab.corrupt(problem, edit)


def _forged(make: Callable[[bytes], bytes], config_edit: dict | None = None):
    def build(lab: Lab, problem: Problem) -> str:
        config = dataclasses.replace(lab.session.config, **config_edit) if config_edit else None
        return lab.plant(problem, make, config)
    return build


def _deleted(lab: Lab, problem: Problem) -> str:
    artifact_id = lab.deposit(problem)
    lab.store.path(artifact_id).unlink()
    return artifact_id


def _chained(damage: Callable[[Lab, str], None]):
    def build(lab: Lab, problem: Problem) -> str:
        parent_id, data, header = lab.chain(problem)
        damage(lab, parent_id)
        return lab.store.put(data)
    return build


def _parent_replaced(lab: Lab, problem: Problem) -> str:
    parent_id, data, header = lab.chain(problem)
    longer = lab.session.tokenizer(f"Another note, longer than {problem.id}'s.").input_ids
    other = lab.store.put(lab.build(Problem(f"{problem.id}-o", "Other.", "0", "0"), ids=longer, routable=False)[0])
    assert len(longer) != lab.store.read(parent_id).token_ids.numel()
    return lab.store.plant(reforge(data, _set(parent=other)), header)  # indexed as the original child


def _pickled(lab: Lab, problem: Problem) -> str:
    return lab.plant(problem, lambda _: pickle_bomb(lab.store.root / "UNPICKLED"))


@dataclass(frozen=True)
class ArtifactFault:
    """One way an artifact can be wrong. ``build(lab, problem)`` makes it and returns the artifact id that
    ``problem`` routes to; reading or grafting it must fail the ``check`` named."""

    name: str
    check: str
    build: Callable[[Lab, Problem], str]


ARTIFACT_FAULTS: tuple[ArtifactFault, ...] = (
    ArtifactFault("bit flip in the header", "hash", _in_place(lambda d: flip_bit(d, 8 * 64 + 3))),
    ArtifactFault("bit flip in the payload", "hash", _in_place(lambda d: flip_bit(d, 8 * (len(d) // 2)))),
    ArtifactFault("bit flip in the last byte", "hash", _in_place(lambda d: flip_bit(d, 8 * len(d) - 1))),
    ArtifactFault("truncated file", "size", _in_place(lambda d: d[: len(d) // 3])),
    ArtifactFault("header edited, not re-hashed", "hash", _in_place(lambda d: edit_header_in_place(d, "weights_sha256", "0" * 64))),
    ArtifactFault("artifact file deleted", "missing", _deleted),
    ArtifactFault("missing tensor", "tensors", _forged(lambda d: reforge(d, tensors_edit=lambda t: t.pop("layers.3.values")))),
    ArtifactFault("tensor of the wrong shape", "tensors",
                  _forged(lambda d: reforge(d, tensors_edit=lambda t: t.update({"layers.0.keys": t["layers.0.keys"][:, :, 1:]})))),
    ArtifactFault("tensor of the wrong dtype", "tensors",
                  _forged(lambda d: reforge(d, tensors_edit=lambda t: t.update({"layers.2.values": t["layers.2.values"].half()})))),
    ArtifactFault("header claims another model", "config", _forged(lambda d: reforge(d, _set(weights_sha256="0" * 64)))),
    ArtifactFault("header claims another tokenizer", "config", _forged(lambda d: reforge(d, _set(tokenizer_sha256="0" * 64)))),
    ArtifactFault("header claims another dtype", "tensors", _forged(lambda d: reforge(d, _set(dtype="bfloat16")))),
    ArtifactFault("header and tensors in another dtype", "config",
                  _forged(lambda d: reforge(d, _set(dtype="bfloat16"), _to_dtype(torch.bfloat16)))),
    ArtifactFault("header claims another chunk schedule", "config",
                  _forged(lambda d: reforge(d, lambda h: h.update(chunk_size=h["chunk_size"] + 1)))),
    ArtifactFault("header claims another position range", "config", _forged(lambda d: reforge(d, _shift_positions(5, False)))),
    ArtifactFault("positions and layer state both shifted", "parent", _forged(lambda d: reforge(d, _shift_positions(5, True)))),
    ArtifactFault("header claims another config fingerprint", "config", _forged(lambda d: reforge(d, _set(config_fingerprint="f" * 64)))),
    ArtifactFault("artifact of another pinned config", "config", _forged(lambda d: d, {"threads": 97})),
    ArtifactFault("artifact of another model", "config", _forged(lambda d: d, {"weights_sha256": "1" * 64})),
    ArtifactFault("oversized header (2 MiB)", "format", _forged(lambda d: reforge(d, metadata={"pad": "x" * (2 << 20)}))),
    ArtifactFault("header not JSON", "header", _forged(lambda d: with_header_text(d, '{"format": not json'))),
    ArtifactFault("header nested 100,000 deep", "header", _forged(lambda d: with_header_text(d, "[" * 100_000 + "]" * 100_000))),
    ArtifactFault("parent id that leaves the store", "header", _forged(lambda d: reforge(d, _set(parent="../../../etc/passwd")))),
    ArtifactFault("a pickle planted as an artifact", "format", _pickled),
    ArtifactFault("a torch.save file planted as an artifact", "format", _forged(lambda d: torch_save_bytes())),
    ArtifactFault("chained: parent missing", "parent", _chained(lambda lab, pid: lab.store.path(pid).unlink())),
    ArtifactFault("chained: parent damaged", "parent",
                  _chained(lambda lab, pid: lab.store.path(pid).write_bytes(flip_bit(lab.store.path(pid).read_bytes(), 99)))),
    ArtifactFault("chained: parent replaced by another", "parent", _parent_replaced),
)

ESCAPING_IDS = ("../" + "a" * 61, "/etc/passwd", "a" * 63 + "\x00", "a" * 64 + "\n", "..", "")
ESCAPING_RUN_NAMES = ("../escape", "/tmp/abs", "a\x00b", "..", "run\n", "a/../../b")

# --------------------------------------------------------------------------------------------- full disk


class DiskFull:
    """An ``os.write`` that behaves as if only ``free`` bytes were left for files under ``folder``: writes there
    are cut short at that budget, then fail with ``ENOSPC``; every other write goes through."""

    def __init__(self, folder: Path, free: int = 0):
        self.folder, self.free, self.real = str(Path(folder).resolve()), free, os.write
        self.refused = 0

    def __call__(self, fd: int, data) -> int:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if not target.startswith(self.folder):
            return self.real(fd, data)
        if self.free <= 0:
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = self.real(fd, bytes(data[: self.free]))
        self.free -= written
        return written


@contextmanager
def disk_full(folder: Path, free: int = 0) -> Iterator[DiskFull]:
    """Within the block, writes under ``folder`` find a disk with ``free`` bytes left (see :class:`DiskFull`)."""
    fake = DiskFull(folder, free)
    real, os.write = os.write, fake
    try:
        yield fake
    finally:
        os.write = real


class _FullIndex:
    """A SQLite connection whose inserts fail as on a full disk."""

    def __init__(self, connection: sqlite3.Connection):
        self.connection = connection

    def execute(self, sql: str, *args):
        if sql.lstrip().upper().startswith("INSERT"):
            raise sqlite3.OperationalError("database or disk is full")
        return self.connection.execute(sql, *args)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self.connection.__exit__(*exc)

    def close(self) -> None:
        self.connection.close()


@contextmanager
def index_full() -> Iterator[None]:
    """Within the block, every store's index inserts fail with SQLite's ``database or disk is full``."""
    real = Store._connect
    Store._connect = lambda self: _FullIndex(real(self))
    try:
        yield
    finally:
        Store._connect = real

# --------------------------------------------------------------------------------------------- inventory


def inventory(stores: list[Path], samples_files: list[Path]) -> dict:
    """What must never be lost: per store, the indexed ids whose file is intact; per samples file, its complete
    lines. Also the store's damaged, missing and orphaned entries, for consistency checks."""
    snapshot = {"artifacts": {}, "samples": {}, "stores": {}}
    for root in stores:
        inv = Store(root).inventory()
        snapshot["stores"][str(root)] = inv
        snapshot["artifacts"].update({f"{root}:{i}": True for i in set(inv["indexed"]) & set(inv["intact"])})
    for path in samples_files:
        data = path.read_bytes() if path.exists() else b""
        snapshot["samples"][str(path)] = data[: data.rfind(b"\n") + 1].split(b"\n")[:-1]
    return snapshot


def count_losses(before: dict, after: dict) -> tuple[int, int]:
    """(artifacts lost, samples lost): indexed intact artifacts that are no longer both, and sample lines that
    are no longer present, byte-identical, at their place."""
    artifacts = sum(1 for key in before["artifacts"] if key not in after["artifacts"])
    samples = 0
    for path, lines in before["samples"].items():
        later = after["samples"].get(path, [])
        samples += sum(1 for i, line in enumerate(lines) if i >= len(later) or later[i] != line)
    return artifacts, samples


def store_consistent(root: Path) -> list[str]:
    """Problems with a store after a fault: damaged or missing indexed files, or a failed ``verify``."""
    inv = Store(root).inventory()
    problems = [f"damaged {i[:12]}" for i in inv["damaged"]] + [f"missing {i[:12]}" for i in inv["missing"]]
    return problems + Store(root).verify()

# --------------------------------------------------------------------------------------------- subprocesses

PUT_CODE = """
import sys
from graftbench.store import Store
store = Store(sys.argv[1])
for _ in range(int(sys.argv[2])):
    for path in sys.argv[3:]:
        with open(path, "rb") as data:
            store.put(data.read())
print("DONE", flush=True)
"""

SESSION_CODE = """
import sys
from graftbench.session import open_session
session = open_session(sys.argv[1], dtype=sys.argv[2], chunk_size=int(sys.argv[3]))
print("READY", flush=True)
"""

DEPOSIT_CODE = SESSION_CODE + """
from graftbench.deposit import deposit_items, items_from_problems
from graftbench.problem_loading import load_problems
from graftbench.store import Store
deposit_items(session, Store(sys.argv[5]), items_from_problems(load_problems(sys.argv[4])))
print("DONE", flush=True)
"""

SOLVE_CODE = SESSION_CODE + """
from graftbench.settings import EvalSettings
from graftbench.workflows import run_eval
from graftbench.problem_loading import load_problems
run_eval(session, load_problems(sys.argv[4]), "faults", sys.argv[6], EvalSettings(max_new_tokens=int(sys.argv[7])),
         runs_root=sys.argv[5])
print("DONE", flush=True)
"""


def write_payloads(folder: Path, artifacts: list[bytes]) -> list[Path]:
    """Write artifact bytes to files (named by their id's first 16 digits) for a depositing subprocess."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for data in artifacts:
        path = folder / artifact_id_of(data)[:16]
        path.write_bytes(data)
        paths.append(path)
    return paths


def start_python(code: str, args: list, fault: str | None = None) -> subprocess.Popen:
    """Start ``python -c code args`` with ``GRAFTBENCH_FAULT`` set to ``fault`` (or unset)."""
    env = {k: v for k, v in os.environ.items() if k != "GRAFTBENCH_FAULT"}
    if fault:
        env["GRAFTBENCH_FAULT"] = fault
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env, cwd=REPO)


def put_in_subprocess(store_root: Path, paths: list[Path], fault: str | None = None, rounds: int = 1) -> subprocess.Popen:
    """Start a process that puts the artifacts at ``paths`` into the store, ``rounds`` times over."""
    return start_python(PUT_CODE, [store_root, rounds, *paths], fault)


def session_args(session) -> list:
    """The arguments that make a subprocess open the same pinned session."""
    return [session.config.model, session.config.dtype, session.config.chunk_size]


def wait_for_line(proc: subprocess.Popen, word: str, timeout: float = 300) -> bool:
    """Read the process's output until a line equal to ``word``; False if it ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            return False
        if line.strip() == word:
            return True
    return False


def sigkill(proc: subprocess.Popen) -> int:
    """SIGKILL the process (if still running) and reap it; returns its exit status."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    return proc.wait(60)


def complete_lines(path: Path) -> list[bytes]:
    """The newline-terminated lines of a samples file."""
    data = path.read_bytes() if path.exists() else b""
    return data[: data.rfind(b"\n") + 1].split(b"\n")[:-1]


def kill_when_lines(proc: subprocess.Popen, path: Path, lines: int, timeout: float = 300) -> None:
    """SIGKILL ``proc`` as soon as ``path`` holds ``lines`` complete lines (or when it ends on its own)."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if len(complete_lines(path)) >= lines:
            break
        time.sleep(0.01)
    sigkill(proc)

# --------------------------------------------------------------------------------------------- bad inputs


def _edit_sample(field: str, change: Callable):
    def edit(manifest: dict) -> str:
        sample = manifest["samples"][0]
        sample[field] = change(sample[field])
        return f"sample {sample['problem_id']}: {field}"
    return edit


def _edit_section(section: str, field: str | None, change: Callable):
    def edit(manifest: dict) -> str:
        if field is None:
            manifest[section] = change(manifest[section])
            return section
        manifest[section][field] = change(manifest[section][field])
        return f"{section}.{field}"
    return edit


def _edit_problem(field: str, change: Callable):
    def edit(manifest: dict) -> str:
        problem = manifest["problems"][0]
        problem[field] = change(problem[field])
        return f"problem {problem['id']}: {field}"
    return edit


def _edit_digest(manifest: dict) -> str:
    sample_id = manifest["samples"][0]["problem_id"]
    manifest["sealed_fields"]["samples"][sample_id]["output"] = "0" * 16
    return f"sample {sample_id}: output"


def _drop_sample(manifest: dict) -> str:
    return f"sample {manifest['samples'].pop()['problem_id']} removed"


def _artifact_entry(manifest: dict) -> str:
    manifest["artifacts"][0]["tokens"] += 1
    return "artifacts"


# Each edit changes one thing in a manifest (which is then NOT re-sealed) and returns a text that some line of
# verify_manifest's mismatches must contain: the field named.
MANIFEST_EDITS: tuple[tuple[str, Callable[[dict], str]], ...] = (
    ("a verdict changed", _edit_sample("correct", lambda v: not v)),
    ("a decode token count changed", _edit_sample("decode_tokens", lambda v: v + 1)),
    ("a prefill token count changed", _edit_sample("prefill_tokens", lambda v: v + 1)),
    ("an output text changed", _edit_sample("output", lambda v: v + " ")),
    ("an output hash changed", _edit_sample("output_sha256", lambda v: "0" * 64)),
    ("a logits hash changed", _edit_sample("logits_sha256", lambda v: "0" * 64)),
    ("a sample's problem hash changed", _edit_sample("problem_sha256", lambda v: "0" * 64)),
    ("a sample's energy changed", _edit_sample("energy_j", lambda v: v + 1.0)),
    ("a sample's artifact id changed", _edit_sample("artifact_id", lambda v: "e" * 64)),
    ("a total changed", _edit_section("totals", "correct", lambda v: v + 1)),
    ("the total energy changed", _edit_section("totals", "energy_j", lambda v: v + 1.0)),
    ("the config fingerprint changed", _edit_section("config_fingerprint", None, lambda v: "0" * 64)),
    ("a pinned config field changed", _edit_section("config", "dtype", lambda v: "bfloat16")),
    ("the energy method changed", _edit_section("energy", "method", lambda v: "rapl")),
    ("a setting changed", _edit_section("settings", "max_new_tokens", lambda v: v + 1)),
    ("the problem set hash changed", _edit_section("problem_set", "sha256", lambda v: "0" * 64)),
    ("a problem's key changed", _edit_problem("key", lambda v: str(int(v) + 1))),
    ("a problem's text hash changed", _edit_problem("problem_sha256", lambda v: "0" * 64)),
    ("an artifact entry changed", _artifact_entry),
    ("the manifest hash changed", _edit_section("manifest_sha256", None, lambda v: "0" * 64)),
    ("a field digest changed", _edit_digest),
    ("a sample removed", _drop_sample),
)

_GOOD_ROW = b'{"id": "a", "problem": "What is 1+1?", "answer": "2"}\n'
# (fault, file name, content, a text the error must contain besides the file name)
PROBLEM_SET_FAULTS: tuple[tuple[str, str, bytes, str], ...] = (
    ("row with a missing field", "missing.jsonl", _GOOD_ROW + b'{"id": "b", "answer": "3"}\n', "row 2, field 'problem'"),
    ("empty problem", "empty.jsonl", _GOOD_ROW + b'{"id": "b", "problem": " ", "answer": "3"}\n', "row 2, field 'problem'"),
    ("non-numeric key", "key.csv", b"id,problem,answer\na,p,1\nb,q,twelve\n", "row 2, field 'answer'"),
    ("invalid UTF-8", "latin1.jsonl", _GOOD_ROW + b'{"id": "b", "problem": "caf\xe9", "answer": "3"}\n', "line 2"),
    ("a 10 MB line", "huge.jsonl", _GOOD_ROW + b'{"id": "b", "problem": "' + b"x" * 10_000_000 + b'", "answer": "3"}\n',
     "row 2, field 'problem'"),
    ("unknown file type", "set.yaml", b"- id: a\n", "unsupported file suffix"),
    ("a CSV row with too many fields", "wide.csv", b"id,problem,answer\na,p,1\nb,q,2,9\n", "line 3: row 2"),
    ("an integer of 5,000 digits", "bigint.jsonl", _GOOD_ROW + b'{"id": "b", "problem": "q", "answer": ' + b"9" * 5000 + b"}\n",
     "line 2"),
)

HUB_CODE = """
from graftbench.problem_loading import load_problems
from graftbench.problem_types import ProblemSetError
try:
    load_problems("graftbench-no-such-owner/no-such-problem-set")
except ProblemSetError as exc:
    print(exc)
"""


def mutate_artifact(data: bytes, rng: random.Random) -> bytes:
    """One random mutation of valid artifact bytes: a flipped bit, a cut, an edited header field or swapped
    tensors (the latter two re-encoded, so that the file is consistent with its own hash)."""
    kind = rng.choice(("flip", "cut", "edit", "swap"))
    if kind == "flip":
        return flip_bit(data, rng.randrange(len(data) * 8))
    if kind == "cut":
        return data[: rng.randrange(len(data))]
    if kind == "edit":
        field = rng.choice(("positions", "dtype", "kv_heads", "head_dim", "layers", "parent", "format", "chunk_size",
                            "weights_sha256", "payload_sha256"))
        value = rng.choice((None, -1, 0, 7, 10**9, "x", "float32", [0, 3], [{"kind": "full"}], "a" * 64))
        return with_header_text(data, json.dumps({**split_artifact(data)[0], field: value}))
    header, tensors = split_artifact(data)
    i, j = rng.randrange(len(header["layers"])), rng.randrange(len(header["layers"]))
    tensors[f"layers.{i}.keys"], tensors[f"layers.{j}.values"] = tensors[f"layers.{j}.values"], tensors[f"layers.{i}.keys"]
    return forge(header, tensors, reseal=rng.random() < 0.5)

# --------------------------------------------------------------------------------------------- the bench


@dataclass
class Outcome:
    """What one fault did: whether graftbench survived it, a short detail, and sample lines lost that the
    before/after inventory cannot see (lines present at the moment of a kill)."""

    survived: bool
    detail: str
    samples_lost: int = 0


@dataclass
class Row:
    """One line of the report."""

    category: str
    fault: str
    survived: bool
    artifacts_lost: int
    samples_lost: int
    detail: str


class _Interrupt(Exception):
    pass


class Bench:
    """A temporary folder with a real store (``store/``, deposited at setup), a baseline solve run and a graft
    eval run (``runs/``), and a second store for the artifact faults. Each fault goes through :meth:`run`, which
    takes the inventory of the store and of every samples file before and after it."""

    def __init__(self, session, root: Path, seed: int = 0):
        self.session, self.root, self.rng = session, root, random.Random(seed)
        self.main, self.runs = root / "store", root / "runs"
        self.lab = Lab(session, Store(root / "fault-store"))
        self.problems = [tiny_problem(i) for i in range(4)]
        self.rows: list[Row] = []
        self._next = 100

    # ---- helpers

    def fresh_problems(self, n: int) -> list[Problem]:
        """``n`` problems never used before in this bench."""
        self._next += n
        return [tiny_problem(i) for i in range(self._next - n, self._next)]

    def problems_file(self, problems: list[Problem]) -> Path:
        """The problems as a JSON Lines file (for subprocesses and resumes to load the same set)."""
        path = self.root / "sets" / f"{problems[0].id}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = [{"id": p.id, "problem": p.problem, "answer": p.answer, "solution": p.solution} for p in problems]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path

    def eval(self, problems, name, **settings):
        """A run over ``problems`` in ``runs/`` (graft runs use the main store unless ``store_root`` is given)."""
        from graftbench.workflows import run_eval

        store_root = settings.pop("store_root", self.main)
        on_sample = settings.pop("on_sample", None)
        return run_eval(self.session, problems, "faults", name, EvalSettings(**settings), runs_root=self.runs,
                        store_root=store_root, on_sample=on_sample)

    def setup(self) -> None:
        """Deposit the baseline problems into the main store, then a solve run and a graft eval run."""
        from graftbench.deposit import deposit_items, items_from_problems

        deposit_items(self.session, Store(self.main), items_from_problems(self.problems))
        self.eval(self.problems, "baseline", max_new_tokens=6)
        self.eval(self.problems, "graft", max_new_tokens=6, graft=True, certify=True)

    def protected(self) -> dict:
        """The inventory of what must never be lost: the main store and every samples file."""
        return inventory([self.main], sorted(self.runs.glob("*/samples.jsonl")))

    def run(self, category: str, fault: str, action: Callable[[], Outcome]) -> Row:
        """Apply one fault between two inventories and record its row."""
        before = self.protected()
        started = time.perf_counter()
        try:
            outcome = action()
        except Exception as exc:  # a fault that escapes as an unexpected error is a failure, and is reported
            outcome = Outcome(False, f"raised {type(exc).__name__}: {exc}"[:120])
        artifacts_lost, samples_lost = count_losses(before, self.protected())
        detail = outcome.detail.replace(str(self.root), "<tmp>")
        row = Row(category, fault, outcome.survived, artifacts_lost, samples_lost + outcome.samples_lost, detail)
        self.rows.append(row)
        print(f"  {'ok ' if row.survived else 'FAIL'} {category}: {fault} ({time.perf_counter() - started:.1f}s)",
              file=sys.stderr, flush=True)
        return row

    # ---- artifact faults

    def artifact_fault(self, fault: ArtifactFault) -> Outcome:
        """Build the fault, graft it (must be refused with its check), then eval --graft (must fall back)."""
        (problem,) = self.fresh_problems(1)
        artifact_id = fault.build(self.lab, problem)
        try:
            graft.restore_chain(self.session.model, self.session.config, self.lab.store, artifact_id)
            return Outcome(False, "grafted without an error")
        except ArtifactError as exc:
            refused = exc.check == fault.check and exc.artifact_id == artifact_id
        sample = self.eval([problem], f"fault-{problem.id}", max_new_tokens=4, graft=True,
                           store_root=self.lab.store.root).samples[0]
        fallback = sample.fallback or ""
        fell_back = sample.mode == "baseline" and fallback.startswith(f"{fault.check}:") and artifact_id[:16] in fallback
        unpickled = (self.lab.store.root / "UNPICKLED").exists()
        return Outcome(refused and fell_back and not unpickled, f"fallback: {fallback[:80]}")

    def reader_fuzz(self, n: int = 1000) -> Outcome:
        """``n`` random mutations of a real artifact read under its id: every one must raise ArtifactError."""
        from graftbench.artifact_codec import decode_artifact

        (problem,) = self.fresh_problems(1)
        ids = self.session.deposit_ids(problem.problem, problem.answer, problem.solution)[:12]
        data, _ = self.lab.build(problem, ids=ids)
        artifact_id = artifact_id_of(data)
        refused, other = 0, []
        for _ in range(n):
            mutated = mutate_artifact(data, self.rng)
            try:
                decode_artifact(artifact_id, mutated)
                other.append("returned an artifact" if mutated != data else "unchanged")
            except ArtifactError:
                refused += 1
            except Exception as exc:  # noqa: BLE001 - what is counted here is exactly an error of another type
                other.append(type(exc).__name__)
        unchanged = other.count("unchanged")
        return Outcome(refused + unchanged == n, f"{refused} refused with ArtifactError, {unchanged} mutations were no-ops, "
                       f"other: {sorted(set(other) - {'unchanged'}) or 'none'}")

    # ---- path escapes

    def escaping_ids(self) -> Outcome:
        """Ids with ``../``, absolute paths, NUL bytes, newlines: refused by the id check before any file access."""
        checks = []
        for bad in ESCAPING_IDS:
            try:
                Store(self.main).read(bad)
                checks.append("read")
            except ArtifactError as exc:
                checks.append(exc.check)
        return Outcome(checks == ["id"] * len(ESCAPING_IDS), f"{checks.count('id')} of {len(ESCAPING_IDS)} refused (id check)")

    def escaping_run_names(self) -> Outcome:
        """Run names that would leave ``runs/``: refused before anything is written."""
        from graftbench.runs import RunError

        refused = 0
        for bad in ESCAPING_RUN_NAMES:
            try:
                self.eval(self.problems[:1], bad, max_new_tokens=4)
            except RunError:
                refused += 1
        created = [p for p in (self.root / "escape", Path("/tmp/abs"), self.root / "b") if p.exists()]
        return Outcome(refused == len(ESCAPING_RUN_NAMES) and not created,
                       f"{refused} of {len(ESCAPING_RUN_NAMES)} refused; nothing created outside runs/")

    def manifest_escaping_id(self) -> Outcome:
        """A manifest listing an artifact id that leaves the store: a mismatch, and no file outside is read."""
        from graftbench.manifest import verify_manifest, write_manifest

        manifest = json.loads((self.runs / "graft" / "manifest.json").read_text())
        manifest["artifacts"].append({"id": "../../../../etc/passwd", "sha256": "0" * 64, "tokens": 1})
        path = self.root / "escaping-manifest.json"
        write_manifest(manifest, path)
        mismatches, _ = verify_manifest(path, store=self.main)
        flagged = any("is not 64 lowercase hex digits" in m for m in mismatches)
        return Outcome(flagged, next((m for m in mismatches if "hex digits" in m), "not flagged")[:90])

    # ---- crashes

    def kill_put(self, point: str) -> Outcome:
        """SIGKILL a depositing process at a named point of :meth:`Store.put`; the next deposit must complete."""
        (problem,) = self.fresh_problems(1)
        data, _ = self.lab.build(problem)
        paths = write_payloads(self.root / "payloads", [data])
        code = put_in_subprocess(self.main, paths, fault=point).wait(300)
        store, artifact_id = Store(self.main), artifact_id_of(data)
        visible = artifact_id in store.ids()
        damage = store_consistent(self.main)
        store.put(data)
        completed = artifact_id in store.ids() and store.read(artifact_id).id == artifact_id
        temporaries = len(store.inventory()["temporaries"])
        return Outcome(code == -signal.SIGKILL and not visible and not damage and completed,
                       f"exit {code}; indexed after kill: {visible}; damage: {damage or 'none'}; next deposit "
                       f"completed: {completed}; invisible .tmp files: {temporaries}")

    def kill_deposit_randomly(self) -> Outcome:
        """SIGKILL a real ``deposit`` (model prefill, write, index) after a random delay; then deposit again."""
        from graftbench.deposit import deposit_items, items_from_problems

        problems = self.fresh_problems(4)
        proc = start_python(DEPOSIT_CODE, [*session_args(self.session), self.problems_file(problems), self.main])
        ready = wait_for_line(proc, "READY")
        store, keys = Store(self.main), {problem_key(p) for p in problems}
        wait_for, delay = self.rng.randrange(4), self.rng.uniform(0.0, 0.4)

        def indexed() -> int:
            return sum(1 for k in keys if store.find_exact(self.session.config.fingerprint, k))

        while proc.poll() is None and indexed() < wait_for:
            time.sleep(0.005)
        time.sleep(delay)
        code = sigkill(proc)
        before = indexed()
        damage = store_consistent(self.main)
        report = deposit_items(self.session, store, items_from_problems(problems))
        after = sum(1 for k in keys if store.find_exact(self.session.config.fingerprint, k))
        ok = ready and not damage and after == 4 and not report.refused and not store_consistent(self.main)
        return Outcome(ok, f"killed {delay:.2f}s after deposit {wait_for} (exit {code}); {before} of 4 indexed at the kill; "
                           f"damage: {damage or 'none'}; {after} of 4 after the next deposit")

    def kill_solve(self, mode: str) -> Outcome:
        """Record 2 of 5 samples, then a solve process resumes the run and is SIGKILLed: at a named point
        (``sample-torn``, ``sample-before-append``) or as soon as it records one more (``random``). Resuming
        must record each problem exactly once and keep every line recorded before byte-identical."""
        from graftbench.problem_loading import load_problems
        from graftbench.runs import RunDir

        path = self.problems_file(self.fresh_problems(5))
        problems, name = load_problems(str(path)), f"kill-{mode}"
        samples = RunDir(self.runs, name).samples_path

        def stop_after_two(sample):
            if len(complete_lines(samples)) == 2:
                raise _Interrupt

        try:
            self.eval(problems, name, max_new_tokens=4, on_sample=stop_after_two)
        except _Interrupt:
            pass
        prior = complete_lines(samples)
        args = [*session_args(self.session), path, self.runs, name, 4]
        proc = start_python(SOLVE_CODE, args, fault=None if mode == "random" else mode)
        if mode == "random":
            kill_when_lines(proc, samples, len(prior) + 1)
        code = proc.wait(300)
        at_kill, torn = complete_lines(samples), samples.read_bytes()[-1:] != b"\n"
        self.eval(problems, name, max_new_tokens=4)
        after = complete_lines(samples)
        ids = [json.loads(line)["problem_id"] for line in after]
        lost = sum(1 for i, line in enumerate(at_kill) if i >= len(after) or after[i] != line)
        ok = code == -signal.SIGKILL and ids == [p.id for p in problems] and after[: len(prior)] == prior and not lost
        return Outcome(ok, f"exit {code}; {len(at_kill)} lines at the kill (torn tail: {torn}), {len(after)} after "
                           f"resume, each problem once: {ids == [p.id for p in problems]}", samples_lost=lost)

    # ---- concurrency

    def concurrent_deposits(self, same: bool) -> Outcome:
        """Two processes put artifacts into the main store at once (the same ones in opposite orders, or
        different ones), three rounds each, while this process reads every indexed artifact."""
        problems = self.fresh_problems(6)
        artifacts = [self.lab.build(p)[0] for p in problems]
        paths = write_payloads(self.root / "payloads", artifacts)
        sets = (paths, paths[::-1]) if same else (paths[:3], paths[3:])
        procs = [put_in_subprocess(self.main, s, rounds=3) for s in sets]
        reads, errors, temporaries = 0, [], Store(self.main).inventory()["temporaries"]
        while any(p.poll() is None for p in procs):
            for artifact_id in Store(self.main).ids():
                try:
                    Store(self.main).read(artifact_id)
                    reads += 1
                except ArtifactError as exc:
                    errors.append(str(exc))
        codes = [p.wait() for p in procs]
        inv = Store(self.main).inventory()
        expected = {artifact_id_of(d) for d in artifacts}
        ok = (codes == [0, 0] and expected <= set(inv["indexed"]) & set(inv["intact"])
              and inv["temporaries"] == temporaries and not errors and not store_consistent(self.main))
        return Outcome(ok, f"exits {codes}; {len(expected)} artifacts indexed and intact: "
                           f"{expected <= set(inv['indexed']) & set(inv['intact'])}; {reads} concurrent reads, "
                           f"{len(errors)} refused")

    # ---- full disk

    def disk_full_deposit(self, where: str) -> Outcome:
        """A deposit on a full disk (``file``: the artifact write; ``index``: the SQLite insert) must raise
        StorageError (ENOSPC for the file) and leave the store as it was; with space back it completes."""
        from graftbench.deposit import deposit_items, items_from_problems
        from graftbench.durable import StorageError

        (problem,) = self.fresh_problems(1)
        store = Store(self.main)
        before, error = store.inventory(), None
        full = disk_full(store.artifacts, free=4096) if where == "file" else index_full()
        with full:
            try:
                deposit_items(self.session, store, items_from_problems([problem]))
            except StorageError as exc:
                error = exc
        unchanged = store.inventory() == before
        report = deposit_items(self.session, store, items_from_problems([problem]))
        ok = (error is not None and unchanged and len(report.deposited) == 1
              and (where == "index" or error.errno == errno.ENOSPC))
        return Outcome(ok, f"store unchanged: {unchanged}; error: {error}"[:150])

    def disk_full_solve(self) -> Outcome:
        """The disk fills after the first sample of a solve: StorageError, the samples file keeps exactly the
        first line, no manifest; with space back the run resumes and completes."""
        from graftbench.durable import StorageError
        from graftbench.runs import RunDir

        problems = self.fresh_problems(3)
        name = "disk-full"
        samples = RunDir(self.runs, name).samples_path
        state: dict = {}

        def fill_disk(sample):
            if not state:
                state["bytes"] = samples.read_bytes()
                state["full"] = disk_full(samples.parent, free=40)
                state["full"].__enter__()

        error = None
        try:
            self.eval(problems, name, max_new_tokens=4, on_sample=fill_disk)
        except StorageError as exc:
            error = exc
        finally:
            if "full" in state:
                state["full"].__exit__(None, None, None)
        unchanged = samples.read_bytes() == state.get("bytes")
        no_manifest = not (samples.parent / "manifest.json").exists()
        result = self.eval(problems, name, max_new_tokens=4)
        ok = (error is not None and error.errno == errno.ENOSPC and unchanged and no_manifest
              and [s.problem_id for s in result.samples] == [p.id for p in problems])
        return Outcome(ok, f"samples file unchanged: {unchanged}; error: {error}"[:150])

    def disk_full_manifest(self) -> Outcome:
        """Rewriting a manifest on a full disk: StorageError, the old manifest intact, no temporary file left."""
        from graftbench.durable import StorageError
        from graftbench.manifest import write_manifest

        path = self.runs / "baseline" / "manifest.json"
        before, error = path.read_bytes(), None
        with disk_full(path.parent, free=100):
            try:
                write_manifest(json.loads(before), path)
            except StorageError as exc:
                error = exc
        intact = path.read_bytes() == before and not list(path.parent.glob(".tmp-*"))
        return Outcome(error is not None and error.errno == errno.ENOSPC and intact,
                       f"old manifest intact: {intact}; error: {error}"[:150])

    # ---- bad inputs

    def bad_problem_set(self, filename: str, content: bytes, where: str) -> Outcome:
        """A bad problem-set file must raise ProblemSetError naming the file and the row (or line)."""
        from graftbench.problem_loading import load_problems
        from graftbench.problem_types import ProblemSetError

        path = self.root / "bad-sets" / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        try:
            load_problems(str(path))
            return Outcome(False, "loaded")
        except ProblemSetError as exc:
            message = str(exc).replace(str(path.parent) + "/", "")
            return Outcome(filename in str(exc) and where in str(exc), message[:110])

    def offline_hub_id(self) -> Outcome:
        """A hub id that cannot be reached offline: an error that names the id and says what to do."""
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
        done = subprocess.run([sys.executable, "-c", HUB_CODE], capture_output=True, text=True, env=env, cwd=REPO,
                              timeout=300)
        out = done.stdout.strip()
        ok = out.startswith("graftbench-no-such-owner/no-such-problem-set:") and "local file" in out
        return Outcome(ok, out[:110])

    def manifest_edit(self, edit: Callable[[dict], str]) -> Outcome:
        """One field of the graft run's manifest changed (not re-sealed): verify-manifest must fail naming it."""
        from graftbench.manifest import verify_manifest, write_manifest

        manifest = json.loads((self.runs / "graft" / "manifest.json").read_text())
        expected = edit(manifest)
        path = self.root / "edited-manifest.json"
        write_manifest(manifest, path)
        mismatches, _ = verify_manifest(path, store=self.main)
        named = [m for m in mismatches if expected in m]
        return Outcome(bool(named), (named or mismatches or ["verified: edit not caught"])[0][:110])

    # ---- all of it

    def run_all(self) -> None:
        """Every fault, one by one."""
        for fault in ARTIFACT_FAULTS:
            self.run("artifact", fault.name, lambda f=fault: self.artifact_fault(f))
        self.run("artifact", "1,000 mutated artifacts read under their id", self.reader_fuzz)
        self.run("path", "artifact ids that leave the store", self.escaping_ids)
        self.run("path", "run names that leave runs/", self.escaping_run_names)
        self.run("path", "manifest naming an artifact outside the store", self.manifest_escaping_id)
        for point in ("deposit-before-rename", "deposit-before-index"):
            self.run("crash", f"SIGKILL deposit at {point}", lambda p=point: self.kill_put(p))
        for i in range(3):
            self.run("crash", f"SIGKILL deposit at a random point ({i + 1})", self.kill_deposit_randomly)
        for mode in ("sample-torn", "sample-before-append", "random"):
            self.run("crash", f"SIGKILL solve at {mode}", lambda m=mode: self.kill_solve(m))
        self.run("concurrency", "two processes deposit the same artifacts", lambda: self.concurrent_deposits(True))
        self.run("concurrency", "two processes deposit different artifacts", lambda: self.concurrent_deposits(False))
        self.run("disk full", "writing an artifact", lambda: self.disk_full_deposit("file"))
        self.run("disk full", "inserting an index row", lambda: self.disk_full_deposit("index"))
        self.run("disk full", "appending a sample", self.disk_full_solve)
        self.run("disk full", "writing a manifest", self.disk_full_manifest)
        for name, filename, content, where in PROBLEM_SET_FAULTS:
            self.run("problem set", name, lambda f=filename, c=content, w=where: self.bad_problem_set(f, c, w))
        self.run("problem set", "hub id unreachable offline", self.offline_hub_id)
        for name, edit in MANIFEST_EDITS:
            self.run("manifest", name, lambda e=edit: self.manifest_edit(e))


def report(rows: list[Row], seconds: float, console) -> bool:
    """Print the table and the totals; True when every fault was survived with nothing lost."""
    from rich.table import Table

    table = Table(title="graftbench fault injection", show_lines=False)
    for column, justify in (("category", "left"), ("fault", "left"), ("survived", "center"), ("artifacts lost", "right"),
                            ("samples lost", "right"), ("detail", "left")):
        table.add_column(column, justify=justify, overflow="fold")
    for row in rows:
        table.add_row(row.category, row.fault, "yes" if row.survived else "NO", str(row.artifacts_lost),
                      str(row.samples_lost), row.detail)
    console.print(table)
    survived = sum(r.survived for r in rows)
    artifacts, samples = sum(r.artifacts_lost for r in rows), sum(r.samples_lost for r in rows)
    console.print(f"faults tried: {len(rows)}   faults survived: {survived}   artifacts lost: {artifacts}   "
                  f"samples lost: {samples}   ({seconds:.0f} s)")
    return survived == len(rows) and artifacts == 0 and samples == 0


def main(argv: list[str] | None = None) -> int:
    """Run every fault against a fresh store in a temporary folder; print (and with ``--out`` write) the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the report to this text file")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from rich.console import Console

    from graftbench.session import open_session

    started = time.perf_counter()
    session = open_session(args.model)
    with tempfile.TemporaryDirectory(prefix="graftbench-faults-") as tmp:
        bench = Bench(session, Path(tmp), args.seed)
        bench.setup()
        bench.run_all()
    console = Console(record=True, width=200)
    console.print(f"model {session.config.model} ({session.config.dtype}, chunk size {session.config.chunk_size}, "
                  f"config {session.config.fingerprint[:16]}); seed {args.seed}")
    ok = report(bench.rows, time.perf_counter() - started, console)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(console.export_text())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
