"""A router's feedback tail (pyflink_jobs/feedback_tail.py) on the real broker: it reads back the
last messages of every partition as history, then what is produced after it started, and it
commits nothing (a second tail reads the same history)."""

from __future__ import annotations

import time

from pyflink_jobs.feedback_tail import FeedbackTail, FeedbackTailSettings
from streamplace.kafka_io import produce_raw
from streamplace.topics import create_topics


def _started(settings):
    """A tail whose payloads collect in its ``got`` list."""
    got = []
    tail = FeedbackTail(settings, lambda payload, history: got.append((payload, history)))
    tail.got = got
    return tail.start()


def _wait_for(tail, count, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while len(tail.got) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    taken = list(tail.got)
    del tail.got[:len(taken)]
    return taken


def test_the_tail_reads_history_then_live_reports_and_commits_nothing(stack_config,
                                                                     kafka_broker):
    topic = "tail-feedback"
    create_topics(stack_config, [topic], partitions=2)
    for partition in (0, 1):
        report = produce_raw(stack_config, topic,
                             [f"old-{partition}-{i}".encode() for i in range(5)],
                             partition=partition)
        assert report.delivered == 5
    settings = FeedbackTailSettings(stack_config.kafka.bootstrap_servers, topic,
                                    history_messages=3)
    tail = _started(settings)
    try:
        history = _wait_for(tail, 6)
        assert sorted(history) == sorted((f"old-{p}-{i}".encode(), True)
                                         for p in (0, 1) for i in (2, 3, 4))
        produce_raw(stack_config, topic, [b"new-0"], partition=0)
        produce_raw(stack_config, topic, [b"new-1"], partition=1)
        live = _wait_for(tail, 2)
        assert sorted(live) == [(b"new-0", False), (b"new-1", False)]
        assert tail.refused == tail.errors == 0
    finally:
        tail.stop(timeout_s=10)
    assert not tail.running
    again = _started(FeedbackTailSettings(stack_config.kafka.bootstrap_servers, topic,
                                          history_messages=1))
    try:   # nothing was committed: a new tail starts from the topic's end again
        assert sorted(_wait_for(again, 2)) == [(b"new-0", True), (b"new-1", True)]
    finally:
        again.stop(timeout_s=10)


def test_a_tail_started_on_an_empty_topic_reads_what_comes_after(stack_config, kafka_broker):
    topic = "tail-feedback-empty"
    create_topics(stack_config, [topic], partitions=2)
    tail = _started(FeedbackTailSettings(stack_config.kafka.bootstrap_servers, topic))
    try:
        deadline = time.monotonic() + 30
        while not tail._history_end and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tail._history_end == {0: 0, 1: 0}
        time.sleep(1.0)
        for partition in (0, 1):
            produce_raw(stack_config, topic, [f"live-{partition}".encode()], partition=partition)
        assert sorted(_wait_for(tail, 2)) == [(b"live-0", False), (b"live-1", False)]
    finally:
        tail.stop(timeout_s=10)
