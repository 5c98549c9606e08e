"""Interference-aware opportunistic placement of a node's ready stages on its GPUs.

Paper: "Interference-Aware Opportunistic Job Placement for Shared Distributed Deep Learning
Clusters" (a job goes on the fewest GPUs that hold it, sharing GPUs with running jobs whenever
GPU memory allows and the predicted interference stays bounded).

What it decides, for each ready stage in arrival order:

1. a GPU-capable stage first shares a GPU that already runs something (so the fewest GPUs are
   in use), if the predicted memory of that GPU's stages plus its own stays under
   ``memory_bound`` of the GPU's memory and the predicted slowdown of EVERY party (the stage and
   each stage already there) stays at or under ``max_slowdown``;
2. otherwise it takes an idle GPU (the one where it runs fastest);
3. otherwise a CPU core, but only if the core finishes it before the earliest GPU would (waiting
   included); else it waits for that GPU. CPU-only stages take the fastest free core.

Adaptation to streaming tasks and stages: the paper places whole DL jobs (many GPUs, long
lived) once; here the unit of placement is one stage on one node, decided at every scheduling
instant, so "fewest GPUs" becomes "pack onto a GPU already in use before opening an idle one",
and the job's memory footprint becomes the stage's ``CostModel.gpu_memory_mb``. The GPU's
current memory is what its unit view shows (``memory_util * memory_mb``); a GPU whose memory is
unknown (``memory_mb == 0``) is not memory-bounded. The paper's interference predictor is
replaced by :class:`PairSlowdown`: a prior from the calibration's public GPU profiles (the
calibration has no co-location table; the simulator's measured pairs are hidden truth),
overridden per (stage, partner, GPU model) by the slowdowns the node measures
(``observe_corun``). A launch that failed next to a partner (rate 0) marks that pair as unable
to share. Waiting for a GPU rather than using a core is our addition (the paper's jobs need
GPUs); a stage that waits books the GPU it waits for, so the next stages see the queue.

Parameters (constructor settings):

- ``max_slowdown=1.5``: the paper's bound on the predicted slowdown of any co-located party
  (>= 1; 1 means never share unless no interference is predicted).
- ``memory_bound=0.9``: the fraction of a GPU's memory that the stages on it may be predicted to
  use (in (0, 1]; headroom for fragmentation, as the paper leaves).
- ``measurement_weight=0.5``: weight of a new measurement in the running estimate of a pair's
  slowdown (in (0, 1]; 1 keeps only the latest).

Example::

    >>> from workload.model import ComputingUnit, Stage
    >>> units = [ComputingUnit("gpu:0", "gpu", model="k80", capacity=2),
    ...          ComputingUnit("gpu:1", "gpu", model="k80", running=("face_compare",),
    ...                        capacity=2)]
    >>> ready = [Stage("t1", "face_recognition", "face_detection", 1_000_000)]
    >>> [a.unit_id for a in OpportunisticScheduler().assign(ready, units, now_s=0.0)]
    ['gpu:1']
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from interference.schedulers._checks import BaseNodeScheduler, free_slots, ready_order
from workload.estimates import CostModel
from workload.model import Assignment, ComputingUnit, Stage

__all__ = ["OpportunisticScheduler", "PairSlowdown", "UNKNOWN_PAIR_SLOWDOWN"]

#: Prior slowdown of a pair when a stage has no public profile: the worst the profile rule can
#: give for a pair (both saturate one resource), so an unknown stage shares only once measured.
UNKNOWN_PAIR_SLOWDOWN = 2.0


class PairSlowdown:
    """Predicted slowdown of a stage next to co-runners on a GPU model.

    Prior (public, from ``calibration.yaml``'s ``stage_gpu_profile``, each metric in [0, 1]): a
    pair shares each resource; where their demands add up past 1 each gets about ``1 / sum``
    of it, so ``prior(a, b) = max(1, max over the metrics a uses of a_m + b_m)``. Measured
    (``observe``): ``1 / rate`` (at least 1), averaged with weight ``measurement_weight``; a
    rate of 0 (the launch failed next to that partner) gives ``inf``. A measurement replaces
    the prior for that (stage, partner, model). Several co-runners: the pairwise slowdowns are
    multiplied, as :mod:`interference.slowdown` does. At most ``max_pairs`` measured pairs are
    kept (the oldest go first).
    """

    def __init__(self, profile: Callable[[str], Sequence[float] | None],
                 measurement_weight: float = 0.5, max_pairs: int = 4096) -> None:
        if not 0.0 < measurement_weight <= 1.0:
            raise ValueError(f"measurement_weight must be in (0, 1], got {measurement_weight}")
        if max_pairs < 1:
            raise ValueError(f"max_pairs must be at least 1, got {max_pairs}")
        self.profile = profile
        self.measurement_weight = float(measurement_weight)
        self.max_pairs = int(max_pairs)
        self.measured: dict[tuple[str, str, str], float] = {}
        self.observations = 0

    def prior(self, stage: str, partner: str) -> float:
        mine, theirs = self.profile(stage), self.profile(partner)
        if not mine or not theirs:
            return UNKNOWN_PAIR_SLOWDOWN
        return max(1.0, max((a + b for a, b in zip(mine, theirs) if a > 0), default=1.0))

    def pair(self, stage: str, partner: str, gpu_model: str) -> tuple[float, str]:
        """(slowdown of ``stage`` next to ``partner``, "measured" or "profile")."""
        value = self.measured.get((stage, partner, gpu_model))
        if value is not None:
            return value, "measured"
        return self.prior(stage, partner), "profile"

    def predict(self, stage: str, partners: Sequence[str], gpu_model: str) -> float:
        """Slowdown of ``stage`` next to all ``partners`` (1.0 alone)."""
        slowdown = 1.0
        for partner in partners:
            slowdown *= self.pair(stage, partner, gpu_model)[0]
        return slowdown

    def observe(self, stage: str, partner: str, gpu_model: str, measured_rate: float) -> None:
        if not math.isfinite(measured_rate) or measured_rate < 0:
            raise ValueError(f"measured_rate must be a finite number >= 0, got {measured_rate!r}")
        self.observations += 1
        key = (stage, partner, gpu_model)
        # rate > 1 is noise (it ran faster than its estimate): no slowdown, not a speed-up
        new = math.inf if measured_rate == 0 else max(1.0, 1.0 / measured_rate)
        old = self.measured.pop(key, None)  # re-inserted last: eviction drops the stalest
        if old is not None and math.isfinite(old) and math.isfinite(new):
            new = old + self.measurement_weight * (new - old)
        self.measured[key] = new
        if len(self.measured) > self.max_pairs:
            del self.measured[next(iter(self.measured))]


class OpportunisticScheduler(BaseNodeScheduler):
    """Pack onto a GPU in use under memory and slowdown bounds; else an idle GPU; else a core if
    that is faster than waiting."""

    name = "opportunistic"

    def __init__(self, costs: CostModel | None = None, seed: int = 0, *,
                 max_slowdown: float = 1.5, memory_bound: float = 0.9,
                 measurement_weight: float = 0.5) -> None:
        super().__init__(costs, seed)
        if not (math.isfinite(max_slowdown) and max_slowdown >= 1.0):
            raise ValueError(f"max_slowdown must be a finite number >= 1, got {max_slowdown}")
        if not 0.0 < memory_bound <= 1.0:
            raise ValueError(f"memory_bound must be in (0, 1], got {memory_bound}")
        self.max_slowdown = float(max_slowdown)
        self.memory_bound = float(memory_bound)
        self.slowdowns = PairSlowdown(self._profile, measurement_weight)

    def _profile(self, stage: str):
        try:
            return self.costs.stage(stage).gpu_profile
        except KeyError:  # a stage the calibration does not know: no public profile
            return None

    def observe_corun(self, stage: str, partner: str, gpu_model: str,
                      measured_rate: float) -> None:
        self.slowdowns.observe(stage, partner, gpu_model, measured_rate)

    def worst_slowdown(self, stage: str, running: Sequence[str], gpu_model: str) -> float:
        """The largest predicted slowdown among ``stage`` and each of ``running`` if ``stage``
        joins them on a GPU of ``gpu_model``."""
        worst = self.slowdowns.predict(stage, running, gpu_model)
        for i, party in enumerate(running):
            others = [*running[:i], *running[i + 1:], stage]
            worst = max(worst, self.slowdowns.predict(party, others, gpu_model))
        return worst

    def _fits(self, gpu: ComputingUnit, used_mb: float, need_mb: float) -> bool:
        # memory_mb 0: the view does not say how much memory the GPU has, so no bound applies
        return gpu.memory_mb <= 0 or used_mb + need_mb <= self.memory_bound * gpu.memory_mb

    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        gpus = [u for u in units if u.kind == "gpu"]
        cores = [u for u in units if u.kind == "cpu"]
        # This call's own view: what it placed counts as running, booked waits move free times.
        running = {g.unit_id: list(g.running) for g in gpus}
        used_mb = {g.unit_id: g.memory_util * g.memory_mb for g in gpus}
        room = {u.unit_id: free_slots(u) for u in units}
        free_at = {u.unit_id: max(now_s, u.free_at_s) for u in units}
        out: list[Assignment] = []
        for stage in ready_order(ready):
            gpu_ms = {g.unit_id: self.costs.unit_ms(stage.stage, stage.input_size, g)
                      for g in gpus} if stage.gpu_capable else {}
            need_mb = self.costs.gpu_memory_mb(stage.stage, stage.input_size) if gpu_ms else 0.0
            # GPUs that could ever hold it (alone, within the memory bound)
            able = [g for g in gpus if gpu_ms.get(g.unit_id) is not None
                    and self._fits(g, 0.0, need_mb)]
            refused: list[str] = []
            packed = []
            for g in able:
                if not running[g.unit_id] or room[g.unit_id] <= 0:
                    continue
                if not self._fits(g, used_mb[g.unit_id], need_mb):
                    refused.append(f"{g.unit_id} memory")
                    continue
                worst = self.worst_slowdown(stage.stage, running[g.unit_id], g.model)
                if worst <= self.max_slowdown:
                    packed.append((worst, g))
                else:
                    refused.append(f"{g.unit_id} slowdown {worst:.2f} > {self.max_slowdown:.2f}")
            note = f"; refused {', '.join(refused)}" if refused else ""
            if packed:
                worst, g = min(packed, key=lambda wg: wg[0])  # min keeps the first tie
                sources = {self.slowdowns.pair(stage.stage, r, g.model)[1]
                           for r in running[g.unit_id]}
                why = (f"opportunistic: pack onto busy {g.unit_id} (runs "
                       f"{', '.join(running[g.unit_id])}), worst predicted slowdown {worst:.2f} "
                       f"<= {self.max_slowdown:.2f} ({'/'.join(sorted(sources))}), memory "
                       f"{used_mb[g.unit_id] + need_mb:.0f} MB{note}")
                self._place(out, stage, g, why, room, running, used_mb, need_mb)
                free_at[g.unit_id] = max(free_at[g.unit_id],
                                         now_s + worst * gpu_ms[g.unit_id] / 1000.0)
                continue
            idle = [g for g in able if not running[g.unit_id] and room[g.unit_id] > 0]
            if idle:
                g = min(idle, key=lambda u: gpu_ms[u.unit_id])
                why = (f"opportunistic: no busy GPU may take it, idle {g.unit_id} "
                       f"({gpu_ms[g.unit_id]:.0f} ms){note}")
                self._place(out, stage, g, why, room, running, used_mb, need_mb)
                free_at[g.unit_id] = now_s + gpu_ms[g.unit_id] / 1000.0
                continue
            free_cores = [c for c in cores if room[c.unit_id] > 0]
            if not free_cores:
                continue  # nothing free now: wait
            core_ms = {c.unit_id: self.costs.cpu_ms(stage.stage, stage.input_size, c.speed)
                       for c in free_cores}
            core = min(free_cores, key=lambda c: core_ms[c.unit_id])
            core_done = now_s + core_ms[core.unit_id] / 1000.0
            if able:
                wait = min(able, key=lambda g: free_at[g.unit_id] + gpu_ms[g.unit_id] / 1000.0)
                gpu_done = free_at[wait.unit_id] + gpu_ms[wait.unit_id] / 1000.0
                if gpu_done <= core_done:
                    free_at[wait.unit_id] = gpu_done  # book it: later stages see the queue
                    continue
                why = (f"opportunistic: no GPU may take it now; {core.unit_id} done at "
                       f"{core_done:.2f}s beats waiting for {wait.unit_id} ({gpu_done:.2f}s)"
                       f"{note}")
            else:
                what = "CPU only" if not stage.gpu_capable else "no GPU can hold it"
                why = f"opportunistic: {what}, fastest free core {core.unit_id}"
            room[core.unit_id] -= 1
            out.append(Assignment(stage, core.unit_id, why))
        return out

    @staticmethod
    def _place(out, stage, gpu, why, room, running, used_mb, need_mb) -> None:
        out.append(Assignment(stage, gpu.unit_id, why))
        room[gpu.unit_id] -= 1
        running[gpu.unit_id].append(stage.stage)
        used_mb[gpu.unit_id] += need_mb
