"""Discrete-event simulation of a heterogeneous CPU-GPU cluster running streaming tasks.

One run, in the paper's terms::

    task arrives -> cluster policy picks a node (sees node state that is up to one feedback
    interval stale, plus exact in-flight counts, like the Flink router)
    -> the task's input crosses the node's downlink (processor sharing), and only with
       ``SimulationConfig.shared_links`` its rack's shared link too (``simulator.shared_links``)
    -> only with ``SimulationConfig.locality``: if the app's model is cold there, the task waits
       for it to load (from a rack peer or the model store; ``simulator.locality``)
    -> its stages become ready as their dependencies finish; the node scheduler starts ready
       stages on CPU cores (one at a time) and GPUs (up to ``gpu_max_corun`` co-runners)
    -> co-running stages progress at the measured co-location rates (hidden ground truth);
       a pair measured as unable to co-run fails with out-of-memory and is retried later
    -> only when the policy's decision splits the task (``Decision.stage_nodes``): each stage
       runs on its node, and an output needed on another node crosses the source's uplink and
       the destination's downlink first (``simulator.stage_split``)
    -> the result crosses the uplink; the task completes.

Deterministic: the same inputs and seed give the same event log (ties broken by a sequence
number, never by object identity or hash order).

Layout: this module holds the public API and ``_Execution`` (one run: the event loop, the
arrivals and the policy's learning); the run's parts live beside it: ``simulator.events`` (the
clock and the log), ``simulator.runtime`` (nodes, units, links, tasks), ``simulator.links``
(transfers), ``simulator.node_runtime`` (stages on units), ``simulator.stage_split`` (tasks split
over nodes) and ``simulator.utilisation`` (samples and metrics).

Example::

    sim = Simulator()
    metrics = sim.run(RandomPolicy(cluster), FCFS(), cluster, tasks, seed=1)
    print(metrics.throughput_per_min)
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections import deque
from dataclasses import dataclass, field

from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import (ClusterSpec, Decision, NodeScheduler, NodeState, Policy, Task,
                            Transition)

from simulator.events import (ARRIVAL, LINK_DONE, MODEL_READY, OOM_RETRY, SAMPLE, STAGE_DONE,
                              EventQueue, EventRecord)
from simulator.ground_truth import GroundTruth
from simulator.links import LinkTransfers
from simulator.locality import LocalityConfig, WarmSet
from simulator.metrics import Metrics
from simulator.mig import batch_beta, batch_rate
from simulator.node_runtime import StageRunner
from simulator.runtime import Node, TaskState, build_node
from simulator.shared_links import SharedLinksConfig, SharedLinkTransfers
from simulator.stage_split import StageSplit, check_stage_nodes
from simulator.utilisation import Completions, UtilisationMeter

__all__ = ["Simulator", "SimulationConfig", "SimulationResult", "EventRecord"]

#: idle gaps up to this many feedback intervals skip their samples on exactly the times
#: sampling one by one would reach (so every run of such a workload is bit for bit as before);
#: longer ones (epoch-second arrivals) jump by one multiplication
IDLE_SAMPLE_STEPS_ADDED = 100_000


@dataclass(frozen=True)
class SimulationConfig:
    """Simulation settings; defaults come from ``calibration.yaml`` when left as None."""

    feedback_interval_s: float | None = None  # node state staleness seen by policies
    gpu_max_corun: int | None = None
    oom_retry_s: float | None = None
    result_fraction: float = 0.02      # result bytes / input bytes (uplink traffic)
    reward_window_s: float = 60.0      # throughput window of the learning reward
    record_events: bool = True
    record_samples: bool = True        # per-node utilisation time series (one row per sample)
    service_noise_sigma: float | None = None  # hidden per-task variation (None: calibration)
    locality: LocalityConfig | None = None  # model cold-start costs (simulator.locality); off
    # Rack / switch links every transfer of their nodes also crosses (simulator.shared_links);
    # None (off): each transfer crosses only its node's own link, as before.
    shared_links: SharedLinksConfig | None = None
    # Bytes a task moves over the node's downlink: fixed_bytes + bytes_per_unit x input_size
    # (the paper's frames: 1 byte per unit; a real engine's record without a payload: a fixed
    # size, ``bytes_per_unit=0``). The result moves result_fraction of that over the uplink.
    bytes_per_unit: float = 1.0
    fixed_bytes: float = 0.0
    # Hidden truth, never in a NodeSpec (what policies see): (node id, task type, factor)
    # triples; that type's stages take factor x as long on that node (a node slow for one
    # application only, ``task_type_multipliers`` of a local cluster spec).
    hidden_task_type_factors: tuple[tuple[str, str, float], ...] = ()
    # False (the default): policies see estimates from the public profiles only. True: they
    # see the hidden factors as measured, as a Flink router that times work per task type and
    # node (``placement.speed``) knows them once it has: in an observation each node's
    # ``speed_factor`` is its factor for the arriving task's type and its backlog counts every
    # task's own factor ("MCT at measured speeds" on a spec with ``task_type_multipliers``).
    policies_measure_type_factors: bool = False
    # The cluster manager's waiting queue (the paper's system model: "a cluster manager holds
    # a task waiting queue; the longest-waiting task is scheduled first"). None (the default,
    # and every result before 2026-12-05): each task is decided the moment it arrives, so a
    # saturated burst is committed to the nodes' queues long before most of its work is seen.
    # A number W: arriving tasks wait at the manager, and the longest-waiting one is decided
    # (the policy picks its node then) while fewer than W x (number of nodes) decided tasks
    # are unfinished; each completion lets the next one go. ``benchmarks/manager_queue.py``.
    max_dispatched_per_node: float | None = None

    def __post_init__(self) -> None:
        # Each one in its range (a 0 feedback interval hung the run, a 0 reward window divided
        # by zero, gpu_max_corun 0 silently left every GPU idle, a NaN noise made NaN times).
        for name, open_low in (("feedback_interval_s", True), ("oom_retry_s", True),
                               ("reward_window_s", True), ("max_dispatched_per_node", True),
                               ("service_noise_sigma", False), ("result_fraction", False)):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, numbers.Real)
                                          and not isinstance(value, bool)
                                          and math.isfinite(value)
                                          and (value > 0 if open_low else value >= 0)):
                raise ValueError(f"{name} must be a finite number {'>' if open_low else '>='} "
                                 f"0, got {value!r}")
        corun = self.gpu_max_corun
        if corun is not None and (isinstance(corun, bool)
                                  or not isinstance(corun, numbers.Integral)
                                  or corun < 1):
            raise ValueError(f"gpu_max_corun must be a whole number >= 1, got {corun!r}")
        for name in ("bytes_per_unit", "fixed_bytes"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.shared_links is not None and not isinstance(self.shared_links,
                                                            SharedLinksConfig):
            raise ValueError(f"shared_links must be a SharedLinksConfig or None, got "
                             f"{type(self.shared_links).__name__}")
        for node, task_type, factor in self.hidden_task_type_factors:
            if not (math.isfinite(factor) and factor > 0):
                raise ValueError(f"hidden factor of {task_type!r} on {node!r} must be a "
                                 f"finite positive number, got {factor!r}")


@dataclass
class SimulationResult:
    metrics: Metrics
    events: list[EventRecord]
    decisions: list[tuple[str, Decision]]
    #: (time, NodeState) for every node at every feedback sample: utilisation over time.
    samples: list[tuple[float, NodeState]] = field(default_factory=list)


class Simulator:
    """Runs one (cluster policy, node scheduler) pair on one cluster and workload."""

    def __init__(self, costs: CostModel | None = None, config: SimulationConfig | None = None,
                 colocation="default"):
        self.costs = costs or CostModel()
        cal = self.costs.calibration.simulation
        base = config or SimulationConfig()
        # replace, not a new config: every field not filled from the calibration is kept
        self.config = dataclasses.replace(
            base,
            feedback_interval_s=base.feedback_interval_s if base.feedback_interval_s is not None
            else float(cal["feedback_interval_s"]),
            gpu_max_corun=base.gpu_max_corun if base.gpu_max_corun is not None
            else int(cal["gpu_max_corun"]),
            oom_retry_s=base.oom_retry_s if base.oom_retry_s is not None
            else float(cal["oom_retry_s"]),
            service_noise_sigma=base.service_noise_sigma if base.service_noise_sigma is not None
            else float(cal["service_noise_sigma"]))
        self._colocation = colocation

    # ------------------------------------------------------------------------------------------
    def run(self, policy: Policy, node_scheduler: NodeScheduler, cluster: ClusterSpec,
            tasks: list[Task], seed: int = 0) -> SimulationResult:
        return _Execution(self, policy, node_scheduler, cluster, tasks, seed).run()

    def upper_bound_per_min(self, cluster: ClusterSpec, tasks: list[Task],
                            truth: GroundTruth | None = None,
                            max_batch: int | None = None) -> float:
        """No schedule can beat this rate (tasks/min).

        Optimistic on every count: every core and GPU busy all the time, each GPU at the best
        combined co-location gain measured for its model, every GPU stage timed on the fastest
        GPU (a model at its spec speed) and every CPU stage on the fastest core, no queueing, no
        transfer. With batching on (``max_batch``, ``simulator.mig``) a GPU's gain is at least
        the largest batch's, ``max_batch * batch_rate(max_batch, beta)``. Under those
        assumptions the best split of GPU-capable work between the CPU pool and the GPU pool is
        a fractional knapsack (highest speed-up to the GPUs first); we binary-search the largest
        rate both pools can sustain. It is also capped by the arrival rate.
        """
        truth = truth or GroundTruth(self.costs, 0, self._colocation)
        if not tasks:
            return 0.0
        # Distinct (model, spec speed): the fastest GPU is the fastest spec, not model.
        gpu_kinds = list(dict.fromkeys((g.model, g.speed)
                                       for n in cluster.nodes for g in n.gpus))
        best_cpu = max(n.cpu_speed for n in cluster.nodes)
        cpu_capacity = float(sum(n.cpu_cores for n in cluster.nodes))
        batch_gain = (max_batch * batch_rate(max_batch, batch_beta(self.costs.calibration))
                      if max_batch else 1.0)
        gpu_capacity = float(sum(max(truth.max_combined_gain(g.model), batch_gain)
                                 for n in cluster.nodes for g in n.gpus))
        cpu_only, flexible = 0.0, []  # per-task mean seconds
        for task in tasks:
            for stage in APPLICATIONS[task.app_id].stages:
                cpu_s = self.costs.cpu_ms(stage.name, task.input_size, best_cpu) / 1000.0
                gpu_times = [self.costs.gpu_ms(stage.name, task.input_size, m, speed)
                             for m, speed in gpu_kinds]
                gpu_times = [t / 1000.0 for t in gpu_times if t is not None]
                if gpu_times:
                    flexible.append((cpu_s, min(gpu_times)))
                else:
                    cpu_only += cpu_s
        n = len(tasks)
        flexible.sort(key=lambda cg: cg[0] / cg[1] if cg[1] > 0 else math.inf, reverse=True)

        def sustainable(rate: float) -> bool:  # tasks per second
            gpu_budget = gpu_capacity * n / rate   # GPU-seconds available for all n tasks
            cpu_need = cpu_only
            for cpu_s, gpu_s in flexible:
                if gpu_budget >= gpu_s:
                    gpu_budget -= gpu_s
                else:
                    share = gpu_budget / gpu_s if gpu_s > 0 else 0.0
                    gpu_budget = 0.0
                    cpu_need += cpu_s * (1.0 - share)
            return cpu_need <= cpu_capacity * n / rate

        low, high = 0.0, 1.0
        while sustainable(high):
            high *= 2.0
        for _ in range(60):
            mid = (low + high) / 2.0
            low, high = (mid, high) if sustainable(mid) else (low, mid)
        span = max(t.arrival_s for t in tasks) - min(t.arrival_s for t in tasks)
        arrival_bound = n / span if span > 0 else math.inf
        return 60.0 * min(low, arrival_bound)


class _Execution:
    """One run's mutable state; kept apart so a Simulator can be reused.

    It owns the event loop, the arrivals (the cluster policy's decisions) and the policy's
    learning; its parts own the rest: ``LinkTransfers`` (``simulator.links``) the network,
    ``StageRunner`` (``simulator.node_runtime``) the stages on the units, ``UtilisationMeter``
    (``simulator.utilisation``) the samples and the metrics.
    """

    def __init__(self, sim: Simulator, policy: Policy, scheduler: NodeScheduler,
                 cluster: ClusterSpec, tasks: list[Task], seed: int):
        self.sim, self.policy, self.scheduler, self.cluster = sim, policy, scheduler, cluster
        self.costs = sim.costs
        self.cfg = sim.config
        self.truth = GroundTruth(self.costs, seed, sim._colocation,
                                 noise_sigma=self.cfg.service_noise_sigma)
        self.seed = seed
        self.tasks = sorted(tasks, key=lambda t: (t.arrival_s, t.task_id))
        if len({t.task_id for t in self.tasks}) != len(self.tasks):
            raise ValueError("task ids must be unique")
        for task in self.tasks:  # a NaN or negative size or time would run as nonsense
            size = task.input_size
            if isinstance(size, bool) or not isinstance(size, numbers.Real) \
                    or not 0 <= size < math.inf or not math.isfinite(task.arrival_s):
                raise ValueError(f"task {task.task_id!r}: input_size must be a finite number "
                                 f">= 0 and arrival_s finite, got {size!r} and "
                                 f"{task.arrival_s!r}")
        unknown = {t.app_id for t in self.tasks} - set(APPLICATIONS)
        if unknown:
            raise ValueError(f"unknown applications {sorted(unknown)}; known: "
                             f"{sorted(APPLICATIONS)}")
        self.queue = EventQueue(self.cfg.record_events)
        self.decisions: list[tuple[str, Decision]] = []
        self.nodes: dict[str, Node] = {n.node_id: build_node(n, self.costs,
                                                             self.cfg.gpu_max_corun)
                                       for n in cluster.nodes}
        measured = ({(n, t): float(f) for n, t, f in self.cfg.hidden_task_type_factors}
                    if self.cfg.policies_measure_type_factors else None)
        self.meter = UtilisationMeter(self.queue, self.nodes, self.cfg.feedback_interval_s,
                                      self.cfg.record_samples, measured)
        link_args = (self.queue, self.nodes, self.meter, self.cfg.fixed_bytes,
                     self.cfg.bytes_per_unit, self.cfg.result_fraction)
        self.links = (SharedLinkTransfers(*link_args, self.cfg.shared_links)
                      if self.cfg.shared_links is not None else LinkTransfers(*link_args))
        self.stages = StageRunner(self.queue, self.nodes, self.meter, self.links, scheduler,
                                  self.costs, self.truth, self.cfg.hidden_task_type_factors,
                                  self.cfg.oom_retry_s)
        # The cross-node stage placement axis: only used for a decision that splits its task.
        self.split = StageSplit(self.queue, self.nodes, self.meter, self.links, self.stages,
                                self.costs, self.true_best_s, self.costs.calibration)
        self.stages.split = self.split
        self.completions = Completions()
        self.completion_times: deque = deque()  # inside the reward window (learning)
        self.pending_transition: tuple | None = None
        if getattr(policy, "wants_ground_truth", False):
            policy.execution = self  # only the simulator's own oracle asks for this
        self.per_node_tasks = {n: 0 for n in self.nodes}
        # Loaded models per node; None (the default) leaves every run as it was without them.
        self.warm = WarmSet(self.cfg.locality, cluster) if self.cfg.locality else None
        # The manager's waiting queue (SimulationConfig.max_dispatched_per_node); with no
        # limit every arrival is decided at once and this stays empty.
        self.waiting: deque = deque()
        limit = self.cfg.max_dispatched_per_node
        self.dispatch_limit = (None if limit is None
                               else max(1, math.ceil(limit * len(self.nodes))))

    def true_best_s(self, node: Node, task: Task, stage: str) -> float:
        """True seconds of a stage on the node's best unit, alone (hidden noise included);
        the oracle's view of the hidden truth."""
        return self.stages.true_best_s(node, task, stage)

    # -- main loop -------------------------------------------------------------------------
    def run(self) -> SimulationResult:
        queue = self.queue
        for task in self.tasks:
            queue.push(task.arrival_s, ARRIVAL, task)
        queue.push(0.0, SAMPLE, None)
        remaining = len(self.tasks)
        while queue.pending() and (remaining > 0):
            kind, data = queue.pop()
            if kind == ARRIVAL:
                self._on_arrival(data)
            elif kind == SAMPLE:
                self.meter.sample(self._next_sample_s())
            elif kind == STAGE_DONE:
                self.stages.stage_done(*data)
            elif kind == LINK_DONE:
                completed = self._on_link_done(*data)
                remaining -= completed
                if completed and self.waiting:
                    self._dispatch_waiting()
            elif kind == OOM_RETRY:
                self.stages.retry(*data)
            elif kind == MODEL_READY:
                self.stages.inputs_ready(*data)
        self._finish_learning()
        return SimulationResult(self._metrics(), queue.records, self.decisions,
                                self.meter.samples)

    def _next_sample_s(self) -> float | None:
        """Where the next feedback sample goes: one interval on (None), except while the
        cluster is idle and its next event is further off: then the last sample time of the
        same grid before that event. An idle cluster's samples are all zeros, and tasks
        arriving at epoch seconds (a replayed trace) made the run sample 10^9 of them first."""
        upcoming = self.queue.peek_time()
        if upcoming is None:  # tasks left, and no event but samples can ever change that
            stuck = [(node_id, [(s.task_id, s.stage) for s in node.ready][:5])
                     for node_id, node in self.nodes.items() if node.tasks]
            raise RuntimeError(f"the run cannot go on: {len(self.waiting)} tasks wait at the "
                               f"manager and no stage runs, moves or waits for a retry; "
                               f"node scheduler {self.scheduler.name!r} leaves these ready "
                               f"stages unstarted (node, first 5): {stuck}")
        interval, now = self.cfg.feedback_interval_s, self.queue.now
        if upcoming - now <= 2 * interval or self.waiting \
                or any(node.tasks for node in self.nodes.values()):
            return None
        steps = int((upcoming - now) / interval) - 1
        if steps > IDLE_SAMPLE_STEPS_ADDED:  # far off: the grid by multiplication
            return now + steps * interval
        at = now
        for _ in range(steps):  # repeated addition: the very floats sampling would reach
            at += interval
        return at

    # -- cluster level -----------------------------------------------------------------------
    def _window_throughput(self) -> float:
        window = self.cfg.reward_window_s
        while self.completion_times and self.completion_times[0] <= self.queue.now - window:
            self.completion_times.popleft()
        return len(self.completion_times) / window

    def _on_arrival(self, task: Task) -> None:
        if self.dispatch_limit is None:
            self._decide(task)
            return
        self.waiting.append(task)
        self._dispatch_waiting()

    def _dispatch_waiting(self) -> None:
        """Decide the longest-waiting tasks while the cluster holds fewer decided,
        unfinished tasks than the manager's limit."""
        while self.waiting and (len(self.decisions) - self.completions.count
                                < self.dispatch_limit):
            self._decide(self.waiting.popleft())

    def _decide(self, task: Task) -> None:
        observation = self.meter.observation(task)
        decision = self.policy.decide(observation)
        if decision.node not in self.nodes:
            raise ValueError(f"policy {self.policy.name!r} chose {decision.node!r}, which is not "
                             f"a node of this cluster ({list(self.nodes)})")
        throughput = self._window_throughput()
        if self.pending_transition is not None:
            prev_obs, prev_decision, prev_throughput = self.pending_transition
            self.policy.learn(Transition(prev_obs, prev_decision, throughput - prev_throughput,
                                         observation))
        self.pending_transition = (observation, decision, throughput)
        self.decisions.append((task.task_id, decision))
        self.queue.log("decide", task.task_id, node=decision.node)
        node = self.nodes[decision.node]
        self.meter.accumulate(node)
        self.per_node_tasks[decision.node] += 1
        if check_stage_nodes(task, decision, self.nodes):  # stages over several nodes
            if self.warm is not None:
                raise ValueError(f"policy {self.policy.name!r} split task {task.task_id} over "
                                 "nodes; the locality axis does not model split tasks yet")
            self.split.place(task, decision)
            self.links.send_input(node, task)
            return
        app = APPLICATIONS[task.app_id]
        state = TaskState(task, decision.node, {s.name: len(s.deps) for s in app.stages})
        state.estimate_left_s = sum(self.costs.stage_best_ms(s.name, task.input_size, node.spec)
                                    for s in app.stages) / 1000.0
        state.true_left_s = sum(self.true_best_s(node, task, s.name) for s in app.stages)
        node.true_left_s += state.true_left_s
        node.tasks[task.task_id] = state
        node.host_bytes += task.input_size
        self.links.send_input(node, task)

    def _on_link_done(self, node_id: str, key: tuple, version: int) -> int:
        """A ``LINK_DONE`` event; 1 if it completed a task, else 0."""
        if not self.links.finish(node_id, key, version):
            return 0  # superseded by a start or finish on this link
        if len(key) == 4:  # one half of a split task's transfer between nodes
            self.split.transfer_done(key)
            return 0
        now = self.queue.now
        node = self.nodes[node_id]
        direction, task_id = key
        state = node.tasks[task_id]
        if direction == "down":
            self.queue.log("input_received", task_id, node=node_id)
            delay, source = (self.warm.acquire(node_id, state.task.app_id, now)
                             if self.warm is not None else (0.0, "node"))
            if delay > 0:  # the app's model is loaded first (simulator.locality)
                self.queue.log(f"model_load_{'wait' if source == 'node' else source}", task_id,
                               node=node_id)
                self.queue.push(now + delay, MODEL_READY, (node_id, task_id))
            else:
                self.stages.inputs_ready(node_id, task_id)
            return 0
        # Result uploaded: the task is complete.
        del node.tasks[task_id]
        if self.warm is not None:
            self.warm.release(node_id, state.task.app_id, now)
        node.host_bytes -= state.task.input_size
        node.completed += 1
        self.completions.count += 1
        self.completion_times.append(now)
        self.completions.last_s = now
        self.completions.latencies.append(now - state.task.arrival_s)
        runs = getattr(self.policy, "observe_stage_runs", None)
        if runs is not None:  # where and how long each stage ran (an executor's timings)
            runs(task_id, node_id, tuple(state.stage_runs))
        observe = getattr(self.policy, "observe_completion", None)
        if observe is not None:  # what the feedback topic tells a learner about this task
            observe(task_id, now - state.task.arrival_s, node_id)
        self.completions.waits.append((state.first_start_s or now) - state.task.arrival_s)
        self.queue.log("complete", task_id, node=node_id)
        return 1

    def _finish_learning(self) -> None:
        if self.pending_transition is not None:
            prev_obs, prev_decision, prev_throughput = self.pending_transition
            self.policy.learn(Transition(prev_obs, prev_decision,
                                         self._window_throughput() - prev_throughput, None,
                                         done=True))

    def _metrics(self) -> Metrics:
        upper_bound = self.sim.upper_bound_per_min(self.cluster, self.tasks, self.truth,
                                                   self.stages.max_batch)
        return self.meter.metrics(
            policy=self.policy.name, node_scheduler=self.scheduler.name, seed=self.seed,
            tasks=len(self.tasks), first_arrival_s=self.tasks[0].arrival_s if self.tasks else 0.0,
            completions=self.completions, gpu_useful_s=self.stages.gpu_useful_s,
            oom_failures=self.stages.oom_failures, decisions=len(self.decisions),
            per_node_tasks=self.per_node_tasks, upper_bound_per_min=upper_bound,
            truth_source=self.truth.source)
