"""The evaluation stage's typed errors: each carries its message (``str()``, whole and ready to show: untrusted text in
it is data) and says what kind of failure it is (``kind``), so a caller maps kinds, not messages (the command line:
:mod:`graftbench.cli.errors`).

- :class:`Refused`: the run cannot start as asked (an option, the run folder, the store); nothing was run.
- :class:`NotVerified`: what was run or found does not verify (a finished run's manifest, a certificate).
- :class:`WriteFailed`: a write failed mid-run (a full or read-only disk); what was written before it is kept.
- :class:`Interrupted`: the run was interrupted; what was recorded is kept and the same request resumes it.

:func:`error_text` words a library error (a bare ``OSError`` included) as one line for such a message.
"""

from __future__ import annotations

import errno
import sys

from ..util.durable import StorageError


class EvalError(RuntimeError):
    """A run refused or stopped. ``kind`` names the kind of failure (one of :data:`KINDS`)."""

    kind = "refused"


class Refused(EvalError):
    """The run cannot start as asked; nothing was run or written. The message names the input and the fix."""

    kind = "refused"


class NotVerified(EvalError):
    """What was run, or the finished run found, does not verify; the message names the first mismatch."""

    kind = "not verified"


class WriteFailed(EvalError):
    """A write failed during the run (disk full, read-only); what was written before it is kept, and the message
    says where and how to resume."""

    kind = "write failed"


class Interrupted(EvalError):
    """The run was interrupted (Ctrl-C); what was recorded is kept, and the message says where and how to resume."""

    kind = "interrupted"


KINDS = tuple(cls.kind for cls in (Refused, NotVerified, WriteFailed, Interrupted))


def error_text(exc: BaseException, what: str | None = None) -> str:
    """``exc`` as an error line: graftbench's own errors as they are (a failed write without its ``[Errno N]``
    prefix); a bare ``OSError`` (``[Errno 30] ...``) as what could not be done to which file, and, for a file
    system that refuses writes, that ``what`` (e.g. ``the store gs``) cannot be written and nothing in it was
    changed. Loads no store module (a store's error exists only once it is loaded: ``sys.modules``)."""
    store = sys.modules.get("graftbench.store.index")
    if isinstance(exc, StorageError):
        return exc.strerror or str(exc)  # its own message, without the "[Errno 28]" prefix
    if not isinstance(exc, OSError) or (store and isinstance(exc, store.StoreError)) or exc.errno is None:
        return str(exc)
    target = f" ({exc.filename})" if exc.filename else ""
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return (f"{what or 'a file'} cannot be written: {exc.strerror}{target}; nothing was written. Pass a place "
                "this process can write (a store or runs folder elsewhere), or make it writable")
    return f"{exc.strerror}{target}"
