"""The IAWP node executor: runs tasks' stage DAGs on this node's CPU cores and GPUs.

One :class:`NodeExecutor` per node (per Flink TaskManager). Tasks come in through
:meth:`NodeExecutor.submit` (thread-safe, returns a ``concurrent.futures.Future``) or
:meth:`NodeExecutor.run_task` (awaitable, for PyFlink's ``AsyncFunction``). Inside:

- one **dispatcher thread** (:class:`~interference.executor.dispatch.ExecutorCore`) owns all
  scheduling state: the ready stages of every task in flight (a stage is ready when its
  dependencies in ``workload.catalog.APPLICATIONS`` are done), and a
  :class:`~workload.model.ComputingUnit` view of the node. At every event (a task arrives, a
  stage finishes) it asks the node scheduler (``fcfs``, ``pats``, ``iawp``, ... from
  ``interference.schedulers``) where ready stages go, and hands each assignment to that unit;
- a **worker lane per unit** (:class:`~interference.executor.lanes.UnitLanes`): one thread per
  CPU unit (``torch.set_num_threads(1)``), and one thread per stream of each GPU
  (``gpu_streams_per_device`` ``torch.cuda.Stream`` lanes: the co-running stages IAWP packs
  onto one GPU). A worker runs the stage's real operator (``workload.apps.run_stage``) on the
  task's frames, ``work_multiplier`` times. The frames are the task's ``payload`` decoded (a
  real clip, the TaskEvent's SPCL container) or, without one, synthetic frames of
  ``input_size`` pixels (:class:`~interference.executor.clips.TaskClip`);
- **measured interference** (:class:`~interference.executor.corun.CoRunLearner`): every
  finished stage's wall time is compared with its alone time on that kind of unit (a running
  mean of what this node measured when nothing else ran, scaled by the cost model's size
  dependence; the cost model's estimate until then). The rate ``alone / elapsed`` is recorded
  per (stage, partner types, unit kind) in :meth:`NodeExecutor.learned_slowdowns`, and a GPU
  co-run with one partner type is fed to the scheduler (``observe_corun``), which is how IAWP's
  slowdown model learns online.

A stage that raises (including CUDA out-of-memory) is retried up to ``max_attempts`` in total,
on a CPU core after a GPU OOM; then its task resolves as ``FAILED`` with the error. A task is
never dropped and the future always resolves: bad requests (unknown application, bad size)
resolve at once as ``FAILED``, and so do a task whose estimated memory (``input_size`` x
``workload.limits.BYTES_PER_PIXEL``) is over the node's per-task budget
(:mod:`interference.executor.memory`), a payload that does not decode and a stage out of host
memory (``MemoryError``; no retries: neither will get better). An OK task's outcome carries its
answer, ``output`` (``workload.apps.registry.summarise_output`` of its stage outputs).

**Deadlines and priorities.** ``submit`` / ``run_task`` take an optional ``slo``
(:class:`~workload.task_attributes.TaskSLO`, e.g. from a TaskEvent's ``attributes``). Tasks
waiting for admission, and ready stages handed to the node scheduler, then go by the rule of
:mod:`interference.executor.deadlines`: earlier absolute deadline (arrival here + deadline)
first, then higher priority, then arrival order. Without SLOs (the default) both stay first
come, first served, exactly as before.

Cancelling a task's future (``run_task``'s coroutine cancelled, e.g. by Flink's async timeout)
stops its work (:mod:`interference.executor.cancel`): its stages not started never start, and a
running stage stops at the operator's next cancellation check (between EM iterations, octaves,
frames, ...); the lane and the admission slot are then free. A stage stopped so is not counted
as run, nor learned from. A task that fails stops its other running stages the same way.

Example::

    >>> from workload.apps.registry import task_payload
    >>> with NodeExecutor(ExecutorSettings(cpu_workers=2, use_gpu="never")) as node:
    ...     outcome = node.submit("t1", "video_synopsis", 4096).result()
    ...     real = node.submit("t2", "video_synopsis", 4096,
    ...                        payload=task_payload("video_synopsis", 4096, "t2")).result()
    >>> outcome.status, [s.stage for s in outcome.stages][-1], real.output["app_id"]
    ('OK', 'tube_stitching', 'video_synopsis')
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import hashlib
import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from interference.executor.cancel import CANCELLED, StageCancelled, cancel_on_future
from interference.executor.clips import BadPayload, TaskClip, check_payload_type
from interference.executor.corun import MIN_OVERLAP_FRACTION, CostBaseline
from interference.executor.deadlines import Urgency, admission_key, urgency_of
from interference.executor.dispatch import ExecutorCore, await_submit
from interference.executor.lanes import LaneCall, is_cuda_oom
from interference.executor.results import (StageRecord, TaskOutcome, describe_failure,
                                           output_digest, task_seed, task_summary)
from interference.executor.settings import ENV_NODE_ID, ENV_WORK_MULTIPLIER, ExecutorSettings
from interference.schedulers import make_node_scheduler
from workload.catalog import APPLICATIONS, AppDef
from workload.limits import BYTES_PER_PIXEL
from workload.model import Assignment, ComputingUnit, NodeScheduler, Stage
from workload.task_attributes import TaskSLO

__all__ = ["ExecutorSettings", "StageRecord", "TaskOutcome", "NodeExecutor",
           "ENV_NODE_ID", "ENV_WORK_MULTIPLIER", "MIN_OVERLAP_FRACTION", "FRAMES", "task_seed",
           "output_digest"]

log = logging.getLogger(__name__)

#: The partner name under which making a task's frames (input decoding) shows up in
#: :meth:`NodeExecutor.learned_slowdowns`.
FRAMES = "task_frames"


@dataclass
class _Task:
    task_id: str
    app: AppDef
    input_size: int
    clip: TaskClip
    future: concurrent.futures.Future
    accepted_s: float
    waiting: set[str]
    ready: set[str] = field(default_factory=set)
    running: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)
    outputs: dict[str, Any] = field(default_factory=dict)
    records: dict[str, StageRecord] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    sink_digests: dict[str, str] = field(default_factory=dict)
    started_s: float | None = None
    error: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event)  # set: stop its work
    urgency: Urgency | None = None  # its deadline / priority (None: first come, first served)

    @property
    def app_id(self) -> str:
        return self.app.app_id


@dataclass
class _Done:
    """A worker's report to the dispatcher: the timed call, and its output's digest."""

    task: _Task
    stage: Stage
    unit_id: str
    lane: int
    call: LaneCall
    digest: str | None = None


class NodeExecutor(ExecutorCore):
    """Runs tasks' stage DAGs on this node's units under a node scheduler (see module doc).

    ``settings``: :class:`ExecutorSettings` (default ``ExecutorSettings.from_env()``);
    ``scheduler``: a ready :class:`NodeScheduler` instance (overrides ``settings.scheduler``,
    e.g. ``IawpScheduler(interference="slowdown")``); ``costs``: a ``CostModel`` shared with
    the scheduler (built on first use otherwise).
    """

    def __init__(self, settings: ExecutorSettings | None = None,
                 scheduler: NodeScheduler | None = None, costs=None) -> None:
        import torch  # the operators need it; imported here so settings stay light

        self._torch = torch
        settings = settings or ExecutorSettings.from_env()
        if costs is None:
            from workload.estimates import CostModel
            costs = CostModel()
        super().__init__(settings, scheduler or make_node_scheduler(settings.scheduler, costs),
                         costs, CostBaseline(costs, settings.repeats))
        self._tasks: dict[str, _Task] = {}
        self._ready: dict[tuple[str, str], tuple[_Task, Stage]] = {}
        self._start()

    # ------------------------------------------------------------------ public API
    def submit(self, task_id: str, app_id: str, input_size: int, payload: bytes | None = None,
               slo: TaskSLO | None = None) -> concurrent.futures.Future[TaskOutcome]:
        """Accept a task (waits while ``max_in_flight`` tasks are in flight); the future
        resolves to its :class:`TaskOutcome` (``FAILED`` with an error, never an exception).
        ``payload``: the task's clip (a TaskEvent's ``payload``), decoded once instead of
        making synthetic frames; ``input_size`` stays what the scheduler estimates with.
        ``slo``: its deadline and priority, honoured in the queues' order (module doc).
        Raises ``RuntimeError`` only if the executor is closed."""
        return self._submit(task_id, app_id, input_size, payload, True, slo,
                            time.perf_counter())

    async def run_task(self, task_id: str, app_id: str, input_size: int,
                       payload: bytes | None = None, slo: TaskSLO | None = None) -> TaskOutcome:
        """:meth:`submit` for asyncio: waits for a slot off the event loop, then for the
        outcome. Cancelling the awaiting coroutine cancels the task's remaining stages."""
        arrived_s = time.perf_counter()  # once: the deadline counts from here, not the retry
        return await await_submit(lambda block: self._submit(
            task_id, app_id, input_size, payload, block, slo, arrived_s))

    def refuse(self, task_id: str, app_id: str, error: str) -> concurrent.futures.Future:
        """A task refused before admission (e.g. its TaskEvent's attributes are invalid): a
        future already resolved to a ``FAILED`` :class:`TaskOutcome` with ``error``, counted
        as failed like every other refusal."""
        return self._failed_now(task_id, app_id, str(error))

    # ------------------------------------------------------------------ admission
    def _failed_now(self, task_id: str, app_id: str, error: str) -> concurrent.futures.Future:
        now = self._now_ms()
        return self._refused(TaskOutcome(str(task_id), str(app_id), self.settings.node_id,
                                         "FAILED", now, now, 0.0, 0.0, [], "", error))

    def _submit(self, task_id, app_id, input_size, payload, block: bool,
                slo: TaskSLO | None = None, arrived_s: float | None = None):
        if (error := _refusal(app_id, input_size, payload, slo, self.memory)) is not None:
            return self._failed_now(task_id, app_id, error)
        arrived_s = time.perf_counter() if arrived_s is None else arrived_s
        urgency = urgency_of(slo, arrived_s)
        if not self._take_slot(block, admission_key(urgency, arrived_s)):
            return None
        app = APPLICATIONS[app_id]
        seed = task_seed(str(task_id)) if self.settings.seed_from_task_id else 0
        clip = TaskClip(app_id, int(input_size), seed, payload)
        task = _Task(str(task_id), app, int(input_size), clip, concurrent.futures.Future(),
                     time.perf_counter(), {s.name for s in app.stages}, urgency=urgency)
        cancel_on_future(task.future, task.cancel, self._inbox.put, ("cancel", task))
        self._enqueue("task", task)
        return task.future

    # ------------------------------------------------------------------ dispatcher hooks
    def _on_event(self, kind: str, payload: Any) -> None:
        if kind == "task":
            self._admit(payload)
        elif kind == "done":
            self._finish_stage(payload)
        elif kind == "cancel" and self._tasks.get(payload.task_id) is payload:
            self._fail(payload, CANCELLED)

    def _busy(self) -> bool:
        return bool(self._tasks)

    def _fail_all(self, error: str) -> None:
        for task in list(self._tasks.values()):
            self._fail(task, error)

    def _admit(self, task: _Task) -> None:
        if task.task_id in self._tasks:  # stage keys are (task id, stage): ids must be unique
            task.error = f"task id {task.task_id!r} is already in flight on this node"
            self._complete(task)
            return
        self._tasks[task.task_id] = task
        self._release_ready(task)

    def _release_ready(self, task: _Task) -> None:
        """Move the stages whose dependencies are done from waiting to ready."""
        now = time.perf_counter() - self._t0
        for s in task.app.stages:
            if s.name in task.waiting and all(d in task.done for d in s.deps):
                task.waiting.discard(s.name)
                task.ready.add(s.name)
                self._ready[(task.task_id, s.name)] = (task, Stage(
                    task.task_id, task.app_id, s.name, task.input_size, s.gpu_capable, now))

    def _schedule(self) -> None:
        if not self._ready:
            return
        now_s = time.perf_counter() - self._t0
        units = self._unit_views(now_s)
        if not any(u.has_room for u in units):
            return
        ready = [stage for _, stage in self._ready.values()]
        urgency = {task.task_id: task.urgency for task, _ in self._ready.values()
                   if task.urgency is not None}
        for assignment in self._assign_in_order(ready, urgency, units, now_s):
            self._hand_off(assignment, now_s)

    def _hand_off(self, assignment: Assignment, now_s: float) -> None:
        stage = assignment.stage
        task, _ = self._ready.pop((stage.task_id, stage.stage))
        task.ready.discard(stage.stage)
        task.running.add(stage.stage)
        task.attempts[stage.stage] += 1
        if task.started_s is None:
            task.started_s = time.perf_counter()
            self._count_started()
        unit = self._unit_by_id[assignment.unit_id]
        estimate_s = self.learner.baseline.alone_ms(stage, unit) / 1000.0
        lane = self.lanes.acquire(unit.unit_id, stage.stage, now_s + estimate_s)
        self.lanes.submit(unit.unit_id, lane, self._run_stage, task, stage, unit, lane)

    # ------------------------------------------------------------------ workers
    def _run_stage(self, stream, task: _Task, stage: Stage, unit: ComputingUnit,
                   lane: int) -> None:
        """Worker thread: run one stage's operator and report to the dispatcher. Never raises."""
        from workload.apps.devices import to_device
        from workload.apps.registry import run_stage

        device = self.lanes.device(unit.unit_id)

        def prepare():
            # Made (or decoded) once per task, tracked as the FRAMES co-runner: it loads a
            # core like a stage does.
            frames = task.clip.on(device, stream, functools.partial(
                self.learner.tracker.tracking, FRAMES, unit.unit_id))
            deps = task.app.stage(stage.stage).deps
            return frames, {d: to_device(task.outputs[d], device) for d in deps}

        call = self.lanes.call(unit.unit_id, stream, stage.stage, prepare,
                               lambda prepared: run_stage(stage.stage, *prepared),
                               self.settings.repeats_for(task.app.app_id), cancel=task.cancel)
        digest = None
        if call.error is None and stage.stage in _sinks(task.app):
            try:
                digest = output_digest(call.output)
            except Exception as exc:  # noqa: BLE001
                call.error = exc
        self._inbox.put(("done", _Done(task, stage, unit.unit_id, lane, call, digest)))

    # ------------------------------------------------------------------ completion
    def _finish_stage(self, done: _Done) -> None:
        task, name, unit, call = done.task, done.stage.stage, self._unit_by_id[done.unit_id], \
            done.call
        self.lanes.release(unit.unit_id, done.lane, name)
        task.running.discard(name)
        if call.run is not None and call.error is None:
            self.learner.learn(done.stage, unit, call.start, call.end, call.run)
        if task.error is not None:  # failed or cancelled meanwhile: drop the result
            if not task.running:
                self._complete(task)
            return
        if call.error is not None:
            self._stage_failed(task, done, unit)
            return
        task.outputs[name] = call.output
        task.done.add(name)
        task.records[name] = StageRecord(name, unit.unit_id, self._now_ms(call.start),
                                         self._now_ms(call.end), task.attempts[name])
        if done.digest is not None:
            task.sink_digests[name] = done.digest
        self._count_stages()
        if len(task.done) == len(task.app.stages):
            self._complete(task)
        else:
            self._release_ready(task)

    def _stage_failed(self, task: _Task, done: _Done, unit: ComputingUnit) -> None:
        name, exc = done.stage.stage, done.call.error
        if isinstance(exc, StageCancelled):  # seen by the worker before the dispatcher
            self._fail(task, CANCELLED)
            return
        if isinstance(exc, BadPayload):  # the bytes will not decode on a retry either
            self._fail(task, f"{exc} (task {task.task_id!r}, {task.app_id})")
            return
        if isinstance(exc, MemoryError):  # out of host memory: a retry would be too
            self._fail(task, describe_failure(name, task.attempts[name], unit.unit_id, exc))
            return
        oom = unit.kind == "gpu" and is_cuda_oom(exc)
        if oom:
            self._torch.cuda.empty_cache()
            self.learner.out_of_memory(name, unit, done.call.run)
        attempts = task.attempts[name]
        if attempts < self.settings.max_attempts:
            log.info("executor %s: %s of %s failed on %s (%s), retrying",
                     self.settings.node_id, name, task.task_id, unit.unit_id, exc)
            stage = dataclasses.replace(done.stage, gpu_capable=False) if oom else done.stage
            task.ready.add(name)  # keeps its ready_at_s: it stays at its place in line
            self._ready[(task.task_id, name)] = (task, stage)
            return
        self._fail(task, describe_failure(name, attempts, unit.unit_id, exc))

    def _fail(self, task: _Task, error: str) -> None:
        if task.error is None:
            task.error = error
        task.cancel.set()  # its running stages stop at their next check
        for name in list(task.ready):
            self._ready.pop((task.task_id, name), None)
        task.ready.clear()
        task.waiting.clear()
        if not task.running:  # else: resolved when its last running stage reports back
            self._complete(task)

    def _complete(self, task: _Task) -> None:
        end = time.perf_counter()
        if self._tasks.get(task.task_id) is task:
            del self._tasks[task.task_id]
        started = task.started_s if task.started_s is not None else task.accepted_s
        ok = task.error is None
        digest = _task_digest(task) if ok else ""
        # Here, before the outputs are freed; a bounded summary (~0.1-0.3 ms) is cheap enough
        # for the dispatcher, and it reads several stages' outputs, not only the sinks.
        output = task_summary(task.app_id, task.outputs, self._warn_once) if ok else None
        outcome = TaskOutcome(
            task.task_id, task.app_id, self.settings.node_id, "OK" if ok else "FAILED",
            self._now_ms(started), self._now_ms(end), (started - task.accepted_s) * 1000.0,
            (end - started) * 1000.0,
            sorted(task.records.values(), key=lambda r: (r.started_at_ms, r.stage)),
            digest, task.error, output)
        task.outputs.clear()  # free the tensors now, not when the caller drops the outcome
        task.clip.clear()
        self._resolve(task.future, outcome, task.started_s is not None, ok)


def _refusal(app_id, input_size, payload, slo, memory) -> str | None:
    """Why a task is refused before admission, or None: an unknown app, a size that is not a
    positive integer or over the memory budget, a payload that is not bytes, a bad SLO."""
    if app_id not in APPLICATIONS:
        return f"unknown application {app_id!r}; known: {', '.join(sorted(APPLICATIONS))}"
    if isinstance(input_size, bool) or not isinstance(input_size, int) or input_size < 1:
        return f"input_size must be a positive integer (pixels of the clip), got {input_size!r}"
    error = check_payload_type(payload)
    if error is None:
        error = memory.refusal(input_size, BYTES_PER_PIXEL, "input_size", "pixels")
    if error is None and slo is not None and not isinstance(slo, TaskSLO):
        error = f"slo must be a workload.task_attributes.TaskSLO or None, got {type(slo).__name__}"
    return error


def _task_digest(task: _Task) -> str:
    """One digest of the task's sink outputs, in the app's stage order."""
    h = hashlib.blake2b(digest_size=16)
    for name in (s.name for s in task.app.stages if s.name in task.sink_digests):
        h.update(name.encode() + task.sink_digests[name].encode())
    return h.hexdigest()


_SINKS: dict[str, frozenset[str]] = {}


def _sinks(app: AppDef) -> frozenset[str]:
    """The stages no other stage of the app depends on: the task's results."""
    if app.app_id not in _SINKS:
        used = {d for s in app.stages for d in s.deps}
        _SINKS[app.app_id] = frozenset(s.name for s in app.stages if s.name not in used)
    return _SINKS[app.app_id]
