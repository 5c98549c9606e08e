"""Reading the feedback topic: NodeFeedback records from Kafka to the online learner, at least
once, duplicates dropped.

- :class:`Deduplicator`: Kafka delivers at least once (a consumer restart re-reads everything
  after the last committed offset; an executor may re-send after a retry), so records repeat.
  A whole NodeFeedback repeats with the same ``(node_id, sequence, emitted_at_ms)``: dropped.
  (``emitted_at_ms`` is part of the key so a restarted TaskManager whose sequence starts again
  at 0 is not mistaken for a repeat.) A completed task may also come twice inside different
  reports of its node: ``(node_id, task_id)`` is remembered (bounded LRU, 200k by default) and
  later copies are dropped from the record's ``completed`` list, and from the same positions of
  the per-task arrays beside it (``workload.feedback.PER_TASK_ARRAYS``), which stay aligned with
  it. Keyed by the node too, so a report from another node naming the task first (forged or
  confused) cannot hide the real timing (before 2026-12-05 the first claim of an id won).
  Report keys are remembered per node for at most ``max_nodes`` nodes (the least recently
  reporting one is forgotten first): records with ever-new node ids cannot grow it without
  bound; a forgotten node's repeats are caught by the task-id memory still.
- :class:`FeedbackIngest`: decode + de-duplicate + hand to the learner + count; no Kafka, so
  the unit tests and other transports use it directly.
- :class:`FeedbackConsumer`: a background thread with a confluent-kafka ``Consumer``
  (``enable.auto.commit=False``, ``isolation.level=read_committed``). It commits a batch's
  offsets only after the learner has taken the batch: a crash before the commit means the batch
  is read again (and de-duplicated), never lost.

Example::

    ingest = FeedbackIngest(learner, metrics)
    consumer = FeedbackConsumer({"bootstrap.servers": "127.0.0.1:9092",
                                 "group.id": "streamplace-service"}, "feedback", ingest)
    consumer.start()
    ...
    consumer.stop()   # joins the thread; the Kafka consumer is closed in its finally block
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from workload.codec import CodecError, decode
from workload.feedback import PER_TASK_ARRAYS

__all__ = ["Deduplicator", "FeedbackIngest", "FeedbackConsumer", "consumer_config"]

log = logging.getLogger(__name__)


class _LruSet:
    """A set that forgets its oldest members beyond ``capacity``."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._items: OrderedDict = OrderedDict()

    def add_if_new(self, key) -> bool:
        """True (and remembered) if ``key`` was not there; False (and refreshed) if it was."""
        if key in self._items:
            self._items.move_to_end(key)
            return False
        self._items[key] = None
        if len(self._items) > self.capacity:
            self._items.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self._items)


class Deduplicator:
    """Drops repeated NodeFeedback reports and repeated task ids (see the module docstring).

    >>> d = Deduplicator()
    >>> r = {"node_id": "tm_a", "sequence": 1, "emitted_at_ms": 5,
    ...      "completed": [{"task_id": "t1"}, {"task_id": "t1"}]}
    >>> len(d.filter(r)["completed"]), d.filter(r), d.dropped
    (1, None, {'sequence': 1, 'task_id': 1})
    """

    #: nodes whose report keys are remembered: the spec's nodes plus the learner's 64 unknown
    #: ones (``OnlineLearner(max_unknown_nodes=64)``) fit with room to spare
    MAX_NODES = 256

    def __init__(self, task_capacity: int = 200_000, reports_per_node: int = 10_000,
                 max_nodes: int = MAX_NODES):
        self._tasks = _LruSet(task_capacity)
        self._reports_per_node = reports_per_node
        self.max_nodes = max_nodes
        # node -> its report keys, least recently reporting node first
        self._reports: OrderedDict[str, _LruSet] = OrderedDict()
        self.dropped = {"sequence": 0, "task_id": 0}
        self.nodes_forgotten = 0   # nodes whose report keys were evicted (max_nodes)

    def filter(self, record: Mapping) -> dict | None:
        """The record with its repeated task timings removed, or None for a repeated report."""
        node = record["node_id"]
        seen = self._reports.get(node)
        if seen is None:
            seen = self._reports[node] = _LruSet(self._reports_per_node)
            if len(self._reports) > self.max_nodes:
                self._reports.popitem(last=False)
                self.nodes_forgotten += 1
        else:
            self._reports.move_to_end(node)
        if not seen.add_if_new((int(record["sequence"]), int(record["emitted_at_ms"]))):
            self.dropped["sequence"] += 1
            return None
        completed = list(record.get("completed") or ())
        keep = []
        for i, timing in enumerate(completed):
            if self._tasks.add_if_new((node, timing["task_id"])):
                keep.append(i)
            else:
                self.dropped["task_id"] += 1
        filtered = {**record, "completed": [completed[i] for i in keep]}
        for name in PER_TASK_ARRAYS:
            values = record.get(name)
            if not values:
                continue
            # One entry per timing, same order: drop the same positions. An array of another
            # length cannot be matched to its timings at all (a broken or hostile executor).
            filtered[name] = [values[i] for i in keep] if len(values) == len(completed) else []
        return filtered


class FeedbackIngest:
    """Decoded or raw NodeFeedback -> de-duplicated -> ``learner.take``; counts everything in
    ``metrics`` (a :class:`placement.service.metrics.ServiceMetrics`, optional)."""

    #: A completion longer than this is not told to the rules (a broken clock, not a task).
    MAX_COMPLETION_S = 3600.0

    def __init__(self, learner, metrics=None, dedup_capacity: int = 200_000, observers=(),
                 reports=()):
        self.learner = learner
        self.metrics = metrics
        #: ``observe(task_id, latency_s, node_id)`` callables told of every new completion
        #: (rules that learn from outcomes, e.g. ``/decide``'s rule); latency = queue + service
        self.observers = list(observers)
        #: objects whose ``take(records)`` gets every de-duplicated batch (e.g. the service's
        #: :class:`placement.service.tenants.TenantReport`)
        self.reports = list(reports)
        self.dedup = Deduplicator(dedup_capacity)
        self._lock = threading.Lock()
        self.messages = 0
        self.undecodable = 0

    def decode(self, payload: bytes) -> dict | None:
        """A NodeFeedback, or None (counted, logged) if the bytes are not one."""
        try:
            return decode("NodeFeedback", payload)
        except CodecError as exc:
            with self._lock:
                self.undecodable += 1
                count = self.undecodable
            if self.metrics is not None:
                self.metrics.undecodable.inc()
            if count <= 10 or count % 1000 == 0:  # a poisoned topic must not flood the log
                log.warning("skipping a feedback message that is not a NodeFeedback (%d so "
                            "far): %s", count, exc)
            return None

    def ingest(self, records: Iterable[Mapping]) -> int:
        """De-duplicate decoded records and give them to the learner; returns the task records
        taken. Returns only after the learner has them (offsets may then be committed)."""
        kept = []
        with self._lock:
            before = dict(self.dedup.dropped)
            for record in records:
                self.messages += 1
                filtered = self.dedup.filter(record)
                if filtered is not None:
                    kept.append(filtered)
            dropped = {k: v - before[k] for k, v in self.dedup.dropped.items()}
        if self.metrics is not None:
            self.metrics.feedback_messages.inc(len(kept) + dropped["sequence"])
            for kind, count in dropped.items():
                if count:
                    self.metrics.duplicates.labels(kind=kind).inc(count)
        taken = self.learner.take(kept) if kept else 0
        if self.observers:
            self._tell_observers(kept)
        for report in self.reports:
            report.take(kept)
        if self.metrics is not None and taken:
            self.metrics.feedback_records.inc(taken)
        return taken

    def _tell_observers(self, records: list[Mapping]) -> None:
        for record in records:
            node_id = record.get("node_id")
            for timing in record.get("completed") or ():
                try:
                    latency_s = (float(timing.get("queue_ms") or 0.0)
                                 + float(timing.get("service_ms") or 0.0)) / 1000.0
                except (TypeError, ValueError):
                    continue
                if not (0.0 <= latency_s <= self.MAX_COMPLETION_S) or not isinstance(node_id, str):
                    continue  # NaN fails both comparisons
                for observe in self.observers:
                    observe(str(timing.get("task_id")), latency_s, node_id)

    def ingest_payloads(self, payloads: Iterable[bytes]) -> int:
        """Decode raw message values (undecodable ones skipped) and :meth:`ingest` them."""
        return self.ingest([r for p in payloads if (r := self.decode(p)) is not None])


def consumer_config(bootstrap_servers: str, group_id: str, **extra) -> dict:
    """The librdkafka configuration of the feedback consumer.

    - ``enable.auto.commit=False``: offsets are committed by hand after the learner took the
      batch (at least once);
    - ``auto.offset.reset=earliest``: a new group learns from everything still in the topic;
    - ``isolation.level=read_committed``: never learn from an aborted transaction's records.
    """
    return {"bootstrap.servers": bootstrap_servers, "group.id": group_id,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "isolation.level": "read_committed", "client.id": "streamplace-service",
            # A broker that is down must not flood the service's log: back off reconnects, and
            # report errors once each through error_cb (FeedbackConsumer) instead of
            # librdkafka's own stderr lines.
            "reconnect.backoff.ms": 500, "reconnect.backoff.max.ms": 10_000,
            "log_level": 2, **extra}


class FeedbackConsumer:
    """The poll loop in a daemon thread: consume a batch, decode, ingest, commit.

    ``config`` is a librdkafka dict (see :func:`consumer_config`); ``poll_timeout_s`` bounds how
    long :meth:`stop` waits for the loop to notice.
    """

    def __init__(self, config: dict, topic: str, ingest: FeedbackIngest,
                 poll_timeout_s: float = 0.5, batch_size: int = 500):
        self.config = dict(config)
        self.topic = topic
        self.ingest = ingest
        self.poll_timeout_s = poll_timeout_s
        self.batch_size = batch_size
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        self.committed_batches = 0
        self.closed = False
        self._started_at: float | None = None

    def start(self) -> "FeedbackConsumer":
        if self._thread is not None:
            return self
        self._stop.clear()
        self.closed = False
        self._started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="streamplace-feedback",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        """Ask the loop to end and join it (the consumer is closed by the loop itself)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("the feedback consumer did not stop within %.0f s", timeout_s)
            else:
                self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

        reported: set = set()

        def on_error(err) -> None:  # librdkafka's global errors (broker down, ...)
            self.last_error = str(err)
            if err.code() not in reported:
                reported.add(err.code())
                log.warning("feedback consumer: %s (retrying; logged once)", err)

        consumer = Consumer({"error_cb": on_error, **self.config})
        try:
            consumer.subscribe([self.topic])
            while not self._stop.is_set():
                messages = consumer.consume(num_messages=self.batch_size,
                                            timeout=self.poll_timeout_s)
                if not messages:
                    continue
                payloads, last_offsets = [], {}
                for msg in messages:
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            continue
                        self.last_error = str(err)
                        if err.code() not in reported:  # e.g. topic not created yet: once
                            reported.add(err.code())
                            log.warning("feedback consumer: %s", err)
                        continue
                    payloads.append(msg.value())
                    key = (msg.topic(), msg.partition())
                    last_offsets[key] = max(last_offsets.get(key, -1), msg.offset())
                if payloads:
                    self.ingest.ingest_payloads(payloads)
                if last_offsets:
                    # Only now, after the learner took the batch: at least once.
                    offsets = [TopicPartition(t, p, o + 1) for (t, p), o in last_offsets.items()]
                    try:
                        consumer.commit(offsets=offsets, asynchronous=False)
                        self.committed_batches += 1
                    except KafkaException as exc:  # e.g. a rebalance took the partition away
                        self.last_error = f"commit failed: {exc}"
                        if self.ingest.metrics is not None:
                            self.ingest.metrics.commit_failures.inc()
                        log.warning("feedback consumer: offset commit failed (%s); those "
                                    "messages will be read again and de-duplicated", exc)
        except Exception as exc:  # noqa: BLE001 - reported on /health, never silent
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("feedback consumer stopped on an error")
        finally:
            consumer.close()  # leaves the group now, so a restart gets the partitions at once
            self.closed = True
