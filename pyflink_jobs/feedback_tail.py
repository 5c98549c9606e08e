"""A router's own reader of the feedback topic, instead of Flink's broadcast input.

The routers learn node state from the executors' NodeFeedback. By default that reaches them as
a broadcast input of the router operator (a Kafka source in the job, ``connect(broadcast)``),
which makes the router a two-input operator: PyFlink then wraps every record of the user's
stream as ``Row(is_normal, record, feedback)`` and unwraps it again, about 2.4 µs a record of the
router worker's Python (measured: ``benchmarks/flink_e2e_examples.py --no-colocated
--shape-ablation``), whatever little feedback there is. A :class:`FeedbackTail` reads the topic
on a thread of the router's own worker instead (a confluent-kafka consumer: no consumer group
offsets, no commits), so the router is a one-input operator and the job has no feedback source.

- At start it reads back the last ``history_messages`` of every partition: node views come back
  after a restart from the topic, as they did from broadcast state. Those records are marked
  ``from_history``: their completed tasks belong to an earlier run, not to this router.
- Each payload is handed to ``on_payload(payload, from_history)`` on the tail's thread, as it
  arrives, also while no record flows (the router's ``on_feedback`` takes the router's lock, as
  the model refresher's thread does): the records' thread does nothing for the feedback.
- A payload larger than :data:`MAX_FEEDBACK_BYTES`, or not bytes, is refused (counted); an
  exception of ``on_payload`` is counted and the tail goes on.
- No broker, or no topic yet: the thread keeps trying (logged once per reason) and the router
  decides on its own in-flight counts, as it does before any feedback.

Example::

    def on_payload(payload: bytes, from_history: bool) -> None:
        ...                                      # decode NodeFeedback, router.on_feedback

    tail = FeedbackTail(FeedbackTailSettings("127.0.0.1:9092", "feedback"), on_payload)
    tail.start()
    ...
    tail.stop()
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass

from pyflink_jobs.flink_ops import KAFKA_LOGGER

__all__ = ["FeedbackTail", "FeedbackTailSettings", "MAX_FEEDBACK_BYTES", "HISTORY_MESSAGES"]

log = logging.getLogger(__name__)

#: Payloads read back per partition at start (node views after a restart): reports come every
#: feedback interval (0.5 s) from each executor, so this covers the last minute or more of a
#: small cluster, every node's newest report among them.
HISTORY_MESSAGES = 500
#: A NodeFeedback larger than this is refused (the executors bound theirs to 1 MiB).
MAX_FEEDBACK_BYTES = 1 << 20
#: Seconds one poll of the consumer waits for messages (also how soon :meth:`stop` is seen).
POLL_TIMEOUT_S = 0.25
#: Seconds between two attempts to find the topic's partitions while it does not exist.
RETRY_S = 2.0
#: Seconds a metadata or watermark request may take.
METADATA_TIMEOUT_S = 5.0
#: Seconds :meth:`FeedbackTail.stop` waits for the thread (a poll ends within POLL_TIMEOUT_S).
STOP_WAIT_S = 1.0


@dataclass(frozen=True)
class FeedbackTailSettings:
    """Where the feedback is, and how much of its past to read back at start."""

    bootstrap_servers: str
    topic: str
    history_messages: int = HISTORY_MESSAGES

    def __post_init__(self) -> None:
        value = self.history_messages
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"history_messages must be an int >= 0, got {value!r}")
        if not self.topic or not self.bootstrap_servers:
            raise ValueError("a feedback tail needs bootstrap servers and a topic")

    def consumer_config(self) -> dict:
        """librdkafka settings: assigned partitions, never a group's offsets or commits."""
        return {"bootstrap.servers": self.bootstrap_servers,
                # a group id librdkafka requires; nothing is ever committed under it
                "group.id": f"streamplace-router-tail-{uuid.uuid4().hex[:12]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "max.partition.fetch.bytes": MAX_FEEDBACK_BYTES,
                "client.id": "streamplace-router-feedback-tail"}


class FeedbackTail:
    """A thread that reads the feedback topic and hands each payload to ``on_payload(payload,
    from_history)`` (see the module docstring).

    ``consumer_factory(config)``: makes the Kafka consumer (default: confluent-kafka's
    ``Consumer``; tests give their own)."""

    def __init__(self, settings: FeedbackTailSettings, on_payload, consumer_factory=None):
        self.settings = settings
        self.on_payload = on_payload
        self._factory = consumer_factory
        self.received = 0               # payloads handed on
        self.refused = 0                # payloads over MAX_FEEDBACK_BYTES, or not bytes
        self.errors = 0                 # consumer errors, and exceptions of on_payload
        self.last_error = ""
        self._history_end: dict[int, int] = {}   # partition -> first offset that is live
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "FeedbackTail":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="streamplace-feedback-tail",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = STOP_WAIT_S) -> None:
        """Ask the thread to end and wait for it at most ``timeout_s``: a thread still inside
        a broker request (no broker: up to METADATA_TIMEOUT_S) ends on its own when the
        request does, and closes the consumer then; a router's close, which ends a bounded
        job, does not wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.info("the router's feedback tail is still in a broker request; it ends "
                         "on its own when that returns")

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- the thread --------------------------------------------------------------------------
    def _consumer(self):
        if self._factory is not None:
            return self._factory(self.settings.consumer_config())
        from confluent_kafka import Consumer
        reported: set = set()

        def on_error(err) -> None:   # broker down and the like: librdkafka retries
            self.last_error = str(err)
            if err.code() not in reported:
                reported.add(err.code())
                log.warning("router feedback tail: %s (retrying; logged once)", err)
        # logger: librdkafka's own lines (a refused connection every retry) go to the
        # worker's log, not its stderr (a local job's console)
        return Consumer({"error_cb": on_error, "logger": logging.getLogger(KAFKA_LOGGER),
                         **self.settings.consumer_config()})

    def _run(self) -> None:
        try:
            consumer = self._consumer()
        except Exception as exc:  # noqa: BLE001 - no consumer: the router decides without
            self._failed(exc, "could not make the Kafka consumer")
            return
        try:
            while not self._stop.is_set() and not self._assign(consumer):
                self._stop.wait(RETRY_S)
            while not self._stop.is_set():
                try:
                    messages = consumer.consume(num_messages=500, timeout=POLL_TIMEOUT_S)
                except Exception as exc:  # noqa: BLE001 - counted; the loop goes on
                    self._failed(exc, "consume failed")
                    self._stop.wait(RETRY_S)
                    continue
                for message in messages or ():
                    self._take(message)
        finally:
            try:
                consumer.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    def _assign(self, consumer) -> bool:
        """Assign every partition of the topic from ``history_messages`` before its end;
        False while the topic cannot be found (tried again after RETRY_S)."""
        from confluent_kafka import TopicPartition
        topic = self.settings.topic
        try:
            metadata = consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
            found = metadata.topics.get(topic)
            if found is None or found.error is not None or not found.partitions:
                raise LookupError(f"topic {topic!r} not found"
                                  + (f" ({found.error})" if found is not None and
                                     found.error is not None else ""))
            assignment = []
            for partition in sorted(found.partitions):
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=METADATA_TIMEOUT_S)
                self._history_end[partition] = high
                start = max(low, high - self.settings.history_messages)
                assignment.append(TopicPartition(topic, partition, start))
            consumer.assign(assignment)
        except Exception as exc:  # noqa: BLE001 - not there yet, broker down: try again
            self._failed(exc, "waiting for the feedback topic")
            return False
        log.info("router feedback tail reads %s (%d partitions, history from %s)", topic,
                 len(assignment), {tp.partition: tp.offset for tp in assignment})
        return True

    def _take(self, message) -> None:
        error = message.error()
        if error is not None:
            self._failed(error, "message error")
            return
        payload = message.value()
        if not isinstance(payload, (bytes, bytearray)) or len(payload) > MAX_FEEDBACK_BYTES:
            self.refused += 1
            return
        from_history = message.offset() < self._history_end.get(message.partition(), -1)
        try:
            self.on_payload(bytes(payload), from_history)
        except Exception as exc:  # noqa: BLE001 - one bad report must not end the tail
            self._failed(exc, "applying a report failed")
            return
        self.received += 1
        if self.received == 1:
            log.info("router feedback tail: first report (partition %d, offset %d, %s)",
                     message.partition(), message.offset(),
                     "history" if from_history else "live")

    def _failed(self, exc, what: str) -> None:
        self.errors += 1
        text = f"{what}: {exc}"
        if text != self.last_error:   # each new reason once, not once a poll
            log.warning("router feedback tail: %s", text)
        self.last_error = text
