"""HEFT adapted to streaming stages on one node.

Each ready stage gets HEFT's upward rank within its application's DAG
(:data:`workload.catalog.APPLICATIONS`)::

    rank(s) = mean_ms(s) + max(rank(t) for t in successors(s), default 0)

where ``successors(s)`` are the stages of the same application that list ``s`` in their deps,
and ``mean_ms(s)`` is the mean estimated time of ``s`` over the node's unit *kinds*: the
distinct (cpu, speed) and (gpu, model) types among ``units`` that can run it, each counted once
(so six identical cores weigh as one kind against the GPU). Communication costs are zero: the
stages of a task share its input on one node. All times are the public estimates, for the
stage's own ``input_size`` (a task's stages share its input size).

Ready stages are then scheduled by decreasing rank (ties: arrival order), each to the unit with
the earliest estimated finish time ``max(now, free_at_s) + unit_ms`` (insertion-free), started
only if that unit has room now; otherwise the stage waits for it. This is the MCT placement of
:mod:`interference.schedulers.mct_unit` with HEFT's order; the settings ``wait_for_busy`` and
``reserve_waiting`` mean the same there.

Example::

    >>> from workload.model import ComputingUnit, Stage
    >>> units = [ComputingUnit("gpu:0", "gpu", model="k80")]
    >>> ready = [Stage("t1", "intrusion_detection", "frame_difference", 1000, ready_at_s=0.0),
    ...          Stage("t1", "intrusion_detection", "gaussian_pyramid", 1000, ready_at_s=0.5)]
    >>> [a.stage.stage for a in HeftScheduler().assign(ready, units, now_s=1.0)]
    ['gaussian_pyramid']
"""

from __future__ import annotations

from collections.abc import Sequence

from interference.schedulers._checks import ready_order
from interference.schedulers.mct_unit import MctUnitScheduler, earliest_finish_placement
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import Assignment, ComputingUnit, Stage

__all__ = ["RANK_CACHE_ENTRIES", "HeftScheduler", "successors"]


def successors(app_id: str, stage: str) -> tuple[str, ...]:
    """Stages of ``app_id`` that need ``stage``'s output (none for an unknown application)."""
    app = APPLICATIONS.get(app_id)
    if app is None:
        return ()
    return tuple(s.name for s in app.stages if stage in s.deps)


def _unit_kinds(units: Sequence[ComputingUnit]) -> list[ComputingUnit]:
    """One representative unit per distinct kind, in unit order."""
    kinds: dict[tuple, ComputingUnit] = {}
    for unit in units:
        signature = ("cpu", unit.speed) if unit.kind == "cpu" else \
            ("gpu", unit.model, unit.speed)
        kinds.setdefault(signature, unit)
    return list(kinds.values())


def _kinds_signature(units: Sequence[ComputingUnit]) -> tuple:
    return tuple((u.kind, u.model, u.speed) for u in _unit_kinds(units))


#: Most upward ranks remembered per scheduler (cleared whole when full; a rank is cheap to
#: recompute, so a bound keeps memory flat on a long stream of distinct input sizes).
RANK_CACHE_ENTRIES = 50_000


class HeftScheduler(MctUnitScheduler):
    """Decreasing upward rank, each stage to its earliest-finishing unit: MCT's placement and
    settings (``wait_for_busy``, ``reserve_waiting``), in rank order instead of arrival order."""

    name = "heft"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # (app, stage, input size, unit kinds) -> rank. Only for a CostModel, whose estimates
        # are fixed once built (it caches its own speeds the same way); a stage waits through
        # many assign() calls, and recomputing its rank each time was most of a saturated run.
        self._ranks: dict[tuple, float] = {}

    def mean_ms(self, stage: str, input_size: int, units: Sequence[ComputingUnit]) -> float:
        """Mean estimated ms of ``stage`` over the unit kinds that can run it."""
        times = [t for t in (self.costs.unit_ms(stage, input_size, u) for u in _unit_kinds(units))
                 if t is not None]
        if not times:
            # no unit here can run it (e.g. a CPU-only stage and a GPU-only view): the
            # reference core's time keeps the rank finite and comparable
            return self.costs.cpu_ms(stage, input_size)
        return sum(times) / len(times)

    def upward_rank(self, stage: Stage, units: Sequence[ComputingUnit]) -> float:
        """HEFT's upward rank of ``stage`` (ms) on a node with these units."""
        return self._ranked(stage, units, _kinds_signature(units))

    def _ranked(self, stage: Stage, units: Sequence[ComputingUnit], kinds: tuple) -> float:
        if not isinstance(self.costs, CostModel):  # estimates that learn: no memory across calls
            return self._upward_rank(stage, units)
        key = (stage.app_id, stage.stage, stage.input_size, kinds)
        rank = self._ranks.get(key)
        if rank is None:
            if len(self._ranks) >= RANK_CACHE_ENTRIES:
                self._ranks.clear()
            rank = self._ranks[key] = self._upward_rank(stage, units)
        return rank

    def _upward_rank(self, stage: Stage, units: Sequence[ComputingUnit]) -> float:
        memo: dict[str, float] = {}

        def rank(name: str) -> float:
            if name not in memo:
                after = max((rank(t) for t in successors(stage.app_id, name)), default=0.0)
                memo[name] = self.mean_ms(name, stage.input_size, units) + after
            return memo[name]

        return rank(stage.stage)

    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        kinds = _kinds_signature(units)
        ranks = {id(s): self._ranked(s, units, kinds) for s in ready}
        # stable sort on arrival order: equal ranks keep arrival order
        ordered = sorted(ready_order(ready), key=lambda s: -ranks[id(s)])

        def reason(stage: Stage, unit: ComputingUnit, start: float, finish: float,
                   candidates: int) -> str:
            return (f"HEFT: upward rank {ranks[id(stage)]:.1f} ms, earliest est. finish "
                    f"{finish:.3f}s of {candidates} units -> {unit.unit_id}")

        out, self.last_waiting = earliest_finish_placement(
            ordered, units, now_s, self.costs, wait_for_busy=self.wait_for_busy,
            reserve_waiting=self.reserve_waiting, reason=reason)
        return out
