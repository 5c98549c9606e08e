"""Discrete-event simulation of a heterogeneous CPU-GPU cluster running streaming tasks.

One run, in the paper's terms::

    task arrives -> cluster policy picks a node (sees node state that is up to one feedback
    interval stale, plus exact in-flight counts, like the Flink router)
    -> the task's input crosses the node's downlink (processor sharing)
    -> only with ``SimulationConfig.locality``: if the app's model is cold there, the task waits
       for it to load (from a rack peer or the model store; ``simulator.locality``)
    -> its stages become ready as their dependencies finish; the node scheduler starts ready
       stages on CPU cores (one at a time) and GPUs (up to ``gpu_max_corun`` co-runners)
    -> co-running stages progress at the measured co-location rates (hidden ground truth);
       a pair measured as unable to co-run fails with out-of-memory and is retried later
    -> the result crosses the uplink; the task completes.

Deterministic: the same inputs and seed give the same event log (ties broken by a sequence
number, never by object identity or hash order).

Example::

    sim = Simulator()
    metrics = sim.run(RandomPolicy(cluster), FCFS(), cluster, tasks, seed=1)
    print(metrics.throughput_per_min)
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque
from dataclasses import dataclass, field

from workload.catalog import APPLICATIONS
from workload.estimates import CostModel, gpu_spec_speed
from workload.model import (Assignment, ClusterSpec, ComputingUnit, Decision, NodeScheduler,
                            NodeState, Observation, Policy, Stage, Task, Transition)

from simulator.ground_truth import GroundTruth
from simulator.locality import LocalityConfig, WarmSet
from simulator.metrics import Metrics, load_balancing_degree, percentile

__all__ = ["Simulator", "SimulationConfig", "SimulationResult", "EventRecord"]

ARRIVAL, SAMPLE, STAGE_DONE, LINK_DONE, OOM_RETRY, MODEL_READY = range(6)


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
    # Bytes a task moves over the node's downlink: fixed_bytes + bytes_per_unit x input_size
    # (the paper's frames: 1 byte per unit; a real engine's record without a payload: a fixed
    # size, ``bytes_per_unit=0``). The result moves result_fraction of that over the uplink.
    bytes_per_unit: float = 1.0
    fixed_bytes: float = 0.0
    # Hidden truth, never in a NodeSpec (what policies see): (node id, task type, factor)
    # triples; that type's stages take factor x as long on that node (a node slow for one
    # application only, ``task_type_multipliers`` of a local cluster spec).
    hidden_task_type_factors: tuple[tuple[str, str, float], ...] = ()

    def __post_init__(self) -> None:
        for name in ("bytes_per_unit", "fixed_bytes"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        for node, task_type, factor in self.hidden_task_type_factors:
            if not (math.isfinite(factor) and factor > 0):
                raise ValueError(f"hidden factor of {task_type!r} on {node!r} must be a "
                                 f"finite positive number, got {factor!r}")


@dataclass(frozen=True)
class EventRecord:
    time: float
    kind: str
    task_id: str
    stage: str = ""
    node: str = ""
    unit: str = ""


@dataclass
class SimulationResult:
    metrics: Metrics
    events: list[EventRecord]
    decisions: list[tuple[str, Decision]]
    #: (time, NodeState) for every node at every feedback sample: utilisation over time.
    samples: list[tuple[float, NodeState]] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------
# Mutable runtime state (internal)
# ----------------------------------------------------------------------------------------------

@dataclass
class _Run:
    """A stage (or a link transfer) in progress: ``remaining`` is in alone-seconds."""

    key: tuple
    remaining: float
    rate: float = 1.0
    version: int = 0
    started_s: float = 0.0
    work_s: float = 0.0            # true alone-time of the whole piece of work
    reference_gpu_s: float = 0.0   # its size in reference-GPU seconds (useful-work metric)
    memory_mb: float = 0.0
    stage: str = ""
    estimate_s: float = 0.0        # public estimate of its alone time on this unit
    partners: set = field(default_factory=set)  # stage types it shared the GPU with


@dataclass
class _Unit:
    view: ComputingUnit
    memory_mb: float = 0.0
    runs: list[_Run] = field(default_factory=list)
    last_update_s: float = 0.0

    @property
    def is_gpu(self) -> bool:
        return self.view.kind == "gpu"


@dataclass
class _TaskState:
    task: Task
    node: str
    waiting_deps: dict[str, int]
    done: set = field(default_factory=set)
    first_start_s: float | None = None
    estimate_left_s: float = 0.0
    true_left_s: float = 0.0       # hidden truth, only the oracle reads it


@dataclass
class _Link:
    bandwidth_bytes_s: float
    runs: list[_Run] = field(default_factory=list)
    last_update_s: float = 0.0
    version: int = 0


@dataclass
class _Node:
    spec: object
    units: list[_Unit]
    down: _Link
    up: _Link
    tasks: dict[str, _TaskState] = field(default_factory=dict)
    ready: list[Stage] = field(default_factory=list)
    # Time integrals for utilisation: cpu busy cores, busy gpus, gpu memory, host memory, links.
    integrals: list[float] = field(default_factory=lambda: [0.0] * 6)
    last_integral_s: float = 0.0
    sample_integrals: list[float] = field(default_factory=lambda: [0.0] * 6)
    sample_state: NodeState | None = None
    completed: int = 0
    true_left_s: float = 0.0       # sum over its tasks (hidden truth, for the oracle)
    host_bytes: float = 0.0        # inputs of the tasks at the node (host-memory use)


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
                            truth: GroundTruth | None = None) -> float:
        """No schedule can beat this rate (tasks/min).

        Optimistic on every count: every core and GPU busy all the time, each GPU at the best
        combined co-location gain measured for its model, every GPU stage timed on the fastest
        GPU (a model at its spec speed) and every CPU stage on the fastest core, no queueing, no
        transfer. Under those assumptions the best split of GPU-capable work between the CPU pool
        and the GPU pool is a fractional knapsack (highest speed-up to the GPUs first); we
        binary-search the largest rate both pools can sustain. It is also capped by the arrival
        rate.
        """
        truth = truth or GroundTruth(self.costs, 0, self._colocation)
        if not tasks:
            return 0.0
        # Distinct (model, spec speed): the fastest GPU is the fastest spec, not model.
        gpu_kinds = list(dict.fromkeys((g.model, g.speed)
                                       for n in cluster.nodes for g in n.gpus))
        best_cpu = max(n.cpu_speed for n in cluster.nodes)
        cpu_capacity = float(sum(n.cpu_cores for n in cluster.nodes))
        gpu_capacity = float(sum(truth.max_combined_gain(g.model)
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
    """One run's mutable state; kept apart so a Simulator can be reused."""

    def __init__(self, sim: Simulator, policy: Policy, scheduler: NodeScheduler,
                 cluster: ClusterSpec, tasks: list[Task], seed: int):
        self.sim, self.policy, self.scheduler, self.cluster = sim, policy, scheduler, cluster
        self.costs = sim.costs
        self.cfg = sim.config
        self.truth = GroundTruth(self.costs, seed, sim._colocation,
                                 noise_sigma=self.cfg.service_noise_sigma)
        self.seed = seed
        self.type_factor = {(n, t): float(f) for n, t, f in self.cfg.hidden_task_type_factors}
        self.tasks = sorted(tasks, key=lambda t: (t.arrival_s, t.task_id))
        if len({t.task_id for t in self.tasks}) != len(self.tasks):
            raise ValueError("task ids must be unique")
        unknown = {t.app_id for t in self.tasks} - set(APPLICATIONS)
        if unknown:
            raise ValueError(f"unknown applications {sorted(unknown)}; known: "
                             f"{sorted(APPLICATIONS)}")
        self.now = 0.0
        self.heap: list = []
        self.seq = 0
        self.events: list[EventRecord] = []
        self.decisions: list[tuple[str, Decision]] = []
        self.samples: list[tuple[float, NodeState]] = []
        self.nodes: dict[str, _Node] = {n.node_id: self._make_node(n) for n in cluster.nodes}
        self.completion_times: deque = deque()
        self.latencies: list[float] = []
        self.waits: list[float] = []
        self.finished = 0
        self.oom = 0
        self.gpu_busy_s = 0.0
        self.gpu_useful_s = 0.0
        self.last_completion = 0.0
        self.pending_transition: tuple | None = None
        self.last_sample_s = 0.0
        if getattr(policy, "wants_ground_truth", False):
            policy.execution = self  # only the simulator's own oracle asks for this
        self.per_node_tasks = {n: 0 for n in self.nodes}
        # Loaded models per node; None (the default) leaves every run as it was without them.
        self.warm = WarmSet(self.cfg.locality, cluster) if self.cfg.locality else None

    # -- construction ----------------------------------------------------------------------
    def _make_node(self, spec) -> _Node:
        units = [_Unit(ComputingUnit(f"cpu:{i}", "cpu", speed=spec.cpu_speed))
                 for i in range(spec.cpu_cores)]
        for i, gpu in enumerate(spec.gpus):
            # The unit carries its spec speed: CostModel.unit_ms scales the model's calibrated
            # per-stage times by it (workload.estimates), so GpuSpec.speed changes true times.
            units.append(_Unit(ComputingUnit(f"gpu:{i}", "gpu",
                                             speed=gpu_spec_speed(gpu, self.costs.calibration),
                                             model=gpu.model,
                                             capacity=self.cfg.gpu_max_corun),
                               memory_mb=gpu.memory_gb * 1024))
        return _Node(spec, units, _Link(spec.downlink_mbps * 1e6 / 8),
                     _Link(spec.uplink_mbps * 1e6 / 8))

    # -- event plumbing --------------------------------------------------------------------
    def _push(self, time: float, kind: int, data) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time, self.seq, kind, data))

    def _log(self, kind: str, task_id: str, stage: str = "", node: str = "", unit: str = ""):
        if self.cfg.record_events:
            self.events.append(EventRecord(round(self.now, 9), kind, task_id, stage, node, unit))

    # -- main loop -------------------------------------------------------------------------
    def run(self) -> SimulationResult:
        for task in self.tasks:
            self._push(task.arrival_s, ARRIVAL, task)
        self._push(0.0, SAMPLE, None)
        remaining = len(self.tasks)
        while self.heap and (remaining > 0):
            time, _, kind, data = heapq.heappop(self.heap)
            self.now = time
            if kind == ARRIVAL:
                self._on_arrival(data)
            elif kind == SAMPLE:
                self._on_sample()
            elif kind == STAGE_DONE:
                remaining -= self._on_stage_done(*data)
            elif kind == LINK_DONE:
                remaining -= self._on_link_done(*data)
            elif kind == OOM_RETRY:
                node_id, stage = data
                self.nodes[node_id].ready.append(stage)
                self._schedule_node(node_id)
            elif kind == MODEL_READY:
                self._inputs_ready(*data)
        self._finish_learning()
        return SimulationResult(self._metrics(), self.events, self.decisions, self.samples)

    # -- observation -----------------------------------------------------------------------
    def _accumulate(self, node: _Node) -> None:
        dt = self.now - node.last_integral_s
        if dt > 0:
            cpu_busy = sum(1 for u in node.units if not u.is_gpu and u.runs)
            gpus = [u for u in node.units if u.is_gpu]
            gpu_busy = sum(1 for u in gpus if u.runs)
            gpu_mem = sum(r.memory_mb for u in gpus for r in u.runs)
            host_bytes = node.host_bytes
            values = (cpu_busy, gpu_busy, gpu_mem, host_bytes,
                      1.0 if node.down.runs else 0.0, 1.0 if node.up.runs else 0.0)
            for i, v in enumerate(values):
                node.integrals[i] += v * dt
            self.gpu_busy_s += gpu_busy * dt
        node.last_integral_s = self.now

    def _on_sample(self) -> None:
        interval = self.cfg.feedback_interval_s
        for node_id, node in self.nodes.items():
            self._accumulate(node)
            delta = [a - b for a, b in zip(node.integrals, node.sample_integrals)]
            node.sample_integrals = list(node.integrals)
            spec = node.spec
            gpu_count = len(spec.gpus)
            gpu_mem_total = sum(g.memory_gb * 1024 for g in spec.gpus)
            span = interval if self.now > 0 else 1.0
            node.sample_state = NodeState(
                node_id,
                cpu_util=delta[0] / span / spec.cpu_cores,
                gpu_util=delta[1] / span / gpu_count if gpu_count else 0.0,
                gpu_mem_util=delta[2] / span / gpu_mem_total if gpu_mem_total else 0.0,
                host_mem_util=min(1.0, delta[3] / span / (spec.host_memory_gb * 2**30)),
                downlink_util=delta[4] / span, uplink_util=delta[5] / span,
                queue_depth=len(node.tasks))
            if self.cfg.record_samples and self.now > 0:
                self.samples.append((self.now, node.sample_state))
        self.last_sample_s = self.now
        # The run loop stops once every task completed, so the next sample can always be queued.
        self._push(self.now + interval, SAMPLE, None)

    def _observation(self, task: Task) -> Observation:
        states = []
        for node_id, node in self.nodes.items():
            base = node.sample_state or NodeState(node_id)
            states.append(NodeState(
                node_id, base.cpu_util, base.gpu_util, base.host_mem_util, base.gpu_mem_util,
                base.uplink_util, base.downlink_util, queue_depth=len(node.tasks),
                backlog_s=sum(t.estimate_left_s for t in node.tasks.values()),
                age_s=self.now - self.last_sample_s))
        return Observation(task, tuple(states), self.now)

    # -- cluster level -----------------------------------------------------------------------
    def _window_throughput(self) -> float:
        window = self.cfg.reward_window_s
        while self.completion_times and self.completion_times[0] <= self.now - window:
            self.completion_times.popleft()
        return len(self.completion_times) / window

    def _on_arrival(self, task: Task) -> None:
        observation = self._observation(task)
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
        self._log("decide", task.task_id, node=decision.node)
        node = self.nodes[decision.node]
        self._accumulate(node)
        self.per_node_tasks[decision.node] += 1
        app = APPLICATIONS[task.app_id]
        state = _TaskState(task, decision.node, {s.name: len(s.deps) for s in app.stages})
        state.estimate_left_s = sum(self.costs.stage_best_ms(s.name, task.input_size, node.spec)
                                    for s in app.stages) / 1000.0
        state.true_left_s = sum(self.true_best_s(node, task, s.name) for s in app.stages)
        node.true_left_s += state.true_left_s
        node.tasks[task.task_id] = state
        node.host_bytes += task.input_size
        self._start_link(node, node.down, ("down", task.task_id), self._task_bytes(task))

    def _finish_learning(self) -> None:
        if self.pending_transition is not None:
            prev_obs, prev_decision, prev_throughput = self.pending_transition
            self.policy.learn(Transition(prev_obs, prev_decision,
                                         self._window_throughput() - prev_throughput, None,
                                         done=True))

    def _task_bytes(self, task: Task) -> float:
        """What the task moves over the downlink (SimulationConfig.bytes_per_unit)."""
        return self.cfg.fixed_bytes + self.cfg.bytes_per_unit * float(task.input_size)

    def true_best_s(self, node: _Node, task: Task, stage: str) -> float:
        """True seconds of a stage on the node's best unit, alone (hidden noise included)."""
        return (self.costs.stage_best_ms(stage, task.input_size, node.spec) / 1000.0
                * self.truth.noise(task.task_id, stage)
                * self.type_factor.get((node.spec.node_id, task.app_id), 1.0))

    # -- links (processor sharing) ---------------------------------------------------------
    def _advance(self, runs: list[_Run], since: float) -> None:
        dt = self.now - since
        if dt > 0:
            for run in runs:
                run.remaining = max(0.0, run.remaining - run.rate * dt)

    def _start_link(self, node: _Node, link: _Link, key: tuple, size_bytes: float) -> None:
        self._advance(link.runs, link.last_update_s)
        link.last_update_s = self.now
        link.runs.append(_Run(key, size_bytes / link.bandwidth_bytes_s))
        self._reschedule_link(node, link)

    def _reschedule_link(self, node: _Node, link: _Link) -> None:
        # Equal shares: the transfer with the least left finishes first, so one event per link
        # suffices (the others are re-timed when it fires). The link's version voids old events.
        link.version += 1
        if not link.runs:
            return
        share = 1.0 / len(link.runs)
        first = min(link.runs, key=lambda r: r.remaining)
        for run in link.runs:
            run.rate = share
        self._push(self.now + first.remaining / share, LINK_DONE,
                   (node.spec.node_id, first.key, link.version))

    def _on_link_done(self, node_id: str, key: tuple, version: int) -> int:
        node = self.nodes[node_id]
        link = node.down if key[0] == "down" else node.up
        if link.version != version:
            return 0  # superseded by a start or finish on this link
        run = next(r for r in link.runs if r.key == key)
        self._accumulate(node)
        self._advance(link.runs, link.last_update_s)
        link.last_update_s = self.now
        link.runs.remove(run)
        self._reschedule_link(node, link)
        direction, task_id = key
        state = node.tasks[task_id]
        if direction == "down":
            self._log("input_received", task_id, node=node_id)
            delay, source = (self.warm.acquire(node_id, state.task.app_id, self.now)
                             if self.warm is not None else (0.0, "node"))
            if delay > 0:  # the app's model is loaded first (simulator.locality)
                self._log(f"model_load_{'wait' if source == 'node' else source}", task_id,
                          node=node_id)
                self._push(self.now + delay, MODEL_READY, (node_id, task_id))
            else:
                self._inputs_ready(node_id, task_id)
            return 0
        # Result uploaded: the task is complete.
        del node.tasks[task_id]
        if self.warm is not None:
            self.warm.release(node_id, state.task.app_id, self.now)
        node.host_bytes -= state.task.input_size
        node.completed += 1
        self.finished += 1
        self.completion_times.append(self.now)
        self.last_completion = self.now
        self.latencies.append(self.now - state.task.arrival_s)
        observe = getattr(self.policy, "observe_completion", None)
        if observe is not None:  # what the feedback topic tells a learner about this task
            observe(task_id, self.now - state.task.arrival_s, node_id)
        self.waits.append((state.first_start_s or self.now) - state.task.arrival_s)
        self._log("complete", task_id, node=node_id)
        return 1

    # -- node level ------------------------------------------------------------------------
    def _inputs_ready(self, node_id: str, task_id: str) -> None:
        """The task's input (and model) is at the node: its first stages become ready."""
        node = self.nodes[node_id]
        state = node.tasks[task_id]
        for stage in APPLICATIONS[state.task.app_id].stages:
            if not stage.deps:
                self._make_ready(node, state, stage)
        self._schedule_node(node_id)

    def _make_ready(self, node: _Node, state: _TaskState, stage_def) -> None:
        node.ready.append(Stage(state.task.task_id, state.task.app_id, stage_def.name,
                                state.task.input_size, stage_def.gpu_capable, self.now))

    def _unit_views(self, node: _Node) -> list[ComputingUnit]:
        views = []
        for unit in node.units:
            self._advance(unit.runs, unit.last_update_s)
            unit.last_update_s = self.now
            free_at = self.now + max((r.remaining / r.rate if r.rate > 0 else 0.0
                                      for r in unit.runs), default=0.0)
            v = unit.view
            views.append(ComputingUnit(v.unit_id, v.kind, v.speed, v.model,
                                       tuple(r.stage for r in unit.runs), v.capacity, free_at,
                                       1.0 if unit.runs else 0.0,
                                       (sum(r.memory_mb for r in unit.runs) / unit.memory_mb)
                                       if unit.memory_mb else 0.0, unit.memory_mb))
        return views

    def _schedule_node(self, node_id: str) -> None:
        node = self.nodes[node_id]
        if not node.ready:
            return
        node.ready.sort(key=lambda s: (s.ready_at_s, s.task_id, s.stage))
        views = self._unit_views(node)
        assignments = self.scheduler.assign(list(node.ready), views, self.now)
        by_id = {u.view.unit_id: u for u in node.units}
        room = {v.unit_id: v.capacity - len(v.running) for v in views}
        started = set()
        for assignment in assignments:
            self._check(assignment, by_id, room, started)
            room[assignment.unit_id] -= 1
            started.add((assignment.stage.task_id, assignment.stage.stage))
            node.ready.remove(assignment.stage)
            self._start_stage(node, by_id[assignment.unit_id], assignment.stage)

    def _check(self, a: Assignment, by_id: dict, room: dict, started: set) -> None:
        name = self.scheduler.name
        if a.unit_id not in by_id:
            raise ValueError(f"node scheduler {name!r} used unknown unit {a.unit_id!r}")
        if room[a.unit_id] <= 0:
            raise ValueError(f"node scheduler {name!r} over-filled {a.unit_id}")
        if (a.stage.task_id, a.stage.stage) in started:
            raise ValueError(f"node scheduler {name!r} started {a.stage.stage} twice")
        if by_id[a.unit_id].is_gpu and not a.stage.gpu_capable:
            raise ValueError(f"node scheduler {name!r} put CPU-only {a.stage.stage} on a GPU")

    def _start_stage(self, node: _Node, unit: _Unit, stage: Stage) -> None:
        self._accumulate(node)
        state = node.tasks[stage.task_id]
        if state.first_start_s is None:
            state.first_start_s = self.now
        est_ms = self.costs.unit_ms(stage.stage, stage.input_size, unit.view)
        true_s = (est_ms / 1000.0 * self.truth.noise(stage.task_id, stage.stage)
                  * self.type_factor.get((node.spec.node_id, stage.app_id), 1.0))
        memory = self.costs.gpu_memory_mb(stage.stage, stage.input_size) if unit.is_gpu else 0.0
        if unit.is_gpu and self._oom(unit, stage.stage, memory):
            self.oom += 1
            observe = getattr(self.scheduler, "observe_corun", None)
            if observe is not None and len(unit.runs) == 1:
                # The executor sees the launch fail next to that partner: rate 0.
                observe(stage.stage, unit.runs[0].stage, unit.view.model, 0.0)
            self._log("oom", stage.task_id, stage.stage, node.spec.node_id, unit.view.unit_id)
            self._push(self.now + self.cfg.oom_retry_s, OOM_RETRY,
                       (node.spec.node_id, Stage(stage.task_id, stage.app_id, stage.stage,
                                                 stage.input_size, stage.gpu_capable,
                                                 stage.ready_at_s)))
            return
        reference_s = 0.0
        if unit.is_gpu:
            ref_ms = self.costs.gpu_ms(stage.stage, stage.input_size,
                                       self.costs.calibration.raw["stage_gpu_speedup"]
                                       ["reference_gpu"])
            reference_s = (ref_ms or 0.0) / 1000.0 * self.truth.noise(stage.task_id, stage.stage)
        self._advance(unit.runs, unit.last_update_s)
        unit.last_update_s = self.now
        unit.runs.append(_Run((stage.task_id, stage.stage), true_s, started_s=self.now,
                              work_s=true_s, reference_gpu_s=reference_s, memory_mb=memory,
                              stage=stage.stage, estimate_s=est_ms / 1000.0))
        self._log("start", stage.task_id, stage.stage, node.spec.node_id, unit.view.unit_id)
        self._reschedule_unit(node, unit)

    def _oom(self, unit: _Unit, stage: str, memory_mb: float) -> bool:
        if sum(r.memory_mb for r in unit.runs) + memory_mb > unit.memory_mb:
            return True
        return any(self.truth.corun_rates(stage, r.stage, unit.view.model) == (0.0, 0.0)
                   for r in unit.runs)

    def _reschedule_unit(self, node: _Node, unit: _Unit) -> None:
        if unit.is_gpu and len(unit.runs) == 2:
            a, b = unit.runs
            rate_a, rate_b = self.truth.corun_rates(a.stage, b.stage, unit.view.model)
            a.rate, b.rate = rate_a, rate_b
            a.partners.add(b.stage)
            b.partners.add(a.stage)
        else:
            # Alone (or, beyond measured pairs, time-sliced equally).
            for run in unit.runs:
                run.rate = 1.0 / len(unit.runs)
        for run in unit.runs:
            run.version += 1
            finish = self.now + (run.remaining / run.rate if run.rate > 0 else math.inf)
            self._push(finish, STAGE_DONE, (node.spec.node_id, unit.view.unit_id, run.key,
                                            run.version))

    def _on_stage_done(self, node_id: str, unit_id: str, key: tuple, version: int) -> int:
        node = self.nodes[node_id]
        unit = next(u for u in node.units if u.view.unit_id == unit_id)
        run = next((r for r in unit.runs if r.key == key), None)
        if run is None or run.version != version:
            return 0
        self._accumulate(node)
        self._advance(unit.runs, unit.last_update_s)
        unit.last_update_s = self.now
        unit.runs.remove(run)
        self.gpu_useful_s += run.reference_gpu_s
        if unit.is_gpu and len(run.partners) == 1 and self.now > run.started_s:
            # What an executor can measure: its estimate of the stage alone over the time it
            # took. Only stages that shared the GPU with one partner type report a slowdown.
            observe = getattr(self.scheduler, "observe_corun", None)
            if observe is not None:
                observe(run.stage, next(iter(run.partners)), unit.view.model,
                        run.estimate_s / (self.now - run.started_s))
        self._reschedule_unit(node, unit)
        task_id, stage_name = key
        state = node.tasks[task_id]
        state.done.add(stage_name)
        done_s = self.true_best_s(node, state.task, stage_name)
        state.true_left_s -= done_s
        node.true_left_s = max(0.0, node.true_left_s - done_s)
        state.estimate_left_s = max(0.0, state.estimate_left_s - self.costs.stage_best_ms(
            stage_name, state.task.input_size, node.spec) / 1000.0)
        self._log("finish", task_id, stage_name, node_id, unit_id)
        app = APPLICATIONS[state.task.app_id]
        for stage in app.stages:
            if stage_name in stage.deps:
                state.waiting_deps[stage.name] -= 1
                if state.waiting_deps[stage.name] == 0:
                    self._make_ready(node, state, stage)
        if len(state.done) == len(app.stages):
            result_bytes = max(1.0, self._task_bytes(state.task) * self.cfg.result_fraction)
            self._start_link(node, node.up, ("up", task_id), result_bytes)
        self._schedule_node(node_id)
        return 0

    # -- metrics ---------------------------------------------------------------------------
    def _metrics(self) -> Metrics:
        for node in self.nodes.values():
            self._accumulate(node)
        first = self.tasks[0].arrival_s if self.tasks else 0.0
        makespan = max(0.0, self.last_completion - first)
        loads, cpu_busy, cpu_total = {}, 0.0, 0
        gpu_total = 0
        for node_id, node in self.nodes.items():
            spec = node.spec
            span = makespan or 1.0
            gpus = len(spec.gpus)
            gpu_mem = sum(g.memory_gb * 1024 for g in spec.gpus)
            cpu_u = node.integrals[0] / span / spec.cpu_cores
            gpu_u = node.integrals[1] / span / gpus if gpus else 0.0
            mem_u = node.integrals[2] / span / gpu_mem if gpu_mem else 0.0
            host_u = min(1.0, node.integrals[3] / span / (spec.host_memory_gb * 2**30))
            loads[node_id] = (cpu_u + gpu_u + mem_u + host_u) / 4.0
            cpu_busy += node.integrals[0]
            cpu_total += spec.cpu_cores
            gpu_total += gpus
        span = makespan or 1.0
        return Metrics(
            policy=self.policy.name, node_scheduler=self.scheduler.name, seed=self.seed,
            tasks=len(self.tasks), completed=self.finished, makespan_s=makespan,
            throughput_per_min=60.0 * self.finished / makespan if makespan > 0 else 0.0,
            mean_wait_s=sum(self.waits) / len(self.waits) if self.waits else math.nan,
            latency_p50_s=percentile(self.latencies, 50),
            latency_p99_s=percentile(self.latencies, 99),
            gpu_utilisation=self.gpu_busy_s / span / gpu_total if gpu_total else 0.0,
            cpu_utilisation=cpu_busy / span / cpu_total,
            useful_gpu_work_per_gpu_second=(self.gpu_useful_s / self.gpu_busy_s
                                            if self.gpu_busy_s else 0.0),
            load_balancing_degree=load_balancing_degree(list(loads.values())),
            upper_bound_per_min=self.sim.upper_bound_per_min(self.cluster, self.tasks,
                                                             self.truth),
            oom_failures=self.oom, decisions=len(self.decisions),
            per_node_tasks=dict(self.per_node_tasks), per_node_load=loads,
            truth_source=self.truth.source)
