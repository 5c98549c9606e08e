"""The streamplace hook: put learned placement (LDWP) and the IAWP executor into a PyFlink job.

Three lines in an existing job::

    from pyflink_jobs.hook import StreamplaceHook
    hook = StreamplaceHook.create("127.0.0.1:9092", service_url="http://127.0.0.1:8471")
    results = hook.apply(env, tasks)        # tasks: TaskEvent bytes (or Table rows with offsets)

``results`` is a DataStream of Avro TaskResult bytes; sink it as before (exactly-once KafkaSink).
``hook.dead_letters`` carries undecodable records as DeadLetter bytes.

What ``apply`` adds::

    tasks ──────────────┐
                        ├─> router (decode + decide in one Python function, parallelism 1)
    feedback (Kafka) ───┘      │ broadcast NodeFeedback     │ side output per TaskManager
      (broadcast)              v                            v
                     executor@tm_a (pinned)  executor@tm_b (pinned)  ...   -> union -> results

- The router holds a local copy of the current policy (numpy LDWP inference), node state from the
  broadcast NodeFeedback corrected by its own in-flight counts, refreshes model versions from the
  placement service in the background and falls back to the last model, or least-loaded, when the
  service is unreachable (:mod:`pyflink_jobs.router`).
- One executor operator per TaskManager, pinned by a slot sharing group that requests one unit of
  that TaskManager's external resource, with the plan's parallelism; records reach it through
  the router's side output for that node. Every other slot sharing group the hook uses gets an
  explicit resource spec (fine-grained resource management requires it).
- Every operator has a stable uid (``<uid_prefix>-router``, ``<uid_prefix>-executor-<node>``,
  ``<uid_prefix>-feedback-source``) so a savepoint survives resubmission with a new plan.

Cluster settings the hook needs (``streamplace doctor`` checks them):
``cluster.fine-grained-resource-management.enabled: true``; each TaskManager started with
``-D taskmanager.resource-id=<node>`` ``-D external-resources=<node>``
``-D external-resource.<node>.amount=<most executor instances>``; ``STREAMPLACE_NODE_ID=<node>``
in its environment; ``python.executable`` pointing at a virtualenv with streamplace installed; the
Kafka connector jar added to the job.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace

from pyflink_jobs.executor_function import (CountGauges, ExecutorFunctionSettings,
                                            NodeExecutorFunction)
from pyflink_jobs.router import ModelRefresher, Router, RouterNode, RouterSettings

__all__ = ["HookSettings", "HookBuilder", "StreamplaceHook", "RouterFunction", "node_tag",
           "nodes_from_cluster_spec"]

log = logging.getLogger(__name__)

try:  # The module must import without pyflink too (docs, unit tests of the helpers).
    from pyflink.datastream import BroadcastProcessFunction
    from pyflink.datastream.functions import Partitioner
except ImportError:  # pragma: no cover
    BroadcastProcessFunction = Partitioner = object  # type: ignore[misc,assignment]

FEEDBACK_STATE_NAME = "streamplace-node-feedback"


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
    executor_capacity: int = 8        # tasks in flight per executor instance
    executor_timeout_s: float = 300.0
    feedback_interval_s: float = 0.5
    refresh_interval_s: float = 2.0
    uid_prefix: str = "streamplace"
    # "pinned": one executor operator per TaskManager, pinned by fine-grained resource
    # management (the default). "rest_partitioner": for clusters without fine-grained resource
    # management: one executor operator wherever Flink puts its instances, and a partitioner
    # that sends each task to an instance on the chosen TaskManager (found through REST).
    routing: str = "pinned"
    rest_url: str = "http://127.0.0.1:8081"   # the JobManager REST API (rest_partitioner)
    job_name: str = ""                         # this job's name in REST (rest_partitioner)

    def resolved_nodes(self) -> list[RouterNode]:
        """The nodes with their planned instance counts (plan > service plan > 1 each)."""
        nodes = list(self.nodes) or nodes_from_cluster_spec(self.cluster_spec)
        plan = dict(self.plan)
        if not plan and self.service_url:
            try:
                from placement.service.client import PlacementClient
                plan = PlacementClient(self.service_url, self.service_token or None,
                                       timeout_s=3.0).plan().get("nodes", {})
            except Exception as exc:  # noqa: BLE001 - a plan of one instance each still works
                log.warning("no plan from the placement service (%s): one executor per node",
                            exc)
        unknown = sorted(set(plan) - {n.node_id for n in nodes})
        if unknown:
            raise ValueError(f"the plan names nodes the cluster spec lacks: {unknown}")
        resolved = [replace(n, instances=int(plan.get(n.node_id, n.instances or 1)))
                    for n in nodes if n.node_id not in self.retired]
        resolved = [n for n in resolved if n.instances > 0]
        hosts = {n.node_id for n in resolved}
        bad_hosts = {r: h for r, h in self.retired.items() if h not in hosts}
        if bad_hosts:
            raise ValueError(f"retired nodes must be hosted by a planned node: {bad_hosts}")
        if not resolved:
            raise ValueError("the plan gives no node an executor instance")
        return resolved


def nodes_from_cluster_spec(name_or_path: str) -> list[RouterNode]:
    """RouterNodes from a streamplace cluster spec (``streamplace/specs/<name>.yaml`` or a path)."""
    from streamplace.cluster_spec import load_cluster_spec
    spec = load_cluster_spec(name_or_path)
    return [RouterNode(tm.id, cpu_cores=max(1, int(round(tm.cpu_cores))),
                       work_multiplier=tm.work_multiplier, instances=1, gpus=len(tm.gpu_ids))
            for tm in spec.taskmanagers]


def node_tag(node_id: str):
    """The side output that carries the tasks routed to ``node_id``."""
    from pyflink.common import Types
    from pyflink.datastream import OutputTag
    return OutputTag(f"streamplace-node-{node_id}", Types.PICKLED_BYTE_ARRAY())


def routed_tag():
    """rest_partitioner mode: every routed task, as (node, task), on one side output."""
    from pyflink.common import Types
    from pyflink.datastream import OutputTag
    return OutputTag("streamplace-routed", Types.PICKLED_BYTE_ARRAY())


class RestAwarePartitioner(Partitioner):
    """Sends a (node, task) record to an executor instance running on that node.

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
        self._where: dict[str, list[int]] = {}
        self._next: dict[str, int] = {}
        self._fetched_at = float("-inf")
        self.misrouted = 0

    def _refresh(self) -> None:
        import requests
        self._fetched_at = time.monotonic()
        try:
            jobs = requests.get(f"{self.rest_url}/jobs/overview", timeout=2).json()["jobs"]
            running = [j for j in jobs if j["name"] == self.job_name and j["state"] == "RUNNING"]
            if not running:
                return
            job = max(running, key=lambda j: j["start-time"])
            detail = requests.get(f"{self.rest_url}/jobs/{job['jid']}", timeout=2).json()
            # chained operators share a vertex: "..., streamplace-executor"
            vertex = next(v for v in detail["vertices"] if self.vertex_name in v["name"])
            subtasks = requests.get(f"{self.rest_url}/jobs/{job['jid']}/vertices/{vertex['id']}",
                                    timeout=2).json()["subtasks"]
        except Exception as exc:  # noqa: BLE001 - keep the last mapping
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


def side_output(stream, tag):
    """``stream.get_side_output(tag)`` without the identity Python ``map`` that PyFlink 2.2.1
    appends to every side output (``ds.map(lambda i: i)``): that map is one more Python hop
    per record on the routing path, and the records already carry the tag's type."""
    from pyflink.datastream import DataStream
    return DataStream(stream._j_data_stream.getSideOutput(tag.get_java_output_tag()))


def _feedback_state_descriptor():
    from pyflink.common import Types
    from pyflink.datastream.state import MapStateDescriptor
    return MapStateDescriptor(FEEDBACK_STATE_NAME, Types.STRING(), Types.PICKLED_BYTE_ARRAY())


class RouterFunction(BroadcastProcessFunction):
    """Decode + decide in one Python function. Input: TaskEvent bytes, or a Row
    ``(payload, topic, partition, offset)`` from the Table API Kafka source; broadcast input:
    NodeFeedback bytes. Output: DeadLetter bytes (main), decoded tasks on one side output per
    node."""

    def __init__(self, settings: RouterSettings, single_output: bool = False):
        self.settings = settings
        self.single_output = single_output  # rest_partitioner: (node, task) on one side output

    def open(self, runtime_context):
        from pyflink_jobs.task_pipeline import make_dead_letter
        from workload.codec import CodecError, decode
        self._decode, self._codec_error = decode, CodecError
        self._make_dead_letter = make_dead_letter
        self.router = Router(self.settings)
        if self.single_output:
            routed = routed_tag()
            self._tags = {n: routed for n in self.router.node_ids}
        else:
            self._tags = {n: node_tag(n) for n in self.router.node_ids}
        self._descriptor = _feedback_state_descriptor()
        self._restored = False
        self.refresher = None
        if self.settings.policy == "ldwp" and self.settings.service_url:
            from placement.service.client import PlacementClient
            client = PlacementClient(self.settings.service_url,
                                     self.settings.service_token or None, timeout_s=2.0)
            self.refresher = ModelRefresher(self.router, client, self.settings.refresh_interval_s)
            self.refresher.start()
        group = runtime_context.get_metrics_group()
        router = self.router
        self._counts = CountGauges(group, [f"streamplace_routed_{n}" for n in router.node_ids] +
                                   ["streamplace_dead_letters"])
        group.gauge("streamplace_decision_p50_us", lambda: int(router.latency_percentile_us(50)))
        group.gauge("streamplace_decision_p99_us", lambda: int(router.latency_percentile_us(99)))
        group.gauge("streamplace_model_version", lambda: int(router.model_version or 0))
        group.gauge("streamplace_fallback_decisions", lambda: int(router.fallback_decisions))
        group.gauge("streamplace_feedback_records", lambda: int(router.feedback_records))
        for node in router.node_ids:  # measured speed factor x 1000 (Flink gauges are ints here)
            group.gauge(f"streamplace_speed_milli_{node}",
                        lambda node=node: int(1000 * router.speeds.factor(node)))

    def close(self):
        if getattr(self, "refresher", None) is not None:
            self.refresher.stop()

    def process_element(self, value, ctx):
        if isinstance(value, (bytes, bytearray)):
            payload, topic, partition, offset = bytes(value), "", -1, -1
        else:
            payload, topic, partition, offset = value[0], value[1], value[2], value[3]
        try:
            event = self._decode("TaskEvent", bytes(payload) if payload is not None else b"")
        except self._codec_error as exc:
            self._counts.inc("streamplace_dead_letters")
            yield self._make_dead_letter(payload, topic, partition, offset, str(exc), "decode")
            return
        if not self._restored:
            self._restore_node_view(ctx)
        decision = self.router.decide_event(event)
        self._counts.inc(f"streamplace_routed_{decision.node}")
        event["_bytes"] = len(payload)
        event["_routed_at_ms"] = int(time.time() * 1000)
        event["_routed_to"] = decision.node
        event["_routed_queue"] = self.router.last_decision_queue
        event["_routed_backlog_ms"] = self.router.last_decision_backlog_s * 1000.0
        event["_routed_speed"] = self.router.last_decision_speed
        if self.single_output:
            yield self._tags[decision.node], (decision.node, event)
        else:
            yield self._tags[decision.node], event

    def _restore_node_view(self, ctx) -> None:
        # After a restore the in-memory view is empty; the checkpointed broadcast state has the
        # last report of every node.
        self._restored = True
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
        ctx.get_broadcast_state(self._descriptor).put(record["node_id"], bytes(value))


class StreamplaceHook:
    """Adds router + pinned executors to a job; see the module docstring."""

    def __init__(self, settings: HookSettings | None = None):
        self.settings = settings or HookSettings()
        self.dead_letters = None
        self.nodes: list[RouterNode] = []

    @staticmethod
    def builder() -> "HookBuilder":
        return HookBuilder()

    @classmethod
    def create(cls, bootstrap_servers: str, service_url: str = "", **settings) -> "StreamplaceHook":
        """The one-line form: ``StreamplaceHook.create("127.0.0.1:9092", service_url=url)``;
        other :class:`HookSettings` fields as keywords."""
        return HookBuilder().settings(HookSettings(bootstrap_servers=bootstrap_servers,
                                                   service_url=service_url, **settings)).build()

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
                              executor_capacity=s.executor_capacity)

    def feedback_stream(self, env):
        from pyflink.common import ByteArraySchema, WatermarkStrategy
        from pyflink.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource
        s = self.settings
        source = (KafkaSource.builder().set_bootstrap_servers(s.bootstrap_servers)
                  .set_topics(s.feedback_topic).set_group_id(s.feedback_group_id)
                  # Node state is only worth its newest reports; the past is in broadcast state.
                  .set_starting_offsets(KafkaOffsetsInitializer.latest())
                  .set_value_only_deserializer(ByteArraySchema()).build())
        return (env.from_source(source, WatermarkStrategy.no_watermarks(),
                                "streamplace-feedback-source")
                .uid(f"{s.uid_prefix}-feedback-source").set_parallelism(1))

    def apply(self, env, tasks):
        """Route ``tasks`` and execute them on the planned TaskManagers; returns the results
        (TaskResult bytes). Also sets ``self.dead_letters`` (DeadLetter bytes)."""
        from pyflink.common import Types

        from pyflink_jobs.task_pipeline import executor_slot_sharing_group, io_slot_sharing_group
        s = self.settings
        self.nodes = s.resolved_nodes()
        env.register_slot_sharing_group(io_slot_sharing_group())
        broadcast = self.feedback_stream(env).broadcast(_feedback_state_descriptor())
        if s.routing not in ("pinned", "rest_partitioner"):
            raise ValueError(f"routing must be 'pinned' or 'rest_partitioner', got {s.routing!r}")
        single = s.routing == "rest_partitioner"
        routed = (tasks.connect(broadcast)
                  .process(RouterFunction(self.router_settings(), single_output=single),
                           output_type=Types.PRIMITIVE_ARRAY(Types.BYTE()))
                  .name("streamplace-router").uid(f"{s.uid_prefix}-router").set_parallelism(1))
        self.dead_letters = routed
        if single:
            return self._apply_rest_partitioner(env, routed)
        outputs = []
        for node in self.nodes:
            if s.executor == "checksum":
                from pyflink_jobs.task_pipeline import ChecksumExecutor
                function = ChecksumExecutor()
            else:
                function = self._node_executor(node.node_id, node.instances)
            executed = self._execute(side_output(routed, node_tag(node.node_id)), function)
            outputs.append(executed.name(f"streamplace-executor-{node.node_id}")
                           .uid(f"{s.uid_prefix}-executor-{node.node_id}")
                           .set_parallelism(node.instances)
                           .slot_sharing_group(executor_slot_sharing_group(node.node_id)))
        for retired, host in sorted(s.retired.items()):
            # Same uid as when the node was alive; pinned to its host; fed nothing new.
            executed = self._execute(side_output(routed, node_tag(retired)),
                                     self._node_executor(host))
            outputs.append(executed.name(f"streamplace-executor-{retired}-retired-on-{host}")
                           .uid(f"{s.uid_prefix}-executor-{retired}").set_parallelism(1)
                           .slot_sharing_group(executor_slot_sharing_group(host)))
        return outputs[0].union(*outputs[1:]) if len(outputs) > 1 else outputs[0]


    def _node_executor(self, planned_node: str, instances: int = 1) -> NodeExecutorFunction:
        s = self.settings
        return NodeExecutorFunction(planned_node, ExecutorFunctionSettings(
            bootstrap_servers=s.bootstrap_servers, feedback_topic=s.feedback_topic,
            scheduler=s.scheduler, feedback_interval_s=s.feedback_interval_s,
            instances_on_node=instances))

    def _execute(self, stream, function):
        """``stream`` through ``function`` as an unordered async operator (TaskResult bytes)."""
        from pyflink.common import Time, Types
        from pyflink.datastream import AsyncDataStream
        s = self.settings
        return AsyncDataStream.unordered_wait(
            stream, function, Time.milliseconds(int(s.executor_timeout_s * 1000)),
            capacity=s.executor_capacity, output_type=Types.PRIMITIVE_ARRAY(Types.BYTE()))

    def _apply_rest_partitioner(self, env, routed):
        from pyflink_jobs.task_pipeline import io_slot_sharing_group
        s = self.settings
        if not s.job_name:
            raise ValueError("rest_partitioner routing needs the job's name (job_name) to find "
                             "its executor instances in REST")
        name = "streamplace-executor"
        total = sum(n.instances for n in self.nodes)
        env.register_slot_sharing_group(io_slot_sharing_group("streamplace-executors"))
        partitioned = side_output(routed, routed_tag()).partition_custom(
            RestAwarePartitioner(s.rest_url, s.job_name, name), lambda pair: pair[0])
        executed = self._execute(partitioned, self._node_executor(""))
        return (executed.name(name).uid(f"{s.uid_prefix}-executor").set_parallelism(total)
                .slot_sharing_group("streamplace-executors"))


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
        if any(int(v) < 0 for v in plan.values()):
            raise ValueError(f"plan counts must be >= 0, got {plan}")
        return self._set(plan={k: int(v) for k, v in plan.items()})

    def policy(self, name: str, fallback: str = "least_loaded") -> "HookBuilder":
        return self._set(policy=name, fallback=fallback)

    def initial_model(self, path: str) -> "HookBuilder":
        return self._set(initial_model=path)

    def node_scheduler(self, name: str) -> "HookBuilder":
        return self._set(scheduler=name)

    def executor_capacity(self, capacity: int) -> "HookBuilder":
        if capacity < 1:
            raise ValueError("executor capacity must be at least 1")
        return self._set(executor_capacity=capacity)

    def uid_prefix(self, prefix: str) -> "HookBuilder":
        return self._set(uid_prefix=prefix)

    def settings(self, settings: HookSettings) -> "HookBuilder":
        self._settings = settings
        return self

    def build(self) -> StreamplaceHook:
        if self._settings.executor not in ("iawp", "checksum"):
            raise ValueError(f"executor must be 'iawp' or 'checksum', got "
                             f"{self._settings.executor!r}")
        if self._settings.policy != "ldwp":
            from placement.policies import POLICIES, ALIASES
            if self._settings.policy not in POLICIES and self._settings.policy not in ALIASES:
                raise ValueError(f"unknown policy {self._settings.policy!r}; use 'ldwp' or one "
                                 f"of {sorted(POLICIES)}")
        return StreamplaceHook(self._settings)
