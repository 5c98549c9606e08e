"""The zoo's part-2 axes: tenants and deadlines on its workloads, the settings of part 2's systems,
and energy, carbon, fairness and deadline metrics of each run (issue 17).

Everything here is additive: :mod:`benchmarks.zoo` runs every system on the same tasks as before,
now carrying a tenant, a deadline and a priority (``Task.tenant`` / ``deadline_s`` / ``priority``).
No system of part 1, no baseline and neither LDWP nor IAWP reads those fields, so their runs and
their part-1 metrics are unchanged (tested); part 2's systems read them.

**Workload attributes** (:func:`with_slo`): ``workload.task_attributes.with_tenants_and_deadlines``
with the module's defaults: two tenants of equal weight (:data:`TENANT_WEIGHTS`) and deadlines
of 3x each task's estimated alone time on the reference node (:data:`DEADLINE_FACTOR`), drawn
with the run's evaluation seed (its own stream, ``random.Random("tenants/<seed>")``, so the
tasks themselves do not change). One departure from the defaults, with a reason:
``tenant-a`` has priority 1 (:data:`TENANT_PRIORITIES`), so GAI's priority preemption has
something to decide (with every task at 0 GAI is only its best-fit rule).

**Metrics of one run** (:func:`run_metrics`, from the run's SimulationResult, events recorded):

- ``energy_per_task_j``: ``simulator.energy.energy_report`` with the calibration's PowerModel
  (idle power of every unit over the run's span plus dynamic power of busy units, over the
  completed tasks). Every unit at its highest clock: EDF-DVFS's chosen levels are per stage and
  the report takes one level per unit, so its DVFS saving is not counted (stated, not hidden).
- ``g_co2_per_task``: ``simulator.carbon.grams_co2`` of that energy over the fixed synthetic
  series (:func:`carbon_series`: GreenFlow's default, a seeded year of hourly values from
  ``carbon.synthetic`` in the calibration, all assumptions), with simulation time 0 placed at
  :data:`CARBON_OFFSET_S` (09:00 of the series' first day: intensity falls towards the
  13:00 trough, so runs of minutes to hours see it change), divided by the completed tasks.
- ``jain_fairness``: Jain's index across tenants of **slowdown** (``slo_report``'s
  ``slowdown_fairness``: x_i = 1 / tenant i's mean latency-over-alone-time). Why this one: the
  simulator runs every task to completion, so the throughput-share index over the whole log is
  1 by construction; cut at a horizon (``horizon_s`` = the last arrival) it says only how many
  tasks each tenant had finished by then, which at light load is everything for every system.
  Slowdown fairness asks whether the tenants waited alike, is defined for every run and needs
  no horizon (Themis' finish-time fairness). The horizon index is recorded too, as
  ``jain_share_at_last_arrival``.
- ``deadline_miss_rate``: missed / tasks with a deadline over the whole log (every task ends).

A run on a cluster whose GPU models lack a ``power:`` entry records None for energy and carbon
and the reason in ``part2_notes``, and part 2's power-based systems are skipped there
(:func:`power_problem`); nothing crashes.

**Part 2's systems** (:func:`policy_settings`, :func:`scheduler_settings`), derived from the
run's own workload and cluster so each budget binds:

- PowerFlow: ``energy_budget_j`` per task, from PowerFlow's own estimates over the workload:
  the mean joules of each task on its lowest-energy node (E_min) and on MCT's choice (the node
  of least estimated alone time, E_mct), budget = E_min + :data:`BUDGET_FRACTION` x (E_mct -
  E_min). A plain fraction of E_mct would fall below E_min (on the paper cluster E_min is only
  ~2% under E_mct: 1658 vs 1689 J, saturated workload, 1,500 tasks, seed 1001; Alibaba 60/min:
  724 vs 811 J), i.e. "always the frugal node"; halfway binds (not every task can take the
  fastest node) and still leaves PowerFlow a choice.
- GreenFlow: the same joules priced in grams at the series' mean intensity over the arrivals
  (offset by :data:`CARBON_OFFSET_S`), same series and offset as the metric.
- HiveD: quotas over the two tenants in proportion to their weights, ``floor(nodes x share)``
  node cells each (11 nodes: 5 + 5, one cell left for opportunistic work).
- EDF-DVFS, vGPU fair and ElasticBatch get ``tasks=`` the workload (deadlines, tenants); vGPU
  fair the tenant weights, EDF-DVFS the PowerModel; ElasticBatch derives its per-stage latency
  targets from the deadlines.

Example::

    >>> from simulator.scenarios import paper_cluster, paper_costs, paper_workload
    >>> costs = paper_costs()
    >>> tasks = with_slo(paper_workload(30, 4, seed=1), costs, seed=1)
    >>> sorted({t.tenant for t in tasks}) <= sorted(TENANT_WEIGHTS)
    True
    >>> sorted(policy_settings("hived", paper_cluster(), costs, tasks)["quotas"].values())
    [5, 5]
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Mapping, Sequence

from simulator.carbon import JOULES_PER_KWH, CarbonSeries, grams_co2, synthetic_series
from simulator.energy import PowerModel, energy_report
from simulator.slo import slo_report
from workload.estimates import CostModel
from workload.limits import finite_real
from workload.model import ClusterSpec, Task
from workload.task_attributes import (DEFAULT_DEADLINE_FACTOR, DEFAULT_TENANTS,
                                      with_tenants_and_deadlines)

__all__ = ["TENANT_WEIGHTS", "TENANT_PRIORITIES", "DEADLINE_FACTOR", "CARBON_SERIES_HOURS",
           "CARBON_SERIES_SEED", "CARBON_OFFSET_S", "BUDGET_FRACTION", "PART2_METRICS",
           "POWER_POLICIES", "POWER_SCHEDULERS", "with_slo", "carbon_series", "power_model",
           "power_problem", "energy_budget_j", "policy_settings", "scheduler_settings",
           "run_metrics", "summarise_metric", "same_value", "describe_part2"]

#: Tenants and weights of the zoo's workloads: the module's default (two equal tenants).
TENANT_WEIGHTS: Mapping[str, float] = dict(DEFAULT_TENANTS)
#: ASSUMPTION: tenant-a outranks tenant-b, so GAI's preemption decides something; no other
#: system reads priorities.
TENANT_PRIORITIES: Mapping[str, int] = {"tenant-a": 1}
#: Deadline = this x the task's estimated alone time on the reference node (the module default).
DEADLINE_FACTOR = DEFAULT_DEADLINE_FACTOR
#: The carbon series: GreenFlow's default (a leap year of hours, seed 0), so the metric and
#: GreenFlow's decisions read the same grid. ASSUMPTION (synthetic: no real series ships).
CARBON_SERIES_HOURS = 24 * 366
CARBON_SERIES_SEED = 0
#: Simulation time 0 on the series: 09:00 of its first day, ASSUMPTION (a working day's start).
CARBON_OFFSET_S = 9 * 3600.0
#: Where PowerFlow's / GreenFlow's budget lies between the mean estimated joules of the frugal
#: choice (0) and of MCT's choice (1), ASSUMPTION: halfway binds (tasks cannot all go to the
#: fastest node) without being "always the frugal node".
BUDGET_FRACTION = 0.5
#: Keys each run gains (summarised like the part-1 metrics; None where undefined).
PART2_METRICS = ("energy_per_task_j", "g_co2_per_task", "jain_fairness", "deadline_miss_rate",
                 "jain_share_at_last_arrival")
#: Systems that need a power entry for every GPU model of the cluster.
POWER_POLICIES = ("powerflow", "greenflow")
POWER_SCHEDULERS = ("edf_dvfs",)


def with_slo(tasks: Sequence[Task], costs: CostModel, seed: int) -> list[Task]:
    """The workload with tenants, priorities and deadlines (same ids, arrivals and sizes)."""
    return with_tenants_and_deadlines(tasks, TENANT_WEIGHTS, DEADLINE_FACTOR, seed=seed,
                                      costs=costs, priorities=TENANT_PRIORITIES)


@functools.lru_cache(maxsize=1)
def carbon_series() -> CarbonSeries:
    """The fixed synthetic series of the carbon metric and of GreenFlow (built once a process)."""
    return synthetic_series(CARBON_SERIES_HOURS, seed=CARBON_SERIES_SEED)


def power_model(costs: CostModel) -> tuple[PowerModel | None, str]:
    """The calibration's PowerModel, or (None, why) when its ``power:`` section is unusable."""
    try:
        return PowerModel.from_calibration(costs.calibration), ""
    except ValueError as exc:
        return None, str(exc)


def power_problem(cluster: ClusterSpec, power: PowerModel | None, why: str = "") -> str:
    """"" when every GPU model of ``cluster`` has a power entry; otherwise the reason."""
    if power is None:
        return why or "no power model"
    missing = sorted({g.model for n in cluster.nodes for g in n.gpus} - set(power.gpus))
    return f"no power entry for GPU models {missing}" if missing else ""


def _estimator(cluster: ClusterSpec, costs: CostModel, power: PowerModel):
    from placement.policies.powerflow import PowerFlowPolicy
    return PowerFlowPolicy(cluster, costs, power=power)


def energy_budget_j(cluster: ClusterSpec, costs: CostModel, tasks: Sequence[Task],
                    power: PowerModel, fraction: float = BUDGET_FRACTION) -> float:
    """Joules per task: E_min + ``fraction`` x (E_mct - E_min), the means over ``tasks`` of
    PowerFlow's estimated joules on each task's lowest-energy node and on MCT's choice (least
    estimated alone time; ties: cluster order). See the module docstring for why."""
    if not tasks:
        raise ValueError("energy_budget_j needs at least one task")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) \
            or not (math.isfinite(fraction) and 0 <= fraction <= 1):
        raise ValueError(f"fraction must be a number in [0, 1], got {fraction!r}")
    estimate = _estimator(cluster, costs, power)
    ids = list(cluster.node_ids)
    frugal, fastest = [], []
    for task in tasks:
        mct = min(ids, key=lambda nid: estimate.task_ms(task, nid))
        fastest.append(estimate.energy_j(task, mct))
        frugal.append(min(estimate.energy_j(task, nid) for nid in ids))
    low, high = statistics.fmean(frugal), statistics.fmean(fastest)
    budget = low + fraction * max(0.0, high - low)
    if not (math.isfinite(budget) and budget > 0):
        raise ValueError(f"energy budget {budget!r} is not a finite positive number")
    return budget


def policy_settings(policy: str, cluster: ClusterSpec, costs: CostModel, tasks: Sequence[Task],
                    power: PowerModel | None = None) -> dict:
    """Constructor settings of a part-2 cluster policy for this run ({} for every other one)."""
    if policy in POWER_POLICIES:
        power = power or PowerModel.from_calibration(costs.calibration)
        budget = energy_budget_j(cluster, costs, tasks, power)
        if policy == "powerflow":
            return {"energy_budget_j": budget, "power": power}
        series = carbon_series()
        first = min(t.arrival_s for t in tasks) + CARBON_OFFSET_S
        last = max(t.arrival_s for t in tasks) + CARBON_OFFSET_S
        intensity = series.mean_over(first, last)
        return {"carbon_budget_g": budget / JOULES_PER_KWH * max(intensity, 1e-9),
                "series": series, "offset_s": CARBON_OFFSET_S, "power": power}
    if policy == "hived":
        total = sum(TENANT_WEIGHTS.values())
        nodes = len(cluster.nodes)
        return {"quotas": {name: int(nodes * weight / total)
                           for name, weight in TENANT_WEIGHTS.items()}}
    return {}


def scheduler_settings(scheduler: str, tasks: Sequence[Task],
                       power: PowerModel | None = None) -> dict:
    """Constructor settings of a part-2 node scheduler ({} for every other one)."""
    if scheduler == "edf_dvfs":
        return {"tasks": list(tasks), "max_tasks": max(1, len(tasks)), "power": power}
    if scheduler == "elastic_batch":
        return {"tasks": list(tasks), "max_tasks": max(1, len(tasks))}
    if scheduler == "vgpu_fair":
        return {"tasks": list(tasks), "max_tasks": max(1, len(tasks)),
                "weights": dict(TENANT_WEIGHTS)}
    return {}


def run_metrics(result, cluster: ClusterSpec, costs: CostModel, tasks: Sequence[Task],
                power: PowerModel | None = None, power_why: str = "") -> dict:
    """The part-2 metrics of one finished run (keys :data:`PART2_METRICS`, plus ``part2_notes``
    saying why any is None). ``power`` None with ``power_why``: energy and carbon are None."""
    notes = []
    out = dict.fromkeys(PART2_METRICS)
    problem = power_problem(cluster, power, power_why)
    if problem:
        notes.append(f"energy and carbon not computed: {problem}")
    else:
        energy = energy_report(result, cluster, power)
        per_task = energy.joules_per_completed_task
        out["energy_per_task_j"] = finite_real(per_task)
        if energy.completed:
            carbon = grams_co2(energy.intervals, carbon_series(), CARBON_OFFSET_S)
            out["g_co2_per_task"] = finite_real(carbon.total_g / len(energy.completed))
        else:
            notes.append("no task completed: no energy or carbon per task")
    full = slo_report(result, tasks, costs=costs)
    out["jain_fairness"] = finite_real(full.slowdown_fairness)
    out["deadline_miss_rate"] = finite_real(full.miss_rate)
    alone = {o.task_id: o.alone_s for o in full.outcomes}
    horizon = max(t.arrival_s for t in tasks)
    cut = slo_report(result, tasks, alone_s=alone, horizon_s=horizon)
    out["jain_share_at_last_arrival"] = finite_real(cut.jain_fairness)
    for key in ("jain_fairness", "deadline_miss_rate", "jain_share_at_last_arrival"):
        if out[key] is None:
            notes.append(f"{key} undefined (no completions or no deadlines)")
    out["part2_notes"] = "; ".join(notes)
    return out


def summarise_metric(values: Sequence) -> dict:
    """Mean and 95% Student-t interval of the finite values (None and nan dropped); ``n`` says
    how many; mean None when there are none."""
    from benchmarks.baselines import confidence_interval
    kept = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not kept:
        return {"mean": None, "ci95": [None, None], "n": 0}
    mean, low, high = confidence_interval(kept)
    return {"mean": mean, "ci95": [low, high], "n": len(kept)}


def same_value(a, b) -> bool:
    """Equal, with nan equal to nan (a repeated run's undefined metric is not a difference)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def describe_part2(table_setting: Sequence = ()) -> dict:
    """The part-2 settings, for the result JSON beside the numbers they produced."""
    from simulator.slo import FAIRNESS_BASIS, SLOWDOWN_FAIRNESS_BASIS
    return {"tenant_weights": dict(TENANT_WEIGHTS), "tenant_priorities": dict(TENANT_PRIORITIES),
            "deadline_factor": DEADLINE_FACTOR,
            "carbon_series": f"synthetic_series({CARBON_SERIES_HOURS} h, "
                             f"seed={CARBON_SERIES_SEED}), calibration carbon.synthetic",
            "carbon_offset_s": CARBON_OFFSET_S, "budget_fraction": BUDGET_FRACTION,
            "jain_fairness_basis": SLOWDOWN_FAIRNESS_BASIS,
            "jain_share_at_last_arrival_basis": FAIRNESS_BASIS + ", completions up to the last "
                                                "arrival",
            "energy_rule": "simulator.energy: idle power of every unit over the run's span plus "
                           "dynamic power while busy, every unit at its highest clock, over the "
                           "completed tasks",
            "table_setting": list(table_setting)}
