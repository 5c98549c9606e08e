"""The rules every node scheduler obeys, one checker for them, and the small helpers that apply
them (ready order, free slots, who may run what).

Rules (checked by :func:`validate_assignments`):

1. only stages from ``ready`` are assigned, each at most once;
2. only units from ``units`` are used;
3. a unit receives at most ``capacity - len(running)`` new stages (a CPU core holds one stage,
   a GPU co-runs up to its capacity);
4. a stage with ``gpu_capable=False`` never goes to a GPU;
5. every assignment says why, in a short human reason.

Example::

    >>> from workload.model import Assignment, ComputingUnit, Stage
    >>> core = ComputingUnit("cpu:0", "cpu")
    >>> stage = Stage("t1", "intrusion_detection", "tracking", 10, gpu_capable=False)
    >>> validate_assignments([Assignment(stage, "cpu:0", "FCFS: first core")], [stage], [core])
    >>> free_slots(core)
    1
"""

from __future__ import annotations

from collections.abc import Sequence

from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import Assignment, ComputingUnit, NodeScheduler, Stage

__all__ = ["validate_assignments", "stage_key", "ready_order", "free_slots", "can_run",
           "BaseNodeScheduler"]


def stage_key(stage: Stage) -> tuple[str, str]:
    """A stage instance is named by its task and its stage type (a task runs each type once)."""
    return (stage.task_id, stage.stage)


#: (app_id, stage) -> position in the app's topological order; built once (on the hot path).
_POSITIONS = {(app.app_id, s.name): i for app in APPLICATIONS.values()
              for i, s in enumerate(app.stages)}


def _stage_position(stage: Stage) -> int:
    """Position of the stage in its application's topological order (unknown: after all)."""
    return _POSITIONS.get((stage.app_id, stage.stage), len(_POSITIONS))


def ready_order(ready: Sequence[Stage]) -> list[Stage]:
    """Ready stages in arrival order: ready_at_s, then task_id, then the stage's position in its
    DAG; the sort is stable, so anything still tied keeps the caller's order."""
    return sorted(ready, key=lambda s: (s.ready_at_s, s.task_id, _stage_position(s)))


def free_slots(unit: ComputingUnit) -> int:
    """How many new stages the unit may receive now."""
    return max(0, unit.capacity - len(unit.running))


def can_run(stage: Stage, unit: ComputingUnit) -> bool:
    """CPU cores run every stage; GPUs only the GPU-capable ones."""
    return unit.kind == "cpu" or stage.gpu_capable


def validate_assignments(assignments: Sequence[Assignment], ready: Sequence[Stage],
                         units: Sequence[ComputingUnit]) -> None:
    """Raise ``ValueError`` naming the first broken rule; return None when all hold."""
    ready_keys = {stage_key(s) for s in ready}
    by_id = {u.unit_id: u for u in units}
    seen: set[tuple[str, str]] = set()
    taken: dict[str, int] = {}
    for a in assignments:
        key = stage_key(a.stage)
        if key not in ready_keys:
            raise ValueError(f"{key} was assigned but is not among the ready stages")
        if key in seen:
            raise ValueError(f"{key} was assigned twice")
        seen.add(key)
        unit = by_id.get(a.unit_id)
        if unit is None:
            raise ValueError(f"{key} was assigned to unknown unit {a.unit_id!r}; "
                             f"units are {sorted(by_id)}")
        if not can_run(a.stage, unit):
            raise ValueError(f"CPU-only stage {key} was assigned to GPU {a.unit_id}")
        taken[a.unit_id] = taken.get(a.unit_id, 0) + 1
        if taken[a.unit_id] > free_slots(unit):
            raise ValueError(f"{a.unit_id} got {taken[a.unit_id]} new stages but has room for "
                             f"{free_slots(unit)} (capacity {unit.capacity}, running "
                             f"{list(unit.running)})")
        if not a.reason.strip():
            raise ValueError(f"assignment of {key} to {a.unit_id} gives no reason")


class BaseNodeScheduler(NodeScheduler):
    """Shared construction: ``Scheduler(costs=None, seed=0, **settings)``.

    Fixed rules are deterministic; ``seed`` is kept so every scheduler has the same constructor.
    The cost model is built on first use, so schedulers that never estimate (FCFS) never load
    the calibration. Unknown settings raise ``TypeError`` in the subclass constructor.
    """

    def __init__(self, costs: CostModel | None = None, seed: int = 0) -> None:
        self._costs = costs
        self.seed = seed

    @property
    def costs(self) -> CostModel:
        if self._costs is None:
            self._costs = CostModel()
        return self._costs

    def use_costs(self, costs) -> None:
        """Estimate with ``costs`` from now on: anything with ``CostModel``'s ``stage``,
        ``cpu_ms``, ``gpu_ms``, ``unit_ms`` and ``gpu_memory_mb``, e.g. an executor's measured
        times (:class:`interference.executor.stage_costs.MeasuredStageCosts`) for stages the
        calibration does not know."""
        self._costs = costs

    def __repr__(self) -> str:
        return f"{type(self).__name__}(seed={self.seed})"
