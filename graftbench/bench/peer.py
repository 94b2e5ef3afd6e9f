"""The llama.cpp peer row: ``peer_llama.py`` (next to this module, shipped with the package) run as a script by a
separate Python that has ``llama-cpp-python`` (``make bench-peer-env``), on the same GGUF file and the same token
ids. graftbench never imports that script: it needs only the standard library, numpy, psutil and llama_cpp."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from ..util import isa
from ..engine.base import EngineSession
from .workload import Workload

SCRIPT = Path(__file__).resolve().with_name("peer_llama.py")
# llama.cpp's AMX matrix product segfaults on the first eval on an Intel Xeon with AMX (llama.cpp issue #20824, seen
# here with llama-cpp-python 0.3.36): on such a CPU the peer loads without extra buffer types (AMX, repacking).
AMX_FLAGS = frozenset({"amx_int8", "amx_tile"})


def peer_options(flags: set[str] | None = None) -> list[str]:
    """Extra ``peer_llama.py`` options for a CPU with ``flags`` (default: this CPU's): ``--no-extra-buffers`` where
    it has AMX (see :data:`AMX_FLAGS`), none elsewhere."""
    flags = isa.cpu_flags() if flags is None else flags
    return ["--no-extra-buffers"] if AMX_FLAGS & flags else []


def peer_skip(session: EngineSession, python: Path | None) -> str | None:
    """Why the peer cannot run for ``session`` with ``python``: no peer Python given or found, a model that is not
    a GGUF file, or the script missing; ``None`` when it can."""
    if python is None:
        return "no --peer-python given"
    if not python.is_file():
        return f"no peer Python at {python} (make bench-peer-env builds llama-cpp-python there)"
    if session.loaded.resolved.kind != "gguf" or not SCRIPT.is_file():
        return f"the model is not a GGUF file, or {SCRIPT} is missing"
    return None


def peer_command(session: EngineSession, python: Path, workload: Workload, context: list[int], folder: str, threads: int,
                 *options: str) -> list[str]:
    """Write ``context`` (token ids) with ``workload``'s query and decode prompt to ``folder/tokens.json`` and return
    the command line that runs the peer script on them with ``threads`` threads, ``options`` and this CPU's
    :func:`peer_options`."""
    tokens = Path(folder) / "tokens.json"
    tokens.write_text(json.dumps({"context": context, "query": workload.query, "decode_prompt": workload.decode_prompt}))
    return [str(python), str(SCRIPT), "--gguf", session.loaded.resolved.path, "--tokens-file", str(tokens),
            "--threads", str(threads), "--work-dir", folder, *options, *peer_options()]


def measure_peer(session: EngineSession, python: Path, workload: Workload, sizes: list[int], repeats: int,
                 decode_tokens: int, threads: int) -> dict:
    """Run the peer script; returns its JSON, or ``{"skipped": reason}`` when the peer cannot run
    (:func:`peer_skip`) or the script fails (its stderr tail is kept)."""
    skipped = peer_skip(session, python)
    if skipped:
        return {"skipped": skipped}
    with tempfile.TemporaryDirectory(prefix="graftbench-peer-") as folder:
        command = peer_command(session, python, workload, workload.context, folder, threads,
                               "--sizes", ",".join(map(str, sizes)), "--repeats", str(repeats),
                               "--decode-tokens", str(decode_tokens))
        done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        return {"skipped": f"peer script failed (exit {done.returncode}): {done.stderr.strip()[-400:]}"}
    return json.loads(done.stdout)
