"""Before a graft run starts: whether its store holds anything the run can graft, said before a problem runs.

A store can hold nothing for a run in two ways, and then every problem would run as the baseline:

- no artifact under the run's pin: each pin the store holds is named with every field in which it differs, in its
  engine's own terms and with the option that gives the run its value where one does
  (:func:`graftbench.engine.pin_terms.pin_differences`: ``torch threads 2 (this run 1: pass --worker-threads 2)``);
- artifacts under the pin, none of which may be grafted on this kind of CPU (:mod:`graftbench.store.writers`:
  written on another kind under a pin not proven portable, or recording no kind without ``--assume-kind``).

Either is a note, or under ``--strict`` an error before anything runs (:class:`PreflightError`).

One process checks once its model is loaded (the pin is then known). A run over Ray workers checks in the driver
before any worker starts, against the fields of the workers' pin it knows (threads, ``--isa``, chunk size, dtype,
device: :func:`graftbench.scale.ray_executor.known_pin`) and the pins the store's writer records hold; it can tell
only for pins whose record it has (a store deposited before writer records were kept is checked once the first
worker has loaded the model, against that worker's whole pin and kind of CPU, before any problem is handed out).
"""

from __future__ import annotations

from pathlib import Path

from ..engine.pin_terms import TERMS, engine_of, pin_differences
from .errors import Refused
from ..settings import EvalSettings
from ..store.index import StoreError
from ..store.open import open_store
from ..store.coverage import SHORT_PIN, PinHolding, pins_held
from ..store.writers import kind_refusal
from ..util.isa import describe_cpu


class PreflightError(Refused):
    """``--strict``: the store holds nothing this run can graft, so every problem would run as the baseline. The
    message says why (the pins it holds and how each differs, or the kinds of CPU) and that nothing was run."""


def pin_label(engine: str, model: str, dtype: str, fingerprint: str | None) -> str:
    """``torch smollm2-135m float32 (pin 1234abcd5678)``; without the dtype for an engine whose pin's ``dtype`` is no
    field of its own (:data:`graftbench.engine.pin_terms.TERMS`; llama.cpp: the GGUF file's own types, not a dtype);
    ``pin not known yet`` before a worker has loaded the model."""
    what = f"{engine} {model}" + (f" {dtype}" if "dtype" in TERMS.get(engine, {}) else "")
    return f"{what} ({'pin ' + fingerprint[:SHORT_PIN] if fingerprint else 'pin not known before a worker loads'})"


def _holding_text(holding: PinHolding, pin: dict, ray: bool) -> str:
    label = pin_label(engine_of(holding.pin), holding.model, holding.dtype, holding.fingerprint)
    differences = pin_differences(holding.pin, pin, ray)
    if differences:
        return f"{holding.artifacts} under {label}, which differs in: {'; '.join(differences)}"
    if holding.recorded:
        return f"{holding.artifacts} under {label}"
    return (f"{holding.artifacts} under {label}, which differs in a field its artifacts do not record (deposited "
            "before writer records were kept: threads, --isa, the prompt layout or the CPU capability)")


def store_notes(store, store_root, pin: dict, fingerprint: str | None, kind: dict | None,
                assume_kind: bool = False, ray: bool = False) -> list[str]:
    """Why ``store`` (opened, at ``store_root``) holds nothing a run of pin ``pin`` can graft: one line, or none when
    it holds something (or, before the pin is known, when it cannot tell).

    ``pin`` is the run's pin (:meth:`graftbench.engine.pin.PinnedConfig.to_dict`) and ``fingerprint`` its
    fingerprint; before a Ray worker has loaded the model, ``pin`` holds only the fields the driver knows and
    ``fingerprint`` is ``None`` (then a pin is ruled out only by a writer record that differs in a known field).
    ``kind`` is the CPU kind the run grafts on (:func:`graftbench.store.writers.this_kind`; ``None``: not known, not
    checked); ``assume_kind`` as ``--assume-kind``; ``ray`` words the options for a run over Ray workers. Raises
    :class:`graftbench.store.index.StoreError` for a damaged index."""
    holdings = pins_held(store)
    this = pin_label(engine_of(pin), str(pin.get("model", "?")), str(pin.get("dtype", "?")), fingerprint)
    if not holdings:
        return [f"the store {store_root} holds no artifact: every problem runs as the baseline under {this}"]
    if fingerprint is None:
        if any(not h.recorded or not pin_differences(h.pin, pin, ray) for h in holdings):
            return []
    elif any(h.fingerprint == fingerprint for h in holdings):
        return [] if kind is None else _kind_notes(store, store_root, fingerprint, kind, assume_kind, this)
    total = sum(h.artifacts for h in holdings)
    held = "; ".join(_holding_text(h, pin, ray) for h in holdings)
    return [f"the store {store_root} holds {total} artifact(s), none under this run's {this}: {held}. An artifact "
            "is grafted only under the pin it was deposited under, so every problem would run as the baseline; "
            "deposit under this run's pin, or give the run the store's values shown"]


def _kind_notes(store, store_root, fingerprint: str, kind: dict, assume_kind: bool, this: str) -> list[str]:
    """The line saying that none of the artifacts under ``fingerprint`` may be grafted on a CPU of ``kind``, or none."""
    kinds = store.kinds_under(fingerprint)
    refusals = [kind_refusal(fingerprint, written, kind, assume_kind) for written in kinds]
    if not kinds or any(refusal is None for refusal in refusals):
        return []
    return [f"the store {store_root} holds {len(kinds)} artifact(s) under this run's {this}, none of which may be "
            f"grafted on this kind of CPU ({describe_cpu(kind)}): {refusals[0]}; every problem would run as the "
            "baseline"]


def preflight(store_root: str | Path, pin: dict, fingerprint: str | None, kind: dict | None,
              settings: EvalSettings, ray: bool = False) -> list[str]:
    """:func:`store_notes` for the store at ``store_root`` (opened read-only; a store that cannot be opened yet, e.g.
    one ``--new-store`` creates, has nothing to name), under ``settings``' ``assume_kind``. Raises
    :class:`PreflightError` under ``settings.strict`` when there is a note."""
    try:
        store = open_store(store_root, readonly=True)
    except StoreError:
        return []
    notes = store_notes(store, store_root, pin, fingerprint, kind, settings.assume_kind, ray)
    if notes and settings.strict:
        raise PreflightError(f"--strict: {notes[0]}; nothing was run")
    return notes
