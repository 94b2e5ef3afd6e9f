"""One mapping from the library's error types to the command line's exit statuses and messages, used by every
command (:func:`mapped_errors`, applied to each registered command by :func:`map_errors`).

- the evaluation stage's typed errors (:mod:`graftbench.eval.errors`) by their kind: :data:`EXIT_CODES`;
- the library's refusals of an input (a store, run folder, problem set, model, device, engine, instruction-set pin,
  sandbox, Ray cluster): exit 2, worded by :func:`graftbench.eval.errors.error_text`.

A command only raises; ``error: <message>`` is printed here, the message shown as text (it may quote untrusted
input). An error of any other type is a bug and is not hidden.
"""

from __future__ import annotations

import functools
import sys
from contextlib import contextmanager
from typing import Callable, Iterator

import typer

from .common import fail

# The exit status of each kind of failure (graftbench.eval.errors.KINDS): 1 what was run does not verify, 130 an
# interrupted run, 2 a run refused or a failed write.
EXIT_CODES = (("not verified", 1), ("interrupted", 130), ("write failed", 2), ("refused", 2))
EXIT_REFUSED = 2


def exit_code(kind: str) -> int:
    """The exit status of the failure kind ``kind`` (:data:`EXIT_CODES`; 2 for a kind not listed)."""
    return dict(EXIT_CODES).get(kind, EXIT_REFUSED)


# The library's error types that refuse an input (exit 2), by module and name: an input that cannot be used (a store,
# run folder, problem set, manifest, model, device, engine, instruction-set pin, sandbox, Ray cluster, shards to
# merge, trace, runs to report or view) or a write that failed (words of graftbench.eval.errors.error_text).
REFUSALS = (
    ("graftbench.store.index", "StoreError"), ("graftbench.util.durable", "StorageError"),
    ("graftbench.results.runs", "RunError"), ("graftbench.results.manifest", "ManifestError"),
    ("graftbench.problems.types", "ProblemSetError"), ("graftbench.problems.sources", "MissingDataFile"),
    ("graftbench.engine.models", "ModelError"), ("graftbench.engine.device", "DeviceError"),
    ("graftbench.engine.base", "EngineOpenError"), ("graftbench.engine.base", "CapabilityError"),
    ("graftbench.engine.registry", "UnknownEngineError"), ("graftbench.util.isa", "IsaError"),
    ("graftbench.programs.sandbox", "SandboxError"), ("graftbench.scale.dispatch", "DispatchError"),
    ("graftbench.scale.merge", "MergeError"), ("graftbench.eval.layer_trace", "TraceError"),
    ("graftbench.report.compare", "ReportError"), ("graftbench.report.view", "ViewError"),
)


def refusal_types() -> tuple[type[BaseException], ...]:
    """The :data:`REFUSALS` types of the modules this process has imported: an error of a module not imported
    cannot have been raised, so mapping one imports nothing (no torch behind ``verify-manifest``)."""
    return tuple(getattr(sys.modules[module], name) for module, name in REFUSALS if module in sys.modules)


@contextmanager
def mapped_errors() -> Iterator[None]:
    """Turn an error raised inside into ``error: <message>`` and its exit status (:func:`exit_code` for an
    :class:`graftbench.eval.errors.EvalError`, 2 for a :func:`refusal_types` error); anything else passes."""
    from ..eval.errors import EvalError, error_text

    try:
        yield
    except typer.Exit:
        raise
    except EvalError as exc:
        fail(str(exc), exit_code(exc.kind))
    except Exception as exc:
        if isinstance(exc, refusal_types()):
            fail(error_text(exc))
        raise


def with_mapped_errors(command: Callable) -> Callable:
    """``command`` run inside :func:`mapped_errors` (its signature, which typer reads, unchanged)."""
    @functools.wraps(command)
    def run(*args, **kwargs):
        with mapped_errors():
            return command(*args, **kwargs)
    return run


def map_errors(app: typer.Typer) -> None:
    """Run every command of ``app`` and of its sub-apps inside :func:`mapped_errors`; call it once every command is
    registered."""
    for info in app.registered_commands:
        info.callback = with_mapped_errors(info.callback)
    for group in app.registered_groups:
        map_errors(group.typer_instance)
