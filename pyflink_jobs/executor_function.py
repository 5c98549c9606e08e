"""The IAWP executor inside Flink: one AsyncFunction per pinned executor instance, plus feedback.

:class:`NodeExecutorFunction` wraps :class:`interference.executor.NodeExecutor` (the node's
co-scheduler running each task's stage DAG on CPU worker threads and GPU streams) in a PyFlink
``AsyncFunction``, applied with ``AsyncDataStream.unordered_wait``: several tasks are in flight at
once, so the co-scheduler has concurrent stages to interleave, and Flink's async operator keeps
in-flight tasks in its checkpoints (results stay exactly-once).

:class:`FeedbackPublisher` sends this node's NodeFeedback (per-task timings, utilisation of this
TaskManager's processes, GPU numbers from NVML, bytes in and out, queue depth) to the feedback
topic straight from the Python worker with a confluent-kafka producer, every
``feedback_interval_s``. Why not a Flink sink: feedback is telemetry that must reach the router
and the service within a fraction of a second, while an exactly-once sink only makes records
visible when a checkpoint completes; and routing it through another operator would add a Python
hop to every result. Feedback is at-least-once (a re-executed task reports again); every reader
de-duplicates by task id.

Example (the hook builds this for you)::

    AsyncDataStream.unordered_wait(node_stream, NodeExecutorFunction("tm_a", settings),
                                   Time.seconds(300), capacity=8)
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time

__all__ = ["NodeExecutorFunction", "FeedbackPublisher", "ExecutorFunctionSettings",
           "result_record", "CountGauges"]

log = logging.getLogger(__name__)

try:  # The module must import without pyflink too (docs, unit tests of the helpers).
    from pyflink.datastream import AsyncFunction
except ImportError:  # pragma: no cover
    AsyncFunction = object  # type: ignore[misc,assignment]


class CountGauges:
    """Cumulative counts exposed as Flink gauges.

    Why not ``metric_group.counter``: in PyFlink 2.2.1 (process mode) a Python counter reached
    REST as the largest increment of a single bundle, not the running total (a router that sent
    1,384 tasks to a node in one burst and more later kept showing 1,384). A gauge reports the
    value we keep here, so REST shows the true running count."""

    def __init__(self, metric_group, names):
        self.values = {name: 0 for name in names}
        for name in names:
            metric_group.gauge(name, lambda n=name: int(self.values[n]))

    def inc(self, name: str, n: int = 1) -> None:
        self.values[name] += n


class ExecutorFunctionSettings:
    """What one executor instance needs (plain attributes: the object is pickled to workers)."""

    def __init__(self, bootstrap_servers: str = "127.0.0.1:9092", feedback_topic: str = "feedback",
                 scheduler: str = "iawp", feedback_interval_s: float = 0.5,
                 cpu_workers: int = 0, instances_on_node: int = 1):
        self.bootstrap_servers = bootstrap_servers
        self.feedback_topic = feedback_topic
        self.scheduler = scheduler
        self.feedback_interval_s = feedback_interval_s
        self.cpu_workers = cpu_workers          # 0: the node's cores / its executor instances
        self.instances_on_node = instances_on_node


def result_record(event: dict, outcome, node_id: str) -> dict:
    """A TaskResult (dict for the Avro codec) from a TaskEvent and the executor's outcome."""
    return {
        "task_id": event["task_id"], "app_id": event["app_id"], "node_id": node_id,
        "status": outcome.status, "submitted_at_ms": int(event.get("submitted_at_ms") or 0),
        "started_at_ms": int(outcome.started_at_ms), "finished_at_ms": int(outcome.finished_at_ms),
        "stage_timings": [{"stage": s.stage, "unit": s.unit, "started_at_ms": int(s.started_at_ms),
                           "finished_at_ms": int(s.finished_at_ms)} for s in outcome.stages],
        "output_digest": outcome.output_digest or "", "error": outcome.error,
        "routed_to": event.get("_routed_to", "")}


class FeedbackPublisher:
    """Collects finished-task timings and sends NodeFeedback every ``interval_s``.

    ``producer`` is a confluent-kafka Producer (``None``: records are only built, for tests and
    for callers that send them elsewhere). ``snapshot`` returns the executor's numbers
    (:meth:`NodeExecutor.snapshot`). Sequence numbers grow per instance and are ordered in time
    across the instances of a node (``emitted_at_ms * 1000 + instance``)."""

    def __init__(self, node_id: str, snapshot, producer=None, topic: str = "feedback",
                 interval_s: float = 0.5, instance: int = 0, clock=time.time):
        self.node_id = node_id
        self.snapshot = snapshot
        self.producer = producer
        self.topic = topic
        self.interval_s = interval_s
        self.instance = instance
        self.clock = clock
        self._completed: list[dict] = []
        # per completed timing, what its routing decision saw: (queue, backlog ms, speed)
        self._routed: list[tuple[int, float, float]] = []
        self._lock = threading.Lock()
        self._bytes_in = self._bytes_out = 0
        self._last_emit = clock()
        self._last_sequence = 0
        self.sent = 0
        self.delivery_errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def task_finished(self, event: dict, outcome, bytes_in: int, bytes_out: int) -> None:
        """Count the task's bytes; report its timing only when a router placed it (stamped
        ``_routed_at_ms``): the service learns placement from these timings, and a task that
        reached this node some other way (Flink's own partitioning) says nothing about a
        placement decision, and its waiting upstream is not measured."""
        # Waiting counts from the router's decision when the router stamped it: time in the
        # network buffers and the async operator's queue is part of what the choice cost.
        queue_ms = float(outcome.queue_ms)
        routed_at = event.get("_routed_at_ms")
        if routed_at:
            queue_ms = max(queue_ms, float(outcome.finished_at_ms - routed_at) -
                           float(outcome.service_ms))
        timing = {"task_id": event["task_id"], "app_id": event["app_id"],
                  "input_size": int(event["input_size"]), "queue_ms": queue_ms,
                  "service_ms": float(outcome.service_ms),
                  "finished_at_ms": int(outcome.finished_at_ms),
                  # what the node's speed is measured by (placement.speed): service_ms also
                  # counts the waits between stages while other in-flight tasks held the units
                  "work_ms": float(sum(max(0, s.finished_at_ms - s.started_at_ms)
                                       for s in outcome.stages)) if outcome.stages else -1.0}
        with self._lock:
            if routed_at:
                self._completed.append(timing)
                self._routed.append((int(event.get("_routed_queue", -1)),
                                     float(event.get("_routed_backlog_ms", -1.0)),
                                     float(event.get("_routed_speed", -1.0))))
            self._bytes_in += bytes_in
            self._bytes_out += bytes_out

    def build_record(self) -> dict:
        """The next NodeFeedback (takes the timings collected so far)."""
        now = self.clock()
        with self._lock:
            completed, self._completed = self._completed, []
            routed, self._routed = self._routed, []
            bytes_in, bytes_out = self._bytes_in, self._bytes_out
            self._bytes_in = self._bytes_out = 0
        elapsed = max(1e-3, now - self._last_emit)
        self._last_emit = now
        snap = self.snapshot()
        emitted_ms = int(now * 1000)
        sequence = max(self._last_sequence + 1, emitted_ms * 1000 + self.instance)
        self._last_sequence = sequence
        return {"node_id": self.node_id, "emitted_at_ms": emitted_ms,
                "cpu_util": float(snap.get("cpu_util", 0.0)),
                "gpu_util": float(snap.get("gpu_util", 0.0)),
                "host_mem_util": float(snap.get("host_mem_util", 0.0)),
                "gpu_mem_util": float(snap.get("gpu_mem_util", 0.0)),
                "uplink_bytes_per_s": bytes_out / elapsed,
                "downlink_bytes_per_s": bytes_in / elapsed,
                "queue_depth": int(snap.get("queue_depth", 0)),
                "in_flight": int(snap.get("in_flight", 0)), "backpressure": 0.0,
                "completed": completed, "sequence": sequence,
                "routed_queue": [r[0] for r in routed],
                "routed_backlog_ms": [r[1] for r in routed],
                "routed_speed_factor": [r[2] for r in routed]}

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.delivery_errors += 1
            log.warning("feedback delivery failed: %s", err)

    def emit(self) -> dict:
        from workload.codec import encode
        record = self.build_record()
        if self.producer is not None:
            self.producer.produce(self.topic, key=self.node_id.encode(),
                                  value=encode("NodeFeedback", record), on_delivery=self._delivered)
            self.producer.poll(0)
            self.sent += 1
        return record

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="streamplace-feedback",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.emit()
            except Exception as exc:  # noqa: BLE001 - telemetry must never kill the executor
                log.warning("feedback not sent: %s", exc)

    def close(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        try:
            self.emit()  # what finished since the last report
        except Exception as exc:  # noqa: BLE001
            log.warning("final feedback not sent: %s", exc)
        if self.producer is not None:
            self.producer.flush(timeout_s)


class NodeExecutorFunction(AsyncFunction):
    """TaskEvent (dict) -> [TaskResult bytes]: runs the task's stage DAG on this node.

    ``planned_node`` is the TaskManager this instance is pinned to; the node id written into
    results and feedback is the one the TaskManager really has (``STREAMPLACE_NODE_ID``), and a
    mismatch is counted in the ``misplaced`` metric rather than hidden."""

    def __init__(self, planned_node: str, settings: ExecutorFunctionSettings | None = None):
        self.planned_node = planned_node
        self.settings = settings or ExecutorFunctionSettings()
        self.node_id = planned_node

    def open(self, runtime_context):
        from confluent_kafka import Producer

        from interference.executor import ExecutorSettings, NodeExecutor
        from workload.codec import encode
        self._encode = encode
        self.node_id = os.environ.get("STREAMPLACE_NODE_ID") or self.planned_node or "unknown"
        instance = runtime_context.get_index_of_this_subtask()
        settings = self.settings
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        workers = settings.cpu_workers or max(1, cores // max(1, settings.instances_on_node))
        self.executor = NodeExecutor(ExecutorSettings.from_env(
            node_id=self.node_id, scheduler=settings.scheduler, cpu_workers=workers))
        producer = Producer({"bootstrap.servers": settings.bootstrap_servers,
                             "linger.ms": 20, "compression.type": "lz4",
                             "client.id": f"streamplace-feedback-{self.node_id}-{instance}"})
        self.feedback = FeedbackPublisher(self.node_id, self.executor.snapshot, producer,
                                          settings.feedback_topic, settings.feedback_interval_s,
                                          instance)
        self.feedback.start()
        # streamplace_misrouted: tasks the router meant for another node (must stay 0).
        self._counts = CountGauges(runtime_context.get_metrics_group(), [
            "streamplace_tasks_ok", "streamplace_tasks_failed", "streamplace_misplaced",
            "streamplace_misrouted"])
        if self.planned_node and self.node_id != self.planned_node:
            log.warning("executor planned for %s runs on %s", self.planned_node, self.node_id)
            self._counts.inc("streamplace_misplaced")

    def close(self):
        feedback = getattr(self, "feedback", None)
        if feedback is not None:
            feedback.close()
        executor = getattr(self, "executor", None)
        if executor is not None:
            executor.close()

    async def async_invoke(self, value):
        if isinstance(value, tuple):  # (node, task) from the REST-aware partitioner
            value = value[1]
        routed_to = value.get("_routed_to")
        if routed_to and routed_to != self.node_id and routed_to != self.planned_node:
            self._counts.inc("streamplace_misrouted")
        outcome = await self.executor.run_task(value["task_id"], value["app_id"],
                                               int(value["input_size"]))
        self._counts.inc("streamplace_tasks_ok" if outcome.status == "OK"
                         else "streamplace_tasks_failed")
        encoded = self._encode("TaskResult", result_record(value, outcome, self.node_id))
        self.feedback.task_finished(value, outcome, bytes_in=int(value.get("_bytes", 0)),
                                    bytes_out=len(encoded))
        return [encoded]

    def timeout(self, value):
        if isinstance(value, tuple):
            value = value[1]
        # Reported, never dropped: a FAILED result says the task ran out of time here.
        now = int(time.time() * 1000)
        self._counts.inc("streamplace_tasks_failed")
        digest = hashlib.sha256(value["task_id"].encode()).hexdigest()[:16]
        return [self._encode("TaskResult", {
            "task_id": value["task_id"], "app_id": value["app_id"], "node_id": self.node_id,
            "status": "FAILED", "submitted_at_ms": int(value.get("submitted_at_ms") or 0),
            "started_at_ms": now, "finished_at_ms": now, "stage_timings": [],
            "output_digest": digest, "error": "timed out in the executor (async timeout)"})]
