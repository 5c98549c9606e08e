"""The job of ``plain_job.py`` with the streamplace hook: each order is enriched on the TaskManager
the learned policy picks; orders whose enrichment raises go to the dead-letter topic.

The difference from the plain job is three lines::

    diff examples/json_enrich/plain_job.py examples/json_enrich/hooked_job.py

Run::

    flink run -d -py examples/json_enrich/hooked_job.py -- --bootstrap-servers 127.0.0.1:9092 \\
        --connector-jar .streamplace/jars/flink/flink-sql-connector-kafka-5.0.0-2.2.jar
"""

import argparse
import hashlib
import json
import os
import re
from collections import Counter

from pyflink.common import SimpleStringSchema, Types, WatermarkStrategy
from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import (KafkaOffsetsInitializer,
                                                 KafkaRecordSerializationSchema, KafkaSink,
                                                 KafkaSource)


def enrich(line: str) -> str:
    """An order (JSON) -> the order's summary (JSON): totals, note statistics, and a salted
    key-derived customer fingerprint whose cost grows with the note (the CPU-heavy part)."""
    order = json.loads(line)
    words = re.findall(r"[a-z']+", order["note"].lower())
    rounds = 2_000 + 400 * len(words)
    fingerprint = hashlib.pbkdf2_hmac("sha256", order["customer"].encode(), b"orders", rounds)
    total = sum(item["price"] * item["qty"] for item in order["items"])
    return json.dumps({"id": order["id"], "customer": order["customer"],
                       "total": round(total, 2), "items": len(order["items"]),
                       "words": len(words), "top_words": Counter(words).most_common(3),
                       "fingerprint": fingerprint.hex()[:16]}, sort_keys=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--connector-jar", required=True)
    parser.add_argument("--input-topic", default="orders")
    parser.add_argument("--output-topic", default="enriched-orders")
    parser.add_argument("--dead-letter-topic", default="dead-letter")  # used with the hook
    parser.add_argument("--job-name", default="enrich-orders")
    args = parser.parse_args()

    env = StreamExecutionEnvironment.get_execution_environment()
    env.add_jars(f"file://{os.path.abspath(args.connector_jar)}")
    env.enable_checkpointing(1000, CheckpointingMode.EXACTLY_ONCE)
    source = (KafkaSource.builder().set_bootstrap_servers(args.bootstrap_servers)
              .set_topics(args.input_topic).set_group_id(args.job_name)
              .set_starting_offsets(KafkaOffsetsInitializer.earliest())
              .set_property("isolation.level", "read_committed")
              .set_value_only_deserializer(SimpleStringSchema()).build())
    orders = env.from_source(source, WatermarkStrategy.no_watermarks(), "orders").uid("orders")

    from pyflink_jobs.hook import StreamplaceHook
    hook = StreamplaceHook.create(args.bootstrap_servers, dead_letter_topic=args.dead_letter_topic)
    enriched = hook.apply(env, orders, enrich, output_type=Types.STRING())

    enriched.sink_to(KafkaSink.builder().set_bootstrap_servers(args.bootstrap_servers)
                     .set_record_serializer(KafkaRecordSerializationSchema.builder()
                                            .set_topic(args.output_topic)
                                            .set_value_serialization_schema(SimpleStringSchema())
                                            .build())
                     .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
                     .set_transactional_id_prefix(args.job_name)
                     .set_property("transaction.timeout.ms", "600000").build()).uid("sink")
    env.execute(args.job_name)


if __name__ == "__main__":
    main()
