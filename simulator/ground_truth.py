"""The simulator's hidden truth: what a stage really costs, and how co-running stages on one GPU
slow each other. Policies never see this module's numbers, only ``workload.estimates``.

- True stage time = the public estimate x a per-(task, stage) lognormal factor (seeded).
- Co-location on a GPU: the two stages progress at Gavel's measured normalised throughputs of
  their mapped job types on the measured GPU type that stands in for this GPU model
  (``calibration.yaml``: stage_to_gavel_job, gpu_models.*.interference_from). A measured
  ``[0, 0]`` pair cannot co-run: the later launch fails (out of memory). Co-location tables are
  keyed by GPU model, not speed: a GPU model the calibration does not know (say an ``h200``
  given only by its spec) co-locates like the calibration's reference GPU (``reference_gpu``),
  the same model whose per-stage speed profile it borrows (``workload.estimates``).
- Without the Gavel data a generated table of the same shape is used (and the run says so).
"""

from __future__ import annotations

import math
import random
from functools import lru_cache

from workload.estimates import CostModel
from workload.traces.records import JobKey

__all__ = ["GroundTruth"]


class GroundTruth:
    """Hidden per-stage noise and co-location rates of one run (see the module docstring).

    Example::

        truth = GroundTruth(CostModel(), seed=1)
        truth.corun_rates("face_encoding", "frame_difference", "v100")  # -> (rate, rate)
    """

    def __init__(self, costs: CostModel, seed: int, colocation="default",
                 noise_sigma: float | None = None):
        self.costs = costs
        self.seed = seed
        cal = costs.calibration
        self.noise_sigma = float(cal.simulation["service_noise_sigma"] if noise_sigma is None
                                 else noise_sigma)
        if colocation == "default":
            from workload.traces.gavel import load_or_generate_colocation
            colocation = load_or_generate_colocation()
        self.table = colocation
        self.source = getattr(colocation, "source", "none")
        self._jobs = {s: c.gavel_job for s, c in cal.stages.items() if c.gavel_job}
        self._known = set()
        if colocation is not None:
            for gpu_type in colocation.gpu_types:
                self._known.update((gpu_type, j.model) for j in colocation.jobs(gpu_type)
                                   if j.scale == 1)
        self._fallback = self._synthetic_jobs() if not self._mapped_jobs_present() else {}

    def _mapped_jobs_present(self) -> bool:
        return self.table is not None and all(("v100", job) in self._known
                                              for job in self._jobs.values())

    def _synthetic_jobs(self) -> dict[str, str]:
        """Generated tables name jobs differently: map stages onto them in a fixed order, the
        jobs that can co-run with the most others first.

        Why: the calibration maps its stages onto small Gavel jobs, which nearly always co-run
        (2 of the 66 stage pairs cannot, on a K80 only), while a generated table makes about
        two thirds of *all* its pairs infeasible, as Gavel's whole table is. Taken in name
        order, 29 of the 66 stage pairs could not co-run on any GPU, so a machine without the
        data simulated a different cluster (schedulers that co-run stages retried for ever)."""
        if self.table is None:
            return {}
        gpu = self.table.gpu_types[0]
        names = sorted({j.model for j in self.table.jobs(gpu) if j.scale == 1})
        feasible = {a: sum(self.table.feasible(a, b, gpu) for b in names
                           if (JobKey(a, 1), JobKey(b, 1)) in self.table.colocated[gpu])
                    for a in names}
        names.sort(key=lambda name: (-feasible[name], name))
        return {stage: names[i % len(names)] for i, stage in enumerate(sorted(self._jobs))}

    def noise(self, task_id: str, stage: str) -> float:
        """Hidden multiplicative deviation of this stage's true time from the estimate."""
        if self.noise_sigma == 0:
            return 1.0
        rng = random.Random(f"{self.seed}/{task_id}/{stage}")
        return math.exp(rng.gauss(0.0, self.noise_sigma) - self.noise_sigma ** 2 / 2)

    def _job(self, stage: str) -> str | None:
        return self._fallback.get(stage) or self._jobs.get(stage)

    @lru_cache(maxsize=4096)
    def corun_rates(self, stage: str, partner: str, gpu_model: str) -> tuple[float, float]:
        """(rate of ``stage``, rate of ``partner``) when sharing a GPU of ``gpu_model``; (0, 0)
        means they cannot co-run. Unmapped stages co-run as two time-sliced halves."""
        source_type = self.interference_source(gpu_model)
        a, b = self._job(stage), self._job(partner)
        if self.table is None or a is None or b is None or source_type not in self.table.gpu_types:
            return (0.5, 0.5)
        try:
            return tuple(self.table.normalized(a, b, source_type))
        except KeyError:
            return (0.5, 0.5)

    def interference_source(self, gpu_model: str) -> str:
        """The measured GPU type whose co-location table stands in for ``gpu_model``; an unknown
        model uses the reference GPU's (see the module docstring).

        >>> from workload.estimates import CostModel
        >>> truth = GroundTruth(CostModel(colocation=None), 0, colocation=None)
        >>> truth.interference_source("v100"), truth.interference_source("h200")
        ('v100', 'k80')
        """
        models = self.costs.calibration.gpu_models
        entry = models.get(gpu_model) or models[self.costs.reference_gpu]
        return entry["interference_from"]

    def max_combined_gain(self, gpu_model: str) -> float:
        """Best combined co-run throughput among the mapped stages on this GPU (>= 1)."""
        stages = sorted(self._jobs)
        best = 1.0
        for i, s in enumerate(stages):
            for t in stages[i:]:
                best = max(best, sum(self.corun_rates(s, t, gpu_model)))
        return best
