"""Which torch op's bytes follow the CPU vendor under a pin: the ops of a smollm2-135m attention layer (shapes of a
256-token chunk: hidden 576, 9 query heads and 3 KV heads of 64) on fixed random inputs, hashed, under each pin on
this CPU and on an emulated Intel Haswell (qemu-x86_64 -cpu Haswell, graftbench/util/cpuid.py). Writes
results/<kind>/traces/vendor-ops.{json,md}; see docs/portable-pin.md ("An emulated Intel CPU").

    .venv/bin/python experiments/vendor_ops.py <kind>          # all pins, both CPUs (about a minute)
    .venv/bin/python experiments/vendor_ops.py --one <pin>     # one pin in this process: a JSON line
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

PINS = ("avx2", "portable")
EMULATED_CPU = "Haswell"


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
    from graftbench.util.provenance import provenance

    started = provenance()
    rows = []
    for pin in PINS:
        for prefix in ([], ["qemu-x86_64", "-cpu", EMULATED_CPU]):
            done = subprocess.run([*prefix, sys.executable, __file__, "--one", pin], capture_output=True, text=True,
                                  check=True)
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    out = Path("results") / kind / "traces"
    out.mkdir(parents=True, exist_ok=True)
    (out / "vendor-ops.json").write_text(json.dumps({"provenance": started, "rows": rows}, indent=1) + "\n")
    (out / "vendor-ops.md").write_text(markdown(started, rows))
    print(f"wrote {out / 'vendor-ops.json'} and {out / 'vendor-ops.md'}")


def markdown(started: dict, rows: list[dict]) -> str:
    """One table per pin: each op's hash on this CPU and on the emulated one, and whether they are equal."""
    from graftbench.util.display_text import markdown_text
    from graftbench.util.isa import describe_cpu
    from graftbench.util.provenance import provenance_line

    lines = ["# Which op's bytes follow the CPU vendor", "", provenance_line(started), ""]
    for pin in PINS:
        here, emulated = [r for r in rows if r["pin"] == pin]
        lines += [f"## `--isa {pin}`", "", f"Columns: {markdown_text(describe_cpu(here['machine']))}; "
                  f"{markdown_text(describe_cpu(emulated['machine']))}.", "",
                  "| op | this CPU | emulated Intel | equal |", "|---|---|---|---|"]
        lines += [f"| {markdown_text(op)} | {digest} | {emulated['ops'][op]} | "
                  f"{'yes' if digest == emulated['ops'][op] else '**no**'} |" for op, digest in here["ops"].items()]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(probe(sys.argv[2])))
    else:
        run_all(sys.argv[1])
