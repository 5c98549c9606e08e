"""Node feedback: what an executor tells the routers and the placement service.

:class:`FeedbackPublisher` sends this node's NodeFeedback (per-task timings, utilisation of this
TaskManager's processes, GPU numbers from NVML, bytes in and out, queue depth) to the feedback
topic straight from the Python worker with a confluent-kafka producer, every
``feedback_interval_s``. Why not a Flink sink: feedback is telemetry that must reach the router
and the service within a fraction of a second, while an exactly-once sink only makes records
visible when a checkpoint completes; and routing it through another operator would add a Python
hop to every result. Feedback is at-least-once (a re-executed task reports again); every reader
de-duplicates by task id.

Power and energy (issue 17, :mod:`interference.executor.power` has the rules): every record
carries the node's ``power_w`` and ``power_source`` from the executor's telemetry (NVML GPU
readings plus a stated CPU estimate; -1 and "" when not reported), and ``completed_energy_j``
one entry per completed task, in the order of ``completed`` (like ``routed_queue``): the task's
stages' busy time on each unit x that unit's power share, with the unit's power the mean of the
telemetry's readings at the start and end of the report interval (a GPU without a valid
reading: its calibration busy watts; a CPU unit: one busy core's calibrated watts). A task
without stage times (a FinishedTask built without ``stages``) or on a unit of unknown power
reports -1. Every number is bounded and finite before it is published.

Tenants and deadlines: ``completed_tenant`` (a TaskEvent's ``tenant`` attribute, "" without
one) and ``completed_deadline_met`` (1 / 0: finished within its ``deadline_ms`` counted from the
router's decision, or not; -1: no deadline), one entry per completed task in the same order;
the placement service reports per-tenant figures from them (``GET /tenants``).

Why a top-level array and not a field of TaskTiming: Avro binary has no field delimiters, so a
reader still on the previous schema (``workload/schemas/history/node_feedback.v2.avsc``: a
router or placement service not yet upgraded) skips bytes appended at the END of the record
but misreads everything after a field added INSIDE a nested record; the energy array is
appended after ``power_source``, so such a reader decodes every record and leaves the power
fields unread (docs/avro.md, "Evolution rules").

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
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

from interference.executor import power
from pyflink_jobs.routed import DecisionContext, RoutedRecord
from workload.limits import wait_seconds
from workload.refusals import bounded_refusals
from workload.task_attributes import task_slo_from_attributes

__all__ = ["FeedbackPublisher", "FinishedTask", "stage_batches", "MAX_STAGE_BATCHES",
           "MAX_TIMINGS_PER_RECORD", "MAX_PENDING_TIMINGS"]

#: Rows of batching telemetry per report: an operator with hundreds of stages reports its first.
MAX_STAGE_BATCHES = 64
#: Timings per NodeFeedback record: a burst (thousands of light records a second) must not make
#: one record bigger than Kafka's 1 MB message limit (a timing with a 200-character task id and
#: its per-task arrays is under 400 bytes encoded, so 1,000 stay well under it).
MAX_TIMINGS_PER_RECORD = 1000
#: Timings kept while they cannot leave (Kafka down, or emits falling behind); beyond this the
#: oldest are dropped and counted (``dropped_timings``).
MAX_PENDING_TIMINGS = 50_000
#: the final flush's wait at close when no broker answers (the report cannot go anyway): a
#: local job's teardown gave its operators about half a second in all (measured: a third
#: executor's close never ran after two flushes of 0.2 s), and each later close is a user's
UNREACHABLE_FLUSH_S = 0.0


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
    what node speed is measured by (``placement.speed``); -1 when unknown. stages:
    ``(unit, started_at_ms, finished_at_ms)`` of each stage, what its energy is computed from
    (empty: energy not reported)."""

    task_id: str
    task_type: str
    task_size: int
    queue_ms: float
    service_ms: float
    work_ms: float
    finished_at_ms: int
    stages: tuple[tuple[str, int, int], ...] = ()
    tenant: str = ""              # "" = none (a user's record, or a TaskEvent without one)
    deadline_ms: float = -1.0     # relative to the router's decision; -1 = none

    @classmethod
    def from_task_outcome(cls, event: dict, outcome, slo=None) -> FinishedTask:
        """From a TaskEvent dict and the built-in executor's ``TaskOutcome``; the tenant and
        deadline from ``slo`` (the executor's parse of the event's attributes), else parsed
        here (none when they do not pass their checks: such a task is refused by the
        executor, and says nothing about a tenant)."""
        work = float(sum(max(0, s.finished_at_ms - s.started_at_ms) for s in outcome.stages)) \
            if outcome.stages else -1.0
        if slo is None:
            try:
                slo = task_slo_from_attributes(event.get("attributes"))
            except ValueError:
                slo = None
        tenant = slo.tenant if slo is not None else ""
        deadline_ms = slo.deadline_s * 1000.0 if slo is not None and slo.deadline_s is not None \
            else -1.0
        return cls(event["task_id"], event["app_id"], int(event["input_size"]),
                   float(outcome.queue_ms), float(outcome.service_ms), work,
                   int(outcome.finished_at_ms), _stage_times(outcome.stages), tenant,
                   deadline_ms)

    def deadline_met(self, latency_ms: float) -> int:
        """1 / 0: finished within its deadline or not, after ``latency_ms``; -1: no deadline."""
        if self.deadline_ms < 0:
            return -1
        return int(latency_ms <= self.deadline_ms)

    @classmethod
    def from_record_outcome(cls, task_id: str, task_type: str, task_size: int,
                            outcome) -> FinishedTask:
        """From the operator executor's ``RecordOutcome``: the records of one batched call
        share its stage times, so their energy splits the call's power between them."""
        return cls(task_id, task_type, int(task_size), float(outcome.queue_ms),
                   float(outcome.service_ms), float(outcome.work_ms),
                   int(outcome.finished_at_ms), _stage_times(outcome.stages))

    def timing(self) -> dict:
        """The TaskTiming record of the NodeFeedback schema (the task's energy is not part of
        it: the publisher computes it per report into ``completed_energy_j``)."""
        return {"task_id": self.task_id, "app_id": self.task_type,
                "input_size": int(self.task_size), "queue_ms": float(self.queue_ms),
                "service_ms": float(self.service_ms),
                "finished_at_ms": int(self.finished_at_ms), "work_ms": float(self.work_ms)}


def _stage_times(stages) -> tuple[tuple[str, int, int], ...]:
    """(unit, start, end) of executor stage records (StageRecord / StageRun)."""
    return tuple((str(s.unit), int(s.started_at_ms), int(s.finished_at_ms))
                 for s in stages or ())


def _unit_power(previous: dict, current) -> dict:
    """Watts per unit over a report interval: the mean of the readings at its start
    (``previous``) and end (``current``) where both are valid numbers, else the one there is;
    anything but a mapping of unit -> number is no reading (power.task_energies_j checks the
    numbers' bounds again)."""
    if not isinstance(current, dict):
        return {}
    out = {}
    for unit, value in current.items():
        watts = power.bounded_watts(value)
        if not isinstance(unit, str) or watts is None:
            continue
        before = previous.get(unit)
        out[unit] = (watts + before) / 2.0 if before is not None else watts
    return out


class _PendingTiming(NamedTuple):
    """One completed timing waiting for its record, with what travels beside it."""

    timing: dict
    context: DecisionContext                   # what its routing decision saw
    stages: tuple[tuple[str, int, int], ...]   # its stage times (energy per task)
    tenant: str
    deadline_met: int


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
        # (a 0 or NaN interval sent ~40,000 reports a second)
        self.interval_s = wait_seconds("the feedback interval (feedback_interval_s)", interval_s,
                                       most=threading.TIMEOUT_MAX)
        self.instance = instance
        self.clock = clock
        self._pending: deque[_PendingTiming] = deque()
        self._unit_power_w: dict[str, float] = {}  # the last report's watts per unit
        self._lock = threading.Lock()
        self._bytes_in = self._bytes_out = 0
        self._last_emit = clock()
        self._last_emitted_ms = 0
        self._last_sequence = 0
        self._continuation = False  # the last record left timings for the next one
        self._rates = (0.0, 0.0)      # (uplink, downlink) bytes/s of the last first record
        self._unit_power: dict = {}
        self.dropped_timings = 0
        self.sent = 0
        self.delivery_errors = 0
        # librdkafka said no broker answers (error_cb), and nothing was delivered since: the
        # final flush at close is then cut short instead of waiting its whole timeout
        self.broker_unreachable = False
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
        met = finished.deadline_met(timing["queue_ms"] + timing["service_ms"])
        with self._lock:
            if routed is not None:
                if len(self._pending) >= MAX_PENDING_TIMINGS:
                    self._drop_oldest()
                self._pending.append(_PendingTiming(timing, routed.context, finished.stages,
                                                    finished.tenant, met))
            self._bytes_in += bytes_in
            self._bytes_out += bytes_out

    def count_bytes(self, bytes_in: int, bytes_out: int) -> None:
        """A task's bytes, for a task whose timing is not reported."""
        with self._lock:
            self._bytes_in += bytes_in
            self._bytes_out += bytes_out

    def _drop_oldest(self) -> None:
        """Called with the lock held when MAX_PENDING_TIMINGS wait (feedback cannot leave, or
        a burst outran it): the oldest timing goes, counted, so memory stays bounded."""
        self._pending.popleft()
        self.dropped_timings += 1
        if self.dropped_timings == 1 or self.dropped_timings % 10_000 == 0:
            log.warning("feedback timings dropped so far on %s: %d (more than %d waiting)",
                        self.node_id, self.dropped_timings, MAX_PENDING_TIMINGS)

    def pending(self) -> int:
        """Timings collected and not yet in a record."""
        with self._lock:
            return len(self._pending)

    def build_record(self) -> dict:
        """The next NodeFeedback: the node's numbers and the oldest timings collected so far, at
        most MAX_TIMINGS_PER_RECORD (the rest stay for the next record, which repeats the
        node's numbers: :meth:`emit` sends them all at once)."""
        now = self.clock()
        with self._lock:
            taken = [self._pending.popleft()
                     for _ in range(min(MAX_TIMINGS_PER_RECORD, len(self._pending)))]
            continuation, self._continuation = self._continuation, bool(self._pending)
            if not continuation:
                bytes_in, bytes_out = self._bytes_in, self._bytes_out
                self._bytes_in = self._bytes_out = 0
        snap = self.snapshot()
        if not continuation:  # a continuation repeats the rates of the record before it
            elapsed = max(1e-3, now - self._last_emit)
            self._last_emit = now
            self._rates = (float(snap.get("uplink_bytes_per_s", bytes_out / elapsed)),
                           float(snap.get("downlink_bytes_per_s", bytes_in / elapsed)))
            current = _unit_power({}, snap.get("unit_power_w"))
            self._unit_power = _unit_power(self._unit_power_w, current)
            self._unit_power_w = current
        # one entry per completed timing, same order (a task id may repeat: keyed by position)
        energies = power.task_energies_j(
            {i: p.stages for i, p in enumerate(taken) if p.stages}, self._unit_power) \
            if taken else {}
        completed_energy = [energies.get(i, power.NOT_REPORTED) for i in range(len(taken))]
        power_w, power_source = power.bounded_power(snap.get("power_w"),
                                                    snap.get("power_source"))
        # strictly increasing per instance: the records of one emit are distinct, and the
        # service's de-duplication key (node, sequence, emitted_at_ms) never joins two of them
        emitted_ms = max(int(now * 1000), self._last_emitted_ms + 1)
        self._last_emitted_ms = emitted_ms
        sequence = max(self._last_sequence + 1, emitted_ms * 1000 + self.instance)
        self._last_sequence = sequence
        return {"node_id": self.node_id, "emitted_at_ms": emitted_ms,
                "cpu_util": float(snap.get("cpu_util", 0.0)),
                "gpu_util": float(snap.get("gpu_util", 0.0)),
                "host_mem_util": float(snap.get("host_mem_util", 0.0)),
                "gpu_mem_util": float(snap.get("gpu_mem_util", 0.0)),
                # the host's interface counters where it has them (every byte on its link),
                # else the bytes of the records this executor received and sent
                "uplink_bytes_per_s": self._rates[0],
                "downlink_bytes_per_s": self._rates[1],
                "queue_depth": int(snap.get("queue_depth", 0)),
                "stage_batches": list(snap.get("stage_batches", ()))[:MAX_STAGE_BATCHES],
                "in_flight": int(snap.get("in_flight", 0)), "backpressure": 0.0,
                "completed": [p.timing for p in taken], "sequence": sequence,
                "routed_queue": [p.context.queue for p in taken],
                "routed_backlog_ms": [p.context.backlog_ms for p in taken],
                "routed_speed_factor": [p.context.speed for p in taken],
                "routed_model_version": [p.context.model_version for p in taken],
                "power_w": power_w, "power_source": power_source,
                "completed_energy_j": completed_energy,
                "completed_tenant": [p.tenant for p in taken],
                "completed_deadline_met": [p.deadline_met for p in taken],
                "learning_refused": bounded_refusals(snap.get("learning_refused"))}

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.delivery_errors += 1
            log.warning("feedback delivery failed: %s", err)
        else:
            self.broker_unreachable = False

    def client_error(self, err) -> None:
        """The producer's ``error_cb``: notes when no broker answers (logged once a spell)."""
        from confluent_kafka import KafkaError
        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT,
                          KafkaError._RESOLVE):
            if not self.broker_unreachable:
                log.warning("feedback: no broker answers (%s); reports wait for one", err)
            self.broker_unreachable = True

    def emit(self) -> dict:
        """Send every timing collected so far, in as many records as MAX_TIMINGS_PER_RECORD
        needs (one record when there are none: the node's numbers still go); returns the
        last record."""
        from workload.codec import encode
        while True:
            record = self.build_record()
            if self.producer is not None:
                self.producer.produce(self.topic, key=self.node_id.encode(),
                                      value=encode("NodeFeedback", record),
                                      on_delivery=self._delivered)
                self.producer.poll(0)
                self.sent += 1
            if not self._continuation:
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
            self.producer.poll(0)   # serve error callbacks: is a broker there at all?
            self.producer.flush(UNREACHABLE_FLUSH_S if self.broker_unreachable else timeout_s)
