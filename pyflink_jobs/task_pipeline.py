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
import os
from dataclasses import dataclass, fields, replace

from pyflink_jobs.executor_function import (ChecksumExecutor, ExecutorFunctionSettings,
                                            NodeExecutorFunction)
from pyflink_jobs.flink_ops import (dead_letter_tag, executor_slot_sharing_group,
                                    io_slot_sharing_group, kafka_bytes_sink, make_dead_letter)
from pyflink_jobs.hook import (HookSettings, StreamplaceHook, cluster_task_limits, parse_plan,
                               parse_retired)
from pyflink_jobs.tenant_quotas import parse_tenant_shares
from workload.limits import TaskLimits

__all__ = ["PipelineSettings", "DecodeTaskEvents", "build_pipeline", "main", "parse_plan",
           "parse_retired", "HOOK_FIELD_NAMES"]

#: The hook's settings come from the pipeline's: same-named fields, and these (hook -> pipeline).
HOOK_FIELD_NAMES = {"feedback_topic": "topic_feedback", "scheduler": "node_scheduler"}


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
    max_task_size: int = 0  # pixels; larger tasks are dead letters. 0 = from the cluster spec's
    #                         memory (workload/limits.py)
    tenant_shares: str = ""  # hook: tenant quotas "a=3,b=1" (pyflink_jobs/tenant_quotas.py);
    #                          "" = none
    router_host: str = ""  # hook: the TaskManager its router, source and sinks run on;
    #                        "" = where Flink puts them

    def __post_init__(self) -> None:
        # Refused at parse time: quotas are the router's, so only the hook can enforce them.
        parse_tenant_shares(self.tenant_shares)
        if self.tenant_shares.strip() and self.placement != "hook":
            raise ValueError(f"tenant_shares needs placement='hook' (the router enforces "
                             f"them), got placement={self.placement!r}")
        if self.router_host and self.placement != "hook":
            raise ValueError(f"router_host needs placement='hook' (only the hook has a router), "
                             f"got placement={self.placement!r}")


# --------------------------------------------------------------------------------------------
# Operators (module level so the Python workers can unpickle them)
# --------------------------------------------------------------------------------------------

try:  # The job module must import without pyflink too (docs, unit tests of the helpers).
    from pyflink.datastream import ProcessFunction
except ImportError:  # pragma: no cover
    ProcessFunction = object  # type: ignore[misc,assignment]


class DecodeTaskEvents(ProcessFunction):
    """Row(payload, topic, partition, offset) -> decoded TaskEvent dict; undecodable records, and
    tasks outside ``limits``, go to the dead-letter side output with the reason, and the job
    keeps running."""

    def __init__(self, limits: TaskLimits | None = None):
        self.limits = limits or TaskLimits.for_task_events()
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
        reason = self.limits.check_event(event)
        if reason:
            yield self._tag, make_dead_letter(payload, topic, partition, offset, reason, "limits")
            return
        yield event


# --------------------------------------------------------------------------------------------
# Wiring
# --------------------------------------------------------------------------------------------

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
    limits = (TaskLimits(max_size=settings.max_task_size) if settings.max_task_size > 0
              else cluster_task_limits(settings.cluster_spec))

    if settings.placement == "hook":
        hook = StreamplaceHook(replace(HookSettings.from_fields(settings, HOOK_FIELD_NAMES),
                                       limits=limits))
        executed = hook.apply(env, rows)
        dead_letters = hook.dead_letters
    elif settings.placement in ("single", "rebalance"):
        decoded = (rows.process(DecodeTaskEvents(limits), output_type=Types.PICKLED_BYTE_ARRAY())
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

    (executed.sink_to(kafka_bytes_sink(settings.bootstrap_servers, settings.topic_results,
                                       settings.transactional_id_prefix + "-results",
                                       settings.transaction_timeout_ms))
     .name("results-sink").uid("results-sink").slot_sharing_group("default"))
    (dead_letters.sink_to(kafka_bytes_sink(settings.bootstrap_servers,
                                           settings.topic_dead_letter,
                                           settings.transactional_id_prefix + "-dlq",
                                           settings.transaction_timeout_ms))
     .name("dead-letter-sink").uid("dead-letter-sink").slot_sharing_group("default"))


def _make_executor(settings: PipelineSettings):
    if settings.executor == "checksum":
        return ChecksumExecutor()
    if settings.executor == "iawp":
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
