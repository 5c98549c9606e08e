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

Both rules hold apart a pair that failed to launch together on a GPU model
(:class:`interference.schedulers.failed_pairs.FailedPairs`: a hold that starts at 30 s, doubles
on each further failure, at most 10 min, forgotten once the two are measured side by side):
a queued stage held apart from what runs on a GPU is passed over for the next one. Without it
the cosine rule launched a pair the GPU cannot hold at every scheduling instant.

What ``observe_corun`` learns from: a rate of exactly 0 is a launch that failed for lack of
memory (how the executor and the simulator report it): "cannot co-run", learned at once. A
positive rate must pass :func:`interference.slowdown.check_rate` (a finite real number, not a
bool or a text, at most 10) and name two stages the scheduler's cost model knows (the node's
operators' stages in the executor, the calibration's in the simulator), so made-up names cannot
take the spare rows a real stage needs. Anything else is refused and counted in ``refused``
(by reason), never raised and never learned: one bad record must not change where work goes.
``observed`` counts the records accepted.

Example::

    >>> scheduler = IawpScheduler()                      # the paper's rules
    >>> learned = IawpScheduler(interference="slowdown")  # ours
"""

from __future__ import annotations

import numbers
from collections import Counter
from collections.abc import Sequence

from interference.schedulers._checks import can_run, free_slots, ready_order
from interference.schedulers.failed_pairs import FailedPairs
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
        self.observed = 0                       # co-run records accepted (learned or held)
        self.refused: Counter[str] = Counter()  # reason -> co-run records refused
        self.failed_pairs = FailedPairs()       # pairs that failed to launch together
        self._now_s = 0.0                       # the last scheduling instant (observe_corun
        #                                         has no clock; a failure is reported at once)
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
        """Learn that ``stage`` ran at ``measured_rate`` x its alone speed next to ``partner``
        (0: its launch failed for lack of memory). Refused records are counted (module
        docstring), never raised: the caller runs on."""
        from interference.slowdown import (CANNOT_CORUN_RATE, ObservationRefused,
                                           check_rate)
        failed = (isinstance(measured_rate, numbers.Real) and measured_rate == 0
                  and not isinstance(measured_rate, bool))   # False is no report of a failure
        try:
            rate = None if failed else check_rate(measured_rate)
            unknown = [n for n in (stage, partner) if not self._known_stage(n)]
            if unknown:
                raise ObservationRefused("unknown_stage", f"no stage {unknown[0]!r} here")
            if not isinstance(gpu_model, str) or len(gpu_model) > 200:
                raise ObservationRefused("unknown_gpu_model", "no GPU model named")
            if failed:
                self.failed_pairs.failed(stage, partner, gpu_model, self._now_s)
            elif rate > 0:
                self.failed_pairs.succeeded(stage, partner, gpu_model)
            if self.interference != "slowdown":
                self.observed += 1
                return
            if failed:
                self.model.observe_out_of_memory(stage, partner, gpu_model)
            else:
                # below CANNOT_CORUN_RATE a co-run is as good as impossible (and would be held
                # as far below any prediction until confirmed); above 1 is the estimate's noise
                self.model.observe(stage, partner, gpu_model,
                                   min(1.0, max(CANNOT_CORUN_RATE, rate)))
        except ObservationRefused as exc:
            self.refused[exc.reason] += 1
            return
        except KeyError:   # no interference model serves this GPU model
            self.refused["unknown_gpu_model"] += 1
            return
        except ArithmeticError:   # the update diverged; the completion model restored itself
            self.refused["update_failed"] += 1
            return
        self.observed += 1

    def _known_stage(self, name) -> bool:
        """Whether ``name`` is a stage the cost model knows (only such may claim a spare row)."""
        if not isinstance(name, str):
            return False
        try:
            self.costs.stage(name)
        except Exception:  # noqa: BLE001 - any failure to describe it: not a stage we know
            return False
        return True

    # -- the rules ----------------------------------------------------------------------------
    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        self._now_s = now_s
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
                    # ... and not held apart from what runs there (a failed launch)
                    fitting = [s for s in queue if (not gpu.memory_mb or used_mb
                               + self.costs.gpu_memory_mb(s.stage, s.input_size)
                               <= self.gpu_memory_threshold * gpu.memory_mb)
                               and not self.failed_pairs.held(s.stage, running, gpu.model,
                                                              now_s)]
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
