"""Cooperative cancellation of a running stage: the check the operators' loops make.

A built-in operator cannot be interrupted from another thread (Python has no safe way to stop a
thread, and one torch call over the whole clip runs to its end), so the operators check between
their steps instead: between EM iterations, pyramid octaves, tracked frames, stitched tubes,
detector levels, decoded frames, the passes of a blur. The executor that runs a stage sets the
stage's cancel flag for its worker thread (:func:`cancel_scope`); :func:`check_cancelled` raises
:class:`StageCancelled` once that flag is set. Outside a scope (a plain ``run_task``, the tests,
the profiler) the check is one attribute lookup and does nothing, so outputs never change.

A flag is anything with ``is_set()`` (a ``threading.Event``).

Example::

    >>> import threading
    >>> flag = threading.Event()
    >>> with cancel_scope(flag):
    ...     check_cancelled()  # not set: nothing happens
    ...     flag.set()
    ...     check_cancelled()
    Traceback (most recent call last):
    ...
    workload.cancel.StageCancelled: the stage was cancelled
    >>> check_cancelled()  # outside a scope: never raises
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Protocol

__all__ = ["StageCancelled", "CancelFlag", "cancel_scope", "check_cancelled", "current_flag"]


class StageCancelled(Exception):
    """A stage stopped because its task was cancelled (timed out, failed, or its caller gave
    up). An ``Exception``, so every ``except Exception`` that reports a stage's error reports
    this one too; the executors neither retry it nor learn from the call."""

    def __init__(self, message: str = "the stage was cancelled") -> None:
        super().__init__(message)


class CancelFlag(Protocol):
    def is_set(self) -> bool: ...


_local = threading.local()


@contextlib.contextmanager
def cancel_scope(flag: CancelFlag | None) -> Iterator[None]:
    """Within the block, :func:`check_cancelled` in this thread raises once ``flag`` is set
    (None: never). Scopes nest; the previous flag is restored on exit."""
    previous = getattr(_local, "flag", None)
    _local.flag = flag
    try:
        yield
    finally:
        _local.flag = previous


def current_flag() -> CancelFlag | None:
    """The flag of this thread's innermost :func:`cancel_scope` (None outside one)."""
    return getattr(_local, "flag", None)


def check_cancelled() -> None:
    """Raise :class:`StageCancelled` when this thread's stage was cancelled; else nothing."""
    flag = getattr(_local, "flag", None)
    if flag is not None and flag.is_set():
        raise StageCancelled()
