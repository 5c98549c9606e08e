"""PowerFlow ("Energy-efficient GPU clusters scheduling for deep learning", Gu et al.), as a
streaming cluster policy: where each task goes when seconds are bought with joules under an
energy budget.

What it decides. PowerFlow allocates GPUs (and their clocks) to deep-learning jobs greedily by
the *marginal* job-completion time gained per extra joule, while the cluster's energy stays
within a budget. Here a router places one streaming task at a time on one node, so the
"allocations" it can buy are the nodes themselves:

1. for every known node, the task's estimated completion time, as in ``mct``:
   ``backlog_s / (cores + GPUs) + task_ms_on / 1000`` (times the node's ``speed_factor``);
2. its estimated energy there, from the public cost model and the :class:`~simulator.energy.
   PowerModel` (``power:`` in ``workload/calibration.yaml``), with the accounting of
   :mod:`simulator.energy`: every stage runs on its best unit (``CostModel.stage_best_ms``:
   a core, or the node's fastest GPU for it) and draws that unit's dynamic power
   ``busy_w - idle_w`` for the stage's seconds; with ``count_idle`` the node's whole idle power
   (every core and GPU) is added over the completion-time increment the task causes, its work
   spread over the node's units (``task work / (cores + GPUs)``). Both times ``speed_factor``;
3. PowerFlow's greedy walk (:func:`frontier_walk`): start at the lowest-energy node (the
   frugal baseline), then repeatedly move to the node that saves the most seconds per extra
   joule over the current one, while that node's energy fits the task's allowance and the step
   saves at least ``min_seconds_per_j``. Without a budget the walk ends at the fastest node
   (mct's choice, with energy breaking ties); with a tight one it stays at the frugal baseline.

The budget runs over the policy's own decisions (their *estimated* joules; the router never sees
measured energy): with ``energy_budget_j`` (an average per task) task ``k+1`` may spend
``(k + 1) * energy_budget_j - spent``, so tasks placed frugally leave room for later ones to run
fast; with ``total_energy_budget_j`` it may spend ``total - spent``. Over budget (not even the
lowest-energy node fits) the task goes to the lowest-energy node, and the reason says so.

Not adapted: PowerFlow's DVFS (choosing GPU clocks) and elastic GPU counts. The simulator runs
stages at full speed whatever the clock (:mod:`simulator.energy`), so a lower clock would look
free; both are left to a node scheduler.

Settings (all ASSUMPTIONS of the adaptation; PowerFlow's budget is a cluster-wide power cap):

- ``energy_budget_j`` (None: no budget): average joules per task; > 0, finite.
- ``total_energy_budget_j`` (None): joules for the policy's whole life instead; not with the
  per-task one.
- ``min_seconds_per_j`` (0.0): the least seconds saved per extra joule for a step to be taken;
  >= 0, finite. 0 takes every step that saves time.
- ``count_idle`` (True): add the node's idle power over the task's completion-time increment.
- ``power`` (None: ``PowerModel.from_calibration`` of the cost model's calibration). Every GPU
  model in the cluster needs an entry (refused otherwise, naming it).

Scores: estimated joules per node (the decision is the budgeted walk, not the minimum).

Example::

    >>> from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_gpu", 2, 32, gpus=(GpuSpec("k80", 12),)),
    ...                        NodeSpec("tm_cpu", 8, 32)))     # a 150 W K80 die vs 8 cores
    >>> obs = Observation(Task("t1", "video_synopsis", 2_000_000),
    ...                   (NodeState("tm_gpu"), NodeState("tm_cpu")), 0.0)
    >>> PowerFlowPolicy(cluster).decide(obs).node                     # no budget: fastest
    'tm_gpu'
    >>> decision = PowerFlowPolicy(cluster, energy_budget_j=5.0).decide(obs)
    >>> decision.node                                                 # tight: frugal
    'tm_cpu'
    >>> for part in decision.reason.split("; "):
    ...     print(part)
    powerflow: tm_cpu 0.329 s, 4.58 J (lowest-energy node)
    stopped: tm_gpu would save 0.256 s for 1.15 J more (0.223 s/J) but needs 5.73 J > allowance 5 J
    budget 5 J/task, spent 0 J on 0 tasks
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from placement.policies.base import EstimatingPolicy
from placement.policies.mct import parallel_units
from simulator.energy import PowerModel, PowerSpec
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, NodeState, Observation, Task

__all__ = ["PowerFlowPolicy", "frontier_walk", "Step"]

#: Relative slack when comparing a cost with the allowance (sums of floats).
_TOLERANCE = 1e-9

#: A step of the walk: (node, seconds saved, extra cost, seconds per unit of cost).
Step = tuple[str, float, float, float]


def _fits(cost: float, allowance: float) -> bool:
    return cost <= allowance + _TOLERANCE * abs(allowance)


def frontier_walk(ids: Sequence[str], times: Mapping[str, float], costs: Mapping[str, float],
                  allowance: float | None = None, min_gain: float = 0.0
                  ) -> tuple[list[str], Step | None, str]:
    """PowerFlow's greedy: from the cheapest node (ties: faster, then ``ids`` order), move to
    the node with the most seconds saved per extra cost unit (ties: cheaper, then order) among
    those faster than the current one, within ``allowance`` (None: any) and saving at least
    ``min_gain`` per unit; stop when none is. A node no dearer but faster gains without bound.

    Returns the path, the best step refused at the end (None when the last node is the
    fastest) and why: ``"allowance"`` or ``"min_gain"`` ("" when none was refused).

    >>> times, joules = {"a": 10.0, "b": 4.0, "c": 1.0}, {"a": 5.0, "b": 11.0, "c": 50.0}
    >>> frontier_walk("abc", times, joules)[0]        # a -> b (1 s/J) -> c (0.077 s/J)
    ['a', 'b', 'c']
    >>> path, refused, why = frontier_walk("abc", times, joules, allowance=20.0)
    >>> path, refused[0], why
    (['a', 'b'], 'c', 'allowance')
    """
    order = {nid: i for i, nid in enumerate(ids)}
    current = min(ids, key=lambda n: (costs[n], times[n], order[n]))
    path = [current]

    def best_step(constrained: bool) -> Step | None:
        best, best_key = None, None
        for nid in ids:
            saved = times[current] - times[nid]
            if saved <= 0:
                continue
            extra = costs[nid] - costs[current]
            gain = math.inf if extra <= 0 else saved / extra
            if constrained and (gain < min_gain or (allowance is not None
                                                    and not _fits(costs[nid], allowance))):
                continue
            key = (-gain, costs[nid], order[nid])
            if best_key is None or key < best_key:
                best, best_key = (nid, saved, extra, gain), key
        return best

    while (step := best_step(True)) is not None:
        current = step[0]
        path.append(current)
    refused = best_step(False)
    why = "" if refused is None else "min_gain" if refused[3] < min_gain else "allowance"
    return path, refused, why


def _check_number(label: str, value, low: float, allow_none: bool = False,
                  strict: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < low or (strict and value <= low):
        bound = f"> {low:g}" if strict else f">= {low:g}"
        raise ValueError(f"{label} must be a finite number {bound}"
                         f"{' or None' if allow_none else ''}, got {value!r}")
    return float(value)


class PowerFlowPolicy(EstimatingPolicy):
    """Scores: estimated joules per known node (see the module docstring for the decision)."""

    name = "powerflow"
    unit = "J"                 # the budgeted quantity (GreenFlow: grams)
    baseline_label = "lowest-energy node"

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0, *,
                 energy_budget_j: float | None = None,
                 total_energy_budget_j: float | None = None, min_seconds_per_j: float = 0.0,
                 count_idle: bool = True, power: PowerModel | None = None) -> None:
        if not isinstance(count_idle, bool):
            raise ValueError(f"count_idle must be True or False, got {count_idle!r}")
        if power is not None and not isinstance(power, PowerModel):
            raise ValueError(f"power must be a simulator.energy.PowerModel or None, "
                             f"got {type(power).__name__}")
        self.count_idle = count_idle
        costs = costs if costs is not None else CostModel()
        self.power = power if power is not None else PowerModel.from_calibration(
            costs.calibration)
        self._set_budget(energy_budget_j, total_energy_budget_j, min_seconds_per_j,
                         ("energy_budget_j", "total_energy_budget_j", "min_seconds_per_j"))
        super().__init__(cluster, costs, seed)

    # -- budget ------------------------------------------------------------------------------

    def _set_budget(self, per_task, total, min_gain, labels: tuple[str, str, str]) -> None:
        per_task = _check_number(labels[0], per_task, 0.0, allow_none=True, strict=True)
        total = _check_number(labels[1], total, 0.0, allow_none=True, strict=True)
        if per_task is not None and total is not None:
            raise ValueError(f"give {labels[0]} (average per task) or {labels[1]} (in all), "
                             f"not both")
        self.budget_per_task, self.budget_total = per_task, total
        self.min_gain = _check_number(labels[2], min_gain, 0.0)
        self.spent, self.decided = 0.0, 0

    def allowance(self) -> float | None:
        """What the next task may spend (None: no budget); negative once overspent."""
        if self.budget_per_task is not None:
            return self.budget_per_task * (self.decided + 1) - self.spent
        if self.budget_total is not None:
            return self.budget_total - self.spent
        return None

    def _budget_words(self) -> str:
        u = self.unit
        if self.budget_per_task is not None:
            what = f"budget {self.budget_per_task:.3g} {u}/task"
        elif self.budget_total is not None:
            what = f"budget {self.budget_total:.3g} {u} in all"
        else:
            return "no budget"
        return f"{what}, spent {self.spent:.3g} {u} on {self.decided} tasks"

    # -- energy ------------------------------------------------------------------------------

    def _cluster_changed(self) -> None:
        super()._cluster_changed()
        self._units: dict[str, int] = {}
        self._idle_w: dict[str, float] = {}
        self._energy_cache: dict[tuple[str, int, str], tuple[float, float]] = {}
        for node in self.cluster.nodes:
            for gpu in node.gpus:
                if gpu.model not in self.power.gpus:
                    raise ValueError(f"{self.name}: no power entry for GPU model {gpu.model!r} "
                                     f"of node {node.node_id}; add it under power.gpus in "
                                     f"calibration.yaml or pass power=")
            self._units[node.node_id] = parallel_units(node)
            self._idle_w[node.node_id] = node.cpu_cores * self.power.cpu_core.idle_w + sum(
                self.power.gpus[g.model].idle_w for g in node.gpus)

    def _dynamic_w(self, spec: PowerSpec) -> float:
        return spec.busy_w - spec.idle_w  # at the highest clock: the simulator's default

    def energy_parts(self, task: Task, node_id: str) -> tuple[float, float]:
        """(dynamic joules, unit-seconds of work) of ``task`` on the node, every stage on its
        best unit (a core, or the fastest GPU for it; ties: the core, then GPU order, as
        ``CostModel.stage_best_ms``). Cached per (app, input size, node)."""
        key = (task.app_id, task.input_size, node_id)
        cached = self._energy_cache.get(key)
        if cached is not None:
            return cached
        spec, costs, size = self._specs[node_id], self.costs, task.input_size
        joules = work_s = 0.0
        for stage in APPLICATIONS[task.app_id].stages:
            best_ms = costs.cpu_ms(stage.name, size, spec.cpu_speed)
            watts = self._dynamic_w(self.power.cpu_core)
            for model, speed in dict.fromkeys((g.model, g.speed) for g in spec.gpus):
                gpu_ms = costs.gpu_ms(stage.name, size, model, speed)
                if gpu_ms is not None and gpu_ms < best_ms:
                    best_ms, watts = gpu_ms, self._dynamic_w(self.power.gpus[model])
            joules += watts * best_ms / 1000.0
            work_s += best_ms / 1000.0
        if len(self._energy_cache) >= self._CACHE_LIMIT:
            self._energy_cache.clear()
        self._energy_cache[key] = (joules, work_s)
        return joules, work_s

    def energy_j(self, task: Task, node_id: str, speed_factor: float = 1.0) -> float:
        """Estimated joules of ``task`` on the node: dynamic energy, plus (``count_idle``) the
        node's idle watts over its work spread on the node's units; times ``speed_factor``."""
        dynamic, work_s = self.energy_parts(task, node_id)
        idle = self._idle_w[node_id] * work_s / self._units[node_id] if self.count_idle else 0.0
        return (dynamic + idle) * speed_factor

    # -- decision ----------------------------------------------------------------------------

    def _costs(self, observation: Observation, ids: list[str],
               joules: dict[str, float]) -> tuple[dict[str, float], str]:
        """The budgeted cost per node, and words on it for the reason (GreenFlow: grams)."""
        return joules, ""

    @staticmethod
    def _checked(state: NodeState) -> NodeState:
        if not (math.isfinite(state.backlog_s) and state.backlog_s >= 0):
            raise ValueError(f"node {state.node_id}: backlog_s must be finite and >= 0, "
                             f"got {state.backlog_s!r}")
        if not (math.isfinite(state.speed_factor) and state.speed_factor > 0):
            raise ValueError(f"node {state.node_id}: speed_factor must be finite and > 0, "
                             f"got {state.speed_factor!r}")
        return state

    def decide(self, observation: Observation) -> Decision:
        ids, left_out = self.known_ids(observation)
        states, task = self.states(observation), observation.task
        if task.app_id not in APPLICATIONS:
            raise KeyError(f"{self.name}: unknown application {task.app_id!r}")
        times: dict[str, float] = {}
        joules: dict[str, float] = {}
        for nid in ids:
            state = self._checked(states[nid])
            times[nid] = (state.backlog_s / self._units[nid]
                          + self.task_ms(task, nid) * state.speed_factor / 1000.0)
            joules[nid] = self.energy_j(task, nid, state.speed_factor)
        costs, cost_words = self._costs(observation, ids, joules)
        allowance = self.allowance()
        path, refused, why = frontier_walk(ids, times, costs, allowance, self.min_gain)
        node, u = path[-1], self.unit
        parts = [f"{self.name}: {node} {times[node]:.3g} s, {costs[node]:.3g} {u}"
                 + (f" ({self.baseline_label})" if len(path) == 1 else
                    f" (from {self.baseline_label} {path[0]} {times[path[0]]:.3g} s, "
                    f"{costs[path[0]]:.3g} {u}, via {' -> '.join(path[1:])})")]
        if refused is not None:
            nid, saved, extra, gain = refused
            rate = "free" if math.isinf(gain) else f"{gain:.3g} s/{u}"
            limit = (f"needs {costs[nid]:.3g} {u} > allowance {allowance:.3g} {u}"
                     if why == "allowance" else f"below min {self.min_gain:.3g} s/{u}")
            parts.append(f"stopped: {nid} would save {saved:.3g} s for {extra:.3g} {u} more "
                         f"({rate}) but {limit}")
        over = allowance is not None and not _fits(costs[path[0]], allowance)
        budget = self._budget_words()
        if over:
            budget = (f"OVER BUDGET (allowance {allowance:.3g} {u} < {costs[path[0]]:.3g} {u}): "
                      f"{self.baseline_label} ({budget})")
        parts.append(budget + cost_words + left_out)
        self.spent += costs[node]
        self.decided += 1
        return Decision(node, "; ".join(parts), costs)
