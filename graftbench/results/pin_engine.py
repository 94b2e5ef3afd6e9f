"""Which engine a recorded pin (a manifest's ``config``, an artifact's header) is of: its ``engine`` section's name,
and for a pin without one the torch engine, whose pins have none (the one place that default is written).

Imports nothing beyond the standard library: report and results read it as the engine layer does
(:func:`graftbench.engine.pin_terms.engine_of` is this function).
"""

from __future__ import annotations

ENGINE_WITHOUT_SECTION = "torch"  # the engine of a pin with no ``engine`` section (torch's pins have none)


def engine_of(pin: dict) -> str:
    """The engine the pin ``pin`` is of: its ``engine`` section's ``engine`` name (``?`` for a section that names
    none), else :data:`ENGINE_WITHOUT_SECTION` (no section, an empty one, or one that is not a dict)."""
    engine = pin.get("engine")
    return str(engine.get("engine", "?")) if isinstance(engine, dict) and engine else ENGINE_WITHOUT_SECTION
