"""Peer row for graftbench's benchmark: llama.cpp (llama-cpp-python) on the same GGUF and token ids.

Standalone: imports only the standard library, numpy, psutil and llama_cpp (run it with .venv-peer). It lives in
the package so that graftbench.bench.peer finds it next to itself, installed or not; graftbench never imports it.
Prints ONE JSON object on stdout; everything else goes to stderr. All times are seconds (time.perf_counter),
reported per size as {"median", "min", "max", "samples"} over --repeats repetitions.

Per size n (context[:n]), each repetition runs four passes, each on a cleared KV cache:
  A. prefill_s            eval of the n context tokens (n_batch = n_ubatch = 256, like graftbench's chunks).
     save_state_s         llama_state_save_file of the state after those n tokens (state_file_bytes: file size).
     ttft_prefill_1tok_s  prefill_s + eval of query[:1] + copy of its logits (the save is not counted).
  B. ttft_prefill_query_s prefill of the n tokens + eval of the whole query + copy of the last logits (one timer).
  C. load_state_s         the llama_state_load_file call on A's file; "file_read" says the page cache is warm.
     ttft_restore_1tok_s  load_state_s + eval of query[:1] + copy of its logits.
     rss_increase_on_load_state_bytes  process RSS after the load minus RSS before it (per repetition).
  D. ttft_restore_query_s load (the C call) + eval of the whole query + copy of the last logits.
restore_logits_equal / restore_query_logits_equal: np.array_equal of C's (D's) logits with A's (B's), all reps.

Decode: greedy (argmax of the last logits, no stop on EOS) of --decode-tokens tokens after decode_prompt;
decode_s times only the --decode-tokens - 1 steps after the first generated token (see "decode_method").
--no-extra-buffers loads the model with use_extra_bufts = false (llama.cpp's --no-repack): no AMX or repacked
weight layouts. graftbench.bench.peer passes it on CPUs with AMX, where llama.cpp's AMX matrix product segfaults
on the first eval (llama.cpp issue #20824, seen here with llama-cpp-python 0.3.36 on an Intel Xeon).
Exit status 2 with one line on stderr for a bad --gguf or --tokens-file.

--serve-size N (graftbench.bench.head_to_head): prefill context[:N] and save its state once, print one JSON line
{"ready": true, "n", "state_file_bytes"}, then answer each "restore" line on stdin with one JSON line of pass C
({"load_state_s", "ttft_restore_1tok_s", "logits_equal"}: the logits after the load against those after the
prefill) until "quit" or end of input, so that graftbench can alternate its graft with llama.cpp's state load.
"""
import argparse
import ctypes
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import llama_cpp
import numpy as np
import psutil

BATCH = 256


def fail(msg):
    """Print one line on stderr and exit with status 2."""
    print(f"peer_llama: error: {msg}", file=sys.stderr)
    sys.exit(2)


def stats(samples):
    """Median, min, max (and the raw samples) of a list of seconds or bytes."""
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "samples": samples}


def check_gguf(path):
    """Fail (exit 2) unless path is a readable file starting with the GGUF magic."""
    if not os.path.isfile(path):
        fail(f"--gguf {path}: no such file")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        fail(f"--gguf {path}: cannot read ({e.strerror})")
    if magic != b"GGUF":
        fail(f"--gguf {path}: not a GGUF file (magic {magic!r}, expected b'GGUF')")


def load_tokens(path):
    """Read {"context", "query", "decode_prompt"} (non-empty lists of ints) or fail (exit 2)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        fail(f"--tokens-file {path}: cannot read ({e.strerror})")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        fail(f"--tokens-file {path}: not valid JSON ({e})")
    if not isinstance(data, dict):
        fail(f"--tokens-file {path}: expected a JSON object, got {type(data).__name__}")
    for key in ("context", "query", "decode_prompt"):
        if not isinstance(ids := data.get(key), list) or not ids:
            fail(f"--tokens-file {path}: key {key!r} missing or not a non-empty list")
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
            fail(f"--tokens-file {path}: key {key!r} holds something other than non-negative integer token ids")
    return data


def clear(llm):
    """Empty the KV cache and the wrapper's token counter (a cold context)."""
    llm.reset()
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)


def last_logits(llm):
    """Copy of the logits of the last evaluated token (float32, n_vocab)."""
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).copy()


def save_state(llm, path, tokens):
    """llama_state_save_file of the current state with its tokens; returns seconds."""
    arr = (llama_cpp.llama_token * len(tokens))(*tokens)
    t0 = time.perf_counter()
    ok = llama_cpp.llama_state_save_file(llm.ctx, path.encode(), arr, len(tokens))
    dt = time.perf_counter() - t0
    if not ok:
        raise RuntimeError(f"llama_state_save_file failed for {path}")
    return dt


def load_state(llm, path, tokens):
    """llama_state_load_file into the (cleared) context; returns seconds of that call alone, then checks
    the restored token list and sets llm.n_tokens so that llm.eval continues after the n tokens."""
    out, count = (llama_cpp.llama_token * len(tokens))(), ctypes.c_size_t(0)
    t0 = time.perf_counter()
    ok = llama_cpp.llama_state_load_file(llm.ctx, path.encode(), out, len(tokens), ctypes.byref(count))
    dt = time.perf_counter() - t0
    if not ok or list(out[:count.value]) != list(tokens):
        raise RuntimeError(f"llama_state_load_file failed or restored other tokens for {path}")
    llm.input_ids[:len(tokens)] = tokens
    llm.n_tokens = len(tokens)
    return dt


def timed_eval(llm, ids):
    """Eval ids after the current state and copy the last logits; returns (seconds, logits)."""
    t0 = time.perf_counter()
    llm.eval(ids)
    return time.perf_counter() - t0, last_logits(llm)


def run_size(llm, ctx_ids, query, repeats, work_dir):
    """All timings for one context size (see the module docstring); returns a dict."""
    n, path = len(ctx_ids), os.path.join(work_dir, f"state_{len(ctx_ids)}.bin")
    t = {k: [] for k in ("prefill_s", "save_state_s", "ttft_prefill_1tok_s", "ttft_prefill_query_s",
                         "load_state_s", "ttft_restore_1tok_s", "ttft_restore_query_s")}
    rss_inc, eq1, eqq, proc = [], True, True, psutil.Process()
    for _ in range(repeats):
        clear(llm)  # A: prefill, save, one query token
        prefill, _ = timed_eval(llm, ctx_ids)
        t["save_state_s"].append(save_state(llm, path, ctx_ids))
        dt, ref1 = timed_eval(llm, query[:1])
        t["prefill_s"].append(prefill)
        t["ttft_prefill_1tok_s"].append(prefill + dt)
        clear(llm)  # B: prefill + whole query, one timer
        t0 = time.perf_counter()
        llm.eval(ctx_ids)
        llm.eval(query)
        refq = last_logits(llm)
        t["ttft_prefill_query_s"].append(time.perf_counter() - t0)
        clear(llm)  # C: load + one query token
        rss0 = proc.memory_info().rss
        load = load_state(llm, path, ctx_ids)
        rss_inc.append(proc.memory_info().rss - rss0)
        dt, got1 = timed_eval(llm, query[:1])
        t["load_state_s"].append(load)
        t["ttft_restore_1tok_s"].append(load + dt)
        clear(llm)  # D: load + whole query
        load = load_state(llm, path, ctx_ids)
        dt, gotq = timed_eval(llm, query)
        t["ttft_restore_query_s"].append(load + dt)
        eq1 = eq1 and bool(np.array_equal(got1, ref1))
        eqq = eqq and bool(np.array_equal(gotq, refq))
    size = os.path.getsize(path)
    os.remove(path)
    return {"n": n, "state_file_bytes": size, **{k: stats(v) for k, v in t.items()},
            "file_read": "page cache warm (file just written)", "rss_increase_on_load_state_bytes": rss_inc,
            "restore_logits_equal": eq1, "restore_query_logits_equal": eqq}


def serve(llm, ctx_ids, query, work_dir, out):
    """The --serve-size loop (see the module docstring); ``out`` is the saved stdout (a text file)."""
    path = os.path.join(work_dir, f"state_{len(ctx_ids)}.bin")
    clear(llm)
    llm.eval(ctx_ids)
    save_state(llm, path, ctx_ids)
    _, reference = timed_eval(llm, query[:1])
    out.write(json.dumps({"ready": True, "n": len(ctx_ids), "state_file_bytes": os.path.getsize(path)}) + "\n")
    out.flush()
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        if line.strip() != "restore":
            fail(f"--serve-size: unknown request {line.strip()!r} (expected restore or quit)")
        clear(llm)
        load = load_state(llm, path, ctx_ids)
        dt, logits = timed_eval(llm, query[:1])
        out.write(json.dumps({"load_state_s": load, "ttft_restore_1tok_s": load + dt,
                              "logits_equal": bool(np.array_equal(logits, reference))}) + "\n")
        out.flush()


def run_decode(llm, prompt, n_new, repeats):
    """Greedy decode of n_new tokens after prompt; times the n_new - 1 steps after the first token."""
    secs, ids = [], None
    for _ in range(repeats):
        clear(llm)
        llm.eval(prompt)
        gen = [int(np.argmax(last_logits(llm)))]
        t0 = time.perf_counter()
        for _ in range(n_new - 1):
            llm.eval(gen[-1:])
            gen.append(int(np.argmax(last_logits(llm))))
        secs.append(time.perf_counter() - t0)
        if ids is not None and gen != ids:
            print("peer_llama: warning: greedy ids differ between repetitions", file=sys.stderr)
        ids = gen
    return {"decode_tokens": n_new, "decode_s": stats(secs), "decode_tok_per_s": (n_new - 1) / statistics.median(secs),
            "decode_method": ("greedy argmax of llama_get_logits_ith(ctx,-1), no EOS stop; clock starts after the "
                              "first generated token's logits (prompt prefill + first argmax untimed) and covers "
                              f"the {n_new - 1} following steps (eval 1 token + copy logits + argmax); "
                              "tok/s = (decode_tokens-1)/median decode_s"),
            "generated_ids": ids}


def parse_args(argv):
    """Command-line options (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gguf", required=True)
    p.add_argument("--tokens-file", required=True)
    p.add_argument("--sizes", default="512,2048,4096,8192")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work-dir", default=None)
    p.add_argument("--serve-size", type=int, default=0,
                   help="answer restore requests on stdin for one context size (see the module docstring)")
    p.add_argument("--no-extra-buffers", action="store_true",
                   help="load with use_extra_bufts = false: no AMX or repacked weight layouts")
    a = p.parse_args(argv)
    try:
        a.sizes = [int(s) for s in a.sizes.split(",") if s.strip()]
    except ValueError:
        p.error(f"--sizes {a.sizes!r}: expected comma-separated integers")
    if a.serve_size:
        a.sizes = [a.serve_size]
    if not a.sizes or min(a.sizes) < 1 or a.repeats < 1 or a.decode_tokens < 2 or a.threads < 1:
        p.error("--sizes and --serve-size must be positive, --repeats >= 1, --decode-tokens >= 2, --threads >= 1")
    return a


def without_extra_buffers():
    """Make every later llama.cpp model load use ``use_extra_bufts = false``: ``Llama`` takes its model
    parameters from ``llama_model_default_params`` and has no argument for this one."""
    defaults = llama_cpp.llama_cpp.llama_model_default_params

    def params():
        p = defaults()
        p.use_extra_bufts = False
        return p
    llama_cpp.llama_cpp.llama_model_default_params = params


def main(argv=None):
    """Run the measurements and print one JSON object on the original stdout."""
    a = parse_args(argv)
    check_gguf(a.gguf)
    tok = load_tokens(a.tokens_file)
    if len(tok["context"]) < max(a.sizes):
        fail(f"--tokens-file {a.tokens_file}: context has {len(tok['context'])} tokens, fewer than size {max(a.sizes)}")
    n_ctx = max(max(a.sizes) + len(tok["query"]), len(tok["decode_prompt"]) + a.decode_tokens) + 8
    stdout = os.dup(1)
    os.dup2(2, 1)  # anything llama.cpp prints on stdout goes to stderr; the JSON goes to the saved fd
    if a.no_extra_buffers:
        without_extra_buffers()
    try:
        llm = llama_cpp.Llama(model_path=a.gguf, n_ctx=n_ctx, n_batch=BATCH, n_ubatch=BATCH, n_threads=a.threads,
                              n_threads_batch=a.threads, logits_all=False, verbose=False)
    except (ValueError, RuntimeError) as e:
        fail(f"--gguf {a.gguf}: llama.cpp could not load it ({e})")
    rss_after_load = psutil.Process().memory_info().rss
    for key, vocab in ((k, llm.n_vocab()) for k in ("context", "query", "decode_prompt")):
        if bad := [t for t in tok[key] if t >= vocab]:
            fail(f"--tokens-file {a.tokens_file}: key {key!r} has id {bad[0]} >= the GGUF's n_vocab {vocab}")
    os.makedirs(a.work_dir or "/tmp", exist_ok=True)
    work_dir = tempfile.mkdtemp(prefix="peer_llama_", dir=a.work_dir or "/tmp")  # removed at the end
    try:
        if a.serve_size:
            with os.fdopen(stdout, "w") as out:
                serve(llm, tok["context"][:a.serve_size], tok["query"], work_dir, out)
            return 0
        sizes = []
        for n in a.sizes:
            print(f"peer_llama: size {n} ...", file=sys.stderr)
            sizes.append(run_size(llm, tok["context"][:n], tok["query"], a.repeats, work_dir))
        print("peer_llama: decode ...", file=sys.stderr)
        decode = run_decode(llm, tok["decode_prompt"], a.decode_tokens, a.repeats)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    result = {"engine": "llama.cpp via llama-cpp-python", "llama_cpp_version": llama_cpp.__version__,
              "gguf": os.path.abspath(a.gguf), "gguf_bytes": os.path.getsize(a.gguf),
              "n_threads": a.threads, "extra_buffer_types": not a.no_extra_buffers,
              "n_ctx": llm.n_ctx(), "n_ctx_requested": n_ctx,
              "n_ctx_train": llm._model.n_ctx_train(), "n_batch": BATCH, "n_ubatch": BATCH, "n_vocab": llm.n_vocab(),
              "repeats": a.repeats, "query_tokens": len(tok["query"]),
              "decode_prompt_tokens": len(tok["decode_prompt"]), "rss_bytes_after_load": rss_after_load,
              "timer": "time.perf_counter, seconds", "sizes": sizes, "decode": decode}
    with os.fdopen(stdout, "w") as f:
        f.write(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
