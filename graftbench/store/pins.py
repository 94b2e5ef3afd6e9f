"""Which models and pins a store's artifacts were deposited under, and whether a run's pin can use any of them.

An artifact is grafted only under the pin it was deposited under (its config fingerprint: weights, tokenizer,
dtype, chunk size, threads, instruction-set pin, layout). A graft run whose pin the store holds nothing under would
run every problem as the baseline; :func:`unusable_store_message` says so before it starts, naming the pins the store
does hold. Reads the index and one artifact header per pin; imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from .codec import ArtifactError

SHORT_PIN = 12  # hex digits of a config fingerprint shown in tables and messages


@dataclass(frozen=True)
class PinHolding:
    """The top-level artifacts a store holds under one pin: its ``fingerprint``, how many (``artifacts``), and the
    ``model`` and ``dtype`` one of their headers records (``?`` when that header cannot be read)."""

    fingerprint: str
    artifacts: int
    model: str
    dtype: str

    @property
    def label(self) -> str:
        """``model dtype (pin 1234abcd5678)``."""
        return f"{self.model} {self.dtype} (pin {self.fingerprint[:SHORT_PIN]})"


def pins_held(store) -> list[PinHolding]:
    """Every pin ``store`` (a :class:`graftbench.store.folder.Store`) holds top-level artifacts under, by fingerprint.
    Raises :class:`graftbench.store.folder.StoreError` for a damaged index."""
    holdings = []
    for fingerprint, count, first_id in store.pin_counts():
        try:
            header = store.header(first_id)
            model, dtype = str(header.get("model", "?")), str(header.get("dtype", "?"))
        except ArtifactError:
            model, dtype = "?", "?"
        holdings.append(PinHolding(fingerprint, count, model, dtype))
    return holdings


def unusable_store_message(store_root, holdings: list[PinHolding], model: str, dtype: str, fingerprint: str) -> str | None:
    """``None`` when ``holdings`` (:func:`pins_held`) include the run's pin ``fingerprint``; otherwise one line
    saying that the store at ``store_root`` holds nothing this run (``model``, ``dtype``) can graft, how many
    artifacts it holds and under which models and pins."""
    if any(h.fingerprint == fingerprint for h in holdings):
        return None
    this = f"{model} {dtype} (pin {fingerprint[:SHORT_PIN]})"
    if not holdings:
        return f"the store {store_root} holds no artifact: every problem runs as the baseline under {this}"
    total = sum(h.artifacts for h in holdings)
    held = "; ".join(f"{h.artifacts} under {h.label}" for h in holdings)
    return (f"the store {store_root} holds {total} artifact(s), none under this run's {this}: {held}. An artifact "
            "is grafted only under the pin it was deposited under (weights, dtype, chunk size, threads, --isa), "
            "so every problem would run as the baseline; deposit under this pin, or run with the pin above")
