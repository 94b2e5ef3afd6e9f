"""Which torch op's bytes follow the CPU vendor under a pin: the ops of a smollm2-135m attention layer (shapes of a
256-token chunk: hidden 576, 9 query heads and 3 KV heads of 64) on fixed random inputs, hashed, under each pin on
this CPU and on CPUs emulated by qemu's user-mode emulator (graftbench/util/cpuid.py): an Intel Haswell, the same
Haswell answering CPUID with AMD's vendor id, and an AMD EPYC (the controls: the emulator's arithmetic, and the
vendor id alone). Writes results/<kind>/traces/vendor-ops.{json,md}; see docs/portable-pin.md ("An emulated Intel
CPU"). Beside each table, the branch MKL itself reports running under that pin on each CPU
(graftbench/engine/torch/mkl_branch.py).

    .venv/bin/python experiments/vendor_ops.py <kind>          # all pins, all CPUs (about two minutes)
    .venv/bin/python experiments/vendor_ops.py --one <pin>     # one pin in this process: a JSON line
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

PINS = ("avx2", "portable")
CPUS = {  # column -> the command prefix that runs a process on it
    "this CPU": [],
    "emulated Intel Haswell": ["qemu-x86_64", "-cpu", "Haswell"],
    "emulated Haswell, vendor id AuthenticAMD": ["qemu-x86_64", "-cpu", "Haswell,vendor=AuthenticAMD"],
    "emulated AMD EPYC": ["qemu-x86_64", "-cpu", "EPYC"],
}


def probe(pin: str) -> dict:
    """SHA-256 (first 12 hex digits) of each op's output under ``pin`` (applied before torch loads), one thread."""
    from graftbench.util import isa

    isa.apply(pin)
    import torch

    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)

    def draw(*shape):
        return torch.randn(*shape, generator=generator)

    def digest(tensor):
        return hashlib.sha256(tensor.contiguous().numpy().tobytes()).hexdigest()[:12]

    x, w = draw(1, 256, 576), draw(576, 576) / 24
    q, k, v = draw(1, 9, 256, 64), draw(1, 3, 256, 64), draw(1, 3, 256, 64)
    cos, sin = draw(1, 1, 256, 64), draw(1, 1, 256, 64)
    k9, v9 = k.repeat_interleave(3, 1), v.repeat_interleave(3, 1)
    scores = (q @ k9.transpose(-1, -2)) / 8
    probs = torch.softmax(scores, -1)
    ops = {
        "linear [256x576] @ [576x576]^T (a projection)": torch.nn.functional.linear(x, w),
        "rotary embedding (mul, add, cat)": q * cos + torch.cat((-q[..., 32:], q[..., :32]), -1) * sin,
        "bmm q @ k^T [9: 256x64 @ 64x256]": scores,
        "softmax over 256": probs,
        "bmm p @ v [9: 256x256 @ 256x64]": probs @ v9,
        "scaled_dot_product_attention, causal": torch.nn.functional.scaled_dot_product_attention(
            q, k9, v9, is_causal=True),
    }
    return {"pin": pin, "machine": isa.environment(), "torch": torch.__version__,
            "ops": {name: digest(out) for name, out in ops.items()}}


def run_all(kind: str) -> None:
    from graftbench.engine.torch import mkl_branch
    from graftbench.util.provenance import provenance

    started = provenance()
    rows = []
    for pin in PINS:
        for cpu, prefix in CPUS.items():
            done = subprocess.run([*prefix, sys.executable, __file__, "--one", pin], capture_output=True, text=True,
                                  check=True)
            branch = mkl_branch.probe(pin, prefix=prefix or None)  # MKL's own word, in a process of its own
            rows.append({"cpu": cpu, **json.loads(done.stdout.strip().splitlines()[-1]),
                         "mkl_branch": branch.branch, "mkl_code_path": branch.code_path})
    out = Path("results") / kind / "traces"
    out.mkdir(parents=True, exist_ok=True)
    (out / "vendor-ops.json").write_text(json.dumps({"provenance": started, "rows": rows}, indent=1) + "\n")
    (out / "vendor-ops.md").write_text(markdown(started, rows))
    print(f"wrote {out / 'vendor-ops.json'} and {out / 'vendor-ops.md'}")


def markdown(started: dict, rows: list[dict]) -> str:
    """One table per pin: each op's hash (first 12 hex digits) on each CPU, a hash unlike this CPU's in bold."""
    from graftbench.util.display_text import markdown_text
    from graftbench.util.isa import describe_cpu
    from graftbench.util.provenance import provenance_line

    lines = ["# Which op's bytes follow the CPU vendor", "", provenance_line(started), "", "CPUs:", ""]
    lines += [f"- {markdown_text(r['cpu'])}: {markdown_text(describe_cpu(r['machine']))}" for r in rows
              if r["pin"] == PINS[0]]
    for pin in PINS:
        columns = [r for r in rows if r["pin"] == pin]
        lines += ["", f"## `--isa {pin}`", "", "| op | " + " | ".join(markdown_text(c["cpu"]) for c in columns) + " |",
                  "|---|" + "---|" * len(columns)]
        for op, here in columns[0]["ops"].items():
            cells = [c["ops"][op] if c["ops"][op] == here else f"**{c['ops'][op]}**" for c in columns]
            lines.append(f"| {markdown_text(op)} | " + " | ".join(cells) + " |")
        if all("mkl_branch" in c for c in columns):
            cells = [markdown_text(c["mkl_branch"]) if c["mkl_branch"] == columns[0]["mkl_branch"]
                     else f"**{markdown_text(c['mkl_branch'])}**" for c in columns]
            lines.append("| MKL's branch, as `MKL_VERBOSE` reports it (CNR) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(probe(sys.argv[2])))
    else:
        run_all(sys.argv[1])
