"""Fractional GPU sharing, after "GPU Shared Scheduling System Under Deep Learning Container Cloud
Platform" (Wang Zhuang, Wang Pinghui, Wang Bincheng, Wu Wenbo, Wang Bin, Cong Pengyu; Computer
Science (Jisuanji Kexue) 50(6):86, 2023).

What it decides: each GPU-capable stage requests a FRACTION of a GPU instead of a whole card; a
GPU grants fractions until they add up to one whole GPU; a request goes to the GPU it fills most
tightly (best fit: the smallest remaining fraction that still holds it), so whole GPUs stay free.

Adapted for streaming tasks and stages: the paper's pods declare their share; our stages do not,
so the request is derived from public estimates, per (stage, GPU):

- memory fraction = ``CostModel.gpu_memory_mb(stage, input_size)`` / the GPU's memory
  (``ComputingUnit.memory_mb``, or the calibration's ``memory_gb`` for its model when 0);
- compute fraction = the stage type's SM utilisation, the first entry of its public GPU profile
  (``CostModel.stage(s).gpu_profile``, the STDM metrics), or with ``compute_metric="peak"`` its
  most used resource (the profile's maximum); a GPU-capable stage without a profile asks for
  ``unknown_compute_fraction``;
- request = max(memory fraction, compute fraction): the share of the scarcer resource.

A GPU's used fraction is the sum of the requests of what runs on it. A unit only names the stage
TYPES it runs, not their sizes, so a running stage is charged its type's compute fraction, or its
equal share of the memory the unit shows (``memory_util``, at least its CUDA context), whichever
is larger; stages placed earlier in the same call are charged their exact request. Fractions
never exceed 1.0, and the unit's co-run capacity still bounds the count. CPU-only stages take
cores FCFS (first core with room, in unit order). A GPU-capable stage with no GPU fraction to
spare waits, as a pending pod does (``cpu_fallback=True``: it takes the first free core), except
one that no GPU of the node could hold even empty (request over 1): it goes to a core at once,
or a streaming record would wait forever.

Parameters (constructor settings):

- ``compute_metric="sm"``: ``"sm"`` or ``"peak"``, which profile entry is the compute fraction.
- ``unknown_compute_fraction=1.0``: compute fraction of a stage with no profile (the whole GPU:
  nothing known, nothing shared); in (0, 1].
- ``cpu_fallback=False``: whether a GPU-capable stage that finds no fraction takes a free core.

Example::

    >>> from workload.model import ComputingUnit, Stage
    >>> units = [ComputingUnit("gpu:0", "gpu", model="k80", running=("face_detection",),
    ...                        capacity=2),
    ...          ComputingUnit("gpu:1", "gpu", model="k80", running=("frame_difference",),
    ...                        capacity=2),
    ...          ComputingUnit("gpu:2", "gpu", model="k80", capacity=2)]
    >>> ready = [Stage("t1", "intrusion_detection", "dog_pyramid", 10_000_000)]
    >>> [a.unit_id for a in GpuShareScheduler().assign(ready, units, now_s=0.0)]
    ['gpu:1']
"""

from __future__ import annotations

from collections.abc import Sequence

from interference.schedulers._checks import BaseNodeScheduler, free_slots, ready_order, stage_key
from workload.estimates import CostModel
from workload.model import Assignment, ComputingUnit, Stage

__all__ = ["GpuShareScheduler"]

_EPS = 1e-9  # float sums of fractions: 0.7 + 0.3 must still fit one GPU


class GpuShareScheduler(BaseNodeScheduler):
    """Fractional GPU requests, best-fit packed; CPU-only stages FCFS on cores."""

    name = "gpu_share"

    def __init__(self, costs: CostModel | None = None, seed: int = 0, *,
                 compute_metric: str = "sm", unknown_compute_fraction: float = 1.0,
                 cpu_fallback: bool = False) -> None:
        super().__init__(costs, seed)
        if compute_metric not in ("sm", "peak"):
            raise ValueError(f"compute_metric must be 'sm' or 'peak', got {compute_metric!r}")
        if isinstance(unknown_compute_fraction, bool) \
                or not isinstance(unknown_compute_fraction, (int, float)) \
                or not 0.0 < unknown_compute_fraction <= 1.0:
            raise ValueError(f"unknown_compute_fraction must be a number in (0, 1], got "
                             f"{unknown_compute_fraction!r}")
        if not isinstance(cpu_fallback, bool):
            raise ValueError(f"cpu_fallback must be True or False, got {cpu_fallback!r}")
        self.compute_metric = compute_metric
        self.unknown_compute_fraction = float(unknown_compute_fraction)
        self.cpu_fallback = cpu_fallback
        #: Stages left waiting in the last call, with why (for people and tests).
        self.last_waiting: dict[tuple[str, str], str] = {}

    # -- requests -------------------------------------------------------------------------------
    def capacity_mb(self, unit: ComputingUnit) -> float:
        """Device memory of a GPU; 0 when neither the view nor the calibration knows it."""
        if unit.memory_mb > 0:
            return unit.memory_mb
        calibration = getattr(self.costs, "calibration", None)
        spec = calibration.gpu_models.get(unit.model) if calibration is not None else None
        return float(spec["memory_gb"]) * 1024.0 if spec else 0.0

    def compute_fraction(self, stage: str) -> float:
        """Share of a GPU's compute the stage type keeps busy (public profile)."""
        try:
            profile = self.costs.stage(stage).gpu_profile
        except KeyError:  # a stage type the calibration does not know
            profile = None
        if not profile:
            return self.unknown_compute_fraction
        value = profile[0] if self.compute_metric == "sm" else max(profile)
        return min(1.0, max(0.0, float(value)))

    def memory_fraction(self, memory_mb: float, gpu: ComputingUnit) -> float:
        capacity = self.capacity_mb(gpu)
        # Unknown device memory: memory cannot be the scarce resource we know of.
        return memory_mb / capacity if capacity > 0 else 0.0

    def request(self, stage: Stage, gpu: ComputingUnit) -> tuple[float, float, float]:
        """(request, compute fraction, memory fraction) of ``stage`` on ``gpu``."""
        compute = self.compute_fraction(stage.stage)
        memory = self.memory_fraction(self.costs.gpu_memory_mb(stage.stage, stage.input_size),
                                      gpu)
        return max(compute, memory), compute, memory

    def used_fraction(self, gpu: ComputingUnit) -> float:
        """Sum of the requests of what runs on ``gpu`` (sizes unknown: see the module doc)."""
        if not gpu.running:
            return 0.0
        shown = gpu.memory_util / len(gpu.running)  # equal share of the memory the unit shows
        return sum(max(self.compute_fraction(r),
                       shown, self.memory_fraction(self.costs.gpu_memory_mb(r, 0), gpu))
                   for r in gpu.running)

    # -- the rule -------------------------------------------------------------------------------
    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        gpus = [u for u in units if u.kind == "gpu"]
        cores = [u for u in units if u.kind == "cpu"]
        room = {u.unit_id: free_slots(u) for u in units}
        used = {g.unit_id: self.used_fraction(g) for g in gpus}
        out: list[Assignment] = []
        self.last_waiting = {}
        for stage in ready_order(ready):
            why = "CPU only"
            if stage.gpu_capable:
                requests = {g.unit_id: self.request(stage, g) for g in gpus}
                fits = [(1.0 - used[g.unit_id], i, g) for i, g in enumerate(gpus)
                        if room[g.unit_id] > 0
                        and requests[g.unit_id][0] <= 1.0 - used[g.unit_id] + _EPS]
                if fits:
                    free, _, gpu = min(fits, key=lambda f: (f[0], f[1]))  # tightest, then first
                    asked, compute, memory = requests[gpu.unit_id]
                    out.append(Assignment(stage, gpu.unit_id, (
                        f"GPU share: request {asked:.2f} (compute {compute:.2f}, memory "
                        f"{memory:.2f}), best fit {free:.2f} free of 1.00 -> {gpu.unit_id}")))
                    used[gpu.unit_id] += asked
                    room[gpu.unit_id] -= 1
                    continue
                smallest = min((r[0] for r in requests.values()), default=None)
                if smallest is not None and smallest <= 1.0 + _EPS and not self.cpu_fallback:
                    self.last_waiting[stage_key(stage)] = \
                        f"request {smallest:.2f}: no gpu has that fraction free"
                    continue  # a pending request: it waits for a fraction to free up
                why = ("no gpu on this node" if smallest is None else
                       f"request {smallest:.2f} fits no gpu even empty" if smallest > 1.0 + _EPS
                       else f"request {smallest:.2f}: no gpu fraction free")
            core = next((c for c in cores if room[c.unit_id] > 0), None)
            if core is None:
                self.last_waiting[stage_key(stage)] = f"{why}, no free core"
                continue
            room[core.unit_id] -= 1
            out.append(Assignment(stage, core.unit_id,
                                  f"GPU share: {why}, FCFS first free core -> {core.unit_id}"))
        return out
