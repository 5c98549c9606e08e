"""SchedTune, after "SchedTune: A Heterogeneity-Aware GPU Scheduler for Deep Learning"
(Albahar, Dash, Tumanov & Butt, CCGrid 2022).

What it decides: for each ready stage, a prediction of its GPU memory and its time on every GPU
of the node; the stage goes to the GPU where it fits with the least memory left over (best fit)
and never where the predicted memory would overflow the device (no OOM); otherwise a core.

Adapted for streaming tasks and stages: SchedTune places whole training jobs and learns its
memory/time predictors from job features across GPU types. Our unit of placement is a stage
instance, and the public :class:`~workload.estimates.CostModel` already predicts per (stage type,
input size, GPU model): memory is ``gpu_memory_mb`` and time is ``unit_ms``. What a GPU holds
already is what the unit shows: ``memory_util * memory_mb`` (a unit only names its running stage
types, not their sizes), and never less than the running stages' CUDA contexts
(``gpu_memory_mb(type, 0)``), so hand-made views without a memory reading are not read as empty.
The paper learns from the OOMs it sees; so do we: a launch that failed next to a partner
(``observe_corun`` with rate 0) marks that pair as "does not fit together" on that GPU model,
and measured co-run rates (> 0) replace the time-slicing guess (``1 / (1 + co-runners)``) in the
time prediction. A stage that fits no GPU waits, as SchedTune's jobs queue (``cpu_fallback=True``
sends it to the fastest free core instead; on the paper cluster that is slower, because a
GPU-capable stage on a core takes many times its GPU time).

Parameters (constructor settings):

- ``memory_headroom=0.9``: the predicted memory of everything on a GPU plus the new stage must stay
  under this share of the device memory (SchedTune's safety margin for prediction error and
  allocator fragmentation); in (0, 1].
- ``fit_tolerance_mb=0.0``: fits whose left-over memory is within this many MB of the best fit
  count as equal; among equal fits the shortest predicted time wins (then unit order).
- ``cpu_fallback=False``: a GPU-capable stage that fits no GPU waits (True: fastest free core).
- ``avoid_failed_pairs=True``: learn from observed launch failures (above).

GPU memory comes from ``ComputingUnit.memory_mb``, or the calibration's ``memory_gb`` for the
unit's model when a view leaves it 0. Stages go in arrival order (``ready_order``).

Example::

    >>> from workload.model import ComputingUnit, Stage
    >>> units = [ComputingUnit("gpu:0", "gpu", model="p4", running=("face_encoding",),
    ...                        capacity=2, memory_util=0.9, memory_mb=8192),
    ...          ComputingUnit("gpu:1", "gpu", model="k80", running=("face_detection",
    ...                        "gmm_background"), capacity=3, memory_util=0.4, memory_mb=12288)]
    >>> ready = [Stage("t1", "face_recognition", "face_landmarks", 200_000_000)]
    >>> [a.unit_id for a in SchedTuneScheduler().assign(ready, units, now_s=0.0)]
    ['gpu:1']
"""

from __future__ import annotations

from collections.abc import Sequence

from interference.schedulers._checks import (BaseNodeScheduler, can_run, free_slots, ready_order,
                                             stage_key)
from workload.estimates import CostModel
from workload.model import Assignment, ComputingUnit, Stage

__all__ = ["SchedTuneScheduler"]


class SchedTuneScheduler(BaseNodeScheduler):
    """Best fit by predicted GPU memory, no predicted OOM; predicted time breaks equal fits."""

    name = "schedtune"

    def __init__(self, costs: CostModel | None = None, seed: int = 0, *,
                 memory_headroom: float = 0.9, fit_tolerance_mb: float = 0.0,
                 cpu_fallback: bool = False, avoid_failed_pairs: bool = True) -> None:
        super().__init__(costs, seed)
        if isinstance(memory_headroom, bool) or not isinstance(memory_headroom, (int, float)) \
                or not 0.0 < memory_headroom <= 1.0:
            raise ValueError(f"memory_headroom must be a number in (0, 1], got "
                             f"{memory_headroom!r}")
        if isinstance(fit_tolerance_mb, bool) or not isinstance(fit_tolerance_mb, (int, float)) \
                or not fit_tolerance_mb >= 0.0:  # written so that NaN fails too
            raise ValueError(f"fit_tolerance_mb must be a number >= 0, got {fit_tolerance_mb!r}")
        for label, value in (("cpu_fallback", cpu_fallback),
                             ("avoid_failed_pairs", avoid_failed_pairs)):
            if not isinstance(value, bool):
                raise ValueError(f"{label} must be True or False, got {value!r}")
        self.memory_headroom = float(memory_headroom)
        self.fit_tolerance_mb = float(fit_tolerance_mb)
        self.cpu_fallback = cpu_fallback
        self.avoid_failed_pairs = avoid_failed_pairs
        #: (sorted stage pair, gpu model) that failed to launch together: never co-placed again.
        self.failed_pairs: set[tuple[str, str, str]] = set()
        #: (stage, partner, gpu model) -> (sum of measured rates, count), rates > 0 only.
        self._rates: dict[tuple[str, str, str], tuple[float, int]] = {}
        #: Stages left waiting in the last call, with why (for people and tests).
        self.last_waiting: dict[tuple[str, str], str] = {}

    # -- learning -------------------------------------------------------------------------------
    @staticmethod
    def _pair(a: str, b: str, model: str) -> tuple[str, str, str]:
        first, second = sorted((a, b))
        return (first, second, model)

    def observe_corun(self, stage: str, partner: str, gpu_model: str,
                      measured_rate: float) -> None:
        if measured_rate <= 0.0:
            # The launch failed next to that partner: our memory prediction of the pair was
            # wrong (or the pair cannot share at all); both orders fail alike.
            if self.avoid_failed_pairs:
                self.failed_pairs.add(self._pair(stage, partner, gpu_model))
            return
        total, count = self._rates.get((stage, partner, gpu_model), (0.0, 0))
        self._rates[(stage, partner, gpu_model)] = (total + min(1.0, measured_rate), count + 1)

    # -- predictions ----------------------------------------------------------------------------
    def capacity_mb(self, unit: ComputingUnit) -> float:
        """Device memory of a GPU; 0 when neither the view nor the calibration knows it."""
        if unit.memory_mb > 0:
            return unit.memory_mb
        calibration = getattr(self.costs, "calibration", None)
        spec = calibration.gpu_models.get(unit.model) if calibration is not None else None
        return float(spec["memory_gb"]) * 1024.0 if spec else 0.0

    def used_mb(self, unit: ComputingUnit) -> float:
        """Memory in use: the unit's reading, at least the CUDA contexts of what runs there."""
        floor = sum(self.costs.gpu_memory_mb(r, 0) for r in unit.running)
        return max(unit.memory_util * self.capacity_mb(unit), floor)

    def predicted_ms(self, stage: Stage, unit: ComputingUnit,
                     partners: Sequence[str] = ()) -> float | None:
        """Time on ``unit`` next to ``partners``: alone time over the slowest expected rate."""
        alone = self.costs.unit_ms(stage.stage, stage.input_size, unit)
        if alone is None or not partners:
            return alone
        rate = 1.0
        for partner in partners:
            total, count = self._rates.get((stage.stage, partner, unit.model), (0.0, 0))
            # Unmeasured: equal time slices, as a GPU shares among co-runners it knows nothing of.
            rate = min(rate, total / count if count else 1.0 / (1 + len(partners)))
        return alone / rate

    # -- the rule -------------------------------------------------------------------------------
    def _best_gpu(self, stage: Stage, gpus: Sequence[ComputingUnit], room: dict,
                  used: dict, running: dict):
        """(unit, left-over MB, predicted ms, need MB) of the best fit, or (None, why)."""
        need = self.costs.gpu_memory_mb(stage.stage, stage.input_size)
        fits = []
        for index, gpu in enumerate(gpus):
            if room[gpu.unit_id] <= 0 or not can_run(stage, gpu):
                continue
            if any(self._pair(stage.stage, r, gpu.model) in self.failed_pairs
                   for r in running[gpu.unit_id]):
                continue  # learned: this pair failed to launch together on this model
            limit = self.memory_headroom * self.capacity_mb(gpu)
            if limit <= 0.0:
                continue  # unknown memory: no prediction can rule out an OOM there
            left = limit - used[gpu.unit_id] - need
            if left < 0.0:
                continue  # predicted OOM
            ms = self.predicted_ms(stage, gpu, running[gpu.unit_id])
            if ms is not None:
                fits.append((left, ms, index, gpu))
        if not fits:
            return None, need
        tightest = min(f[0] for f in fits)
        equal = [f for f in fits if f[0] <= tightest + self.fit_tolerance_mb]
        left, ms, _, gpu = min(equal, key=lambda f: (f[1], f[2]))
        return (gpu, left, ms, len(equal)), need

    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        gpus = [u for u in units if u.kind == "gpu"]
        cores = [u for u in units if u.kind == "cpu"]
        room = {u.unit_id: free_slots(u) for u in units}
        used = {g.unit_id: self.used_mb(g) for g in gpus}
        running = {g.unit_id: list(g.running) for g in gpus}
        out: list[Assignment] = []
        self.last_waiting = {}
        for stage in ready_order(ready):
            if stage.gpu_capable and gpus:
                best, need = self._best_gpu(stage, gpus, room, used, running)
                if best is not None:
                    gpu, left, ms, ties = best
                    tie = f", fastest of {ties} equal fits" if ties > 1 else ""
                    out.append(Assignment(stage, gpu.unit_id, (
                        f"SchedTune: best fit, {left:.0f} MB left under "
                        f"{self.memory_headroom:.0%} of {self.capacity_mb(gpu):.0f} MB (needs "
                        f"{need:.0f} MB, {used[gpu.unit_id]:.0f} MB in use), est {ms:.0f} ms"
                        f"{tie} -> {gpu.unit_id}")))
                    room[gpu.unit_id] -= 1
                    used[gpu.unit_id] += need
                    running[gpu.unit_id].append(stage.stage)
                    continue
                if not self.cpu_fallback:
                    self.last_waiting[stage_key(stage)] = f"no gpu fits {need:.0f} MB"
                    continue
                why = f"no gpu fits {need:.0f} MB"
            else:
                why = "CPU only" if not stage.gpu_capable else "no gpu on this node"
            free = [(i, c) for i, c in enumerate(cores) if room[c.unit_id] > 0]
            if not free:
                self.last_waiting[stage_key(stage)] = f"{why}, no free core"
                continue
            _, core = min(free, key=lambda ic: (-ic[1].speed, ic[0]))  # fastest, then first
            ms = self.costs.unit_ms(stage.stage, stage.input_size, core)
            out.append(Assignment(stage, core.unit_id,
                                  f"SchedTune: {why}, fastest free core (speed {core.speed:g}), "
                                  f"est {ms:.0f} ms -> {core.unit_id}"))
            room[core.unit_id] -= 1
        return out
