"""The node schedulers' estimates for a user operator's stages, measured on this node.

The schedulers (``interference.schedulers``) ask a cost model for a stage's time on a unit
(``cpu_ms`` / ``gpu_ms`` / ``unit_ms``), its GPU-over-CPU speed-up (``stage(name).gpu_speedup``),
its GPU profile and its GPU memory. ``workload.estimates.CostModel`` knows only the built-in
video-analytics stages; a user's stage names would raise ``KeyError`` there.
:class:`MeasuredStageCosts` answers the same questions from what this executor measured (per
stage and batch, on this node; the router's per-task costs are ``placement.measured_costs``):

- per (stage, unit kind, batch size): the median time of the recent calls that ran alone on the node
  (the first alone call of each stage and kind is skipped: it pays one-off costs such as lazy
  initialisation), else of any call (co-runs included), else the affine fit across batch sizes
  (:class:`~interference.executor.batch_sizer.LatencyTable`);
- a kind never measured: the other kind's time over / times the speed-up prior
  (``gpu_speedup_prior`` for ``device="gpu"`` stages, 1 for ``"any"``); nothing measured at all:
  ``default_ms`` per call (times the work multiplier). So before the first measurement PATS and
  IAWP see GPU stages as GPU-friendly and "any" stages as indifferent, and then real numbers;
- a batch is presented to the scheduler as one stage whose ``input_size`` is its records' summed
  task sizes; the scheduler's questions carry only (stage name, input size), so the executor
  registers each batch (:meth:`register`) and the batch size is looked up by that pair (two
  batches of one stage with the same summed size: the latest one's size answers);
- no GPU profile (user stages have no profiled GPU metrics: IAWP's cosine rule then sees no
  interference; its slowdown rule learns from measured co-runs instead) and no GPU memory
  estimate (0 MB: IAWP's threshold on the GPU's measured memory use still applies).

Timings are checked before any table is touched: not a real number (None, strings, bools), not
finite (NaN, inf, an int past a float's range), <= 0, outside 100 ns .. 1 h
(:func:`~interference.executor.batch_sizer.check_ms`), a bad batch size or a stage this operator
does not have: refused, counted in ``refused`` per reason, nothing else changes (the first alone
call of a kind is skipped only when it was a good one). The per-size estimate is the median of
its last ``window`` samples, so one extreme but believable sample (a 200 ms stall among 2 ms
calls) moves no speed-up and no placement; every estimate is then > 0, so the speed-up is
always defined.

It is also the co-run learner's alone baseline (:class:`~interference.executor.corun
.AloneBaseline`). Used on the dispatcher thread only.

Example::

    >>> costs = MeasuredStageCosts({"embed": "gpu", "parse": "cpu"}, default_ms=2.0)
    >>> costs.register("b1", "embed", input_size=800, batch_size=8)
    >>> costs.cpu_ms("embed", 800), costs.gpu_ms("embed", 800, "t4")
    (2.0, 0.25)
    >>> costs.stage("embed").gpu_speedup, costs.stage("parse").gpu_speedup
    (8.0, None)
    >>> costs.add_run("embed", "cpu", 8, 20.0)   # measured on a core; GPU: over the prior
    >>> costs.cpu_ms("embed", 800), costs.gpu_ms("embed", 800, "t4"), costs.gpu_ms("parse", 1, "t4")
    (20.0, 2.5, None)
    >>> costs.cpu_ms("embed", 100)             # no batch of that size: a batch of one, fitted
    2.5
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Mapping

from interference.executor.batch_sizer import LatencyTable, check_ms, check_size, median
from workload.estimates import StageCost
from workload.model import ComputingUnit, Stage

__all__ = ["MeasuredStageCosts", "ROBUST_SAMPLES"]

#: Alone samples of a size before their own median is its estimate: a median of three is the
#: fewest that one extreme sample cannot move.
ROBUST_SAMPLES = 3


class MeasuredStageCosts:
    """Measured stage times for the schedulers (see the module doc).

    ``devices``: stage name -> its device ("cpu", "gpu", "any"); ``default_ms``: a call's time
    before anything was measured; ``gpu_speedup_prior``: the assumed speed-up of "gpu" stages
    until measured on both kinds; ``repeats``: the work multiplier's repeats (scales the
    default); ``window``: samples per size the median is over. ``refused``: timings refused,
    per reason (see the module doc).
    """

    def __init__(self, devices: Mapping[str, str], default_ms: float = 1.0,
                 gpu_speedup_prior: float = 8.0, repeats: int = 1, window: int = 20) -> None:
        self.devices = dict(devices)
        self.default_ms = float(default_ms) * repeats
        self.gpu_speedup_prior = float(gpu_speedup_prior)
        for name, value in (("default_ms", self.default_ms),
                            ("gpu_speedup_prior", self.gpu_speedup_prior)):
            if not (math.isfinite(value) and value > 0):  # a divisor of every speed-up
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        self.refused: Counter[str] = Counter()
        self.alone = LatencyTable(window)
        self.any_run = LatencyTable(window)
        self._skipped: set[tuple[str, str]] = set()
        self._batches: dict[str, tuple[str, int, int]] = {}  # batch id -> (stage, size, n)
        self._by_size: dict[tuple[str, int], str] = {}       # (stage, size) -> batch id

    # ------------------------------------------------------------------ the executor's side
    def register(self, batch_id: str, stage: str, input_size: int, batch_size: int) -> None:
        """A batch is about to be presented to the scheduler."""
        self._batches[batch_id] = (stage, int(input_size), int(batch_size))
        self._by_size[(stage, int(input_size))] = batch_id

    def forget(self, batch_id: str) -> None:
        """The batch finished (or was split): its size answers no more questions."""
        stage, size, _ = self._batches.pop(batch_id, ("", 0, 0))
        if self._by_size.get((stage, size)) == batch_id:
            del self._by_size[(stage, size)]

    def add_run(self, stage: str, kind: str, batch_size: int, ms: float) -> None:
        """A call of ``batch_size`` inputs took ``ms`` (co-runners or not)."""
        number = self._check(stage, batch_size, ms)
        if number is not None:
            self.any_run.add((stage, kind), batch_size, number)

    def _check(self, stage: str, batch_size, ms) -> float | None:
        """``ms`` as a float, or None: refused and counted (see the module doc)."""
        number, why = check_ms(ms)
        if why is None and not check_size(batch_size):
            why = "bad-size"
        if why is None and stage not in self.devices:  # could never be asked: only memory
            why = "unknown-stage"
        if why is not None:
            self.refused[why] += 1
        return number if why is None else None

    def prior(self, stage: str) -> float:
        """The assumed GPU-over-CPU speed-up of ``stage`` until it is measured."""
        return self.gpu_speedup_prior if self.devices[stage] == "gpu" else 1.0

    def batch_ms(self, stage: str, kind: str, batch_size: int) -> float:
        """Estimated time of a call of ``batch_size`` inputs of ``stage`` on a ``kind`` unit."""
        if stage not in self.devices:
            raise KeyError(f"no measurements or device for stage {stage!r}")
        own = self._measured(stage, kind, batch_size)
        if own is not None:
            return own
        other = self._measured(stage, "cpu" if kind == "gpu" else "gpu", batch_size)
        if other is None:  # nothing measured: the neutral default on a core, the prior's GPU
            return self.default_ms / self.prior(stage) if kind == "gpu" else self.default_ms
        return other / self.prior(stage) if kind == "gpu" else other * self.prior(stage)

    def _measured(self, stage: str, kind: str, n: int) -> float | None:
        alone = self.alone.samples((stage, kind), n)
        if 0 < len(alone) < ROBUST_SAMPLES:
            # One or two alone samples are no median yet: one stalled call would be the
            # estimate. Pooled with the same size's other calls (the executor adds every
            # call there too), one sample among several cannot move it.
            return median(alone + self.any_run.samples((stage, kind), n))
        estimate = self.alone.estimate((stage, kind), n)
        return estimate if estimate is not None else self.any_run.estimate((stage, kind), n)

    def _batch_size(self, stage: str, input_size: int) -> int:
        batch_id = self._by_size.get((stage, int(input_size)))
        return self._batches[batch_id][2] if batch_id is not None else 1

    # ------------------------------------------------------------------ CostModel's interface
    def stage(self, stage: str) -> StageCost:
        """What the schedulers read of a stage: its speed-up (None: CPU only); no profile."""
        if stage not in self.devices:
            raise KeyError(f"no calibration for stage {stage!r}")
        speedup = None
        if self.devices[stage] != "cpu":
            gpu = self.batch_ms(stage, "gpu", 1)
            # Estimates are > 0 by construction (checked samples, a positive default); the
            # guard keeps a future path to 0 from raising in every scheduling pass.
            speedup = self.batch_ms(stage, "cpu", 1) / gpu if gpu > 0 else self.prior(stage)
        return StageCost(stage, 0.0, 0.0, speedup, None, None)

    def cpu_ms(self, stage: str, input_size: int, cpu_speed: float = 1.0) -> float:
        return self.batch_ms(stage, "cpu", self._batch_size(stage, input_size)) / cpu_speed

    def gpu_ms(self, stage: str, input_size: int, gpu_model: str,
               speed: float | None = None) -> float | None:
        """None for CPU-only stages (as ``CostModel.gpu_ms``); every GPU model and spec speed
        alike (the measurements are this node's GPUs, at whatever speed they really run)."""
        if self.devices.get(stage) == "cpu":
            return None
        return self.batch_ms(stage, "gpu", self._batch_size(stage, input_size))

    def unit_ms(self, stage: str, input_size: int, unit: ComputingUnit) -> float | None:
        if unit.kind == "cpu":
            return self.cpu_ms(stage, input_size, unit.speed)
        return self.gpu_ms(stage, input_size, unit.model)

    def gpu_memory_mb(self, stage: str, input_size: int) -> float:
        return 0.0

    # ------------------------------------------------------------------ AloneBaseline
    def alone_ms(self, stage: Stage, unit: ComputingUnit) -> float:
        return self.batch_ms(stage.stage, unit.kind, self._size_of(stage))

    def measured(self, stage: Stage, unit: ComputingUnit) -> bool:
        return bool(self.alone.measured((stage.stage, unit.kind)))

    def add_alone(self, stage: Stage, unit: ComputingUnit, elapsed_ms: float) -> None:
        size = self._size_of(stage)
        number = self._check(stage.stage, size, elapsed_ms)
        if number is None:  # refused before the skip is spent: nothing half-written
            return
        key = (stage.stage, unit.kind)
        if key not in self._skipped:  # the first alone call pays one-off costs (lazy init)
            self._skipped.add(key)
            return
        self.alone.add(key, size, number)

    def _size_of(self, stage: Stage) -> int:
        entry = self._batches.get(stage.task_id)
        return entry[2] if entry is not None else self._batch_size(stage.stage, stage.input_size)
