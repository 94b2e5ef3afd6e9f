"""The fault catalogue: every way an artifact, a manifest, a problem-set file or a name can be wrong, as data and
small functions, shared by the fault-injection runner (:mod:`graftbench.faults.runner`, ``benchmarks/faults.py``)
and the tests, so that both apply the same faults.

* Forging: :func:`split_artifact`, :func:`forge`, :func:`reforge`, :func:`flip_bit`, :func:`edit_header_in_place`,
  :func:`with_header_text`, :func:`pickle_bomb`, :func:`torch_save_bytes`, and the random or argument-driven
  mutations :func:`mutate` and :func:`mutate_artifact`.
* :class:`Lab` builds, damages and plants artifacts for :func:`tiny_problem` problems; :data:`ARTIFACT_FAULTS`
  lists each artifact fault with the check that must refuse it.
* :data:`MANIFEST_EDITS`, :func:`escaping_artifact_entry`, :data:`PROBLEM_SET_FAULTS`, :data:`ESCAPING_IDS` and
  :data:`ESCAPING_RUN_NAMES`: the bad inputs.
"""

from __future__ import annotations

import dataclasses
import io
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from ..engine.registry import fault_ops
from ..store.codec import HEADER_KEY, decode_header, payload_sha256
from ..store.ids import artifact_id_of
from ..eval.deposit import deposit_meta
from ..problems.types import Problem
from ..store.folder import Store

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
        """The header fields :func:`graftbench.eval.deposit.deposit_items` writes (they make the artifact routable)."""
        return deposit_meta(self.session, problem, ids, "reference")

    def build(self, problem: Problem, config=None, parent=None, ids: list[int] | None = None,
              routable: bool = True) -> tuple[bytes, dict]:
        """Artifact bytes and header for ``problem``'s deposit text (or ``ids``), not yet stored: byte-identical
        to what ``deposit`` writes for a reference solution."""
        ids = ids or self.session.deposit_ids(problem.problem, problem.answer, problem.solution)
        meta = self.meta(problem, ids) if routable else {"source": "reference"}
        return fault_ops(self.session.engine_name).build_artifact(self.session, ids, meta, config, parent)

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

# --------------------------------------------------------------------------------------------- bad manifests


def sample_name(sample: dict) -> str:
    """How ``verify-manifest`` names a sample: ``<problem_id>#<sample_index>``."""
    return f"{sample['problem_id']}#{sample.get('sample_index', 0)}"


def _edit_sample(field: str, change: Callable):
    def edit(manifest: dict) -> str:
        sample = manifest["samples"][0]
        sample[field] = change(sample[field])
        return f"sample {sample_name(sample)}: {field}"
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
    sample_id = sample_name(manifest["samples"][0])
    manifest["sealed_fields"]["samples"][sample_id]["output"] = "0" * 16
    return f"sample {sample_id}: output"


def _drop_sample(manifest: dict) -> str:
    return f"sample {sample_name(manifest['samples'].pop())} removed"


def _artifact_entry(manifest: dict) -> str:
    manifest["artifacts"][0]["tokens"] += 1
    return "artifacts"


def escaping_artifact_entry(manifest: dict) -> str:
    """Add an artifact entry whose id leaves the store (``../../../../etc/passwd``); returns the text that a line
    of verify_manifest's mismatches must contain (no file outside the store may be read)."""
    manifest["artifacts"].append({"id": "../../../../etc/passwd", "sha256": "0" * 64, "tokens": 1})
    return "is not 64 lowercase hex digits"


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
# --------------------------------------------------------------------------------------------- bad problem sets

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


def write_problem_set(path: Path, problems: list[Problem]) -> Path:
    """Write ``problems`` as a JSON Lines file (id, problem, answer, solution) that ``load_problems`` reads back as
    the same set (for subprocesses and resumes); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"id": p.id, "problem": p.problem, "answer": p.answer, "solution": p.solution} for p in problems]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path

# --------------------------------------------------------------------------------------------- mutations

MUTATION_KINDS = ("flip", "cut", "edit", "swap", "drop", "dtype")


def mutate(data: bytes, kind: str, arg) -> bytes:
    """One mutation of valid artifact bytes, chosen by ``kind`` and ``arg`` (integers are taken modulo the size
    they index):

    * ``flip`` (bit): one bit flipped; ``cut`` (length): the bytes cut to that length;
    * ``edit`` ((field, value)): the header field set to the value, header re-encoded as JSON (tensors kept);
    * ``swap`` ((i, j, reseal)): layer i's keys and layer j's values swapped, payload hash resealed or not;
    * ``drop`` (index): one tensor (by sorted name) removed; ``dtype`` ((index, dtype)): one tensor cast.

    The last three are re-encoded (:func:`forge`), so that the file is consistent with its own hash."""
    if kind == "flip":
        return flip_bit(data, arg % (len(data) * 8))
    if kind == "cut":
        return data[: arg % len(data)]
    header, tensors = split_artifact(data)
    if kind == "edit":
        field, value = arg
        return with_header_text(data, json.dumps({**header, field: value}))
    if kind == "swap":
        i, j, reseal = arg
        tensors[f"layers.{i}.keys"], tensors[f"layers.{j}.values"] = tensors[f"layers.{j}.values"], tensors[f"layers.{i}.keys"]
        return forge(header, tensors, reseal=reseal)
    names = sorted(tensors)
    if kind == "drop":
        tensors.pop(names[arg % len(names)])
        return forge(header, tensors)
    if kind == "dtype":
        name, dtype = names[arg[0] % len(names)], arg[1]
        tensors[name] = tensors[name].to(dtype)
        return forge(header, tensors)
    raise ValueError(f"unknown mutation {kind!r} (one of {', '.join(MUTATION_KINDS)})")


def mutate_artifact(data: bytes, rng: random.Random) -> bytes:
    """One random mutation of valid artifact bytes (:func:`mutate`): a flipped bit, a cut, an edited header field
    or swapped tensors (the latter two re-encoded, so that the file is consistent with its own hash)."""
    kind = rng.choice(("flip", "cut", "edit", "swap"))
    if kind == "flip":
        return mutate(data, kind, rng.randrange(len(data) * 8))
    if kind == "cut":
        return mutate(data, kind, rng.randrange(len(data)))
    if kind == "edit":
        field = rng.choice(("positions", "dtype", "kv_heads", "head_dim", "layers", "parent", "format", "chunk_size",
                            "weights_sha256", "payload_sha256"))
        value = rng.choice((None, -1, 0, 7, 10**9, "x", "float32", [0, 3], [{"kind": "full"}], "a" * 64))
        return mutate(data, kind, (field, value))
    layers = len(split_artifact(data)[0]["layers"])
    i, j = rng.randrange(layers), rng.randrange(layers)
    return mutate(data, kind, (i, j, rng.random() < 0.5))
