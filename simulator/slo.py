"""Service-level metrics of one run, computed post hoc from its event log and task list.

Per task: its latency (arrival -> its ``complete`` event) against its deadline
(``Task.deadline_s``, relative to arrival) and its slowdown (latency over its alone time). Per
run: the deadline miss rate, per-tenant throughput, miss rate and mean slowdown, and Jain's
fairness index across tenants. Nothing here changes a run: tenants and deadlines are off by
default (``Task.tenant == ""``, ``deadline_s is None``) and a run without them reports one
tenant ``""``, fairness 1 and a miss rate of nan (no task had a deadline).

Conventions (each a choice, stated once here):

- **Met at the boundary.** A task meets its deadline when latency <= deadline_s (+
  :data:`DEADLINE_TOLERANCE_S`, the event log's time resolution); a task with a deadline that
  never completed counts as missed.
- **Fairness basis** (:data:`FAIRNESS_BASIS`). Jain et al. (1984) define
  J = (sum x)^2 / (n sum x^2) over x_i = a tenant's allocation *normalised by its fair
  allocation*, so tenants that ask for different amounts are not called unequal for asking
  differently. Our x_i = (tenant i's share of completed tasks) / (its share of submitted
  tasks): 1 when a tenant got what it asked for in proportion, so J = 1 when every tenant got
  its proportion, whatever their sizes, and J = 1/n when one tenant got everything. Raw
  throughput as x would call a run unfair just because one tenant submits more.
- **Horizon.** The simulator runs every task to completion, so over the whole log each
  tenant's completed share *is* its submitted share and J is 1 by construction. Pass
  ``horizon_s`` (e.g. the last arrival: who was served while work kept coming) to count only
  completions up to then; a task completing later counts as not completed (and, with a
  deadline, as missed).
- **Slowdown** = latency / alone time, the finish-time-fairness ratio of Themis (Mahajan et al.,
  NSDI 2020) per task; the alone time defaults to the public estimate on the reference node
  (``workload.task_attributes.reference_alone_s``), so a slowdown under 1 only means a node
  faster than the reference; compare tenants, not absolute values. ``slowdown_fairness`` is
  Jain's index over x_i = 1 / tenant i's mean slowdown (0 for a tenant with nothing
  completed): 1 when every tenant is slowed down alike, the Themis notion of fair.
- **Throughput** per tenant: completed tasks x 60 / the run's span (first arrival -> last
  completion, the span of ``Metrics.throughput_per_min``), so tenants' throughputs add up to it.

Example::

    >>> from simulator.engine import EventRecord
    >>> from workload.model import Task
    >>> tasks = [Task("a1", "video_synopsis", 1, 0.0, tenant="a", deadline_s=2.0),
    ...          Task("b1", "video_synopsis", 1, 0.0, tenant="b", deadline_s=2.0)]
    >>> report = slo_report([EventRecord(2.0, "complete", "a1")], tasks, {"a1": 1.0, "b1": 1.0})
    >>> report.miss_rate, report.jain_fairness   # b1 never completed: missed; a got everything
    (0.5, 0.5)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from simulator.engine import EventRecord, SimulationResult
from workload.estimates import CostModel
from workload.model import Task
from workload.task_attributes import reference_alone_s, reference_node, slo_of_task

__all__ = ["DEADLINE_TOLERANCE_S", "FAIRNESS_BASIS", "SLOWDOWN_FAIRNESS_BASIS", "TaskOutcome", "TenantStats", "SloReport",
           "jain_index", "task_outcomes", "slo_report"]

#: A task whose latency exceeds its deadline by at most this still meets it: the engine rounds
#: event times to 1e-9 s (``EventQueue.log (simulator/events.py)``), so a finer difference is rounding, not lateness.
DEADLINE_TOLERANCE_S = 1e-9

#: What Jain's index is computed over (see the module docstring for why).
FAIRNESS_BASIS = "completed-task share / submitted-task share, per tenant"
#: What the second index, ``slowdown_fairness``, is computed over.
SLOWDOWN_FAIRNESS_BASIS = "1 / mean slowdown, per tenant (0: nothing completed)"


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all equal, 1/n when one has all.

    nan when every value is 0 (nobody got anything: fairness is undefined).

    >>> jain_index([1.0, 1.0]), jain_index([2.0, 0.0])
    (1.0, 0.5)
    """
    values = list(values)
    if not values:
        raise ValueError("Jain's index needs at least one value")
    for x in values:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) \
                or x < 0:
            raise ValueError(f"Jain's index takes finite numbers >= 0, got {x!r}")
    squares = sum(x * x for x in values)
    if squares == 0:
        return math.nan
    return sum(values) ** 2 / (len(values) * squares)


@dataclass(frozen=True)
class TaskOutcome:
    """One task's fate: completion time (None: never completed), latency, deadline, slowdown."""

    task_id: str
    tenant: str
    arrival_s: float
    completed_s: float | None
    deadline_s: float | None
    alone_s: float | None

    @property
    def latency_s(self) -> float | None:
        return None if self.completed_s is None else self.completed_s - self.arrival_s

    @property
    def missed(self) -> bool | None:
        """None without a deadline; True when never completed or later than the deadline."""
        if self.deadline_s is None:
            return None
        latency = self.latency_s
        return latency is None or latency > self.deadline_s + DEADLINE_TOLERANCE_S

    @property
    def slowdown(self) -> float | None:
        latency = self.latency_s
        return None if latency is None or self.alone_s is None else latency / self.alone_s

    def as_dict(self) -> dict:
        return dict(asdict(self), latency_s=self.latency_s, missed=self.missed,
                    slowdown=self.slowdown)


@dataclass(frozen=True)
class TenantStats:
    """One tenant's totals (rates and means are nan where nothing defines them)."""

    tenant: str
    tasks: int
    completed: int
    with_deadline: int
    missed: int
    miss_rate: float            # missed / with_deadline
    demand_share: float         # its share of submitted tasks
    throughput_share: float     # its share of completed tasks (0 when none completed)
    throughput_per_min: float   # completed x 60 / the run's span
    mean_slowdown: float        # over its completed tasks


@dataclass(frozen=True)
class SloReport:
    """The run's deadline and fairness numbers; ``as_dict()`` for JSON-like output."""

    tasks: int
    completed: int
    with_deadline: int
    missed: int
    miss_rate: float            # missed / with_deadline; nan when no task had a deadline
    mean_slowdown: float        # over all completed tasks
    jain_fairness: float        # across tenants, on FAIRNESS_BASIS
    slowdown_fairness: float    # across tenants, on SLOWDOWN_FAIRNESS_BASIS
    span_s: float               # first arrival -> last completion (0 when none completed)
    horizon_s: float | None     # completions after this were not counted (None: all were)
    per_tenant: dict[str, TenantStats] = field(default_factory=dict)
    outcomes: tuple[TaskOutcome, ...] = ()
    fairness_basis: str = FAIRNESS_BASIS
    slowdown_fairness_basis: str = SLOWDOWN_FAIRNESS_BASIS

    def as_dict(self, include_tasks: bool = True) -> dict:
        """Plain dicts; ``include_tasks=False`` leaves out the per-task outcomes."""
        out = {k: v for k, v in asdict(self).items() if k != "outcomes"}
        if include_tasks:
            out["outcomes"] = [o.as_dict() for o in self.outcomes]
        return out


def _events_of(result: SimulationResult | Iterable[EventRecord]) -> list[EventRecord]:
    if isinstance(result, SimulationResult):
        completed = getattr(result.metrics, "completed", 0)
        if completed and not result.events:
            raise ValueError("the run has no event log (SimulationConfig.record_events=False): "
                             "latencies cannot be read back")
        return list(result.events)
    return list(result)


def task_outcomes(result: SimulationResult | Iterable[EventRecord], tasks: Sequence[Task],
                  alone_s: Mapping[str, float] | None = None,
                  horizon_s: float | None = None) -> list[TaskOutcome]:
    """Each task's outcome, in task order, from the ``complete`` events of ``result`` (a
    :class:`SimulationResult` or its events). ``alone_s``: task id -> alone time (s) for
    slowdowns (None: no slowdowns); ``horizon_s``: completions after it are ignored (None:
    none are). Raises ValueError for a task list that does not fit the log.
    """
    if horizon_s is not None and (isinstance(horizon_s, bool)
                                  or not isinstance(horizon_s, (int, float))
                                  or not math.isfinite(horizon_s)):
        raise ValueError(f"horizon_s must be a finite number of seconds or None, "
                         f"got {horizon_s!r}")
    by_id: dict[str, Task] = {}
    for task in tasks:
        if not isinstance(task, Task):
            raise ValueError(f"tasks must be Task objects, got {type(task).__name__}")
        if task.task_id in by_id:
            raise ValueError(f"task id {task.task_id!r} appears twice in the task list")
        if not math.isfinite(task.arrival_s):
            raise ValueError(f"task {task.task_id!r}: arrival_s must be finite")
        slo_of_task(task)  # checks tenant, deadline_s and priority; raises ValueError
        by_id[task.task_id] = task
    completed: dict[str, float] = {}
    for event in _events_of(result):
        if event.kind != "complete":
            continue
        task = by_id.get(event.task_id)
        if task is None:
            raise ValueError(f"the log completes {event.task_id!r}, which is not in the task list")
        if event.task_id in completed:
            raise ValueError(f"the log completes {event.task_id!r} twice")
        if not math.isfinite(event.time) or event.time < task.arrival_s - DEADLINE_TOLERANCE_S:
            raise ValueError(f"task {event.task_id!r} completes at {event.time!r}, before its "
                             f"arrival {task.arrival_s!r} or at no finite time")
        completed[event.task_id] = event.time
    if horizon_s is not None:  # later completions did not happen within the horizon
        completed = {tid: t for tid, t in completed.items() if t <= horizon_s}
    out = []
    for task in by_id.values():
        alone = None
        if alone_s is not None:
            if task.task_id not in alone_s:
                raise ValueError(f"no alone time for task {task.task_id!r}")
            alone = alone_s[task.task_id]
            if isinstance(alone, bool) or not isinstance(alone, (int, float)) \
                    or not math.isfinite(alone) or alone <= 0:
                raise ValueError(f"alone time of {task.task_id!r} must be finite and positive, "
                                 f"got {alone!r}")
        out.append(TaskOutcome(task.task_id, task.tenant, task.arrival_s,
                               completed.get(task.task_id), task.deadline_s, alone))
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _tenant_stats(tenant: str, mine: list[TaskOutcome], total_tasks: int, total_done: int,
                  span_s: float) -> TenantStats:
    done = [o for o in mine if o.completed_s is not None]
    timed = [o for o in mine if o.deadline_s is not None]
    missed = sum(1 for o in timed if o.missed)
    return TenantStats(
        tenant=tenant, tasks=len(mine), completed=len(done), with_deadline=len(timed),
        missed=missed, miss_rate=missed / len(timed) if timed else math.nan,
        demand_share=len(mine) / total_tasks,
        throughput_share=len(done) / total_done if total_done else 0.0,
        throughput_per_min=60.0 * len(done) / span_s if span_s > 0 else 0.0,
        mean_slowdown=_mean([o.slowdown for o in done if o.slowdown is not None]))


def slo_report(result: SimulationResult | Iterable[EventRecord], tasks: Sequence[Task],
               alone_s: Mapping[str, float] | None = None,
               costs: CostModel | None = None, horizon_s: float | None = None) -> SloReport:
    """Deadline misses, per-tenant throughput and slowdown, and Jain's index of one run.

    ``tasks``: the run's task list (with their tenants and deadlines); ``alone_s``: task id ->
    alone time (s) for slowdowns; None: each task's estimate on the reference node from
    ``costs`` (None: ``CostModel()``; pass the run's own, e.g. ``paper_costs()``);
    ``horizon_s``: count only completions up to this time (None: all; see the module docstring:
    without it, a run to completion has ``jain_fairness == 1`` by construction).
    """
    tasks = list(tasks)
    if not tasks:
        raise ValueError("an SLO report needs at least one task")
    if alone_s is None:
        costs = costs or CostModel()
        node = reference_node(costs)
        alone_s = {t.task_id: reference_alone_s(t, costs, node) for t in tasks}
    outcomes = task_outcomes(result, tasks, alone_s, horizon_s)
    done = [o for o in outcomes if o.completed_s is not None]
    first = min(o.arrival_s for o in outcomes)
    span = max(0.0, max(o.completed_s for o in done) - first) if done else 0.0
    by_tenant: dict[str, list[TaskOutcome]] = {}
    for outcome in outcomes:
        by_tenant.setdefault(outcome.tenant, []).append(outcome)
    per_tenant = {name: _tenant_stats(name, mine, len(outcomes), len(done), span)
                  for name, mine in sorted(by_tenant.items())}
    # x_i = throughput share / demand share (FAIRNESS_BASIS); demand shares are > 0 by
    # construction (a tenant exists only through its tasks).
    fairness = jain_index([s.throughput_share / s.demand_share for s in per_tenant.values()])
    slowdowns = [0.0 if math.isnan(s.mean_slowdown) else 1.0 / s.mean_slowdown
                 for s in per_tenant.values()]
    timed = [o for o in outcomes if o.deadline_s is not None]
    missed = sum(1 for o in timed if o.missed)
    return SloReport(
        tasks=len(outcomes), completed=len(done), with_deadline=len(timed), missed=missed,
        miss_rate=missed / len(timed) if timed else math.nan,
        mean_slowdown=_mean([o.slowdown for o in done if o.slowdown is not None]),
        jain_fairness=fairness, slowdown_fairness=jain_index(slowdowns), span_s=span,
        horizon_s=horizon_s, per_tenant=per_tenant, outcomes=tuple(outcomes))
