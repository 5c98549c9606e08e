"""Mystic-style placement: a GPU-capable stage goes to the GPU whose running stages are least
similar to it, the ancestor of IAWP's interference-aware dispatch.

Similarity is the cosine of the stages' public GPU profile vectors (``CostModel.stage(s)
.gpu_profile``, the STDM's GPU metrics), aggregated over the stages a GPU runs now and those this
call has already put there (``aggregate="mean"``, the default, as IAWP's priority rule; or
``"max"``, the worst pair). An idle GPU has similarity 0, so it is preferred; ties go to the
first GPU in unit order. A zero or missing profile has similarity 0 with everything (cosine is
undefined there; we read "no known pressure" as "no interference").

Stages go in arrival order. CPU-only stages, and GPU-capable ones that find no GPU with room
(when ``cpu_fallback=True``, the default), take the first idle CPU core, FCFS. Mystic predicts
interference only; it does not weigh speed, so it never waits for a busy GPU.

Example::

    >>> from workload.model import ComputingUnit, Stage
    >>> units = [ComputingUnit("gpu:0", "gpu", model="k80", running=("face_encoding",), capacity=2),
    ...          ComputingUnit("gpu:1", "gpu", model="k80", running=("frame_difference",),
    ...                        capacity=2)]
    >>> ready = [Stage("t1", "face_recognition", "face_detection", 1000)]
    >>> [a.unit_id for a in MysticScheduler().assign(ready, units, now_s=0.0)]
    ['gpu:1']
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from interference.schedulers._checks import BaseNodeScheduler, can_run, free_slots, ready_order
from workload.estimates import CostModel
from workload.model import Assignment, ComputingUnit, Stage

__all__ = ["MysticScheduler", "cosine"]


def cosine(a: Sequence[float] | None, b: Sequence[float] | None) -> float:
    """Cosine similarity; 0 when either vector is missing or zero."""
    if not a or not b:
        return 0.0
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    if norm == 0.0:
        return 0.0
    return sum(x * y for x, y in zip(a, b)) / norm


class MysticScheduler(BaseNodeScheduler):
    """Least-similar GPU for GPU-capable stages, first idle core for the rest."""

    name = "mystic"

    def __init__(self, costs: CostModel | None = None, seed: int = 0, *,
                 aggregate: str = "mean", cpu_fallback: bool = True) -> None:
        super().__init__(costs, seed)
        if aggregate not in ("mean", "max"):
            raise ValueError(f"aggregate must be 'mean' or 'max', got {aggregate!r}")
        self.aggregate = aggregate
        self.cpu_fallback = cpu_fallback

    def profile(self, stage: str) -> tuple[float, ...] | None:
        try:
            return self.costs.stage(stage).gpu_profile
        except KeyError:  # a stage type the calibration does not know: no profile
            return None

    def similarity(self, stage: str, running: Sequence[str]) -> float:
        """Aggregated cosine similarity of ``stage`` to the stages in ``running`` (0 if none)."""
        if not running:
            return 0.0
        mine = self.profile(stage)
        sims = [cosine(mine, self.profile(other)) for other in running]
        return max(sims) if self.aggregate == "max" else sum(sims) / len(sims)

    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        running = {u.unit_id: list(u.running) for u in units}
        room = {u.unit_id: free_slots(u) for u in units}
        gpus = [u for u in units if u.kind == "gpu"]
        cores = [u for u in units if u.kind == "cpu"]
        out: list[Assignment] = []
        for stage in ready_order(ready):
            open_gpus = [g for g in gpus if room[g.unit_id] > 0 and can_run(stage, g)]
            if open_gpus:
                sims = {g.unit_id: self.similarity(stage.stage, running[g.unit_id])
                        for g in open_gpus}
                gpu = min(open_gpus, key=lambda g: sims[g.unit_id])  # min keeps the first tie
                others = ", ".join(running[gpu.unit_id]) or "nothing"
                out.append(Assignment(stage, gpu.unit_id,
                                      f"Mystic: least similar gpu, {self.aggregate} cosine "
                                      f"{sims[gpu.unit_id]:.2f} to {others} -> {gpu.unit_id}"))
                running[gpu.unit_id].append(stage.stage)
                room[gpu.unit_id] -= 1
                continue
            if stage.gpu_capable and not self.cpu_fallback:
                continue
            core = next((c for c in cores if room[c.unit_id] > 0), None)
            if core is None:
                continue
            why = "CPU only" if not stage.gpu_capable else "no gpu with room"
            out.append(Assignment(stage, core.unit_id,
                                  f"Mystic: {why}, first idle core -> {core.unit_id}"))
            room[core.unit_id] -= 1
        return out
