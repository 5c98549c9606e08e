"""The IAWP executor for the user's own operator: stages batched across records, placed by the
node scheduler on this node's CPU cores and GPU streams.

One :class:`OperatorExecutor` per node (per Flink TaskManager, built in the AsyncFunction's
``open()``; it need not be picklable). Records come in through :meth:`OperatorExecutor.submit`
(thread-safe, a ``concurrent.futures.Future``) or ``await`` :meth:`OperatorExecutor.run`
(PyFlink's ``AsyncFunction``). Inside (see :mod:`interference.executor.dispatch` for the
dispatcher thread shared with :class:`~interference.executor.NodeExecutor`):

- a record's stages run in its :class:`~workload.operators.StagedOperator`'s dependency order;
  a stage's input is ready when its dependencies' outputs are (``stage_inputs``);
- ready inputs of the same stage from different records wait together
  (:class:`~interference.executor.batching.StageQueues`); a batch is formed when it reaches the
  stage's chosen size, or its oldest input waited ``max_queue_delay_us``, and a unit could take
  it. The size is chosen per (stage, unit kind) from measured batch latency against the stage's
  ``latency_target_ms`` (:class:`~interference.executor.batch_sizer.BatchSizer`);
- each batch is presented to the node scheduler (IAWP by default) as one
  :class:`~workload.model.Stage` (task id = batch id, app = operator name, size = summed task
  sizes); the scheduler places it on a CPU worker or a GPU stream lane, estimating with this
  node's measured times (:class:`~interference.executor.stage_costs.MeasuredStageCosts`). A
  ``"gpu"`` stage runs on a GPU when the node has one (the executor holds it back from cores
  the scheduler may offer), else on a core; ``"cpu"`` stages never on a GPU;
- every call is timed (GPU lanes synchronised first) and tracked for co-runs; measured GPU
  co-run slowdowns feed the scheduler's interference model (``observe_corun``).

Failures: a batch call that raises (or returns the wrong number of outputs) fails none of its
records: each is re-run alone, which isolates the bad ones; a record's input that fails alone
``max_attempts`` times fails the record (``error`` and a bounded ``traceback``). A stage that
knows which inputs failed (an async stage's calls, one per record:
:class:`~workload.async_calls.SomeCallsFailed`) gives the others their outputs at once and
charges an attempt to the failed ones only: a call that succeeded is never made again. A GPU out of
memory re-runs the batch on a CPU core (a batch of one: as its next attempt). Every future
resolves; no record is dropped or run to completion twice; the executor keeps running.

Limits: a record whose estimated memory (``task_size`` x ``workload.limits.BYTES_PER_RECORD_BYTE``)
is over the node's per-task budget (:mod:`interference.executor.memory`) is refused at once,
FAILED before any work. Cancelling a record's future (``run``'s coroutine cancelled, e.g. by
Flink's async timeout) drops its stages not started, and a batch made only of cancelled records
is skipped (or stopped between ``work_multiplier`` repeats); an async stage's coroutine of a
cancelled record is cancelled at once (the batch's other calls go on). **A user stage's own
code cannot be interrupted mid-call from another thread**: a call that is running runs to its
end (a stage may call ``workload.cancel.check_cancelled()`` in its own loops to stop early: it
raises once every record of the batch was cancelled). A stopped call is not learned from (see
:mod:`interference.executor.cancel`).

Torch is imported only when the operator has a GPU-capable stage (to find the node's GPUs) or
its own stages import it; CPU workers then use one torch thread each.

Example::

    >>> from workload.operators import BatchPolicy, StagedOperator, stage
    >>> op = StagedOperator("words", [
    ...     stage("split", str.split),
    ...     stage("count", lambda batch: [len(words) for words in batch], batched=True,
    ...           deps=("split",),
    ...           batch=BatchPolicy.up_to(8, max_queue_delay_us=2000)),
    ... ])
    >>> with OperatorExecutor(op, OperatorExecutorSettings(cpu_workers=2)) as ex:
    ...     outcome = ex.submit("r1", "a b c").result()
    >>> outcome.status, outcome.outputs
    ('OK', [3])
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import numbers
import time
from dataclasses import dataclass
from typing import Any

from interference.executor.batch_sizer import BatchSizer
from interference.executor.batching import Batch, ReadyBatches, StageQueues
from interference.executor.cancel import CANCELLED, AllSet, cancel_on_future
from interference.executor.dispatch import ExecutorCore, await_submit
from interference.executor.devices import discover_units
from interference.executor.lanes import LaneCall
from interference.executor.stage_costs import MeasuredStageCosts
from interference.executor.operator_records import RecordState
from interference.executor.record_failures import RecordFailures
from interference.executor.results import RecordOutcome, StageRun
from interference.executor.settings import OperatorExecutorSettings
from interference.schedulers import make_node_scheduler
from workload.async_calls import SomeCallsFailed
from workload.limits import BYTES_PER_RECORD_BYTE
from workload.model import Assignment, ComputingUnit, NodeScheduler, Stage
from workload.operators import (OperatorStage, StagedOperator, as_operator, batch_outputs,
                                chain_cpu_stages)

__all__ = ["OperatorExecutor", "OperatorExecutorSettings", "RecordOutcome", "StageRun"]


@dataclass
class _BatchDone:
    """A worker's report to the dispatcher."""

    batch: Batch
    stage: Stage
    unit: ComputingUnit
    lane: int
    call: LaneCall


class OperatorExecutor(RecordFailures, ExecutorCore):
    """Runs a user operator's records on this node (see the module doc).

    ``operator``: a :class:`StagedOperator` (or anything :func:`as_operator` takes), opened here
    once with ``runtime_context`` and closed by :meth:`close`; ``settings``:
    :class:`OperatorExecutorSettings` (default ``from_env()``); ``scheduler``: a ready node
    scheduler instead of ``settings.scheduler`` (given the executor's measured costs when it
    has ``use_costs``: the calibration does not know user stages).
    """

    def __init__(self, operator: StagedOperator, settings: OperatorExecutorSettings | None = None,
                 scheduler: NodeScheduler | None = None, runtime_context=None) -> None:
        settings = settings or OperatorExecutorSettings.from_env()
        self.operator = as_operator(operator)
        if settings.chain_cpu_stages:
            self.operator = chain_cpu_stages(self.operator)
        # every record of this operator is one task type, the operator's name (the router's
        # default task_type): a node slow for that type repeats every stage call
        self._repeats = settings.repeats_for(self.operator.name)
        costs, scheduler, units = _parts(self.operator, settings, scheduler, self._repeats)
        self.operator.open(runtime_context)
        try:
            super().__init__(settings, scheduler, costs, costs, units)
        except BaseException:
            self.operator.close()
            raise
        policies = {s.name: s.batch for s in self.operator.stages}
        self.sizer = BatchSizer(policies, settings.batching)
        self._queues = StageQueues(policies, settings.batching, grouped=[
            s.name for s in self.operator.stages if settings.call_groups and s.groupable
            and not s.batch.batching])
        self._records: dict[str, RecordState] = {}
        self._ready = ReadyBatches(self.operator.name, costs.devices, self._has_gpu, costs,
                                   self._t0)
        if self._has_gpu and getattr(scheduler, "interference", None) == "slowdown":
            # Built lazily, the model would stall the dispatcher for seconds at the first
            # GPU co-run; a failure here shows up (and falls back to FCFS) per call.
            with contextlib.suppress(Exception):
                _ = scheduler.model
        self._start()

    def _refusal_sources(self) -> dict:
        return {**super()._refusal_sources(), "batch": self.sizer.refused_counts()}

    # ------------------------------------------------------------------ public API
    def submit(self, record_id: str, record,
               task_size: int = 0) -> concurrent.futures.Future[RecordOutcome]:
        """Accept a record (waits while ``max_in_flight`` are in flight); the future resolves
        to its :class:`RecordOutcome` (``FAILED`` with an error, never an exception). Raises
        ``RuntimeError`` only if the executor is closed."""
        return self._submit(record_id, record, task_size, block=True)

    async def run(self, record_id: str, record, task_size: int = 0) -> RecordOutcome:
        """:meth:`submit` for asyncio: waits for a slot off the event loop, then for the
        outcome. Cancelling the awaiting coroutine drops the record's remaining stages."""
        return await await_submit(
            lambda block: self._submit(record_id, record, task_size, block=block))

    def batch_report(self) -> dict:
        """``{stage: {unit kind: {"batch_size" (chosen now), "batches", "mean_inputs",
        "p50_ms", "p99_ms" (per batch call)}}}``, JSON-able."""
        return self.sizer.report()

    def _closed_hook(self) -> None:
        self.operator.close()

    # ------------------------------------------------------------------ admission
    def _submit(self, record_id, record, task_size, block: bool):
        record_id = str(record_id)
        error = _size_problem(task_size) or self.memory.refusal(
            task_size, BYTES_PER_RECORD_BYTE, "task_size", "record bytes")
        if error:
            return self._refused(_refused_outcome(record_id, error, self._now_ms()))
        if not self._take_slot(block):
            return None
        state = RecordState(record_id, record, int(task_size), concurrent.futures.Future(),
                            time.perf_counter(), set(self.operator.order))
        cancel_on_future(state.future, state.cancel, self._inbox.put, ("cancel", state))
        self._enqueue("record", state)
        return state.future

    # ------------------------------------------------------------------ dispatcher hooks
    def _on_event(self, kind: str, payload: Any) -> None:
        if kind == "record":
            if payload.record_id in self._records:
                payload.error = f"record id {payload.record_id!r} is already in flight here"
                self._complete(payload)
                return
            self._records[payload.record_id] = payload
            self._release(payload)
        elif kind == "done":
            self._finish(payload)
        elif kind == "cancel" and self._records.get(payload.record_id) is payload:
            self._fail(payload, CANCELLED)

    def _busy(self) -> bool:
        return bool(self._records)

    def _fail_all(self, error: str) -> None:
        for state in list(self._records.values()):
            self._fail(state, error)

    def _wake_in_s(self) -> float | None:
        now = time.perf_counter()
        due = self._queues.next_due(now)
        return None if due is None else due - now

    def _release(self, state: RecordState) -> None:
        """Queue the inputs of the record's stages whose dependencies are done."""
        for item in state.release(self.operator, time.perf_counter()):
            self._queues.put(item.stage, item)

    # ------------------------------------------------------------------ batches and units
    def _schedule(self) -> None:
        now = time.perf_counter()
        now_s = now - self._t0
        units = self._unit_views(now_s)
        self._ready.form(self._queues, self.sizer.choose, units, now)
        for cores_too in (True, False):
            # The second pass offers the cores a "gpu" batch was refused to the other batches.
            batches = self._ready.waiting(cores_too)
            if not batches or not any(u.has_room for u in units):
                return
            assignments = self._assign([self._ready.as_stage(b) for b in batches], units, now_s)
            allowed = [a for a in assignments if self._ready.may_run(
                self._ready[a.stage.task_id], self._unit_by_id[a.unit_id])]
            for assignment in allowed:
                self._hand_off(assignment, now_s)
            if len(allowed) == len(assignments):
                return
            units = self._unit_views(now_s)

    def _hand_off(self, assignment: Assignment, now_s: float) -> None:
        batch = self._ready.pop(assignment.stage.task_id)
        unit = self._unit_by_id[assignment.unit_id]
        started = time.perf_counter()
        for item in batch.items:
            item.record.calls[batch.stage] += 1
            if item.record.started_s is None:
                item.record.started_s = started
                self._count_started()
        estimate_s = self.costs.alone_ms(assignment.stage, unit) / 1000.0
        lane = self.lanes.acquire(unit.unit_id, batch.stage, now_s + estimate_s)
        self.lanes.submit(unit.unit_id, lane, self._run_batch, batch, assignment.stage, unit,
                          lane)

    def _run_batch(self, stream, batch: Batch, stage: Stage, unit: ComputingUnit,
                   lane: int) -> None:
        """Worker thread: one call of the stage on the batch's inputs. Never raises."""
        inputs = [item.value for item in batch.items]
        call = self.lanes.call(unit.unit_id, stream, batch.stage, lambda: None, lambda _: _call(
            self.operator.stage(batch.stage), inputs, self.lanes.device(unit.unit_id)),
            self._repeats, cancel=AllSet(item.record.cancel for item in batch.items))
        self._inbox.put(("done", _BatchDone(batch, stage, unit, lane, call)))

    # ------------------------------------------------------------------ completion
    def _finish(self, done: _BatchDone) -> None:
        batch, unit, call = done.batch, done.unit, done.call
        self.lanes.release(unit.unit_id, done.lane, batch.stage)
        n = len(batch.items)
        ms = (call.end - call.start) * 1000.0 if call.run is not None else 0.0
        for item in batch.items:
            item.record.work_ms += ms / n
        partly = call.error if isinstance(call.error, SomeCallsFailed) else None
        # a call group some of whose inputs raised still timed its calls: learned from, or a
        # per-record stage that often meets a bad record would never be
        if call.error is None or (partly is not None and self._queues.grouped(batch.stage)):
            self.learner.learn(done.stage, unit, call.start, call.end, call.run)
            self.costs.add_run(batch.stage, unit.kind, n, ms)
            self.sizer.observe(batch.stage, unit.kind, n, ms)
            self._queues.timed(batch.stage, n, ms)
        self._ready.finished(batch)
        if call.error is not None and partly is None:
            self._batch_failed(batch, unit, call.error, call.run)
            return
        outputs, errors = (call.output, {}) if partly is None else (partly.results, partly.errors)
        self._count_stages(n - len(errors))
        for i, (item, output) in enumerate(zip(batch.items, outputs)):
            state = item.record
            if not state.ok:  # failed or cancelled meanwhile: drop the output
                self._drop_input(state)
                continue
            if i in errors:  # its own call failed (the batch's others gave outputs)
                if state.cancel.is_set():  # stopped for its cancelled record: not a failure
                    self._fail(state, CANCELLED)
                    self._drop_input(state)
                else:
                    self._charge(item, batch.stage, batch.cpu_only, unit, errors[i])
                continue
            state.in_flight -= 1
            state.outputs[batch.stage] = output
            state.runs[batch.stage] = StageRun(batch.stage, unit.unit_id,
                                               self._now_ms(call.start), self._now_ms(call.end),
                                               n, state.calls[batch.stage])
            if batch.stage == self.operator.sink:  # every stage leads to the one sink
                self._complete(state)
            else:
                self._release(state)

    def _complete(self, state: RecordState) -> None:
        end = time.perf_counter()
        if self._records.get(state.record_id) is state:
            del self._records[state.record_id]
        outcome = state.outcome(self.operator.results, self.operator.sink, end, self._now_ms)
        self._resolve(state.future, outcome, state.started_s is not None, outcome.status == "OK")


def _parts(operator: StagedOperator, settings: OperatorExecutorSettings,
           scheduler: NodeScheduler | None, repeats: int):
    """The executor's (measured stage costs, node scheduler, computing units)."""
    costs = MeasuredStageCosts({s.name: s.device for s in operator.stages},
                               settings.default_stage_ms, settings.gpu_speedup_prior, repeats)
    # No GPU-capable stage: no GPU units, and no torch import just to look for them.
    units = discover_units(settings if operator.uses_gpu or settings.use_gpu == "always"
                           else dataclasses.replace(settings, use_gpu="never"))
    return costs, _scheduler(settings, scheduler, costs), units


def _scheduler(settings: OperatorExecutorSettings, given: NodeScheduler | None,
               costs: MeasuredStageCosts) -> NodeScheduler:
    """The node scheduler, estimating with ``costs`` (IAWP with ``settings.interference``)."""
    if given is None:
        extra = {"interference": settings.interference} \
            if settings.scheduler.strip().lower() == "iawp" else {}
        return make_node_scheduler(settings.scheduler, costs, **extra)
    if hasattr(given, "use_costs"):  # the calibration it may hold knows no user stage
        given.use_costs(costs)
    return given


def _size_problem(task_size) -> str | None:
    if isinstance(task_size, bool) or not isinstance(task_size, numbers.Integral) \
            or task_size < 0:
        return f"task_size must be an integer >= 0, got {task_size!r}"
    return None


def _refused_outcome(record_id: str, error: str, now_ms: int) -> RecordOutcome:
    """The outcome of a record refused before admission."""
    return RecordOutcome(record_id, "FAILED", [], error, None, now_ms, now_ms, 0.0, 0.0, 0.0, [])


def _call(stage: OperatorStage, inputs: list, device: str) -> list:
    """One call of ``stage`` on ``inputs``; outputs that are not one per input, in order (a
    wrong number, a set, a dict), are the call's failure."""
    return batch_outputs(stage.name, stage.run(list(inputs), device), len(inputs))
