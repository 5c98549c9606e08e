"""The plain job of ``plain_job.py`` with the streamplace hook: learned placement + IAWP executor.

Each record of the ``tasks`` topic is an Avro TaskEvent; a map runs the task's whole stage DAG
(``workload.apps.run_task``) wherever Flink placed the map's instances, and writes a TaskResult
exactly-once to ``results``. ``hooked_job.py`` is the same job with the streamplace hook; the diff
between the two files is the documentation of the hook::

    diff examples/plain_job.py examples/hooked_job.py

Run::

    flink run -d -py examples/hooked_job.py -- --bootstrap-servers 127.0.0.1:9092 \\
        --connector-jar .streamplace/jars/flink/flink-sql-connector-kafka-5.0.0-2.2.jar \\
        --service-url http://127.0.0.1:8471
"""

import argparse
import os
import time

from pyflink.common import ByteArraySchema, Types, WatermarkStrategy
from pyflink.datastream import MapFunction, StreamExecutionEnvironment
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import (KafkaOffsetsInitializer,
                                                 KafkaRecordSerializationSchema, KafkaSink,
                                                 KafkaSource)


class RunTask(MapFunction):
    """TaskEvent bytes -> TaskResult bytes, running the task's stages one after the other."""

    def open(self, runtime_context):
        from workload.apps import run_task
        from workload.codec import decode, encode
        self.run_task, self.decode, self.encode = run_task, decode, encode
        self.node_id = os.environ.get("STREAMPLACE_NODE_ID", "unknown")

    def map(self, value):
        task = self.decode("TaskEvent", bytes(value))
        started = int(time.time() * 1000)
        outputs = self.run_task(task["app_id"], int(task["input_size"]), seed=0)
        finished = int(time.time() * 1000)
        return self.encode("TaskResult", {
            "task_id": task["task_id"], "app_id": task["app_id"], "node_id": self.node_id,
            "status": "OK", "submitted_at_ms": task["submitted_at_ms"],
            "started_at_ms": started, "finished_at_ms": finished, "stage_timings": [],
            "output_digest": ",".join(outputs)[:16], "error": None})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--connector-jar", required=True)
    parser.add_argument("--service-url", default="")  # used by the hooked job only
    args = parser.parse_args()

    env = StreamExecutionEnvironment.get_execution_environment()
    env.add_jars(f"file://{os.path.abspath(args.connector_jar)}")
    env.enable_checkpointing(2000)
    source = (KafkaSource.builder().set_bootstrap_servers(args.bootstrap_servers)
              .set_topics("tasks").set_group_id("example-job")
              .set_starting_offsets(KafkaOffsetsInitializer.earliest())
              .set_value_only_deserializer(ByteArraySchema()).build())
    tasks = env.from_source(source, WatermarkStrategy.no_watermarks(), "tasks").uid("tasks")

    from pyflink_jobs.hook import StreamplaceHook
    hook = StreamplaceHook.create(args.bootstrap_servers, service_url=args.service_url)
    results = hook.apply(env, tasks)

    results.sink_to(KafkaSink.builder().set_bootstrap_servers(args.bootstrap_servers)
                    .set_record_serializer(KafkaRecordSerializationSchema.builder()
                                           .set_topic("results")
                                           .set_value_serialization_schema(ByteArraySchema())
                                           .build())
                    .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
                    .set_transactional_id_prefix("example-job")
                    .set_property("transaction.timeout.ms", "600000").build()).uid("results")
    env.execute("example-job")


if __name__ == "__main__":
    main()
