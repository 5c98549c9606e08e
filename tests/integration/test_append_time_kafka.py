"""Topics created with the broker's append time (``create_topics(topic_config=...)``) and
``read_topic(stamp_appended=True)`` on the real broker: each record carries when the broker
wrote it, which the benchmarks use for the rate through a job apart from its commits; a topic
with producers' own timestamps gives None rather than a wrong time."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, ConfigResource

from streamplace.kafka_io import produce_raw, read_topic
from streamplace.topics import create_topics

APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}


def test_records_carry_the_brokers_append_time(stack_config, kafka_broker):
    topic = f"append-time-{time.time_ns()}"
    assert create_topics(stack_config, [topic], partitions=1, topic_config=APPEND_TIME) == [topic]
    admin = AdminClient({"bootstrap.servers": stack_config.kafka.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    described = admin.describe_configs([resource])[resource].result(timeout=30)
    assert described["message.timestamp.type"].value == "LogAppendTime"
    before = time.time()
    assert produce_raw(stack_config, topic, [b"a", b"b", b"c"]).delivered == 3
    after = time.time()
    records = read_topic(stack_config, topic, None, expected=3, timeout_s=30,
                         stamp_appended=True).records
    assert [r["value"] for r in records] == [b"a", b"b", b"c"]
    stamps = [r["_appended_s"] for r in records]
    # the broker's clock is this machine's; ms resolution
    assert all(before - 0.01 <= s <= after + 0.01 for s in stamps), (before, stamps, after)
    assert stamps == sorted(stamps)


def test_producer_timestamps_are_not_taken_for_append_times(stack_config, kafka_broker):
    topic = f"create-time-{time.time_ns()}"
    create_topics(stack_config, [topic], partitions=1)
    produce_raw(stack_config, topic, [b"x"])
    records = read_topic(stack_config, topic, None, expected=1, timeout_s=30,
                         stamp_appended=True).records
    assert records == [{"value": b"x", "_appended_s": None}]
