"""The router inside Flink: decode or describe each record, decide its node, send it there.

:class:`RouterFunction` is a thin ``BroadcastProcessFunction`` around
:class:`pyflink_jobs.router.Router`: its main input is the job's own stream, its broadcast input
the NodeFeedback of the executors (or, with ``feedback=``, a one-input process function that
reads the feedback topic itself: :mod:`pyflink_jobs.feedback_tail`). Each record leaves on the
side output of the chosen node as
one :class:`~pyflink_jobs.routed.RoutedRecord` (the user's record untouched inside); what cannot
be routed leaves on the main output as DeadLetter bytes, with the reason, and the job keeps
running. How a record becomes a task the policy can judge is a :class:`RecordReader`:

- :class:`OperatorRecords`: any record of the user's stream (JSON strings, ``Row``s, bytes,
  Python objects); the task type and size come from the operator's ``task_type`` /
  ``task_size`` functions (defaults: the operator's name, the record's serialized length);
- :class:`TaskEventRecords`: streamplace-native Avro TaskEvent bytes, or a Table API Kafka
  ``Row(payload, topic, partition, offset)``.

Both refuse a task outside their :class:`workload.limits.TaskLimits` (a size above what the
smallest node's memory allows, a negative size, a non-finite or huge ``expected_work_ms``, an
over-long id or type) with stage ``"limits"``: such a record must not reach a worker.

With tenant quotas (``RouterSettings.tenant_quotas``), a TaskEvent's tenant and priority come
from its ``attributes``; a demoted task's event is forwarded with the lowered ``priority``
(:mod:`pyflink_jobs.tenant_quotas`), and per-tenant gauges are registered for the configured
tenants. Without quotas the records are forwarded as before, untouched.

:class:`RestAwarePartitioner` is the other way to reach a node's executor instance on clusters
without fine-grained resource management.
"""

from __future__ import annotations

import logging
import numbers
import time
import uuid
from operator import index

from placement.service.flink_rest import FlinkRestClient
from interference.executor.results import exception_text
from pyflink_jobs.feedback_tail import FeedbackTail
from pyflink_jobs.flink_ops import (CountGauges, dead_letter_raw, hook_metrics, make_dead_letter,
                                    subtask_index)
from pyflink_jobs.light_lane import LightLane
from pyflink_jobs.router import ModelRefresher, Router, RouterSettings
from pyflink_jobs.routed import RoutedRecord
from workload.limits import (DEFAULT_MAX_TASK_TYPE_CHARS, TaskLimits, default_task_type_problem,
                             short_repr)
from workload.model import Task

__all__ = ["RouterFunction", "RecordReader", "OperatorRecords", "TaskEventRecords",
           "Refused", "RestAwarePartitioner", "node_tag", "routed_tag",
           "feedback_state_descriptor", "MAX_TASK_TYPE_CHARS", "MAX_TASK_SIZE",
           "PARTITIONER_REST_TIMEOUT_S"]

log = logging.getLogger(__name__)

try:  # The module must import without pyflink too (docs, unit tests of the helpers).
    from pyflink.datastream import BroadcastProcessFunction
    from pyflink.datastream.functions import Partitioner
except ImportError:  # pragma: no cover
    BroadcastProcessFunction = Partitioner = object  # type: ignore[misc,assignment]

FEEDBACK_STATE_NAME = "streamplace-node-feedback"

#: Seconds one REST request of the partitioner may take: it runs on the record path, so a hung
#: JobManager may cost a refresh, not the stream.
PARTITIONER_REST_TIMEOUT_S = 2.0

#: Bounds on what a user's ``task_type`` / ``task_size`` may return at all: a type name is a
#: label, not a payload; a size beyond 1 TiB is a bug, not a task. (What a task may be on this
#: cluster is narrower: the reader's TaskLimits.)
MAX_TASK_TYPE_CHARS = DEFAULT_MAX_TASK_TYPE_CHARS

#: One record in this many has the router's own CPU time measured: the thread's CPU time from
#: the record's arrival to its outputs being handed to PyFlink, i.e. what streamplace's Python
#: costs a record inside the TaskManager, apart from PyFlink's (gauge
#: ``streamplace_router_own_cpu_ns``; ``benchmarks/process_cpu.py`` has the whole worker's).
#: Sampled because the clock is read twice a sampled record.
OWN_CPU_EVERY = 64
MAX_TASK_SIZE = 1 << 40


class Refused(Exception):
    """A record the router cannot route; ``stage`` names the step that refused it."""

    def __init__(self, reason: str, stage: str, raw: bytes = b"",
                 source: tuple[str, int, int] = ("", -1, -1)):
        super().__init__(reason)
        self.reason, self.stage, self.raw, self.source = reason, stage, raw, source


class RecordReader:
    """Turns one input record into ``(task, record, raw_bytes, source)`` or raises
    :class:`Refused`. ``open`` runs once per router instance. ``task_events``: the records are
    decoded TaskEvents (tenant quotas read their attributes and may rewrite their priority;
    a user's records are never changed)."""

    task_events = False

    def open(self, runtime_context) -> None:  # pragma: no cover - trivial default
        pass

    def read(self, value):
        raise NotImplementedError


class TaskEventRecords(RecordReader):
    """Avro TaskEvent bytes, or ``Row(payload, topic, partition, offset)``; ``limits``: what a
    task may be (default: :meth:`TaskLimits.for_task_events`, sizes in pixels)."""

    task_events = True

    def __init__(self, limits: TaskLimits | None = None):
        self.limits = limits or TaskLimits.for_task_events()

    def open(self, runtime_context) -> None:
        from workload.codec import CodecError, decode
        self._decode, self._codec_error = decode, CodecError

    def read(self, value):
        if isinstance(value, (bytes, bytearray)):
            payload, source = bytes(value), ("", -1, -1)
        else:
            try:
                payload = value[0]
                source = (str(value[1] or ""), int(value[2]), int(value[3]))
                if not isinstance(payload, (bytes, bytearray, memoryview, type(None))):
                    # bytes(an int) would allocate that many bytes before any check
                    raise TypeError(f"the payload is a {type(payload).__name__}, not bytes")
            except (TypeError, IndexError, KeyError, ValueError, OverflowError) as exc:
                raise Refused(f"expected TaskEvent bytes or Row(payload, topic, partition, "
                              f"offset), got {type(value).__name__}: {exception_text(exc)}",
                              "shape", dead_letter_raw(value)) from None
        payload = bytes(payload) if payload is not None else b""
        try:
            event = self._decode("TaskEvent", payload)
        except self._codec_error as exc:
            raise Refused(str(exc), "decode", payload, source) from None
        reason = self.limits.check_event(event)
        if reason:
            raise Refused(reason, "limits", payload, source)
        task = Task(event["task_id"], event["app_id"], int(event["input_size"]),
                    expected_work_ms=event.get("expected_work_ms"))
        return task, event, len(payload), source


class OperatorRecords(RecordReader):
    """Any record; type and size from the operator's functions (see module docstring);
    ``limits``: what a task may be (default: :meth:`TaskLimits.for_operator_records`, sizes in
    serialized bytes).

    The ``task_type`` / ``task_size`` functions only describe a record to the policy; they are
    not the user's computation. One that raises or gives an invalid value (a type that is not a
    non-empty printable string of at most :data:`MAX_TASK_TYPE_CHARS` characters, an int kept
    as its digits; a size that is not an integer, numpy's included, in [0,
    :data:`MAX_TASK_SIZE`]) gives that
    record the default type or size instead: the record is routed and computed as usual,
    counted in :attr:`descriptor_fallbacks` and warned about once per kind and reason. The
    limits still refuse a record that is too big by its size (the default size after a
    fallback)."""

    def __init__(self, operator, limits: TaskLimits | None = None):
        self.limits = limits or TaskLimits.for_operator_records()
        # Only the extractors travel to the router, not the operator's stages (models, weights).
        self.describer = operator.describer()
        # the user's own functions (None: the defaults), called here as they are: what they
        # give is checked here, and a raise or an invalid value falls back to the default
        self.type_of = self.describer.type_of
        self.size_of = self.describer.size_of
        self.operator_name = operator.name

    def open(self, runtime_context) -> None:
        # Task ids must be unique across router restarts too (feedback de-duplicates by id).
        index = subtask_index(runtime_context)
        self._prefix = f"{self.operator_name[:40]}-{uuid.uuid4().hex[:10]}-{index}-"
        self._next = 0
        #: records whose task type / size function raised or gave an invalid value, by kind
        self.descriptor_fallbacks = {"task_type": 0, "task_size": 0}
        self._warned: set[tuple[str, str]] = set()
        # a user's type must also pass the limits' type length: a label too long for them is
        # the function's fault, not the record's
        self._max_type_chars = min(MAX_TASK_TYPE_CHARS, self.limits.max_task_type_chars)
        name = self.describer.name
        # the default type (the operator's name) is checked once; one that is no valid type
        # refuses the records it would describe, as a bad type always did
        self._default_type_problem = default_task_type_problem(name)
        self._default_type = name if self._default_type_problem is None else None
        # light(): with the default type and size, the type is the operator's name, checked
        # here once, and the largest size the limits pass for it
        default = self.type_of is None and self.size_of is None
        self._light_type = name if default and self._default_type is not None \
            and len(name) <= self.limits.max_task_type_chars else None
        self._light_max_size = min(MAX_TASK_SIZE, self.limits.max_size_for(name))

    def light_gate(self) -> tuple[str, int] | None:
        """(task type, largest size) of the records that come cheap and pass every check of
        :meth:`read` with that type and their size (a text's UTF-8 length, a bytes' length):
        with the default type and size (the operator's name, the serialized length), text and
        bytes records up to that size. None with a user's own type or size function: then
        :meth:`read`, which describes any record and says why one is refused."""
        if self._light_type is None:
            return None
        return self._light_type, self._light_max_size

    def next_task_id(self) -> str:
        """A new task id, unique across this router's restarts too."""
        task_id = f"{self._prefix}{self._next}"
        self._next += 1
        return task_id

    def read(self, value):
        from workload.operators import record_size
        # Every record passes here: a valid type and size cost a call and a few checks each;
        # only a function that raises or gives an invalid value takes the slower fallback.
        if self.type_of is None:
            task_type = self._default_type
            if task_type is None:
                raise Refused(self._default_type_problem, "task_type", dead_letter_raw(value))
        else:
            task_type = self._user_type(value)
        # the default size, and the record's bytes either way: measured once
        raw_bytes = record_size(value)
        size = raw_bytes if self.size_of is None else self._user_size(value, raw_bytes)
        # type and size are valid here; what is left is the limits' (type length, size per
        # type), asked in full only when one of them can refuse (a light stream's every
        # record passes here: the full check was a third of the router's own time)
        limits = self.limits
        if len(task_type) > limits.max_task_type_chars or size > limits.max_size_for(task_type):
            reason = limits.check(task_type, size)
            if reason:
                raise Refused(reason, "limits", dead_letter_raw(value))
        return Task(self.next_task_id(), task_type, size), value, raw_bytes, ("", -1, -1)

    def _user_type(self, value) -> str:
        """The user's ``task_type`` of ``value``, or the default when it is not a valid one."""
        try:
            task_type = self.type_of(value)
        except Exception as exc:  # noqa: BLE001 - the user's describer, not its computation
            return self._default_type_after(value, type(exc).__name__, _raised(exc))
        # printable: a type name is a label that travels in feedback and gauges (a lone
        # surrogate cannot be encoded there; a control character is no label)
        if type(task_type) is str and 0 < len(task_type) <= self._max_type_chars \
                and task_type.isprintable():
            return task_type
        return self._odd_type(value, task_type)

    def _odd_type(self, value, task_type) -> str:
        """The slow path of :meth:`_user_type`: an int (kept as its digits), a str subclass
        (kept as a plain str), else the default."""
        if task_type is None:
            return self._default_type_after(value, "None", "returned None")
        if isinstance(task_type, int) and not isinstance(task_type, bool):
            # str() of an int of over 4,300 digits raises; one of over 300 is too long anyway
            number = int.__index__(task_type)  # a plain int: a subclass's methods may do anything
            label = str(number) if number.bit_length() < 1000 else ""
        elif isinstance(task_type, str):
            label = str.__str__(task_type)  # a plain copy: a subclass's len() may do anything
        else:
            kind = type(task_type).__name__
            return self._default_type_after(value, kind, f"returned a {kind}, not a str "
                                                         f"({short_repr(task_type)})")
        if not label or len(label) > self._max_type_chars or not label.isprintable():
            return self._default_type_after(
                value, "invalid str", f"returned {short_repr(task_type)}, not a non-empty "
                f"printable string of at most {self._max_type_chars} characters")
        return label

    def _user_size(self, value, default_size: int) -> int:
        """The user's ``task_size`` of ``value``, or ``default_size`` when it is not valid."""
        try:
            size = self.size_of(value)
        except Exception as exc:  # noqa: BLE001 - the user's describer, not its computation
            self._count_fallback("task_size", type(exc).__name__, _raised(exc))
            return default_size
        if type(size) is int and 0 <= size <= MAX_TASK_SIZE:
            return size
        # the slow path: an int subclass (IntEnum) or another integer type (numpy's int64, as
        # ``np.prod(shape)`` gives), as the executor's own check accepts; never a bool
        if isinstance(size, numbers.Integral) and not isinstance(size, bool):
            try:  # a plain int: a subclass's methods may do anything
                plain = int.__index__(size if isinstance(size, int) else index(size))
            except Exception as exc:  # noqa: BLE001 - the user's type's __index__
                self._count_fallback("task_size", type(exc).__name__, _raised(exc))
                return default_size
            if 0 <= plain <= MAX_TASK_SIZE:
                return plain
            self._count_fallback("task_size", "int out of range",
                                 f"returned {short_repr(plain)}, not in [0, {MAX_TASK_SIZE}]")
            return default_size
        kind = type(size).__name__
        self._count_fallback("task_size", kind,
                             f"returned a {kind}, not an int ({short_repr(size)})")
        return default_size

    def _default_type_after(self, value, reason_key: str, detail: str) -> str:
        """The default type for ``value``, whose ``task_type`` failed (counted, warned)."""
        self._count_fallback("task_type", reason_key, detail)
        if self._default_type is None:
            raise Refused(self._default_type_problem, "task_type", dead_letter_raw(value))
        return self._default_type

    def _count_fallback(self, kind: str, reason_key: str, detail: str) -> None:
        """Count a record whose ``kind`` function failed; warn once per (kind, reason), so
        that a function failing on every record does not flood the log."""
        self.descriptor_fallbacks[kind] += 1
        if (kind, reason_key) in self._warned:
            return
        self._warned.add((kind, reason_key))
        default = ("the operator's name" if kind == "task_type"
                   else "the record's serialized length")
        log.warning("%s of operator %s %s: such records get the default, %s, and are routed "
                    "and computed as usual (counted in streamplace_descriptor_fallbacks; "
                    "warned once per reason)", kind, short_repr(self.operator_name), detail,
                    default)


def _raised(exc: Exception) -> str:
    """What a user's describer raised, for a warning (its message cut: it may hold a record)."""
    text = exception_text(exc)
    return f"raised {type(exc).__name__}: {text if len(text) <= 200 else text[:197] + '...'}"


def node_tag(node_id: str):
    """The side output that carries the records routed to ``node_id``."""
    from pyflink.common import Types
    from pyflink.datastream import OutputTag
    return OutputTag(f"streamplace-node-{node_id}", Types.PICKLED_BYTE_ARRAY())


def routed_tag():
    """rest_partitioner mode: every routed record, as (node, RoutedRecord), on one output."""
    from pyflink.common import Types
    from pyflink.datastream import OutputTag
    return OutputTag("streamplace-routed", Types.PICKLED_BYTE_ARRAY())


def feedback_state_descriptor():
    from pyflink.common import Types
    from pyflink.datastream.state import MapStateDescriptor
    return MapStateDescriptor(FEEDBACK_STATE_NAME, Types.STRING(), Types.PICKLED_BYTE_ARRAY())


def _seed_from_service(router: Router, client) -> None:
    """The service's measured work times as the router's starting cost model, for every
    policy (placement.cost_snapshot); without them the router starts knowing nothing."""
    try:
        adopted = router.seed_costs(client.costs())
    except Exception as exc:  # noqa: BLE001 - an unreachable service costs a warm start only
        log.warning("no measured costs from the placement service (%s): the router starts "
                    "from its prior", exc)
        return
    log.info("router starts from %d measured cost fits of the placement service", adopted)


def start_refresher(router: Router, client, interval_s: float) -> ModelRefresher:
    """The service's current model installed before the router's first record, then the
    refresher thread for the versions after it.

    Why one poll here and not only in the thread: a job sends its backlog at once, and a router
    whose model came through the thread decided its first records by the fallback rule and
    then, a burst already under way, held the GIL for the model's first install (numba's
    kernel, the policy's imports: 0.7 s on an idle core, seconds on a throttled host) while the
    checkpoint barrier waited behind it. An unreachable service costs at most the client's
    timeout per request here; the thread keeps trying."""
    refresher = ModelRefresher(router, client, interval_s)
    started = time.perf_counter()
    if refresher.poll_once():
        log.info("router starts on model version %s of the placement service (installed in "
                 "%.2f s)", router.model_version, time.perf_counter() - started)
    refresher.start()
    return refresher


class SampledCpu:
    """Mean thread CPU time (ns) of one call in ``every``: ``started = sampled.start()`` on
    entry, ``sampled.stop(started)`` at the end (a no-op for calls not sampled)."""

    def __init__(self, every: int = OWN_CPU_EVERY):
        self.every, self.calls, self.samples, self.total_ns = every, 0, 0, 0

    def start(self) -> int | None:
        self.calls += 1
        return time.thread_time_ns() if self.calls % self.every == 0 else None

    def stop(self, started: int | None) -> None:
        if started is not None:
            self.samples += 1
            self.total_ns += time.thread_time_ns() - started

    def mean_ns(self) -> int:
        return self.total_ns // self.samples if self.samples else 0


class RouterFunction(BroadcastProcessFunction):
    """Read + decide in one Python function (see the module docstring). Output: DeadLetter
    bytes (main); RoutedRecords on one side output per node; with ``inline`` (routing
    "colocated", :mod:`pyflink_jobs.inline_executor`), the outputs of the records it ran on
    its own node on ``inline.output_tag``."""

    def __init__(self, settings: RouterSettings, reader: RecordReader | None = None,
                 single_output: bool = False, inline=None, feedback=None):
        self.settings = settings
        self.reader = reader or TaskEventRecords()
        self.single_output = single_output  # rest_partitioner: (node, routed) on one output
        # routing "colocated": an InlineExecutor (pyflink_jobs.inline_executor) that runs the
        # records routed to this router's own node here; None: every record is sent on
        self.inline = inline
        # A FeedbackTailSettings (pyflink_jobs.feedback_tail): this router reads the feedback
        # topic itself and is applied with ``DataStream.process`` (one input); None: the
        # feedback is its broadcast input (``connect(broadcast).process``)
        self.feedback = feedback

    def open(self, runtime_context):
        from workload.codec import CodecError, decode
        self._decode, self._codec_error = decode, CodecError
        self.reader.open(runtime_context)
        self.router = router = Router(self.settings)
        if self.single_output:
            tag = routed_tag()
            self._tags = {n: tag for n in router.node_ids}
        else:
            self._tags = {n: node_tag(n) for n in router.node_ids}
        self._descriptor = feedback_state_descriptor()
        self._restored = False
        self._tail = None
        if self.feedback is not None:   # node views come back from the topic's history
            self._tail = FeedbackTail(self.feedback, self._apply_report).start()
            self._restored = True
        self._local_node = (self.inline.open_on(runtime_context, router.node_ids)
                            if self.inline is not None and not self.reader.task_events
                            else None)
        self._routed_here = f"streamplace_routed_{self._local_node}"
        self.refresher = None
        if self.settings.service_url:
            from placement.service.client import PlacementClient
            client = PlacementClient(self.settings.service_url,
                                     self.settings.service_token or None, timeout_s=2.0)
            _seed_from_service(router, client)
            if self.settings.policy == "ldwp":
                self.refresher = start_refresher(router, client,
                                                 self.settings.refresh_interval_s)
        group = hook_metrics(runtime_context)   # none in thread mode (flink_ops)
        self._counts = CountGauges(group, [f"streamplace_routed_{n}" for n in router.node_ids] +
                                   ["streamplace_dead_letters"])
        self._own_cpu = SampledCpu()
        _register_router_gauges(group, self)
        # the light lane: records of the default type and size that it keeps and runs itself,
        # in one call (pyflink_jobs.light_lane); used once the node view is restored
        self._lane = self._light_lane()
        self._ready_lane = self._lane if self._restored else None
        if router.quotas is not None:
            self._register_tenant_gauges(group, router.quotas)

    @staticmethod
    def _register_tenant_gauges(group, quotas) -> None:
        # Gauges for the configured tenants only: their number is bounded by the settings and
        # known at open (gauges of tenants seen later could outlive their eviction). Others
        # appear in Router.stats() and in the totals.
        group.gauge("streamplace_tenants_demoted", lambda: int(quotas.demoted_total))
        group.gauge("streamplace_tenants_in_flight", lambda: int(quotas.total_in_flight))
        for tenant in quotas.settings.shares:
            for counter in ("in_flight", "routed", "demoted", "completed"):
                group.gauge(f"streamplace_tenant_{counter}_{tenant}",
                            lambda t=tenant, c=counter: quotas.counter(t, c))

    def _light_lane(self):
        gate = self.reader.light_gate() if hasattr(self.reader, "light_gate") else None
        if self._local_node is None or gate is None:
            return None
        call, map_call = self.inline.light_calls()
        return LightLane(self.router, self._local_node, gate, self.inline.output_tag, call,
                         map_call, self._counts.values, self._routed_here,
                         report=self._report_light, failed=self._failed_light,
                         hand_on=self.inline.add_light, ran_counts=self.inline.gauge_values,
                         report_every=self.inline.report_every,
                         min_report_interval_s=self.inline.report_min_interval_s)

    def close(self):
        # the user's operator (run here by a colocated router) closes first: the stops below
        # may wait on a service or a broker, and a local job's teardown does not wait long
        try:
            if getattr(self, "_lane", None) is not None:
                self._lane.flush()
            if getattr(self, "_local_node", None) is not None:
                self.inline.close()
        finally:
            if getattr(self, "refresher", None) is not None:
                self.refresher.stop()
            if getattr(self, "_tail", None) is not None:
                self._tail.stop()

    def process_element(self, value, ctx):
        started = self._own_cpu.start()
        lane = self._ready_lane
        if lane is not None:  # a light record kept on this router's node: one call (light_lane)
            emitted = lane(value)
            if emitted is not None:
                self._own_cpu.stop(started)
                return emitted  # PyFlink takes a list as it takes a generator
        return self._route_record(value, ctx, started)

    def _route_record(self, value, ctx, started):
        """Read, decide, and run here or send on: every record the light lane does not take."""
        try:
            task, record, raw_bytes, source = self.reader.read(value)
        except Exception as exc:  # noqa: BLE001 - Refused, or a reader's own bug: a dead letter
            refused = exc if isinstance(exc, Refused) else Refused(
                f"the record could not be read: {type(exc).__name__}: {exception_text(exc)}",
                "read", dead_letter_raw(value))
            self._counts.inc("streamplace_dead_letters")
            dead_letter = make_dead_letter(refused.raw, *refused.source, refused.reason,
                                           refused.stage)
            self._own_cpu.stop(started)
            yield dead_letter
            return
        if not self._restored:
            self._restore_node_view(ctx)
        if self.reader.task_events:  # quotas may forward the event with a lowered priority
            decision, context, record = self.router.route_task_event(task, record)
        else:
            local = self._local_node
            kept_ms = self.router.keep_local(task, local) if local is not None else None
            if kept_ms is not None:  # light here: run it here, lean (inline_executor)
                self._counts.inc(self._routed_here)
                if self.inline.reports_next_kept():
                    executed = self._run_kept_reported(task, record, raw_bytes, source, kept_ms)
                else:
                    executed = self.inline.run_quick(task.task_id, record, raw_bytes, source)
                self._own_cpu.stop(started)
                yield from self._emit_ran_here(executed)
                return
            decision, context = self.router.route(task)
        self._counts.inc(f"streamplace_routed_{decision.node}")
        routed = RoutedRecord(task.task_id, task.app_id, task.input_size, decision.node,
                              int(time.time() * 1000), context, record, raw_bytes, source)
        if decision.node == self._local_node:  # the policy chose this router's own node
            executed = self.inline.run_routed(routed)
            self.router.ran_inline(task.task_id)
            self._own_cpu.stop(started)
            yield from self._emit_ran_here(executed)
            return
        self._own_cpu.stop(started)
        if self.single_output:
            yield self._tags[decision.node], (decision.node, routed)
        else:
            yield self._tags[decision.node], routed

    def _report_light(self, value, kept_ms: float) -> list:
        """The light lane's record whose timing is reported: read and run in full."""
        try:
            task, record, raw_bytes, source = self.reader.read(value)
        except Refused as refused:  # (never: the lane's gate is what read() passes) say why
            self.router.routed[self._local_node] -= 1
            self._counts.values[self._routed_here] -= 1
            self._counts.inc("streamplace_dead_letters")
            return [make_dead_letter(refused.raw, *refused.source, refused.reason,
                                     refused.stage)]
        return list(self._emit_ran_here(
            self._run_kept_reported(task, record, raw_bytes, source, kept_ms)))

    def _failed_light(self, value, size: int, error: BaseException) -> list:
        """The light lane's record whose first call raised: its other attempts, then its
        outputs or its dead letter (named by a new task id)."""
        return list(self._emit_ran_here(self.inline.run_quick(
            self.reader.next_task_id(), value, size, ("", -1, -1), failed_first=error)))

    def _run_kept_reported(self, task, record, raw_bytes, source, kept_ms: float):
        """A record kept here whose timing is reported: run with its decision and timing."""
        decision, context = self.router.kept_decision(self._local_node, kept_ms)
        return self.inline.run_routed(RoutedRecord(
            task.task_id, task.app_id, task.input_size, self._local_node,
            int(time.time() * 1000), context, record, raw_bytes, source))

    def _emit_ran_here(self, executed):
        """A record this router ran itself: its outputs on the inline output, or its dead
        letter on the main output."""
        if executed.dead_letter is not None:
            self._counts.inc("streamplace_dead_letters")
            yield executed.dead_letter
        else:
            tag = self.inline.output_tag
            for output in executed.outputs:
                yield tag, output

    def _restore_node_view(self, ctx) -> None:
        # After a restore the in-memory view is empty; the checkpointed broadcast state has the
        # last report of every node.
        self._restored = True
        self._ready_lane = self._lane
        if self.router.feedback_records:
            return
        for _, raw in ctx.get_broadcast_state(self._descriptor).items():
            try:
                record = self._decode("NodeFeedback", raw)
            except self._codec_error:
                continue
            record["completed"] = []  # tasks of the previous run are not ours to retire
            self.router.on_feedback(record)

    def process_broadcast_element(self, value, ctx):
        try:
            record = self._decode("NodeFeedback", bytes(value))
        except self._codec_error:
            return
        self.router.on_feedback(record)
        if record["node_id"] in self._tags:  # only this job's nodes: the state stays bounded
            ctx.get_broadcast_state(self._descriptor).put(record["node_id"], bytes(value))

    def _apply_report(self, payload: bytes, from_history: bool) -> None:
        """One NodeFeedback of the feedback tail, on its thread (``Router.on_feedback`` takes
        the router's lock); a report from before this router started retires none of its
        tasks. Undecodable reports are skipped, as broadcast ones are."""
        try:
            record = self._decode("NodeFeedback", payload)
        except self._codec_error:
            return
        if from_history:
            record["completed"] = []
        self.router.on_feedback(record)


def _register_router_gauges(group, function: RouterFunction) -> None:
    """The router's own gauges in its metric group (read through REST by the benchmarks)."""
    router = function.router
    group.gauge("streamplace_decision_p50_us", lambda: int(router.latency_percentile_us(50)))
    group.gauge("streamplace_decision_p99_us", lambda: int(router.latency_percentile_us(99)))
    # where the decision's time goes (pyflink_jobs.decision_timing): p99 per phase, and
    # of the thread's CPU time (far below the wall time: the decision was waiting)
    for name in router.timing.rings:
        if name != "total":
            group.gauge(f"streamplace_decision_{name}_p99_us",
                        lambda name=name: int(router.timing.percentile_us(name, 99)))
    group.gauge("streamplace_model_version", lambda: int(router.model_version or 0))
    # a version on the service's interleaved trial, deciding its share beside the model; 0: none
    group.gauge("streamplace_candidate_version",
                lambda: int(getattr(router.candidate, "version", 0) or 0))
    group.gauge("streamplace_router_own_cpu_ns", function._own_cpu.mean_ns)
    group.gauge("streamplace_model_refresh_failures",
                lambda: int(function.refresher.failures if function.refresher else 0))
    # 1 while the policy decides on the compiled path (placement.ldwp.compiled), else 0
    group.gauge("streamplace_decision_compiled",
                lambda: int(router.stats_decision_path() == "compiled"))
    group.gauge("streamplace_fallback_decisions", lambda: int(router.fallback_decisions))
    group.gauge("streamplace_feedback_records", lambda: int(router.feedback_records))
    # records whose task_type / task_size function raised or gave an invalid value, and
    # were routed with the default type or size (OperatorRecords)
    fallbacks = getattr(function.reader, "descriptor_fallbacks", None)
    group.gauge("streamplace_descriptor_fallbacks",
                lambda: int(sum(fallbacks.values())) if fallbacks else 0)
    if function._tail is not None:
        tail = function._tail
        group.gauge("streamplace_feedback_refused", lambda: int(tail.refused + tail.errors))
    group.gauge("streamplace_seeded_cost_fits", lambda: int(router.seeded_cost_fits))
    if router.hold is not None:  # deciding late (pyflink_jobs.decision_hold)
        hold = router.hold
        group.gauge("streamplace_hold_waits", lambda: int(hold.holds))
        group.gauge("streamplace_hold_ms", lambda: int(1000 * hold.held_s))
        group.gauge("streamplace_hold_timeouts", lambda: int(hold.timeouts))
    group.gauge("streamplace_models_refused",
                lambda: int(function.refresher.refused) if function.refresher else 0)
    for node in router.node_ids:  # measured slowness x 1000 (Flink gauges are ints here):
        # against the calibration, or with learned costs against the other nodes
        group.gauge(f"streamplace_speed_milli_{node}",
                    lambda node=node: int(1000 * router.speeds.reported_factor(node)))


class RestAwarePartitioner(Partitioner):
    """Sends a (node, record) pair to an executor instance running on that node.

    Which instance runs where is read from the JobManager's REST API
    (``/jobs/<id>/vertices/<executor>``: ``subtask`` -> ``taskmanager-id``), at the first
    record and again every ``refresh_s`` (instances move after a restart). Among a node's
    instances it goes round-robin; a node that hosts no instance gets any instance, counted in
    ``misrouted``. Works with any Flink scheduler, at the price of the extra Python hop that
    ``partition_custom`` adds."""

    def __init__(self, rest_url: str, job_name: str, vertex_name: str, refresh_s: float = 10.0):
        self.rest_url = rest_url.rstrip("/")
        self.job_name = job_name
        self.vertex_name = vertex_name
        self.refresh_s = refresh_s

    def open(self, runtime_context):
        # Made here, not in __init__: the partitioner is pickled into the job graph.
        self._flink = FlinkRestClient(self.rest_url, timeout_s=PARTITIONER_REST_TIMEOUT_S)
        self._where: dict[str, list[int]] = {}
        self._next: dict[str, int] = {}
        self._fetched_at = float("-inf")
        self.misrouted = 0

    def _refresh(self) -> None:
        self._fetched_at = time.monotonic()
        try:
            jobs = self._flink.jobs()
            running = [j for j in jobs if j["name"] == self.job_name and j["state"] == "RUNNING"]
            if not running:
                return
            job = max(running, key=lambda j: j["start-time"])
            # chained operators share a vertex: "..., streamplace-executor"
            vertex = next(v for v in self._flink.job_vertices(job["jid"])
                          if self.vertex_name in v["name"])
            subtasks = self._flink.vertex_subtasks(job["jid"], vertex["id"])
        except Exception as exc:  # noqa: BLE001 - REST down or odd answers: keep the last mapping
            log.warning("REST mapping of executor instances not refreshed: %s", exc)
            return
        where: dict[str, list[int]] = {}
        for sub in subtasks:
            where.setdefault(sub.get("taskmanager-id", ""), []).append(int(sub["subtask"]))
        self._where = where

    def partition(self, key, num_partitions: int) -> int:
        # Refresh every refresh_s, and at most once a second while no mapping is known (REST
        # down must not cost a request per record).
        age = time.monotonic() - self._fetched_at
        if age > self.refresh_s or (not self._where and age > 1.0):
            self._refresh()
        candidates = self._where.get(key)
        if not candidates:
            self.misrouted += 1
            candidates = list(range(num_partitions))
        i = self._next.get(key, 0)
        self._next[key] = i + 1
        return candidates[i % len(candidates)] % num_partitions
