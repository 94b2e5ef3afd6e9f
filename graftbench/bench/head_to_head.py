"""graftbench's graft against llama.cpp's state load, one repetition of each in turn, at one context size.

The peer row (:mod:`.peer`) runs llama.cpp after every other section, twenty minutes or more after the TTFT rows
it is compared with; on a machine whose speed drifts (the Intel Xeon runs of 2026-12-03 differed by a fifth in
prefill time between 07:45 and 11:09) that compares two moments, not two tools. Here a llama.cpp process started
with ``peer_llama.py --serve-size N`` holds its saved state, and each repetition runs graftbench's graft + 1-token
query and llama.cpp's state load + 1-token query back to back, the order swapped every repetition, so that both
medians come from the same minutes.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from ..engine.base import EngineSession
from ..store.folder import Store
from .peer import peer_command, peer_skip
from .stats import summary
from .ttft import deposit_tokens, graft_once
from .workload import Workload

# A graft less its query forward; copy_s (the to-device copy) only on a GPU, counted as 0 where absent.
RESTORE_PARTS = ("read_s", "integrity_s", "parse_s", "checks_s", "copy_s", "rebuild_s")


class PeerServer:
    """A ``peer_llama.py --serve-size`` process: :meth:`restore` asks it for one state load + 1-token query.

    Raises ``RuntimeError`` (with the tail of the peer's stderr) when it exits or answers something else.
    """

    def __init__(self, command: list[str], stderr_path: Path):
        self._stderr_path = stderr_path
        self._stderr = stderr_path.open("w")
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self._stderr, text=True)
        self.ready = self._answer()

    def _answer(self) -> dict:
        line = self._process.stdout.readline()
        if not line:
            self._process.wait()
            tail = self._stderr_path.read_text()[-400:].strip()
            raise RuntimeError(f"peer exited (status {self._process.returncode}): {tail}")
        return json.loads(line)

    def restore(self) -> dict:
        """``{"load_state_s", "ttft_restore_1tok_s", "logits_equal"}`` of one state load + 1-token query."""
        self._process.stdin.write("restore\n")
        self._process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self._process.poll() is None:
            try:
                self._process.stdin.write("quit\n")
                self._process.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self._process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._stderr.close()


def measure_head_to_head(session: EngineSession, python: Path | None, workload: Workload, store_root: Path, tokens: int,
                         repeats: int, threads: int, on_step=lambda: None) -> dict:
    """Graft + 1-token query (XXH3-128) against llama.cpp's state load + 1-token query on ``workload.context[:
    tokens]``, ``repeats`` pairs, graftbench first in even repetitions and llama.cpp first in odd ones.

    Returns seconds as :func:`~.stats.summary` medians: graftbench's ``restore_s`` (read, XXH3-128, parse, checks,
    rebuild) and ``total_s`` (with the query forward), llama.cpp's ``load_state_s`` and ``ttft_restore_1tok_s``;
    ``restore_ratio`` and ``graft_ratio`` (llama.cpp over graftbench, > 1 where graftbench is faster); ``pairs``
    (each repetition's four figures and which side ran first); whether every graft gave one logits digest and every
    llama.cpp load its prefill's logits. ``{"skipped": reason}`` without a peer Python or GGUF model (see
    :func:`.peer.peer_skip`) or when the peer fails (its stderr tail is kept).
    """
    skipped = peer_skip(session, python)
    if skipped:
        return {"skipped": skipped}
    store = Store(store_root)
    artifact_id = deposit_tokens(session, store, workload.context[:tokens])
    query = workload.query[:1]
    with tempfile.TemporaryDirectory(prefix="graftbench-h2h-") as folder:
        command = peer_command(session, python, workload, workload.context[:tokens], folder, threads,
                               "--serve-size", str(tokens))
        try:
            peer = PeerServer(command, Path(folder) / "peer.stderr")
        except (RuntimeError, ValueError) as exc:
            return {"skipped": f"peer failed: {exc}"}
        try:
            pairs = [_pair(session, store, artifact_id, query, peer, graftbench_first=i % 2 == 0, on_step=on_step)
                     for i in range(repeats)]
        except (RuntimeError, ValueError) as exc:
            return {"skipped": f"peer failed: {exc}"}
        finally:
            peer.close()
    return _result(tokens, peer.ready, pairs)


def _pair(session: EngineSession, store: Store, artifact_id: str, query: list[int], peer: PeerServer,
          graftbench_first: bool, on_step) -> dict:
    def graft():
        return graft_once(session, store, artifact_id, query, "xxh3_128")

    if graftbench_first:
        ours = graft()
        theirs = peer.restore()
    else:
        theirs = peer.restore()
        ours = graft()
    on_step()
    return {"first": "graftbench" if graftbench_first else "llama.cpp",
            "graftbench_restore_s": sum(ours.get(key, 0.0) for key in RESTORE_PARTS), "graftbench_total_s": ours["total_s"],
            "graftbench_logits": ours["logits"], "llama_cpp_load_state_s": theirs["load_state_s"],
            "llama_cpp_ttft_restore_1tok_s": theirs["ttft_restore_1tok_s"],
            "llama_cpp_logits_equal": theirs["logits_equal"]}


def _result(tokens: int, ready: dict, pairs: list[dict]) -> dict:
    figures = {key: summary([pair[key] for pair in pairs]) for key in (
        "graftbench_restore_s", "graftbench_total_s", "llama_cpp_load_state_s", "llama_cpp_ttft_restore_1tok_s")}
    return {
        "tokens": tokens, "repeats": len(pairs), "state_file_bytes": ready.get("state_file_bytes"),
        **figures,
        "restore_ratio": figures["llama_cpp_load_state_s"]["median"] / figures["graftbench_restore_s"]["median"],
        "graft_ratio": (figures["llama_cpp_ttft_restore_1tok_s"]["median"]
                        / figures["graftbench_total_s"]["median"]),
        "graftbench_logits_stable": len({pair["graftbench_logits"] for pair in pairs}) == 1,
        "llama_cpp_logits_equal": all(pair["llama_cpp_logits_equal"] for pair in pairs),
        "pairs": pairs,
        "method": ("one repetition of each side in turn, graftbench first in even repetitions; graftbench: read + "
                   "XXH3-128 + parse + checks + rebuild (restore) and its 1-token query forward (total); llama.cpp: "
                   "llama_state_load_file (load) and its 1-token eval + logits copy; ratios are llama.cpp's median "
                   "over graftbench's"),
    }
