"""The first end-to-end streamplace job: Kafka tasks -> Avro decode -> executor -> Kafka results.

::

    tasks (Kafka, Avro bytes + offset)           the Table API Kafka source with the raw format,
        |                                        so each record keeps its partition and offset
    DecodeTaskEvents  --side output-->  dead-letter (Kafka, exactly-once): reason, offset, raw bytes
        |
    executor (AsyncFunction, unordered_wait, capacity N) pinned to one TaskManager when asked
        |
    results (Kafka, TaskResult, exactly-once: checkpointing + transactions; read_committed)

The executor here is the trivial one of the foundation issue (a checksum over the task's input,
repeated by the node's work multiplier); the IAWP executor replaces it later. Every operator has
a stable uid so a savepoint survives resubmission.

Run it against a streamplace cluster with ``streamplace job submit`` (which fills in the broker,
topics and connector jar), or by hand::

    flink run -d -py pyflink_jobs/task_pipeline.py -- --bootstrap-servers 127.0.0.1:9092 \\
        --connector-jar /path/to/flink-sql-connector-kafka-5.0.0-2.2.jar
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import time
from dataclasses import dataclass, fields

__all__ = ["PipelineSettings", "DecodeTaskEvents", "ChecksumExecutor", "build_pipeline", "main",
           "executor_slot_sharing_group", "parse_plan", "parse_retired"]

DEAD_LETTER_TAG_NAME = "dead-letter"


@dataclass
class PipelineSettings:
    """Everything the job needs; each field is also a ``--flag`` of :func:`main`."""

    bootstrap_servers: str = "127.0.0.1:9092"
    connector_jar: str = ""
    topic_tasks: str = "tasks"
    topic_results: str = "results"
    topic_dead_letter: str = "dead-letter"
    group_id: str = "streamplace-task-pipeline"
    job_name: str = "streamplace-task-pipeline"
    checkpoint_interval_ms: int = 2000
    transaction_timeout_ms: int = 600_000
    transactional_id_prefix: str = "streamplace-task-pipeline"
    executor_capacity: int = 16
    executor_timeout_s: float = 60.0
    executor_parallelism: int = 1
    source_parallelism: int = 1
    pin_executor_to: str = ""  # a TaskManager / external resource id, or "" for anywhere
    python_bundle_time_ms: int = 20  # PyFlink buffers records per bundle; 1 s by default
    python_bundle_size: int = 1000  # ... and at most this many records (PyFlink's default)
    # How tasks reach executors:
    #   "single": one executor operator (optionally pinned with pin_executor_to);
    #   "rebalance": Flink's default placement: executor_parallelism unpinned instances fed
    #                round-robin (where the instances land is Flink's slot allocation);
    #   "hook": the streamplace hook (router + one pinned executor per TaskManager).
    placement: str = "single"
    executor: str = "checksum"  # "checksum" (the foundation's trivial one) or "iawp"
    node_scheduler: str = "iawp"  # the IAWP executor's node scheduler
    policy: str = "ldwp"  # the hook's cluster policy ("ldwp" or a placement.policies rule)
    service_url: str = ""
    service_token: str = ""
    plan: str = ""  # "tm_a=2,tm_b=1" (hook); "" = the service's plan, else one per node
    retired: str = ""  # "tm_c=tm_a": tm_c left; its executor operator now runs on tm_a
    cluster_spec: str = "default"
    initial_model: str = ""
    topic_feedback: str = "feedback"
    routing: str = "pinned"  # hook: "pinned" (fine-grained resources) or "rest_partitioner"
    rest_url: str = "http://127.0.0.1:8081"  # hook with rest_partitioner: the JobManager REST


# --------------------------------------------------------------------------------------------
# Operators (module level so the Python workers can unpickle them)
# --------------------------------------------------------------------------------------------

def dead_letter_tag():
    from pyflink.common import Types
    from pyflink.datastream import OutputTag
    return OutputTag(DEAD_LETTER_TAG_NAME, Types.PRIMITIVE_ARRAY(Types.BYTE()))


try:  # The job module must import without pyflink too (docs, unit tests of the helpers).
    from pyflink.datastream import AsyncFunction, ProcessFunction
except ImportError:  # pragma: no cover
    AsyncFunction = ProcessFunction = object  # type: ignore[misc,assignment]


def make_dead_letter(raw: bytes, topic: str, partition: int, offset: int, reason: str,
                     stage: str) -> bytes:
    from workload.codec import encode
    return encode("DeadLetter", {
        "source_topic": topic or "", "partition": int(partition if partition is not None else -1),
        "offset": int(offset if offset is not None else -1), "reason": reason[:2000],
        "raw": bytes(raw or b""), "failed_at_ms": int(time.time() * 1000), "stage": stage})


class DecodeTaskEvents(ProcessFunction):
    """Row(payload, topic, partition, offset) -> decoded TaskEvent dict; undecodable records go
    to the dead-letter side output with the codec's reason, and the job keeps running."""

    def __init__(self):
        self._tag = None
        self._decode = None

    def open(self, runtime_context):
        from workload.codec import CodecError, decode
        self._tag = dead_letter_tag()
        self._decode = decode
        self._codec_error = CodecError

    def process_element(self, value, ctx):
        payload, topic, partition, offset = value[0], value[1], value[2], value[3]
        try:
            event = self._decode("TaskEvent", bytes(payload) if payload is not None else b"")
        except self._codec_error as exc:
            yield self._tag, make_dead_letter(payload, topic, partition, offset, str(exc),
                                              "decode")
            return
        yield event


def parse_plan(text: str) -> dict[str, int]:
    """``"tm_a=2,tm_b=1"`` -> ``{"tm_a": 2, "tm_b": 1}``, with a clear error for bad input."""
    plan = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        node, sep, count = part.partition("=")
        if not sep or not node or not count.strip().isdigit():
            raise ValueError(f"bad plan entry {part!r}: expected node=count, e.g. tm_a=2")
        plan[node.strip()] = int(count)
    return plan


def parse_retired(text: str) -> dict[str, str]:
    """``"tm_c=tm_a"`` -> ``{"tm_c": "tm_a"}`` (retired node -> host node)."""
    retired = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        node, sep, host = part.partition("=")
        if not sep or not node.strip() or not host.strip():
            raise ValueError(f"bad retired entry {part!r}: expected node=host, e.g. tm_c=tm_a")
        retired[node.strip()] = host.strip()
    return retired


class ChecksumExecutor(AsyncFunction):
    """The foundation's trivial executor: a SHA-256 checksum over a deterministic buffer of the
    task's ``input_size`` bytes (capped), done ``STREAMPLACE_WORK_MULTIPLIER`` times, in a thread
    so several tasks are in flight at once (hashlib releases the GIL on large buffers)."""

    MAX_BYTES = 1 << 20

    def __init__(self):
        self.node_id = "unknown"
        self.multiplier = 1.0

    def open(self, runtime_context):
        from workload.codec import encode
        self._encode = encode
        self.node_id = os.environ.get("STREAMPLACE_NODE_ID", "unknown")
        self.multiplier = float(os.environ.get("STREAMPLACE_WORK_MULTIPLIER", "1"))

    def _work(self, event: dict) -> str:
        size = max(1, min(int(event.get("input_size") or 1), self.MAX_BYTES))
        seed = event["task_id"].encode()
        block = (seed * (size // max(1, len(seed)) + 1))[:size]
        digest = b""
        repeats = max(1, round(self.multiplier))
        for _ in range(repeats):
            digest = hashlib.sha256(block + digest).digest()
        return digest.hex()[:16]

    async def async_invoke(self, value):
        started = int(time.time() * 1000)
        loop = asyncio.get_running_loop()
        digest = await loop.run_in_executor(None, self._work, value)
        finished = int(time.time() * 1000)
        return [self._encode("TaskResult", {
            "task_id": value["task_id"], "app_id": value["app_id"], "node_id": self.node_id,
            "status": "OK", "submitted_at_ms": int(value["submitted_at_ms"]),
            "started_at_ms": started, "finished_at_ms": finished,
            "stage_timings": [{"stage": "checksum", "unit": "cpu:0",
                               "started_at_ms": started, "finished_at_ms": finished}],
            "output_digest": digest, "error": None})]


# --------------------------------------------------------------------------------------------
# Wiring
# --------------------------------------------------------------------------------------------

#: Resources of one executor instance and of the I/O operators. With fine-grained resource
#: management every slot sharing group needs an explicit spec (else default slots eat the
#: TaskManagers' external resources); what pins an executor is the one unit of its node's
#: external resource.
EXECUTOR_CPU, EXECUTOR_HEAP_MB, EXECUTOR_MANAGED_MB = 0.1, 32, 16
IO_CPU, IO_HEAP_MB, IO_MANAGED_MB = 0.1, 64, 32


def executor_slot_sharing_group(node_id: str):
    """A slot sharing group whose every slot needs one unit of ``node_id``'s external resource,
    so every instance of an operator in it runs on that TaskManager."""
    from pyflink.datastream.slot_sharing_group import SlotSharingGroup
    return (SlotSharingGroup.builder(f"executor-{node_id}")
            .set_cpu_cores(EXECUTOR_CPU).set_task_heap_memory_mb(EXECUTOR_HEAP_MB)
            .set_managed_memory_mb(EXECUTOR_MANAGED_MB)
            .set_external_resource(node_id, 1.0).build())


def io_slot_sharing_group(name: str = "default"):
    from pyflink.datastream.slot_sharing_group import SlotSharingGroup
    return (SlotSharingGroup.builder(name).set_cpu_cores(IO_CPU)
            .set_task_heap_memory_mb(IO_HEAP_MB).set_managed_memory_mb(IO_MANAGED_MB).build())


def kafka_bytes_sink(settings: PipelineSettings, topic: str, prefix: str):
    from pyflink.common import ByteArraySchema
    from pyflink.datastream.connectors.base import DeliveryGuarantee
    from pyflink.datastream.connectors.kafka import KafkaRecordSerializationSchema, KafkaSink
    return (KafkaSink.builder()
            .set_bootstrap_servers(settings.bootstrap_servers)
            .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(topic)
                                   .set_value_serialization_schema(ByteArraySchema()).build())
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .set_transactional_id_prefix(prefix)
            .set_property("transaction.timeout.ms", str(settings.transaction_timeout_ms))
            .build())


def _tasks_table_ddl(settings: PipelineSettings) -> str:
    # The raw format hands us the Avro bytes untouched; the metadata columns give the dead-letter
    # records their partition and offset (the DataStream KafkaSource's value-only deserializer
    # drops them). group-offsets + earliest: a resubmitted job continues where it committed.
    return f"""
        CREATE TEMPORARY TABLE streamplace_tasks (
            `payload` BYTES,
            `topic` STRING METADATA VIRTUAL,
            `partition` INT METADATA VIRTUAL,
            `offset` BIGINT METADATA VIRTUAL
        ) WITH (
            'connector' = 'kafka',
            'topic' = '{settings.topic_tasks}',
            'properties.bootstrap.servers' = '{settings.bootstrap_servers}',
            'properties.group.id' = '{settings.group_id}',
            'properties.isolation.level' = 'read_committed',
            'properties.auto.offset.reset' = 'earliest',
            'scan.startup.mode' = 'group-offsets',
            'format' = 'raw'
        )"""


def build_pipeline(env, t_env, settings: PipelineSettings) -> None:
    """Add the pipeline's operators to ``env`` (see the module docstring)."""
    from pyflink.common import Time, Types
    from pyflink.datastream import AsyncDataStream

    env.register_slot_sharing_group(io_slot_sharing_group())
    if settings.placement == "rebalance" and not settings.pin_executor_to:
        env.register_slot_sharing_group(io_slot_sharing_group("executors"))
    t_env.execute_sql(_tasks_table_ddl(settings))
    rows = t_env.to_data_stream(t_env.from_path("streamplace_tasks"))

    if settings.placement == "hook":
        from pyflink_jobs.hook import HookSettings, StreamplaceHook
        hook = StreamplaceHook(HookSettings(
            bootstrap_servers=settings.bootstrap_servers, feedback_topic=settings.topic_feedback,
            service_url=settings.service_url, service_token=settings.service_token,
            cluster_spec=settings.cluster_spec, plan=parse_plan(settings.plan),
            retired=parse_retired(settings.retired),
            policy=settings.policy, initial_model=settings.initial_model,
            scheduler=settings.node_scheduler, executor_capacity=settings.executor_capacity,
            executor_timeout_s=settings.executor_timeout_s, executor=settings.executor,
            routing=settings.routing, rest_url=settings.rest_url, job_name=settings.job_name))
        executed = hook.apply(env, rows)
        dead_letters = hook.dead_letters
    elif settings.placement in ("single", "rebalance"):
        decoded = (rows.process(DecodeTaskEvents(), output_type=Types.PICKLED_BYTE_ARRAY())
                   .name("decode-task-events").uid("decode-task-events"))
        dead_letters = decoded.get_side_output(dead_letter_tag())
        if settings.placement == "rebalance":
            decoded = decoded.rebalance()
        executed = AsyncDataStream.unordered_wait(
            decoded, _make_executor(settings),
            Time.milliseconds(int(settings.executor_timeout_s * 1000)),
            capacity=settings.executor_capacity, output_type=Types.PRIMITIVE_ARRAY(Types.BYTE()))
        executed = executed.name("executor").uid("executor").set_parallelism(
            settings.executor_parallelism)
        if settings.pin_executor_to:
            executed = executed.slot_sharing_group(
                executor_slot_sharing_group(settings.pin_executor_to))
        elif settings.placement == "rebalance":
            executed = executed.slot_sharing_group(io_slot_sharing_group("executors"))
    else:
        raise ValueError(f"placement must be 'single', 'rebalance' or 'hook', got "
                         f"{settings.placement!r}")

    (executed.sink_to(kafka_bytes_sink(settings, settings.topic_results,
                                       settings.transactional_id_prefix + "-results"))
     .name("results-sink").uid("results-sink").slot_sharing_group("default"))
    (dead_letters.sink_to(kafka_bytes_sink(settings, settings.topic_dead_letter,
                                           settings.transactional_id_prefix + "-dlq"))
     .name("dead-letter-sink").uid("dead-letter-sink").slot_sharing_group("default"))


def _make_executor(settings: PipelineSettings):
    if settings.executor == "checksum":
        return ChecksumExecutor()
    if settings.executor == "iawp":
        from pyflink_jobs.executor_function import ExecutorFunctionSettings, NodeExecutorFunction
        return NodeExecutorFunction(settings.pin_executor_to, ExecutorFunctionSettings(
            bootstrap_servers=settings.bootstrap_servers, feedback_topic=settings.topic_feedback,
            scheduler=settings.node_scheduler))
    raise ValueError(f"executor must be 'checksum' or 'iawp', got {settings.executor!r}")


def create_environments(settings: PipelineSettings):
    from pyflink.common import Configuration
    from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

    config = Configuration()
    config.set_string("python.fn-execution.bundle.time", str(settings.python_bundle_time_ms))
    config.set_string("python.fn-execution.bundle.size", str(settings.python_bundle_size))
    # Python workers get no managed-memory cap: torch-based executors need more than a
    # slot's managed share.
    config.set_string("python.fn-execution.memory.managed", "false")
    config.set_string("table.exec.uid.generation", "ALWAYS")
    config.set_string("pipeline.name", settings.job_name)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    if settings.connector_jar:
        env.add_jars(f"file://{os.path.abspath(settings.connector_jar)}")
    env.set_parallelism(settings.source_parallelism)
    env.enable_checkpointing(settings.checkpoint_interval_ms, CheckpointingMode.EXACTLY_ONCE)
    t_env = StreamTableEnvironment.create(env)
    return env, t_env


def parse_args(argv: list[str] | None = None) -> PipelineSettings:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for f in fields(PipelineSettings):
        kind = {"int": int, "float": float}.get(str(f.type), str)
        parser.add_argument("--" + f.name.replace("_", "-"), type=kind, default=f.default)
    return PipelineSettings(**vars(parser.parse_args(argv)))


def main(argv: list[str] | None = None) -> None:
    settings = parse_args(argv)
    env, t_env = create_environments(settings)
    build_pipeline(env, t_env, settings)
    env.execute(settings.job_name)  # returns at once under `flink run -d`


if __name__ == "__main__":
    main()
