"""The GPU certificate: check-exact on an NVIDIA H200 in bfloat16 with random weights at Gemma 3 12B's published
dimensions (the prepared script, experiments/gpu_certify.sh). What it records, its replay in a second process on
the GPU, and the figures the README and docs/gpu.md quote from it. No model, no GPU: the files are re-read."""

from __future__ import annotations

import json
from pathlib import Path

from graftbench.engine.torch.random_weights import load_config_dict
from graftbench.results.exact_manifest import read_replay_log, replay_record, verify_exactness_manifest
from graftbench.results.layout import REPLAY_LOG
from graftbench.util.isa import describe_cpu

ROOT = Path(__file__).resolve().parents[2]
NAME = "manifests/nvidia-h200/exact-random-gemma3-12b-bf16.json"
CERTIFICATE = json.loads((ROOT / NAME).read_text())
README = (ROOT / "README.md").read_text()
GPU_DOC = (ROOT / "docs" / "gpu.md").read_text()


def test_the_certificate_is_fifty_of_fifty_on_the_h200_in_bfloat16_under_the_cuda_pin():
    assert verify_exactness_manifest(CERTIFICATE) == []
    config, totals = CERTIFICATE["config"], CERTIFICATE["totals"]
    assert (config["device"], config["dtype"], config["model"]) == ("cuda", "bfloat16", "random:gemma3-12b")
    assert config["random_weights"]["label"] == "random weights: architecture only"
    accelerator = config["accelerator"]
    assert (accelerator["gpu"], accelerator["sm_count"], accelerator["sdpa_backends"]) == ("NVIDIA H200", 132, ["math"])
    assert accelerator["deterministic_algorithms"] and not accelerator["tf32_matmul"]
    assert (totals["pairs"], totals["exact_pairs"], totals["kl_max"], totals["max_abs_delta"]) == (50, 50, 0.0, 0.0)
    assert totals["kinds"] == {"cross-window": 10, "long": 10, "short": 30}


def test_its_controls_are_as_the_docs_say():
    controls = CERTIFICATE["totals"]["controls"]
    differ = {name: row["pairs"] - row["exact_pairs"] for name, row in controls.items()}
    assert differ == {"monolithic": 5, "shift-8": 5, "shift-128": 5, "shift-1024": 5, "chunk-128": 2,
                      "naive-restore": 1}
    window = load_config_dict(CERTIFICATE["config"]["random_weights"]["config"])["sliding_window"]
    assert window == 1024
    naive = [p for p in CERTIFICATE["pairs"] if "controls" in p]
    # the sliding layers' state is their tensors alone until the artifact outgrows the window
    assert [p["controls"]["naive-restore"]["equal"] for p in naive] == [p["artifact_tokens"] < window for p in naive]
    assert "5 of 5 pairs" in GPU_DOC and "chunk size 128 gives other bytes on 2 of the 5" in GPU_DOC


def test_it_replayed_equal_in_a_second_process_on_the_gpu():
    replays = [r for r in read_replay_log(ROOT / REPLAY_LOG)
               if r["expectation_sha256"] == CERTIFICATE["manifest_sha256"]]
    assert [(r["compared"], r["equal"], r["first_difference"], r["pin_differences"]) for r in replays] == [
        (3, 3, None, [])]


def test_a_replay_record_names_the_gpus_and_the_host_cpus():
    record = replay_record(CERTIFICATE, compared=3, equal=3, first_difference=None, pin_differences_found=[],
                           replayed_gpu="NVIDIA H200")
    assert record["recorded_on"]["gpu"] == record["replayed_on"]["gpu"] == "NVIDIA H200"
    assert describe_cpu(record["recorded_on"]).startswith("NVIDIA H200, on a host with Intel(R) Xeon(R) Processor (")
    on_cpu = replay_record(CERTIFICATE | {"config": {**CERTIFICATE["config"], "accelerator": None}}, compared=1,
                           equal=1, first_difference=None, pin_differences_found=[])
    assert "gpu" not in on_cpu["recorded_on"] and "gpu" not in on_cpu["replayed_on"]


def test_the_readme_and_the_gpu_doc_quote_it():
    assert f"({NAME})" in README and "**50/50** on an NVIDIA H200" in README
    assert f"(../{NAME})" in GPU_DOC
