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


def refusal_types() -> tuple[type[BaseException], ...]:
    """The library's error types that refuse an input (exit 2). Imported when an error is being mapped, so the
    command line starts without them."""
    from ..engine.base import CapabilityError, EngineOpenError
    from ..engine.device import DeviceError
    from ..engine.models import ModelError
    from ..engine.registry import UnknownEngineError
    from ..problems.sources import MissingDataFile
    from ..problems.types import ProblemSetError
    from ..programs.sandbox import SandboxError
    from ..results.runs import RunError
    from ..scale.dispatch import DispatchError
    from ..store.index import StoreError
    from ..util.durable import StorageError
    from ..util.isa import IsaError

    return (StoreError, StorageError, RunError, ProblemSetError, MissingDataFile, ModelError, DeviceError,
            EngineOpenError, UnknownEngineError, CapabilityError, IsaError, SandboxError, DispatchError)


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
