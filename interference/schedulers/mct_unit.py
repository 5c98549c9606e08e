"""MCT at node level: minimum (estimated) completion time per stage, the node half of the paper's
ETC pair (MCT node, MCT unit).

For each ready stage in arrival order, every unit that may run it is scored by its estimated
completion time ``max(now, unit.free_at_s) + unit_ms / 1000`` (seconds; ``unit_ms`` from the
public :class:`~workload.estimates.CostModel`, never the simulator's truth). The stage starts on
the best unit only if that unit has room now; otherwise it waits for that unit (a busy fast GPU
can beat an idle slow core). Ties go to the first unit in the caller's order.

Choices (settings):

- ``wait_for_busy=True``: units without room are candidates, so a stage may wait for them;
  ``False`` restricts the choice to units with room now (greedy, never waits while a unit is free).
- ``reserve_waiting=True``: a stage that waits still books its unit in this call's local view
  (its free time moves on by the stage's estimate), so the next stages see the queue it forms,
  as list-scheduling MCT does; ``False`` books only stages that start.
- A GPU with room that already co-runs a stage is scored from its ``free_at_s`` as if the new
  stage ran after the current ones: the estimates hold no co-location model, and sharing a GPU
  takes about as long as running back to back.

The stages left waiting in the last call, and the unit each waits for, are in
:attr:`MctUnitScheduler.last_waiting`.

Example::

    >>> from workload.model import ComputingUnit, Stage
    >>> units = [ComputingUnit("cpu:0", "cpu"),
    ...          ComputingUnit("gpu:0", "gpu", model="k80", running=("face_detection",),
    ...                        free_at_s=0.1)]
    >>> ready = [Stage("t1", "face_recognition", "face_encoding", 76_800_000)]
    >>> MctUnitScheduler().assign(ready, units, now_s=0.0)   # the GPU frees soon enough: wait
    []
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from interference.schedulers._checks import (BaseNodeScheduler, can_run, free_slots, ready_order,
                                             stage_key)
from workload.estimates import CostModel
from workload.model import Assignment, ComputingUnit, Stage

__all__ = ["MctUnitScheduler", "earliest_finish_placement"]


def earliest_finish_placement(
        ordered: Sequence[Stage], units: Sequence[ComputingUnit], now_s: float,
        costs: CostModel, *, wait_for_busy: bool, reserve_waiting: bool,
        reason: Callable[[Stage, ComputingUnit, float, float, int], str],
) -> tuple[list[Assignment], dict[tuple[str, str], str]]:
    """Place ``ordered`` stages one by one on their earliest-finishing unit (insertion-free).

    ``reason(stage, unit, start_s, finish_s, candidates)`` words each assignment. Returns the
    assignments and, for stages left waiting, the unit each waits for. Shared by MCT and HEFT,
    which differ only in the order of the stages.
    """
    free_at = {u.unit_id: max(now_s, u.free_at_s) for u in units}
    room = {u.unit_id: free_slots(u) for u in units}
    out: list[Assignment] = []
    waiting: dict[tuple[str, str], str] = {}
    for stage in ordered:
        best: tuple[float, ComputingUnit] | None = None
        candidates = 0
        for unit in units:
            if not can_run(stage, unit) or (not wait_for_busy and room[unit.unit_id] == 0):
                continue
            ms = costs.unit_ms(stage.stage, stage.input_size, unit)
            if ms is None:
                continue
            candidates += 1
            finish = free_at[unit.unit_id] + ms / 1000.0
            if best is None or finish < best[0]:  # strict: ties keep the earlier unit
                best = (finish, unit)
        if best is None:
            continue  # nothing here can run it (a CPU-only stage on a GPU-only view)
        finish, unit = best
        start = free_at[unit.unit_id]
        if room[unit.unit_id] > 0:
            room[unit.unit_id] -= 1
            free_at[unit.unit_id] = finish
            out.append(Assignment(stage, unit.unit_id,
                                  reason(stage, unit, start, finish, candidates)))
        else:
            waiting[stage_key(stage)] = unit.unit_id
            if reserve_waiting:
                free_at[unit.unit_id] = finish
    return out, waiting


class MctUnitScheduler(BaseNodeScheduler):
    """Minimum completion time: each stage to the unit where it would finish first."""

    name = "mct"

    def __init__(self, costs: CostModel | None = None, seed: int = 0, *,
                 wait_for_busy: bool = True, reserve_waiting: bool = True) -> None:
        super().__init__(costs, seed)
        self.wait_for_busy = wait_for_busy
        self.reserve_waiting = reserve_waiting
        self.last_waiting: dict[tuple[str, str], str] = {}

    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        def reason(stage: Stage, unit: ComputingUnit, start: float, finish: float,
                   candidates: int) -> str:
            return (f"MCT: earliest est. completion {finish:.3f}s (start {start:.3f}s + "
                    f"{1000 * (finish - start):.1f} ms) of {candidates} units -> {unit.unit_id}")

        out, self.last_waiting = earliest_finish_placement(
            ready_order(ready), units, now_s, self.costs, wait_for_busy=self.wait_for_busy,
            reserve_waiting=self.reserve_waiting, reason=reason)
        return out
