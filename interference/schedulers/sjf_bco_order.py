"""SJF-BCO at node level: the smallest task's ready stages start first, first fit.

Paper: "On Scheduling Ring-All-Reduce Learning Jobs in Multi-Tenant GPU Clusters with
Communication Contention" (Yu, Ji, Rajan & Liu, ACM MobiHoc 2022): SJF-BCO, Smallest Job First
with Balanced Contention and Overhead. Its placement half is ``placement.policies.sjf_bco``.

What it decides: the order in which one node's ready stages take free units. The paper serves
its job queue smallest job first (a job's size: the GPUs it asks for, i.e. its work); here the
queue is the node's ready stages, ordered by their TASK's estimated size, smallest first, then
FCFS (ready_at_s, task id, DAG position). Each stage takes the first unit with room, a GPU first
for a GPU-capable stage, as :mod:`interference.schedulers.fcfs` does: the paper's contribution
at this level is the order, not the unit choice.

Adapted for streaming tasks and stages, and why: a streaming task asks for no GPU count, so its
size is its estimated work, the sum over its application's stages of the stage's best estimate
on this node's units (``CostModel.unit_ms``; a CPU-only stage on a core). The size is the whole
task's (fixed while it runs), not what is left of it: the paper orders jobs by their demand, not
by progress (SJF-BSBF's shortest-remaining order is ``sjf_bsbf``). Unknown applications or
stages (no estimate) count as infinitely large: they go last, in FCFS order.

Settings: none beyond FCFS's ``prefer_gpu`` (True: a GPU-capable stage looks for a GPU first).

Example::

    >>> from workload.model import ComputingUnit, Stage
    >>> units = [ComputingUnit("cpu:0", "cpu")]
    >>> ready = [Stage("big", "video_synopsis", "background_subtraction", 9_000_000),
    ...          Stage("small", "video_synopsis", "background_subtraction", 1_000_000,
    ...                ready_at_s=5.0)]
    >>> [a.stage.task_id for a in SjfBcoOrderScheduler().assign(ready, units, 6.0)]
    ['small']
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from interference.schedulers._checks import BaseNodeScheduler, can_run, free_slots, ready_order
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import Assignment, ComputingUnit, Stage

__all__ = ["SjfBcoOrderScheduler"]


class SjfBcoOrderScheduler(BaseNodeScheduler):
    """Smallest estimated task first, then FCFS; first unit with room (GPU first)."""

    name = "sjf_bco_order"

    def __init__(self, costs: CostModel | None = None, seed: int = 0, *,
                 prefer_gpu: bool = True) -> None:
        super().__init__(costs, seed)
        if not isinstance(prefer_gpu, bool):
            raise ValueError(f"prefer_gpu must be True or False, got {prefer_gpu!r}")
        self.prefer_gpu = prefer_gpu

    def task_size_s(self, stage: Stage, units: Sequence[ComputingUnit]) -> float:
        """Estimated seconds of the stage's whole task, each stage on its best unit here."""
        app = APPLICATIONS.get(stage.app_id)
        if app is None:
            return math.inf
        total = 0.0
        try:
            for s in app.stages:
                times = [self.costs.unit_ms(s.name, stage.input_size, u) for u in units]
                times = [t for t in times if t is not None]
                total += min(times, default=math.inf) / 1000.0
        except KeyError:  # a stage the cost model does not know
            return math.inf
        return total

    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        room = {u.unit_id: free_slots(u) for u in units}
        sizes = {s.task_id: self.task_size_s(s, units) for s in ready}
        # sorted() is stable: equal sizes keep the FCFS order
        order = sorted(ready_order(ready), key=lambda s: sizes[s.task_id])
        out: list[Assignment] = []
        for stage in order:
            if not any(room.values()):
                break
            candidates = [u for u in units if room[u.unit_id] > 0 and can_run(stage, u)]
            if self.prefer_gpu and stage.gpu_capable:
                candidates = [u for u in candidates if u.kind == "gpu"] or candidates
            if not candidates:
                continue  # e.g. a CPU-only stage while every core is busy: it waits
            unit = candidates[0]
            room[unit.unit_id] -= 1
            out.append(Assignment(stage, unit.unit_id,
                                  f"SJF-BCO: task {stage.task_id} est. {sizes[stage.task_id]:.3g}"
                                  f" s, smallest first of {len(sizes)} tasks waiting -> first "
                                  f"{unit.kind} with room {unit.unit_id}"))
        return out
