"""The job of ``plain_job.py`` with the streamplace hook: each review's async model call runs on
the TaskManager the learned policy picks, awaited together with up to 31 other in-flight
reviews there; reviews the function raises on go to the dead-letter topic. The function's
``open``/``close`` run once per executor instance and its ``timeout`` answers a call that takes
longer than ``workload.operators.ASYNC_TIMEOUT_S`` (60 s; the plain job's ``unordered_wait``
gave 30 s).

The difference from the plain job is three lines::

    diff examples/async_scoring/plain_job.py examples/async_scoring/hooked_job.py

Run::

    flink run -d -py examples/async_scoring/hooked_job.py -- --bootstrap-servers 127.0.0.1:9092 \\
        --connector-jar .streamplace/jars/flink/flink-sql-connector-kafka-5.0.0-2.2.jar
"""

import argparse
import asyncio
import hashlib
import json
import os

from pyflink.common import SimpleStringSchema, Time, Types, WatermarkStrategy
from pyflink.datastream import (AsyncDataStream, AsyncFunction, CheckpointingMode,
                                StreamExecutionEnvironment)
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import (KafkaOffsetsInitializer,
                                                 KafkaRecordSerializationSchema, KafkaSink,
                                                 KafkaSource)


class ScoreReview(AsyncFunction):
    """A review (JSON) -> [its sentiment score (JSON)], from an (emulated) remote model."""

    def open(self, runtime_context):
        # a real job creates its model client here
        self.salt = b"sentiment-v1"

    def close(self):
        # and closes it here
        self.salt = None

    async def async_invoke(self, line):
        review = json.loads(line)
        words = review["text"].lower().split()
        await asyncio.sleep(0.005 + 0.0002 * len(words))  # the server's round trip
        polarity = [hashlib.blake2b(word.encode() + self.salt, digest_size=2).digest()[0] - 127.5
                    for word in words]
        score = sum(polarity) / (127.5 * max(1, len(words)))
        return [json.dumps({"id": review["id"], "words": len(words), "score": round(score, 4),
                            "label": "positive" if score >= 0 else "negative"},
                           sort_keys=True)]

    def timeout(self, line):
        # a default answer in case the remote model does not answer in time
        return [json.dumps({"id": json.loads(line)["id"], "score": None, "label": None},
                           sort_keys=True)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--connector-jar", required=True)
    parser.add_argument("--input-topic", default="reviews")
    parser.add_argument("--output-topic", default="review-scores")
    parser.add_argument("--dead-letter-topic", default="dead-letter")  # used with the hook
    parser.add_argument("--job-name", default="score-reviews")
    args = parser.parse_args()

    env = StreamExecutionEnvironment.get_execution_environment()
    env.add_jars(f"file://{os.path.abspath(args.connector_jar)}")
    env.enable_checkpointing(1000, CheckpointingMode.EXACTLY_ONCE)
    source = (KafkaSource.builder().set_bootstrap_servers(args.bootstrap_servers)
              .set_topics(args.input_topic).set_group_id(args.job_name)
              .set_starting_offsets(KafkaOffsetsInitializer.earliest())
              .set_property("isolation.level", "read_committed")
              .set_value_only_deserializer(SimpleStringSchema()).build())
    reviews = env.from_source(source, WatermarkStrategy.no_watermarks(), "reviews").uid("reviews")

    from pyflink_jobs.hook import StreamplaceHook
    hook = StreamplaceHook.create(args.bootstrap_servers, dead_letter_topic=args.dead_letter_topic)
    scores = hook.apply(env, reviews, ScoreReview(), output_type=Types.STRING())

    scores.sink_to(KafkaSink.builder().set_bootstrap_servers(args.bootstrap_servers)
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
