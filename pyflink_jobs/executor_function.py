"""The executors inside Flink: one AsyncFunction per pinned executor instance, plus feedback.

Every executor function is applied with ``AsyncDataStream.unordered_wait``: several tasks are in
flight at once, so the node's co-scheduler has concurrent stages to interleave and batch, and
Flink's async operator keeps in-flight tasks in its checkpoints (results stay exactly-once).

- :class:`NodeExecutorFunction`: streamplace-native TaskEvents through the built-in
  video-analytics executor (:class:`interference.executor.NodeExecutor`) -> TaskResult bytes.
  A TaskEvent's ``attributes`` give the task's deadline and priority
  (:func:`workload.task_attributes.task_slo_from_attributes`), which the executor's queues
  honour; invalid ones make the task's result ``FAILED`` with the reason, as bad sizes do.
- :class:`ChecksumExecutor`: trivial work (a checksum), to measure the hook's own overhead.
- The user's own operator runs in :class:`pyflink_jobs.operator_function.OperatorExecutorFunction`,
  built on :class:`ExecutorFunctionBase` here.

Each instance publishes its node's feedback (:class:`pyflink_jobs.feedback.FeedbackPublisher`).

**Timeouts.** PyFlink (2.2) does not cancel ``async_invoke`` when the async timeout fires: its
timer thread calls ``timeout(value)``, emits what that returns, and the coroutine runs on with
its result ignored (``pyflink/fn_execution/datastream/process/async_function/operation.py``:
``ResultHandler._timer_triggered`` calls the timeout function only, and
``AsyncFunctionRunner.run_async`` drops the future ``run_coroutine_threadsafe`` returns). So the
executor functions cancel it themselves: each keeps its records' calls in flight in an
:class:`~interference.executor.cancel.InFlightCalls` (keyed by task id and record object), and
``timeout`` cancels the record's call there, which cancels its task in the executor (stages not
started never start, a running built-in stage stops at its next check; the lane and the
admission slot are freed). ``timeout`` still returns the FAILED result (dead letter) at once.

Example (the hook builds this for you)::

    AsyncDataStream.unordered_wait(node_stream, NodeExecutorFunction("tm_a", settings),
                                   Time.seconds(300), capacity=8)
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass

from pyflink_jobs.feedback import FeedbackPublisher, FinishedTask
from pyflink_jobs.flink_ops import KAFKA_LOGGER, CountGauges, hook_metrics, subtask_index
from pyflink_jobs.output_fit import OutputFit
from pyflink_jobs.routed import RoutedRecord
from workload.limits import MEMORY_FRACTION
from workload.task_attributes import task_slo_from_attributes

__all__ = ["ExecutorFunctionSettings", "ExecutorFeedback", "ExecutorFunctionBase",
           "NodeExecutorFunction",
           "ChecksumExecutor", "result_record", "unwrap"]

log = logging.getLogger(__name__)

try:  # The module must import without pyflink too (docs, unit tests of the helpers).
    from pyflink.datastream import AsyncFunction
except ImportError:  # pragma: no cover
    AsyncFunction = object  # type: ignore[misc,assignment]


@dataclass
class ExecutorFunctionSettings:
    """What one executor instance needs (pickled to the Python workers).

    bootstrap_servers / feedback_topic: where NodeFeedback goes.
    scheduler: the node scheduler (``interference.schedulers``; IAWP by default).
    feedback_interval_s: how often feedback is sent.
    cpu_workers: CPU units of this instance; 0 = the node's cores / its executor instances.
    instances_on_node: executor instances the plan gives this node.
    batching: the user operator's stages are batched across in-flight records (off: one input
        per call, the ablation).
    call_groups: its per-record stages take several records' ready inputs in one call
        (``interference.executor.batching``; off: one input per call).
    node_memory_bytes / task_memory_fraction / limit_address_space: the executor's per-task
        memory budget and optional ``RLIMIT_AS`` (``interference.executor.memory``; 0 = the
        memory this process can have, 0.5 = half of it per task, off).
    output_fit: the check of each operator output against the job's ``output_type``
        (:class:`pyflink_jobs.output_fit.OutputFit`; None: none): an output that does not fit
        (None where the type cannot carry it, a str for ``Types.LONG()``) makes its record a
        dead letter instead of failing the job in PyFlink's output coder or in Java.
    max_attempts: calls of the user's operator per record before it is a dead letter (1: as
        a plain map, which calls once; more re-run an operator that raised, side effects too).
    first_instance / operator_instances: this operator's instances are numbered
        ``first_instance + subtask index`` of ``operator_instances`` in the runtime context the
        user's operator sees (all its instances in the job: every node's executors and
        colocated routers; ``pyflink_jobs.operator_context``); 0 instances = Flink's own.
    """

    bootstrap_servers: str = "127.0.0.1:9092"
    feedback_topic: str = "feedback"
    scheduler: str = "iawp"
    feedback_interval_s: float = 0.5
    cpu_workers: int = 0
    instances_on_node: int = 1
    batching: bool = True
    call_groups: bool = True
    node_memory_bytes: int = 0
    task_memory_fraction: float = MEMORY_FRACTION
    limit_address_space: bool = False
    output_fit: OutputFit | None = None
    max_attempts: int = 1
    first_instance: int = 0
    operator_instances: int = 0

    def user_context(self, runtime_context):
        """The runtime context the user's operator is opened with (see the fields above)."""
        from pyflink_jobs.operator_context import operator_context
        return operator_context(runtime_context, self.first_instance, self.operator_instances)

    def workers(self) -> int:
        """CPU worker threads for one instance on this node."""
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        return self.cpu_workers or max(1, cores // max(1, self.instances_on_node))

    def limits(self) -> dict:
        """The executor settings' memory fields from these."""
        return {"node_memory_bytes": self.node_memory_bytes,
                "task_memory_fraction": self.task_memory_fraction,
                "limit_address_space": self.limit_address_space}


def unwrap(value) -> tuple[RoutedRecord | None, object]:
    """(routed record or None, the task) from what reaches an executor: a RoutedRecord, a
    ``(node, RoutedRecord)`` pair from the REST-aware partitioner, or a bare task (a job
    without the router)."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], RoutedRecord):
        value = value[1]
    if isinstance(value, RoutedRecord):
        return value, value.record
    return None, value


def result_record(event: dict, outcome, node_id: str, routed_to: str = "") -> dict:
    """A TaskResult (dict for the Avro codec) from a TaskEvent and the executor's outcome;
    ``output`` is the outcome's answer as sorted-key JSON (None when it has none)."""
    output = getattr(outcome, "output", None)
    return {
        "task_id": event["task_id"], "app_id": event["app_id"], "node_id": node_id,
        "status": outcome.status, "submitted_at_ms": int(event.get("submitted_at_ms") or 0),
        "started_at_ms": int(outcome.started_at_ms), "finished_at_ms": int(outcome.finished_at_ms),
        "stage_timings": [{"stage": s.stage, "unit": s.unit, "started_at_ms": int(s.started_at_ms),
                           "finished_at_ms": int(s.finished_at_ms)} for s in outcome.stages],
        "output_digest": outcome.output_digest or "", "error": outcome.error,
        "routed_to": routed_to,
        "output": json.dumps(output, sort_keys=True) if output is not None else None}


class ExecutorFeedback:
    """What every executor instance does besides its work: know its node, publish feedback,
    count results, and say when a record reached the wrong node.

    ``planned_node`` is the TaskManager this instance is pinned to; the node id written into
    results and feedback is the one the TaskManager really has (``STREAMPLACE_NODE_ID``), and a
    mismatch is counted in the ``misplaced`` metric rather than hidden."""

    #: Added to the subtask index to number this instance's feedback: reporters of one node
    #: in different operators (its executor, a colocated router) must not share a number, or
    #: their reports of the same millisecond would share a sequence (dropped as duplicates).
    feedback_instance_base = 0

    def __init__(self, planned_node: str, settings: ExecutorFunctionSettings | None = None):
        self.planned_node = planned_node
        self.settings = settings or ExecutorFunctionSettings()
        self.node_id = planned_node

    def _open_feedback(self, runtime_context, snapshot) -> None:
        from confluent_kafka import Producer
        self.node_id = os.environ.get("STREAMPLACE_NODE_ID") or self.planned_node or "unknown"
        instance = self.feedback_instance_base + subtask_index(runtime_context)
        s = self.settings
        producer = Producer({"bootstrap.servers": s.bootstrap_servers,
                             # librdkafka's own lines to the worker's log, not its stderr
                             "logger": logging.getLogger(KAFKA_LOGGER),
                             # served on the publisher's polls, after it is set below
                             "error_cb": lambda err: self.feedback.client_error(err),
                             "linger.ms": 20, "compression.type": "lz4",
                             "client.id": f"streamplace-feedback-{self.node_id}-{instance}"})
        self.feedback = FeedbackPublisher(self.node_id, snapshot, producer, s.feedback_topic,
                                          s.feedback_interval_s, instance)
        self.feedback.start()
        # streamplace_misrouted: tasks the router meant for another node (must stay 0).
        self._counts = CountGauges(hook_metrics(runtime_context), [
            "streamplace_tasks_ok", "streamplace_tasks_failed", "streamplace_misplaced",
            "streamplace_misrouted"])
        if self.planned_node and self.node_id != self.planned_node:
            log.warning("executor planned for %s runs on %s", self.planned_node, self.node_id)
            self._counts.inc("streamplace_misplaced")

    def _check_routed(self, routed: RoutedRecord | None) -> None:
        if routed is not None and routed.node not in (self.node_id, self.planned_node):
            self._counts.inc("streamplace_misrouted")

    def _count(self, ok: bool) -> None:
        self._counts.inc("streamplace_tasks_ok" if ok else "streamplace_tasks_failed")

    def close(self):
        # the executor (and the user's operator's close) first: the feedback's close may wait
        # seconds for an unreachable broker, and a local job's teardown does not wait that
        # long, so the user's close came last and was cut off
        executor = getattr(self, "executor", None)
        try:
            if executor is not None:
                executor.close()
        finally:
            feedback = getattr(self, "feedback", None)
            if feedback is not None:
                feedback.close()


class ExecutorFunctionBase(ExecutorFeedback, AsyncFunction):
    """:class:`ExecutorFeedback` for an async executor function, whose ``timeout`` cancels the
    record's work (see the module doc)."""

    def in_flight(self):
        """The calls in flight (an ``InFlightCalls``, made on first use: not pickled)."""
        calls = self.__dict__.get("_in_flight")
        if calls is None:
            from interference.executor.cancel import InFlightCalls
            calls = self.__dict__.setdefault("_in_flight", InFlightCalls())
        return calls

    @staticmethod
    def call_key(value, task_id) -> tuple:
        """The key of a record's call: its task id and the record object PyFlink passes to
        both ``async_invoke`` and ``timeout``."""
        return (str(task_id), id(value))

    def cancel_call(self, value, task_id) -> bool:
        """Cancel the call of ``value`` (from ``timeout``); whether one was in flight."""
        return self.in_flight().cancel(self.call_key(value, task_id))

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_in_flight", None)
        return state


class NodeExecutorFunction(ExecutorFunctionBase):
    """TaskEvent (dict, or routed) -> [TaskResult bytes]: runs the task's stage DAG here."""

    def open(self, runtime_context):
        from interference.executor import ExecutorSettings, NodeExecutor
        from workload.codec import encode
        self._encode = encode
        node = os.environ.get("STREAMPLACE_NODE_ID") or self.planned_node or "unknown"
        self.executor = NodeExecutor(ExecutorSettings.from_env(
            node_id=node, scheduler=self.settings.scheduler,
            cpu_workers=self.settings.workers(), **self.settings.limits()))
        self.in_flight()
        self._open_feedback(runtime_context, self.executor.snapshot)

    async def async_invoke(self, value):
        routed, event = unwrap(value)
        self._check_routed(routed)
        try:
            slo = task_slo_from_attributes(event.get("attributes"))
        except ValueError as exc:  # a bad record is this task's FAILED result, not a crash
            slo = None
            outcome = self.executor.refuse(event["task_id"], event["app_id"],
                                           f"invalid task attributes: {exc}").result()
        else:
            outcome = await self.in_flight().run(
                self.call_key(value, event["task_id"]),
                self.executor.run_task(event["task_id"], event["app_id"],
                                       int(event["input_size"]), payload=event.get("payload"),
                                       slo=slo))
        self._count(outcome.status == "OK")
        encoded = self._encode("TaskResult", result_record(
            event, outcome, self.node_id, routed.node if routed else ""))
        self.feedback.task_finished(FinishedTask.from_task_outcome(event, outcome, slo), routed,
                                    bytes_in=routed.raw_bytes if routed else 0,
                                    bytes_out=len(encoded))
        return [encoded]

    def timeout(self, value):
        _, event = unwrap(value)
        # Stop its work here: PyFlink does not cancel async_invoke (see the module doc).
        self.cancel_call(value, event["task_id"])
        # Reported, never dropped: a FAILED result says the task ran out of time here.
        now = int(time.time() * 1000)
        self._count(False)
        digest = hashlib.sha256(event["task_id"].encode()).hexdigest()[:16]
        return [self._encode("TaskResult", {
            "task_id": event["task_id"], "app_id": event["app_id"], "node_id": self.node_id,
            "status": "FAILED", "submitted_at_ms": int(event.get("submitted_at_ms") or 0),
            "started_at_ms": now, "finished_at_ms": now, "stage_timings": [],
            "output_digest": digest, "error": "timed out in the executor (async timeout)"})]


class ChecksumExecutor(AsyncFunction):
    """Trivial work: a SHA-256 checksum over a deterministic buffer of the task's
    ``input_size`` bytes (capped), done ``NodeSettings.repeats_for(app_id)`` times (the
    TaskManager's work multipliers), in a thread so
    several tasks are in flight at once (hashlib releases the GIL on large buffers)."""

    MAX_BYTES = 1 << 20

    def __init__(self):
        self.node_id = "unknown"
        self.settings = None   # NodeSettings from the TaskManager's environment (open)

    def open(self, runtime_context):
        from workload.codec import encode
        self._encode = encode
        self.node_id = os.environ.get("STREAMPLACE_NODE_ID", "unknown")
        from interference.executor.settings import NodeSettings
        self.settings = NodeSettings.from_env()

    def _work(self, event: dict) -> str:
        size = max(1, min(int(event.get("input_size") or 1), self.MAX_BYTES))
        seed = event["task_id"].encode()
        block = (seed * (size // max(1, len(seed)) + 1))[:size]
        digest = b""
        repeats = self.settings.repeats_for(event.get("app_id"))
        for _ in range(repeats):
            digest = hashlib.sha256(block + digest).digest()
        return digest.hex()[:16]

    async def async_invoke(self, value):
        routed, event = unwrap(value)
        started = int(time.time() * 1000)
        loop = asyncio.get_running_loop()
        digest = await loop.run_in_executor(None, self._work, event)
        finished = int(time.time() * 1000)
        return [self._encode("TaskResult", {
            "task_id": event["task_id"], "app_id": event["app_id"], "node_id": self.node_id,
            "status": "OK", "submitted_at_ms": int(event.get("submitted_at_ms") or 0),
            "started_at_ms": started, "finished_at_ms": finished,
            "stage_timings": [{"stage": "checksum", "unit": "cpu:0",
                               "started_at_ms": started, "finished_at_ms": finished}],
            "output_digest": digest, "error": None,
            "routed_to": routed.node if routed else ""})]
