"""The allocator settings for repeated grafts (:mod:`graftbench.util.allocator`) reach a process only through the
command line or an explicit call: ``import graftbench`` (the library, the API, the engine) leaves the importing
process's ``mallopt`` thresholds and ``THP_MEM_ALLOC_ENABLE`` as they were."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from graftbench.util.allocator import (DEFAULT_TRIM_BYTES, M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, MMAP_THRESHOLD_MAX,
                                       graft_trim_bytes)

# Import each module named in argv (or call graftbench.util.allocator's function named by "call:NAME", with one
# whole-number argument by "call:NAME:N"; or reserve a KV pool of N bytes by "pool:N") in a fresh process whose
# ctypes records every call of glibc's mallopt made through it (the only way Python code reaches mallopt), and print
# those calls and THP_MEM_ALLOC_ENABLE afterwards.
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
        function, *argument = name[5:].split(":")
        getattr(importlib.import_module("graftbench.util.allocator"), function)(*map(int, argument))
    elif name.startswith("pool:"):
        importlib.import_module("graftbench.engine.torch.kv_pool").reserve(int(name[5:]))
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


def test_the_caller_passes_the_whole_trim_threshold_capped_at_a_c_int():
    assert _probe("call:keep_freed_memory:3221225472", "call:keep_freed_memory:1048576")["mallopt_calls"] == [
        [M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX], [M_TRIM_THRESHOLD, 2**31 - 1],
        [M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX], [M_TRIM_THRESHOLD, 1 << 20]]  # as given: a lower one lowers it


def test_a_kv_pool_keeps_the_graft_setting_and_raises_it_to_hold_a_larger_pool():
    assert _probe("call:set_allocator_for_grafts", "pool:67108864")["mallopt_calls"] == [
        *APPLIED["mallopt_calls"], *APPLIED["mallopt_calls"]]  # a 64 MiB pool: the 1 GiB setting kept
    assert graft_trim_bytes(64 << 20) == DEFAULT_TRIM_BYTES
    assert graft_trim_bytes(3 << 30) == 3 << 30
