"""IAWP: the paper's interference-aware node scheduler, and our slowdown-aware variant.

The paper's rules (Zhang, Geng & Ma 2021), at every scheduling instant on one node:

1. Each GPU has a priority queue of fixed length ``queue_length`` (open point: 4). The queues
   are filled with the ready GPU-capable stages of the LARGEST predicted speed-up (GPU over CPU),
   dealt out over the GPUs in turn.
2. The priority of a queued stage is 1 / (mean cosine similarity between its GPU-metric vector
   and those of the stages running on that GPU); zero or negative similarity counts as "no
   interference" (highest priority). A GPU launches its highest-priority queued stage when it has
   room and its GPU-memory utilisation is under ``gpu_memory_threshold`` (open: 0.9). (GPU
   utilisation in this simulator is 1 as soon as anything runs, so the "utilisation under a
   threshold" rule is expressed as the GPU's co-run capacity.)
3. An idle CPU core takes the ready stage of the SMALLEST predicted speed-up among the stages not
   queued for a GPU (CPU-only stages have speed-up 0, so they go first).

``interference="slowdown"`` (ours, beyond the paper): the priority of a queued stage is its
predicted throughput next to what already runs on that GPU, from an :class:`InterferenceModel`
pre-trained on the TRAINING half of Gavel's job types and updated online from the slowdowns the
node observes (``observe_corun``); a stage is launched next to a running one only when the
predicted combined throughput of the pair is at least ``min_combined_throughput`` (sharing must
beat taking turns), else it waits for the GPU to free up.

Example::

    >>> scheduler = IawpScheduler()                      # the paper's rules
    >>> learned = IawpScheduler(interference="slowdown")  # ours
"""

from __future__ import annotations

from collections.abc import Sequence

from interference.schedulers._checks import can_run, free_slots, ready_order
from interference.schedulers.mystic import cosine
from interference.schedulers.pats import PatsScheduler
from workload.model import Assignment, ComputingUnit, Stage

__all__ = ["IawpScheduler"]


class IawpScheduler(PatsScheduler):
    """PATS's speed-up prediction (``speedup``), with the paper's GPU queues on top."""

    name = "iawp"

    def __init__(self, costs=None, seed: int = 0, queue_length: int = 4,
                 gpu_memory_threshold: float = 0.9, interference: str = "cosine",
                 min_combined_throughput: float = 1.0, interference_model=None):
        super().__init__(costs, seed)
        if interference not in ("cosine", "slowdown"):
            raise ValueError(f"interference must be 'cosine' or 'slowdown', got {interference!r}")
        if queue_length < 1:
            raise ValueError("queue_length must be at least 1")
        self.queue_length = queue_length
        self.gpu_memory_threshold = gpu_memory_threshold
        self.interference = interference
        self.min_combined_throughput = min_combined_throughput
        self._model = interference_model
        self.observed = 0
        if interference == "slowdown":
            self.name = "iawp-slowdown"

    # -- predictions --------------------------------------------------------------------------
    @property
    def model(self):
        if self._model is None:
            from interference.slowdown import InterferenceModel
            from workload.traces.gavel import load_or_generate_colocation
            # Pre-trained on the training half only (fit_table drops the ground-truth half).
            self._model = InterferenceModel("matrix_factorization").fit_table(
                load_or_generate_colocation(), seed=self.seed)
        return self._model

    def _priority(self, stage: Stage, gpu: ComputingUnit) -> tuple[float, bool, str]:
        """(priority, may launch now, why)."""
        if not gpu.running:
            return float("inf"), True, "idle GPU"
        if self.interference == "cosine":
            profile = self.costs.stage(stage.stage).gpu_profile
            sims = [cosine(profile, self.costs.stage(r).gpu_profile) for r in gpu.running]
            mean = sum(sims) / len(sims)
            if mean <= 0:
                return float("inf"), True, "no similarity to what runs"
            return 1.0 / mean, True, f"similarity {mean:.2f}"
        gpu_type = gpu.model
        own = 1.0
        combined = 0.0
        for partner in gpu.running:
            mine = self.model.predict_throughput(stage.stage, partner, gpu_type)
            theirs = self.model.predict_throughput(partner, stage.stage, gpu_type)
            own *= mine
            combined = max(combined, mine + theirs)
        ok = combined >= self.min_combined_throughput
        return own, ok, f"predicted throughput {own:.2f}, pair {combined:.2f}"

    def observe_corun(self, stage: str, partner: str, gpu_model: str,
                      measured_rate: float) -> None:
        if self.interference != "slowdown":
            return
        self.observed += 1
        self.model.observe(stage, partner, gpu_model, min(1.0, max(1e-3, measured_rate)))  # 0: OOM

    # -- the rules ----------------------------------------------------------------------------
    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        ordered = ready_order(ready)
        speedups = {id(s): self.speedup(s, units) for s in ordered}
        # Every GPU keeps a queue (the paper's fixed-length queues), full or not: the stages in
        # them wait for a GPU rather than fall back to a core.
        gpus = [u for u in units if u.kind == "gpu"]
        assignments: list[Assignment] = []
        taken: set[int] = set()
        queued: set[int] = set()
        if gpus:
            # Rule 1: GPU queues take the largest predicted speed-ups, dealt out in turn.
            candidates = sorted((s for s in ordered if s.gpu_capable),
                                key=lambda s: -speedups[id(s)])
            queues: dict[str, list[Stage]] = {g.unit_id: [] for g in gpus}
            for i, stage in enumerate(candidates[:self.queue_length * len(gpus)]):
                queues[gpus[i % len(gpus)].unit_id].append(stage)
                queued.add(id(stage))
            # Rule 2: each GPU launches its highest-priority queued stage(s) while it has room.
            for gpu in gpus:
                running = list(gpu.running)
                room = free_slots(gpu) if gpu.memory_util < self.gpu_memory_threshold else 0
                queue = queues[gpu.unit_id]
                used_mb = gpu.memory_util * gpu.memory_mb
                while room > 0 and queue:
                    view = ComputingUnit(gpu.unit_id, "gpu", gpu.speed, gpu.model,
                                         tuple(running), gpu.capacity)
                    # Only stages whose predicted device memory fits under the threshold.
                    fitting = [s for s in queue if not gpu.memory_mb or used_mb
                               + self.costs.gpu_memory_mb(s.stage, s.input_size)
                               <= self.gpu_memory_threshold * gpu.memory_mb]
                    if not fitting:
                        break
                    scored = [(self._priority(s, view), i, s) for i, s in enumerate(fitting)]
                    (priority, ok, why), _, best = max(
                        scored, key=lambda item: (item[0][0], -item[1]))
                    if not ok:
                        break  # sharing would not beat taking turns: wait for the GPU
                    queue.remove(best)
                    used_mb += self.costs.gpu_memory_mb(best.stage, best.input_size)
                    taken.add(id(best))
                    running.append(best.stage)
                    room -= 1
                    assignments.append(Assignment(
                        best, gpu.unit_id, f"IAWP: speed-up {speedups[id(best)]:.1f}, {why} "
                                           f"-> {gpu.unit_id}"))
        # Rule 3: idle cores take the smallest speed-ups among the stages no GPU queue holds.
        cores = [u for u in units if u.kind == "cpu" and free_slots(u) > 0]
        rest = sorted((s for s in ordered if id(s) not in taken and id(s) not in queued),
                      key=lambda s: speedups[id(s)])
        for core, stage in zip(cores, rest):
            if can_run(stage, core):
                assignments.append(Assignment(
                    stage, core.unit_id,
                    f"IAWP: smallest speed-up {speedups[id(stage)]:.1f} -> idle {core.unit_id}"))
        return assignments
