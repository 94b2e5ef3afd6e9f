"""Per-op traces of one exactness pair, written to a file, and the comparison that names the first op two traces
differ in: where a pin does not reproduce on another CPU, two machines' traces say which op changed the bytes first.

A trace is a JSON document: ``schema`` (:data:`SCHEMA`), ``pin`` (the pinned config's dict, with ``fingerprint``),
``pair`` (its id, kind and token ids' SHA-256), ``environment`` (:func:`graftbench.util.isa.environment`) and
``steps``, a list in execution order of ``{"op": name, "call": n, "input_sha256": hex or "", "output_sha256": hex,
"shape": [...], "dtype": str}``: every op's output as it completes (a torch module's, a ggml op's on llama.cpp;
``call`` counts the op's calls: one a prefill chunk), then each layer's K and V block after the artifact's prefill
(``op`` ``kv.<layer>.k`` / ``kv.<layer>.v``), then the query's logits. Hashes are SHA-256 of the tensor's raw bytes
in row-major order.

:func:`first_difference` walks two traces in step order: the first step whose output hash differs is the first op
that computed other bytes; when its input hashes were equal the op itself differs, when not the bytes changed
between the previous step and this one (an op that is not a module, such as the attention kernel inside a layer).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

SCHEMA = "graftbench.layer_trace/1"


class TraceError(ValueError):
    """A file that is not a layer trace (unreadable, not JSON, another schema, or steps without the fields a step
    must hold); the message names the file and what was wrong."""


@dataclass(frozen=True)
class Difference:
    """The first step two traces differ in: ``index`` (its position in both step lists), ``op`` and ``call``,
    ``inputs_equal`` (whether its inputs hashed equal: the op itself computed other bytes) and ``detail`` (one line
    for the user). ``index`` is ``-1`` for traces whose step lists do not line up (another model or schedule)."""

    index: int
    op: str
    call: int
    inputs_equal: bool
    detail: str


def write_trace(path: Path, document: dict) -> None:
    """Write the trace ``document`` (:func:`trace_session_pair`'s) to ``path`` as JSON, parents made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1) + "\n")


def read_trace(path: Path) -> dict:
    """The trace document at ``path``. Raises :class:`TraceError` naming the file when it is not one."""
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise TraceError(f"{path}: not a readable JSON trace ({exc})") from exc
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise TraceError(f"{path}: not a layer trace (schema {SCHEMA!r} expected)")
    steps = document.get("steps")
    if not isinstance(steps, list) or not all(isinstance(s, dict) and isinstance(s.get("op"), str) and
                                              isinstance(s.get("output_sha256"), str) for s in steps):
        raise TraceError(f"{path}: its steps are not a list of {{op, output_sha256, ...}} records")
    return document


def first_difference(a: dict, b: dict) -> Difference | None:
    """The first step in which the traces ``a`` and ``b`` differ (:class:`Difference`), ``None`` when every step's
    output hash is equal. Two traces whose steps name other ops at one position (another model, chunk schedule or
    graftbench version) differ at that position with ``index`` the position and a detail that says so."""
    steps_a, steps_b = a["steps"], b["steps"]
    for index, (x, y) in enumerate(zip(steps_a, steps_b)):
        if (x["op"], x.get("call")) != (y["op"], y.get("call")):
            return Difference(-1, x["op"], int(x.get("call", 0)), False,
                              f"the traces do not line up at step {index}: {x['op']} against {y['op']}")
        if x["output_sha256"] != y["output_sha256"]:
            inputs_equal = x.get("input_sha256", "") == y.get("input_sha256", "")
            where = ("the op itself computed other bytes from equal inputs" if inputs_equal else
                     "its inputs already differed: the bytes changed after the previous step, outside a module")
            return Difference(index, x["op"], int(x.get("call", 0)), inputs_equal,
                              f"first difference at step {index}: {x['op']} (call {x.get('call', 0)}, shape "
                              f"{x.get('shape')}): {where}")
    if len(steps_a) != len(steps_b):
        shorter = min(len(steps_a), len(steps_b))
        return Difference(-1, "", 0, False, f"the traces agree on their first {shorter} steps but one has "
                                            f"{len(steps_a)} steps and the other {len(steps_b)}")
    return None


def trace_session_pair(session, problems: list, index: int, expected: dict | None = None,
                       code: dict | None = None) -> dict:
    """The trace document of pair ``index`` (0-based) of ``check-exact``'s pairs over ``problems`` on a
    ``session`` (an engine that declares :data:`graftbench.engine.base.LAYER_TRACE`), without a file: ``pin``,
    ``pair``, ``environment`` (the CPU), ``provenance`` (date, code version, machine:
    :func:`graftbench.util.provenance.provenance`; never compared) and ``steps`` (its ``layer_trace``: on torch
    :func:`graftbench.engine.torch.layer_trace.trace_pair`, on llama.cpp
    :func:`graftbench.engine.llama_cpp.layer_trace.trace_pair`).

    ``expected``: an exactness expectation this pair is of; its pair record's token ids' SHA-256 must be this pair's.
    ``code``: the code version tracing (the provenance's ``code``; read here, before the trace, when ``None``).
    Raises :class:`graftbench.engine.base.CapabilityError` for an engine without a layer trace, ``ValueError`` for an
    index past the pairs the problems give, problems that are not the set ``expected`` records (its SHA-256), or a
    pair whose tokens are not the expectation's (another tokenizer)."""
    from ..engine.base import LAYER_TRACE, require
    from ..util.isa import environment
    from ..util.provenance import code_version, provenance
    from .exactness import build_pairs

    code = code if code is not None else code_version()  # at the start: the checkout may move during the trace
    require(session, LAYER_TRACE, "trace-pair")
    if index < 0:
        raise ValueError(f"pair index must be 0 or more, got {index}")
    if expected is not None:  # before any pair is built: another problem set is named as such
        _check_recorded_set(expected, problems, index)
    pair = build_pairs(session, problems, index + 1)[index]
    recorded_tokens = (expected["pairs"][index].get("tokens_sha256") if expected is not None else
                       pair.tokens_sha256)
    if recorded_tokens != pair.tokens_sha256:
        raise ValueError(f"pair {index}'s token ids are not the expectation's (SHA-256 {pair.tokens_sha256[:12]}, "
                         f"recorded {str(recorded_tokens)[:12]}): another problem set?")
    steps = session.layer_trace(pair.artifact, pair.query)
    gpu = (session.config.accelerator or {}).get("gpu")
    return {"schema": SCHEMA, "pin": {**session.config.to_dict(), "fingerprint": session.config.fingerprint},
            "pair": {"id": pair.id, "kind": pair.kind, "tokens_sha256": pair.tokens_sha256},
            "environment": environment(), "provenance": provenance(gpu=gpu, code=code), "steps": steps}


def _check_recorded_set(expected: dict, problems: list, index: int) -> None:
    """Raise ``ValueError`` when ``problems`` are not the set ``expected`` records (its ``problem_set.sha256``) or
    the expectation holds no pair ``index`` (0-based)."""
    from ..problems.types import problem_set_sha256

    recorded, given = (expected.get("problem_set") or {}).get("sha256"), problem_set_sha256(problems)
    if given != recorded:
        raise ValueError(f"not comparable: the problems are not the set the expectation was recorded on "
                         f"(problem_set.sha256 {given[:12]}, recorded {str(recorded)[:12]})")
    records = expected.get("pairs") or []
    if index >= len(records):
        raise ValueError(f"the expectation holds {len(records)} pairs; pair {index} is past its last")


CONTEXT_STEPS = 3  # steps shown on each side of the first difference in a comparison


def comparison_markdown(a: dict, b: dict, labels: tuple[str, str] = ("first", "second")) -> str:
    """Markdown of the comparison of the traces ``a`` and ``b`` (:func:`read_trace`'s documents) of one pair: each
    trace's pin, step count and provenance (machine, an emulated CPU named as such, date, code version), then the outcome (:func:`first_difference`) and, where they differ, a table of the steps around the
    first difference with both hashes (first 12 hex digits). Every value read from a trace is shown as text
    (:func:`graftbench.util.display_text.markdown_text`), never markup. Raises nothing for well-formed traces."""
    from ..util.display_text import markdown_text
    from ..util.provenance import provenance_line

    found = first_difference(a, b)
    lines = [f"# Trace comparison: {markdown_text(a.get('pair', {}).get('id', '?'))}", ""]
    for label, doc in zip(labels, (a, b)):
        pin = doc.get("pin", {})
        lines.append(f"- {markdown_text(label)}: {markdown_text(pin.get('model', '?'))} "
                     f"{markdown_text(pin.get('dtype', '?'))}, "
                     f"--isa {markdown_text(pin.get('isa', '?'))}, {len(doc['steps'])} steps. "
                     f"{provenance_line(doc.get('provenance') or {})}")
    lines.append("")
    if found is None:
        return "\n".join(lines + [f"Equal: all {len(a['steps'])} steps hash the same.", ""])
    lines += [markdown_text(found.detail.capitalize() + "."), ""]
    if found.index < 0:
        return "\n".join(lines)
    lines += [f"| step | op | call | shape | {markdown_text(labels[0])} output | {markdown_text(labels[1])} output "
              "| inputs equal |", "|---:|---|---:|---|---|---|---|"]
    start, stop = max(0, found.index - CONTEXT_STEPS), min(len(a["steps"]), found.index + CONTEXT_STEPS + 1)
    for index in range(start, stop):
        x, y = a["steps"][index], b["steps"][index]
        same_inputs = "yes" if x.get("input_sha256", "") == y.get("input_sha256", "") else "no"
        lines.append(f"| {index} | {markdown_text(x['op'])} | {markdown_text(x.get('call', 0))} | "
                     f"{markdown_text(x.get('shape'))} | {markdown_text(x['output_sha256'][:12])} | "
                     f"{markdown_text(y['output_sha256'][:12])} | {same_inputs} |")
    return "\n".join(lines + [""])
