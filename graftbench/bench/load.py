"""Model load, cold (GGUF de-quantization into an empty cache folder) against warm (the cached weights), each in
a fresh Python process so that imports are timed apart and nothing is already in memory.

Run as ``python -m graftbench.bench.load MODEL DTYPE``: prints ``{"import_s", "load_s", "from_cache"}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time


def _probe(model: str, dtype: str) -> dict:
    started = time.perf_counter()
    import torch  # noqa: F401
    import transformers  # noqa: F401

    from ..engine.registry import DEFAULT_ENGINE, benchmark_loader

    loader = benchmark_loader(DEFAULT_ENGINE)  # the engine graftbench bench measures: its loading code alone
    imported = time.perf_counter()
    loaded = loader.load_model(model, dtype=dtype)
    return {"import_s": imported - started, "load_s": loaded.load_s, "from_cache": loaded.from_cache}


def probe_in_subprocess(model: str, dtype: str, cache: str | None = None) -> dict:
    """Run the load probe in a new Python process (``GRAFTBENCH_CACHE=cache`` when given).

    Raises ``RuntimeError`` with the probe's stderr when it fails.
    """
    env = {**os.environ, **({"GRAFTBENCH_CACHE": cache} if cache else {})}
    done = subprocess.run([sys.executable, "-m", "graftbench.bench.load", model, dtype], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"model load probe failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_load(model: str, dtype: str, cold: bool, warm_repeats: int = 2) -> dict:
    """Cold load (when ``cold``: an empty temporary cache folder, so the GGUF is de-quantized; the folder is
    removed after) and warm loads from the user cache (``warm_repeats`` processes). Seconds, imports apart."""
    result = {}
    if cold:
        with tempfile.TemporaryDirectory(prefix="graftbench-cold-") as folder:
            result["cold"] = probe_in_subprocess(model, dtype, folder)
    probe_in_subprocess(model, dtype)  # make sure the user cache holds the weights
    result["warm"] = [probe_in_subprocess(model, dtype) for _ in range(warm_repeats)]
    return result


if __name__ == "__main__":
    from ..util.allocator import set_allocator_for_grafts

    set_allocator_for_grafts()  # as the command line that starts this probe
    print(json.dumps(_probe(sys.argv[1], sys.argv[2])))
