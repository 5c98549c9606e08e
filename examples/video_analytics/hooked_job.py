"""The job of ``plain_job.py`` with the streamplace hook: each clip is analysed on the
TaskManager the learned policy picks for its application (``task_type=application``) and size;
clips that cannot be decoded or analysed go to the dead-letter topic. The difference from the
plain job is three lines::

    diff examples/video_analytics/plain_job.py examples/video_analytics/hooked_job.py

Run::

    flink run -d -py examples/video_analytics/hooked_job.py -- --bootstrap-servers 127.0.0.1:9092 \\
        --connector-jar .streamplace/jars/flink/flink-sql-connector-kafka-5.0.0-2.2.jar
"""

import argparse
import json
import os

from pyflink.common import ByteArraySchema, SimpleStringSchema, Types, WatermarkStrategy
from pyflink.datastream import CheckpointingMode, MapFunction, StreamExecutionEnvironment
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import (KafkaOffsetsInitializer,
                                                 KafkaRecordSerializationSchema, KafkaSink,
                                                 KafkaSource)


class AnalyseClip(MapFunction):
    """TaskEvent bytes -> the application's answer on the clip the event carries (JSON)."""

    def open(self, runtime_context):
        import torch
        torch.set_num_threads(1)

    def map(self, value):
        from workload.apps.registry import run_task, summarise_output, task_frames_from_payload
        from workload.codec import decode
        event = decode("TaskEvent", bytes(value))
        frames = task_frames_from_payload(event["app_id"], event["payload"])
        outputs = run_task(event["app_id"], event["input_size"], seed=0, frames=frames)
        return json.dumps({"task_id": event["task_id"], "app_id": event["app_id"],
                           "answer": summarise_output(event["app_id"], outputs)},
                          sort_keys=True)


def application(value) -> str:
    """The task type the placement policy sees: the event's application."""
    from workload.codec import decode
    return decode("TaskEvent", bytes(value))["app_id"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--connector-jar", required=True)
    parser.add_argument("--input-topic", default="clips")
    parser.add_argument("--output-topic", default="clip-answers")
    parser.add_argument("--dead-letter-topic", default="dead-letter")  # used with the hook
    parser.add_argument("--job-name", default="analyse-clips")
    args = parser.parse_args()

    env = StreamExecutionEnvironment.get_execution_environment()
    env.add_jars(f"file://{os.path.abspath(args.connector_jar)}")
    env.enable_checkpointing(1000, CheckpointingMode.EXACTLY_ONCE)
    source = (KafkaSource.builder().set_bootstrap_servers(args.bootstrap_servers)
              .set_topics(args.input_topic).set_group_id(args.job_name)
              .set_starting_offsets(KafkaOffsetsInitializer.earliest())
              .set_property("isolation.level", "read_committed")
              .set_value_only_deserializer(ByteArraySchema()).build())
    clips = env.from_source(source, WatermarkStrategy.no_watermarks(), "clips").uid("clips")

    from pyflink_jobs.hook import StreamplaceHook
    hook = StreamplaceHook.create(args.bootstrap_servers, dead_letter_topic=args.dead_letter_topic)
    answers = hook.apply(env, clips, AnalyseClip(), output_type=Types.STRING(), task_type=application)

    answers.sink_to(KafkaSink.builder().set_bootstrap_servers(args.bootstrap_servers)
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
