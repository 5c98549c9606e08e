"""Measured interference, shared by both executors: who co-ran with whom, and how much slower.

- :class:`CoRunTracker`: called by the worker threads around every stage call; it adds up, per
  partner stage type, the seconds each call overlapped with others on the whole node and on its
  own unit.
- An alone baseline (:class:`AloneBaseline`): a stage's time when nothing else runs. The
  built-in apps use :class:`CostBaseline` (the cost model's estimate, scaled by the mean
  measured-alone / estimate ratio); user operators use their measured per-batch-size times
  (:class:`~interference.executor.stage_costs.MeasuredStageCosts`).
- :class:`CoRunLearner`: turns every finished call into an alone sample (nothing else ran) or a
  co-run rate ``alone / elapsed`` per (stage, partner types, unit kind), and feeds a GPU co-run
  with one partner type to the node scheduler (``observe_corun``): how IAWP's slowdown model
  learns online.

Example::

    >>> from workload.model import ComputingUnit, Stage
    >>> class Fixed:  # a 10 ms baseline
    ...     def alone_ms(self, stage, unit): return 10.0
    ...     def measured(self, stage, unit): return True
    ...     def add_alone(self, stage, unit, elapsed_ms): pass
    >>> learner = CoRunLearner(Fixed(), scheduler=None)
    >>> run = CoRun("resize", "cpu:1", 0.0, node={"decode": 0.020})  # 20 ms next to decode
    >>> learner.learn(Stage("t1", "app", "resize", 1), ComputingUnit("cpu:1", "cpu"),
    ...               0.0, 0.020, run)
    >>> learner.slowdowns()[("resize", ("decode",), "cpu")]["mean_rate"]
    0.5
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol

from workload.model import ComputingUnit, Stage

__all__ = ["MIN_OVERLAP_FRACTION", "CoRun", "CoRunTracker", "AloneBaseline", "CostBaseline",
           "CoRunLearner"]

log = logging.getLogger(__name__)

#: A stage type counts as a co-runner of a stage when they overlapped for at least this share
#: of the stage's elapsed time: a partner that only brushed its start or end did not slow it.
MIN_OVERLAP_FRACTION = 0.25


@dataclass
class CoRun:
    """A stage call running now, and whom it overlapped with so far (seconds per partner type,
    on the whole node and on its own unit)."""

    stage: str
    unit_id: str
    start: float
    open: dict[int, float] = field(default_factory=dict)  # other run id -> overlap start
    node: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    unit: dict[str, float] = field(default_factory=lambda: defaultdict(float))


class CoRunTracker:
    """Who ran at the same time as whom. Called from worker threads; a lock keeps it
    consistent. ``begin`` / ``end`` bracket one call; ``end`` returns its :class:`CoRun`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[int, CoRun] = {}
        self._next = 0

    def begin(self, stage: str, unit_id: str) -> tuple[int, float]:
        with self._lock:
            now = time.perf_counter()
            run_id, self._next = self._next, self._next + 1
            me = CoRun(stage, unit_id, now)
            for other_id, other in self._running.items():
                other.open[run_id] = now
                me.open[other_id] = now
            self._running[run_id] = me
            return run_id, now

    @contextlib.contextmanager
    def tracking(self, stage: str, unit_id: str) -> Iterator[None]:
        """``begin`` / ``end`` around a block that is not a timed stage call (e.g. making a
        task's frames): it shows up as a partner of what overlaps it, and nothing learns from
        its own time.

        Example::

            >>> tracker = CoRunTracker()
            >>> with tracker.tracking("task_frames", "cpu:0"):
            ...     run_id, _ = tracker.begin("resize", "cpu:1")
            >>> "task_frames" in tracker.end(run_id)[1].node
            True
        """
        run_id, _ = self.begin(stage, unit_id)
        try:
            yield
        finally:
            self.end(run_id)

    def end(self, run_id: int) -> tuple[float, CoRun]:
        with self._lock:
            now = time.perf_counter()
            me = self._running.pop(run_id)
            for other_id, since in me.open.items():
                other = self._running[other_id]
                overlap = now - since
                other.open.pop(run_id)
                me.node[other.stage] += overlap
                other.node[me.stage] += overlap
                if other.unit_id == me.unit_id:
                    me.unit[other.stage] += overlap
                    other.unit[me.stage] += overlap
            return now, me


class AloneBaseline(Protocol):
    """A stage's time on a unit when nothing else runs on the node."""

    def alone_ms(self, stage: Stage, unit: ComputingUnit) -> float:
        """The best current guess (never None: an estimate stands in until measured)."""

    def measured(self, stage: Stage, unit: ComputingUnit) -> bool:
        """Whether :meth:`alone_ms` rests on this node's measurements yet."""

    def add_alone(self, stage: Stage, unit: ComputingUnit, elapsed_ms: float) -> None:
        """A call that ran with nothing else on the node took ``elapsed_ms``."""


class CostBaseline:
    """Alone times from a cost model (``costs.cpu_ms`` / ``gpu_ms``, times ``repeats``), scaled
    by the mean measured-alone / estimate ratio of each (stage, unit kind)."""

    def __init__(self, costs, repeats: int = 1) -> None:
        self.costs = costs
        self.repeats = repeats
        self._ratio: dict[tuple[str, str], list[float]] = {}  # (stage, kind) -> [sum, n, seen]

    def estimate_ms(self, stage: str, input_size: int, unit: ComputingUnit) -> float:
        """The cost model's alone time on this kind of unit, times the work multiplier."""
        estimate = None
        try:
            if unit.kind == "gpu":
                estimate = self.costs.unit_ms(stage, input_size, unit)
            if estimate is None:
                estimate = self.costs.cpu_ms(stage, input_size, unit.speed)
        except KeyError:
            estimate = 1.0
        return max(float(estimate), 1e-3) * self.repeats

    def alone_ms(self, stage: Stage, unit: ComputingUnit) -> float:
        total, n, _ = self._ratio.get((stage.stage, unit.kind), (0.0, 0, 0))
        return self.estimate_ms(stage.stage, stage.input_size, unit) * (total / n if n else 1.0)

    def measured(self, stage: Stage, unit: ComputingUnit) -> bool:
        return bool(self._ratio.get((stage.stage, unit.kind), (0, 0, 0))[1])

    def add_alone(self, stage: Stage, unit: ComputingUnit, elapsed_ms: float) -> None:
        stats = self._ratio.setdefault((stage.stage, unit.kind), [0.0, 0, 0])
        stats[2] += 1
        if stats[2] > 1:  # the first run of a stage pays one-off costs (lazy init, caches)
            stats[0] += elapsed_ms / self.estimate_ms(stage.stage, stage.input_size, unit)
            stats[1] += 1


class CoRunLearner:
    """Alone samples and co-run rates from finished calls; GPU co-runs to the scheduler.

    ``baseline``: an :class:`AloneBaseline`; ``scheduler``: the node scheduler whose
    ``observe_corun`` learns (None: learn nothing there); ``warn(key, message)``: how a failing
    scheduler is reported (once per key). :meth:`learn` runs on the dispatcher thread;
    :meth:`slowdowns` may be read from any thread.
    """

    def __init__(self, baseline: AloneBaseline, scheduler=None,
                 warn: Callable[[str, str], None] | None = None) -> None:
        self.baseline = baseline
        self.scheduler = scheduler
        self.tracker = CoRunTracker()
        self._warn = warn or (lambda key, message: log.warning("%s", message))
        self._lock = threading.Lock()
        self._learned: dict[tuple[str, tuple[str, ...], str], list[float]] = {}

    def learn(self, stage: Stage, unit: ComputingUnit, start: float, end: float,
              run: CoRun) -> None:
        """A call of ``stage`` ran from ``start`` to ``end`` (perf_counter s) on ``unit``."""
        elapsed_ms = (end - start) * 1000.0
        if elapsed_ms <= 0:
            return
        if not run.node:  # ran with nothing else on the node: an alone sample
            self.baseline.add_alone(stage, unit, elapsed_ms)
            return
        floor = MIN_OVERLAP_FRACTION * (end - start)
        partners = tuple(sorted(t for t, s in run.node.items() if s >= floor))
        if not partners:
            return  # overlapped, but too little to call it a co-run or alone
        rate = self.baseline.alone_ms(stage, unit) / elapsed_ms
        with self._lock:
            stats = self._learned.setdefault((stage.stage, partners, unit.kind), [0.0, 0])
            stats[0] += rate
            stats[1] += 1
        if unit.kind == "gpu" and self.baseline.measured(stage, unit):
            # The scheduler learns from measured baselines only: estimates (the cost model's
            # K80-relative guesses, a user stage's neutral prior) are far from a GPU's real speed.
            same_gpu = [t for t, s in run.unit.items() if s >= floor]
            if len(same_gpu) == 1:
                self.observe(stage.stage, same_gpu[0], unit.model, rate)

    def out_of_memory(self, stage: str, unit: ComputingUnit, run: CoRun | None) -> None:
        """A call ran out of GPU memory: next to exactly one partner type, that pair cannot
        co-run (rate 0)."""
        partners = set(run.unit) if run is not None else set()
        if len(partners) == 1:
            self.observe(stage, partners.pop(), unit.model, 0.0)

    def observe(self, stage: str, partner: str, gpu_model: str, rate: float) -> None:
        if self.scheduler is None:
            return
        try:
            self.scheduler.observe_corun(stage, partner, gpu_model, min(1.0, max(0.0, rate)))
        except Exception as exc:  # noqa: BLE001 - learning is best effort, running is not
            self._warn(f"observe:{type(exc).__name__}",
                       f"scheduler {self.scheduler!r} could not learn a co-run ({exc})")

    def slowdowns(self) -> dict:
        """``{(stage, partner types, unit kind): {"mean_rate", "slowdown", "count"}}``."""
        with self._lock:
            return {key: {"mean_rate": total / n,
                          "slowdown": n / total if total else float("inf"), "count": int(n)}
                    for key, (total, n) in self._learned.items()}
