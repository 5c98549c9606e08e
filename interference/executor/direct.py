"""The fast path for an operator that is one per-record CPU step: no dispatcher, a thread pool.

When a user's operator is (after :func:`workload.operators.chain_cpu_stages`) a single CPU
stage without batching, e.g. a plain ``map`` function, the node co-scheduler has nothing to
decide: no stages to order, no batches to form, no GPU to share; FCFS on the node's cores is
what IAWP would do. :class:`DirectExecutor` then runs each record's call on a pool of
``cpu_workers`` threads, with the same retries, outcomes, failures and snapshot as
:class:`~interference.executor.operator_executor.OperatorExecutor`, and none of its per-record
dispatching (measured: about 2,200 trivial records/s through the dispatcher on one core).
Like it, it refuses a record over the node's per-task memory budget
(:mod:`interference.executor.memory`) before any work, and a record whose ``run`` coroutine is
cancelled (Flink's async timeout) does not start, or stops between attempts and
``work_multiplier`` repeats; the user's call in progress cannot be interrupted (it may call
``workload.cancel.check_cancelled()`` to stop early).

:func:`operator_executor_for` picks the executor for an operator.

Example::

    >>> from workload.operators import as_operator
    >>> with DirectExecutor(as_operator(str.upper), OperatorExecutorSettings(cpu_workers=1)) as ex:
    ...     ex.submit("r1", "hi").result().outputs
    ['HI']
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from contextlib import nullcontext

from interference.executor.cancel import CANCELLED, StageCancelled, cancel_scope
from interference.executor.memory import MemoryBudget
from interference.executor.results import (RecordOutcome, StageRun, describe_failure,
                                           format_traceback)
from interference.executor.settings import OperatorExecutorSettings
from interference.executor.telemetry import NodeTelemetry, feedback_numbers
from workload.cancel import current_flag
from workload.limits import BYTES_PER_RECORD_BYTE
from workload.operators import StagedOperator, as_operator, chain_cpu_stages

__all__ = ["DirectExecutor", "operator_executor_for", "runs_directly", "direct_operator"]


def runs_directly(operator: StagedOperator) -> bool:
    """True when ``operator`` is one CPU stage without batching (the fast path applies)."""
    if len(operator.stages) != 1:
        return False
    only = operator.stages[0]
    return only.device == "cpu" and not only.batch.batching


def direct_operator(operator) -> StagedOperator | None:
    """``operator`` with its per-record CPU steps chained, when that leaves one CPU stage
    without batching (what :class:`DirectExecutor` runs); else None. The hook decides its
    inline path with this, and the inline executor is built from the same answer."""
    chained = chain_cpu_stages(as_operator(operator))
    return chained if runs_directly(chained) else None


def operator_executor_for(operator, settings: OperatorExecutorSettings | None = None,
                          runtime_context=None):
    """:class:`DirectExecutor` for a one-step CPU operator, else ``OperatorExecutor``."""
    from interference.executor.operator_executor import OperatorExecutor
    settings = settings or OperatorExecutorSettings.from_env()
    op = as_operator(operator)
    direct = direct_operator(op) if settings.chain_cpu_stages else \
        (op if runs_directly(op) else None)
    if direct is not None:
        return DirectExecutor(direct, settings, runtime_context)
    return OperatorExecutor(op, settings, runtime_context=runtime_context)


def _failed_now(record_id: str, error: str, trace: str | None = None) -> RecordOutcome:
    """A FAILED outcome stamped now, for a record that never ran through ``_run``."""
    now = int(time.time() * 1000)
    return RecordOutcome(record_id, "FAILED", [], error, trace, now, now, 0.0, 0.0, 0.0, [])


def _repeated_call(call, times: int):
    """``call`` made ``times`` times on each record, the last result kept (an emulated slower
    node's repeats, as :meth:`DirectExecutor._repeated` makes them); ``call`` itself once."""
    if times == 1:
        return call

    def repeated(record):
        for _ in range(times - 1):
            call(record)
        return call(record)
    return repeated


class DirectExecutor:
    """Runs a one-step CPU operator's records on a thread pool (see the module docstring)."""

    def __init__(self, operator: StagedOperator, settings: OperatorExecutorSettings | None = None,
                 runtime_context=None):
        self.settings = settings or OperatorExecutorSettings.from_env()
        self.operator = operator
        if not runs_directly(operator):
            raise ValueError(f"{operator!r} is not one CPU stage without batching")
        self.stage = operator.stages[0]
        workers = self.settings.cpu_workers or 1
        self._units = [f"cpu:{i}" for i in range(workers)]
        self._pool = concurrent.futures.ThreadPoolExecutor(
            workers, thread_name_prefix=f"{self.settings.node_id}-direct")
        self._slots = threading.BoundedSemaphore(self.settings.max_in_flight)
        self._lock = threading.Lock()
        self._counts = {"in_flight": 0, "queue_depth": 0, "completed": 0, "failed": 0,
                        "stages_run": 0}
        self._unit_of_thread: dict[int, str] = {}
        self._latencies: list[float] = []
        self.telemetry = NodeTelemetry()
        self.memory = MemoryBudget.for_settings(self.settings)
        self._closed = False
        operator.open(runtime_context)

    # -- public API (as OperatorExecutor's) ----------------------------------------------------
    def submit(self, record_id: str, record, task_size: int = 0,
               cancel: threading.Event | None = None) -> concurrent.futures.Future:
        refused = self._refusal(str(record_id), task_size)
        if refused is not None:
            future: concurrent.futures.Future = concurrent.futures.Future()
            future.set_result(refused)
            return future
        self._admit()
        return self._pool.submit(self._run, str(record_id), record, time.perf_counter(),
                                 time.time(), cancel)

    def run_now(self, record_id: str, record, task_size: int = 0) -> RecordOutcome:
        """The record's outcome, computed in the calling thread (a synchronous Flink operator:
        no pool, no thread hop)."""
        refused = self._refusal(str(record_id), task_size)
        if refused is not None:
            return refused
        self._admit()
        return self._run(str(record_id), record, time.perf_counter(), time.time())

    def run_quick(self, record_id: str, record,
                  failed_first: BaseException | None = None) -> list | RecordOutcome:
        """The record's outputs, computed in the calling thread with only the counts kept (no
        in-flight slot, timing or stage report): for a caller that runs records one at a
        time and has measured them light (a colocated router's kept records). Attempts,
        emulated slowness and errors as :meth:`run_now`; a record that fails every attempt
        gives its FAILED outcome (error and traceback) instead of outputs. ``failed_first``:
        what the record's first attempt raised, made by the caller with :meth:`light_call`
        (then the attempts go on from the second)."""
        if self._closed:
            raise RuntimeError("the executor is closed")
        outputs, error, trace, attempts = self._attempts(record, None, self._unit(),
                                                         failed_first)
        with self._lock:
            self._counts["stages_run"] += attempts
            self._counts["failed" if error else "completed"] += 1
        return outputs if not error else _failed_now(str(record_id), error, trace)

    def light_call(self):
        """A record's first attempt as one plain function, ``call(record) -> outputs`` that
        raises what the stage raises, for the caller's own thread, with the settings' repeats
        (an emulated slower node runs the stage that many times, as :meth:`run_quick` does; the
        last run's output counts). Why: a light record's whole cost in a TaskManager is how
        much code it runs, between PyFlink's own (``benchmarks/hook_profile.py``). The caller
        counts what it ran with :meth:`count_light`, and hands a failed record to
        :meth:`run_quick` with ``failed_first``."""
        run, results, repeats = self.stage.run, self.operator.results, self.settings.repeats
        if repeats == 1:
            return lambda record: results(run([record], "cpu")[0])
        once = _repeated_call(lambda record: run([record], "cpu")[0], repeats)
        return lambda record: results(once(record))

    def light_map(self):
        """:meth:`light_call` where the operator makes exactly one output per record from one
        plain function: that function itself, ``call(record) -> output`` (no list, no
        wrapper; repeated on an emulated slower node); else None."""
        operator, fn, repeats = self.operator, self.stage.per_record, self.settings.repeats
        if fn is None or operator.flat or type(operator).results is not StagedOperator.results:
            return None
        return _repeated_call(fn, repeats)

    def count_light(self, records: int) -> None:
        """``records`` completed by :meth:`light_call` in one attempt each (one stage run
        each, as :meth:`run_quick` counts an attempt whatever its repeats)."""
        with self._lock:
            self._counts["stages_run"] += records
            self._counts["completed"] += records

    def _refusal(self, record_id: str, task_size) -> RecordOutcome | None:
        """A FAILED outcome for a record over the memory budget (counted), else None."""
        if isinstance(task_size, bool) or not isinstance(task_size, int) or task_size <= 0:
            return None  # OperatorExecutor's checks; here a size only ever comes from routing
        error = self.memory.refusal(task_size, BYTES_PER_RECORD_BYTE, "task_size",
                                    "record bytes")
        if error is None:
            return None
        with self._lock:
            self._counts["failed"] += 1
        return _failed_now(record_id, error)

    def _admit(self) -> None:
        """Wait for an in-flight slot and count the record queued (released in ``_run``)."""
        if self._closed:
            raise RuntimeError("the executor is closed")
        self._slots.acquire()
        with self._lock:
            self._counts["queue_depth"] += 1

    async def run(self, record_id: str, record, task_size: int = 0) -> RecordOutcome:
        """:meth:`submit` for asyncio. Cancelling the coroutine stops the record: not started
        (even once a slot it waited for is free), or between attempts and repeats."""
        cancel = threading.Event()
        try:
            if self._slots.acquire(blocking=False):  # a slot now: no thread hop to wait
                self._slots.release()
                future = self.submit(record_id, record, task_size, cancel)
            else:
                future = await asyncio.to_thread(self.submit, record_id, record, task_size,
                                                 cancel)
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            cancel.set()
            raise

    def snapshot(self) -> dict:
        sample = self.telemetry.sample()
        with self._lock:
            counts = dict(self._counts)
        return {"node_id": self.settings.node_id, **counts, **feedback_numbers(sample)}

    def batch_report(self) -> dict:
        with self._lock:
            ordered = sorted(self._latencies)
            calls = self._counts["stages_run"]
        if not ordered:
            return {}
        return {self.stage.name: {"cpu": {
            "batch_size": 1, "batches": calls, "mean_inputs": 1.0,
            "p50_ms": ordered[len(ordered) // 2],
            "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]}}}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)
        self.operator.close()
        self.telemetry.close()

    def __enter__(self) -> DirectExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- worker ----------------------------------------------------------------------------
    def _run(self, record_id: str, record, accepted: float, accepted_epoch: float,
             cancel: threading.Event | None = None):
        started = time.perf_counter()
        unit = self._unit()
        with self._lock:
            self._counts["queue_depth"] -= 1
            self._counts["in_flight"] += 1
        outputs, error, trace, attempts = self._attempts(record, cancel, unit)
        end = time.perf_counter()
        ms = (end - started) * 1000.0
        to_epoch = lambda t: int((accepted_epoch + (t - accepted)) * 1000)  # noqa: E731
        with self._lock:
            self._counts["in_flight"] -= 1
            self._counts["stages_run"] += attempts
            self._counts["failed" if error else "completed"] += 1
            if len(self._latencies) >= 10_000:  # the newest ones are what a report shows
                del self._latencies[:5_000]
            self._latencies.append(ms)
        self._slots.release()
        return RecordOutcome(
            record_id, "FAILED" if error else "OK", [] if error else outputs, error, trace,
            to_epoch(started), to_epoch(end), (started - accepted) * 1000.0, ms, ms,
            [StageRun(self.stage.name, unit, to_epoch(started), to_epoch(end), 1, attempts)])

    def _attempts(self, record, cancel: threading.Event | None, unit: str,
                  failed_first: BaseException | None = None):
        """(outputs, error, traceback, attempts) of running the stage on ``record`` with the
        settings' attempts and repeats (``cancel``: stop between them; ``failed_first``: the
        first attempt was made, and raised this)."""
        outputs, error, trace, attempts = [], None, None, 0
        if failed_first is not None:
            if isinstance(failed_first, StageCancelled):
                return outputs, CANCELLED, None, 1
            attempts = 1
            error = describe_failure(self.stage.name, attempts, unit, failed_first)
            trace = format_traceback(failed_first, self.settings.max_traceback_chars)
        stage_input = self.operator.stage_inputs(self.stage.name, record, {})
        stopped = (lambda: False) if cancel is None else cancel.is_set  # noqa: E731
        while attempts < self.settings.max_attempts:
            if stopped():
                return outputs, CANCELLED, None, attempts
            attempts += 1
            try:
                # no flag to scope (a kept record, run in the caller's thread): no scope, which
                # is most of what a light record's attempt cost
                with (cancel_scope(cancel) if cancel is not None or current_flag() is not None
                      else nullcontext()):
                    value = self._repeated(stage_input, stopped)
                return self.operator.results(value), None, None, attempts
            except StageCancelled:
                return outputs, CANCELLED, None, attempts
            except Exception as exc:  # noqa: BLE001 - the user's code: a FAILED record
                error = describe_failure(self.stage.name, attempts, unit, exc)
                trace = format_traceback(exc, self.settings.max_traceback_chars)
        return outputs, error, trace, attempts

    def _repeated(self, stage_input, stopped):
        """The stage's output on ``stage_input``, run ``repeats`` times (an emulated slower
        node); raises StageCancelled when ``stopped()`` between them."""
        value = None
        for _ in range(self.settings.repeats):
            if stopped():
                raise StageCancelled()
            value = self.stage.run([stage_input], "cpu")[0]
        return value

    def _unit(self) -> str:
        ident = threading.get_ident()
        unit = self._unit_of_thread.get(ident)
        if unit is None:
            with self._lock:
                unit = self._units[len(self._unit_of_thread) % len(self._units)]
                self._unit_of_thread[ident] = unit
        return unit
