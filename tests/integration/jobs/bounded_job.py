"""A bounded PyFlink job with the hook, as a user writes one for a batch of records: the input is
``env.from_collection`` (bounded), the job must FINISH once every record's output is out.

    flink run -py tests/integration/jobs/bounded_job.py -- --connector-jar ... \\
        --output-topic out --records 200 [--batch] [--operator async]

Outputs go to ``--output-topic`` (exactly-once in streaming mode, which commits on the final
checkpoint; at-least-once in BATCH mode, where there are no checkpoints).
"""

import argparse
import asyncio
import json
import os

from pyflink.common import SimpleStringSchema, Types
from pyflink.datastream import (CheckpointingMode, RuntimeExecutionMode,
                                StreamExecutionEnvironment)
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import KafkaRecordSerializationSchema, KafkaSink


def shout(line: str) -> str:
    record = json.loads(line)
    return json.dumps({"id": record["id"], "text": record["text"].upper()})


async def shout_later(line: str) -> str:
    await asyncio.sleep(0.001)
    return shout(line)


def records(count: int) -> list[str]:
    return [json.dumps({"id": i, "text": f"record {i}"}) for i in range(count)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--connector-jar", required=True)
    parser.add_argument("--output-topic", required=True)
    parser.add_argument("--dead-letter-topic", default="")
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--batch", action="store_true", help="execution.runtime-mode BATCH")
    parser.add_argument("--operator", choices=("map", "async"), default="map")
    parser.add_argument("--plain", action="store_true", help="map(shout) without the hook")
    parser.add_argument("--job-name", default="bounded")
    args = parser.parse_args()

    env = StreamExecutionEnvironment.get_execution_environment()
    env.add_jars(f"file://{os.path.abspath(args.connector_jar)}")
    if args.batch:
        env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    else:
        env.enable_checkpointing(1000, CheckpointingMode.EXACTLY_ONCE)
    lines = env.from_collection(records(args.records), type_info=Types.STRING())

    if args.plain:
        out = lines.map(shout, output_type=Types.STRING())
    else:
        from pyflink_jobs.hook import StreamplaceHook
        hook = StreamplaceHook.create(args.bootstrap_servers,
                                      dead_letter_topic=args.dead_letter_topic)
        out = hook.apply(env, lines, shout if args.operator == "map" else shout_later,
                         output_type=Types.STRING())

    guarantee = DeliveryGuarantee.AT_LEAST_ONCE if args.batch else DeliveryGuarantee.EXACTLY_ONCE
    out.sink_to(KafkaSink.builder().set_bootstrap_servers(args.bootstrap_servers)
                .set_record_serializer(KafkaRecordSerializationSchema.builder()
                                       .set_topic(args.output_topic)
                                       .set_value_serialization_schema(SimpleStringSchema())
                                       .build())
                .set_delivery_guarantee(guarantee)
                .set_transactional_id_prefix(args.job_name)
                .set_property("transaction.timeout.ms", "600000").build())
    env.execute(args.job_name)


if __name__ == "__main__":
    main()
