"""A model's name as manifests, tables and reports show it, with the label of a random-weights model: the one
place that decides how such a model is named, so no table shows one without its label (*torch-free*)."""

from __future__ import annotations

LABEL = "random weights: architecture only"
"""The label of a model whose weights were drawn at random (:mod:`graftbench.engine.torch.random_weights`): evidence at an
architecture's dimensions, not a certificate for a released checkpoint, and never scored."""

RANDOM_PREFIX = "random:"  # a model spec that asks for random weights (graftbench.engine.torch.random_weights)


def is_random(spec: object) -> bool:
    """Whether the model spec ``spec`` asks for a random-weights model (the ``random:`` prefix)."""
    return isinstance(spec, str) and spec.startswith(RANDOM_PREFIX)


def model_name(pin: dict):
    """The model's name as a manifest, table or report shows it: the pin's ``model``, followed for a
    random-weights model by its label in parentheses (the pin's ``random_weights.label``, else :data:`LABEL`)."""
    record = pin.get("random_weights")
    if not record:
        return pin.get("model")
    text = record.get("label") if isinstance(record, dict) and isinstance(record.get("label"), str) else LABEL
    return f"{pin.get('model')} ({text})"
