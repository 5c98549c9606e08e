"""A job with trivial per-record work, to measure what the hook itself costs.

    flink run -d -py benchmarks/jobs/passthrough_job.py -- --connector-jar ... [--hook]

Strings in from Kafka, ``passthrough`` (the record itself) on 3 instances, strings out
exactly-once. Without ``--hook``: ``rebalance()`` then ``map(passthrough)`` at parallelism 3,
one instance per TaskManager (a slot sharing group that needs one unit of the
``streamplace_router`` resource, of which each TaskManager has one). With ``--hook``: the
same function through the streamplace hook (one pinned executor per TaskManager; the policy from
``STREAMPLACE_HOOK_POLICY``). Used by ``benchmarks/flink_e2e_examples.py --overhead``.
"""

import argparse
import os

from pyflink.common import Configuration, SimpleStringSchema, Types, WatermarkStrategy
from pyflink.datastream import (BroadcastProcessFunction, CheckpointingMode,
                                StreamExecutionEnvironment)
from pyflink.datastream.state import MapStateDescriptor
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import (KafkaOffsetsInitializer,
                                                 KafkaRecordSerializationSchema, KafkaSink,
                                                 KafkaSource)


def passthrough(line: str) -> str:
    return line


class BroadcastPassthrough(BroadcastProcessFunction):
    """``passthrough`` as a two-input Python operator beside a broadcast input, as the hook's
    router is (``--plain-shape broadcast``: what that shape alone costs)."""

    def process_element(self, value, ctx):
        yield value

    def process_broadcast_element(self, value, ctx):
        pass


class SideOutputPassthrough(BroadcastPassthrough):
    """:class:`BroadcastPassthrough` whose outputs leave on a side output, as a colocated
    router's do (``--plain-shape side-output``)."""

    def __init__(self, tag):
        self.tag = tag

    def process_element(self, value, ctx):
        yield self.tag, value


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--connector-jar", required=True)
    parser.add_argument("--input-topic", required=True)
    parser.add_argument("--output-topic", required=True)
    parser.add_argument("--dead-letter-topic", default="")
    parser.add_argument("--job-name", default="passthrough")
    parser.add_argument("--hook", action="store_true")
    parser.add_argument("--plain-shape", choices=("map", "broadcast", "side-output"),
                        default="map",
                        help="without --hook: the plain map, or the same function as a "
                             "two-input operator beside a (one-record) broadcast input, "
                             "with its outputs on the main output or on a side output")
    parser.add_argument("--python-mode", choices=("process", "thread"), default=None,
                        help="PyFlink's python.execution-mode for this job (default: the "
                             "cluster's, streamplace's flink.python_execution_mode)")
    args = parser.parse_args()
    config = Configuration()
    if args.python_mode:
        config.set_string("python.execution-mode", args.python_mode)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.add_jars(f"file://{os.path.abspath(args.connector_jar)}")
    env.enable_checkpointing(1000, CheckpointingMode.EXACTLY_ONCE)
    source = (KafkaSource.builder().set_bootstrap_servers(args.bootstrap_servers)
              .set_topics(args.input_topic).set_group_id(args.job_name)
              .set_starting_offsets(KafkaOffsetsInitializer.earliest())
              .set_property("isolation.level", "read_committed")
              .set_value_only_deserializer(SimpleStringSchema()).build())
    lines = env.from_source(source, WatermarkStrategy.no_watermarks(), "lines").uid("lines")
    if args.hook:
        from pyflink_jobs.hook import StreamplaceHook
        hook = StreamplaceHook.create(args.bootstrap_servers,
                                      dead_letter_topic=args.dead_letter_topic)
        out = hook.apply(env, lines, passthrough, output_type=Types.STRING())
    else:
        # one map instance per TaskManager, as the colocated routers run: the same one unit of
        # the streamplace_router resource per slot (Flink's TASKS load-balance mode alone
        # left all three on one TaskManager in some runs)
        # (with fine-grained resources a default-profile slot takes a share of every external
        # resource, so the default group gets an explicit spec, as the hook gives it)
        from pyflink_jobs.flink_ops import io_slot_sharing_group, router_slot_sharing_group
        env.register_slot_sharing_group(io_slot_sharing_group())
        if args.plain_shape == "map":
            out = lines.rebalance().map(passthrough, output_type=Types.STRING())
        else:
            side = env.from_collection(["x"], type_info=Types.STRING()).broadcast(
                MapStateDescriptor("ignored", Types.STRING(), Types.STRING()))
            if args.plain_shape == "broadcast":
                out = lines.rebalance().connect(side).process(BroadcastPassthrough(),
                                                              output_type=Types.STRING())
            else:
                from pyflink.datastream import OutputTag

                from pyflink_jobs.flink_ops import side_output
                tag = OutputTag("ran-here", Types.STRING())
                routed = lines.rebalance().connect(side).process(
                    SideOutputPassthrough(tag), output_type=Types.PICKLED_BYTE_ARRAY())
                routed.set_parallelism(3).slot_sharing_group(router_slot_sharing_group())
                out = side_output(routed, tag)  # as the hook reads it (no identity map)
        if args.plain_shape != "side-output":
            out = out.set_parallelism(3).slot_sharing_group(router_slot_sharing_group())
    out.sink_to(KafkaSink.builder().set_bootstrap_servers(args.bootstrap_servers)
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
