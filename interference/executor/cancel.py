"""Cancellation that reaches running work: per-task flags, and the async calls a timeout cancels.

How a timed-out task stops (see ``docs/interference.md``, "Cancellation and memory"):

1. Flink's async timeout calls the executor function's ``timeout(value)`` (on a timer thread;
   PyFlink itself does not cancel the ``async_invoke`` coroutine). The function looks the record
   up in its :class:`InFlightCalls` and cancels that asyncio task on its event loop.
2. The cancelled ``await`` cancels the executor's ``concurrent.futures.Future`` for the task.
   The executor's :func:`cancel_on_future` callback sets the task's flag (a
   ``threading.Event``) at once and wakes the dispatcher, which fails the task: its ready and
   waiting stages are dropped, so they never start.
3. A lane that is about to start a stage of a flagged task skips it; a running built-in stage
   sees the flag at its next :func:`~workload.cancel.check_cancelled` (between EM
   iterations, octaves, frames, ...) and raises :class:`StageCancelled`. The lane reports back,
   the dispatcher frees the lane and the task's admission slot. A cancelled call is neither
   retried nor counted as a completed stage nor learned from.

A user operator's own code cannot be interrupted mid-call from another thread: the call in
progress runs to its end, and only the record's remaining stages (and batches made only of
cancelled records) are skipped.

Example::

    >>> import concurrent.futures, threading
    >>> future, flag, woken = concurrent.futures.Future(), threading.Event(), []
    >>> cancel_on_future(future, flag, woken.append)
    >>> future.cancel(), flag.is_set(), woken
    (True, True, [None])
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
from typing import Any, Callable, Coroutine, Hashable, Iterable

from workload.cancel import StageCancelled, cancel_scope, check_cancelled

__all__ = ["StageCancelled", "cancel_scope", "check_cancelled", "AllSet", "cancel_on_future",
           "InFlightCalls", "CANCELLED"]

log = logging.getLogger(__name__)

#: The error of a task or record whose caller cancelled it (e.g. Flink's async timeout).
CANCELLED = "cancelled by the caller (e.g. the async timeout)"


class AllSet:
    """A flag that is set when every one of ``flags`` is (a batch shared by several records
    stops only when all of them are cancelled)."""

    def __init__(self, flags: Iterable[threading.Event]) -> None:
        self.flags = tuple(flags)

    def is_set(self) -> bool:
        return bool(self.flags) and all(f.is_set() for f in self.flags)


def cancel_on_future(future: concurrent.futures.Future, flag: threading.Event,
                     wake: Callable[[Any], None], item: Any = None) -> None:
    """When ``future`` is cancelled: set ``flag`` (running work sees it at once) and call
    ``wake(item)`` (e.g. put an event in the dispatcher's inbox). Runs in the cancelling
    thread; does nothing when the future resolves normally."""

    def done(f: concurrent.futures.Future) -> None:
        if f.cancelled():
            flag.set()
            wake(item)

    future.add_done_callback(done)


class InFlightCalls:
    """The asyncio tasks of an async function's records in flight, so that ``timeout(value)``
    (called on another thread) can cancel the one of its record.

    Keys are ``(task id, id(value))``: PyFlink passes the same record object to
    ``async_invoke`` and to ``timeout``, and the object id keeps two records with one task id
    apart. Every entry is removed when its call ends, whatever way it ends; at most ``limit``
    calls are tracked (beyond: run untracked, logged once), and at most ``early_limit`` keys
    of timeouts that came before their call started are remembered (oldest dropped)."""

    def __init__(self, limit: int = 10_000, early_limit: int = 1024) -> None:
        self.limit = int(limit)
        self.early_limit = int(early_limit)
        self._lock = threading.Lock()
        self._calls: dict[Hashable, tuple[asyncio.Task, asyncio.AbstractEventLoop]] = {}
        self._early: collections.OrderedDict[Hashable, None] = collections.OrderedDict()
        self._warned = False

    def __len__(self) -> int:
        with self._lock:
            return len(self._calls)

    def pending_timeouts(self) -> int:
        """Timeouts remembered for calls that had not started (at most ``early_limit``)."""
        with self._lock:
            return len(self._early)

    async def run(self, key: Hashable, work: Coroutine) -> Any:
        """Await ``work`` as a task that :meth:`cancel` with ``key`` cancels."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._early.pop(key, "absent") is None:  # timed out before it started
                work.close()
                raise asyncio.CancelledError(f"{key[0] if isinstance(key, tuple) else key} "
                                             "timed out before it started")
            task = loop.create_task(work)
            tracked = key not in self._calls and len(self._calls) < self.limit
            if tracked:
                self._calls[key] = (task, loop)
            elif not self._warned:
                self._warned = True
                log.warning("%d calls in flight (or a repeated key %r): this one cannot be "
                            "cancelled by its timeout", len(self._calls), key)
        try:
            return await task
        finally:
            if tracked:
                with self._lock:
                    if self._calls.get(key, (None,))[0] is task:
                        del self._calls[key]

    def cancel(self, key: Hashable) -> bool:
        """Cancel the call of ``key`` (thread-safe); False when none is in flight (then a call
        of that key that starts later is cancelled before it runs)."""
        with self._lock:
            entry = self._calls.pop(key, None)
            if entry is None:
                self._early[key] = None
                while len(self._early) > self.early_limit:
                    self._early.popitem(last=False)
                return False
        task, loop = entry
        try:
            loop.call_soon_threadsafe(task.cancel)
        except RuntimeError:  # the loop is closed: nothing runs there any more
            return False
        return True
