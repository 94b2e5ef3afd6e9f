"""Which committed expectation a replay on this machine should use: expectations are recorded per kind of CPU
(``manifests/<kind>/``), so the documented replay names a file and this module finds the one recorded for
this machine's kind, or says that there is none and which kinds have one.

- A bare file name (``exact-smollm2-135m.json``, no folder) that is not a file in the working directory is looked
  up in every kind's manifest folder: the one whose recorded CPU is of this machine's kind
  (:func:`graftbench.util.isa.same_cpu_kind`), or whose logged replays found it reproducing here, is picked.
- A path to another kind's expectation is replayed as asked; :func:`advice` names this kind's own when one exists,
  and otherwise says that expectations are per kind of CPU and lists the kinds that hold one of this name.

Imports no torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from . import layout
from .exact_manifest import known_to_reproduce
from ..util.isa import describe_cpu


@dataclass(frozen=True)
class KindLookup:
    """Where the expectations of one file name lie: ``name`` (the file name), ``kinds`` (every kind folder holding
    a file of that name, sorted), ``here`` (the path among them known to reproduce on this CPU, ``None`` where none
    is) and ``cpu`` (this CPU, as :func:`graftbench.util.isa.describe_cpu` writes it)."""

    name: str
    kinds: tuple[str, ...]
    here: Path | None
    cpu: str


def lookup(name: str, root: Path, here_env: dict, records: list[dict]) -> KindLookup:
    """The expectations named ``name`` under ``root/manifests/<kind>/``, and the one known to reproduce on
    the CPU ``here_env`` (:func:`graftbench.util.isa.environment`) given the replay log's ``records``: recorded on
    this kind, or replayed equal on it. A file that is not JSON is skipped (verify-manifest reports it)."""
    kinds, here = [], None
    for kind in layout.kinds(root):
        path = layout.manifest_folder(root, kind) / name
        if not path.is_file():
            continue
        kinds.append(kind)
        try:
            expected = json.loads(path.read_text())
        except ValueError:
            continue
        if here is None and isinstance(expected, dict) and known_to_reproduce(expected, records, here_env):
            here = path
    return KindLookup(name, tuple(kinds), here, describe_cpu(here_env))


def resolve(expect: Path, root: Path, here_env: dict, records: list[dict]) -> Path:
    """The expectation file a replay of ``expect`` reads: ``expect`` itself when it exists or names a folder;
    for a bare file name, the one recorded for this machine's kind (:func:`lookup`).

    Raises ``FileNotFoundError`` for a bare name with no expectation known to reproduce on this kind (the message
    says that expectations are per kind of CPU, names this CPU and lists the kinds that hold one), or where ``root``
    has no ``manifests/`` folder to look it up in (the message says to give a path or run from a checkout)."""
    if expect.exists() or expect.parent != Path("."):
        return expect
    if not (Path(root) / layout.MANIFESTS).is_dir():
        raise FileNotFoundError(f"{expect} is not a file, and {Path(root).resolve()} holds no "
                                f"{layout.MANIFESTS}/ folder to look it up in: give the expectation's path, or run "
                                "from a graftbench checkout, where a bare name picks this kind of CPU's")
    found = lookup(expect.name, root, here_env, records)
    if found.here is not None:
        return found.here
    raise FileNotFoundError(none_here(found))


def none_here(found: KindLookup) -> str:
    """The line for a name with no expectation known to reproduce on this CPU."""
    held = ", ".join(found.kinds) if found.kinds else "none"
    return (f"expectations are recorded per kind of CPU, and none named {found.name} is known to reproduce on this "
            f"one ({found.cpu}); kinds with one: {held} (record this kind's with make record-exact-cpu CPU=<kind>)")


def advice(expect: Path, expected: dict, root: Path, here_env: dict, records: list[dict]) -> str | None:
    """A note for a replay of ``expect`` (its manifest ``expected``) on the CPU ``here_env``: ``None`` when it is
    known to reproduce here; else the path of this kind's own expectation of that name, or :func:`none_here`."""
    if known_to_reproduce(expected, records, here_env):
        return None
    found = lookup(expect.name, root, here_env, records)
    recorded = describe_cpu(expected.get("environment", {}))
    if found.here is not None:
        return (f"{expect} was recorded on {recorded}, not this kind of CPU ({found.cpu}); expectations are per "
                f"kind of CPU, and this kind's is {found.here}")
    return f"{expect} was recorded on {recorded}; " + none_here(found)


def replay_target(expect: Path, root: Path = Path(".")) -> tuple[Path, str | None]:
    """For ``check-exact --expect``: the file to replay (:func:`resolve`) and a note to print first (the picked
    file, or :func:`advice`), on this machine's CPU with ``root``'s replay log. Raises ``FileNotFoundError`` as
    :func:`resolve`, and ``ValueError`` for a replay log that is not JSON lines."""
    from ..util.isa import environment
    from .exact_manifest import read_replay_log

    here_env, records = environment(), read_replay_log(Path(root) / layout.REPLAY_LOG)
    path = resolve(expect, root, here_env, records)
    if path != expect:
        return path, f"{expect.name}: the expectation recorded for this kind of CPU is {path}"
    from .anchor import exactness_shape

    try:
        expected = json.loads(path.read_text())
    except (OSError, ValueError):
        return path, None  # the replay's own loading names what is wrong with the file
    if not isinstance(expected, dict) or exactness_shape(expected):
        return path, None  # as above: not shaped as an expectation (an environment not an object), no advice read
    return path, advice(path, expected, root, here_env, records)
