"""Router lookup time and resident memory as the store grows (10, 1,000, 100,000 artifacts indexed).

Artifacts here are small (4 tokens, one layer): the index, not the payload, is under test. Their problem texts
are seeded random sequences of 30 words drawn from the vocabulary of the benchmark's problem set (AIME 2024:
about 1,500 distinct words) with 4 numbers, each a different problem; the vocabulary is kept in the store folder
(``vocabulary.json``) for the probe. Every lookup runs :func:`graftbench.engine.graft.route`, as
``eval --graft`` does, in a fresh process per store size (so resident memory is that of a process that opened
the store and routed, not of the one that built it).

Run as ``python -m graftbench.bench.store_scale ROOT N``: prints the probe's JSON for a store of N artifacts.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import torch

from ..store.codec import encode_artifact
from ..engine.graft import route
from ..problems.types import Problem, normalize_problem_text, problem_key
from ..store.folder import Store
from .stats import rss_bytes, summary

FINGERPRINT = "b" * 64
_WORDS = ("integer", "triangle", "circle", "sum", "product", "digits", "remainder", "divisible", "prime", "sequence",
          "polynomial", "roots", "area", "perimeter", "probability", "coins", "grid", "paths", "tiles", "modulo",
          "positive", "real", "complex", "angle", "chord", "tangent", "vertex", "edge", "graph", "color", "ways",
          "arrange", "choose", "distinct", "ordered", "pairs", "least", "greatest", "number", "find", "let", "be",
          "the", "of", "a", "such", "that", "is", "and", "with", "in", "on", "for", "each", "every", "some")
LOOKUPS = 50
VOCABULARY = "vocabulary.json"


def vocabulary(problems: list[Problem]) -> list[str]:
    """Distinct alphabetic words of the problems' statements, lower-cased and sorted (the built-in list when
    they have none)."""
    words = {w for p in problems for w in p.problem.lower().split() if w.isalpha()}
    return sorted(words) or list(_WORDS)


def problem_text(i: int, words: list[str]) -> str:
    """The seeded problem text of artifact ``i``: 30 words of ``words`` and 4 numbers."""
    rng = random.Random(i)
    words = [rng.choice(words) for _ in range(30)]
    for _ in range(4):
        words.insert(rng.randrange(len(words)), str(rng.randrange(10, 10**6)))
    return " ".join(words) + "."


def _artifact(i: int, words: list[str]) -> bytes:
    text = normalize_problem_text(problem_text(i, words))
    header = {"config_fingerprint": FINGERPRINT, "positions": [0, 4], "dtype": "float32", "kv_heads": 1,
              "head_dim": 4, "layers": [{"kind": "full", "seen": 4, "kept": 4}], "parent": None,
              "problem_text": text, "problem_key": problem_key(Problem(str(i), text, "0")), "answer": "0"}
    layer = torch.full((1, 1, 4, 4), float(i))
    return encode_artifact(header, torch.arange(4), [(layer, layer.clone())])


def grow(store: Store, start: int, end: int, words: list[str], on_step=lambda n: None) -> float:
    """Deposit artifacts ``start..end-1``; returns seconds. ``on_step(n)`` after every 1,000."""
    started = time.perf_counter()
    for i in range(start, end):
        store.put(_artifact(i, words))
        if (i + 1) % 1000 == 0:
            on_step(1000)
    on_step((end - start) % 1000)
    return time.perf_counter() - started


def _near(text: str) -> str:
    """The same problem with its first number changed: routes as ``similar``."""
    words = text.split()
    i = next(k for k, w in enumerate(words) if w.isdigit())
    words[i] = str(int(words[i]) + 1)
    return " ".join(words)


def probe(root: Path, n: int) -> dict:
    """Open the store at ``root`` (holding ``n`` artifacts) and route ``LOOKUPS`` queries of each kind: an exact
    hit, a near miss (similar) and an unseen problem (none). Seconds per lookup and resident memory in bytes."""
    store = Store(root)
    words = json.loads((root / VOCABULARY).read_text())
    rng = random.Random(n)
    kinds = {"exact": lambda i: problem_text(i, words), "similar": lambda i: _near(problem_text(i, words)),
             "none": lambda i: problem_text(n + 10**7 + i, words)}
    figures, routed = {}, {}
    for kind, make in kinds.items():
        seconds = []
        for _ in range(LOOKUPS):
            text = normalize_problem_text(make(rng.randrange(n)))
            started = time.perf_counter()
            result = route(store, FINGERPRINT, problem_key(Problem("q", text, "0")), text, 0.6)
            seconds.append(time.perf_counter() - started)
            routed[kind] = routed.get(kind, 0) + (result.kind == kind)
        figures[kind] = summary(seconds)
    index_bytes = store.index_path.stat().st_size
    return {"artifacts": n, "lookup_s": figures, "routed_as_expected": routed, "lookups_per_kind": LOOKUPS,
            "rss_bytes": rss_bytes(), "index_bytes": index_bytes}


def probe_in_subprocess(root: Path, n: int) -> dict:
    """:func:`probe` in a fresh Python process; raises ``RuntimeError`` with its stderr when it fails."""
    done = subprocess.run([sys.executable, "-m", "graftbench.bench.store_scale", str(root), str(n)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"store scale probe failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_store_scale(root: Path, sizes: list[int], words: list[str], on_step=lambda n: None) -> list[dict]:
    """Grow one store through ``sizes`` (ascending artifact counts) with texts from ``words``, probing at each;
    build seconds included."""
    store, held, rows = Store(root), 0, []
    (root / VOCABULARY).write_text(json.dumps(words))
    for n in sorted(sizes):
        build_s = grow(store, held, n, words, on_step)
        held = n
        rows.append({**probe_in_subprocess(root, n), "build_s": build_s})
    return rows


if __name__ == "__main__":
    print(json.dumps(probe(Path(sys.argv[1]), int(sys.argv[2]))))
