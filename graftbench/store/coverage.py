"""Which models and pins a store's artifacts were deposited under, and whether a run's pin can use any of them.

An artifact is grafted only under the pin it was deposited under (its config fingerprint: weights, tokenizer,
dtype, chunk size, threads, instruction-set pin, layout). A graft run whose pin the store holds nothing under would
run every problem as the baseline; the pre-flight (:mod:`graftbench.eval.preflight`) says so before it starts,
naming the pins the store does hold and how each differs. Reads the index (with its writer records) and one artifact
header per pin; imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .codec import ArtifactError

SHORT_PIN = 12  # hex digits of a config fingerprint shown in tables and messages


@dataclass(frozen=True)
class PinHolding:
    """The top-level artifacts a store holds under one pin: its ``fingerprint``, how many (``artifacts``), the
    ``model`` and ``dtype`` one of their headers records (``?`` when that header cannot be read), and ``pin``: the
    pin a writer record holds for it (:mod:`graftbench.store.writers`, ``recorded``), else the pin fields that
    header carries (weights, tokenizer, dtype, chunk size, libraries; a llama.cpp state's engine fields)."""

    fingerprint: str
    artifacts: int
    model: str
    dtype: str
    pin: dict = field(default_factory=dict)
    recorded: bool = False

    @property
    def label(self) -> str:
        """``model dtype (pin 1234abcd5678)``."""
        return f"{self.model} {self.dtype} (pin {self.fingerprint[:SHORT_PIN]})"


# The header fields that are pin fields of the same name (graftbench.engine.torch.graft.build_artifact,
# graftbench.engine.llama_cpp.codec.pin_header): what a store without writer records tells of its pins.
HEADER_PIN_FIELDS = ("model", "weights_sha256", "tokenizer_sha256", "dtype", "chunk_size", "libraries", "engine")


def pins_held(store) -> list[PinHolding]:
    """Every pin ``store`` (a :class:`graftbench.store.folder.Store`) holds top-level artifacts under, by fingerprint.
    Raises :class:`graftbench.store.folder.StoreError` for a damaged index."""
    holdings = []
    recorded = store.recorded_pins()
    for fingerprint, count, first_id in store.pin_counts():
        try:
            header = store.header(first_id)
            model, dtype = str(header.get("model", "?")), str(header.get("dtype", "?"))
        except ArtifactError:
            header, model, dtype = {}, "?", "?"
        pin = recorded.get(fingerprint) or {k: header[k] for k in HEADER_PIN_FIELDS if k in header}
        holdings.append(PinHolding(fingerprint, count, model, dtype, pin, fingerprint in recorded))
    return holdings
