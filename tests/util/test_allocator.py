"""The allocator settings for repeated grafts (:mod:`graftbench.util.allocator`) reach a process only through the
command line or an explicit call: ``import graftbench`` (the library, the API, the engine) leaves the importing
process's ``mallopt`` thresholds and ``THP_MEM_ALLOC_ENABLE`` as they were."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from graftbench.util.allocator import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, MMAP_THRESHOLD_MAX, DEFAULT_TRIM_BYTES

# Import each module named in argv (or call graftbench.util.allocator's function named by "call:NAME") in a fresh
# process whose ctypes records every call of glibc's mallopt made through it (the only way Python code reaches
# mallopt), and print those calls and THP_MEM_ALLOC_ENABLE afterwards.
_PROBE = """
import ctypes, importlib, json, os, sys
calls = []

class RecordingCDLL(ctypes.CDLL):
    def __getitem__(self, name):
        function = super().__getitem__(name)
        if name != "mallopt":
            return function

        class Recorded:
            argtypes = None

            def __call__(self, *args):
                calls.append(list(args))
                return function(*args)

        return Recorded()

ctypes.CDLL = RecordingCDLL
for name in sys.argv[1:]:
    if name.startswith("call:"):
        getattr(importlib.import_module("graftbench.util.allocator"), name[5:])()
    else:
        importlib.import_module(name)
print(json.dumps({"mallopt_calls": calls, "thp": os.environ.get("THP_MEM_ALLOC_ENABLE")}))
"""

APPLIED = {"mallopt_calls": [[M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX], [M_TRIM_THRESHOLD, DEFAULT_TRIM_BYTES]],
           "thp": "1"}
UNTOUCHED = {"mallopt_calls": [], "thp": None}


def _probe(*steps: str) -> dict:
    env = {key: value for key, value in os.environ.items() if key not in ("THP_MEM_ALLOC_ENABLE", "GRAFTBENCH_MALLOC")}
    done = subprocess.run([sys.executable, "-c", _PROBE, *steps], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_library_leaves_the_allocator_untouched():
    assert _probe("graftbench", "graftbench.api", "graftbench.results.manifest", "graftbench.store.folder",
                  "graftbench.engine.torch.kv_pool") == UNTOUCHED


def test_the_command_line_sets_the_allocator_when_it_starts():
    assert _probe("graftbench.cli.app") == APPLIED


def test_the_explicit_call_sets_the_allocator_and_the_probe_sees_it():
    assert _probe("graftbench", "call:set_allocator_for_grafts") == APPLIED
