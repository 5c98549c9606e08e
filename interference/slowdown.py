"""Predicted co-location slowdown of a stage on a GPU, learned from (job, partner) measurements.

Beyond the paper (which ranks GPU-queue entries by profile similarity, kept here as
:func:`cosine_priority`): :class:`InterferenceModel` predicts how much slower a stage runs next
to given co-runners on a device type, with any completion model of ``interference.ncf``.

- One square (job, partner) matrix per measured GPU type: entry = the job's throughput while
  sharing the GPU with the partner / its throughput alone ("normalised throughput", in [0, 1]).
- Pre-training uses ONLY the training half of Gavel's job types: the 11 types that
  ``calibration.yaml`` (``stage_to_gavel_job``) maps to stages are the simulator's hidden ground
  truth and are refused (:class:`GroundTruthLeak`). Stages then enter online: each slowdown
  observed while running (:meth:`InterferenceModel.observe`) is recorded in a spare row and
  column and learned with the completion model's ``online_update`` (plain SGD for the torch
  models, as the paper updates its NCF).
- What it learns from (:meth:`InterferenceModel.observe`): a rate must be a real number (not a
  bool or text), finite, > 0 and at most :data:`MAX_PLAUSIBLE_RATE`; anything else raises
  :class:`ObservationRefused` and changes nothing (no row claimed, nothing learned). A rate
  under :data:`FAR_BELOW` x the pair's current prediction (a stalled call, not interference)
  is held aside until a second one for that pair confirms it: learned alone, it would stop
  the pair from co-running for good, and then nothing would ever measure it again. A launch
  that failed for lack of memory (:meth:`InterferenceModel.observe_out_of_memory`) is not a
  timing and is learned at once.
- ``slowdown = 1 / predicted normalised throughput`` (>= 1 when sharing costs throughput). The
  throughput is floored at ``min_throughput`` (default 0.05, slowdown <= 20) so a pair the model
  believes barely runs gives a large finite number. Several co-runners: the pairwise slowdowns
  are MULTIPLIED (contention from each partner taken as independent; Gavel measured pairs only).
- A stage with no observation on that GPU type yet gets the partner's mean over the jobs observed
  with it (what a typical job suffered next to that partner), else the global mean.
- Device types map to measured GPU types through ``calibration.yaml``'s
  ``gpu_models.*.interference_from`` (public; e.g. t4 -> v100), or ``device_map``.

Example::

    >>> from workload.traces.gavel import load_gavel                    # doctest: +SKIP
    >>> model = InterferenceModel("matrix_factorization").fit_table(load_gavel())  # doctest: +SKIP
    >>> model.observe("face_encoding", "A3C", "v100", measured_rate=0.8)  # doctest: +SKIP
    >>> model.predict("face_encoding", ["A3C"], "v100")                   # doctest: +SKIP
    1.25...
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from interference.ncf import COMPLETION_MODELS, CompletionModel, make_completion_model
from interference.schedulers.mystic import cosine
from interference.stdm import STDM
from workload.limits import finite_real

__all__ = ["InterferenceModel", "GroundTruthLeak", "ObservationRefused", "ground_truth_jobs",
           "cosine_priority", "check_rate", "DEFAULT_GPU_TYPES", "CANNOT_CORUN_RATE",
           "MAX_PLAUSIBLE_RATE", "FAR_BELOW"]

#: The GPU types Gavel measured (scale-1 jobs used).
DEFAULT_GPU_TYPES = ("k80", "p100", "v100")
#: What a pair that cannot co-run (a launch that ran out of memory) is learned as: the matrix
#: holds rates, and 0 has none (``observe`` refuses it); 1e-3 is far under any measured pair
#: (Gavel's lowest normalised throughput is about 0.09) and under ``min_throughput``.
CANNOT_CORUN_RATE = 1e-3
#: The largest co-run rate (alone time / co-run time) taken as a measurement: above 1 is the
#: alone estimate's own noise (the simulator's measured rates reach about 1.6) and is learned as
#: 1; ten times faster while sharing says the alone baseline is wrong, not that sharing helps.
MAX_PLAUSIBLE_RATE = 10.0
#: A rate under this share of the pair's current prediction is held aside until a second one
#: confirms it (one stalled call at rate 2.8e-6 stopped a pair for good). The simulator's
#: measured rates never came under 0.29 x the prediction (six 300-task runs), so on plausible
#: data nothing is held and the results are those of the model without the guard.
FAR_BELOW = 0.1


class ObservationRefused(ValueError):
    """A co-run observation the model did not learn from; nothing was changed. ``reason``: a
    short key to count refusals by (``"rate"``, ``"no_spare_row"``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def check_rate(rate) -> float:
    """``rate`` as a float if it is a plausible measured co-run rate: a real number (a bool
    or a text is not), finite, > 0 and at most :data:`MAX_PLAUSIBLE_RATE`; else
    :class:`ObservationRefused` (reason ``"rate"``)."""
    value = finite_real(rate)   # None for bools, text, NaN and inf; 10**400 clamps
    if value is None or not 0.0 < value <= MAX_PLAUSIBLE_RATE:
        raise ObservationRefused("rate", f"measured rate must be a number in (0, "
                                         f"{MAX_PLAUSIBLE_RATE:g}], got {repr(rate)[:40]}")
    return value


class GroundTruthLeak(ValueError):
    """Training data contains a job type of the simulator's hidden ground-truth half."""


def _calibration(calibration=None):
    if calibration is None:
        from workload.estimates import load_calibration
        calibration = load_calibration()
    return calibration


def ground_truth_jobs(calibration=None) -> frozenset[str]:
    """Gavel job types (model names) behind the simulator's stages: ``stage_to_gavel_job`` of
    ``calibration.yaml``. Interference models must never train on them."""
    return frozenset(_calibration(calibration).raw["stage_to_gavel_job"].values())


def cosine_priority(profile: Sequence[float] | None, running: Iterable[Sequence[float] | None],
                    *, min_similarity: float = 1e-3) -> float:
    """The paper's GPU-queue priority: 1 / mean cosine similarity of ``profile`` (a stage's GPU
    metrics) to the profiles of the stages already running on that GPU.

    Guards: cosine with a zero or missing vector is 0 (``mystic.cosine``); a mean similarity
    at or below ``min_similarity`` (zero, negative, or nothing running) counts as
    ``min_similarity``, so the priority is at most ``1 / min_similarity`` (1000) and never
    infinite or negative.

    Example::

        >>> cosine_priority([1, 0], [[1, 0]]), cosine_priority([1, 0], [[0, 1]])
        (1.0, 1000.0)
    """
    if not min_similarity > 0:
        raise ValueError(f"min_similarity must be positive, got {min_similarity}")
    sims = [cosine(profile, other) for other in running]
    mean = sum(sims) / len(sims) if sims else 0.0
    return 1.0 / max(mean, min_similarity)


def _name(job) -> str:
    """A row key: Gavel ``JobKey``/(model, scale) -> model name; strings unchanged."""
    if isinstance(job, tuple) and len(job) == 2:
        return str(job[0])
    return str(job)


class _GpuMatrix:
    """One GPU type: row/column names (training jobs, then stages as they appear), the
    completion model, its completed matrix cached for fast lookups, and the far-low rates held
    aside per (row, column) cell until confirmed (at most one per cell: bounded)."""

    def __init__(self, names: list[str], spare: int, model: CompletionModel) -> None:
        self.names = list(names)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.capacity = len(self.names) + spare
        self.model = model
        self.completed: np.ndarray | None = None
        self.held: dict[tuple[int, int], float] = {}

    def claim(self, names: Sequence[str]) -> list[str]:
        """Rows for every name in ``names`` (new ones appended in order); returns the names it
        added. All or none: with too few spare rows left it refuses before claiming any."""
        new = list(dict.fromkeys(n for n in names if n not in self.index))
        if len(self.names) + len(new) > self.capacity:
            raise ObservationRefused("no_spare_row", f"no spare row left for {new[0]!r} "
                                     f"(capacity {self.capacity}); build the InterferenceModel "
                                     "with more spare_rows")
        for name in new:
            self.index[name] = len(self.names)
            self.names.append(name)
        return new

    def release(self, added: Sequence[str]) -> None:
        """Give back the rows :meth:`claim` just added (a failed update learns nothing)."""
        for name in reversed(added):
            if self.names and self.names[-1] == name:
                self.names.pop()
                del self.index[name]


class InterferenceModel:
    """Slowdown of a stage next to co-runners on a device type, from a completion model.

    ``model``: a name in ``interference.ncf.COMPLETION_MODELS`` (default the paper's NCF);
    ``model_settings``: overrides of its settings; ``spare_rows``: rows (and columns) reserved
    per GPU type for stages first seen online; ``min_throughput``: floor of the predicted
    normalised throughput; ``device_map``: device type -> measured GPU type (default from the
    calibration); ``online_steps``: SGD steps per observation (None: the model's default).
    """

    def __init__(self, model: str = "paper_ncf", *, model_settings: Mapping | None = None,
                 spare_rows: int = 32, min_throughput: float = 0.05,
                 device_map: Mapping[str, str] | None = None, online_steps: int | None = None,
                 calibration=None) -> None:
        if model not in COMPLETION_MODELS:
            raise ValueError(f"unknown completion model {model!r}; known: "
                             f"{', '.join(sorted(COMPLETION_MODELS))}")
        if not 0 < min_throughput <= 1:
            raise ValueError(f"min_throughput must be in (0, 1], got {min_throughput}")
        self.model_name = model
        self.model_settings = dict(model_settings or {})
        self.spare_rows = int(spare_rows)
        self.min_throughput = float(min_throughput)
        self.online_steps = online_steps
        cal = _calibration(calibration)
        self.ground_truth = ground_truth_jobs(cal)
        self.device_map = dict(device_map) if device_map is not None else {
            name: spec["interference_from"] for name, spec in cal.gpu_models.items()}
        self.gpus: dict[str, _GpuMatrix] = {}
        #: far-low rates "held" aside, later "confirmed" (learned) or "dropped" (a plausible
        #: rate of that pair came first)
        self.outliers: Counter[str] = Counter()

    # ------------------------------------------------------------------ training
    def fit_matrix(self, gpu_type: str, names: Sequence, matrix: np.ndarray,
                   mask: np.ndarray, seed: int = 0) -> InterferenceModel:
        """Pre-train the ``gpu_type`` model on a square (job, partner) matrix of normalised
        throughputs over ``names`` (observed where ``mask``). Refuses ground-truth-half jobs."""
        names = [_name(n) for n in names]
        leaked = sorted(set(names) & self.ground_truth)
        if leaked:
            raise GroundTruthLeak(
                f"training matrix for {gpu_type!r} contains ground-truth-half job types "
                f"{leaked} (calibration.yaml stage_to_gavel_job): the simulator's hidden truth "
                "must not be trained on; use the other job types, or observe() while running")
        matrix = np.asarray(matrix, dtype=np.float64)
        mask = np.asarray(mask, dtype=bool)
        n = len(names)
        if len(set(names)) != n or matrix.shape != (n, n) or mask.shape != (n, n):
            raise ValueError(f"need unique names and {n}x{n} matrix and mask, got "
                             f"{matrix.shape}, {mask.shape}")
        size = n + self.spare_rows
        full = np.full((size, size), np.nan)
        full_mask = np.zeros((size, size), dtype=bool)
        full[:n, :n] = np.clip(matrix, 0.0, 1.0)
        full_mask[:n, :n] = mask
        gpu = _GpuMatrix(names, self.spare_rows,
                         make_completion_model(self.model_name, **self.model_settings))
        gpu.model.fit(full, full_mask, seed=seed)
        gpu.completed = gpu.model.complete()
        self.gpus[gpu_type] = gpu
        return self

    def fit_table(self, table, gpu_types: Iterable[str] = DEFAULT_GPU_TYPES,
                  seed: int = 0) -> InterferenceModel:
        """Pre-train from a Gavel ``ColocationTable``: scale-1 jobs of the TRAINING half only,
        observed = the feasible pairs (a [0, 0] pair has no throughput to learn)."""
        for gpu_type in gpu_types:
            jobs = [j for j in table.jobs(gpu_type)
                    if j.scale == 1 and j.model not in self.ground_truth]
            matrix = np.array([[table.normalized(a, b, gpu_type)[0] for b in jobs]
                               for a in jobs])
            mask = np.array([[table.feasible(a, b, gpu_type) for b in jobs] for a in jobs])
            self.fit_matrix(gpu_type, jobs, matrix, mask, seed=seed)
        return self

    # ------------------------------------------------------------------ online
    def gpu_type(self, device_type: str) -> str:
        """The measured GPU type whose model serves ``device_type``."""
        if device_type in self.gpus:
            return device_type
        mapped = self.device_map.get(device_type)
        if mapped in self.gpus:
            return mapped
        raise KeyError(f"no interference model for device type {device_type!r} (fitted: "
                       f"{sorted(self.gpus)}; device map: {self.device_map})")

    def observe(self, stage: str, partner: str, device_type: str, measured_rate: float,
                partner_rate: float | None = None) -> None:
        """Learn from a measured co-run: ``stage`` ran at ``measured_rate`` x its alone rate next
        to ``partner`` (``partner_rate``: the partner's, if measured). Rates above 1 are learned
        as 1. Refused (:class:`ObservationRefused`, a ValueError; nothing changed): a rate that
        :func:`check_rate` refuses (a pair that could not co-run has no rate: use
        :meth:`observe_out_of_memory`), a new name with no spare row left. A rate far under the
        pair's prediction is held until confirmed (module docstring). KeyError: no model serves
        ``device_type``."""
        gpu = self.gpus[self.gpu_type(device_type)]
        pairs = [(stage, partner, check_rate(measured_rate))]
        if partner_rate is not None:
            pairs.append((partner, stage, check_rate(partner_rate)))
        self._learn(gpu, device_type, pairs, hold=True)

    def observe_out_of_memory(self, stage: str, partner: str, device_type: str) -> None:
        """``stage`` failed to launch next to ``partner`` for lack of GPU memory: learned at
        once as :data:`CANNOT_CORUN_RATE` (a failure reported as such is no timing outlier)."""
        self._learn(self.gpus[self.gpu_type(device_type)], device_type,
                    [(stage, partner, CANNOT_CORUN_RATE)], hold=False)

    def _learn(self, gpu: _GpuMatrix, device_type: str, pairs, hold: bool) -> None:
        """One online update on the (row, column, checked rate) ``pairs``, far-low ones held."""
        added = gpu.claim([_name(n) for row, col, _ in pairs for n in (row, col)])
        cells, values = [], []
        held: dict[tuple[int, int], float] = {}
        settled: dict[tuple[int, int], str] = {}   # held cell -> "confirmed" or "dropped"
        try:
            for row, col, rate in pairs:
                cell = (gpu.index[_name(row)], gpu.index[_name(col)])
                value = min(rate, 1.0)
                if hold and value < FAR_BELOW * self.predict_throughput(row, col, device_type):
                    if cell not in gpu.held:
                        held[cell] = value   # alone it could lock the pair out: wait for another
                        continue
                    cells.append(cell)   # confirmed: the earlier one is learned too
                    values.append(gpu.held[cell])
                    settled[cell] = "confirmed"
                elif cell in gpu.held:   # a plausible rate (or a failed launch) came first
                    settled[cell] = "dropped"
                cells.append(cell)
                values.append(value)
            if cells:
                rows, cols = zip(*cells)
                gpu.model.online_update(list(rows), list(cols), values, steps=self.online_steps)
                gpu.completed = gpu.model.complete()
        except BaseException:
            gpu.release(added)   # rows of a refused update stay free (its model restored itself)
            raise
        for cell, outcome in settled.items():
            del gpu.held[cell]
            self.outliers[outcome] += 1
        gpu.held.update(held)
        if held:
            self.outliers["held"] += len(held)

    # ------------------------------------------------------------------ prediction
    def predict_throughput(self, stage: str, partner: str, device_type: str) -> float:
        """Predicted normalised throughput of ``stage`` next to ``partner`` (floored)."""
        gpu = self.gpus[self.gpu_type(device_type)]
        mask = gpu.model.mask
        row, col = gpu.index.get(_name(stage)), gpu.index.get(_name(partner))
        if row is not None and mask[row].any():
            value = gpu.completed[row, col] if col is not None else float(
                np.nanmean(gpu.model.matrix[row]))
        else:  # never observed: what jobs observed next to this partner got, else the mean
            seen = gpu.model.matrix[:, col][mask[:, col]] if col is not None else np.array([])
            value = seen.mean() if seen.size else np.nanmean(gpu.model.matrix)
        return max(float(value), self.min_throughput)

    def predict(self, stage: str, co_runners: Sequence[str], device_type: str) -> float:
        """Slowdown of ``stage`` next to ``co_runners`` on ``device_type``: the product of the
        pairwise 1 / predicted normalised throughput (1.0 when running alone)."""
        slowdown = 1.0
        for partner in co_runners:
            slowdown /= self.predict_throughput(stage, partner, device_type)
        return slowdown

    def complete(self, stdm: STDM, seed: int = 0) -> np.ndarray:
        """Complete an STDM with a fresh model of this kind: fitted on the normalised observed
        entries, returned in measured units with the observed entries kept as measured."""
        normalized, mask = stdm.normalized()
        model = make_completion_model(self.model_name, **self.model_settings)
        completed = stdm.denormalize(model.fit(normalized, mask, seed=seed).complete())
        return np.where(mask, stdm.to_numpy(), completed)
