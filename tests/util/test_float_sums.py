"""Float totals that verify on every Python: written with a correctly rounded sum, and a recorded total accepted
when one of the summations Python's ``sum`` has used reproduces it (left to right up to 3.11, Neumaier from 3.12).
No model."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

from graftbench.results.exact_manifest import control_table, exactness_totals, verify_exactness_manifest
from graftbench.results.manifest import compute_totals
from graftbench.util.float_sums import (SUMMATIONS, compensated, differing_values, exact_sum, left_to_right,
                                        recompute, summed_with)
from graftbench.util.hashing import sha256_json

ROOT = Path(__file__).resolve().parents[2]
GPU_CERTIFICATE = ROOT / "manifests" / "nvidia-h200" / "exact-random-gemma3-12b-bf16.json"


def test_python_3_12s_own_example_and_an_overflow_sum_as_each_python_gives_them():
    # "What's New In Python 3.12": sum([0.1] * 10) == 1.0 now; 3.11 gives 0.9999999999999999
    assert (left_to_right([0.1] * 10), compensated([0.1] * 10)) == (0.9999999999999999, 1.0)
    # an overflow: both sums give inf (the compensation turns NaN and is skipped), fsum raises
    assert left_to_right([1e308, 1e308, -1e308]) == compensated([1e308, 1e308, -1e308]) == math.inf
    assert compensated([-0.0, -0.0]) == 0.0 and math.copysign(1.0, compensated([-0.0, -0.0])) == 1.0


def test_totals_no_sum_can_compute_are_a_mismatch_not_a_crash():
    manifest = json.loads(GPU_CERTIFICATE.read_text())
    huge = copy.deepcopy(manifest)
    for record in huge["pairs"]:
        if "controls" in record:
            record["controls"]["monolithic"]["kl_mean"] = 1e308
    mismatches = verify_exactness_manifest(huge)
    assert mismatches[0] == "manifest_sha256 does not match the manifest's content"
    assert mismatches[1].startswith("totals cannot be recomputed (intermediate overflow in fsum")


def test_the_summations_differ_where_the_low_bits_are_lost():
    values = [1e16, 1.0, -1e16]
    assert (left_to_right(values), compensated(values), exact_sum(values)) == (0.0, 1.0, 1.0)
    assert SUMMATIONS[0] is exact_sum


def test_a_certificate_written_on_python_3_12_verifies_with_the_sum_it_was_written_with():
    manifest = json.loads(GPU_CERTIFICATE.read_text())
    assert manifest["environment"]["python"].startswith("3.12")
    recorded = manifest["totals"]["controls"]
    by_summation = {}
    for summation in SUMMATIONS:
        with summed_with(summation):
            by_summation[summation.__name__] = control_table(manifest["pairs"])
    assert by_summation["left_to_right"] != recorded  # 3.11's sum misses the last bit
    assert by_summation["compensated"] == by_summation["fsum"] == recorded
    assert verify_exactness_manifest(manifest) == []


def test_a_run_total_rounded_on_the_other_side_by_the_last_bit_verifies():
    # mean TTFT of three samples: the last bit of the sum tips the rounding to 6 decimals
    samples = [{"correct": True, "decode_tokens": 1, "prefill_tokens": 1, "prefill_tokens_saved": 0,
                "mode": "prefill", "finish_reason": "eos", "wall_s": 1.0, "energy_j": 0.0, "ttft_s": t}
               for t in (1e16, 1.0, -1e16)]
    with summed_with(left_to_right):
        written_on_3_11 = compute_totals(samples)
    assert written_on_3_11["wall_s"] == 3.0 and written_on_3_11["mean_ttft_s"] == 0.0
    assert compute_totals(samples)["mean_ttft_s"] == round(1 / 3, 6)
    assert recompute(lambda: compute_totals(samples), written_on_3_11) == written_on_3_11


def test_a_total_no_summation_gives_is_still_a_mismatch():
    manifest = json.loads(GPU_CERTIFICATE.read_text())
    forged = copy.deepcopy(manifest)
    # one bit below: the left-to-right sum is one bit above, so no summation gives this
    forged["totals"]["controls"]["monolithic"]["kl_mean"] = math.nextafter(
        manifest["totals"]["controls"]["monolithic"]["kl_mean"], 0.0)
    body = {k: v for k, v in forged.items() if k != "manifest_sha256"}
    forged["manifest_sha256"] = sha256_json(body)  # resealed: only the totals check can catch it
    mismatches = verify_exactness_manifest(forged)
    assert len(mismatches) == 1 and mismatches[0].startswith("totals.controls: recorded")
    assert exactness_totals(forged["pairs"]) == manifest["totals"]


def test_a_wrong_count_beside_totals_of_another_summation_is_reported_alone():
    samples = [{"wall_s": 0.1, "ttft_s": 0.1}] * 10

    def recomputed():
        from graftbench.util.float_sums import total

        return {"wall_s": total(s["wall_s"] for s in samples), "samples": len(samples)}

    with summed_with(left_to_right):  # written on Python 3.11, then its count edited
        recorded = {**recomputed(), "samples": 11}
    assert recorded["wall_s"] == 0.9999999999999999
    result = recompute(recomputed, recorded)
    # the left-to-right result is chosen: it differs in the count only, fsum's in the count and the total
    assert result == {"wall_s": 0.9999999999999999, "samples": 10}
    assert differing_values(result, recorded) == 1
    # top-level values, as the verifiers report them: a nested total differing in three places counts once
    assert differing_values({"a": {"b": 1, "c": 2, "d": 3}, "e": 3}, {"a": {"b": 0, "c": 0, "d": 0}, "f": 3}) == 3
    assert differing_values({"a": None}, {}) == 1 and differing_values([1, 2], [1, 2, 3]) == 1
