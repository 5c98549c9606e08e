"""The node schedulers' estimates for a user operator's stages, measured on this node.

The schedulers (``interference.schedulers``) ask a cost model for a stage's time on a unit
(``cpu_ms`` / ``gpu_ms`` / ``unit_ms``), its GPU-over-CPU speed-up (``stage(name).gpu_speedup``),
its GPU profile and its GPU memory. ``workload.estimates.CostModel`` knows only the built-in
video-analytics stages; a user's stage names would raise ``KeyError`` there.
:class:`MeasuredStageCosts` answers the same questions from what this executor measured (per
stage and batch, on this node; the router's per-task costs are ``placement.measured_costs``):

- per (stage, unit kind, batch size): the running mean time of a call that ran alone on the node
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

from typing import Mapping

from interference.executor.batch_sizer import LatencyTable
from workload.estimates import StageCost
from workload.model import ComputingUnit, Stage

__all__ = ["MeasuredStageCosts"]


class MeasuredStageCosts:
    """Measured stage times for the schedulers (see the module doc).

    ``devices``: stage name -> its device ("cpu", "gpu", "any"); ``default_ms``: a call's time
    before anything was measured; ``gpu_speedup_prior``: the assumed speed-up of "gpu" stages
    until measured on both kinds; ``repeats``: the work multiplier's repeats (scales the
    default); ``window``: running-mean window.
    """

    def __init__(self, devices: Mapping[str, str], default_ms: float = 1.0,
                 gpu_speedup_prior: float = 8.0, repeats: int = 1, window: int = 20) -> None:
        self.devices = dict(devices)
        self.default_ms = float(default_ms) * repeats
        self.gpu_speedup_prior = float(gpu_speedup_prior)
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
        self.any_run.add((stage, kind), batch_size, ms)

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
            speedup = self.batch_ms(stage, "cpu", 1) / self.batch_ms(stage, "gpu", 1)
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
        key = (stage.stage, unit.kind)
        if key not in self._skipped:  # the first alone call pays one-off costs (lazy init)
            self._skipped.add(key)
            return
        self.alone.add(key, self._size_of(stage), elapsed_ms)

    def _size_of(self, stage: Stage) -> int:
        entry = self._batches.get(stage.task_id)
        return entry[2] if entry is not None else self._batch_size(stage.stage, stage.input_size)
