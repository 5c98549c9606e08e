"""The IAWP node executor: runs tasks' stage DAGs on this node's CPU cores and GPUs.

One :class:`NodeExecutor` per node (per Flink TaskManager). Tasks come in through
:meth:`NodeExecutor.submit` (thread-safe, returns a ``concurrent.futures.Future``) or
:meth:`NodeExecutor.run_task` (awaitable, for PyFlink's ``AsyncFunction``). Inside:

- one **dispatcher thread** owns all scheduling state: the ready stages of every task in flight
  (a stage is ready when its dependencies in ``workload.catalog.APPLICATIONS`` are done), and a
  :class:`~workload.model.ComputingUnit` view of the node. At every event (a task arrives, a
  stage finishes) it asks the node scheduler (``fcfs``, ``pats``, ``iawp``, ... from
  ``interference.schedulers``) where ready stages go, and hands each assignment to that unit;
- a **worker per unit**: one thread per CPU unit (``torch.set_num_threads(1)``: one unit is one
  core; torch kernels release the GIL, so cores really run in parallel), and one thread per
  stream of each GPU (``gpu_streams_per_device`` ``torch.cuda.Stream`` lanes: the co-running
  stages IAWP packs onto one GPU). A worker runs the stage's real operator
  (``workload.apps.run_stage``) on the task's frames, ``work_multiplier`` times;
- **measured interference**: every finished stage's wall time is compared with its alone time
  on that kind of unit (a running mean of what this node measured when nothing else ran,
  scaled by the cost model's size dependence; the cost model's estimate until then). The rate
  ``alone / elapsed`` is recorded per (stage, partner types, unit kind) in
  :meth:`NodeExecutor.learned_slowdowns`, and a GPU co-run with one partner type is fed to the
  scheduler (``observe_corun``), which is how IAWP's slowdown model learns online.

A stage that raises (including CUDA out-of-memory) is retried up to ``max_attempts`` in total,
on a CPU core after a GPU OOM; then its task resolves as ``FAILED`` with the error. A task is
never dropped and the future always resolves: bad requests (unknown application, bad size)
resolve at once as ``FAILED``.

Example::

    >>> with NodeExecutor(ExecutorSettings(cpu_workers=2, use_gpu="never")) as node:
    ...     outcome = node.submit("t1", "video_synopsis", 4096).result()
    >>> outcome.status, [s.stage for s in outcome.stages][-1]
    ('OK', 'tube_stitching')
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import logging
import os
import queue
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from interference.executor.devices import discover_units
from interference.executor.telemetry import NodeTelemetry
from interference.schedulers import make_node_scheduler, validate_assignments
from interference.schedulers.fcfs import FcfsScheduler
from workload.catalog import APPLICATIONS, AppDef
from workload.model import Assignment, ComputingUnit, NodeScheduler, Stage

__all__ = ["ExecutorSettings", "StageRecord", "TaskOutcome", "NodeExecutor",
           "ENV_NODE_ID", "ENV_WORK_MULTIPLIER", "MIN_OVERLAP_FRACTION", "FRAMES", "task_seed",
           "output_digest"]

log = logging.getLogger(__name__)

#: Environment variables read by :meth:`ExecutorSettings.from_env`.
ENV_NODE_ID = "STREAMPLACE_NODE_ID"
ENV_WORK_MULTIPLIER = "STREAMPLACE_WORK_MULTIPLIER"

#: A stage type counts as a co-runner of a stage when they overlapped for at least this share
#: of the stage's elapsed time: a partner that only brushed its start or end did not slow it.
MIN_OVERLAP_FRACTION = 0.25

#: The partner name under which making a task's frames (input decoding) shows up in
#: :meth:`NodeExecutor.learned_slowdowns`.
FRAMES = "task_frames"

#: How often the idle dispatcher wakes, and how often it looks for cancelled futures (s).
_IDLE_TICK_S = 0.5
_CANCEL_SWEEP_S = 0.05


# ---------------------------------------------------------------------------------- settings
@dataclass
class ExecutorSettings:
    """What one node's executor runs on and how.

    node_id: the node (TaskManager resource id) reported in outcomes and snapshots.
    scheduler: a name of the ``interference.schedulers`` registry (fcfs, mct, pats, heft,
        mystic, iawp).
    cpu_workers: CPU units (worker threads); 0 = one per CPU in ``os.sched_getaffinity(0)``.
    use_gpu: "auto" (the CUDA devices torch sees, if any), "never", or "always" (error without).
    gpu_streams_per_device: stages that may co-run on one GPU (one CUDA stream each).
    work_multiplier: each stage's operator runs ``max(1, round(m))`` times: a slower node made
        real on one host (the work is done, never slept).
    max_attempts: tries per stage (exception, CUDA OOM) before its task fails.
    max_in_flight: tasks accepted at once; further submits wait for a slot.
    seed_from_task_id: frames seeded by a stable hash of the task id (else seed 0 for all).
    """

    node_id: str = "local"
    scheduler: str = "iawp"
    cpu_workers: int = 0
    use_gpu: str = "auto"
    gpu_streams_per_device: int = 2
    work_multiplier: float = 1.0
    max_attempts: int = 2
    max_in_flight: int = 64
    seed_from_task_id: bool = True

    def __post_init__(self) -> None:
        if self.use_gpu not in ("auto", "never", "always"):
            raise ValueError(f"use_gpu must be 'auto', 'never' or 'always', got {self.use_gpu!r}")
        if self.cpu_workers < 0:
            raise ValueError(f"cpu_workers must be >= 0 (0: all CPUs), got {self.cpu_workers}")
        if self.gpu_streams_per_device < 1:
            raise ValueError("gpu_streams_per_device must be at least 1")
        if not self.work_multiplier > 0:
            raise ValueError(f"work_multiplier must be positive, got {self.work_multiplier}")
        if self.max_attempts < 1 or self.max_in_flight < 1:
            raise ValueError("max_attempts and max_in_flight must be at least 1")

    @property
    def repeats(self) -> int:
        """How many times each stage's operator really runs."""
        return max(1, round(self.work_multiplier))

    @classmethod
    def from_env(cls, **overrides) -> ExecutorSettings:
        """Defaults, then ``STREAMPLACE_NODE_ID`` / ``STREAMPLACE_WORK_MULTIPLIER`` from the
        environment (a TaskManager's Python worker inherits them), then ``overrides``."""
        values: dict[str, Any] = {}
        if os.environ.get(ENV_NODE_ID):
            values["node_id"] = os.environ[ENV_NODE_ID]
        if os.environ.get(ENV_WORK_MULTIPLIER):
            try:
                values["work_multiplier"] = float(os.environ[ENV_WORK_MULTIPLIER])
            except ValueError:
                raise ValueError(f"{ENV_WORK_MULTIPLIER} must be a number, got "
                                 f"{os.environ[ENV_WORK_MULTIPLIER]!r}") from None
        values.update(overrides)
        return cls(**values)


# ---------------------------------------------------------------------------------- results
@dataclass
class StageRecord:
    """One stage as it ran: its operator's start and end (epoch ms), where, and in how many
    tries (1 unless it was retried)."""

    stage: str
    unit: str
    started_at_ms: int
    finished_at_ms: int
    attempts: int


@dataclass
class TaskOutcome:
    """A finished task. ``started_at_ms``: its first stage was handed to a unit (arrival
    instead if none was); ``queue_ms``: accepted -> started; ``service_ms``: started ->
    finished; ``output_digest``: BLAKE2b of its final stages' outputs (same device, same
    digest); ``error``: why it FAILED, else None."""

    task_id: str
    app_id: str
    node_id: str
    status: str
    started_at_ms: int
    finished_at_ms: int
    queue_ms: float
    service_ms: float
    stages: list[StageRecord]
    output_digest: str
    error: str | None


# ---------------------------------------------------------------------------------- helpers
def task_seed(task_id: str) -> int:
    """A stable 31-bit seed from a task id (Python's ``hash()`` is salted per process).

    Example::

        >>> task_seed("t1") == task_seed("t1"), 0 <= task_seed("t1") < 2**31
        (True, True)
    """
    digest = hashlib.blake2b(task_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 2**31


def _digest_into(h, obj: Any) -> None:
    """Feed a stage output (tensors, dataclasses, containers, plain values) into hash ``h``."""
    import torch
    if isinstance(obj, torch.Tensor):
        t = obj.detach().to("cpu").contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        try:
            h.update(t.numpy().tobytes())
        except TypeError:  # dtypes numpy lacks (bfloat16): hash their float32 values
            h.update(t.to(torch.float32).numpy().tobytes())
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        h.update(type(obj).__name__.encode())
        for f in dataclasses.fields(obj):
            _digest_into(h, getattr(obj, f.name))
    elif isinstance(obj, dict):
        for key, value in obj.items():
            h.update(repr(key).encode())
            _digest_into(h, value)
    elif isinstance(obj, (list, tuple)):
        h.update(f"L{len(obj)}".encode())
        for value in obj:
            _digest_into(h, value)
    else:
        h.update(repr(obj).encode())


def output_digest(obj: Any) -> str:
    """Hex BLAKE2b (16 bytes) of a stage output."""
    h = hashlib.blake2b(digest_size=16)
    _digest_into(h, obj)
    return h.hexdigest()


def _is_cuda_oom(exc: BaseException) -> bool:
    import torch
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)  # torch >= 1.13
    return (oom_type is not None and isinstance(exc, oom_type)) or \
        "CUDA out of memory" in str(exc)


def _cpu_worker_init() -> None:
    # One CPU unit = one core: intra-op threads would make units fight over the same cores.
    import torch
    torch.set_num_threads(1)


@dataclass
class _Run:
    """A stage operator running now, and whom it overlapped with so far."""

    stage: str
    unit_id: str
    start: float
    open: dict[int, float] = field(default_factory=dict)  # other run id -> overlap start
    node: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    unit: dict[str, float] = field(default_factory=lambda: defaultdict(float))


class _CoRunTracker:
    """Who ran at the same time as whom, in seconds of overlap per partner stage type, on the
    whole node and on the same unit. Called from worker threads; a lock keeps it consistent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[int, _Run] = {}
        self._next = 0

    def begin(self, stage: str, unit_id: str) -> tuple[int, float]:
        with self._lock:
            now = time.perf_counter()
            run_id, self._next = self._next, self._next + 1
            me = _Run(stage, unit_id, now)
            for other_id, other in self._running.items():
                other.open[run_id] = now
                me.open[other_id] = now
            self._running[run_id] = me
            return run_id, now

    def end(self, run_id: int) -> tuple[float, _Run]:
        with self._lock:
            now = time.perf_counter()
            me = self._running.pop(run_id)
            for other_id, since in me.open.items():
                other = self._running[other_id]
                overlap = now - since
                other.open.pop(run_id)
                me.node[other.stage] += overlap
                other.node[me.stage] += overlap
                if other.unit_id == me.unit_id:
                    me.unit[other.stage] += overlap
                    other.unit[me.stage] += overlap
            return now, me


@dataclass
class _Task:
    task_id: str
    app: AppDef
    input_size: int
    seed: int
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
    frames: dict[str, Any] = field(default_factory=dict)  # device -> the clip there
    frames_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def app_id(self) -> str:
        return self.app.app_id


@dataclass
class _Done:
    """A worker's report to the dispatcher."""

    task: _Task
    stage: Stage
    unit_id: str
    lane: int
    start: float
    end: float
    run: _Run | None
    output: Any = None
    digest: str | None = None
    error: BaseException | None = None


# ---------------------------------------------------------------------------------- executor
class NodeExecutor:
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
        self.settings = settings or ExecutorSettings.from_env()
        if costs is None:
            from workload.estimates import CostModel
            costs = CostModel()
        self.costs = costs
        self.scheduler = scheduler or make_node_scheduler(self.settings.scheduler, costs)
        self._fallback = FcfsScheduler(costs)
        self.units: list[ComputingUnit] = discover_units(self.settings)
        self._unit_by_id = {u.unit_id: u for u in self.units}
        self.telemetry = NodeTelemetry()
        self._has_gpu = any(u.kind == "gpu" for u in self.units)
        self._t0 = time.perf_counter()
        self._epoch0_ms = time.time() * 1000.0

        # Workers: one single-thread pool per CPU unit, one per stream lane of each GPU.
        self._lanes: dict[str, list[tuple[concurrent.futures.ThreadPoolExecutor, Any]]] = {}
        for unit in self.units:
            name = f"{self.settings.node_id}-{unit.unit_id.replace(':', '')}"
            if unit.kind == "cpu":
                pool = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix=name, initializer=_cpu_worker_init)
                self._lanes[unit.unit_id] = [(pool, None)]
            else:
                index = int(unit.unit_id.split(":")[1])
                self._lanes[unit.unit_id] = [
                    (concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"{name}s{k}"),
                     torch.cuda.Stream(device=index)) for k in range(unit.capacity)]
        self._lane_busy = {uid: [False] * len(lanes) for uid, lanes in self._lanes.items()}
        self._unit_running: dict[str, list[tuple[str, float]]] = {u.unit_id: [] for u in self.units}

        # Dispatcher state (only the dispatcher thread touches it).
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._tasks: dict[str, _Task] = {}
        self._ready: dict[tuple[str, str], tuple[_Task, Stage]] = {}
        self._tracker = _CoRunTracker()
        self._alone: dict[tuple[str, str], list[float]] = {}   # (stage, kind) -> [sum, n, seen]
        self._learned: dict[tuple[str, tuple[str, ...], str], list[float]] = {}
        self._learn_lock = threading.Lock()
        self._warned: set[str] = set()

        # Counters (read by snapshot() from any thread).
        self._count_lock = threading.Lock()
        self._queued = 0
        self._executing = 0
        self._completed = 0
        self._failed = 0
        self._stages_run = 0

        self._slots = threading.BoundedSemaphore(self.settings.max_in_flight)
        self._close_lock = threading.Lock()
        self._closed = False
        self._dispatcher = threading.Thread(target=self._loop, daemon=True,
                                            name=f"{self.settings.node_id}-dispatcher")
        self._dispatcher.start()

    # ------------------------------------------------------------------ public API
    def submit(self, task_id: str, app_id: str,
               input_size: int) -> concurrent.futures.Future[TaskOutcome]:
        """Accept a task (waits while ``max_in_flight`` tasks are in flight); the future
        resolves to its :class:`TaskOutcome` (``FAILED`` with an error, never an exception).
        Raises ``RuntimeError`` only if the executor is closed."""
        return self._submit(task_id, app_id, input_size, block=True)

    async def run_task(self, task_id: str, app_id: str, input_size: int) -> TaskOutcome:
        """:meth:`submit` for asyncio: waits for a slot off the event loop, then for the
        outcome. Cancelling the awaiting coroutine cancels the task's remaining stages."""
        future = self._submit(task_id, app_id, input_size, block=False)
        if future is None:  # every slot taken: wait for one in a thread, not on the loop
            future = await asyncio.to_thread(self.submit, task_id, app_id, input_size)
        return await asyncio.wrap_future(future)

    def snapshot(self) -> dict:
        """The node's state for the router's feedback: counts and utilisations in [0, 1]."""
        sample = self.telemetry.sample()
        with self._count_lock:
            counts = {"in_flight": self._executing, "queue_depth": self._queued,
                      "completed": self._completed, "failed": self._failed,
                      "stages_run": self._stages_run}
        return {"node_id": self.settings.node_id, **counts,
                "cpu_util": sample["cpu_util"], "host_mem_util": sample["host_mem_util"],
                "gpu_util": sample["gpu_util"], "gpu_mem_util": sample["gpu_mem_util"]}

    def learned_slowdowns(self) -> dict:
        """Measured co-execution: ``{(stage, partner types, unit kind): {"mean_rate",
        "slowdown", "count"}}``; rate = alone time / elapsed (1 = no slowdown), slowdown =
        1 / mean rate. Partners are the stage types that overlapped at least
        :data:`MIN_OVERLAP_FRACTION` of the stage's time anywhere on the node."""
        with self._learn_lock:
            return {key: {"mean_rate": total / n, "slowdown": n / total if total else float("inf"),
                          "count": int(n)}
                    for key, (total, n) in self._learned.items()}

    def close(self) -> None:
        """Stop accepting tasks, finish the ones in flight, stop the threads. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self._inbox.put(("close", None))
        self._dispatcher.join()
        for lanes in self._lanes.values():
            for pool, _ in lanes:
                pool.shutdown(wait=True)
        self.telemetry.close()

    def __enter__(self) -> NodeExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"NodeExecutor(node_id={self.settings.node_id!r}, scheduler="
                f"{getattr(self.scheduler, 'name', type(self.scheduler).__name__)!r}, "
                f"units={[u.unit_id for u in self.units]})")

    # ------------------------------------------------------------------ admission
    def _now_ms(self, perf: float | None = None) -> int:
        perf = time.perf_counter() if perf is None else perf
        return int(self._epoch0_ms + (perf - self._t0) * 1000.0)

    def _failed_now(self, task_id: str, app_id: str, error: str) -> concurrent.futures.Future:
        now = self._now_ms()
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result(TaskOutcome(str(task_id), str(app_id), self.settings.node_id, "FAILED",
                                      now, now, 0.0, 0.0, [], "", error))
        with self._count_lock:
            self._failed += 1
        return future

    def _submit(self, task_id, app_id, input_size, block: bool):
        if app_id not in APPLICATIONS:
            return self._failed_now(task_id, app_id, f"unknown application {app_id!r}; known: "
                                    f"{', '.join(sorted(APPLICATIONS))}")
        if isinstance(input_size, bool) or not isinstance(input_size, int) or input_size < 1:
            return self._failed_now(task_id, app_id, "input_size must be a positive integer "
                                    f"(pixels of the clip), got {input_size!r}")
        if self._closed:
            raise RuntimeError(f"executor {self.settings.node_id!r} is closed")
        if not self._slots.acquire(blocking=block):
            return None
        app = APPLICATIONS[app_id]
        seed = task_seed(str(task_id)) if self.settings.seed_from_task_id else 0
        task = _Task(str(task_id), app, int(input_size), seed, concurrent.futures.Future(),
                     time.perf_counter(), {s.name for s in app.stages})
        with self._close_lock:
            if self._closed:
                self._slots.release()
                raise RuntimeError(f"executor {self.settings.node_id!r} is closed")
            with self._count_lock:
                self._queued += 1
            self._inbox.put(("task", task))
        return task.future

    # ------------------------------------------------------------------ dispatcher
    def _loop(self) -> None:
        closing, last_sweep = False, 0.0
        while True:
            try:
                events = [self._inbox.get(timeout=_IDLE_TICK_S)]
            except queue.Empty:
                events = []
            while True:  # take everything that arrived: one scheduling pass for all of it
                try:
                    events.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            try:
                for kind, payload in events:
                    if kind == "task":
                        self._admit(payload)
                    elif kind == "done":
                        self._finish_stage(payload)
                    elif kind == "close":
                        closing = True
                if time.perf_counter() - last_sweep >= _CANCEL_SWEEP_S:
                    last_sweep = time.perf_counter()
                    self._drop_cancelled()
                self._schedule()
            except Exception as exc:  # a bug here must fail tasks, not hang them
                log.exception("executor %s: dispatcher error", self.settings.node_id)
                for task in list(self._tasks.values()):
                    self._fail(task, f"executor error: {type(exc).__name__}: {exc}")
            if closing and not self._tasks:
                return

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

    def _drop_cancelled(self) -> None:
        for task in list(self._tasks.values()):
            if task.future.cancelled() and task.error is None:
                self._fail(task, "cancelled by the caller")

    def _unit_views(self, now_s: float) -> list[ComputingUnit]:
        gpus = self.telemetry.sample()["gpus"] if self._has_gpu else []
        views = []
        for unit in self.units:
            running = self._unit_running[unit.unit_id]
            free_at = max([now_s] + [end for _, end in running])
            changes: dict[str, Any] = {"running": tuple(s for s, _ in running),
                                       "free_at_s": free_at}
            if unit.kind == "gpu":
                index = int(unit.unit_id.split(":")[1])
                # NVML rows are this node's visible GPUs in CUDA's order (one per torch index).
                row = gpus[index] if index < len(gpus) else {}
                changes["utilisation"] = row.get("util", 1.0 if running else 0.0)
                changes["memory_util"] = row.get("mem_util", 0.0)
            else:
                changes["utilisation"] = 1.0 if running else 0.0
            views.append(dataclasses.replace(unit, **changes))
        return views

    def _schedule(self) -> None:
        if not self._ready:
            return
        now_s = time.perf_counter() - self._t0
        units = self._unit_views(now_s)
        if not any(u.has_room for u in units):
            return
        ready = [stage for _, stage in self._ready.values()]
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
        for assignment in assignments:
            self._hand_off(assignment, now_s)

    def _hand_off(self, assignment: Assignment, now_s: float) -> None:
        stage = assignment.stage
        task, _ = self._ready.pop((stage.task_id, stage.stage))
        task.ready.discard(stage.stage)
        task.running.add(stage.stage)
        task.attempts[stage.stage] += 1
        if task.started_s is None:
            task.started_s = time.perf_counter()
            with self._count_lock:
                self._queued -= 1
                self._executing += 1
        unit = self._unit_by_id[assignment.unit_id]
        lane = self._lane_busy[unit.unit_id].index(False)
        self._lane_busy[unit.unit_id][lane] = True
        estimate_s = self._alone_ms(stage.stage, stage.input_size, unit) / 1000.0
        self._unit_running[unit.unit_id].append((stage.stage, now_s + estimate_s))
        pool, stream = self._lanes[unit.unit_id][lane]
        pool.submit(self._run_stage, task, stage, unit, lane, stream)

    # ------------------------------------------------------------------ workers
    def _frames(self, task: _Task, device: str, unit_id: str, stream):
        """The task's clip on ``device``, made once (the first stage to need it makes it;
        others of the same task wait for it). Making it is tracked as a co-runner
        (:data:`FRAMES`): it loads a core like a stage does."""
        with task.frames_lock:
            if "cpu" not in task.frames:
                from workload.apps.registry import task_frames
                run_id, _ = self._tracker.begin(FRAMES, unit_id)
                try:
                    task.frames["cpu"] = task_frames(task.app_id, task.input_size, task.seed)
                finally:
                    self._tracker.end(run_id)
            if device not in task.frames:
                task.frames[device] = task.frames["cpu"].to(device)
                if stream is not None:  # other streams will read it: the copy must be done
                    stream.synchronize()
            return task.frames[device]

    def _run_stage(self, task: _Task, stage: Stage, unit: ComputingUnit, lane: int,
                   stream) -> None:
        """Worker thread: run one stage's operator and report to the dispatcher. Never raises."""
        from workload.apps.devices import to_device
        from workload.apps.registry import run_stage

        torch = self._torch
        device = "cpu" if unit.kind == "cpu" else f"cuda:{unit.unit_id.split(':')[1]}"
        run_id, start, end, run = None, 0.0, 0.0, None
        output, digest, error = None, None, None
        try:
            with (torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()):
                frames = self._frames(task, device, unit.unit_id, stream)
                deps = task.app.stage(stage.stage).deps
                inputs = {d: to_device(task.outputs[d], device) for d in deps}
                run_id, start = self._tracker.begin(stage.stage, unit.unit_id)
                for _ in range(self.settings.repeats):
                    output = run_stage(stage.stage, frames, inputs)
                if stream is not None:
                    stream.synchronize()  # GPU work is asynchronous: time it to its end
        except Exception as exc:  # reported, retried or failed by the dispatcher
            error = exc
        finally:
            if run_id is not None:
                end, run = self._tracker.end(run_id)
        if error is None and stage.stage in _sinks(task.app):
            try:
                digest = output_digest(output)
            except Exception as exc:  # noqa: BLE001
                error = exc
        self._inbox.put(("done", _Done(task, stage, unit.unit_id, lane, start, end, run,
                                       output, digest, error)))

    # ------------------------------------------------------------------ completion
    def _finish_stage(self, done: _Done) -> None:
        task, name, unit = done.task, done.stage.stage, self._unit_by_id[done.unit_id]
        self._lane_busy[unit.unit_id][done.lane] = False
        running = self._unit_running[unit.unit_id]
        for i, (stage_type, _) in enumerate(running):
            if stage_type == name:
                del running[i]
                break
        task.running.discard(name)
        if done.run is not None:
            self._learn(done, unit)
        if task.error is not None:  # failed or cancelled meanwhile: drop the result
            if not task.running:
                self._complete(task)
            return
        if done.error is not None:
            self._stage_failed(task, done, unit)
            return
        task.outputs[name] = done.output
        task.done.add(name)
        task.records[name] = StageRecord(name, unit.unit_id, self._now_ms(done.start),
                                         self._now_ms(done.end), task.attempts[name])
        if done.digest is not None:
            task.sink_digests[name] = done.digest
        with self._count_lock:
            self._stages_run += 1
        if len(task.done) == len(task.app.stages):
            self._complete(task)
        else:
            self._release_ready(task)

    def _stage_failed(self, task: _Task, done: _Done, unit: ComputingUnit) -> None:
        name, exc = done.stage.stage, done.error
        oom = unit.kind == "gpu" and _is_cuda_oom(exc)
        if oom:
            self._torch.cuda.empty_cache()
            partners = set(done.run.unit) if done.run is not None else set()
            if len(partners) == 1:  # it could not co-run with that partner: rate 0
                self._observe_corun(name, partners.pop(), unit.model, 0.0)
        attempts = task.attempts[name]
        if attempts < self.settings.max_attempts:
            log.info("executor %s: %s of %s failed on %s (%s), retrying",
                     self.settings.node_id, name, task.task_id, unit.unit_id, exc)
            stage = dataclasses.replace(done.stage, gpu_capable=False) if oom else done.stage
            task.ready.add(name)  # keeps its ready_at_s: it stays at its place in line
            self._ready[(task.task_id, name)] = (task, stage)
            return
        self._fail(task, f"stage {name!r} failed after {attempts} attempt(s), last on "
                         f"{unit.unit_id}: {type(exc).__name__}: {exc}")

    def _fail(self, task: _Task, error: str) -> None:
        if task.error is None:
            task.error = error
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
        digest = ""
        if ok:
            h = hashlib.blake2b(digest_size=16)
            for name in (s.name for s in task.app.stages if s.name in task.sink_digests):
                h.update(name.encode() + task.sink_digests[name].encode())
            digest = h.hexdigest()
        outcome = TaskOutcome(
            task.task_id, task.app_id, self.settings.node_id, "OK" if ok else "FAILED",
            self._now_ms(started), self._now_ms(end), (started - task.accepted_s) * 1000.0,
            (end - started) * 1000.0,
            sorted(task.records.values(), key=lambda r: (r.started_at_ms, r.stage)),
            digest, task.error)
        task.outputs.clear()  # free the tensors now, not when the caller drops the outcome
        task.frames.clear()
        with self._count_lock:
            if task.started_s is None:
                self._queued -= 1
            else:
                self._executing -= 1
            if ok:
                self._completed += 1
            else:
                self._failed += 1
        self._slots.release()
        if not task.future.cancelled():
            try:
                task.future.set_result(outcome)
            except concurrent.futures.InvalidStateError:  # cancelled in between
                pass

    # ------------------------------------------------------------------ measured interference
    def _estimate_ms(self, stage: str, input_size: int, unit: ComputingUnit) -> float:
        """The cost model's alone time on this kind of unit, times the work multiplier."""
        estimate = None
        try:
            if unit.kind == "gpu":
                estimate = self.costs.gpu_ms(stage, input_size, unit.model)
            if estimate is None:
                estimate = self.costs.cpu_ms(stage, input_size, unit.speed)
        except KeyError:
            estimate = 1.0
        return max(float(estimate), 1e-3) * self.settings.repeats

    def _alone_ms(self, stage: str, input_size: int, unit: ComputingUnit) -> float:
        """Alone time: the estimate scaled by the mean measured-alone / estimate ratio."""
        total, n, _ = self._alone.get((stage, unit.kind), (0.0, 0, 0))
        return self._estimate_ms(stage, input_size, unit) * (total / n if n else 1.0)

    def _learn(self, done: _Done, unit: ComputingUnit) -> None:
        run, name = done.run, done.stage.stage
        elapsed_ms = (done.end - done.start) * 1000.0
        if done.error is not None or elapsed_ms <= 0:
            return
        key = (name, unit.kind)
        if not run.node:  # ran with nothing else on the node: an alone sample
            stats = self._alone.setdefault(key, [0.0, 0, 0])
            stats[2] += 1
            if stats[2] > 1:  # the first run of a stage pays one-off costs (lazy init, caches)
                stats[0] += elapsed_ms / self._estimate_ms(name, done.stage.input_size, unit)
                stats[1] += 1
            return
        floor = MIN_OVERLAP_FRACTION * (done.end - done.start)
        partners = tuple(sorted(t for t, s in run.node.items() if s >= floor))
        if not partners:
            return  # overlapped, but too little to call it a co-run or alone
        rate = self._alone_ms(name, done.stage.input_size, unit) / elapsed_ms
        with self._learn_lock:
            stats = self._learned.setdefault((name, partners, unit.kind), [0.0, 0])
            stats[0] += rate
            stats[1] += 1
        if unit.kind == "gpu" and self._alone.get(key, (0, 0))[1]:
            # The scheduler learns from measured baselines only: the cost model's GPU times are
            # K80-relative guesses, far from a given GPU's real speed.
            same_gpu = [t for t, s in run.unit.items() if s >= floor]
            if len(same_gpu) == 1:
                self._observe_corun(name, same_gpu[0], unit.model, rate)

    def _observe_corun(self, stage: str, partner: str, gpu_model: str, rate: float) -> None:
        try:
            self.scheduler.observe_corun(stage, partner, gpu_model, min(1.0, max(0.0, rate)))
        except Exception as exc:  # noqa: BLE001 - learning is best effort, running is not
            self._warn_once(f"observe:{type(exc).__name__}",
                            f"scheduler {self.scheduler!r} could not learn a co-run ({exc})")

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("executor %s: %s", self.settings.node_id, message)


_SINKS: dict[str, frozenset[str]] = {}


def _sinks(app: AppDef) -> frozenset[str]:
    """The stages no other stage of the app depends on: the task's results."""
    if app.app_id not in _SINKS:
        used = {d for s in app.stages for d in s.deps}
        _SINKS[app.app_id] = frozenset(s.name for s in app.stages if s.name not in used)
    return _SINKS[app.app_id]
