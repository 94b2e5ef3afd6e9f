"""The benchmark's outputs: the JSON of figures, a markdown table, and PNG plots (TTFT, restore throughput)."""

from __future__ import annotations

from pathlib import Path

from .history import write_json_and_markdown

# matplotlib is imported where a plot is drawn: a one-section run (bench --only) writes no plot, and the GPU host
# the prepared script targets has no matplotlib (docs/gpu.md).


def _ms(summary: dict) -> str:
    return f"{summary['median'] * 1e3:,.1f} ({summary['min'] * 1e3:,.1f}–{summary['max'] * 1e3:,.1f})"


def _s(summary: dict) -> str:
    return f"{summary['median']:,.2f} ({summary['min']:,.2f}–{summary['max']:,.2f})"


def ttft_table(result: dict) -> list[str]:
    """Markdown rows: per artifact size, prefill and graft TTFT (median, min–max) and their ratio, both queries."""
    q = result["workload"]["query_tokens"]
    lines = [f"| artifact tokens | artifact MB | prefill + 1-token query, s | graft + 1-token query, ms | ratio "
             f"| prefill + {q}-token query, s | graft + {q}-token query, ms | ratio | logits equal |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for row in result["ttft"]:
        p, g = row["prefill"], row["graft"]
        equal = "yes" if all(row["logits_equal"].values()) else f"NO{_digest_counts(row)}"
        lines.append(f"| {row['tokens']:,} | {row['artifact_bytes'] / 1e6:,.1f} | {_s(p['ttft_query_1_s'])} "
                     f"| {_ms(g['query_1/xxh3_128']['total_s'])} | {row['ttft_ratio']['query_1']:,.0f}× "
                     f"| {_s(p['ttft_query_real_s'])} | {_ms(g['query_real/xxh3_128']['total_s'])} "
                     f"| {row['ttft_ratio']['query_real']:,.0f}× | {equal} |")
    return lines


def ttft_device_lines(result: dict) -> list[str]:
    """Markdown rows of the TTFT rows measured on a GPU (those with ``energy``): the to-device copy of the graft
    and the joules per query (medians), under the meter's method; nothing for rows measured on the CPU."""
    rows = [row for row in result["ttft"] if "energy" in row]
    if not rows:
        return []
    q = result["workload"]["query_tokens"]
    lines = ["", f"Energy per query ({rows[0]['energy']['method']}: {rows[0]['energy']['detail']}), medians:", "",
             f"| artifact tokens | graft's to-device copy, ms | prefill + 1-token query, J | graft + 1-token query, J "
             f"| prefill + {q}-token query, J | graft + {q}-token query, J |", "|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        p, g = row["prefill"], row["graft"]
        lines.append(f"| {row['tokens']:,} | {g['query_1/xxh3_128']['copy_s']['median'] * 1e3:.2f} "
                     f"| {p['energy_query_1_j']['median']:.3f} | {g['query_1/xxh3_128']['energy_j']['median']:.3f} "
                     f"| {p['energy_query_real_j']['median']:.3f} "
                     f"| {g['query_real/xxh3_128']['energy_j']['median']:.3f} |")
    return lines


def _digest_counts(row: dict) -> str:
    """For a row whose logits differ: how many distinct logits digests each side gave, per query (rows measured
    before the digests were kept say nothing more)."""
    digests = row.get("logits_sha256")
    if not digests:
        return ""
    counts = "; ".join(f"{name}: {len(sides['prefill'])} prefill, {len(sides['graft'])} graft"
                       for name, sides in digests.items() if not row["logits_equal"][name])
    return f" (distinct digests, {counts})"


def _pooled(row: dict) -> str:
    """The first graft with a KV pool and the pool's seconds at open, in ms; a dash for results made before it."""
    pooled = row.get("first_graft_with_kv_pool")
    if not pooled:
        return "–"
    return f"{pooled['first_graft_in_process_s'] * 1e3:.1f} ({pooled['kv_pool_s'] * 1e3:.0f})"


def graft_components_table(result: dict) -> list[str]:
    """Markdown rows: where a graft's time goes (1-token query, XXH3-128), medians in ms, and with SHA-256."""
    lines = ["| artifact tokens | read | XXH3-128 | parse + checks | rebuild | query forward | total "
             "| total with SHA-256 | first graft in a fresh process | same, KV pool reserved at open (pool's time) "
             "| memory increase / artifact bytes |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in result["ttft"]:
        g = row["graft"]["query_1/xxh3_128"]
        med = {k: v["median"] * 1e3 for k, v in g.items()}
        sha = row["graft"]["query_1/sha256"]["total_s"]["median"] * 1e3
        lines.append(f"| {row['tokens']:,} | {med['read_s']:.1f} | {med['integrity_s']:.1f} "
                     f"| {med['parse_s'] + med['checks_s']:.1f} | {med['rebuild_s']:.2f} | {med['query_s']:.1f} "
                     f"| {med['total_s']:.1f} | {sha:.1f} | {row['graft_memory']['first_graft_in_process_s'] * 1e3:.1f} "
                     f"| {_pooled(row)} | {row['graft_memory_ratio']:.2f}× |")
    return lines


def markdown(result: dict) -> str:
    """The whole report as markdown: environment, TTFT, components, restore, decode, load, store scale, batched
    samples, peer, targets."""
    env, r, d = result["environment"], result["restore"], result["decode"]
    out = [f"# graftbench bench: {env['model']} ({env['dtype']})", "",
           f"{env['date']}; {env['processor']}, {env['cpu_count']} CPUs, {env['torch_threads']} torch threads; "
           f"chunk {env['chunk_size']}; torch {env['libraries'].get('torch')}, transformers "
           f"{env['libraries'].get('transformers')}. Medians (min–max) of {result['settings']['repeats']} prefill "
           f"and {result['settings']['graft_repeats']} graft repetitions; {r['raw_read_method'].split(',')[-1].strip()}."
           + (" **Smoke run: sizes and repetitions too small for the figures to mean anything.**" if result["smoke"] else ""),
           "", "## Time to first token", "", *ttft_table(result), "", "## Where a graft's time goes (ms)", "",
           *graft_components_table(result), "", "## Restore throughput", "",
           f"Artifact of {r['artifact_bytes'] / 1e6:,.1f} MB. Raw read: {r['raw_read_method']}.", "",
           "| path | seconds, median (min–max) | GB/s |", "|---|---:|---:|"]
    for name, row in r["seconds"].items():
        out.append(f"| {name} | {row['median']:.4f} ({row['min']:.4f}–{row['max']:.4f}) | {row['gb_per_s']:.2f} |")
    hashes = r["hash_in_memory_gb_per_s"]
    out += ["", f"Restore (read + XXH3-128 + rebuild) at **{r['restore_fraction_of_raw_read']:.0%}** of the raw read into "
            f"a warm buffer, {r['restore_fraction_of_raw_read_fresh_memory']:.0%} of a raw read into fresh memory (which "
            "a restore must allocate: the kernel zeroes each new page before the copy). "
            f"In memory: XXH3-128 {hashes['xxh3_128']:.1f} GB/s, SHA-256 {hashes['sha256']:.2f} GB/s. "
            f"Cold file ({r['cold_restore']['method']}): {r['cold_restore']['seconds']:.3f} s, "
            f"{r['cold_restore']['gb_per_s']:.2f} GB/s. Bit flips caught: {r['bit_flips']['caught']} of "
            f"{r['bit_flips']['tried']}.", "", "## Decode throughput", "", *decode_lines(d),
            *decode_after_graft_lines(result.get("decode_after_graft")), "## Model load", "",
            *load_table(result["load"])]
    out += ["", "## Store scale", "", *store_scale_table(result["store_scale"])]
    if "batched_samples" in result:
        out += ["", "## Batched samples", "", *batched_table(result["batched_samples"])]
    out += ["", "## llama.cpp peer row", "", *peer_lines(result["peer"])]
    if "head_to_head" in result:
        out += ["", "## Graft against llama.cpp's state load, alternating", "",
                *head_to_head_lines(result["head_to_head"])]
    out += ["", "## Targets", "", *targets_table(result["targets"])]
    return "\n".join(out) + "\n"


def head_to_head_lines(h2h: dict) -> list[str]:
    """Markdown for the alternating graft against llama.cpp's state load (:mod:`.head_to_head`)."""
    if "skipped" in h2h:
        return [f"Not measured: {h2h['skipped']}."]
    return [f"{h2h['repeats']} pairs at {h2h['tokens']:,} tokens, 1-token query; {h2h['method']}.", "",
            "| side | restore (llama.cpp: state load), ms | + 1-token query, ms |", "|---|---:|---:|",
            f"| graftbench | {_ms(h2h['graftbench_restore_s'])} | {_ms(h2h['graftbench_total_s'])} |",
            f"| llama.cpp | {_ms(h2h['llama_cpp_load_state_s'])} | {_ms(h2h['llama_cpp_ttft_restore_1tok_s'])} |", "",
            f"Ratios (llama.cpp over graftbench, > 1 where graftbench is faster): restore **{h2h['restore_ratio']:.2f}×**, "
            f"graft + 1 token **{h2h['graft_ratio']:.2f}×**. graftbench's logits the same every repetition: "
            f"{h2h['graftbench_logits_stable']}; llama.cpp's logits after every load equal to its prefill's: "
            f"{h2h['llama_cpp_logits_equal']}."]


def head_to_head_markdown(result: dict) -> str:
    """A run of the alternating section alone (``graftbench bench --only head-to-head``) as markdown."""
    env = result["environment"]
    out = [f"# graftbench bench: graft against llama.cpp's state load, {env['model']} ({env['dtype']})", "",
           _environment_line(env), "", *head_to_head_lines(result["head_to_head"]), "", "## Targets", "", *targets_table(result["targets"])]
    return "\n".join(out) + "\n"


def store_scale_table(rows: list[dict]) -> list[str]:
    """Markdown rows: per store size, each lookup kind's median (min–max) in ms, how many routed as expected,
    resident memory and index size (MB), build seconds."""
    out = ["| artifacts | exact lookup, ms | similar lookup, ms | none lookup, ms | routed as expected | RSS, MB "
           "| index, MB | build, s |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lk = row["lookup_s"]
        routed = "/".join(str(row["routed_as_expected"].get(k, 0)) for k in ("exact", "similar", "none"))
        out.append(f"| {row['artifacts']:,} | {_ms(lk['exact'])} | {_ms(lk['similar'])} | {_ms(lk['none'])} "
                   f"| {routed} of {row['lookups_per_kind']} each | {row['rss_bytes'] / 1e6:.0f} "
                   f"| {row['index_bytes'] / 1e6:.1f} | {row['build_s']:.1f} |")
    return out


def targets_table(targets: dict) -> list[str]:
    """Markdown rows: each target's name, issue, goal, measured value and whether it was met."""
    out = ["| target | issue | goal | measured | met |", "|---|---:|---|---|:---:|"]
    for name, row in targets.items():
        measured = row["measured"]
        shown = (f"{measured:.3g}" if isinstance(measured, float) else
                 ", ".join(f"{k} {v:.3g}" for k, v in measured.items()) if isinstance(measured, dict) else
                 "not measured" if measured is None else str(measured))
        met = "yes" if row["met"] else "no" if row["met"] is False else "—"
        out.append(f"| {name} | #{row.get('issue', 4)} | {row['target']} | {shown} | {met} |")
    return out


def store_scale_markdown(result: dict) -> str:
    """A run of the store-scale section alone (``graftbench bench --only store-scale``) as markdown."""
    env = result["environment"]
    out = ["# graftbench bench: store scale", "",
           f"{env['date']}; {env['processor']}, {env['cpu_count']} CPUs; graftbench {env.get('graftbench_commit')}. "
           f"Problem texts built from the words of {result['problems']}; no model runs (the router is torch-free)."
           + (" **Smoke run: store sizes too small for the figures to mean anything.**" if result["smoke"] else ""),
           "", "## Store scale", "", *store_scale_table(result["store_scale"]), "", "## Targets", "",
           *targets_table(result["targets"])]
    return "\n".join(out) + "\n"


def decode_lines(d: dict) -> list[str]:
    """Markdown: graftbench's greedy decode against ``transformers`` ``generate`` (tok/s), the ratio and method."""
    return ["| engine | tokens | tok/s, median (min–max) |", "|---|---:|---:|",
            f"| graftbench | {d['new_tokens']['graftbench']} | {_s(d['graftbench_tok_per_s'])} |",
            f"| transformers generate | {d['new_tokens']['generate']} | {_s(d['generate_tok_per_s'])} |", "",
            f"Ratio {d['ratio']:.2f}×; same greedy tokens: {d['same_tokens']}. {d['method']}.", ""]


def load_table(load: dict) -> list[str]:
    """Markdown rows: each model load (cold when measured, then warm), imports and load seconds apart."""
    lines = ["| load | imports, s | load, s | from cache |", "|---|---:|---:|---|"]
    loads = ([("cold", load["cold"])] if "cold" in load else []) + [(f"warm {i + 1}", w) for i, w in enumerate(load["warm"])]
    for label, row in loads:
        lines.append(f"| {label} | {row['import_s']:.2f} | {row['load_s']:.2f} | {row['from_cache']} |")
    return lines


def _environment_line(env: dict) -> str:
    """Date, CPU, threads and library versions of a run, for a section's report."""
    return (f"{env['date']}; {env['processor']}, {env['cpu_count']} CPUs, {env['torch_threads']} torch threads; torch "
            f"{env['libraries'].get('torch')}, transformers {env['libraries'].get('transformers')}.")


def load_decode_markdown(result: dict) -> str:
    """A run of the load-and-decode section alone (``graftbench bench --only load-decode``) as markdown."""
    env = result["environment"]
    out = [f"# graftbench bench: load and decode, {env['model']} ({env['dtype']})", "",
           _environment_line(env)
           + (" **Smoke run: sizes too small for the figures to mean anything.**" if result["smoke"] else ""),
           "", "## Decode throughput", "", *decode_lines(result["decode"]), "## Model load", "",
           *load_table(result["load"])]
    return "\n".join(out) + "\n"


def decode_after_graft_lines(row: dict | None) -> list[str]:
    """Markdown for decode after the largest graft against an empty cache (nothing when not measured)."""
    if not row:
        return []
    return ["| decode | context, tokens | tok/s, median (min–max) |", "|---|---:|---:|",
            f"| after a graft | {row['context_tokens'] + row['query_tokens']:,} | {_s(row['after_graft_tok_per_s'])} |",
            f"| empty cache | {row['query_tokens']:,} | {_s(row['empty_cache_tok_per_s'])} |", "",
            f"Decode after a {row['context_tokens']:,}-token graft at **{row['ratio']:.2f}×** the empty-cache rate "
            f"({row['decode_tokens']} tokens; {row['method']}).", ""]


def _extra_buffers_note(peer: dict) -> str:
    if peer.get("extra_buffer_types", True):
        return ""
    return (" Loaded without extra buffer types (use_extra_bufts = false, llama.cpp's --no-repack: no AMX or repacked"
            " weights), because llama.cpp's AMX matrix product segfaults on this CPU (llama.cpp issue #20824).")


def peer_lines(peer: dict) -> list[str]:
    """Markdown for the llama.cpp row: its TTFT by prefill and by state load, beside its state file size."""
    if "skipped" in peer:
        return [f"Not measured: {peer['skipped']}."]
    sizes = peer.get("sizes", [])
    file_read = sizes[0].get("file_read", "") if sizes else ""
    lines = [f"llama-cpp-python {peer.get('llama_cpp_version')}, {peer.get('n_threads')} threads, n_ctx "
             f"{peer.get('n_ctx')}, KV cache in llama.cpp's default type; state file read {file_read}."
             + _extra_buffers_note(peer), "",
             "| tokens | prefill + 1-token query, s | state load + 1-token query, ms | state save, ms | state file, MB "
             "| logits after load equal |", "|---:|---:|---:|---:|---:|:---:|"]
    for row in sizes:
        lines.append(f"| {row['n']:,} | {_s(row['ttft_prefill_1tok_s'])} | {_ms(row['ttft_restore_1tok_s'])} "
                     f"| {_ms(row['save_state_s'])} | {row['state_file_bytes'] / 1e6:,.1f} "
                     f"| {row.get('restore_logits_equal')} |")
    decode = peer.get("decode", {})
    if decode:
        lines += ["", f"llama.cpp greedy decode: {decode.get('decode_tok_per_s', 0):.1f} tok/s over "
                      f"{decode.get('decode_tokens')} tokens ({decode.get('decode_method', '')})."]
    return lines


def plot(result: dict, path: Path) -> None:
    """Two panels: TTFT against artifact tokens (log-log; prefill and graft, 1-token and real query, llama.cpp
    where measured), and restore throughput against the raw read (GB/s). Written as PNG to ``path``."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    tokens = [row["tokens"] for row in result["ttft"]]
    q = result["workload"]["query_tokens"]
    series = [("prefill + 1-token query", [r["prefill"]["ttft_query_1_s"]["median"] for r in result["ttft"]], "o-"),
              (f"prefill + {q}-token query", [r["prefill"]["ttft_query_real_s"]["median"] for r in result["ttft"]], "o--"),
              ("graft + 1-token query", [r["graft"]["query_1/xxh3_128"]["total_s"]["median"] for r in result["ttft"]], "s-"),
              (f"graft + {q}-token query", [r["graft"]["query_real/xxh3_128"]["total_s"]["median"] for r in result["ttft"]], "s--")]
    peer = result["peer"]
    if "sizes" in peer:
        series += [("llama.cpp prefill + 1 token", [r["ttft_prefill_1tok_s"]["median"] for r in peer["sizes"]], "^:"),
                   ("llama.cpp state load + 1 token", [r["ttft_restore_1tok_s"]["median"] for r in peer["sizes"]], "v:")]
    for label, values, style in series:
        left.plot(tokens[: len(values)], values, style, label=label)
    left.set(xscale="log", yscale="log", xlabel="artifact tokens", ylabel="time to first token, s (median)",
             title=f"TTFT, {result['environment']['model']} ({result['environment']['dtype']})")
    left.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    left.set_xticks(tokens, [f"{t:,}" for t in tokens])
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8)
    rows = result["restore"]["seconds"]
    names = list(rows)
    right.bar(names, [rows[n]["gb_per_s"] for n in names], color=["grey", "silver", "tab:blue", "tab:orange", "tab:green"])
    right.set(ylabel="GB/s (median)", title=f"restore of {result['restore']['artifact_bytes'] / 1e6:,.0f} MB, page cache warm")
    right.tick_params(axis="x", labelrotation=15)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(result: dict, out_dir: Path, stem: str, code: dict | None = None) -> list[Path]:
    """Write ``{stem}.json``, ``{stem}.md`` and ``{stem}-ttft.png`` under ``out_dir`` (each atomically), the JSON
    naming ``code``, the code version read when the benchmark started
    (:func:`graftbench.bench.history.write_json_and_markdown`); returns the paths."""
    json_path, md_path = write_json_and_markdown(result, markdown(result), out_dir, stem, code)
    png_path = out_dir / f"{stem}-ttft.png"
    tmp_png = png_path.with_suffix(".tmp.png")
    plot(result, tmp_png)
    tmp_png.replace(png_path)
    return [json_path, md_path, png_path]


def batched_table(row: dict) -> list[str]:
    """Markdown for the batched-samples row: tokens/s of each side, their ratios, memory, what was measured."""
    n, t = row["settings"]["samples"], row["settings"]["tokens"]

    def tps(summ):
        return "—" if summ is None else f"{summ['median']:,.1f} ({summ['min']:,.1f}–{summ['max']:,.1f})"

    lines = [f"{n} samples of {t} tokens after a graft of {row['artifact_tokens']:,} tokens "
             f"({row['artifact_bytes'] / 1e6:,.1f} MB) and a {row['query_tokens']}-token query; medians (min–max) of "
             f"{row['settings']['repeats']} repetitions.", "",
             "| decoding | restores | decode tok/s | end-to-end tok/s | decode, s | restore + query, s | KV held, MB "
             "| peak RSS, MB | peak RSS increase, MB |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, key in (("one batch", "batched"), ("one at a time", "one_at_a_time")):
        side = row[key]
        lines.append(f"| {label} | {side['restores']} | {tps(side['decode_tok_per_s'])} "
                     f"| {tps(side['end_to_end_tok_per_s'])} | {side['decode_s']['median']:.2f} "
                     f"| {side['graft_s']['median']:.2f} | {side['kv_bytes_at_end'] / 1e6:,.0f} "
                     f"| {side['peak_rss_bytes'] / 1e6:,.0f} "
                     f"| {side['peak_rss_increase_bytes'] / 1e6:,.0f} |")
    ratio, goal, load = row["decode_ratio"], row["goal_decode_ratio"], row["load_average_1min"]
    verdict = "not measured" if ratio is None else "met" if ratio >= goal else "not met"
    shown = "—" if ratio is None else f"{ratio:.2f}×"
    lines += ["", f"Ratio, batched over one at a time: decode **{shown}** (goal ≥ {goal:g}×: {verdict}), end to end "
                  f"{row['end_to_end_ratio']:.2f}×. Samples identical to their one-at-a-time twin (same seed): "
                  f"{row['same_tokens_as_one_at_a_time']} of {n}; distinct samples in the batch: "
                  f"{row['distinct_samples']}; every repetition drew the same tokens: {row['repeatable']}. "
                  f"Load average (1 min) before and after: {load['before']:.2f} and {load['after']:.2f} on "
                  f"{load['cpus']} CPUs (other processes share them when it exceeds what this run adds).", "",
              f"Method: {row['method']}."]
    return lines


def batched_markdown(result: dict) -> str:
    """A run of the batched-samples row alone (``graftbench bench --only batched-samples``) as markdown, with its
    target."""
    env, row = result["environment"], result["batched_samples"]
    out = [f"# graftbench bench: batched samples, {env['model']} ({env['dtype']})", "",
           f"{env['date']}; {env['processor']}, {env['cpu_count']} CPUs, {env['torch_threads']} torch threads; chunk "
           f"{env['chunk_size']}; torch {env['libraries'].get('torch')}, transformers "
           f"{env['libraries'].get('transformers')}."
           + (" **Smoke run: sizes too small for the figures to mean anything.**" if result["smoke"] else ""),
           "", "## Batched samples", "", *batched_table(row)]
    return "\n".join(out) + "\n"


def only_markdown(result: dict) -> str:
    """The markdown of a one-section run (``result["only"]``)."""
    if result["only"] == "store-scale":
        return store_scale_markdown(result)
    if result["only"] == "head-to-head":
        return head_to_head_markdown(result)
    if result["only"] == "energy":
        from .energy import energy_markdown

        return energy_markdown(result)
    if result["only"] == "sample-counts":
        from .sample_counts import sample_counts_markdown

        return sample_counts_markdown(result)
    if result["only"] == "ttft":
        return "\n".join([f"# Time to first token: {result['environment'].get('model')}", "", *ttft_table(result),
                          *ttft_device_lines(result)])
    return load_decode_markdown(result) if result["only"] == "load-decode" else batched_markdown(result)


def long_context_markdown(result: dict) -> str:
    """The long-context store run as markdown: what the store holds against the window, time to reach any
    artifact (warm and cold file), memory."""
    warm, cold = result["reach_warm_s"], result["reach_cold_s"]
    lines = [f"# Long-context store: {result['model']} ({result['dtype']})", "",
             f"{result['stored_tokens']:,} tokens of KV state in {result['artifacts']} artifacts of "
             f"{result['artifact_tokens']:,} tokens ({result['stored_bytes'] / 1e9:.2f} GB, "
             f"{result['bytes_per_token']:,.0f} bytes per token), beside a {result['context_window']:,}-token window; "
             f"the free disk here would hold {result['capacity_tokens_in_free_disk']:,} tokens more. Built in "
             f"{result['build_s'] / 60:.1f} min.", "",
             f"Reaching a random artifact ({result['probes']} probes; route on its key, read with XXH3-128, rebuild, "
             "1-token query), seconds:", "",
             "| file | route | read | rebuild | query forward | total, median (min–max) |", "|---|---:|---:|---:|---:|---:|"]
    for label, row in (("page cache warm", warm), ("evicted (posix_fadvise DONTNEED)", cold)):
        lines.append(f"| {label} | {row['route_s']['median']:.4f} | {row['read_s']['median']:.3f} "
                     f"| {row['rebuild_s']['median']:.4f} | {row['query_s']['median']:.3f} | {_s(row['total_s'])} |")
    memory = result["graft_memory"]
    lines += ["", f"Resident memory during a graft, over the loaded model at rest: +{memory['increase_bytes'] / 1e6:,.1f} MB, "
              f"{result['graft_memory_over_artifact_bytes']:.2f}× the artifact's bytes; the rest of the store is on "
              "disk only."]
    return "\n".join(lines) + "\n"


def write_long_context(result: dict, out_dir: Path, stem: str, code: dict | None = None) -> list[Path]:
    """Write ``{stem}.json`` and ``{stem}.md`` under ``out_dir`` atomically, naming ``code`` as
    :func:`write_outputs` does; returns the paths."""
    return write_json_and_markdown(result, long_context_markdown(result), out_dir, stem, code)
