"""A user's coroutines (``async def`` operators, PyFlink ``AsyncFunction``s), run to completion
for the executor's worker threads.

The executor calls a stage from plain threads: its CPU workers, its GPU lanes, or PyFlink's
own thread on the inline path, some of which may already run an event loop of their own. A
user's coroutines, though, expect what PyFlink's async operator gives them: one event loop for
the life of the operator, so that a client session opened once (in ``open`` or on the first
call) is used from the loop it was made on. So every coroutine runs on one loop of ours, in
one daemon thread per process (started on first use, and again in a forked child), and the
calling thread waits for its result. A batch's coroutines run concurrently, and each one's
outcome is its own (:func:`run_each`): one call that raises fails its record only, so the
records whose calls succeeded keep their results and are not called again (an HTTP POST or a
database write happens once per attempt, as under ``AsyncDataStream.unordered_wait``).

Unlike a plain function's call, a coroutine can be stopped: while it waits, the calling thread
watches its stage's cancel flag (:mod:`workload.cancel`). A batch's flag that has ``flags``,
one per input in order (the executor's :class:`~interference.executor.cancel.AllSet`), cancels
each record's coroutine as soon as that record is cancelled (Flink's async timeout), so one
hung call does not hold the others; once the whole flag is set, every coroutine is cancelled
and :class:`~workload.cancel.StageCancelled` raised.

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

__all__ = ["run_coroutines", "run_each", "SomeCallsFailed", "is_async_callable",
           "is_generator_callable", "collect_async"]

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


class SomeCallsFailed(Exception):
    """Some of a batch's calls raised and the others gave results. The executor keeps the
    results and fails (or retries alone) only the inputs whose own call raised: a call that
    succeeded is never made again for its record.

    ``results[i]``: input ``i``'s result (None where its call failed); ``errors``: input
    index -> what its call raised."""

    def __init__(self, stage: str, results: list, errors: dict[int, BaseException]) -> None:
        first = min(errors)
        super().__init__(f"stage {stage!r}: {len(errors)} of {len(results)} calls failed, "
                         f"the first (input {first}): {type(errors[first]).__name__}: "
                         f"{errors[first]}")
        self.stage, self.results, self.errors = stage, results, errors


def run_coroutines(coroutines: list) -> list:
    """Each coroutine's result, in order, running them concurrently on the shared loop. Once
    all have finished, the first failed one's exception (by position) is raised."""
    results, errors = run_each(coroutines)
    if errors:
        raise errors[min(errors)]
    return results


def run_each(coroutines: list) -> tuple[list, dict[int, BaseException]]:
    """``(results, errors)``: each coroutine's result in order (None where it failed) and,
    by position, what each failed one raised, running them concurrently on the shared loop.
    A coroutine cancelled for its own record (see the module doc) fails with
    :class:`StageCancelled`; when the whole cancel flag is set, every one is cancelled and
    :class:`StageCancelled` is raised."""
    if not coroutines:
        return [], {}
    if _LOOP.is_current():  # waiting here would wait for ourselves forever
        for c in coroutines:
            c.close()
        raise RuntimeError("run_coroutines called from the coroutine loop itself: await the "
                           "coroutines instead")
    loop = _LOOP.loop()
    futures = [asyncio.run_coroutine_threadsafe(c, loop) for c in coroutines]
    _wait(futures, current_flag())
    results: list = [None] * len(futures)
    errors: dict[int, BaseException] = {}
    for i, future in enumerate(futures):
        if future.cancelled():
            errors[i] = StageCancelled("the record's call was cancelled")
        elif future.exception() is not None:
            errors[i] = future.exception()
        else:
            results[i] = future.result()
    return results, errors


def _wait(futures: list, flag) -> None:
    """Until every future is done; with a cancel flag, cancelling each future whose own flag
    is set, and all of them (raising :class:`StageCancelled`) once the whole flag is."""
    if flag is None:
        concurrent.futures.wait(futures)
        return
    own = _own_flags(flag, len(futures))
    pending = set(futures)
    while pending:
        _, pending = concurrent.futures.wait(pending, timeout=CANCEL_POLL_S)
        if flag.is_set():
            for future in futures:
                future.cancel()
            raise StageCancelled()
        for future, mine in zip(futures, own):
            if future in pending and mine.is_set():
                future.cancel()  # cancels its task on the loop; the future is done at once
                pending.discard(future)


def _own_flags(flag, count: int) -> tuple:
    """The per-input flags of a batch's flag, when it has one per coroutine; else none."""
    flags = tuple(getattr(flag, "flags", ()) or ())
    return flags if len(flags) == count else ()


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
