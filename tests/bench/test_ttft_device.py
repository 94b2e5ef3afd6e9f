"""The TTFT rows on a GPU: the graft's to-device copy timed apart and the energy of each query, shown on the CPU
(where a row gains neither) with stand-ins for the device copy and the meter, and the markdown of a GPU row."""

from __future__ import annotations

import pytest
import torch

from graftbench.bench.report import ttft_device_lines, ttft_table
from graftbench.bench.ttft import deposit_tokens, graft_once, prefill_once
from graftbench.engine.torch import graft
from graftbench.store.folder import Store

IDS, QUERY = list(range(10, 50)), [60, 61]
CPU_GRAFT_KEYS = ["read_s", "integrity_s", "parse_s", "checks_s", "rebuild_s", "query_s", "total_s", "bytes", "logits"]


class CountingMeter:
    """A stand-in energy meter whose counter is 2.5 J further on at each read."""

    def __init__(self):
        self.joules = 0.0

    def read(self) -> float:
        self.joules += 2.5
        return self.joules

    def describe(self) -> dict:
        return {"method": "nvml", "detail": "NVML total energy of cuda:0", "measured": True}


@pytest.fixture(scope="module")
def reduced():
    from graftbench.engine.torch.session import open_session

    return open_session("random:gemma3-reduced", dtype="float32", chunk_size=16)


@pytest.mark.model
def test_on_the_cpu_a_graft_row_has_no_copy_step_and_energy_only_with_a_meter(reduced, tmp_path):
    store = Store(tmp_path)
    artifact_id = deposit_tokens(reduced, store, IDS)
    row = graft_once(reduced, store, artifact_id, QUERY, "xxh3_128")
    assert list(row) == CPU_GRAFT_KEYS
    metered = graft_once(reduced, store, artifact_id, QUERY, "xxh3_128", CountingMeter())
    assert metered["energy_j"] == 2.5 and metered["logits"] == row["logits"]
    prefill = prefill_once(reduced, IDS, {"query_1": QUERY[:1], "query_real": QUERY}, CountingMeter())
    assert (prefill["prefill_j"], prefill["query_1_j"], prefill["query_real_j"]) == (2.5, 2.5, 2.5)
    assert "prefill_j" not in prefill_once(reduced, IDS, {"query_1": QUERY[:1]})


@pytest.mark.model
def test_restore_times_the_copy_to_another_device_and_adds_nothing_on_the_cpu(reduced, tmp_path, monkeypatch):
    store = Store(tmp_path)
    artifact_id = deposit_tokens(reduced, store, IDS)
    timing: dict = {}
    cache = graft.restore(reduced.model, reduced.config, store.read(artifact_id), timing=timing)
    assert timing == {} and cache.get_seq_length() == len(IDS)
    # The copy step as on CUDA, with the meta device standing in for the GPU: every tensor goes through to_device.
    copied = []
    monkeypatch.setattr(graft, "to_device", lambda tensor, device: copied.append(tensor.shape) or tensor.to(device))
    layers = store.read(artifact_id).layers
    moved = graft._on_device(layers, torch.device("meta"), timing)
    assert len(copied) == 2 * len(layers) == 2 * len(reduced.model.model.layers)
    assert {t.device.type for pair in moved for t in pair} == {"meta"} and timing["copy_s"] >= 0.0


def _summary(value: float) -> dict:
    return {"median": value, "min": value, "max": value, "n": 1}


def _row(energy: bool) -> dict:
    graft_parts = {"total_s": _summary(0.004), "copy_s": _summary(0.0012), "energy_j": _summary(0.5)}
    return {"tokens": 8192, "artifact_bytes": 4e6, "ttft_ratio": {"query_1": 50.0, "query_real": 20.0},
            "logits_equal": {"query_1": True, "query_real": True},
            "prefill": {"ttft_query_1_s": _summary(0.2), "ttft_query_real_s": _summary(0.25),
                        "energy_query_1_j": _summary(40.0), "energy_query_real_j": _summary(45.5)},
            "graft": {"query_1/xxh3_128": graft_parts,
                      "query_real/xxh3_128": {**graft_parts, "energy_j": _summary(2.25)}},
            **({"energy": CountingMeter().describe()} if energy else {})}


def test_a_gpu_rows_markdown_gives_the_copy_and_joules_per_query_and_a_cpu_row_none():
    result = {"workload": {"query_tokens": 98}, "ttft": [_row(energy=True)]}
    lines = ttft_device_lines(result)
    assert lines[1] == "Energy per query (nvml: NVML total energy of cuda:0), medians:"
    assert lines[-1] == "| 8,192 | 1.20 | 40.000 | 0.500 | 45.500 | 2.250 |"
    assert ttft_device_lines({"workload": {"query_tokens": 98}, "ttft": [_row(energy=False)]}) == []
    assert len(ttft_table(result)) == 3
