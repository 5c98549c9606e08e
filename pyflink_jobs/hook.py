"""The streamplace hook: learned placement (LDWP) and the IAWP executor for a PyFlink job's own
operator.

Three lines in an existing job (its ``stream.map(enrich, output_type=Types.STRING())`` becomes)::

    from pyflink_jobs.hook import StreamplaceHook
    hook = StreamplaceHook.create("127.0.0.1:9092", service_url="http://127.0.0.1:8471")
    enriched = hook.apply(env, stream, enrich, output_type=Types.STRING())

``enriched`` carries the operator's own outputs, exactly as the ``map`` gave them; sink it as
before. ``hook.dead_letters`` carries DeadLetter Avro bytes: records the operator raised on
(with the error and traceback) and records the router could not describe. The operator may be
a callable, a ``MapFunction`` / ``FlatMapFunction`` (``open``/``close`` once per executor
instance), a torch ``nn.Module``, or named stages with CPU/GPU affinity and batching
(:mod:`workload.operators`); ``task_type=`` / ``task_size=`` tell the policy what a record is
(defaults: the operator's name; the record's serialized length). Without an operator,
``apply(env, tasks)`` runs streamplace-native Avro TaskEvents through the built-in apps and
returns TaskResult bytes.

What ``apply`` adds::

    stream ─────────────┐
                        ├─> router (describe + decide in one Python function; parallelism 1,
                        │           or router_parallelism instances sharing the stream)
    feedback (Kafka) ───┘      │ broadcast NodeFeedback     │ RoutedRecord per TaskManager
      (broadcast)              v                            v
              executor@tm_a (pinned) -> outputs   executor@tm_b (pinned) -> outputs  ... union

- The router holds a local copy of the current policy (numpy LDWP inference), node state from the
  broadcast NodeFeedback corrected by its own in-flight counts, refreshes model versions from the
  placement service in the background and falls back to the last model, or least-loaded, when the
  service is unreachable (:mod:`pyflink_jobs.router`, :mod:`pyflink_jobs.router_function`).
- ``routing="colocated"`` (one-step CPU operators): one router instance per TaskManager, each
  running the records it routes to its own node itself (they cross one Python operator, as in
  a plain ``map``), the rest to the executors below (:mod:`pyflink_jobs.inline_executor`). Each
  reads the feedback topic itself (no broadcast input: :mod:`pyflink_jobs.feedback_tail`,
  ``router_feedback``), so it is a one-input operator, as the ``map`` it replaces.
- One executor operator per TaskManager, pinned by a slot sharing group that requests one unit of
  that TaskManager's external resource, with the plan's parallelism; records reach it through
  the router's side output for that node. Every other slot sharing group the hook uses gets an
  explicit resource spec (fine-grained resource management requires it).
- Every operator has a stable uid (``<uid_prefix>-router``, ``<uid_prefix>-executor-<node>``,
  ``<uid_prefix>-outputs-<node>``, ``<uid_prefix>-feedback-source`` when the feedback is
  broadcast) so a savepoint survives
  resubmission with a new plan.
- Keyed or stateful operators are refused with a clear error: the hook moves records between
  nodes, so per-key state could not follow them.

Cluster settings the hook needs (``streamplace doctor`` checks them):
``cluster.fine-grained-resource-management.enabled: true``; each TaskManager started with
``-D taskmanager.resource-id=<node>`` ``-D external-resources=<node>``
``-D external-resource.<node>.amount=<most executor instances>`` (and, for
``routing="colocated"``, ``streamplace_router`` in ``external-resources`` with amount 1);
``STREAMPLACE_NODE_ID=<node>``
in its environment; ``python.executable`` pointing at a virtualenv with streamplace installed; the
Kafka connector jar added to the job.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

from workload.limits import (BYTES_PER_PIXEL, BYTES_PER_RECORD_BYTE, DEFAULT_NODE_MEMORY_BYTES,
                             TaskLimits, finite_real, require_count, short_repr)
from workload.model import DEFAULT_GPU_MODEL, taskmanager_memory_gb
from workload.operators import as_operator

from pyflink_jobs.executor_function import (ChecksumExecutor, ExecutorFunctionSettings,
                                            NodeExecutorFunction)
from pyflink_jobs.flink_ops import (DeadLetterLog, dead_letter_tag,
                                    executor_slot_sharing_group,
                                    io_slot_sharing_group, kafka_bytes_sink,
                                    own_python_bundle, python_execution_mode,
                                    router_slot_sharing_group, side_output)
from pyflink_jobs.inline_executor import InlineExecutor, inline_output_tag
from pyflink_jobs.feedback_tail import FeedbackTailSettings
from pyflink_jobs.job_shape import JobShape
from pyflink_jobs.live_cluster import (LiveTaskManager, drop_unknown_plan, fit_nodes_to_cluster,
                                       read_live_taskmanagers_of, retire_unregistered)
from pyflink_jobs.output_fit import OutputFit
from pyflink_jobs.operator_function import (DirectOperatorFunction, OperatorExecutorFunction,
                                            SplitOutcomes)
from interference.executor.direct import direct_operator
from interference.schedulers import NODE_SCHEDULERS
from pyflink_jobs.decision_hold import (HELD_ROUTER_BUNDLE_MS, MAX_HOLD_IN_FLIGHT,
                                       held_router_bundle)
from pyflink_jobs.router import RouterNode, RouterSettings
from pyflink_jobs.tenant_quotas import QuotaSettings, parse_tenant_shares
from pyflink_jobs.router_function import (OperatorRecords, RestAwarePartitioner, RouterFunction,
                                          TaskEventRecords, feedback_state_descriptor, node_tag,
                                          routed_tag)

__all__ = ["HookSettings", "HookBuilder", "StreamplaceHook", "RouterFunction",
           "RestAwarePartitioner", "node_tag", "nodes_from_cluster_spec", "cluster_task_limits",
           "parse_plan", "parse_retired"]

log = logging.getLogger(__name__)

#: Environment variables ``STREAMPLACE_HOOK_<FIELD>`` set hook settings (:meth:`HookSettings.from_env`).
ENV_PREFIX = "STREAMPLACE_HOOK_"
#: most calls of the user's operator per record (HookSettings.max_attempts)
MAX_ATTEMPTS = 10
#: More router instances than this only split every executor's capacity into shares of one.
MAX_ROUTER_PARALLELISM = 64
#: How records reach the TaskManager chosen for them (HookSettings.routing).
ROUTINGS = ("pinned", "rest_partitioner", "colocated")
#: How the routers get the feedback (HookSettings.router_feedback).
ROUTER_FEEDBACKS = ("auto", "broadcast", "topic")
#: Records in flight per executor instance (HookSettings.executor_capacity): PyFlink's async
#: queue holds them all, and a larger number is a unit mistake or garbage.
MAX_EXECUTOR_CAPACITY = 10_000
#: The longest executor timeout (HookSettings.executor_timeout_s): a day. The shortest is one
#: millisecond: PyFlink takes whole milliseconds, and 0 ms sets no timeout at all.
MIN_EXECUTOR_TIMEOUT_S = 0.001
MAX_EXECUTOR_TIMEOUT_S = 86_400.0
#: The longest feedback or model refresh interval (HookSettings.feedback_interval_s,
#: refresh_interval_s): an hour; node state older than that is no state.
MAX_INTERVAL_S = 3600.0
#: Kafka's transaction.timeout.ms is a Java int (HookSettings.transaction_timeout_ms).
MAX_TRANSACTION_TIMEOUT_MS = 2**31 - 1


@dataclass
class HookSettings:
    """Every setting of the hook; the builder sets them one by one."""

    bootstrap_servers: str = "127.0.0.1:9092"
    feedback_topic: str = "feedback"
    feedback_group_id: str = "streamplace-router"
    service_url: str = ""             # the placement service; "" = none (fixed policy/model)
    service_token: str = ""
    nodes: list[RouterNode] = field(default_factory=list)   # "" -> from the cluster spec
    cluster_spec: str = "default"     # name or path of a streamplace cluster spec
    gpu_model: str = DEFAULT_GPU_MODEL   # what the cost model takes the spec's GPUs to be
    plan: dict[str, int] = field(default_factory=dict)      # node -> executor instances
    # Nodes that left (died, or were removed from the plan) -> the node that now hosts their
    # executor operator: the operator keeps its uid, so the tasks that were in flight there
    # (in its checkpointed state) are re-issued on restore and finish on the host; the router
    # sends it nothing new.
    retired: dict[str, str] = field(default_factory=dict)
    policy: str = "ldwp"              # "ldwp" or a placement.policies rule
    fallback: str = "least_loaded"
    initial_model: str = ""           # path of a model file to start from
    scheduler: str = "iawp"           # the node scheduler inside each executor
    executor: str = "iawp"            # "iawp", or "checksum" (trivial work: measures the hook's
    #                                   own overhead with light records)
    executor_capacity: int = 32       # records in flight per executor instance (the async
    #                                   capacity): batching can only batch what is in flight
    executor_timeout_s: float = 300.0
    feedback_interval_s: float = 0.5
    refresh_interval_s: float = 2.0
    uid_prefix: str = "streamplace"
    # "pinned": one executor operator per TaskManager, pinned by fine-grained resource
    # management (the default). "rest_partitioner": for clusters without fine-grained resource
    # management: one executor operator wherever Flink puts its instances, and a partitioner
    # that sends each task to an instance on the chosen TaskManager (found through REST).
    # "colocated": as "pinned", and one router instance per node, at most one per TaskManager
    # (each needs one unit of the streamplace_router external resource), each running the
    # records it routes to its own node itself: they cross one Python operator, not two
    # (pyflink_jobs/inline_executor.py; one-step CPU operators only).
    routing: str = "pinned"
    rest_url: str = "http://127.0.0.1:8081"   # the JobManager REST API (rest_partitioner)
    job_name: str = ""                         # this job's name in REST (rest_partitioner)
    # A user operator's stages batch same-stage inputs of different in-flight records (each
    # stage's BatchPolicy); False = one input per call (the ablation).
    batching: bool = True
    # A user operator's per-record stages take the inputs of several records ready at once in
    # one call, the function still called once per record (interference.executor.batching);
    # False = one input per call (the ablation).
    call_groups: bool = True
    # Where the hook itself sinks its dead letters (exactly-once); "" = the job sinks
    # ``hook.dead_letters`` itself (or not at all).
    dead_letter_topic: str = ""
    transaction_timeout_ms: int = 600_000
    # What a task may be (size per type, expected_work_ms, id/type lengths); the router refuses
    # the rest into the dead letters. None = derived from the smallest TaskManager's memory in
    # the cluster spec (workload/limits.py; explicit ``nodes``: the laptop default).
    limits: TaskLimits | None = None
    # Router instances (parallel subtasks of the router operator). One router is the paper's
    # single scheduler, but every record crosses it: at parallelism N each instance routes
    # 1/N of the stream with its own in-flight view and 1/N of every executor's capacity, and
    # all of them learn from all the feedback (it is broadcast). Tenant quotas are then
    # enforced per router instance, on its share of the stream.
    router_parallelism: int = 1
    # The TaskManager (node id) that runs the router and the rest of the job's default slot
    # sharing group (its sources and sinks), pinned like an executor; "" = where Flink puts
    # them. On hosts of unequal speed, Flink may put them on a slow one, beside its executor.
    # Needs one router instance and a free slot there (fewer executor instances than slots).
    router_host: str = ""
    # Tenant quotas enforced by the router (pyflink_jobs/tenant_quotas.py): tenant -> weight,
    # "*" -> the weight of tenants not listed; may be given as "a=3,b=1". Empty: no quotas.
    tenant_shares: dict[str, float] = field(default_factory=dict)
    # routing "colocated": a record measured lighter than this on the router's own node stays
    # there without asking the policy (RouterSettings.keep_local_below_ms)
    keep_local_below_ms: float = 0.25
    # How the routers get the executors' NodeFeedback: "broadcast", a broadcast input of the
    # router operator read by a Kafka source of the job (its node views in broadcast state);
    # "topic", each router reads the feedback topic itself on a thread of its worker
    # (pyflink_jobs/feedback_tail.py: one input, no feedback source, 2.7 µs a record less
    # of the router's Python, measured); "auto", "topic" with routing "colocated" (every record
    # crosses a router there) and "broadcast" otherwise.
    router_feedback: str = "auto"
    # Decide late (pyflink_jobs/decision_hold.py): while every node holds this many times its
    # share of the executors' capacity in flight, the router waits for a completion report
    # before it decides the next record (which waits in Kafka meanwhile); 0 = decide each
    # record as it comes. The wait needs the feedback read on the router's own thread, so
    # "auto" feedback is "topic" then.
    hold_in_flight: float = 0.0
    # Calls of the user's operator per record before the record is a dead letter. 1, as a
    # plain map calls it once; more re-run an operator that raised (its side effects too).
    # (A batched stage whose batch raised re-runs its records one by one either way: that is
    # how the one bad input is found; its attempts count from there.)
    max_attempts: int = 1

    def __post_init__(self) -> None:
        # Checked here, not when the job starts: a typo fails the submission, not the router
        # (each check's reason is beside it, below the class).
        _check_choices(self)
        _check_numbers(self)
        _check_plan(self)

    @classmethod
    def from_fields(cls, source, renames: dict[str, str] | None = None) -> HookSettings:
        """The hook's settings from any settings object (e.g. a job's ``PipelineSettings``):
        every field of the same name, or named in ``renames`` (hook field -> source field);
        ``plan`` / ``retired`` / ``tenant_shares`` may be given as ``"tm_a=2,tm_b=1"`` /
        ``"tm_c=tm_a"`` / ``"a=3,b=1"``."""
        renames = renames or {}
        values = {}
        for f in fields(cls):
            name = renames.get(f.name, f.name)
            if hasattr(source, name):
                values[f.name] = getattr(source, name)
        if isinstance(values.get("plan"), str):
            values["plan"] = parse_plan(values["plan"])
        if isinstance(values.get("retired"), str):
            values["retired"] = parse_retired(values["retired"])
        return cls(**values)

    @classmethod
    def from_env(cls, environ=None, **explicit) -> HookSettings:
        """Defaults, then ``STREAMPLACE_HOOK_<FIELD>`` environment variables of the process
        that builds the job (e.g. ``STREAMPLACE_HOOK_POLICY=mct``,
        ``STREAMPLACE_HOOK_SERVICE_URL``, ``STREAMPLACE_HOOK_PLAN=tm_a=2,tm_b=1``), then the
        ``explicit`` keywords: a job's code keeps its three lines while an operator of the
        cluster (or a benchmark) picks the policy."""
        import os
        environ = os.environ if environ is None else environ
        values: dict = {}
        for f in fields(cls):
            raw = environ.get(ENV_PREFIX + f.name.upper())
            if raw is None or f.name in ("nodes", "limits"):  # objects: set them in code
                continue
            kind = str(f.type)
            try:
                if kind == "bool":
                    if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
                        raise ValueError("expected true or false")
                    values[f.name] = raw.lower() in ("1", "true", "yes")
                elif kind == "int":
                    values[f.name] = int(raw)
                elif kind == "float":
                    values[f.name] = float(raw)
                elif f.name == "plan":
                    values[f.name] = parse_plan(raw)
                elif f.name == "retired":
                    values[f.name] = parse_retired(raw)
                elif f.name == "tenant_shares":
                    values[f.name] = parse_tenant_shares(raw)
                else:
                    values[f.name] = raw
            except ValueError as exc:
                raise ValueError(f"{ENV_PREFIX + f.name.upper()}={raw!r}: {exc}") from None
        values.update(explicit)
        return cls(**values)

    def resolved_nodes(self, live: list[LiveTaskManager] | None = None) -> list[RouterNode]:
        """The nodes with their planned instance counts (plan > service plan > 1 each);
        ``live``: the cluster's registered TaskManagers, to check the nodes against
        (:func:`pyflink_jobs.live_cluster.fit_nodes_to_cluster`; None: not checked)."""
        spec_nodes = list(self.nodes) or nodes_from_cluster_spec(self.cluster_spec,
                                                                 self.gpu_model)
        nodes, note = fit_nodes_to_cluster(
            [n for n in spec_nodes if n.node_id not in self.retired], live, self.routing,
            chosen=bool(self.nodes) or self.cluster_spec != "default", spec=self.cluster_spec,
            gpu_model=self.gpu_model)
        if note:
            log.warning("streamplace hook: %s", note)
        plan = dict(self.plan)
        if not plan and self.service_url:
            try:
                from placement.service.client import PlacementClient
                plan = PlacementClient(self.service_url, self.service_token or None,
                                       timeout_s=3.0).plan().get("nodes", {})
            except Exception as exc:  # noqa: BLE001 - a plan of one instance each still works
                log.warning("no plan from the placement service (%s): one executor per node",
                            exc)
            plan = drop_unknown_plan(plan, nodes, "placement service")
        unknown = sorted(set(plan) - {n.node_id for n in nodes} - set(self.retired))
        if unknown:
            raise ValueError(f"the plan names nodes the cluster spec lacks: {unknown}")
        resolved = [replace(n, instances=int(plan.get(n.node_id, n.instances or 1)))
                    for n in nodes]
        resolved = [n for n in resolved if n.instances > 0]
        hosts = {n.node_id for n in resolved}
        bad_hosts = {r: h for r, h in self.retired.items() if h not in hosts}
        if bad_hosts:
            raise ValueError(f"retired nodes must be hosted by a planned node: {bad_hosts}")
        if not resolved:
            raise ValueError("the plan gives no node an executor instance")
        return resolved

    def retire_unregistered(self, live: list[LiveTaskManager] | None) -> dict[str, str]:
        """The default spec's nodes that ``live`` lacks, retired onto registered ones
        (:func:`pyflink_jobs.live_cluster.retire_unregistered`); {} when the spec or the
        nodes were chosen, the routing is not pinned, or nothing is missing."""
        if self.nodes or self.cluster_spec != "default" or self.routing != "pinned":
            return {}
        spec_ids = [n.node_id for n in nodes_from_cluster_spec(self.cluster_spec)
                    if n.node_id not in self.retired]
        retire = retire_unregistered(spec_ids, live)
        if retire:
            log.warning("streamplace hook: the cluster spec's nodes %s are not registered "
                        "TaskManagers with their own resource: their executors are retired "
                        "onto %s (fed nothing new); the job places on the others",
                        sorted(retire), retire)
        return retire

    def feedback_from_topic(self, local: bool = False) -> bool:
        """True when each router reads the feedback topic itself (``router_feedback``).
        ``local``: the job runs in PyFlink's local mini cluster, where "auto" reads the topic
        too: a broadcast input is a Kafka source, which needs the connector jar and fails the
        job when no broker answers, while the tail waits for one (a plain script with a
        bounded input then runs without a broker)."""
        if self.router_feedback == "auto":
            return self.routing == "colocated" or local or self.hold_in_flight > 0
        return self.router_feedback == "topic"

    def operator_instances(self, nodes) -> int:
        """How many instances the user's operator has in a job on ``nodes`` (what its runtime
        context says, ``pyflink_jobs.operator_context``): the colocated routers' (numbered
        first), then each node's executors in plan order, then the retired nodes'."""
        return ((self.router_instances(nodes) if self.routing == "colocated" else 0)
                + sum(n.instances for n in nodes) + len(self.retired))

    def router_instances(self, nodes: list[RouterNode] | None = None) -> int:
        """Router parallelism: ``router_parallelism``; with routing "colocated" one per node
        of ``nodes`` (the job's, as ``apply`` resolved them; default: resolved here from the
        settings alone)."""
        if self.routing == "colocated":
            return max(1, len(self.resolved_nodes() if nodes is None else nodes))
        return self.router_parallelism

    def task_limits(self, user_records: bool) -> TaskLimits:
        """``limits``, else derived from the cluster spec's memory with the cost of a user
        record's byte or of a TaskEvent's pixel (explicit nodes: no spec to read)."""
        if self.limits is not None:
            return self.limits
        return cluster_task_limits("" if self.nodes else self.cluster_spec,
                                   BYTES_PER_RECORD_BYTE if user_records else BYTES_PER_PIXEL)

    def node_memory_bytes(self, host: str) -> int:
        """``host``'s TaskManager process memory from the cluster spec, 0 when unknown (the
        executor then takes what its process can have: interference.executor.memory)."""
        if not host or self.nodes or not self.cluster_spec:
            return 0
        from workload.cluster_spec import load_cluster_spec
        try:
            return load_cluster_spec(self.cluster_spec).node(host).process_memory_mb << 20
        except (ValueError, KeyError, OSError):
            return 0


def _check_choices(s: HookSettings) -> None:
    """The named choices and typed settings: each one of its known values or types."""
    if s.routing not in ROUTINGS:
        raise ValueError(f"routing must be one of {ROUTINGS}, got {s.routing!r}")
    if s.router_feedback not in ROUTER_FEEDBACKS:
        raise ValueError(f"router_feedback must be one of {ROUTER_FEEDBACKS}, got "
                         f"{s.router_feedback!r}")
    if s.router_feedback == "broadcast" and finite_real(s.hold_in_flight):
        raise ValueError("hold_in_flight needs router_feedback 'topic' or 'auto': a router "
                         "fed by its broadcast input cannot read a completion while it waits")
    if s.routing == "colocated" and s.router_parallelism != 1:
        raise ValueError("routing='colocated' runs one router per node (at most one per "
                         "TaskManager); leave router_parallelism at 1, got "
                         f"{s.router_parallelism}")
    if isinstance(s.tenant_shares, str):
        s.tenant_shares = parse_tenant_shares(s.tenant_shares)
    else:
        QuotaSettings(dict(s.tenant_shares))  # raises on a bad name or weight
    from workload.estimates import check_gpu_model
    check_gpu_model(s.gpu_model)
    if not isinstance(s.scheduler, str) or s.scheduler.strip().lower() not in NODE_SCHEDULERS:
        raise ValueError(f"scheduler must be one of {sorted(NODE_SCHEDULERS)}, got "
                         f"{short_repr(s.scheduler)}")
    for name in ("batching", "call_groups"):
        if not isinstance(getattr(s, name), bool):  # "false" is truthy: it stayed on
            raise ValueError(f"{name} must be True or False, got "
                             f"{short_repr(getattr(s, name))}")
    if s.limits is not None and not isinstance(s.limits, TaskLimits):
        raise ValueError(f"limits must be a workload.limits.TaskLimits or None, got "
                         f"{short_repr(s.limits)}")
    from placement.policies import ALIASES, POLICIES   # (50 ms, and no torch: only when built)
    known = sorted(POLICIES)
    if s.policy != "ldwp" and (not isinstance(s.policy, str)
                               or (s.policy not in POLICIES and s.policy not in ALIASES)):
        raise ValueError(f"unknown policy {short_repr(s.policy)}; use 'ldwp' or one of {known}")
    # the rule while no model is there: a typo failed only in the router, when it opened
    if not isinstance(s.fallback, str) or (s.fallback not in POLICIES
                                           and s.fallback not in ALIASES):
        raise ValueError(f"unknown fallback policy {short_repr(s.fallback)}; use one of {known}")


def _check_numbers(s: HookSettings) -> None:
    """The numeric settings, each a number of the right kind within its range: 0 or NaN
    intervals spin a thread (a feedback record or a model poll every few microseconds), a
    capacity below 1 hangs PyFlink's async queue with no error, and a timeout under a
    millisecond sets no timeout at all."""
    s.max_attempts = _require_int("max_attempts", s.max_attempts, 1, MAX_ATTEMPTS)
    s.router_parallelism = _require_int("router_parallelism", s.router_parallelism, 1,
                                        MAX_ROUTER_PARALLELISM)
    for name in ("feedback_interval_s", "refresh_interval_s"):
        setattr(s, name, _require_number(name, getattr(s, name), 0.0, MAX_INTERVAL_S,
                                         low_open=True))
    s.executor_timeout_s = _require_number("executor_timeout_s", s.executor_timeout_s,
                                           MIN_EXECUTOR_TIMEOUT_S, MAX_EXECUTOR_TIMEOUT_S)
    s.keep_local_below_ms = _require_number(  # RouterSettings' range, checked sooner
        "keep_local_below_ms", s.keep_local_below_ms, 0.0, 1000.0)
    s.executor_capacity = _require_int("executor_capacity", s.executor_capacity, 1,
                                       MAX_EXECUTOR_CAPACITY)
    s.hold_in_flight = _require_number("hold_in_flight", s.hold_in_flight, 0.0,
                                       MAX_HOLD_IN_FLIGHT)
    s.transaction_timeout_ms = _require_int("transaction_timeout_ms", s.transaction_timeout_ms,
                                            1, MAX_TRANSACTION_TIMEOUT_MS)


def _check_plan(s: HookSettings) -> None:
    """The plan: text parsed, else a mapping of node ids to whole instance counts."""
    if isinstance(s.plan, str):
        s.plan = parse_plan(s.plan)
    if not isinstance(s.plan, Mapping):
        raise ValueError(f"plan must map node ids to executor instances, e.g. "
                         f"{{'tm_a': 2}}, got {short_repr(s.plan)}")
    for node, count in s.plan.items():
        if not isinstance(node, str) or not node:
            raise ValueError(f"plan keys must be node ids, got {short_repr(node)}")
        require_count(f"plan[{node!r}]", count, minimum=0)   # 2.7 is no count
    s.plan = {node: int(count) for node, count in s.plan.items()}


def _require_number(name: str, value, low: float, high: float, low_open: bool = False) -> float:
    """``value`` as a float when it is a finite real number in [low, high] (``low_open``:
    (low, high]); else a ValueError naming the setting (bools and strings refused)."""
    number = finite_real(value)
    if number is None or not (low < number if low_open else low <= number) or number > high:
        raise ValueError(f"{name} must be a finite number in {'(' if low_open else '['}{low:g}, "
                         f"{high:g}], got {short_repr(value)}")
    return number


def _require_int(name: str, value, low: int, high: int) -> int:
    """``value`` as an int when it is an integer in [low, high] (bools refused); else a
    ValueError naming the setting."""
    require_count(name, value, minimum=low)
    if value > high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {short_repr(value)}")
    return int(value)


def parse_plan(text: str) -> dict[str, int]:
    """``"tm_a=2,tm_b=1"`` -> ``{"tm_a": 2, "tm_b": 1}``, with a clear error for bad input."""
    return {node: int(count) for node, count in _pairs(text, "plan", "node=count, e.g. tm_a=2",
                                                        lambda v: v.isdigit())}


def parse_retired(text: str) -> dict[str, str]:
    """``"tm_c=tm_a"`` -> ``{"tm_c": "tm_a"}`` (retired node -> host node)."""
    return dict(_pairs(text, "retired", "node=host, e.g. tm_c=tm_a", bool))


def _pairs(text: str, what: str, expected: str, valid) -> list[tuple[str, str]]:
    pairs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = (x.strip() for x in part.partition("="))
        if not sep or not key or not valid(value):
            raise ValueError(f"bad {what} entry {part!r}: expected {expected}")
        pairs.append((key, value))
    return pairs


def cluster_task_limits(cluster_spec: str = "",
                        bytes_per_unit: float = BYTES_PER_PIXEL) -> TaskLimits:
    """:meth:`TaskLimits.from_memory` for the smallest TaskManager of ``cluster_spec`` (its
    process memory: task heap + managed + the JVM's fixed parts), the node a task can least
    afford; without a spec, or one that cannot be read, the laptop default."""
    memory = DEFAULT_NODE_MEMORY_BYTES
    if cluster_spec:
        from workload.cluster_spec import load_cluster_spec
        try:
            spec = load_cluster_spec(cluster_spec)
            memory = min(tm.process_memory_mb for tm in spec.taskmanagers) << 20
        except (ValueError, OSError) as exc:
            log.warning("task limits from the default node memory: %s", exc)
    return TaskLimits.from_memory(memory, bytes_per_unit)


def nodes_from_cluster_spec(name_or_path: str, gpu_model: str = DEFAULT_GPU_MODEL
                            ) -> list[RouterNode]:
    """RouterNodes from a streamplace cluster spec (``workload/specs/<name>.yaml`` or a path).

    With ``isolation: host`` each node's ``link_mbps`` / ``uplink_mbps`` are its emulated
    host's shaped downlink and uplink (``TaskManagerSpec.host_limits()``, defaults filled in),
    so the router reads a node's feedback byte rates as fractions of the links it really has;
    in cpuset mode links are not shaped and RouterNode's default stays.

    Example::

        >>> [(n.link_mbps, n.uplink_mbps) for n in nodes_from_cluster_spec("hosts")]
        [(8.0, 8.0), (1000.0, 1000.0), (80.0, 40.0)]
    """
    from workload.cluster_spec import load_cluster_spec
    spec = load_cluster_spec(name_or_path)
    nodes = []
    for tm in spec.taskmanagers:
        links = tm.cost_model_links(spec.isolation)
        link = {"link_mbps": links["downlink_mbps"],
                "uplink_mbps": links["uplink_mbps"]} if links else {}
        nodes.append(RouterNode(tm.id, cpu_cores=max(1, int(round(tm.cpu_cores))),
                                work_multiplier=tm.work_multiplier, instances=1,
                                gpus=len(tm.gpu_ids), memory_gb=taskmanager_memory_gb(tm),
                                gpu_model=gpu_model, **link))
    return nodes


class StreamplaceHook:
    """Adds router + pinned executors to a job; see the module docstring."""

    def __init__(self, settings: HookSettings | None = None):
        self.settings = settings or HookSettings()
        self.dead_letters = None
        self.nodes: list[RouterNode] = []
        self.local = False    # apply(): the job runs in this process's mini cluster
        self._uid_base = self.settings.uid_prefix
        self.bounded = False  # apply(): every source behind the stream is bounded
        self._operator_instances = 0  # apply(): the user operator's instances in the job
        self._output_type = None      # apply(): the outputs' type (None: pickled objects)
        self._python_mode = "process"  # apply(): the job's python.execution-mode

    @staticmethod
    def builder() -> "HookBuilder":
        return HookBuilder()

    @classmethod
    def create(cls, bootstrap_servers: str, service_url: str = "", **settings) -> "StreamplaceHook":
        """The one-line form: ``StreamplaceHook.create("127.0.0.1:9092", service_url=url)``;
        other :class:`HookSettings` fields as keywords; fields not given may come from
        ``STREAMPLACE_HOOK_<FIELD>`` environment variables (:meth:`HookSettings.from_env`)."""
        if service_url:
            settings["service_url"] = service_url
        return HookBuilder().settings(HookSettings.from_env(
            bootstrap_servers=bootstrap_servers, **settings)).build()

    def router_settings(self) -> RouterSettings:
        s = self.settings
        initial = None
        if s.initial_model:
            with open(s.initial_model, "rb") as handle:
                initial = handle.read()
        return RouterSettings(nodes=self.nodes, policy=s.policy, fallback=s.fallback,
                              initial_model=initial, service_url=s.service_url,
                              service_token=s.service_token,
                              refresh_interval_s=s.refresh_interval_s,
                              executor_capacity=s.executor_capacity,
                              routers=s.router_instances(self.nodes or None),
                              keep_local_below_ms=s.keep_local_below_ms,
                              hold_in_flight=s.hold_in_flight,
                              tenant_quotas=QuotaSettings(dict(s.tenant_shares))
                              if s.tenant_shares else None)

    def task_limits(self, user_records: bool) -> TaskLimits:
        """:meth:`HookSettings.task_limits`."""
        return self.settings.task_limits(user_records)

    def executor_settings(self, instances: int = 1, host: str = "",
                          first_instance: int = 0) -> ExecutorFunctionSettings:
        """The executor instances' settings, derived from this hook's; the per-task memory
        budget reads ``host``'s memory from the cluster spec (else the process's own);
        ``first_instance``: the number of this operator's first instance among all the user
        operator's instances (:meth:`HookSettings.operator_instances`)."""
        s = self.settings
        return ExecutorFunctionSettings(
            bootstrap_servers=s.bootstrap_servers, feedback_topic=s.feedback_topic,
            scheduler=s.scheduler, feedback_interval_s=s.feedback_interval_s,
            instances_on_node=instances, batching=s.batching, call_groups=s.call_groups,
            node_memory_bytes=s.node_memory_bytes(host), first_instance=first_instance,
            operator_instances=self._operator_instances, max_attempts=s.max_attempts,
            output_fit=OutputFit.for_output_type(self._output_type, self._python_mode))

    def apply(self, env, stream, operator=None, output_type=None, task_type=None,
              task_size=None, name: str | None = None, flat: bool | None = None):
        """Route each record of ``stream`` and run ``operator`` on it where the policy decides.

        ``operator``: a callable, a ``MapFunction`` / ``FlatMapFunction``, a torch
        ``nn.Module``, a PyFlink ``AsyncFunction`` or ``async def`` function (awaited on one
        event loop per worker; an ``AsyncFunction`` call past
        ``workload.operators.ASYNC_TIMEOUT_S`` gets its ``timeout(record)`` answer) or a
        :class:`workload.operators.StagedOperator`; ``flat=True``: a plain
        callable's result per record is an iterable of outputs, as ``flat_map(fn)`` (default:
        only generator functions are); ``output_type``: as in
        ``DataStream.map`` (default: pickled); ``task_type(record) -> str`` /
        ``task_size(record) -> int``: what the policy sees (defaults: the operator's name; the
        record's serialized length). Returns the operator's outputs; sets
        ``self.dead_letters`` (DeadLetter bytes). Without ``operator``: ``stream`` holds
        streamplace TaskEvents, run by the built-in apps (TaskResult bytes)."""
        from pyflink.common import Types

        shape = JobShape.read(env, stream)
        self.local, self.bounded = shape.local, shape.bounded
        self.settings = replace(self.settings, uid_prefix=shape.uid_prefix(self._uid_base))
        s = self.settings
        op = None
        if operator is not None:
            if s.executor == "checksum":
                raise ValueError("executor='checksum' runs TaskEvents only; with an operator "
                                 "the operator is the work")
            op = as_operator(operator, name, task_type, task_size, flat)
        elif (task_type is not None or task_size is not None or output_type is not None
              or flat is not None):
            raise ValueError("task_type, task_size, output_type and flat need an operator: "
                             "hook.apply(env, stream, operator, output_type=...)")
        live = None if self.local else read_live_taskmanagers_of(env, s.rest_url)
        retire = s.retire_unregistered(live)   # the default spec's nodes this cluster lacks
        if retire:
            self.settings = s = replace(s, retired={**retire, **s.retired})
        self.nodes = s.resolved_nodes(live)
        self._operator_instances = s.operator_instances(self.nodes) if op is not None else 0
        if self.local:  # no TaskManagers to pin to: every operator in the default group
            _warn_local(s, self.nodes, op is not None)
        else:
            env.register_slot_sharing_group(io_slot_sharing_group(host=self._router_host()))
        single = s.routing == "rest_partitioner"
        limits = s.task_limits(user_records=op is not None)
        reader = OperatorRecords(op, limits) if op is not None else TaskEventRecords(limits)
        self._output_type = output_type or Types.PICKLED_BYTE_ARRAY()
        self._python_mode = python_execution_mode(stream)
        inline = self._inline_executor(op) if s.routing == "colocated" else None
        tail = (FeedbackTailSettings(s.bootstrap_servers, s.feedback_topic)
                if s.feedback_from_topic(self.local) else None)
        router_settings = self.router_settings()
        router = RouterFunction(router_settings, reader, single_output=single,
                                inline=inline, feedback=tail)
        if tail is None:   # the feedback as the router's broadcast input
            stream = stream.connect(feedback_stream(env, s, self.bounded).broadcast(
                feedback_state_descriptor()))
        routed = (stream.process(router, output_type=Types.PRIMITIVE_ARRAY(Types.BYTE()))
                  .name("streamplace-router").uid(f"{s.uid_prefix}-router")
                  .set_parallelism(s.router_instances(self.nodes)))
        if s.hold_in_flight > 0:
            _held_router_bundle(routed, router_settings)
        if inline is not None and not self.local:  # one router per TaskManager
            routed = routed.slot_sharing_group(router_slot_sharing_group())
        self._dead = [routed]
        if single:
            result = self._apply_rest_partitioner(env, routed, op)
        else:
            first = s.router_instances(self.nodes) if inline is not None else 0
            outputs = []
            for node in self.nodes:
                outputs.append(self._executor_chain(
                    side_output(routed, node_tag(node.node_id)), op, node.node_id,
                    node.node_id, node.instances, first_instance=first))
                first += node.instances
            # A retired node keeps its operator's uid, pinned to its host, fed nothing new: the
            # tasks that were in flight there (in checkpointed state) finish on the host.
            for number, (retired, host) in enumerate(sorted(s.retired.items())):
                outputs.append(self._executor_chain(
                    side_output(routed, node_tag(retired)), op, retired, host, 1,
                    suffix=f"-retired-on-{host}", first_instance=first + number))
            if inline is not None:  # what the routers ran on their own nodes
                outputs.insert(0, side_output(routed, inline.output_tag))
            result = outputs[0].union(*outputs[1:]) if len(outputs) > 1 else outputs[0]
        self.dead_letters = self._dead[0].union(*self._dead[1:]) if len(self._dead) > 1 \
            else self._dead[0]
        sink_dead_letters(self.dead_letters, s)
        return result

    def _inline_executor(self, op) -> InlineExecutor:
        """What a colocated router runs records with (pyflink_jobs/inline_executor.py)."""
        if op is None or direct_operator(op) is None:
            raise ValueError(
                "routing='colocated' runs records inside the router, one at a time, as a map "
                "does: it needs a one-step CPU operator (a plain function or a MapFunction). "
                "TaskEvents, operators with stages, batching, a GPU or async calls need the "
                "executors' batching: use routing='pinned'")
        return InlineExecutor(op, self.executor_settings(1, ""),
                              inline_output_tag(self._output_type))

    def _router_host(self) -> str | None:
        """``router_host`` checked against this job's nodes, or None (Flink places it)."""
        s = self.settings
        if not s.router_host:
            return None
        if s.routing != "pinned":
            raise ValueError("router_host needs routing='pinned' (fine-grained resources)")
        if s.router_parallelism != 1:
            raise ValueError(f"router_host pins one router instance; router_parallelism is "
                             f"{s.router_parallelism}")
        known = sorted({n.node_id for n in self.nodes})
        if s.router_host not in known:
            raise ValueError(f"router_host {s.router_host!r} is none of this job's nodes "
                             f"{known}")
        return s.router_host

    def _executor_chain(self, stream, op, label: str, host: str, parallelism: int,
                        suffix: str = "", group=None, first_instance: int = 0):
        """``stream`` through one executor operator (uid by ``label``, pinned to ``host``)
        and, for a user operator, the split into outputs and dead letters."""
        s = self.settings
        group = "default" if self.local else (group or executor_slot_sharing_group(host))
        if op is not None and direct_operator(op) is not None:
            # one per-record CPU step: computed inline, outputs and dead letters in one operator
            outputs = (stream.process(DirectOperatorFunction(
                host, op, self.executor_settings(parallelism, host, first_instance)),
                output_type=self._output_type)
                .name(f"streamplace-executor{'-' + label if label else ''}{suffix}")
                .uid(f"{s.uid_prefix}-executor{'-' + label if label else ''}")
                .set_parallelism(parallelism).slot_sharing_group(group))
            self._dead.append(side_output(outputs, dead_letter_tag()))
            return outputs
        if op is not None:
            function = OperatorExecutorFunction(
                host, op, self.executor_settings(parallelism, host, first_instance))
        elif s.executor == "checksum":
            function = ChecksumExecutor()
        else:
            function = NodeExecutorFunction(host, self.executor_settings(parallelism, host))
        executed = (self._execute(stream, function, op is not None)
                    .name(f"streamplace-executor{'-' + label if label else ''}{suffix}")
                    .uid(f"{s.uid_prefix}-executor{'-' + label if label else ''}").set_parallelism(parallelism)
                    .slot_sharing_group(group))
        if op is None:
            return executed
        outputs = (executed.process(SplitOutcomes(), output_type=self._output_type)
                   .name(f"streamplace-outputs{'-' + label if label else ''}{suffix}")
                   .uid(f"{s.uid_prefix}-outputs{'-' + label if label else ''}").set_parallelism(parallelism)
                   .slot_sharing_group(group))
        self._dead.append(side_output(outputs, dead_letter_tag()))
        return outputs

    def _execute(self, stream, function, pickled: bool):
        """``stream`` through ``function`` as an unordered async operator."""
        from pyflink.common import Time, Types
        from pyflink.datastream import AsyncDataStream
        if python_execution_mode(stream) == "thread":
            raise ValueError(
                "this operator runs in streamplace's batching executor, a PyFlink AsyncFunction, "
                "and PyFlink 2.2 does not run AsyncFunctions in thread mode: set "
                "python.execution-mode to 'process' for this job (streamplace's "
                "flink.python_execution_mode: process); one-step CPU operators (a plain "
                "function or MapFunction) run inline and work in thread mode too")
        s = self.settings
        return AsyncDataStream.unordered_wait(
            stream, function, Time.milliseconds(int(s.executor_timeout_s * 1000)),
            capacity=s.executor_capacity,
            output_type=Types.PICKLED_BYTE_ARRAY() if pickled else
            Types.PRIMITIVE_ARRAY(Types.BYTE()))

    def _apply_rest_partitioner(self, env, routed, op):
        s = self.settings
        if not s.job_name:
            raise ValueError("rest_partitioner routing needs the job's name (job_name) to find "
                             "its executor instances in REST")
        total = sum(n.instances for n in self.nodes)
        if not self.local:
            env.register_slot_sharing_group(io_slot_sharing_group("streamplace-executors"))
        partitioned = side_output(routed, routed_tag()).partition_custom(
            RestAwarePartitioner(s.rest_url, s.job_name, "streamplace-executor"),
            lambda pair: pair[0])
        return self._executor_chain(partitioned, op, "", "", total,
                                    group="streamplace-executors")


def _held_router_bundle(routed, settings: RouterSettings) -> None:
    """A router that decides late sends what it decided in small bundles of its own
    (pyflink_jobs/decision_hold.py, ``held_router_bundle``), or it waits for completions of
    records still in its own worker."""
    size = held_router_bundle(settings.hold_limits())
    if own_python_bundle(routed, size, HELD_ROUTER_BUNDLE_MS):
        log.info("the router decides late in bundles of %d records or %d ms", size,
                 HELD_ROUTER_BUNDLE_MS)
    else:
        log.warning("the router decides late on the job's own PyFlink bundles (no Python "
                    "operator to set them on): records it decided wait in its worker until a "
                    "bundle closes (python.fn-execution.bundle.size / .bundle.time)")


def feedback_stream(env, settings: HookSettings, bounded: bool = False):
    """The NodeFeedback topic as a stream (the routers' broadcast input). ``bounded``: the
    job's input is bounded, so this source must end too, or the job would never finish (and a
    BATCH job refuses an unbounded source): it reads what is in the topic when the job starts,
    and the routers decide on their own in-flight counts and the service's model after that."""
    from pyflink.common import ByteArraySchema, WatermarkStrategy
    from pyflink.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource
    s = settings
    builder = (KafkaSource.builder().set_bootstrap_servers(s.bootstrap_servers)
               .set_topics(s.feedback_topic).set_group_id(s.feedback_group_id)
               # Node state is only worth its newest reports; the past is in broadcast state.
               .set_starting_offsets(KafkaOffsetsInitializer.latest())
               .set_value_only_deserializer(ByteArraySchema()))
    if bounded:
        builder = builder.set_bounded(KafkaOffsetsInitializer.latest())
    source = builder.build()
    return (env.from_source(source, WatermarkStrategy.no_watermarks(),
                            "streamplace-feedback-source")
            .uid(f"{s.uid_prefix}-feedback-source").set_parallelism(1))


def sink_dead_letters(dead_letters, settings: HookSettings) -> None:
    """The hook's dead letters to ``dead_letter_topic`` (exactly once), else to the log."""
    from pyflink.common import Types
    s = settings
    if s.dead_letter_topic:
        (dead_letters.sink_to(kafka_bytes_sink(
            s.bootstrap_servers, s.dead_letter_topic,
            f"{s.uid_prefix}-{s.dead_letter_topic}",  # one prefix per job and topic
            s.transaction_timeout_ms))
         .name("streamplace-dead-letter-sink").uid(f"{s.uid_prefix}-dead-letter-sink")
         .slot_sharing_group("default"))
    else:  # logged, and read: PyFlink fails an operator whose side output nobody reads
        (dead_letters.flat_map(DeadLetterLog(), output_type=Types.PICKLED_BYTE_ARRAY())
         .name("streamplace-dead-letter-log").uid(f"{s.uid_prefix}-dead-letter-log")
         .slot_sharing_group("default"))


def _warn_local(settings: HookSettings, nodes, user_records: bool) -> None:
    """What a job in PyFlink's local mini cluster should know (logged when it is built)."""
    log.warning("streamplace hook: local execution (execution.target local): the executors "
                "of %s share this process; placement is by name only",
                [n.node_id for n in nodes])
    if not settings.dead_letter_topic:
        # the dead-letter log writes in the Python workers' log file, which a `python job.py`
        # user does not see: say where refused records go
        log.warning("streamplace hook: no dead_letter_topic: records refused (e.g. over %d "
                    "bytes) or failed by the operator are logged in PyFlink's Python worker "
                    "log (pyflink/log/ in its installation), not here; set dead_letter_topic, "
                    "or sink hook.dead_letters in the job",
                    settings.task_limits(user_records=user_records).max_size)


class HookBuilder:
    """PyFlink-style builder for :class:`StreamplaceHook`.

    Example::

        hook = (StreamplaceHook.builder().bootstrap_servers("127.0.0.1:9092")
                .service_url("http://127.0.0.1:8471").policy("ldwp").build())
    """

    def __init__(self):
        self._settings = HookSettings()

    def _set(self, **changes) -> "HookBuilder":
        for key, value in changes.items():
            setattr(self._settings, key, value)
        return self

    def bootstrap_servers(self, servers: str) -> "HookBuilder":
        return self._set(bootstrap_servers=servers)

    def feedback_topic(self, topic: str) -> "HookBuilder":
        return self._set(feedback_topic=topic)

    def service_url(self, url: str, token: str = "") -> "HookBuilder":
        return self._set(service_url=url, service_token=token)

    def cluster_spec(self, name_or_path: str) -> "HookBuilder":
        return self._set(cluster_spec=name_or_path)

    def nodes(self, nodes: list[RouterNode]) -> "HookBuilder":
        return self._set(nodes=list(nodes))

    def plan(self, plan: dict[str, int]) -> "HookBuilder":
        """Executor instances per node, ``{"tm_a": 2, "tm_b": 1}`` (or ``"tm_a=2,tm_b=1"``)."""
        return self._set(plan=replace(self._settings, plan=plan).plan)  # checked now

    def policy(self, name: str, fallback: str = "least_loaded") -> "HookBuilder":
        return self._set(policy=name, fallback=fallback)

    def initial_model(self, path: str) -> "HookBuilder":
        return self._set(initial_model=path)

    def node_scheduler(self, name: str) -> "HookBuilder":
        replace(self._settings, scheduler=name)  # checked now (__post_init__)
        return self._set(scheduler=name)

    def router_parallelism(self, instances: int) -> "HookBuilder":
        """Router instances sharing the stream (default 1, the paper's single scheduler)."""
        replace(self._settings, router_parallelism=instances)  # checked now (__post_init__)
        return self._set(router_parallelism=instances)

    def router_host(self, node_id: str) -> "HookBuilder":
        """Run the router (and the job's other default-group operators) on ``node_id``."""
        return self._set(router_host=str(node_id))

    def routing(self, mode: str) -> "HookBuilder":
        """How records reach their node: one of :data:`ROUTINGS` (HookSettings.routing)."""
        replace(self._settings, routing=mode)  # checked now (__post_init__)
        return self._set(routing=mode)

    def router_feedback(self, mode: str) -> "HookBuilder":
        """How routers get the feedback: one of :data:`ROUTER_FEEDBACKS`
        (HookSettings.router_feedback)."""
        replace(self._settings, router_feedback=mode)  # checked now (__post_init__)
        return self._set(router_feedback=mode)

    def hold_in_flight(self, depth: float) -> "HookBuilder":
        """Decide late: hold the next record while every node holds ``depth`` times its share
        of the executors' capacity in flight (HookSettings.hold_in_flight; 0 = never)."""
        checked = replace(self._settings, hold_in_flight=depth)  # (__post_init__)
        return self._set(hold_in_flight=checked.hold_in_flight)

    def executor_capacity(self, capacity: int) -> "HookBuilder":
        checked = replace(self._settings, executor_capacity=capacity)  # (__post_init__)
        return self._set(executor_capacity=checked.executor_capacity)

    def batching(self, enabled: bool = True) -> "HookBuilder":
        replace(self._settings, batching=enabled)  # checked now: "false" is no False
        return self._set(batching=enabled)

    def dead_letter_topic(self, topic: str) -> "HookBuilder":
        return self._set(dead_letter_topic=topic)

    def limits(self, limits: TaskLimits) -> "HookBuilder":
        replace(self._settings, limits=limits)  # checked now (__post_init__)
        return self._set(limits=limits)

    def uid_prefix(self, prefix: str) -> "HookBuilder":
        return self._set(uid_prefix=prefix)

    def tenant_shares(self, shares: dict[str, float] | str) -> "HookBuilder":
        """Tenant quotas: ``{"a": 3, "b": 1}`` or ``"a=3,b=1"`` (pyflink_jobs/tenant_quotas.py)."""
        shares = parse_tenant_shares(shares) if isinstance(shares, str) else dict(shares)
        QuotaSettings(shares)  # checked now, not when the job starts
        return self._set(tenant_shares=shares)

    def settings(self, settings: HookSettings) -> "HookBuilder":
        self._settings = settings
        return self

    def build(self) -> StreamplaceHook:
        replace(self._settings)  # every field checked (__post_init__), set one by one or not
        if self._settings.executor not in ("iawp", "checksum"):
            raise ValueError(f"executor must be 'iawp' or 'checksum', got "
                             f"{self._settings.executor!r}")
        return StreamplaceHook(self._settings)
