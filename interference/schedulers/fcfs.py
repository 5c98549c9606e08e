"""FCFS: first come, first served, first fit. The default node scheduler a caller passes, and the
node half of the paper's Random pair (random node, FCFS).

Ready stages go in arrival order (ready_at_s, then task_id, then DAG position), each to the first
unit (in the caller's unit order) that has room and may run it. With ``prefer_gpu=True`` (the
default) a GPU-capable stage first looks for a GPU with room and falls back to a CPU core; with
``prefer_gpu=False`` it takes the first unit in order, whatever its kind. First fit is literal: a
GPU with capacity 2 receives a second stage before the next GPU is tried, as slot filling does.
No cost estimates are used.

Example::

    >>> from workload.model import ComputingUnit, Stage
    >>> units = [ComputingUnit("cpu:0", "cpu"), ComputingUnit("gpu:0", "gpu", model="k80")]
    >>> ready = [Stage("t1", "face_recognition", "face_detection", 1000)]
    >>> [(a.stage.stage, a.unit_id) for a in FcfsScheduler().assign(ready, units, now_s=0.0)]
    [('face_detection', 'gpu:0')]
"""

from __future__ import annotations

from collections.abc import Sequence

from interference.schedulers._checks import BaseNodeScheduler, can_run, free_slots, ready_order
from workload.estimates import CostModel
from workload.model import Assignment, ComputingUnit, Stage

__all__ = ["FcfsScheduler"]


class FcfsScheduler(BaseNodeScheduler):
    """First come, first served onto the first unit with room."""

    name = "fcfs"

    def __init__(self, costs: CostModel | None = None, seed: int = 0, *,
                 prefer_gpu: bool = True) -> None:
        super().__init__(costs, seed)
        self.prefer_gpu = prefer_gpu

    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        room = {u.unit_id: free_slots(u) for u in units}
        out: list[Assignment] = []
        for stage in ready_order(ready):
            if not any(room.values()):
                break
            candidates = [u for u in units if room[u.unit_id] > 0 and can_run(stage, u)]
            if self.prefer_gpu and stage.gpu_capable:
                # GPUs first: the accelerator is why the stage is GPU-capable at all
                gpus = [u for u in candidates if u.kind == "gpu"]
                candidates = gpus or candidates
            if not candidates:
                continue  # e.g. a CPU-only stage while every core is busy: it waits
            unit = candidates[0]
            room[unit.unit_id] -= 1
            if not stage.gpu_capable:
                what = "CPU only, first core with room"
            elif not self.prefer_gpu:
                what = "first unit with room"
            elif unit.kind == "gpu":
                what = "first gpu with room"
            else:
                what = "no gpu with room, first core"
            out.append(Assignment(stage, unit.unit_id,
                                  f"FCFS: ready at {stage.ready_at_s:.2f}s, {what} "
                                  f"-> {unit.unit_id}"))
        return out
