"""Node feedback: what an executor tells the routers and the placement service.

:class:`FeedbackPublisher` sends this node's NodeFeedback (per-task timings, utilisation of this
TaskManager's processes, GPU numbers from NVML, bytes in and out, queue depth) to the feedback
topic straight from the Python worker with a confluent-kafka producer, every
``feedback_interval_s``. Why not a Flink sink: feedback is telemetry that must reach the router
and the service within a fraction of a second, while an exactly-once sink only makes records
visible when a checkpoint completes; and routing it through another operator would add a Python
hop to every result. Feedback is at-least-once (a re-executed task reports again); every reader
de-duplicates by task id.

Example::

    >>> publisher = FeedbackPublisher("tm_a", lambda: {"cpu_util": 0.5})
    >>> publisher.task_finished(FinishedTask("t1", "enrich", 120, 1.0, 9.0, 8.0, 1_000),
    ...                         routed=None, bytes_in=120, bytes_out=40)
    >>> publisher.build_record()["completed"]      # not placed by a router: no timing
    []
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from pyflink_jobs.routed import DecisionContext, RoutedRecord

__all__ = ["FeedbackPublisher", "FinishedTask", "stage_batches", "MAX_STAGE_BATCHES"]

#: Rows of batching telemetry per report: an operator with hundreds of stages reports its first.
MAX_STAGE_BATCHES = 64


def stage_batches(report: dict) -> list[dict]:
    """NodeFeedback ``stage_batches`` rows from an executor's ``batch_report()``
    (``{stage: {unit kind: {batch_size, batches, mean_inputs, p50_ms, p99_ms}}}``)."""
    import math

    def finite(value) -> float:
        value = float(value or 0.0)
        return value if math.isfinite(value) else 0.0
    rows = []
    for stage, kinds in sorted(report.items()):
        for kind, numbers in sorted(kinds.items()):
            rows.append({"stage": str(stage)[:200], "unit_kind": str(kind)[:16],
                         "batch_size": int(numbers.get("batch_size", 1)),
                         "batches": int(numbers.get("batches", 0)),
                         "mean_inputs": finite(numbers.get("mean_inputs")),
                         "p99_ms": finite(numbers.get("p99_ms"))})
    return rows[:MAX_STAGE_BATCHES]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FinishedTask:
    """One finished task's timing as the executor measured it (a NodeFeedback TaskTiming).

    work_ms: the time its stages really occupied the node's units (its share of each batch),
    what node speed is measured by (``placement.speed``); -1 when unknown."""

    task_id: str
    task_type: str
    task_size: int
    queue_ms: float
    service_ms: float
    work_ms: float
    finished_at_ms: int

    @classmethod
    def from_task_outcome(cls, event: dict, outcome) -> FinishedTask:
        """From a TaskEvent dict and the built-in executor's ``TaskOutcome``."""
        work = float(sum(max(0, s.finished_at_ms - s.started_at_ms) for s in outcome.stages)) \
            if outcome.stages else -1.0
        return cls(event["task_id"], event["app_id"], int(event["input_size"]),
                   float(outcome.queue_ms), float(outcome.service_ms), work,
                   int(outcome.finished_at_ms))

    def timing(self) -> dict:
        """The TaskTiming record of the NodeFeedback schema."""
        return {"task_id": self.task_id, "app_id": self.task_type,
                "input_size": int(self.task_size), "queue_ms": float(self.queue_ms),
                "service_ms": float(self.service_ms),
                "finished_at_ms": int(self.finished_at_ms), "work_ms": float(self.work_ms)}


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
        # per completed timing, what its routing decision saw
        self._routed: list[DecisionContext] = []
        self._lock = threading.Lock()
        self._bytes_in = self._bytes_out = 0
        self._last_emit = clock()
        self._last_sequence = 0
        self.sent = 0
        self.delivery_errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def task_finished(self, finished: FinishedTask, routed: RoutedRecord | None,
                      bytes_in: int, bytes_out: int) -> None:
        """Count the task's bytes; report its timing only when a router placed it
        (``routed``): the service learns placement from these timings, and a task that
        reached this node some other way (Flink's own partitioning) says nothing about a
        placement decision, and its waiting upstream is not measured."""
        timing = finished.timing()
        if routed is not None:
            # Waiting counts from the router's decision: time in the network buffers and the
            # async operator's queue is part of what the choice cost.
            timing["queue_ms"] = max(finished.queue_ms, float(
                finished.finished_at_ms - routed.routed_at_ms) - finished.service_ms)
        with self._lock:
            if routed is not None:
                self._completed.append(timing)
                self._routed.append(routed.context)
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
                # the host's interface counters where it has them (every byte on its link),
                # else the bytes of the records this executor received and sent
                "uplink_bytes_per_s": float(snap.get("uplink_bytes_per_s",
                                                     bytes_out / elapsed)),
                "downlink_bytes_per_s": float(snap.get("downlink_bytes_per_s",
                                                       bytes_in / elapsed)),
                "queue_depth": int(snap.get("queue_depth", 0)),
                "stage_batches": list(snap.get("stage_batches", ()))[:MAX_STAGE_BATCHES],
                "in_flight": int(snap.get("in_flight", 0)), "backpressure": 0.0,
                "completed": completed, "sequence": sequence,
                "routed_queue": [r.queue for r in routed],
                "routed_backlog_ms": [r.backlog_ms for r in routed],
                "routed_speed_factor": [r.speed for r in routed]}

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
