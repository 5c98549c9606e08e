"""A router's own reader of the feedback topic (pyflink_jobs/feedback_tail.py), against a
scripted consumer (the real broker: tests/integration/test_feedback_tail_kafka.py), and the
router function that drains it between records."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from pyflink_jobs import feedback_tail
from pyflink_jobs.feedback_tail import (MAX_FEEDBACK_BYTES, FeedbackTail,
                                        FeedbackTailSettings)
from workload.codec import encode

from flink_fakes import FakeContext
from test_router import NODES, feedback


class Message:
    def __init__(self, partition, offset, value, error=None):
        self._p, self._o, self._v, self._e = partition, offset, value, error

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def value(self):
        return self._v

    def error(self):
        return self._e


class ScriptedConsumer:
    """``watermarks``: partition -> (low, high); ``batches``: what each consume returns, then
    nothing; ``missing_polls``: how many list_topics calls find no topic first."""

    def __init__(self, watermarks, batches=(), missing_polls=0):
        self.watermarks, self.batches = watermarks, list(batches)
        self.missing_polls = missing_polls
        self.assigned, self.closed, self.configs = None, False, []

    def list_topics(self, topic, timeout):
        if self.missing_polls:
            self.missing_polls -= 1
            return SimpleNamespace(topics={})
        return SimpleNamespace(topics={topic: SimpleNamespace(
            error=None, partitions={p: None for p in self.watermarks})})

    def get_watermark_offsets(self, tp, timeout):
        return self.watermarks[tp.partition]

    def assign(self, partitions):
        self.assigned = {tp.partition: tp.offset for tp in partitions}

    def consume(self, num_messages, timeout):
        if self.batches:
            return self.batches.pop(0)
        time.sleep(0.005)
        return []

    def close(self):
        self.closed = True


def _run(consumer, settings=None, until=lambda tail: False, wait_s=5.0, on_payload=None):
    """The tail over ``consumer`` until ``until(tail)``; what it handed on is ``tail.got``."""
    settings = settings or FeedbackTailSettings("broker:9092", "feedback", history_messages=3)
    got = []

    def factory(config):
        consumer.configs.append(config)
        return consumer
    tail = FeedbackTail(settings, on_payload or (lambda p, h: got.append((p, h))),
                        consumer_factory=factory).start()
    tail.got = got
    deadline = time.monotonic() + wait_s
    while not until(tail) and time.monotonic() < deadline:
        time.sleep(0.01)
    tail.stop(timeout_s=5)
    return tail


def test_it_reads_back_the_last_messages_of_each_partition_and_marks_them_as_history():
    consumer = ScriptedConsumer({0: (0, 10), 1: (4, 5)}, batches=[
        [Message(0, 7, b"old-0"), Message(1, 4, b"old-1"), Message(0, 10, b"new-0")],
        [Message(1, 5, b"new-1")]])
    tail = _run(consumer, until=lambda t: t.received == 4)
    # history_messages 3: partition 0 from offset 7; partition 1 has only one message kept
    assert consumer.assigned == {0: 7, 1: 4}
    assert tail.got == [(b"old-0", True), (b"old-1", True), (b"new-0", False),
                        (b"new-1", False)]
    assert consumer.closed and not tail.running


def test_it_commits_nothing_under_a_group_of_its_own():
    consumer = ScriptedConsumer({0: (0, 0)})
    _run(consumer, until=lambda t: consumer.assigned is not None)
    [config] = consumer.configs
    assert config["enable.auto.commit"] is False
    assert config["group.id"].startswith("streamplace-router-tail-")
    other = ScriptedConsumer({0: (0, 0)})
    _run(other, until=lambda t: other.assigned is not None)
    assert other.configs[0]["group.id"] != config["group.id"]   # never one shared group


@pytest.mark.parametrize("payload", [b"x" * (MAX_FEEDBACK_BYTES + 1), None, "text"],
                         ids=["over the limit", "tombstone", "not bytes"])
def test_what_is_too_large_or_not_bytes_is_refused_and_counted(payload):
    consumer = ScriptedConsumer({0: (0, 0)}, batches=[[Message(0, 0, payload),
                                                       Message(0, 1, b"ok")]])
    tail = _run(consumer, until=lambda t: t.received == 1)
    assert tail.refused == 1 and tail.got == [(b"ok", False)]


def test_an_exception_of_the_receiver_is_counted_and_the_tail_goes_on():
    consumer = ScriptedConsumer({0: (0, 0)}, batches=[
        [Message(0, i, f"m{i}".encode()) for i in range(3)]])
    got = []

    def receive(payload, from_history):
        if payload == b"m1":
            raise ValueError("a report the router could not apply")
        got.append(payload)
    tail = _run(consumer, until=lambda t: len(got) == 2, on_payload=receive)
    assert got == [b"m0", b"m2"] and tail.received == 2
    assert tail.errors == 1 and "could not apply" in tail.last_error


def test_a_topic_that_is_not_there_yet_is_waited_for(monkeypatch):
    monkeypatch.setattr(feedback_tail, "RETRY_S", 0.01)
    consumer = ScriptedConsumer({0: (2, 2)}, batches=[[Message(0, 2, b"live")]],
                                missing_polls=3)
    tail = _run(consumer, until=lambda t: t.received == 1)
    assert consumer.assigned == {0: 2}
    assert tail.errors == 3 and "not found" in tail.last_error
    assert tail.got == [(b"live", False)]


def test_message_errors_are_counted_and_the_tail_keeps_reading():
    consumer = ScriptedConsumer({0: (0, 0)}, batches=[
        [Message(0, 0, None, error="broker says no")], [Message(0, 1, b"after")]])
    tail = _run(consumer, until=lambda t: t.received == 1)
    assert tail.errors == 1 and "broker says no" in tail.last_error
    assert tail.got == [(b"after", False)]


def test_a_consumer_that_cannot_be_made_leaves_the_router_without_feedback():
    def refuse(config):
        raise RuntimeError("no librdkafka here")
    got = []
    tail = FeedbackTail(FeedbackTailSettings("broker:9092", "feedback"),
                        lambda p, h: got.append(p), consumer_factory=refuse).start()
    tail.stop(timeout_s=5)
    assert not tail.running and "no librdkafka here" in tail.last_error and got == []


def test_stop_does_not_wait_for_a_broker_request_and_the_thread_ends_after_it():
    # no broker: the metadata request blocks until its timeout; a bounded job's end (the
    # router's close) must not wait for it
    release = threading.Event()

    class Hanging(ScriptedConsumer):
        def list_topics(self, topic, timeout):
            release.wait(10)
            return SimpleNamespace(topics={})

    consumer = Hanging({0: (0, 0)})
    tail = FeedbackTail(FeedbackTailSettings("broker:9092", "feedback"), lambda p, h: None,
                        consumer_factory=lambda config: consumer).start()
    time.sleep(0.05)
    started = time.monotonic()
    tail.stop(timeout_s=0.2)
    assert time.monotonic() - started < 1.0 and tail.running
    release.set()   # the request returns: the thread sees the stop and closes the consumer
    tail._thread.join(5)
    assert not tail.running and consumer.closed


@pytest.mark.parametrize("changes", [{"history_messages": -1}, {"history_messages": 2.5},
                                     {"history_messages": True}, {"topic": ""},
                                     {"bootstrap_servers": ""}])
def test_bad_settings_are_refused(changes):
    values = {"bootstrap_servers": "broker:9092", "topic": "feedback", **changes}
    with pytest.raises(ValueError):
        FeedbackTailSettings(**values)


class HandTail:
    """The router function's tail, with the payloads handed over by the test."""

    def __init__(self, settings, on_payload):
        self.on_payload, self.stopped = on_payload, False
        self.refused = self.errors = 0

    def start(self):
        return self

    def stop(self):
        self.stopped = True


def test_the_router_applies_the_tails_reports_and_history_retires_nothing(monkeypatch):
    from pyflink_jobs import router_function
    from pyflink_jobs.router import RouterSettings
    from pyflink_jobs.router_function import RouterFunction
    monkeypatch.setattr(router_function, "FeedbackTail", HandTail)
    function = RouterFunction(RouterSettings(nodes=NODES, policy="least_loaded"),
                              feedback=FeedbackTailSettings("broker:9092", "feedback"))
    function.open(FakeContext())
    events = [encode("TaskEvent", {"task_id": f"t{i}", "app_id": "video_synopsis",
                                   "input_size": 4096, "submitted_at_ms": 0})
              for i in range(2)]
    try:
        [(_, first)] = list(function.process_element(events[0], FakeContext()))
        assert first.node == "tm_a"            # nothing reported yet: all idle, the first
        hand = function._tail.on_payload
        # a report of the previous run (history) names t0 done: t0 stays in flight
        hand(encode("NodeFeedback", feedback("tm_a", completed=["t0"])), True)
        hand(encode("NodeFeedback", feedback("tm_b", cpu=0.9)), False)
        hand(encode("NodeFeedback", feedback("tm_c", cpu=0.8)), False)
        hand(b"not avro", False)               # skipped, as a bad broadcast element is
        assert function.router.feedback_records == 3
        assert function.router.in_flight()["tm_a"] == 1
        [(_, second)] = list(function.process_element(events[1], FakeContext()))
        assert second.node == "tm_a"            # tm_b and tm_c reported busy CPUs
        hand(encode("NodeFeedback", feedback("tm_a", completed=["t0"])), False)
        assert function.router.in_flight()["tm_a"] == 1   # t0 retired by the live report
    finally:
        function.close()
    assert function._tail.stopped
