"""Vapor at node level: pair stages whose copy-bound and compute-bound phases overlap on a GPU.

Paper: "Vapor: A GPU Sharing Scheduler with Communication and Computation Pipeline for
Distributed Deep Learning" (Zhu, Gong, Zhu & Zhou, ISPA/BDCloud 2021).

What it decides, at every scheduling instant on one node:

1. an idle GPU starts a pipeline with the oldest ready GPU-capable stage that fits its memory;
2. a free slot beside running stages goes to the ready stage whose phase mix best complements
   them (a copy-heavy stage beside a compute-heavy one), best match first, if the predicted
   overlap reaches ``min_overlap``;
3. everything else takes its earliest estimated finish on a core, or waits for a busy GPU (the
   GPUs are closed to it: they only take stages by rules 1-2), as MCT does.

Adapted for streaming tasks and stages, and why:

- Vapor pipelines the all-reduce COMMUNICATION of one distributed-training job with the
  COMPUTATION of another on a shared GPU. A stage has no all-reduce; its copy-bound part is the
  host-to-device copy of its input and the memory-bound share of its kernels. So each stage
  gets a copy share ``phi`` = (transfer_ms + m * compute_ms) / (transfer_ms + compute_ms), with
  transfer_ms = input bytes over a PCIe-like bandwidth, compute_ms = ``CostModel.gpu_ms`` and
  m = memory-boundness from the stage's public GPU profile (mean of device-memory, global-load
  and global-store throughput over that plus SM throughput; 0.5 when the profile is unknown).
- Predicted overlap of two stages = phi_a (1 - phi_b) + (1 - phi_a) phi_b: the chance that one
  is copying while the other computes (independent phases). Several partners: the mean.
- Vapor also overlaps a job's input transfer with the previous job's compute. The simulator
  already does this at the node: a task's input crosses the downlink while other tasks' stages
  compute, so here only the on-GPU pairing is scheduled.
- Not adapted: Vapor's preemption (the simulator never preempts a started stage) and its
  adaptive batch redistribution (a stage's input is one indivisible clip). The running stages'
  input sizes are not in the unit view; their phase mix is taken at the candidate's size (clips
  on one node are of similar size, and the size only moves the small transfer term).
- A stage is put on a GPU only when its predicted device memory fits next to what runs there.

Parameters (constructor settings): ``min_overlap`` (0.5: co-run only pairs whose phases differ
at least half the time, i.e. better than two stages that are half copy, half compute; Vapor
co-locates whenever its pipeline fits, which is ``min_overlap=0``); ``pcie_gb_s`` (12.0 GB/s,
what PCIe 3.0 x16 moves in practice: the paper's K80/P4 hosts); ``bytes_per_pixel`` (1.0: the
grey clip crosses as the node received it, one byte per pixel as calibration.yaml says).

Example::

    >>> from workload.model import ComputingUnit, Stage
    >>> units = [ComputingUnit("gpu:0", "gpu", model="k80", running=("face_encoding",),
    ...                        capacity=2)]
    >>> ready = [Stage("t1", "face_recognition", "face_detection", 76_800_000),
    ...          Stage("t2", "video_synopsis", "frame_difference", 76_800_000, ready_at_s=1.0)]
    >>> [(a.stage.stage, a.unit_id) for a in VaporScheduler().assign(ready, units, now_s=2.0)]
    [('frame_difference', 'gpu:0')]
"""

from __future__ import annotations

from collections.abc import Sequence

from interference.schedulers._checks import BaseNodeScheduler, can_run, free_slots, ready_order
from interference.schedulers.mct_unit import earliest_finish_placement
from workload.estimates import CostModel
from workload.model import Assignment, ComputingUnit, Stage

__all__ = ["VaporScheduler", "overlap", "fits_memory", "rest_by_earliest_finish"]


def overlap(phi_a: float, phi_b: float) -> float:
    """Chance that one stage is in its copy phase while the other computes (0 .. 1)."""
    return phi_a * (1.0 - phi_b) + (1.0 - phi_a) * phi_b


def fits_memory(costs, stage: Stage, gpu: ComputingUnit, used_mb: float) -> bool:
    """The stage's predicted device memory fits beside ``used_mb`` (no size known: it fits)."""
    return not gpu.memory_mb or \
        used_mb + costs.gpu_memory_mb(stage.stage, stage.input_size) <= gpu.memory_mb


def rest_by_earliest_finish(ordered: Sequence[Stage], units: Sequence[ComputingUnit],
                            running: dict[str, list[str]], free_at: dict[str, float],
                            now_s: float, costs, reason) -> list[Assignment]:
    """Stages no GPU rule took: each to its earliest estimated finish among the cores and the
    busy GPUs, starting only on a core with room (a busy GPU is closed: a stage may only wait
    for it). Idle GPUs are left out: every stage that fits one was offered it already, so a
    stage must not wait for a GPU that nothing will ever free (no event would wake the node)."""
    views = []
    for u in units:
        if u.kind == "gpu":
            if not running[u.unit_id]:
                continue
            views.append(ComputingUnit(u.unit_id, "gpu", u.speed, u.model,
                                       tuple(running[u.unit_id]), len(running[u.unit_id]),
                                       free_at[u.unit_id]))
        else:
            views.append(u)
    out, _ = earliest_finish_placement(ordered, views, now_s, costs, wait_for_busy=True,
                                       reserve_waiting=True, reason=reason)
    return out


class VaporScheduler(BaseNodeScheduler):
    """Oldest stage to an idle GPU; the best-complementing stage beside running ones."""

    name = "vapor"

    def __init__(self, costs: CostModel | None = None, seed: int = 0, *,
                 min_overlap: float = 0.5, pcie_gb_s: float = 12.0,
                 bytes_per_pixel: float = 1.0) -> None:
        super().__init__(costs, seed)
        if not 0.0 <= min_overlap <= 1.0:
            raise ValueError(f"min_overlap must be in [0, 1], got {min_overlap}")
        if not pcie_gb_s > 0:
            raise ValueError(f"pcie_gb_s must be positive, got {pcie_gb_s}")
        if not bytes_per_pixel > 0:
            raise ValueError(f"bytes_per_pixel must be positive, got {bytes_per_pixel}")
        self.min_overlap = float(min_overlap)
        self.pcie_gb_s = float(pcie_gb_s)
        self.bytes_per_pixel = float(bytes_per_pixel)
        self._phi: dict[tuple[str, int, str], float] = {}

    # -- the phase mix ---------------------------------------------------------------------
    def memory_boundness(self, stage: str) -> float:
        """m in [0, 1] from the public GPU profile; 0.5 (no lean) when unknown or zero."""
        try:
            profile = self.costs.stage(stage).gpu_profile
        except KeyError:
            profile = None
        if not profile or len(profile) < 7:
            return 0.5
        memory = sum(profile[4:7]) / 3.0
        total = memory + profile[0]
        return memory / total if total > 0 else 0.5

    def copy_share(self, stage: str, input_size: int, gpu_model: str,
                   speed: float | None = None) -> float:
        """phi: the share of the stage's GPU time that is copy/memory-bound (on a GPU of
        ``gpu_model`` at spec ``speed``; None: the model's calibrated speed)."""
        key = (stage, input_size, gpu_model, speed)
        if key not in self._phi:
            m = self.memory_boundness(stage)
            try:
                compute = self.costs.gpu_ms(stage, input_size, gpu_model, speed) or 0.0
            except KeyError:  # a stage or GPU model the calibration does not know
                compute = 0.0
            transfer = 1000.0 * input_size * self.bytes_per_pixel / (self.pcie_gb_s * 1e9)
            total = transfer + compute
            self._phi[key] = (transfer + m * compute) / total if total > 0 else m
        return self._phi[key]

    def predicted_overlap(self, stage: Stage, running: Sequence[str], gpu_model: str,
                          speed: float | None = None) -> float:
        mine = self.copy_share(stage.stage, stage.input_size, gpu_model, speed)
        pairs = [overlap(mine, self.copy_share(r, stage.input_size, gpu_model, speed))
                 for r in running]
        return sum(pairs) / len(pairs) if pairs else 1.0

    # -- the rules -------------------------------------------------------------------------
    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        order = ready_order(ready)
        left = list(order)
        gpus = [u for u in units if u.kind == "gpu"]
        running = {u.unit_id: list(u.running) for u in units}
        room = {u.unit_id: free_slots(u) for u in units}
        used_mb = {u.unit_id: u.memory_util * u.memory_mb for u in units}
        free_at = {u.unit_id: max(now_s, u.free_at_s) for u in units}
        out: list[Assignment] = []

        def place(stage: Stage, gpu: ComputingUnit, why: str) -> None:
            left.remove(stage)
            running[gpu.unit_id].append(stage.stage)
            room[gpu.unit_id] -= 1
            used_mb[gpu.unit_id] += self.costs.gpu_memory_mb(stage.stage, stage.input_size)
            # Book it as if after what runs (no co-run rate is known): MCT's view of the queue.
            free_at[gpu.unit_id] += (self.costs.unit_ms(stage.stage, stage.input_size, gpu)
                                     or 0.0) / 1000.0
            out.append(Assignment(stage, gpu.unit_id, why))

        def fits(stage: Stage, gpu: ComputingUnit) -> bool:
            return can_run(stage, gpu) and fits_memory(self.costs, stage, gpu, used_mb[gpu.unit_id])

        # Rule 1: idle GPUs start pipelines with the oldest stages (arrival order: no stage
        # starves because its phase mix is middling).
        for gpu in gpus:
            if running[gpu.unit_id] or room[gpu.unit_id] <= 0:
                continue
            stage = next((s for s in left if fits(s, gpu)), None)
            if stage is None:
                continue
            phi = self.copy_share(stage.stage, stage.input_size, gpu.model, gpu.speed)
            place(stage, gpu, f"Vapor: idle {gpu.unit_id} starts a pipeline with the oldest "
                              f"stage (ready {stage.ready_at_s:.2f}s, copy share {phi:.2f})")
        # Rule 2: free slots beside running stages, best predicted overlap first (ties: GPU,
        # then arrival order), so the best complements are matched before weaker ones.
        index = {id(s): i for i, s in enumerate(order)}
        while True:
            best: tuple[float, int, int, Stage, ComputingUnit] | None = None
            for g, gpu in enumerate(gpus):
                if room[gpu.unit_id] <= 0 or not running[gpu.unit_id]:
                    continue
                for stage in left:
                    if not fits(stage, gpu):
                        continue
                    score = self.predicted_overlap(stage, running[gpu.unit_id], gpu.model,
                                                   gpu.speed)
                    key = (score, -g, -index[id(stage)])
                    if score >= self.min_overlap and (best is None or key > best[:3]):
                        best = (*key, stage, gpu)
            if best is None:
                break
            score, _, _, stage, gpu = best
            phi = self.copy_share(stage.stage, stage.input_size, gpu.model, gpu.speed)
            partners = ", ".join(running[gpu.unit_id])
            place(stage, gpu, f"Vapor: copy share {phi:.2f} complements {partners}, predicted "
                              f"overlap {score:.2f} >= {self.min_overlap:.2f} -> {gpu.unit_id}")

        # Rule 3: the rest to cores by earliest estimated finish, or wait for a busy GPU.
        def reason(stage: Stage, unit: ComputingUnit, start: float, finish: float,
                   candidates: int) -> str:
            return (f"Vapor: no GPU pipeline slot; earliest est. completion {finish:.3f}s "
                    f"({1000 * (finish - start):.1f} ms) of {candidates} units -> {unit.unit_id}")

        out += rest_by_earliest_finish(left, units, running, free_at, now_s, self.costs, reason)
        return out
