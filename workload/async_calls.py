"""A user's coroutines (``async def`` operators, PyFlink ``AsyncFunction``s), run to completion
for the executor's worker threads.

The executor calls a stage from plain threads: its CPU workers, its GPU lanes, or PyFlink's
own thread on the inline path, some of which may already run an event loop of their own. A
user's coroutines, though, expect what PyFlink's async operator gives them: one event loop for
the life of the operator, so that a client session opened once (in ``open`` or on the first
call) is used from the loop it was made on. So every coroutine runs on one loop of ours, in
one daemon thread per process (started on first use, and again in a forked child), and the
calling thread waits for its result. A batch's coroutines run concurrently (``gather``).

Unlike a plain function's call, a coroutine can be stopped: while it waits, the calling thread
watches its stage's cancel flag (:mod:`workload.cancel`) and, once the executor cancels the
record (Flink's async timeout), cancels the coroutine and raises
:class:`~workload.cancel.StageCancelled`.

Example::

    >>> async def double(x):
    ...     return 2 * x
    >>> run_coroutines([double(1), double(2)])
    [2, 4]
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import os
import threading
from typing import Any, Callable

from workload.cancel import StageCancelled, current_flag

__all__ = ["run_coroutines", "is_async_callable", "is_generator_callable", "collect_async"]

#: how often a waiting caller looks at its stage's cancel flag (seconds)
CANCEL_POLL_S = 0.05


class _LoopThread:
    """One event loop in one daemon thread, per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = -1

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            # A forked child inherits the loop object but not its thread: start a new one.
            if self._loop is None or self._pid != os.getpid() or not self._thread.is_alive():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, daemon=True,
                                          name="streamplace-user-coroutines")
                thread.start()
                self._loop, self._thread, self._pid = loop, thread, os.getpid()
            return self._loop

    def is_current(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread


_LOOP = _LoopThread()


def run_coroutines(coroutines: list) -> list:
    """Each coroutine's result, in order, running them concurrently on the shared loop. The
    first exception is raised once all have finished (as ``asyncio.gather`` does)."""
    if not coroutines:
        return []
    if _LOOP.is_current():  # waiting here would wait for ourselves forever
        for c in coroutines:
            c.close()
        raise RuntimeError("run_coroutines called from the coroutine loop itself: await the "
                           "coroutines instead")

    async def together():
        return await asyncio.gather(*coroutines)

    future = asyncio.run_coroutine_threadsafe(together(), _LOOP.loop())
    flag = current_flag()
    if flag is None:
        return future.result()
    while True:
        try:
            return future.result(timeout=CANCEL_POLL_S)
        except concurrent.futures.TimeoutError:
            if flag.is_set():
                future.cancel()
                raise StageCancelled() from None


async def collect_async(iterable) -> list:
    """An async generator's items as a list."""
    return [item async for item in iterable]


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """True for an ``async def`` function (or a ``functools.partial`` of one, or an object
    whose ``__call__`` is one), an async generator function included."""
    return _function_is(fn, inspect.iscoroutinefunction, inspect.isasyncgenfunction)


def is_generator_callable(fn: Callable[..., Any]) -> bool:
    """True for a generator function (``yield``, sync or async): its result per record is
    several outputs, as in ``DataStream.flat_map``."""
    return _function_is(fn, inspect.isgeneratorfunction, inspect.isasyncgenfunction)


def _function_is(fn, *tests) -> bool:
    """True when one of ``tests`` holds for ``fn`` or for its ``__call__``."""
    call = getattr(fn, "__call__", None)
    return any(test(f) for f in (fn, call) if f is not None for test in tests)
