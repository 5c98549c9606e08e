"""The service's online learner: NodeFeedback in, LDWP model versions out.

What it does with each de-duplicated NodeFeedback record (see :mod:`placement.service.feedback`
for the consumer that hands them over):

1. Keeps the node's state: ``NodeState`` from the record's utilisations, with
   ``queue_depth = in_flight + queue_depth`` and link rates as fractions of the node's link,
   by :func:`workload.feedback.node_state_from_feedback` (the routers' rule too: bounded,
   finite, each field's rule documented there), in a short per-node history ordered by
   ``emitted_at_ms``.
2. Turns every completed ``TaskTiming`` into one training example of a *contextual bandit*:

   - context (observation): ``Task(task_id, app_id, input_size)`` and the state of every known
     node as of the task's decision time, approximated as
     ``finished_at_ms - service_ms - queue_ms`` (when it reached the node's queue; the routing
     hop before that is ignored). Each node's state is its newest report emitted at or before
     that instant (all zeros if it had none yet, which is also what the router saw then);
   - action: the node that ran it;
   - reward: ``-(queue_ms + service_ms) / 1000 / latency_scale_s`` (LDWP's ``task_latency``
     reward; the agent's ``latency_reward`` where it defines one, e.g. a log transform);
   - terminal (``done=True``).

   Why a bandit and not the DQN's discounted chain: the service sees outcomes, not the router's
   decision sequence (routers decide locally, possibly several in parallel, and only completed
   tasks come back), so it cannot know which decision followed which. With ``done=True`` the
   TD target is the reward itself: the network learns each node's expected (negative) latency
   for this task in this cluster state, and the router's greedy choice is the node with the
   lowest predicted latency.

   Approximations, stated: the router corrected the feedback with its own in-flight counts,
   the learner only has the feedback; node states come from reports up to one feedback
   interval older than the decision; tasks are learned from in the order their feedback
   arrives.

   Task types are open (a user's operator, not only the built-in apps): every timing also
   teaches the learner's cost model, by default a
   :class:`placement.measured_costs.MeasuredCosts` with the calibration as prior for the
   built-in apps, by the routers' rule (:func:`placement.speed.timing_sample`, then
   ``observe``). An example keeps the estimates that model gave just before its own timing
   was learned (what a router deciding then had seen), so it is not encoded with its own
   outcome. A timing that cannot be learned from (missing or non-finite fields, a negative
   size or latency) is skipped and counted (``timings_rejected``); nodes outside the cluster
   spec are learned from up to ``max_unknown_nodes`` of them.
3. Trains an :class:`placement.ldwp.agent.LDWPPolicy` (``network="node_scoring"``,
   ``reward="task_latency"``) through its replay buffer and training step, in the learner's
   own thread (the consumer thread only appends to a queue), one record at a time in arrival
   order, so a given record sequence always gives the same weights (seeds fixed).
4. Publishes a new model version to the :class:`~placement.service.store.ModelStore` when
   ``min_records_first_version`` records were trained on, then after every ``publish_every``
   new ones. Metadata: version, trained_on_records, new_records, training_data_hash (SHA-256
   over the ``task_id, node, latency_ms`` lines trained on, chained to the previous version's
   hash), nodes, training_steps, loss.

Example::

    learner = OnlineLearner(cluster, ModelStore(tmp), publish_every=500)
    learner.take(feedback_records)   # consumer thread: cheap, returns how many timings queued
    learner.train_pending()          # learner thread (or start() for a background thread)
    store.latest()["trained_on_records"]
"""

from __future__ import annotations

import dataclasses

import bisect
import hashlib
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from placement.ldwp.agent import LDWPPolicy, LDWPSettings
from placement.ldwp.features import is_live_costs
from placement.ldwp.modelfile import ModelFileError
from placement.measured_costs import MeasuredCosts
from placement.service.model_gate import PublishGate
from placement.service.store import ModelStore
from placement.speed import ObservedSpeed, timing_sample
from workload.estimates import CostModel
from workload.feedback import (DEFAULT_LINK_MBPS, feedback_age_s, feedback_emitted_at_ms,
                               node_state_from_feedback)
from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task

__all__ = ["OnlineLearner", "NodeHistory", "to_cluster_spec", "learning_settings",
           "SERVICE_LEARNING_DEFAULTS"]

log = logging.getLogger(__name__)

#: LDWPSettings the service changes from the paper's defaults (users override any of them in
#: ``service.learning``): a bandit regression on small, noisy latencies learns steadily with
#: Adam at 1e-3; the paper's SGD at 0.1 is tuned to its throughput reward. Epsilon does not
#: matter (the service never explores; routers decide).
SERVICE_LEARNING_DEFAULTS: dict = {"optimizer": "adam", "learning_rate": 1e-3,
                                   "batch_size": 32, "learning_starts": 32,
                                   "latency_scale_s": 10.0, "hidden_sizes": (128, 64),
                                   # the residual LDWP (docs/ldwp.md): Q = -log(1 + e^g wait
                                   # + e^h task time), untrained = MCT at measured speeds
                                   "q_prior": "completion", "residual": "scaled",
                                   "latency_transform": "log", "gamma": 0.0,
                                   # any task type: the built-in apps' one-hot plus a hashed
                                   # code of other type strings (placement.ldwp.features)
                                   "task_encoding": "hashed"}

_RATE_WINDOW = 200       # service times kept per node for the measured service rate
_RATE_MIN_SAMPLES = 20   # below this, the plan uses the spec's capacity for the node


def learning_settings(learning: Mapping | None = None, network: str = "node_scoring",
                      reward: str = "task_latency") -> LDWPSettings:
    """LDWPSettings from the service defaults plus ``learning``; unknown keys raise ValueError
    naming them and the valid ones."""
    known = {f.name for f in fields(LDWPSettings)}
    learning = dict(learning or {})
    unknown = sorted(set(learning) - known)
    if unknown:
        raise ValueError(f"unknown service.learning setting(s) {unknown}; LDWPSettings has "
                         f"{sorted(known - {'network', 'reward'})}")
    values = {**SERVICE_LEARNING_DEFAULTS, **learning, "network": network, "reward": reward}
    try:
        return LDWPSettings(**values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid service.learning settings: {exc}") from None


def to_cluster_spec(spec, gpu_model: str = "t4") -> ClusterSpec:
    """A ``workload.model.ClusterSpec`` from a local cluster spec (anything with
    ``.taskmanagers`` of ``id, cpu_cores, work_multiplier, slots, gpu_ids`` such as
    ``workload.cluster_spec.LocalClusterSpec``) or a ClusterSpec (returned as is).
    ``work_multiplier`` becomes ``cpu_speed = 1 / work_multiplier``."""
    if isinstance(spec, ClusterSpec):
        return spec
    nodes = []
    for tm in spec.taskmanagers:
        memory_gb = (getattr(tm, "task_heap_mb", 256) + getattr(tm, "managed_mb", 256)) / 1024
        gpus = tuple(GpuSpec(gpu_model, 16.0) for _ in getattr(tm, "gpu_ids", ()))
        nodes.append(NodeSpec(tm.id, max(1, round(float(tm.cpu_cores))), memory_gb, gpus=gpus,
                              cpu_speed=1.0 / float(getattr(tm, "work_multiplier", 1.0)),
                              slots=int(getattr(tm, "slots", 0))))
    return ClusterSpec(tuple(nodes), name=getattr(spec, "source", "") or "cluster")


def _feedback_state(record: Mapping, spec: NodeSpec | None = None) -> NodeState:
    """The ``NodeState`` a NodeFeedback record describes, by the shared rule
    (:func:`workload.feedback.node_state_from_feedback`), with link rates as fractions of the
    node's links from ``spec`` (:data:`~workload.feedback.DEFAULT_LINK_MBPS` when unknown);
    age 0 (:class:`NodeHistory` ages it when asked).

    Example::

        _feedback_state({"node_id": "tm_a", "cpu_util": 2.0}).cpu_util   # 1.0
    """
    if spec is None:
        return node_state_from_feedback(record, DEFAULT_LINK_MBPS, DEFAULT_LINK_MBPS)
    return node_state_from_feedback(record, spec.uplink_mbps, spec.downlink_mbps)


class NodeHistory:
    """The last ``size`` states of each node, by emission time, to answer "what did node X
    report as of time t" (``state_at``) and "what is its newest report" (``latest``)."""

    def __init__(self, size: int = 512):
        self.size = size
        self._times: dict[str, list[int]] = {}
        self._states: dict[str, list[NodeState]] = {}
        self._records: dict[str, dict] = {}
        self._record_at: dict[str, int] = {}  # emission time of each node's newest record

    def add(self, record: Mapping, state: NodeState) -> None:
        # An unusable emission time reads as the epoch (workload.feedback): oldest, stalest.
        node, at = record["node_id"], feedback_emitted_at_ms(record)
        times = self._times.setdefault(node, [])
        states = self._states.setdefault(node, [])
        i = bisect.bisect_right(times, at)  # usually the end: reports arrive in order
        times.insert(i, at)
        states.insert(i, state)
        if len(times) > self.size:
            del times[0], states[0]
        newest_at = self._record_at.get(node)
        if newest_at is None or at >= newest_at:
            self._records[node] = {k: v for k, v in record.items() if k != "completed"}
            self._record_at[node] = at

    def nodes(self) -> list[str]:
        return list(self._times)

    def state_at(self, node: str, at_ms: int) -> NodeState:
        """Newest state emitted at or before ``at_ms`` (with its age then); a zero state when
        the node had not reported yet (what a router saw then too)."""
        times = self._times.get(node)
        if times:
            i = bisect.bisect_right(times, at_ms) - 1
            if i >= 0:
                state = self._states[node][i]
                return _with_age(state, feedback_age_s(times[i], at_ms))
        return NodeState(node)

    def latest(self, node: str, now_ms: int | None = None) -> NodeState:
        times = self._times.get(node)
        if not times:
            return NodeState(node)
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        return _with_age(self._states[node][-1], feedback_age_s(times[-1], now_ms))

    def latest_record(self, node: str) -> dict | None:
        """The newest NodeFeedback of ``node`` without its completed list."""
        record = self._records.get(node)
        return dict(record) if record else None


#: LDWPSettings that define what a model file computes: a stored version that differs in any
#: of them is not resumed (its weights mean something else under the configured settings).
MODEL_DEFINING_SETTINGS = ("network", "hidden_sizes", "q_prior", "residual", "spec_features",
                           "reward", "latency_transform", "task_encoding")


def _model_settings_changed(path, settings: LDWPSettings) -> str:
    """"" when the model file at ``path`` was built with ``settings``' model-defining values,
    else a short "name: stored -> configured" list of the differences."""
    from placement.ldwp.modelfile import load_model
    stored = load_model(path)[1].get("settings") or {}
    defaults = LDWPSettings()
    differences = []
    for name in MODEL_DEFINING_SETTINGS:
        old = stored.get(name, getattr(defaults, name))
        new = getattr(settings, name)
        if (list(old) if isinstance(old, (list, tuple)) else old) != \
                (list(new) if isinstance(new, (list, tuple)) else new):
            differences.append(f"{name}: {old!r} -> {new!r}")
    return ", ".join(differences)


def _with_age(state: NodeState, age_s: float) -> NodeState:
    return dataclasses.replace(state, age_s=max(0.0, age_s))


@dataclass(frozen=True)
class _Example:
    """One completed task, ready to train on: the context and the outcome."""

    task: Task
    node: str
    latency_ms: float
    decided_at_ms: int
    states: tuple[NodeState, ...]
    estimates_s: dict | None = None   # per node, the learned cost model's before this timing


def _timing_example_fields(timing: Mapping) -> tuple[str, float, int] | None:
    """(task id, latency ms, finished at ms) of a timing, or None when they are unusable
    (missing, not finite, negative latency parts)."""
    try:
        task_id = timing["task_id"]
        queue_ms, service_ms = float(timing["queue_ms"]), float(timing["service_ms"])
        finished = float(timing["finished_at_ms"])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    if not isinstance(task_id, str) or not all(math.isfinite(v) for v in
                                                (queue_ms, service_ms, finished)) \
            or queue_ms < 0.0 or service_ms < 0.0:
        return None
    return task_id, queue_ms + service_ms, int(finished)


def _newest_loadable(store: ModelStore, settings: LDWPSettings, cluster, costs):
    """(agent, entry) of the newest stored version that loads, passes the model-file checks
    (finite weights included) and was built with ``settings``' model-defining values; (None,
    None) when there is none. A version that fails is skipped with a warning, so a service
    never resumes from a poisoned or damaged version (it falls back to the one before)."""
    for entry in reversed(store.versions()):
        version = entry["version"]
        try:
            changed = _model_settings_changed(store.path(version), settings)
            if changed:
                log.warning("the stored model version %d was trained with other model settings "
                            "(%s); not resuming from it", version, changed)
                return None, None
            store.read_bytes(version)  # the recorded sha256
            return LDWPPolicy.from_file(store.path(version), cluster, costs,
                                        training=True), entry
        except (ModelFileError, OSError) as exc:
            log.warning("not resuming from model version %d: %s; trying the version before it",
                        version, exc)
    return None, None


def _starting_agent(store: ModelStore, cluster: ClusterSpec, costs, settings: LDWPSettings,
                    initial_model) -> tuple[LDWPPolicy, dict | None, int, str]:
    """(agent, resumed version's entry or None, records trained, previous training hash): the
    newest good stored version (restart), else ``initial_model`` (published as a version),
    else a fresh agent."""
    agent, latest = (None, None) if initial_model is not None else \
        _newest_loadable(store, settings, cluster, costs)
    if agent is not None:
        records = int(latest.get("trained_on_records", 0))
        log.info("resuming from model version %d (trained on %d records)", latest["version"],
                 records)
        return agent, latest, records, latest.get("training_data_hash", "")
    if initial_model is not None:
        agent = LDWPPolicy.from_file(initial_model, cluster, costs, training=True)
        meta = store.publish_file(initial_model, {
            "trained_on_records": 0, "new_records": 0, "training_data_hash": "",
            "nodes": list(cluster.node_ids), "source": f"initial model {initial_model}",
            "policy": "ldwp", "network": agent.settings.network})
        log.info("published the initial model %s as version %d", initial_model, meta["version"])
        return agent, None, 0, ""
    return LDWPPolicy(cluster, costs, settings), None, 0, ""


class TrainingLoop:
    """The learner's own daemon thread: trains what ``take`` queued, in small slices (so
    ``stop`` never waits long and publishing stays timely), and keeps going after an error
    (kept in the learner's ``last_error``, shown by ``/health``)."""

    def __init__(self, learner: "OnlineLearner"):
        self.learner = learner
        self.wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="streamplace-learner",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.wake.wait(0.5)
            self.wake.clear()
            try:
                while not self._stop.is_set() and self.learner.train_pending(max_records=64):
                    pass
            except Exception as exc:  # noqa: BLE001 - keep serving; /health shows the error
                self.learner.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("online learner failed on a record; continuing")

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


class OnlineLearner:
    """Learns LDWP from feedback and publishes model versions (see the module docstring).

    ``take`` is called by the consumer thread; ``train_pending`` by the learner's own thread
    (``start``/``stop``) or, in tests, directly. ``metrics`` is an optional
    :class:`placement.service.metrics.ServiceMetrics`. ``costs``: the cost model estimates
    come from; default a MeasuredCosts (learned from the timings, any task type) with the
    calibration's CostModel as prior; a plain CostModel keeps the older behaviour (per-app
    estimates, built-in apps only, times measured speed factors). ``max_unknown_nodes``: how
    many nodes outside the cluster spec are learned from (more would be ignored: hostile
    feedback must not grow every example's node list without bound).
    """

    def __init__(self, cluster, store: ModelStore, learning: Mapping | LDWPSettings | None = None,
                 publish_every: int = 500, min_records_first_version: int = 200,
                 initial_model: str | Path | None = None, costs=None,
                 metrics=None, history_per_node: int = 512, gpu_model: str = "t4",
                 max_unknown_nodes: int = 64, gate: PublishGate | None = None,
                 max_latency_s: float = 3600.0, max_task_size: int = 10**11):
        if publish_every < 1 or min_records_first_version < 1:
            raise ValueError("publish_every and min_records_first_version must be at least 1")
        self.cluster = to_cluster_spec(cluster, gpu_model)
        self.specs = {n.node_id: n for n in self.cluster.nodes}
        self.store = store
        self.costs = costs if costs is not None else MeasuredCosts(self.cluster,
                                                                   prior=CostModel())
        self.metrics = metrics
        self.max_unknown_nodes = max_unknown_nodes
        # a timing beyond these is implausible (a clock jump, a hostile record): not learned
        self.max_latency_ms, self.max_task_size = 1000.0 * max_latency_s, max_task_size
        self.timings_rejected = 0   # timings skipped: fields missing, not finite or negative
        self.nodes_ignored = 0      # records skipped: beyond max_unknown_nodes
        self.publish_every = publish_every
        self.min_records_first_version = min_records_first_version
        settings = (learning if isinstance(learning, LDWPSettings)
                    else learning_settings(learning))
        self.history = NodeHistory(history_per_node)
        self._node_order: list[str] = list(self.cluster.node_ids)
        self._pending: deque[_Example] = deque()
        self._service_s: dict[str, deque] = {}
        # the same measured speeds the routers keep (same timings, same rule), for the nodes
        # whose decision-time numbers the feedback does not carry; with a MeasuredCosts it
        # feeds that model and every factor is 1 (the learned estimates hold the speeds)
        self.speeds = ObservedSpeed(self.cluster, self.costs)
        self._lock = threading.Lock()        # guards history, pending queue, rates
        self._train_lock = threading.Lock()  # one trainer at a time (thread or caller)
        self._loop = TrainingLoop(self)
        self._wake = self._loop.wake
        self.records_taken = 0
        self.last_error: str | None = None

        self.agent, latest, self.records_trained, previous_hash = _starting_agent(
            store, self.cluster, self.costs, settings, initial_model)
        if self.agent.settings.network != "node_scoring":
            raise ValueError("the service learns the size-agnostic 'node_scoring' network; the "
                             f"model it starts from is {self.agent.settings.network!r}")
        self.agent.training = True
        # the weights it starts from are the first "last good" ones (module docstring, 5.)
        self.gate = gate if gate is not None else PublishGate()
        self.gate.accept(self.agent)
        self.examples_seen = 0      # examples trained on or held back
        self.models_rejected = 0    # candidate versions the gate refused (rolled back)
        self._published_records = self.records_trained if latest is not None else 0
        self._learned_version = latest is not None and self.records_trained > 0
        self._hash = hashlib.sha256(f"previous:{previous_hash}\n".encode())
        self._nodes_trained: set[str] = set()
        if metrics is not None and store.latest() is not None:
            metrics.model_version.set(store.latest()["version"])

    # -- consumer side (cheap) --------------------------------------------------------------
    def take(self, records: Iterable[Mapping]) -> int:
        """Record node states and queue every completed task of these NodeFeedback records
        (already de-duplicated) for training; returns how many task records were queued."""
        queued = 0
        with self._lock:
            records = [r for r in records if self._accept_node(r.get("node_id"))]
            reported = [_feedback_state(r, self.specs.get(r["node_id"])) for r in records]
            for record, state in zip(records, reported):
                self.history.add(record, state)
            for record, state in zip(records, reported):
                node = record["node_id"]
                queues = record.get("routed_queue") or []
                backlogs = record.get("routed_backlog_ms") or []
                speeds = record.get("routed_speed_factor") or []
                for i, timing in enumerate(record.get("completed") or ()):
                    sample, fields_ = timing_sample(timing), _timing_example_fields(timing)
                    if sample is None or fields_ is None or fields_[1] > self.max_latency_ms \
                            or sample[1] > self.max_task_size:
                        self._reject_timing()
                        continue
                    task_id, latency, finished = fields_
                    decided = int(finished - latency)
                    states = tuple(self._state_at(n, decided) for n in self._node_order)
                    if i < len(queues) and queues[i] >= 0:
                        # The router's own numbers for the chosen node when it decided: the
                        # queue, backlog and speed its observation showed (the executor's
                        # feedback only knows the few tasks inside the executor, not those
                        # buffered on the way).
                        chosen = {"queue_depth": int(queues[i])}
                        if i < len(backlogs) and backlogs[i] >= 0:
                            chosen["backlog_s"] = float(backlogs[i]) / 1000.0
                        if i < len(speeds) and speeds[i] > 0:
                            chosen["speed_factor"] = float(speeds[i])
                        states = tuple(dataclasses.replace(st, **chosen)
                                       if st.node_id == node else st for st in states)
                    task = Task(task_id, sample[0], sample[1])
                    estimates = None
                    if is_live_costs(self.costs):  # before this timing teaches the model
                        estimates = self.costs.estimates_s(
                            [n for n in self._node_order if n in self.specs], task.app_id,
                            task.input_size)
                    self.speeds.observe(node, *sample)
                    self._pending.append(_Example(task, node, latency, decided, states,
                                                  estimates))
                    rates = self._service_s.setdefault(node, deque(maxlen=_RATE_WINDOW))
                    rates.append(max(1e-3, float(timing["service_ms"]) / 1000.0))
                    queued += 1
                if self.metrics is not None:  # the bounded count the history keeps
                    self.metrics.queue_depth.labels(node=node).set(state.queue_depth)
            self.records_taken += queued
        if queued:
            self._wake.set()
        return queued

    def _reject_timing(self) -> None:
        self.timings_rejected += 1
        if self.timings_rejected == 1 or self.timings_rejected % 1000 == 0:
            # logged, not per record: hostile feedback must not flood the log either
            log.warning("feedback timings refused so far: %d (missing, non-finite or "
                        "implausible fields; counted in learning_rejections{kind=\"timing\"})",
                        self.timings_rejected)
        if self.metrics is not None:
            self.metrics.learning_rejections.labels(kind="timing").inc()

    def _accept_node(self, node) -> bool:
        """Whether records of ``node`` are learned from (adds a new node outside the spec
        while fewer than ``max_unknown_nodes`` are known). Called with the lock held."""
        if not isinstance(node, str):
            return False
        if node in self.specs or node in self._node_order:
            return True
        if len(self._node_order) - len(self.specs) >= self.max_unknown_nodes:
            if not self.nodes_ignored:  # once: hostile feedback must not flood the log either
                log.warning("feedback from node %r ignored: already %d nodes outside the "
                            "cluster spec (counting the rest in nodes_ignored)", node[:80],
                            self.max_unknown_nodes)
            self.nodes_ignored += 1
            return False
        self._node_order.append(node)  # a node the spec does not know: learn anyway
        return True

    def _state_at(self, node: str, at_ms: int) -> NodeState:
        """Node ``node`` as of ``at_ms``: its newest report then, with its measured speed.

        Tried and reverted (2026-12-01): filling the in-flight count and backlog of the nodes
        a task was NOT sent to from the routers' newest earlier stamps on them. In the real-engine
        benchmark the model trained that way sent 65% of a backlog to the slow tm_c (33.5
        tasks/s against 67-71 without it), so those nodes keep their reports' numbers."""
        return dataclasses.replace(self.history.state_at(node, at_ms),
                                   speed_factor=self.speeds.factor(node))

    # -- learner side -------------------------------------------------------------------------
    def train_pending(self, max_records: int | None = None) -> int:
        """Train on queued records (at most ``max_records``), publishing versions as they fall
        due; returns how many were trained on."""
        done = 0
        with self._train_lock:
            while max_records is None or done < max_records:
                with self._lock:
                    if not self._pending:
                        break
                    example = self._pending.popleft()
                self._train_one(example)
                done += 1
                if self._publish_due():
                    self.publish()
        return done

    def _train_one(self, example: _Example) -> None:
        agent, s = self.agent, self.agent.settings
        observation = Observation(example.task, example.states, example.decided_at_ms / 1000.0)
        action = [n.node_id for n in example.states].index(example.node)
        latency_s = example.latency_ms / 1000.0
        # The agent's own reward of a latency when it has one (its settings may choose a
        # transform), else LDWP's task_latency reward as documented.
        reward_of = getattr(agent, "latency_reward", None)
        reward = reward_of(latency_s) if reward_of else -latency_s / s.latency_scale_s
        state = agent.encode(observation, example.estimates_s)
        if not (math.isfinite(reward) and np.isfinite(state).all()):
            self._reject_timing()  # features are clamped; this is a last line of defence
            return
        self.examples_seen += 1
        if self.gate.is_held_back(self.examples_seen):
            self.gate.hold_back(state, action, reward)  # judges versions, never trained on
            return
        # A terminal transition: the TD target is the reward (contextual bandit, see above).
        agent.replay.add((state, action, reward, None, True))
        self.records_trained += 1
        if len(agent.replay.items) >= s.learning_starts and \
                self.records_trained % s.train_frequency == 0:
            agent._train_step()  # LDWP's own step: sample the replay, MSE to the TD target
            if not math.isfinite(agent.losses[-1]):
                self._roll_back(f"non-finite training loss {agent.losses[-1]}")
            if self.metrics is not None:
                self.metrics.training_steps.inc()
        self._hash.update(f"{example.task.task_id}\t{example.node}\t"
                          f"{example.latency_ms:.3f}\n".encode())
        self._nodes_trained.add(example.node)
        if self.metrics is not None:
            self.metrics.records_trained.inc()

    def _roll_back(self, reason: str) -> None:
        """Back to the last good weights (placement.service.model_gate), counted and logged."""
        self.gate.rollback(self.agent)
        self.models_rejected += 1
        self.last_error = f"model refused: {reason}"
        log.warning("learned model refused (%s): rolled back to the last good weights, "
                    "replay cleared (%d refused so far)", reason, self.models_rejected)
        if self.metrics is not None:
            self.metrics.learning_rejections.labels(kind="model").inc()

    def _publish_due(self) -> bool:
        new = self.records_trained - self._published_records
        if not self._learned_version:
            return self.records_trained >= self.min_records_first_version
        return new >= self.publish_every

    def publish(self) -> dict | None:
        """Save the current weights as a new version now (also used by ``_publish_due``) if
        they pass the gate; else roll back and return None."""
        agent = self.agent
        verdict = self.gate.check(agent)
        if not verdict.ok:
            self._roll_back(verdict.reason)
            self._published_records = self.records_trained  # try again after publish_every
            return None
        losses = agent.losses[-100:]
        meta = {"trained_on_records": self.records_trained,
                "new_records": self.records_trained - self._published_records,
                "training_data_hash": self._hash.hexdigest(),
                "nodes": sorted(self._nodes_trained) or list(self.cluster.node_ids),
                "training_steps": agent.updates,
                "loss": (sum(finite) / len(finite)) if (finite := [
                    x for x in losses if math.isfinite(x)]) else None,
                "held_back_error": verdict.error, "gate": verdict.reason,
                "policy": "ldwp", "network": agent.settings.network,
                "reward": agent.settings.reward}
        entry = self.store.publish(
            lambda path, version: agent.save(path, version=version, **{
                k: v for k, v in meta.items() if k != "nodes"}), meta)
        self._published_records = self.records_trained
        self._learned_version = True
        self.gate.accept(agent)
        if self.metrics is not None:
            self.metrics.model_version.set(entry["version"])
        log.info("published model version %d (trained on %d records, %d new)",
                 entry["version"], meta["trained_on_records"], meta["new_records"])
        return entry

    # -- background thread (TrainingLoop) -------------------------------------------------------
    def start(self) -> "OnlineLearner":
        """Train in a daemon thread until :meth:`stop`."""
        self._loop.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._loop.stop(timeout_s)

    @property
    def running(self) -> bool:
        return self._loop.running

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    # -- views for the API -------------------------------------------------------------------
    def node_ids(self) -> list[str]:
        with self._lock:
            return list(self._node_order)

    def node_states(self, now_ms: int | None = None) -> list[NodeState]:
        """Every known node's newest state (a zero state for nodes that never reported), with
        its measured speed factor (what the model was trained with)."""
        with self._lock:
            return [dataclasses.replace(self.history.latest(n, now_ms),
                                        speed_factor=self.speeds.factor(n))
                    for n in self._node_order]

    def latest_feedback(self) -> dict[str, dict]:
        """node -> its newest NodeFeedback (without the completed list)."""
        with self._lock:
            return {n: r for n in self.history.nodes()
                    if (r := self.history.latest_record(n)) is not None}

    def measured_rates(self) -> dict[str, float]:
        """node -> measured service rate in tasks/s: its parallel units (cores + GPUs) over the
        mean service time of its last tasks; only nodes with enough samples. Approximate: it
        mixes the applications and sizes the node happened to get."""
        with self._lock:
            rates = {}
            for node, times in self._service_s.items():
                if len(times) >= _RATE_MIN_SAMPLES:
                    spec = self.specs.get(node)
                    units = spec.cpu_cores + len(spec.gpus) if spec else 1
                    rates[node] = units * len(times) / sum(times)
            return rates
