"""PATS (performance-aware task scheduling), the node half of the paper's PATS pair
(MCT node, PATS).

The paper's rule: ready stages are sorted by estimated GPU-over-CPU speedup; an idle GPU takes
the highest, an idle CPU core the lowest. Here:

- speedup = ``cpu_ms`` on the node's fastest core / the best ``gpu_ms`` over the node's GPU
  models (every GPU in ``units``, busy or not: the speedup is a property of the node, not of the
  instant). CPU-only stages have speedup 0. On a node without GPUs the calibration's reference
  speedup is used, so the order is still meaningful for the cores.
- Idle means nothing running (``running == ()``): PATS does not co-run, whatever a GPU's
  capacity. Idle GPUs are served first, in unit order, each taking the highest-speedup
  GPU-capable stage left; then idle cores, in unit order, each take the lowest-speedup stage
  left. Ties: arrival order. Stages left over wait for the next call.

Example::

    >>> from workload.model import ComputingUnit, Stage
    >>> units = [ComputingUnit("cpu:0", "cpu"), ComputingUnit("gpu:0", "gpu", model="k80")]
    >>> ready = [Stage("t1", "face_recognition", "face_compare", 1000),
    ...          Stage("t2", "face_recognition", "face_detection", 1000)]
    >>> [(a.stage.stage, a.unit_id) for a in PatsScheduler().assign(ready, units, now_s=0.0)]
    [('face_detection', 'gpu:0'), ('face_compare', 'cpu:0')]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from interference.schedulers._checks import BaseNodeScheduler, can_run, ready_order
from workload.estimates import CostModel
from workload.model import Assignment, ComputingUnit, Stage

__all__ = ["PatsScheduler"]


class PatsScheduler(BaseNodeScheduler):
    """Highest predicted speedup to an idle GPU, lowest to an idle core."""

    name = "pats"

    def __init__(self, costs: CostModel | None = None, seed: int = 0) -> None:
        super().__init__(costs, seed)

    def speedup(self, stage: Stage, units: Sequence[ComputingUnit]) -> float:
        """Predicted GPU-over-CPU speedup of ``stage`` on a node with these units."""
        if not stage.gpu_capable:
            return 0.0
        cost = self.costs.stage(stage.stage)
        if cost.gpu_speedup is None:
            return 0.0
        cpu_speed = max((u.speed for u in units if u.kind == "cpu"), default=1.0)
        cpu = self.costs.cpu_ms(stage.stage, stage.input_size, cpu_speed)
        kinds = dict.fromkeys((u.model, u.speed) for u in units if u.kind == "gpu")
        gpu_times = [t for t in (self.costs.gpu_ms(stage.stage, stage.input_size, m, speed)
                                 for m, speed in kinds) if t is not None]
        if not gpu_times:
            return cost.gpu_speedup / cpu_speed  # reference GPU vs this node's core
        best = min(gpu_times)
        if best <= 0.0:  # a zero-size input: both times vanish; no GPU gain to speak of
            return math.inf if cpu > 0.0 else 1.0
        return cpu / best

    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        order = ready_order(ready)
        score = {id(s): self.speedup(s, units) for s in order}
        index = {id(s): i for i, s in enumerate(order)}
        left = list(order)
        out: list[Assignment] = []
        idle = [u for u in units if not u.running and u.capacity >= 1]
        for gpu in (u for u in idle if u.kind == "gpu"):
            fits = [s for s in left if can_run(s, gpu)]
            if not fits:
                break
            stage = min(fits, key=lambda s: (-score[id(s)], index[id(s)]))
            left.remove(stage)
            out.append(Assignment(stage, gpu.unit_id,
                                  f"PATS: highest predicted speedup {score[id(stage)]:.1f} "
                                  f"-> idle {gpu.unit_id}"))
        for core in (u for u in idle if u.kind == "cpu"):
            if not left:
                break
            stage = min(left, key=lambda s: (score[id(s)], index[id(s)]))
            left.remove(stage)
            tag = " (CPU only)" if not stage.gpu_capable else ""
            out.append(Assignment(stage, core.unit_id,
                                  f"PATS: lowest predicted speedup {score[id(stage)]:.1f}{tag} "
                                  f"-> idle {core.unit_id}"))
        return out
