"""Admission and dispatch, shared by both executors: the dispatcher thread and what it owns.

:class:`ExecutorCore` is the base of :class:`~interference.executor.NodeExecutor` (built-in
apps) and :class:`~interference.executor.OperatorExecutor` (user operators). It holds:

- the node's units (:func:`~interference.executor.devices.discover_units`), their worker lanes
  (:class:`~interference.executor.lanes.UnitLanes`) and NVML/psutil telemetry;
- the node scheduler and its FCFS fallback: every scheduling pass asks the scheduler where the
  ready stages go, checks its answer (:func:`validate_assignments`), and falls back to FCFS when
  it fails, or when nothing runs and it placed nothing (waiting would wait forever); when tasks
  have deadlines or priorities the scheduler is asked in urgency windows
  (:func:`~interference.executor.deadlines.assign_in_windows`, :meth:`_assign_in_order`);
- measured interference (:class:`~interference.executor.corun.CoRunLearner`);
- admission: ``max_in_flight`` slots (an :class:`~interference.executor.deadlines.AdmissionGate`:
  waiting submitters are admitted by deadline, then priority, then arrival; first come, first
  served without SLOs), the queued / executing / completed / failed counters behind
  :meth:`snapshot`, and the inbox the dispatcher thread reads;
- the per-task memory budget (:class:`~interference.executor.memory.MemoryBudget`) the
  subclasses check at admission, and the optional ``RLIMIT_AS`` of the worker process.

A caller that gives up (``run_task`` / ``run`` cancelled, e.g. by Flink's async timeout) frees
what it held: a slot it was still waiting for is never taken, and a task it submitted is
cancelled (see :mod:`interference.executor.cancel`).

One dispatcher thread owns all scheduling state. It wakes on every event (work accepted, a call
finished, close), or when :meth:`_wake_in_s` says a timer is due, handles the events
(:meth:`_on_event`), sweeps cancelled work (:meth:`_sweep`) and schedules (:meth:`_schedule`).
Subclasses implement those hooks and :meth:`_busy` / :meth:`_fail_all`; they call
:meth:`_start` at the end of their constructor.

Example::

    >>> from interference.executor import NodeExecutor, OperatorExecutor
    >>> issubclass(NodeExecutor, ExecutorCore), issubclass(OperatorExecutor, ExecutorCore)
    (True, True)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from typing import Any, Callable

from interference.executor.corun import AloneBaseline, CoRunLearner
from interference.executor.deadlines import (SLOT_POLL_S, AdmissionGate, Urgency, admission_key,
                                             assign_in_windows, urgency_order)
from interference.executor.devices import discover_units
from interference.executor.lanes import UnitLanes
from interference.executor.memory import MemoryBudget, limit_address_space
from interference.executor.telemetry import NodeTelemetry, feedback_numbers
from interference.schedulers import validate_assignments
from interference.schedulers.fcfs import FcfsScheduler
from workload.model import Assignment, ComputingUnit, NodeScheduler, Stage
from workload.refusals import learning_refusals

__all__ = ["ExecutorCore", "await_submit"]

log = logging.getLogger(__name__)

#: How often the idle dispatcher wakes, and how often it looks for cancelled futures (s).
_IDLE_TICK_S = 0.5
_CANCEL_SWEEP_S = 0.05
#: How often a caller waiting for a slot in a thread looks whether it gave up (s).
_SLOT_POLL_S = SLOT_POLL_S


class ExecutorCounts:
    """The node's work counters, one lock: queued (admitted, not started), executing,
    completed, failed (refusals included) and stages run. Any thread may read them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queued = self._executing = self._completed = self._failed = self._stages = 0

    def read(self) -> dict:
        with self._lock:
            return {"in_flight": self._executing, "queue_depth": self._queued,
                    "completed": self._completed, "failed": self._failed,
                    "stages_run": self._stages}

    def queued_one(self) -> None:
        with self._lock:
            self._queued += 1

    def started_one(self) -> None:
        with self._lock:
            self._queued -= 1
            self._executing += 1

    def stages(self, n: int) -> None:
        with self._lock:
            self._stages += n

    def refused_one(self) -> None:
        with self._lock:
            self._failed += 1

    def finished_one(self, started: bool, ok: bool) -> None:
        with self._lock:
            if started:
                self._executing -= 1
            else:
                self._queued -= 1
            if ok:
                self._completed += 1
            else:
                self._failed += 1


class ExecutorCore:
    """The shared part of a node executor (see the module doc).

    ``settings``: a :class:`~interference.executor.settings.NodeSettings`; ``scheduler``: the
    node scheduler (already built); ``costs``: what the FCFS fallback is built with;
    ``baseline``: alone times for the co-run learner; ``units``: the node's units (default:
    discovered from ``settings``).
    """

    def __init__(self, settings, scheduler: NodeScheduler, costs, baseline: AloneBaseline,
                 units: list[ComputingUnit] | None = None) -> None:
        self.settings = settings
        self.costs = costs
        self.scheduler = scheduler
        self._fallback = FcfsScheduler(costs)
        self.units: list[ComputingUnit] = units if units is not None else \
            discover_units(settings)
        self._unit_by_id = {u.unit_id: u for u in self.units}
        self._has_gpu = any(u.kind == "gpu" for u in self.units)
        self.telemetry = NodeTelemetry()
        self._t0 = time.perf_counter()
        self._epoch0_ms = time.time() * 1000.0
        self._warned: set[str] = set()
        self.learner = CoRunLearner(baseline, scheduler, self._warn_once)
        self.lanes = UnitLanes(self.units, settings.node_id, self.learner.tracker)
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._counts = ExecutorCounts()   # read by snapshot() from any thread
        self._slots = AdmissionGate(settings.max_in_flight, _SLOT_POLL_S)
        self.memory = MemoryBudget.for_settings(settings)
        if getattr(settings, "limit_address_space", False):
            limit_address_space(self.memory, self._has_gpu)
        self._close_lock = threading.Lock()
        self._closed = False
        self._dispatcher = threading.Thread(target=self._loop, daemon=True,
                                            name=f"{settings.node_id}-dispatcher")

    def _start(self) -> None:
        self._dispatcher.start()

    # ------------------------------------------------------------------ public API
    def snapshot(self) -> dict:
        """The node's state for the router's feedback: counts and utilisations in [0, 1]."""
        sample = self.telemetry.sample()
        return {"node_id": self.settings.node_id, **self._counts.read(),
                **feedback_numbers(sample), "learning_refused": self.learning_refused()}

    def learning_refused(self) -> dict[str, int]:
        """What this node's learners refused to learn from, ``"<learner>:<reason>" -> count``
        (:mod:`workload.refusals`; bounded): every one stays on its prior for those."""
        return learning_refusals(self._refusal_sources())

    def _refusal_sources(self) -> dict:
        """Learner name -> its refusal counts (subclasses add their own learners)."""
        return {"corun": self.learner.refused_counts(), "alone": self.learner.baseline,
                "scheduler": self.scheduler, "gpu_reading": self.telemetry.readings_refused}

    def learned_slowdowns(self) -> dict:
        """Measured co-execution: ``{(stage, partner types, unit kind): {"mean_rate",
        "slowdown", "count"}}``; rate = alone time / elapsed (1 = no slowdown), slowdown =
        1 / mean rate. Partners are the stage types that overlapped at least
        :data:`~interference.executor.corun.MIN_OVERLAP_FRACTION` of the call's time anywhere
        on the node."""
        return self.learner.slowdowns()

    def close(self) -> None:
        """Stop accepting work, finish what is in flight, stop the threads. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self._inbox.put(("close", None))
        self._dispatcher.join()
        self.lanes.shutdown()
        self.telemetry.close()
        self._closed_hook()

    def _closed_hook(self) -> None:
        """After the threads stopped, once (subclasses release their own resources)."""

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(node_id={self.settings.node_id!r}, scheduler="
                f"{getattr(self.scheduler, 'name', type(self.scheduler).__name__)!r}, "
                f"units={[u.unit_id for u in self.units]})")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ admission
    def _now_ms(self, perf: float | None = None) -> int:
        perf = time.perf_counter() if perf is None else perf
        return int(self._epoch0_ms + (perf - self._t0) * 1000.0)

    def _take_slot(self, block: bool | threading.Event, key: tuple | None = None) -> bool:
        """A slot for one more item in flight (False: none free and ``block`` is False).
        ``block`` may be an event: wait until a slot is free or the event is set (the caller
        gave up: False, no slot taken). ``key``: the item's place in line
        (:func:`~interference.executor.deadlines.admission_key`; None: arrival now, FCFS).
        Raises ``RuntimeError`` when the executor is (or, while waiting, gets) closed."""
        if self._closed:
            raise RuntimeError(f"executor {self.settings.node_id!r} is closed")
        key = admission_key(None, time.perf_counter()) if key is None else key
        if block is False:
            return self._slots.try_take(key)
        gave_up = block if isinstance(block, threading.Event) else None
        if self._slots.take(key, gave_up, lambda: self._closed):
            return True
        if gave_up is not None and gave_up.is_set():
            return False
        raise RuntimeError(f"executor {self.settings.node_id!r} is closed")

    def _enqueue(self, kind: str, item: Any) -> None:
        """Hand an accepted item (holding a slot) to the dispatcher."""
        with self._close_lock:
            if self._closed:
                self._slots.release()
                raise RuntimeError(f"executor {self.settings.node_id!r} is closed")
            self._counts.queued_one()
            self._inbox.put((kind, item))

    def _count_started(self) -> None:
        self._counts.started_one()

    def _count_stages(self, n: int = 1) -> None:
        self._counts.stages(n)

    def _refused(self, outcome: Any) -> concurrent.futures.Future:
        """A future already resolved with ``outcome``: a request refused before admission
        (it never held a slot), counted as failed."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result(outcome)
        self._counts.refused_one()
        return future

    def _resolve(self, future: concurrent.futures.Future, outcome: Any, started: bool,
                 ok: bool) -> None:
        """Count an admitted item as finished, free its slot, resolve its future."""
        self._counts.finished_one(started, ok)
        self._slots.release()
        if not future.cancelled():
            try:
                future.set_result(outcome)
            except concurrent.futures.InvalidStateError:  # cancelled in between
                pass

    # ------------------------------------------------------------------ dispatcher
    def _loop(self) -> None:
        closing, last_sweep = False, 0.0
        while True:
            wake = self._wake_in_s()
            timeout = _IDLE_TICK_S if wake is None else min(_IDLE_TICK_S, max(0.0, wake))
            try:
                events = [self._inbox.get(timeout=timeout)]
            except queue.Empty:
                events = []
            while True:  # take everything that arrived: one scheduling pass for all of it
                try:
                    events.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            try:
                for kind, payload in events:
                    if kind == "close":
                        closing = True
                    else:
                        self._on_event(kind, payload)
                if time.perf_counter() - last_sweep >= _CANCEL_SWEEP_S:
                    last_sweep = time.perf_counter()
                    self._sweep()
                self._schedule()
            except Exception as exc:  # a bug here must fail work, not hang it
                log.exception("executor %s: dispatcher error", self.settings.node_id)
                self._fail_all(f"executor error: {type(exc).__name__}: {exc}")
            if closing and not self._busy():
                return

    def _unit_views(self, now_s: float) -> list[ComputingUnit]:
        gpus = self.telemetry.sample()["gpus"] if self._has_gpu else []
        return self.lanes.views(now_s, gpus)

    def _assign(self, ready: list[Stage], units: list[ComputingUnit],
                now_s: float) -> list[Assignment]:
        """The scheduler's checked assignments of ``ready`` to ``units`` (FCFS when it fails,
        or when nothing runs and it placed nothing)."""
        try:
            assignments = self.scheduler.assign(ready, units, now_s)
            validate_assignments(assignments, ready, units)
        except Exception as exc:  # noqa: BLE001 - a broken scheduler must not stall the node
            self._warn_once(f"assign:{type(exc).__name__}",
                            f"scheduler {self.scheduler!r} failed ({exc}); FCFS this round")
            assignments = self._fallback.assign(ready, units, now_s)
        if not assignments and not any(u.running for u in units):
            # Nothing runs and nothing was placed (e.g. every GPU over its memory threshold):
            # waiting would wait forever, so FCFS places what it can.
            assignments = self._fallback.assign(ready, units, now_s)
        return assignments

    def _assign_in_order(self, ready: list[Stage], urgency: dict[str, Urgency],
                         units: list[ComputingUnit], now_s: float) -> list[Assignment]:
        """:meth:`_assign` of ``ready``; when some of their tasks have an urgency (``urgency``:
        task id -> :class:`~interference.executor.deadlines.Urgency`), in urgency windows, so
        the most urgent stages get the first claim on the free units (see
        :mod:`interference.executor.deadlines`). Without urgencies: one call, as always."""
        if not urgency:
            return self._assign(ready, units, now_s)
        return assign_in_windows(urgency_order(ready, urgency), units, now_s, self._assign)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("executor %s: %s", self.settings.node_id, message)

    # ------------------------------------------------------------------ subclass hooks
    def _on_event(self, kind: str, payload: Any) -> None:
        raise NotImplementedError

    def _sweep(self) -> None:
        """Drop work whose caller cancelled it (both executors hear of a cancelled future at
        once, as a ``"cancel"`` event from :func:`~interference.executor.cancel.cancel_on_future`;
        this periodic hook is for anything that cannot)."""

    def _schedule(self) -> None:
        raise NotImplementedError

    def _busy(self) -> bool:
        """Whether anything is still in flight (the dispatcher stops when closing and idle)."""
        raise NotImplementedError

    def _fail_all(self, error: str) -> None:
        """Fail everything in flight (after a dispatcher bug)."""
        raise NotImplementedError

    def _wake_in_s(self) -> float | None:
        """Seconds until the dispatcher must look again without an event (None: no timer)."""
        return None


async def await_submit(submit: Callable[[Any], concurrent.futures.Future | None]):
    """``submit(block)`` for asyncio: waits for a slot off the event loop, then for the
    result. Cancelling the awaiting coroutine cancels the future, or, while it still waits
    for a slot, stops the wait (a slot taken in that instant is given back by cancelling
    what was submitted with it)."""
    future = submit(False)
    if future is None:  # every slot taken: wait for one in a thread, not on the loop
        gave_up = threading.Event()
        waiter = asyncio.ensure_future(asyncio.to_thread(submit, gave_up))
        try:
            future = await asyncio.shield(waiter)
        except asyncio.CancelledError:
            gave_up.set()
            waiter.add_done_callback(_cancel_submitted)
            raise
    return await asyncio.wrap_future(future)


def _cancel_submitted(waiter: asyncio.Future) -> None:
    """A slot wait whose caller gave up ended: cancel what it submitted, if anything."""
    if waiter.cancelled() or waiter.exception() is not None:
        return
    future = waiter.result()
    if future is not None:
        future.cancel()
