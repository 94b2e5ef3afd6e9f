"""The engines by name: the built-in ``torch`` and ``llama.cpp``, each imported only when it is asked for, and any
engine outside the package, registered by :func:`register` or through the ``graftbench.engines`` entry-point group.

An entry is ``"module:attribute"`` naming an :class:`graftbench.engine.base.EngineFactory` (or a class or zero-argument
callable making one); importing that module must import neither torch nor llama.cpp, so a command can name an
engine, read its capabilities and refuse an option before any model library loads. A package adds an engine with::

    [project.entry-points."graftbench.engines"]
    my-engine = "my_package.engine:ENGINE"

The CLI (``--engine``), the evaluation stage and Ray workers get an engine with :func:`get` and ask it for a
capability with :func:`graftbench.engine.base.require`; nothing outside ``engine/`` names an engine's folder.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import entry_points
from types import ModuleType
from typing import Callable

from .base import BENCHMARK, FAULT_SCENARIOS, CapabilityError, EngineFactory, EngineOptions, EngineSession, require

ENTRY_POINT_GROUP = "graftbench.engines"
DEFAULT_ENGINE = "torch"
# The engines this package holds: name -> "module:attribute" of its factory (imported on first use).
BUILTIN = {
    "torch": "graftbench.engine.torch.entry:ENGINE",
    "llama.cpp": "graftbench.engine.llama_cpp.entry:ENGINE",
}


class UnknownEngineError(ValueError):
    """No engine of that name is registered (built in, by :func:`register` or by an entry point)."""


class Registry:
    """Engine names mapped to their factories (a ``"module:attribute"`` target, a factory, or a zero-argument
    callable returning one), resolved on first :meth:`get` and kept. Built-in names win over entry points; a name
    given to :meth:`register` replaces any other."""

    def __init__(self, builtin: dict[str, str], group: str = ENTRY_POINT_GROUP):
        self._targets: dict[str, object] = dict(builtin)
        self._loaded: dict[str, EngineFactory] = {}
        self._group = group
        self._scanned = False

    def register(self, name: str, target: str | EngineFactory | Callable[[], EngineFactory]) -> None:
        """Make ``name`` open the engine ``target``. Raises ``ValueError`` for an empty name."""
        if not name or not isinstance(name, str):
            raise ValueError(f"an engine name must be a non-empty string, got {name!r}")
        self._targets[name] = target
        self._loaded.pop(name, None)

    def unregister(self, name: str) -> None:
        """Forget ``name`` (a test's own engine, after the test); a built-in name goes back to its built-in."""
        self._loaded.pop(name, None)
        if name in BUILTIN:
            self._targets[name] = BUILTIN[name]
        else:
            self._targets.pop(name, None)

    def names(self) -> tuple[str, ...]:
        """Every engine name: the built-ins first, then the others in the order they were added."""
        self._scan_entry_points()
        return tuple(self._targets)

    def get(self, name: str) -> EngineFactory:
        """The factory of the engine ``name``, imported on first use. Raises :class:`UnknownEngineError` naming the
        known engines, or :class:`graftbench.engine.base.EngineOpenError` when its module cannot be imported (a
        missing extra: the message says which)."""
        if name in self._loaded:
            return self._loaded[name]
        if name not in self._targets:
            self._scan_entry_points()
        if name not in self._targets:
            raise UnknownEngineError(f"engine {name!r} is not one of {', '.join(self.names())}")
        factory = _resolve(name, self._targets[name])
        self._loaded[name] = factory
        return factory

    def _scan_entry_points(self) -> None:
        if self._scanned:
            return
        self._scanned = True
        for point in entry_points(group=self._group):
            self._targets.setdefault(point.name, point.value)


def _resolve(name: str, target) -> EngineFactory:
    """``target`` as a factory: a ``"module:attribute"`` imported, a callable called. Raises
    :class:`graftbench.engine.base.EngineOpenError` when the module cannot be imported or holds no such attribute."""
    from .base import EngineOpenError

    if isinstance(target, str):
        module_name, _, attribute = target.partition(":")
        try:
            target = getattr(import_module(module_name), attribute or "ENGINE")
        except ImportError as exc:
            raise EngineOpenError(f"--engine {name}: {exc}") from exc
        except AttributeError as exc:
            raise EngineOpenError(f"engine {name!r}: {target!r} names nothing ({exc})") from exc
    if isinstance(target, type) or (callable(target) and not hasattr(target, "open")):
        target = target()  # a factory class, or a function returning a factory
    return target


# The one table of this process: the built-ins, then what register() and the entry points add.
ENGINES = Registry(BUILTIN)


def register(name: str, target: str | EngineFactory | Callable[[], EngineFactory]) -> None:
    """Register the engine ``target`` under ``name`` in this process (:meth:`Registry.register`)."""
    ENGINES.register(name, target)


def unregister(name: str) -> None:
    """Forget an engine registered under ``name`` (:meth:`Registry.unregister`)."""
    ENGINES.unregister(name)


def engine_names() -> tuple[str, ...]:
    """Every registered engine name (:meth:`Registry.names`)."""
    return ENGINES.names()


def get(name: str) -> EngineFactory:
    """The engine ``name`` (:meth:`Registry.get`). Raises :class:`UnknownEngineError`."""
    return ENGINES.get(name)


def benchmark_ops(name: str, what: str = "graftbench bench") -> ModuleType:
    """The engine ``name``'s benchmark operations: the module its factory's ``benchmark_module`` names (the
    engine's own prefill, restore, decode and load, each as the benchmark times it), imported. Raises
    :class:`graftbench.engine.base.CapabilityError` naming the engine and ``benchmark`` when it declares no
    :data:`graftbench.engine.base.BENCHMARK`, and what :func:`get` raises."""
    return _part(name, BENCHMARK, "benchmark_module", what)


def benchmark_loader(name: str, what: str = "graftbench bench's model load") -> ModuleType:
    """The engine ``name``'s model loading code alone: the module its factory's ``loader_module`` names, whose
    ``load_model(model, dtype=...)`` returns what it loaded with ``load_s`` (seconds) and ``from_cache``, imported
    (so that a probe times the imports a load needs, no more). Raises
    :class:`graftbench.engine.base.CapabilityError` naming the engine and ``benchmark`` when it declares no
    :data:`graftbench.engine.base.BENCHMARK`, and what :func:`get` raises."""
    return _part(name, BENCHMARK, "loader_module", what)


def fault_ops(name: str, what: str = "the fault harness") -> ModuleType:
    """The engine ``name``'s fault scenarios: the module its factory's ``faults_module`` names (build an artifact
    of its own format under any pin, graft an artifact's chain), imported. Raises
    :class:`graftbench.engine.base.CapabilityError` naming the engine and ``fault-scenarios`` when it declares no
    :data:`graftbench.engine.base.FAULT_SCENARIOS`, and what :func:`get` raises."""
    return _part(name, FAULT_SCENARIOS, "faults_module", what)


def _part(name: str, capability: str, attribute: str, what: str) -> ModuleType:
    """The module an engine's factory names in ``attribute`` for ``capability``, once ``require`` let it by. A
    factory that declares the capability but names no such module is refused as one that lacks it
    (:class:`graftbench.engine.base.CapabilityError`, its message naming the missing attribute)."""
    factory = get(name)
    require(factory, capability, what)
    module = getattr(factory, attribute, None)
    if not isinstance(module, str):
        error = CapabilityError(name, capability, what)
        error.args = (f"engine {name!r} declares {capability!r} but its factory names no {attribute}: "
                      f"{what} cannot run on it",)
        raise error
    return import_module(module)


def open_engine(name: str, options: EngineOptions) -> EngineSession:
    """Open ``options.model`` on the engine ``name``: ``get(name).open(options)``. Raises what :func:`get` and the
    engine's ``open`` raise."""
    return get(name).open(options)
