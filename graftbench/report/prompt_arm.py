"""The example-as-prompt arm against the graft arm: the same routed example prefilled as prompt text instead of
restored, so its first decode step must see the graft's logits byte for byte (a graft *is* the one-shot prompt, at
the cost of a restore instead of a prefill). For each such pair of runs: how many samples' first-step logits hash
the same, and the time to first token and energy of each arm. Imports no torch."""

from __future__ import annotations

from statistics import mean


def _settings(run) -> dict:
    settings = run.manifest.get("settings")
    return settings if isinstance(settings, dict) else {}


def _example_as(run) -> str | None:
    """``prompt`` or ``graft`` for a graft run (``graft`` when not recorded), ``None`` for a baseline."""
    settings = _settings(run)
    return (settings.get("example_as") or "graft") if settings.get("graft") else None


def _by_sample(run) -> dict[tuple, dict]:
    return {(s.get("problem_id"), s.get("sample_index", 0)): s for s in run.manifest["samples"] if isinstance(s, dict)}


def _mean_of(samples: list[dict], key: str) -> float | None:
    values = [s[key] for s in samples if isinstance(s.get(key), (int, float)) and not isinstance(s.get(key), bool)]
    return mean(values) if values else None


def prompt_arm_rows(runs: list) -> list[dict]:
    """One row per (example-as-prompt run, graft run) of the same arm (``RunEntry.arm``: model, dtype, mode,
    budget, sampling, round) and the same ``graft_from``, over the samples both hold (same problem and sample index)
    that grafted the same example: ``samples``, ``logits_equal`` (first-step logits SHA-256 equal), the differing
    sample keys (``first_differences``, at most 5), and each arm's mean ``ttft_s`` (seconds) and summed
    ``energy_j`` (joules) over those samples."""
    rows = []
    for prompt in (r for r in runs if _example_as(r) == "prompt"):
        for graft in (r for r in runs if _example_as(r) == "graft"):
            if graft.arm != prompt.arm or _settings(graft).get("graft_from") != _settings(prompt).get("graft_from"):
                continue
            ours, theirs = _by_sample(prompt), _by_sample(graft)
            keys = [k for k in ours if k in theirs and ours[k].get("artifact_id")
                    and ours[k].get("artifact_id") == theirs[k].get("artifact_id")]
            if not keys:
                continue
            differ = [k for k in keys if ours[k].get("logits_sha256") != theirs[k].get("logits_sha256")]
            a, b = [ours[k] for k in keys], [theirs[k] for k in keys]
            rows.append({"prompt": prompt.label, "graft": graft.label, "samples": len(keys),
                         "logits_equal": len(keys) - len(differ),
                         "first_differences": [f"{p}#{i}" for p, i in differ[:5]],
                         "prompt_ttft_s": _mean_of(a, "ttft_s"), "graft_ttft_s": _mean_of(b, "ttft_s"),
                         "prompt_energy_j": sum(s.get("energy_j") or 0 for s in a),
                         "graft_energy_j": sum(s.get("energy_j") or 0 for s in b)})
    return rows
