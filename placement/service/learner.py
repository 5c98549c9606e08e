"""The service's online learner: NodeFeedback in, LDWP model versions out.

What it does with each de-duplicated NodeFeedback record (see :mod:`placement.service.feedback`
for the consumer that hands them over; steps 1-2 are :mod:`placement.service.examples`):

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
   - reward: the agent's ``latency_reward`` (the service's default: ``-log(1 + t)``) of the
     task's **drain time** ``t`` by default (``judge="drain"``,
     :mod:`placement.service.drain_judge`: until its node had completed, in estimated work,
     what it held when the task was sent plus the task; the example waits for that), or with
     ``judge="latency"`` of its own ``queue_ms + service_ms`` (LDWP's ``task_latency``);
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
   new ones, if it passes the gate and the burst check; one the burst check cannot judge yet
   is held (not published, not rolled back: ``versions_held``). Metadata: version,
   trained_on_records, new_records, training_data_hash (SHA-256 over the ``task_id, node,
   latency_ms`` lines trained on, chained to the previous version's hash), nodes,
   cluster_fingerprint (:func:`cluster_fingerprint`: a restarted service resumes only a
   version of its own cluster spec), training_steps, loss. Before any of them, an empty
   store gets the untrained starting weights (``publish_prior``; ``source``:
   :data:`PRIOR_SOURCE`), so routers decide with LDWP's prior, not their fallback rule.

Example::

    learner = OnlineLearner(cluster, ModelStore(tmp), publish_every=500)
    learner.take(feedback_records)   # consumer thread: cheap, returns how many timings queued
    learner.train_pending()          # learner thread (or start() for a background thread)
    store.latest()["trained_on_records"]
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np

from placement.ldwp.agent import LDWPPolicy, LDWPSettings
from placement.ldwp.modelfile import ModelFileError
from placement.measured_costs import MeasuredCosts
from placement.ldwp.networks import export_layers
from placement.service.burst_check import BurstCheck
from placement.service.cpu_budget import CpuBudget
from placement.service.examples import (ABSENT_AFTER_S, FeedbackExamples, NodeHistory,
                                        TrainingExample)
from placement.service.model_gate import PublishGate
from placement.service.store import ModelStore
from placement.service.trial_serving import backed_off, trial_serving_for
from placement.service.version_trial import TrialSettings
from workload.estimates import CostModel
from workload.model import (ClusterSpec, NodeState, Observation, taskmanager_memory_gb,
                            taskmanager_node)

__all__ = ["OnlineLearner", "NodeHistory", "to_cluster_spec", "learning_settings",
           "SERVICE_LEARNING_DEFAULTS", "PRIOR_SOURCE"]

log = logging.getLogger(__name__)

#: The ``source`` of the version that carries the untrained starting weights (the prior).
PRIOR_SOURCE = "the starting weights, untrained: MCT's completion estimate at the learned costs"

#: LDWPSettings the service changes from the paper's defaults (users override any of them in
#: ``service.learning``): a bandit regression on small, noisy latencies learns steadily with
#: Adam at 1e-3; the paper's SGD at 0.1 is tuned to its throughput reward. Epsilon does not
#: matter (the service never explores; routers decide). One gradient step per 4 examples on
#: 128 samples, not one per example on 32 (the same samples per example): a step costs about
#: 2.5 ms of CPU whatever the batch (torch's per-call overhead), so one per completed task made
#: the service's CPU grow with the cluster's task rate; on the emulated hosts it took 0.6 of
#: the machine's 2 cores from the TaskManagers (2026-12-07, docs/results-engines.md "What the
#: service costs").
SERVICE_LEARNING_DEFAULTS: dict = {"optimizer": "adam", "learning_rate": 1e-3,
                                   "batch_size": 128, "train_frequency": 4,
                                   "learning_starts": 32,
                                   "latency_scale_s": 10.0, "hidden_sizes": (128, 64),
                                   # the residual LDWP (docs/ldwp.md): Q = -log(1 + e^g wait
                                   # + e^h task time), untrained = MCT at measured speeds
                                   "q_prior": "completion", "residual": "scaled",
                                   "latency_transform": "log", "gamma": 0.0,
                                   # any task type: the built-in apps' one-hot plus a hashed
                                   # code of other type strings (placement.ldwp.features)
                                   "task_encoding": "hashed"}



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
    Each node by the rule the hook's routers use too (:func:`workload.model.taskmanager_node`).
    """
    if isinstance(spec, ClusterSpec):
        return spec
    isolation = getattr(spec, "isolation", "cpuset")
    nodes = tuple(taskmanager_node(tm.id, tm.cpu_cores, gpus=len(getattr(tm, "gpu_ids", ())),
                                   memory_gb=taskmanager_memory_gb(tm),
                                   work_multiplier=float(getattr(tm, "work_multiplier", 1.0)),
                                   slots=int(getattr(tm, "slots", 0)), gpu_model=gpu_model,
                                   **(tm.cost_model_links(isolation)
                                      if hasattr(tm, "cost_model_links") else {}))
                  for tm in spec.taskmanagers)
    return ClusterSpec(nodes, name=getattr(spec, "source", "") or "cluster")


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


def cluster_fingerprint(cluster: ClusterSpec) -> str:
    """A short hash of what the cluster spec says of every node (ids, cores, memory, GPUs,
    speeds, links, slots): a stored model version trained for another cluster has another."""
    nodes = [asdict(node) for node in cluster.nodes]
    return hashlib.sha256(json.dumps(nodes, sort_keys=True, default=str).encode()
                          ).hexdigest()[:16]


def _newest_loadable(store: ModelStore, settings: LDWPSettings, cluster, costs):
    """(agent, entry) of the newest stored version that loads, passes the model-file checks
    (finite weights included) and was built with ``settings``' model-defining values; (None,
    None) when there is none. A version that fails is skipped with a warning, so a service
    never resumes from a poisoned or damaged version (it falls back to the one before)."""
    this_cluster = cluster_fingerprint(cluster)
    for entry in reversed(store.versions()):
        version = entry["version"]
        stored = entry.get("cluster_fingerprint")   # versions published before it: none
        if stored is not None and stored != this_cluster:
            # its corrections describe other hosts under the same node names (a benchmark's
            # store resumed on another spec learned the old cluster's speeds): start afresh
            log.warning("the stored model version %d was trained for another cluster (spec "
                        "fingerprint %s, this one %s); not resuming from it", version, stored,
                        this_cluster)
            return None, None
        try:
            changed = _model_settings_changed(store.path(version), settings)
            if changed:
                log.warning("the stored model version %d was trained with other model settings "
                            "(%s); not resuming from it", version, changed)
                return None, None
            store.read_bytes(version)  # the recorded sha256
            return LDWPPolicy.from_file(store.path(version), cluster, costs,
                                        training=True), entry
        except Exception as exc:  # noqa: BLE001 - any failure: skip it, never a crash at start
            log.warning("not resuming from model version %d: %s; trying the version before it",
                        version, exc if isinstance(exc, (ModelFileError, OSError))
                        else f"{type(exc).__name__}: {exc}")
    return None, None


def _load_initial_model(initial_model, cluster: ClusterSpec, costs) -> LDWPPolicy:
    """The user's ``initial_model`` as a training agent; ModelFileError naming the file and
    the reason for anything that fails (not an unrelated exception from deep in the loader)."""
    try:
        return LDWPPolicy.from_file(initial_model, cluster, costs, training=True)
    except ModelFileError as exc:
        raise ModelFileError(f"the initial model {initial_model} cannot be used: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - whatever the loader raised, say which file
        raise ModelFileError(f"the initial model {initial_model} cannot be used: "
                             f"{type(exc).__name__}: {exc}") from None


def _starting_agent(store: ModelStore, cluster: ClusterSpec, costs, settings: LDWPSettings,
                    initial_model, publish_prior: bool = True
                    ) -> tuple[LDWPPolicy, dict | None, int, str]:
    """(agent, resumed version's entry or None, records trained, previous training hash): the
    newest good stored version (restart), else ``initial_model`` (published as a version),
    else a fresh agent (published as a version with ``publish_prior``)."""
    agent, latest = (None, None) if initial_model is not None else \
        _newest_loadable(store, settings, cluster, costs)
    if agent is not None:
        records = int(latest.get("trained_on_records", 0))
        log.info("resuming from model version %d (trained on %d records)", latest["version"],
                 records)
        return agent, latest, records, latest.get("training_data_hash", "")
    if initial_model is not None:
        agent = _load_initial_model(initial_model, cluster, costs)
        meta = store.publish_file(initial_model, _starting_metadata(
            agent, cluster, f"initial model {initial_model}"))
        log.info("published the initial model %s as version %d", initial_model, meta["version"])
        return agent, None, 0, ""
    agent = LDWPPolicy(cluster, costs, settings)
    if publish_prior:
        # Why: a router with no version decides by its fallback rule (least-loaded), which
        # ignores what each node measured; the untrained weights are MCT at measured costs
        _publish_prior(store, agent, cluster)
    return agent, None, 0, ""


def _publish_prior(store: ModelStore, agent: LDWPPolicy, cluster: ClusterSpec) -> dict:
    """Publish ``agent``'s untrained weights (its correction is zero: the prior decides) as
    the store's next version; its metadata says so (``source``, ``trained_on_records`` 0)."""
    meta = {**_starting_metadata(agent, cluster, PRIOR_SOURCE),
            "cluster_fingerprint": cluster_fingerprint(cluster), "reward": agent.settings.reward}
    entry = _publish_agent(store, agent, meta)
    log.info("published the starting weights (the prior) as version %d", entry["version"])
    return entry


def _starting_metadata(agent: LDWPPolicy, cluster: ClusterSpec, source: str) -> dict:
    """What a version the learner starts from records: trained on nothing yet."""
    return {"trained_on_records": 0, "new_records": 0, "training_data_hash": "",
            "nodes": list(cluster.node_ids), "source": source, "policy": "ldwp",
            "network": agent.settings.network}


def _publish_agent(store: ModelStore, agent: LDWPPolicy, meta: dict) -> dict:
    """Publish ``agent``'s weights as the store's next version, ``meta`` in its index entry and
    in the file's own metadata but ``nodes`` (the file keeps the agent's node list, the one its
    network was built for)."""
    return store.publish(lambda path, version: agent.save(path, version=version, **{
        k: v for k, v in meta.items() if k != "nodes"}), meta)


def _saved_bytes(agent: LDWPPolicy) -> bytes:
    """The agent's model file, as bytes."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="streamplace-champion-") as tmp:
        path = Path(tmp) / "champion.spmodel"
        agent.save(path)
        return path.read_bytes()


class TrainingLoop:
    """The learner's own daemon thread: trains what ``take`` queued, in small slices (so
    ``stop`` never waits long and publishing stays timely), and keeps going after an error
    (kept in the learner's ``last_error``, shown by ``/health``)."""

    def __init__(self, learner: "OnlineLearner", wake: threading.Event | None = None,
                 cpu_share: float = 1.0):
        self.learner = learner
        self.wake = wake if wake is not None else threading.Event()
        # at most this share of one core (placement.service.cpu_budget)
        self.budget = CpuBudget(cpu_share)
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
        budget = self.budget
        budget.restart()   # its CPU clock is this thread's
        while not self._stop.is_set():
            self.wake.wait(0.5)
            self.wake.clear()
            try:
                while not self._stop.is_set() and self.learner.train_pending(max_records=64):
                    pause = budget.pause_s()
                    if pause:   # past its CPU share: the queue waits (bounded; see budget)
                        self._stop.wait(pause)
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

    @property
    def cpu_share(self) -> float:
        return self.budget.share

    @property
    def paused_s(self) -> float:
        """Seconds the thread slept to keep within its CPU share."""
        return round(self.budget.paused_s, 3)


class OnlineLearner:
    """Learns LDWP from feedback and publishes model versions (see the module docstring).

    ``take`` is called by the consumer thread; ``train_pending`` by the learner's own thread
    (``start``/``stop``) or, in tests, directly. ``metrics`` is an optional
    :class:`placement.service.metrics.ServiceMetrics`. ``costs``: the cost model estimates
    come from; default a MeasuredCosts (learned from the timings, any task type) with the
    calibration's CostModel as prior; a plain CostModel keeps the older behaviour (per-app
    estimates, built-in apps only, times measured speed factors). ``max_unknown_nodes``: how
    many nodes outside the cluster spec are learned from (more would be ignored: hostile
    feedback must not grow every example's node list without bound). ``cpu_share``: at most
    this share of one core for the learner's own thread (:mod:`placement.service.cpu_budget`;
    1: no limit). ``absent_after_s``: how long a spec node may stay silent after the first
    report before observations leave it out (:data:`placement.service.examples.ABSENT_AFTER_S`).
    """

    def __init__(self, cluster, store: ModelStore, learning: Mapping | LDWPSettings | None = None,
                 publish_every: int = 500, min_records_first_version: int = 1000,
                 initial_model: str | Path | None = None, costs=None,
                 metrics=None, history_per_node: int = 512, gpu_model: str = "t4",
                 max_unknown_nodes: int = 64, gate: PublishGate | None = None,
                 max_latency_s: float = 3600.0, max_task_size: int = 10**11,
                 burst_check: BurstCheck | None = None, judge: str = "drain",
                 trial: TrialSettings | None = None, publish_prior: bool = True,
                 cpu_share: float = 1.0, absent_after_s: float = ABSENT_AFTER_S):
        if publish_every < 1 or min_records_first_version < 1:
            raise ValueError("publish_every and min_records_first_version must be at least 1")
        self.cluster = to_cluster_spec(cluster, gpu_model)
        self.store = store
        self.costs = costs if costs is not None else MeasuredCosts(self.cluster, prior=CostModel())
        self.metrics = metrics
        self.publish_every = publish_every
        self.min_records_first_version = min_records_first_version
        settings = (learning if isinstance(learning, LDWPSettings)
                    else learning_settings(learning))
        # steps 1-2 (module docstring): node histories and queued examples
        self.examples = FeedbackExamples(self.cluster, self.costs, metrics, history_per_node,
                                         max_unknown_nodes, max_latency_s, max_task_size,
                                         judge=judge, absent_after_s=absent_after_s)
        self._train_lock = threading.Lock()  # one trainer at a time (thread or caller)
        self.loop = TrainingLoop(self, self.examples.wake, cpu_share)
        self.last_error: str | None = None
        self.agent, latest, self.records_trained, previous_hash = _starting_agent(
            store, self.cluster, self.costs, settings, initial_model, publish_prior)
        if self.agent.settings.network != "node_scoring":
            raise ValueError("the service learns the size-agnostic 'node_scoring' network; the "
                             f"model it starts from is {self.agent.settings.network!r}")
        self.agent.training = True
        # the weights it starts from are the first "last good" ones (module docstring, 5.)
        self.gate = gate if gate is not None else PublishGate()
        self.gate.accept(self.agent)
        # and on decisions: no version whose correction drains a burst slower than its prior,
        # and none before it can be judged on min_records_first_version tasks (held till then)
        self.burst_check = burst_check if burst_check is not None else \
            BurstCheck(min_tasks=min_records_first_version)
        self.examples_seen = 0      # examples trained on or held back
        self.models_rejected = 0    # candidate versions the gate refused (rolled back)
        self.versions_held = 0      # due versions not published: the burst check could not
        #                             judge them yet (too few tasks or drain rates)
        self._published_records = self.records_trained if latest is not None else 0
        self._learned_version = latest is not None and self.records_trained > 0
        self._tried = False         # a version was checked (published, refused or held)
        self._refusal_wait = 1      # publish_every times this till the next check (refusals)
        self._hash = hashlib.sha256(f"previous:{previous_hash}\n".encode())
        self._nodes_trained: set[str] = set()
        # the version trial (placement.service.version_trial): None publishes what passes
        self.trials = None if trial is None else trial_serving_for(
            store, trial, starting_file=lambda: _saved_bytes(self.agent), metrics=metrics)
        if metrics is not None and store.latest() is not None:
            metrics.model_version.set(store.latest()["version"])

    # -- consumer side (cheap): placement.service.examples ------------------------------------
    def take(self, records: Iterable[Mapping]) -> int:
        """Record node states and queue every completed task of these NodeFeedback records
        (already de-duplicated) for training; returns how many task records were queued."""
        return self.examples.take(records)

    @property
    def history(self) -> NodeHistory:
        return self.examples.history

    @property
    def timings_rejected(self) -> int:
        return self.examples.timings_rejected

    @property
    def records_taken(self) -> int:
        return self.examples.records_taken

    # -- learner side -------------------------------------------------------------------------
    def train_pending(self, max_records: int | None = None) -> int:
        """Train on queued records (at most ``max_records``), publishing versions as they fall
        due; returns how many were trained on."""
        done = 0
        with self._train_lock:
            while max_records is None or done < max_records:
                example = self.examples.pop()
                if example is None:
                    break
                self._train_one(example)
                if self.trials is not None and self.trials.observe(example) is not None:
                    self._published_records = self.records_trained   # the wait starts now
                done += 1
                if self._publish_due():
                    self.publish()
        return done

    def _train_one(self, example: TrainingExample) -> None:
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
            self.examples.reject_timing()  # features are clamped; this is a last line of defence
            return
        self.examples_seen += 1
        # the burst a version is judged on, and the node states it was decided in
        self.burst_check.observe_task(example.task, example.states)
        if self.gate.is_held_back(self.examples_seen):
            self.gate.hold_back(state, action, reward)  # judges versions, never trained on
            return
        # A terminal transition: the TD target is the reward (contextual bandit, see above).
        agent.replay.add((state, action, reward, None, True))
        # Counted as evidence too: without it every published version carried an empty
        # evidence table, so routers trusted none of what the service learned (prior alone).
        agent.record_evidence(state, action)
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
        if self.trials is not None and self.trials.running:
            return False    # one candidate at a time
        new = self.records_trained - self._published_records
        if not self._learned_version and not self._tried:
            return self.records_trained >= self.min_records_first_version
        # after a version, or a first one refused or held: publish_every more records (more
        # after a candidate the trial refused: TrialServing.wait_factor)
        wait = max(self._refusal_wait, 1 if self.trials is None else self.trials.wait_factor)
        return new >= self.publish_every * wait

    def publish(self) -> dict | None:
        """Save the current weights as a new version now (also used by ``_publish_due``) if
        they pass the gate; else roll back and return None (also while a candidate is on
        trial: one at a time)."""
        if self.trials is not None and self.trials.running:
            return None
        agent = self.agent
        self._tried = True
        verdict = self.gate.check(agent)
        burst = None
        if verdict.ok:  # then on decisions (placement.service.burst_check)
            burst = self.burst_check.check(export_layers(agent.q_network), agent.metadata(),
                                           self.cluster, self.costs, self.node_states(),
                                           self.examples.drain_rates())
        if not verdict.ok or not burst.ok:
            self._roll_back(verdict.reason if not verdict.ok else burst.reason)
            self._published_records = self.records_trained  # try again after publish_every
            # times 2, 4, then 8 after refusals in a row: a check costs seconds of CPU (a
            # 2,000-task burst split ten times), which a learner that keeps failing it spent
            # every publish_every records, on the TaskManagers' machine (2026-12-07)
            self._refusal_wait = backed_off(self._refusal_wait)
            return None
        if burst.held:   # not judged yet: the routers keep what they have, training goes on
            self.versions_held += 1
            self._published_records = self.records_trained  # try again after publish_every
            log.info("version held (%s)", burst.reason)
            return None
        losses = agent.losses[-100:]
        meta = {"trained_on_records": self.records_trained,
                "new_records": self.records_trained - self._published_records,
                "training_data_hash": self._hash.hexdigest(),
                "nodes": sorted(self._nodes_trained) or list(self.cluster.node_ids),
                "cluster_fingerprint": cluster_fingerprint(self.cluster),
                "training_steps": agent.updates,
                "loss": (sum(finite) / len(finite)) if (finite := [
                    x for x in losses if math.isfinite(x)]) else None,
                "held_back_error": verdict.error, "gate": verdict.reason,
                "burst_check": burst.reason, "burst_drain_s": burst.trained_drain_s,
                "prior_burst_drain_s": burst.prior_drain_s,
                "policy": "ldwp", "network": agent.settings.network,
                "reward": agent.settings.reward}
        if self.trials is not None:
            meta.update(self.trials.candidate_metadata())
        entry = _publish_agent(self.store, agent, meta)
        self._published_records = self.records_trained
        self._refusal_wait = 1
        self._learned_version = True
        self.gate.accept(agent)
        if self.trials is not None:   # it serves its first window; the trial decides the rest
            self.trials.start(entry, self.store.read_bytes(entry["version"]))
        if self.metrics is not None:
            self.metrics.model_version.set(entry["version"])
        log.info("published model version %d (trained on %d records, %d new)",
                 entry["version"], meta["trained_on_records"], meta["new_records"])
        return entry

    # -- background thread (TrainingLoop) -------------------------------------------------------
    def start(self) -> "OnlineLearner":
        """Train in a daemon thread until :meth:`stop`."""
        self.loop.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self.loop.stop(timeout_s)

    @property
    def running(self) -> bool:
        return self.loop.running

    def pending(self) -> int:
        return self.examples.pending()

    # -- views for the API ------------------------------------------------------------------
    def node_ids(self) -> list[str]:
        return self.examples.node_ids()

    def node_states(self, now_ms: int | None = None) -> list[NodeState]:
        return self.examples.node_states(now_ms)

    def latest_feedback(self) -> dict[str, dict]:
        return self.examples.latest_feedback()

    def measured_rates(self) -> dict[str, float]:
        return self.examples.measured_rates()

