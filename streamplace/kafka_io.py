"""Producing TaskEvents to and reading results from the local broker (confluent-kafka).

Example::

    cfg = load_config()
    report = produce_task_events(cfg, synthetic_task_events(1000, seed=1, payloads=True))
    results = read_topic(cfg, cfg.job.topic_results, "TaskResult", expected=1000)
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from streamplace.config import StreamplaceConfig
from workload.catalog import app_ids

__all__ = ["synthetic_task_events", "produce_task_events", "produce_raw", "read_topic",
           "broker_problem", "BROKER_CHECK_S",
           "exactly_once_report", "ProduceReport", "ReadReport", "ExactlyOnceReport",
           "PAYLOAD_QUALITY"]


#: JPEG quality of the clips producers attach (``workload.apps.images.DEFAULT_QUALITY``).
PAYLOAD_QUALITY = 80


def synthetic_task_events(count: int, seed: int = 0, prefix: str = "task",
                          source: str = "synthetic", payloads: bool = False,
                          quality: int = PAYLOAD_QUALITY) -> Iterator[dict]:
    """``count`` TaskEvents of the three applications with lognormal input sizes (median about
    36,000 pixels, capped at 2^20).

    With ``payloads`` each event carries its real clip (``workload.apps.registry.task_payload``:
    frames cut from real photographs, ``frame_shape(input_size)`` pixels, JPEG at ``quality``,
    seeded by the task id), which the executors decode instead of making synthetic frames.
    Typical record sizes at quality 80: 5 KB at 4,096 pixels, 15 KB at the median 36,864,
    44 KB at 147,456, about 240 KB at the 2^20 cap. Off by default: light records (about
    100 bytes) keep throughput benchmarks and tests comparable with earlier runs, and need no
    torch in the producer.

    Example::

        >>> [e["input_size"] for e in synthetic_task_events(3, seed=1)]
        [59039, 35904, 97219]
        >>> len(next(synthetic_task_events(1, seed=1, payloads=True))["payload"]) > 1000
        True
    """
    rng = random.Random(seed)
    # The application of each event is drawn on its own generator (the sizes stay those of
    # earlier runs). Why: the events used to cycle the three applications in order, so on
    # three TaskManagers every round-robin placement sent each application to one of them
    # (which one depending on where the rotation started), and on a host slow for one
    # application round-robin either never met the slowdown or met all of it.
    app_rng = random.Random(f"{seed}:apps")
    apps = app_ids()
    now = int(time.time() * 1000)
    task_payload = None
    if payloads:  # imports torch: only when asked for
        from workload.apps.registry import task_payload
    for i in range(count):
        event = {"task_id": f"{prefix}-{i:07d}", "app_id": app_rng.choice(apps),
                 "input_size": int(min(1 << 20, rng.lognormvariate(10.5, 0.8))),
                 "submitted_at_ms": now, "source": source, "expected_work_ms": None,
                 "attributes": {}}
        if task_payload is not None:
            event["payload"] = task_payload(event["app_id"], event["input_size"],
                                            event["task_id"], quality=quality)
        yield event


@dataclass
class ProduceReport:
    sent: int = 0
    delivered: int = 0
    errors: list[str] = field(default_factory=list)


#: how long a command that sends waits for a broker to answer before saying there is none
BROKER_CHECK_S = 5.0


def broker_problem(config: StreamplaceConfig, timeout_s: float | None = None) -> str | None:
    """None when a broker answers at the configured address within ``timeout_s`` (default
    :data:`BROKER_CHECK_S`); else one
    line saying so. Commands that send check first: with no broker, a producer would print
    librdkafka's connection errors for a minute before its delivery reports gave up.

    Example::

        problem = broker_problem(config)
        if problem:
            print(problem, file=sys.stderr)
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    servers = config.kafka.bootstrap_servers
    timeout_s = BROKER_CHECK_S if timeout_s is None else timeout_s
    # log_level 0: the refused connections are this function's answer, not lines on stderr
    admin = AdminClient({"bootstrap.servers": servers, "log_level": 0})
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        return (f"no Kafka broker answers at {servers} within {timeout_s:g} s ({reason}); "
                "start one with `streamplace kafka start`")
    return None


def _producer(config: StreamplaceConfig):
    from confluent_kafka import Producer
    return Producer({"bootstrap.servers": config.kafka.bootstrap_servers,
                     "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                     "compression.type": "lz4",
                     # Transient broker warnings (e.g. "coordinator load in progress" right after
                     # start-up) are retried by librdkafka; real failures reach on_delivery.
                     "log_level": 3})


def produce_raw(config: StreamplaceConfig, topic: str, payloads: Iterable[bytes],
                timeout_s: float = 60.0, progress=None,
                partition: int | None = None) -> ProduceReport:
    """Send raw payloads (no encoding); ``flush`` waits for every delivery report.
    ``partition``: all to that partition, in order (default: the producer's partitioner spreads
    them, and a reader may see them in another order than sent)."""
    report = ProduceReport()
    producer = _producer(config)
    where = {} if partition is None else {"partition": partition}

    def on_delivery(err, msg):
        if err is not None:
            report.errors.append(str(err))
        else:
            report.delivered += 1
            if progress is not None:
                progress.update(1)

    for payload in payloads:
        while True:
            try:
                producer.produce(topic, value=payload, on_delivery=on_delivery, **where)
                break
            except BufferError:  # local queue full: serve delivery callbacks, then retry
                producer.poll(0.1)
        report.sent += 1
        producer.poll(0)
    remaining = producer.flush(timeout_s)
    if remaining:
        report.errors.append(f"{remaining} messages not delivered within {timeout_s:.0f} s")
    return report


def produce_task_events(config: StreamplaceConfig, events: Iterable[dict],
                        timeout_s: float = 60.0, progress=None) -> ProduceReport:
    from workload.codec import encode
    return produce_raw(config, config.job.topic_tasks,
                       (encode("TaskEvent", e) for e in events), timeout_s, progress)


@dataclass
class ReadReport:
    records: list[dict] = field(default_factory=list)
    undecodable: int = 0
    seconds: float = 0.0


def read_topic(config: StreamplaceConfig, topic: str, record_name: str | None,
               expected: int | None,
               timeout_s: float = 120.0, idle_s: float | None = None,
               group_id: str | None = None, progress=None, settle_s: float = 0.0,
               keep=None, stamp_seen: bool = False, stop=None,
               stamp_appended: bool = False) -> ReadReport:
    """Read ``topic`` from the beginning with ``isolation.level=read_committed`` until
    ``expected`` records arrived (then ``settle_s`` more, to catch duplicates), ``timeout_s``
    passed, or nothing came for ``idle_s``. ``keep(record)`` filters what is kept and counted
    (e.g. one run's task ids on a topic shared with earlier runs). ``stamp_seen`` adds the
    epoch seconds each record became visible as ``_seen_s`` (committed-results rates).
    ``stamp_appended`` adds the broker's append time (epoch seconds) as ``_appended_s`` on a
    topic with ``message.timestamp.type=LogAppendTime``: when a transactional writer wrote the
    record, before its transaction committed (None on a topic with producers' timestamps).
    ``stop`` (a ``threading.Event``) ends the read early, e.g. when the caller gave up."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError

    from workload.codec import CodecError, decode

    consumer = Consumer({
        "bootstrap.servers": config.kafka.bootstrap_servers,
        # a group of its own: two reads started in the same nanosecond (threads) must not
        # share partitions
        "group.id": group_id or f"streamplace-reader-{uuid.uuid4().hex}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "isolation.level": "read_committed"})
    report = ReadReport()
    start = last = time.monotonic()
    reached_at = None
    try:
        consumer.subscribe([topic])
        while time.monotonic() - start < timeout_s:
            if stop is not None and stop.is_set():
                break
            if expected is not None and len(report.records) >= expected:
                reached_at = reached_at or time.monotonic()
                if time.monotonic() - reached_at >= settle_s:
                    break
            if idle_s is not None and time.monotonic() - last > idle_s:
                break
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                if msg.error():
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"reading {topic}: {msg.error()}")
                    continue
                last = time.monotonic()
                try:  # record_name None: {"value": raw bytes} (records of users' own jobs)
                    record = {"value": msg.value()} if record_name is None else \
                        decode(record_name, msg.value())
                except CodecError:
                    report.undecodable += 1
                    continue
                if keep is not None and not keep(record):
                    continue
                if stamp_seen:
                    record["_seen_s"] = time.time()
                if stamp_appended:
                    kind, stamp_ms = msg.timestamp()
                    record["_appended_s"] = stamp_ms / 1000.0 \
                        if kind == TIMESTAMP_LOG_APPEND_TIME else None
                report.records.append(record)
                if progress is not None:
                    progress.update(1)
    finally:
        consumer.close()
    report.seconds = time.monotonic() - start
    return report


@dataclass(frozen=True)
class ExactlyOnceReport:
    """What broke exactly-once delivery of a run's results (all empty: nothing).

    ``duplicates``: task ids with more than one result; ``missing``: ids sent but without a
    result; ``unexpected``: results for ids never sent; ``not_ok``: ``(task id, status)`` of
    results whose status is not ``"OK"``. Each sorted."""

    duplicates: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    unexpected: tuple[str, ...] = ()
    not_ok: tuple[tuple[str, str], ...] = ()

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.missing or self.unexpected or self.not_ok)

    def describe(self, shown: int = 5) -> str:
        """One line for an assertion message: each problem's count and its first ids."""
        if self.ok:
            return "every task exactly once, all OK"

        def part(what: str, items: tuple) -> str:
            head = ", ".join(str(i) if isinstance(i, str) else f"{i[0]}: {i[1]}"
                             for i in items[:shown])
            return f"{len(items)} {what} ({head}{', ...' if len(items) > shown else ''})"

        return "; ".join(part(what, items) for what, items in (
            ("duplicated", self.duplicates), ("missing", self.missing),
            ("never sent", self.unexpected), ("not OK", self.not_ok)) if items)


def exactly_once_report(results: Iterable[dict], expected_ids: Iterable[str]
                        ) -> ExactlyOnceReport:
    """Check result records (``read_topic(...).records``) against the task ids that were sent:
    each id exactly once, none missing, none extra, every status ``"OK"``. Pure: no broker.

    Example::

        >>> sent = ["t1", "t2", "t3"]
        >>> results = [{"task_id": "t1", "status": "OK"}, {"task_id": "t1", "status": "OK"},
        ...            {"task_id": "t2", "status": "FAILED"}, {"task_id": "x", "status": "OK"}]
        >>> report = exactly_once_report(results, sent)
        >>> report.ok, report.duplicates, report.missing, report.unexpected, report.not_ok
        (False, ('t1',), ('t3',), ('x',), (('t2', 'FAILED'),))
        >>> report.describe()
        '1 duplicated (t1); 1 missing (t3); 1 never sent (x); 1 not OK (t2: FAILED)'
    """
    records = list(results)
    counts = Counter(r["task_id"] for r in records)
    expected = set(expected_ids)
    return ExactlyOnceReport(
        duplicates=tuple(sorted(i for i, n in counts.items() if n > 1)),
        missing=tuple(sorted(expected - counts.keys())),
        unexpected=tuple(sorted(counts.keys() - expected)),
        not_ok=tuple(sorted((r["task_id"], str(r.get("status"))) for r in records
                            if r.get("status") != "OK")))
