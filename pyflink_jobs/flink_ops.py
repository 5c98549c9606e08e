"""Flink glue that every streamplace job shares: slot sharing groups, dead letters, sinks, gauges.

Both the hook (:mod:`pyflink_jobs.hook`) and the task pipeline (:mod:`pyflink_jobs.task_pipeline`)
import from here; neither imports the other's operators.

Example::

    from pyflink_jobs.flink_ops import executor_slot_sharing_group, kafka_bytes_sink
    executed.slot_sharing_group(executor_slot_sharing_group("tm_a"))    # pinned to tm_a
    results.sink_to(kafka_bytes_sink("127.0.0.1:9092", "results", "my-job-results"))
"""

from __future__ import annotations

import logging
import time

__all__ = ["DEAD_LETTER_TAG_NAME", "dead_letter_tag", "make_dead_letter", "carries_none",
           "hook_metrics", "NoMetrics",
           "KAFKA_LOGGER",
           "executor_slot_sharing_group", "io_slot_sharing_group", "kafka_bytes_sink",
           "router_slot_sharing_group", "ROUTER_RESOURCE",
           "input_is_bounded", "runtime_mode", "execution_target", "job_option",
           "disable_python_chaining", "DeadLetterLog",
           "side_output", "CountGauges", "MAX_REASON_CHARS", "MAX_DEAD_LETTER_RAW_BYTES",
           "dead_letter_raw",
           "EXECUTOR_CPU", "EXECUTOR_HEAP_MB", "EXECUTOR_MANAGED_MB",
           "IO_CPU", "IO_HEAP_MB", "IO_MANAGED_MB", "subtask_index",
           "python_execution_mode", "own_python_bundle"]

DEAD_LETTER_TAG_NAME = "dead-letter"

#: A dead letter's reason keeps the error and the end of a traceback, not megabytes of it.
MAX_REASON_CHARS = 8000
#: A dead letter keeps at most this much of the refused record (its head): enough to find and
#: replay it, never a multi-megabyte copy of a hostile record.
MAX_DEAD_LETTER_RAW_BYTES = 1 << 20

#: Resources of one executor instance and of the I/O operators. With fine-grained resource
#: management every slot sharing group needs an explicit spec (else default slots eat the
#: TaskManagers' external resources); what pins an executor is the one unit of its node's
#: external resource.
EXECUTOR_CPU, EXECUTOR_HEAP_MB, EXECUTOR_MANAGED_MB = 0.1, 32, 16
IO_CPU, IO_HEAP_MB, IO_MANAGED_MB = 0.1, 64, 32
#: An external resource every TaskManager has one unit of (streamplace's launcher declares it):
#: a slot sharing group that needs one unit gets at most one slot per TaskManager, which
#: spreads colocated routers one per TaskManager (router_slot_sharing_group).
ROUTER_RESOURCE = "streamplace_router"


#: The Python logger librdkafka's own log lines go to (the hook's Kafka clients in the workers)
KAFKA_LOGGER = "streamplace.librdkafka"


class NoMetrics:
    """A metric group that registers nothing (:func:`hook_metrics` in thread mode)."""

    def gauge(self, name, fn) -> None:
        pass


def hook_metrics(runtime_context):
    """The metric group the hook registers its gauges in: the context's own, and none in
    PyFlink's thread mode. Why: there a gauge is a Python callable the JVM calls (a metrics
    query), and PyFlink 2.2 still calls it after a cancelled task's interpreter is gone: a
    TaskManager died with SIGSEGV (``take_gil``, from ``MetricGauge.getValue``) in 3 of 5
    cancels of hooked thread-mode jobs, never with the plain job, which registers no Python
    gauges. Thread-mode jobs therefore show no streamplace gauges in Flink's metrics; the
    counts are still kept (the feedback carries them)."""
    if ".embedded." in (type(runtime_context).__module__ or ""):
        return NoMetrics()
    return runtime_context.get_metrics_group()


def carries_none(output_type) -> bool:
    """Whether records of ``output_type`` may be None between operators: Flink's STRING
    serializer writes a null; INT, PICKLED_BYTE_ARRAY (None: the default) and the others fail
    the job on one ("The record must not be null", a NullPointerException)."""
    if output_type is None:
        return False
    try:
        from pyflink.common import Types
    except ImportError:  # no PyFlink: nothing to cross
        return True
    return output_type == Types.STRING()


def subtask_index(runtime_context) -> int:
    """This parallel instance's index (0 without a runtime context).

    PyFlink 2.2's thread mode (``python.execution-mode: thread``) wraps the Java runtime
    context and asks it ``getIndexOfThisSubtask()``, which Flink 2 moved to ``getTaskInfo()``:
    the call raises there, so ask the task info directly."""
    if runtime_context is None:
        return 0
    try:
        return int(runtime_context.get_index_of_this_subtask())
    except AttributeError:
        java_context = getattr(runtime_context, "_runtime_context", None)
        if java_context is None:
            raise
        return int(java_context.getTaskInfo().getIndexOfThisSubtask())


def _job_option(j_env, read, default: str) -> str:
    """``read(configuration, jvm)`` on the Flink configuration of the job environment that
    ``j_env()`` returns, as text; ``default`` when it is unset or cannot be read (no JVM behind
    the stream or environment: a stand-in in tests, or an older PyFlink)."""
    try:
        from pyflink.java_gateway import get_gateway
        from pyflink.util.java_utils import get_j_env_configuration
        value = read(get_j_env_configuration(j_env()), get_gateway().jvm)
    except Exception:  # noqa: BLE001 - see the docstring
        return default
    return str(value or default)


def python_execution_mode(stream) -> str:
    """The job's ``python.execution-mode`` ("process" or "thread") as the stream's environment
    has it; "process" (Flink's default) when it cannot be read (no JVM behind the stream)."""
    return _job_option(lambda: stream._j_data_stream.getExecutionEnvironment(),
                       lambda conf, jvm: conf.get(
                           jvm.org.apache.flink.python.PythonOptions.PYTHON_EXECUTION_MODE),
                       "process").lower()


def execution_target(env) -> str:
    """The environment's ``execution.target``: "local" when the job runs in this process's
    mini cluster (``python my_job.py``), "remote" under ``flink run``; "" when unreadable."""
    return job_option(env, "execution.target").lower()


def job_option(env, key: str) -> str:
    """The environment's configuration value of ``key`` as text ("" when unset or unreadable:
    no JVM behind ``env``)."""
    return _job_option(lambda: env._j_stream_execution_environment,
                       lambda conf, jvm: conf.getString(key, ""), "")


def disable_python_chaining(env) -> None:
    """``python.operator-chaining.enabled: false`` for the job of ``env`` (nothing without a
    JVM behind it)."""
    _job_option(lambda: env._j_stream_execution_environment,
                lambda conf, jvm: conf.setString("python.operator-chaining.enabled", "false"),
                "")


def own_python_bundle(stream, size: int, time_ms: int) -> bool:
    """Give the Python operator behind ``stream`` (a ``process``/``map`` result) bundles of its
    own, at most ``size`` records and ``time_ms`` ms (``python.fn-execution.bundle.size`` /
    ``.bundle.time``), leaving the job's other operators on the job's settings. True when
    done; False when there is no Python operator or JVM behind ``stream`` (a stand-in in
    tests), or the operator is not the kind PyFlink 2.2 builds.

    Why: PyFlink sets bundles per job, and a Python operator's outputs leave its worker only
    when its bundle closes (Beam's data channel flushes at 10 MB or at the bundle's end). A
    router that waits for completions (:mod:`pyflink_jobs.decision_hold`) must have sent what
    it already decided, or the completions it waits for never come; the executors need their
    large bundles. PyFlink reads each operator's bundle limits from the configuration it keeps
    (``AbstractPythonFunctionOperator.config``, the environment's own object, shared by every
    Python operator): this swaps in a copy for this operator. PyFlink fuses consecutive Python
    operators (``python.operator-chaining.enabled``) into one that runs with the *first* one's
    configuration, so the Python operators directly in front of this one (a user's own ``map``
    before the hook) get the same copy. At submission PyFlink adds the job's explicitly set
    ``python.*`` options to every operator's configuration, so a job that sets
    ``python.fn-execution.bundle.size`` itself keeps its own value here too.

    Example::

        routed = stream.process(router, output_type=Types.PRIMITIVE_ARRAY(Types.BYTE()))
        own_python_bundle(routed, 32, 100)
    """
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in (size, time_ms)):
        raise ValueError(f"a bundle needs a size and a time of at least 1, got {size!r}, "
                         f"{time_ms!r}")
    try:
        from pyflink.java_gateway import get_gateway
        from pyflink.util.java_utils import load_java_class
        python_operator = load_java_class(
            "org.apache.flink.streaming.api.operators.python.AbstractPythonFunctionOperator")
        field = python_operator.getDeclaredField("config")
        field.setAccessible(True)
        transformation = stream._j_data_stream.getTransformation()
        operator = _python_operator(transformation, python_operator)
        if operator is None:
            return False
        own = get_gateway().jvm.org.apache.flink.configuration.Configuration(
            operator.getConfiguration())
        own.setString("python.fn-execution.bundle.size", str(size))
        own.setString("python.fn-execution.bundle.time", str(time_ms))
        while operator is not None:   # this one, then the Python operators fused in front
            field.set(operator, own)
            inputs = transformation.getInputs()
            transformation = inputs[0] if inputs.size() == 1 else None
            operator = (_python_operator(transformation, python_operator)
                        if transformation is not None else None)
    except Exception:  # noqa: BLE001 - see the docstring: no JVM, or another PyFlink
        logging.getLogger(__name__).debug("no bundle of its own for %r", stream, exc_info=True)
        return False
    return True


def _python_operator(transformation, python_operator_class):
    """The Python operator a Java transformation runs (None: a source, a partitioning, a Java
    operator, or more than one input)."""
    try:
        operator = transformation.getOperatorFactory().getOperator()
    except Exception:  # noqa: BLE001 - a transformation with no operator factory
        return None
    return operator if python_operator_class.isInstance(operator) else None


def runtime_mode(stream) -> str:
    """The job's ``execution.runtime-mode`` ("STREAMING", "BATCH" or "AUTOMATIC") as the
    stream's environment has it; "STREAMING" (Flink's default) when it cannot be read."""
    return _job_option(lambda: stream._j_data_stream.getExecutionEnvironment(),
                       lambda conf, jvm: conf.get(
                           jvm.org.apache.flink.configuration.ExecutionOptions.RUNTIME_MODE),
                       "STREAMING").upper()


def input_is_bounded(stream) -> bool:
    """True when every source behind ``stream`` is bounded (``from_collection``, a bounded
    ``KafkaSource``, a file read once): the job is meant to finish when they do. False when
    one is unbounded, none is found, or there is no JVM behind the stream (tests)."""
    try:
        transformation = stream._j_data_stream.getTransformation()
        seen = [transformation, *transformation.getTransitivePredecessors()]
    except Exception:  # noqa: BLE001 - a stand-in stream (tests)
        return False
    kinds = []
    for t in seen:
        try:
            kinds.append(str(t.getBoundedness()))   # sources only (WithBoundedness)
        except Exception:  # noqa: BLE001 - not a source
            continue
    return bool(kinds) and all(k == "BOUNDED" for k in kinds)


def dead_letter_tag():
    """The side output of DeadLetter Avro bytes."""
    from pyflink.common import Types
    from pyflink.datastream import OutputTag
    return OutputTag(DEAD_LETTER_TAG_NAME, Types.PRIMITIVE_ARRAY(Types.BYTE()))


def dead_letter_raw(record) -> bytes:
    """The bytes a dead letter keeps of ``record`` (any of the job's types), capped at
    :data:`MAX_DEAD_LETTER_RAW_BYTES`; a record that cannot be serialised keeps its ``repr``."""
    from workload.operators import record_bytes
    try:
        return bytes(record_bytes(record)[:MAX_DEAD_LETTER_RAW_BYTES])
    except Exception:  # noqa: BLE001 - a record that cannot even be shown: its repr
        pass
    try:   # a repr may raise too, or recurse past the limit on a deeply nested record
        return repr(record)[:10_000].encode("utf-8", "backslashreplace")
    except Exception:  # noqa: BLE001
        return f"<a {type(record).__name__} that cannot be shown>".encode("utf-8",
                                                                          "backslashreplace")


def make_dead_letter(raw: bytes, topic: str, partition: int, offset: int, reason: str,
                     stage: str) -> bytes:
    """A DeadLetter record (Avro bytes): the refused record's bytes, where it came from, why.
    Never raises: the dead letter is how a bad record leaves the job, so text that UTF-8
    cannot carry (a lone surrogate in a user's type name or error) is escaped, and a partition
    or offset outside Avro's int / long reads as -1 (unknown)."""
    from workload.codec import encode
    reason = _utf8_text(reason)
    if len(reason) > MAX_REASON_CHARS:  # keep the head (the error) and the tail (the raise)
        half = MAX_REASON_CHARS // 2
        reason = reason[:half] + "\n...\n" + reason[-half:]
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        raw = dead_letter_raw(raw)
    return encode("DeadLetter", {
        "source_topic": _utf8_text(topic)[:1000], "partition": _bounded_int(partition, 31),
        "offset": _bounded_int(offset, 63), "reason": reason,
        "raw": bytes(raw[:MAX_DEAD_LETTER_RAW_BYTES]),
        "failed_at_ms": int(time.time() * 1000), "stage": _utf8_text(stage)[:200]})


def _utf8_text(value) -> str:
    """``value`` as text UTF-8 can encode (``workload.limits.text_safe``); "" for None."""
    from workload.limits import text_safe
    if value is None:
        return ""
    if not isinstance(value, str):
        try:
            value = str(value)
        except Exception:  # noqa: BLE001 - an object whose str() raises
            value = f"<{type(value).__name__}>"
    return text_safe(value)


def _bounded_int(value, bits: int) -> int:
    """``value`` as a signed int of ``bits`` + 1 bits, -1 when it is none or outside."""
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return -1
    return number if -(1 << bits) <= number < (1 << bits) else -1


class DeadLetterLog:
    """The consumer of a job's dead letters when it names no dead-letter topic: each is logged
    (the first :attr:`FIRST`, then every :attr:`EVERY`-th) with its stage and reason, and
    nothing is emitted. Used as ``dead_letters.flat_map(DeadLetterLog())``.

    Why a consumer at all: PyFlink 2.2.1 encodes a Python function's side-output pair
    ``(tag, value)`` as a main output when nothing reads that tag, and the operator fails
    ("'tuple' object has no attribute 'encode'"): without one, the first record a user's
    operator raised on would fail the job."""

    FIRST = 20
    EVERY = 100

    def __init__(self):
        self.count = 0

    def __call__(self, raw):
        from workload.codec import decode
        self.count += 1
        if self.count <= self.FIRST or self.count % self.EVERY == 0:
            try:
                letter = decode("DeadLetter", bytes(raw))
                stage, lines = letter["stage"], (letter["reason"] or "?").splitlines() or ["?"]
            except Exception:  # noqa: BLE001 - undecodable: said so
                stage, lines = "?", ["an undecodable dead letter"]
            why = lines[0][:300] + (f" ... {lines[-1][:300]}" if len(lines) > 1 else "")
            logging.getLogger("streamplace.dead_letters").warning(
                "dead letter %d (the job names no dead-letter topic): %s: %s", self.count,
                stage, why)
        return []


def executor_slot_sharing_group(node_id: str):
    """A slot sharing group whose every slot needs one unit of ``node_id``'s external resource,
    so every instance of an operator in it runs on that TaskManager."""
    from pyflink.datastream.slot_sharing_group import SlotSharingGroup
    return (SlotSharingGroup.builder(f"executor-{node_id}")
            .set_cpu_cores(EXECUTOR_CPU).set_task_heap_memory_mb(EXECUTOR_HEAP_MB)
            .set_managed_memory_mb(EXECUTOR_MANAGED_MB)
            .set_external_resource(node_id, 1.0).build())


def io_slot_sharing_group(name: str = "default", host: str | None = None):
    """A slot sharing group with an explicit (small) resource spec; with ``host``, each of its
    slots also needs one unit of that TaskManager's external resource (so it runs there, as
    :func:`executor_slot_sharing_group` pins executors)."""
    from pyflink.datastream.slot_sharing_group import SlotSharingGroup
    builder = (SlotSharingGroup.builder(name).set_cpu_cores(IO_CPU)
               .set_task_heap_memory_mb(IO_HEAP_MB).set_managed_memory_mb(IO_MANAGED_MB))
    if host:
        builder = builder.set_external_resource(host, 1.0)
    return builder.build()


def router_slot_sharing_group():
    """The colocated routers' slot sharing group: the I/O spec plus one unit of
    :data:`ROUTER_RESOURCE`, so no two of its slots share a TaskManager."""
    from pyflink.datastream.slot_sharing_group import SlotSharingGroup
    return (SlotSharingGroup.builder("streamplace-routers").set_cpu_cores(IO_CPU)
            .set_task_heap_memory_mb(IO_HEAP_MB).set_managed_memory_mb(IO_MANAGED_MB)
            .set_external_resource(ROUTER_RESOURCE, 1.0).build())


def kafka_bytes_sink(bootstrap_servers: str, topic: str, transactional_id_prefix: str,
                     transaction_timeout_ms: int = 600_000):
    """An exactly-once KafkaSink of byte arrays (read it with ``isolation.level``
    ``read_committed``)."""
    from pyflink.common import ByteArraySchema
    from pyflink.datastream.connectors.base import DeliveryGuarantee
    from pyflink.datastream.connectors.kafka import KafkaRecordSerializationSchema, KafkaSink
    return (KafkaSink.builder()
            .set_bootstrap_servers(bootstrap_servers)
            .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(topic)
                                   .set_value_serialization_schema(ByteArraySchema()).build())
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .set_transactional_id_prefix(transactional_id_prefix)
            .set_property("transaction.timeout.ms", str(transaction_timeout_ms))
            .build())


def side_output(stream, tag):
    """``stream.get_side_output(tag)`` without the identity Python ``map`` that PyFlink 2.2.1
    appends to every side output (``ds.map(lambda i: i)``): that map is one more Python hop
    per record on the routing path, and the records already carry the tag's type."""
    from pyflink.datastream import DataStream
    return DataStream(stream._j_data_stream.getSideOutput(tag.get_java_output_tag()))


class CountGauges:
    """Cumulative counts exposed as Flink gauges.

    Why not ``metric_group.counter``: in PyFlink 2.2.1 (process mode) a Python counter reached
    REST as the largest increment of a single bundle, not the running total (a router that sent
    1,384 tasks to a node in one burst and more later kept showing 1,384). A gauge reports the
    value we keep here, so REST shows the true running count."""

    def __init__(self, metric_group, names):
        self.values = {name: 0 for name in names}
        for name in names:
            metric_group.gauge(name, lambda n=name: int(self.values[n]))

    def inc(self, name: str, n: int = 1) -> None:
        self.values[name] += n
