"""Slowdown- and communication-aware mapping of a node's ready stages onto its units.

Paper: "Interference-Aware Parallelization for Deep Learning Workload in GPU Cluster" (the
node half: after a node is chosen, map the job's workers onto GPUs minimising the predicted
interference slowdown together with the communication the mapping causes).

What it decides, for each ready stage in arrival order: the unit (GPU or core) of the lowest
predicted cost ``wait + slowdown x time + communication + harm to co-runners``, where slowdown
is predicted next to what that GPU runs, and communication is the time to move the stage's
inputs to that unit from where its DAG predecessors left them. A stage whose best unit is busy
waits for it (and books it); a stage whose best unit has room starts now.

Adaptation to streaming tasks and stages: the paper's job is many workers exchanging gradients
over PCIe/QPI/network; here a task's stages are the "workers" and the traffic is each stage's
intermediate data (its input frames as ``intermediate_bytes_per_pixel`` bytes per pixel)
flowing along the DAG. Where the data is: the task's input and anything a CPU core produced is
in host memory (all cores share it); a GPU's output is on that GPU. Moving it costs one hop
(host<->GPU) or two (GPU->host->GPU) at ``transfer_gb_per_s``. The scheduler only knows where a
predecessor ran from what it assigned itself: a bounded map task_id -> {stage: where}
(``max_tasks``, oldest first out; a task leaves it when its last stage is placed); a
predecessor it does not know is taken to be in host memory. Slowdowns come from
:class:`~interference.schedulers.opportunistic.PairSlowdown` (public GPU-profile prior,
overridden by ``observe_corun`` measurements). The harm to co-runners (their predicted extra
slowdown times the time the GPU still has to run, ``free_at_s - now``, an upper bound on their
remaining time) is our addition, so one stage cannot cheaply wreck a running one.

Parameters (constructor settings):

- ``intermediate_bytes_per_pixel=4.0``: size of a stage's intermediate data per input pixel
  (one float32 frame; an assumption, the paper's model sizes do not apply).
- ``transfer_gb_per_s=6.0``: one hop's bandwidth (PCIe 3.0 x16 is about 12 GB/s peak; half of
  it for pageable copies, an assumption).
- ``comm_weight=1.0``: weight of the communication term (0: slowdown x time only).
- ``partner_weight=1.0``: weight of the co-runners' predicted extra time (0: ignore them).
- ``wait_for_busy=True``: a stage may wait for a busy unit that would still finish it first.
- ``memory_bound=0.9``: a GPU takes a stage only while its predicted memory stays under this
  fraction of the GPU's memory (unknown memory, ``memory_mb == 0``: no bound).
- ``measurement_weight=0.5``: weight of a new slowdown measurement (see ``PairSlowdown``).
- ``max_tasks=4096``: tasks whose stage locations are remembered.

Example::

    >>> from workload.model import ComputingUnit, Stage
    >>> scheduler = CommAwareScheduler()
    >>> gpus = [ComputingUnit("gpu:0", "gpu", model="k80"), ComputingUnit("gpu:1", "gpu",
    ...                                                                    model="k80")]
    >>> first = Stage("t1", "face_recognition", "face_detection", 20_000_000)
    >>> [a.unit_id for a in scheduler.assign([first], gpus[1:], now_s=0.0)]
    ['gpu:1']
    >>> after = Stage("t1", "face_recognition", "face_landmarks", 20_000_000)
    >>> [a.unit_id for a in scheduler.assign([after], gpus, now_s=1.0)]   # its input is on gpu:1
    ['gpu:1']
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

from interference.schedulers._checks import BaseNodeScheduler, can_run, free_slots, ready_order
from interference.schedulers.opportunistic import PairSlowdown
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import Assignment, ComputingUnit, Stage

__all__ = ["CommAwareScheduler", "HOST"]

#: Where a task's input, and what CPU cores produce, lives.
HOST = "host"


def _hops(source: str, target: str) -> int:
    """Copies needed to move data from ``source`` to ``target`` memory (host or a GPU id)."""
    if source == target:
        return 0
    return 1 if HOST in (source, target) else 2  # GPU -> host -> GPU


class CommAwareScheduler(BaseNodeScheduler):
    """Each stage to the unit of least wait + slowdown x time + data movement + harm."""

    name = "comm_aware"

    def __init__(self, costs: CostModel | None = None, seed: int = 0, *,
                 intermediate_bytes_per_pixel: float = 4.0, transfer_gb_per_s: float = 6.0,
                 comm_weight: float = 1.0, partner_weight: float = 1.0,
                 wait_for_busy: bool = True, memory_bound: float = 0.9,
                 measurement_weight: float = 0.5, max_tasks: int = 4096) -> None:
        super().__init__(costs, seed)
        for label, value in (("intermediate_bytes_per_pixel", intermediate_bytes_per_pixel),
                             ("comm_weight", comm_weight), ("partner_weight", partner_weight)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{label} must be a finite number >= 0, got {value}")
        if not (math.isfinite(transfer_gb_per_s) and transfer_gb_per_s > 0):
            raise ValueError(f"transfer_gb_per_s must be positive, got {transfer_gb_per_s}")
        if not 0.0 < memory_bound <= 1.0:
            raise ValueError(f"memory_bound must be in (0, 1], got {memory_bound}")
        if int(max_tasks) != max_tasks or max_tasks < 1:
            raise ValueError(f"max_tasks must be a whole number >= 1, got {max_tasks}")
        self.intermediate_bytes_per_pixel = float(intermediate_bytes_per_pixel)
        self.transfer_gb_per_s = float(transfer_gb_per_s)
        self.comm_weight = float(comm_weight)
        self.partner_weight = float(partner_weight)
        self.wait_for_busy = bool(wait_for_busy)
        self.memory_bound = float(memory_bound)
        self.max_tasks = int(max_tasks)
        self.slowdowns = PairSlowdown(self._profile, measurement_weight)
        #: task_id -> {stage: "host" or the GPU id holding its output}, least recent first
        self.locations: OrderedDict[str, dict[str, str]] = OrderedDict()

    def _profile(self, stage: str):
        try:
            return self.costs.stage(stage).gpu_profile
        except KeyError:  # a stage the calibration does not know: no public profile
            return None

    def observe_corun(self, stage: str, partner: str, gpu_model: str,
                      measured_rate: float) -> None:
        self.slowdowns.observe(stage, partner, gpu_model, measured_rate)

    # -- the cost terms -------------------------------------------------------------------------
    def input_locations(self, stage: Stage) -> list[str]:
        """Where each input of ``stage`` is: its predecessors' units, or host memory."""
        try:
            deps = APPLICATIONS[stage.app_id].stage(stage.stage).deps
        except KeyError:  # an application or stage the catalog does not know: no DAG to follow
            deps = ()
        if not deps:
            return [HOST]  # a root stage reads the task's input, received into host memory
        known = self.locations.get(stage.task_id, {})
        return [known.get(dep, HOST) for dep in deps]

    def comm_s(self, stage: Stage, target: str) -> float:
        """Seconds to bring the stage's inputs to ``target`` memory."""
        hops = sum(_hops(source, target) for source in self.input_locations(stage))
        size = stage.input_size * self.intermediate_bytes_per_pixel
        return hops * size / (self.transfer_gb_per_s * 1e9)

    def _remember(self, stage: Stage, where: str) -> None:
        entry = self.locations.pop(stage.task_id, {})
        entry[stage.stage] = where
        app = APPLICATIONS.get(stage.app_id)
        if app is not None and len(entry) >= len(app.stages):
            return  # every stage placed: nothing later needs its data's location
        self.locations[stage.task_id] = entry  # re-inserted last: most recently used
        while len(self.locations) > self.max_tasks:
            self.locations.popitem(last=False)

    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        running = {u.unit_id: list(u.running) for u in units}
        used_mb = {u.unit_id: u.memory_util * u.memory_mb for u in units}
        room = {u.unit_id: free_slots(u) for u in units}
        free_at = {u.unit_id: max(now_s, u.free_at_s) for u in units}
        out: list[Assignment] = []
        for stage in ready_order(ready):
            need_mb = self.costs.gpu_memory_mb(stage.stage, stage.input_size) \
                if stage.gpu_capable else 0.0
            best = None
            for unit in units:
                scored = self._score(stage, unit, now_s, need_mb, running, used_mb, room,
                                     free_at)
                if scored is not None and (best is None or scored[0] < best[0]):
                    best = scored  # strict: ties keep the earlier unit
            if best is None:
                continue
            cost, unit, run_s, slow, comm, harm, now_room = best
            uid = unit.unit_id
            if not now_room:
                free_at[uid] += run_s  # it waits for this unit: book it (free_at is its start)
                continue
            room[uid] -= 1
            where = uid if unit.kind == "gpu" else HOST
            if unit.kind == "gpu":
                others = ", ".join(running[uid]) or "nothing"
                running[uid].append(stage.stage)
                used_mb[uid] += need_mb
            free_at[uid] = max(free_at[uid], now_s + slow * run_s)
            self._remember(stage, where)
            what = f"slowdown {slow:.2f} next to {others} x " if unit.kind == "gpu" else ""
            out.append(Assignment(stage, uid, (
                f"comm-aware: least cost {cost:.3f}s = {what}{1000 * run_s:.0f} ms + "
                f"comm {1000 * comm:.0f} ms + harm {1000 * harm:.0f} ms -> {uid}")))
        return out

    def _score(self, stage, unit, now_s, need_mb, running, used_mb, room, free_at):
        """(cost s, unit, alone time s, slowdown, comm s, harm s, starts now) or None."""
        if not can_run(stage, unit):
            return None
        ms = self.costs.unit_ms(stage.stage, stage.input_size, unit)
        if ms is None:
            return None
        uid, run_s = unit.unit_id, ms / 1000.0
        is_gpu = unit.kind == "gpu"
        if is_gpu and unit.memory_mb > 0 and need_mb > self.memory_bound * unit.memory_mb:
            return None  # it never fits this GPU
        fits = not is_gpu or unit.memory_mb <= 0 or \
            used_mb[uid] + need_mb <= self.memory_bound * unit.memory_mb
        slow, harm = 1.0, 0.0
        if room[uid] > 0 and fits:
            start, now_room = now_s, True
            if is_gpu and running[uid]:
                slow = self.slowdowns.predict(stage.stage, running[uid], unit.model)
                if not math.isfinite(slow):
                    return None  # this pair failed to launch together: never co-run it
                left = max(0.0, free_at[uid] - now_s)
                for i, party in enumerate(running[uid]):
                    others = running[uid][:i] + running[uid][i + 1:]
                    before = self.slowdowns.predict(party, others, unit.model)
                    if not math.isfinite(before):
                        continue  # already predicted stuck; this stage changes nothing there
                    after = self.slowdowns.predict(party, [*others, stage.stage], unit.model)
                    harm += (after - before) / before * left
                harm *= self.partner_weight
        elif self.wait_for_busy:
            start, now_room = free_at[uid], False  # runs alone once the unit is free
        else:
            return None
        comm = self.comm_weight * self.comm_s(stage, uid if is_gpu else HOST)
        cost = (start - now_s) + slow * run_s + comm + harm
        if not math.isfinite(cost):
            return None
        return cost, unit, run_s, slow, comm, harm, now_room
