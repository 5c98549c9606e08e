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

Nothing non-finite or implausible is learned from (refused, counted in ``refused`` per reason,
no other effect): a call time that is not a number, not finite, <= 0 or outside 100 ns .. 1 h
(:func:`~interference.executor.batch_sizer.check_ms`); a co-run rate that is not a finite number
> 0, or outside [:data:`MIN_CORUN_RATE`, :data:`MAX_CORUN_RATE`] against a measured baseline. A
rate of 0 reaches the scheduler only from :meth:`CoRunLearner.out_of_memory` (a CUDA
out-of-memory error the executor caught): never from a number that happens to be 0 or below.
Alone baselines are medians of the recent samples, so one stalled alone call cannot move them;
per-name tables keep at most :data:`~interference.executor.batch_sizer.MAX_KEYS` keys.

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
import math
import numbers
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol

from interference.executor.batch_sizer import MAX_KEYS, Lru, RunningMedian, check_ms, \
    check_number
from workload.model import ComputingUnit, Stage

__all__ = ["MIN_OVERLAP_FRACTION", "MIN_CORUN_RATE", "MAX_CORUN_RATE", "BASELINE_WINDOW",
           "CoRun", "CoRunTracker", "AloneBaseline", "CostBaseline", "CoRunLearner"]

log = logging.getLogger(__name__)

#: A stage type counts as a co-runner of a stage when they overlapped for at least this share
#: of the stage's elapsed time: a partner that only brushed its start or end did not slow it.
MIN_OVERLAP_FRACTION = 0.25
#: The slowest co-run rate (alone / co-run time) believed against a measured baseline: 100 times
#: slower next to ONE partner type is a stall (a preempted or suspended host, a GC pause), not
#: interference; believed, it would mark a pair as unable to co-run. 0 is the OOM path's.
MIN_CORUN_RATE = 0.01
#: The fastest believed: a co-run measured more than twice as fast as alone says the baseline or
#: the clock is wrong. Rates in (1, 2] are timing noise and reach the scheduler as 1.
MAX_CORUN_RATE = 2.0
#: Alone samples per (stage, unit kind) the baseline's median ratio is over.
BASELINE_WINDOW = 20


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
    by the median measured-alone / estimate ratio of each (stage, unit kind) over its last
    ``window`` samples (a median: one hour-long alone call among 10 ms ones does not move it;
    a mean over all samples, before, moved it by orders of magnitude). ``refused``: alone
    times refused, per reason."""

    def __init__(self, costs, repeats: int = 1, window: int = BASELINE_WINDOW) -> None:
        self.costs = costs
        self.repeats = repeats
        self.window = window
        self.refused: Counter[str] = Counter()
        self._ratio: Lru = Lru(MAX_KEYS)  # (stage, kind) -> RunningMedian of alone / estimate
        self._seen: Lru = Lru(MAX_KEYS)   # (stage, kind) whose first run was skipped

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
        ratio = self._ratio.get((stage.stage, unit.kind))
        scale = ratio.value if ratio is not None and ratio.count else 1.0
        return self.estimate_ms(stage.stage, stage.input_size, unit) * scale

    def measured(self, stage: Stage, unit: ComputingUnit) -> bool:
        ratio = self._ratio.get((stage.stage, unit.kind))
        return ratio is not None and ratio.count > 0

    def add_alone(self, stage: Stage, unit: ComputingUnit, elapsed_ms: float) -> None:
        number, why = check_ms(elapsed_ms)
        ratio = None
        if why is None:
            ratio, why = check_number(number / self.estimate_ms(stage.stage, stage.input_size,
                                                                unit))
        if why is not None:  # refused before the first-run skip is spent
            self.refused[why] += 1
            return
        key = (stage.stage, unit.kind)
        if key not in self._seen:  # the first run of a stage pays one-off costs (lazy init)
            self._seen.touch(key, lambda: True)
            return
        self._ratio.touch(key, lambda: RunningMedian(self.window)).add(ratio)


def check_time(value) -> tuple[float | None, str | None]:
    """A clock reading as a finite float, or ``(None, reason)`` (see check_number)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None, "non-numeric"
    number = float(value) if -1e300 < value < 1e300 else math.inf  # also NaN and huge ints
    return (number, None) if math.isfinite(number) else (None, "non-finite")


class CoRunLearner:
    """Alone samples and co-run rates from finished calls; GPU co-runs to the scheduler.

    ``baseline``: an :class:`AloneBaseline`; ``scheduler``: the node scheduler whose
    ``observe_corun`` learns (None: learn nothing there); ``warn(key, message)``: how a failing
    scheduler is reported (once per key). :meth:`learn` runs on the dispatcher thread;
    :meth:`slowdowns` and :meth:`refused_counts` (what was not learned from, per reason; see
    the module doc) may be read from any thread.
    """

    def __init__(self, baseline: AloneBaseline, scheduler=None,
                 warn: Callable[[str, str], None] | None = None) -> None:
        self.baseline = baseline
        self.scheduler = scheduler
        self.tracker = CoRunTracker()
        self._warn = warn or (lambda key, message: log.warning("%s", message))
        self._lock = threading.Lock()
        self._learned: Lru = Lru(MAX_KEYS)  # (stage, partners, kind) -> [sum, n]
        self.refused: Counter[str] = Counter()

    def _refuse(self, why: str) -> None:
        with self._lock:
            self.refused[why] += 1

    def refused_counts(self) -> dict[str, int]:
        """A copy of ``refused`` (reason -> calls or rates refused), for feedback / metrics."""
        with self._lock:
            return dict(self.refused)

    def learn(self, stage: Stage, unit: ComputingUnit, start: float, end: float,
              run: CoRun) -> None:
        """A call of ``stage`` ran from ``start`` to ``end`` (perf_counter s) on ``unit``."""
        (start, why_start), (end, why_end) = check_time(start), check_time(end)
        why = why_start or why_end
        elapsed_ms = None
        if why is None:
            elapsed_ms, why = check_ms((end - start) * 1000.0)
        if why is not None:
            self._refuse(f"elapsed-{why}")
            return
        if not run.node:  # ran with nothing else on the node: an alone sample
            self.baseline.add_alone(stage, unit, elapsed_ms)
            return
        floor = MIN_OVERLAP_FRACTION * elapsed_ms / 1000.0
        partners = tuple(sorted(t for t, s in run.node.items() if s >= floor))
        if not partners:
            return  # overlapped, but too little to call it a co-run or alone
        measured = self.baseline.measured(stage, unit)
        # Against an estimate (not measured) a rate is only reported, never learned by the
        # scheduler, and its size says more about the estimate than the co-run: only a
        # non-number is refused there; against a measured baseline, the plausible range too.
        rate, why = check_number(self.baseline.alone_ms(stage, unit) / elapsed_ms)
        if why is None and measured and not MIN_CORUN_RATE <= rate <= MAX_CORUN_RATE:
            why = "implausible"
        if why is not None:
            self._refuse(f"rate-{why}")
            return
        with self._lock:
            stats = self._learned.touch((stage.stage, partners, unit.kind), lambda: [0.0, 0])
            stats[0] += rate
            stats[1] += 1
        if unit.kind == "gpu" and measured:
            # The scheduler learns from measured baselines only: estimates (the cost model's
            # K80-relative guesses, a user stage's neutral prior) are far from a GPU's real speed.
            same_gpu = [t for t, s in run.unit.items() if s >= floor]
            if len(same_gpu) == 1:
                self._send(stage.stage, same_gpu[0], unit.model, min(1.0, rate))

    def out_of_memory(self, stage: str, unit: ComputingUnit, run: CoRun | None) -> None:
        """A call ran out of GPU memory: next to exactly one partner type, that pair cannot
        co-run (rate 0). The one way a 0 reaches the scheduler: the executor calls this only
        for an error it identified as a CUDA out-of-memory."""
        partners = set(run.unit) if run is not None else set()
        if len(partners) == 1:
            self._send(stage, partners.pop(), unit.model, 0.0)

    def observe(self, stage: str, partner: str, gpu_model: str, rate: float) -> None:
        """A measured co-run ``rate`` (alone / co-run time) of ``stage`` next to ``partner``
        for the scheduler: refused and counted unless a finite number in [MIN_CORUN_RATE,
        MAX_CORUN_RATE] (0 or below is not an OOM: that is :meth:`out_of_memory`); above 1
        sent as 1."""
        number, why = check_number(rate)
        if why is None and not MIN_CORUN_RATE <= number <= MAX_CORUN_RATE:
            why = "implausible"
        if why is not None:
            self._refuse(f"rate-{why}")
            return
        self._send(stage, partner, gpu_model, min(1.0, number))

    def _send(self, stage: str, partner: str, gpu_model: str, rate: float) -> None:
        if self.scheduler is None:
            return
        try:
            self.scheduler.observe_corun(stage, partner, gpu_model, rate)
        except Exception as exc:  # noqa: BLE001 - learning is best effort, running is not
            self._warn(f"observe:{type(exc).__name__}",
                       f"scheduler {self.scheduler!r} could not learn a co-run ({exc})")

    def slowdowns(self) -> dict:
        """``{(stage, partner types, unit kind): {"mean_rate", "slowdown", "count"}}``."""
        with self._lock:
            return {key: {"mean_rate": total / n,
                          "slowdown": n / total if total else float("inf"), "count": int(n)}
                    for key, (total, n) in self._learned.items()}
