"""Batch sizes from measured latency (ElasticBatch's idea, without MIG).

:class:`LatencyTable` keeps a running latency estimate per (key, batch size) and fits
``latency = a + b * n`` across the sizes measured, so a size not tried yet has a prediction.
:class:`BatchSizer` picks, per (stage, unit kind), the batch size the executor forms:

- batching off (the executor's setting, or a :class:`~workload.operators.BatchPolicy` with
  ``max_batch_size`` 1): always 1;
- no ``latency_target_ms``: the largest preferred size (Triton's dynamic batcher: the queue
  delay alone bounds the wait);
- a target: the largest preferred size whose latency meets it, measured when that size has
  ``min_samples`` measurements, else extrapolated from the affine fit. It starts at the
  smallest preferred size and grows as measurements come in: sizes more than one preferred step
  above the largest measured one are not considered (a fit through small batches says little
  about much larger ones). When no size meets the target, the smallest.

Latency is the batch call's time on its unit (every repeat included), co-runners included: it
is what a record of that batch waits for, whatever slowed it down. The estimate per size is the
median of its last ``window`` samples (:class:`RunningMedian`), so the choice follows load
while one stalled batch (a GC pause, a preempted host) cannot move it.

What is learned from, and what is refused (counted in ``refused`` per reason, nothing else
changes, the caller keeps running):

- a timing that is not a real number (strings, None, bools), not finite, <= 0, or outside
  [:data:`MIN_PLAUSIBLE_MS`, :data:`MAX_PLAUSIBLE_MS`] (100 ns .. 1 h); a batch size that is not
  an int in [1, :data:`MAX_BATCH`]; in :class:`BatchSizer`, a stage without a policy. A timing
  far above the current estimate but under an hour is NOT refused: it may be real load, and
  refusing it would lock a real change out; the median keeps one such sample from counting.
- a size not measured for :data:`STALE_AFTER` batches of its (stage, kind) is stale: its next
  sample restarts its window (what it measured then says little now), and :class:`BatchSizer`
  re-probes the smallest stale size above its choice once per ``STALE_AFTER`` batches, so a size
  held back by an old estimate is not locked out for good.
- every per-name table keeps at most :data:`MAX_KEYS` keys (least recently updated evicted) and
  :data:`MAX_SIZES` sizes per key: names come from operators and records, not from us.

Example::

    >>> from workload.operators import BatchPolicy
    >>> sizer = BatchSizer({"model": BatchPolicy((1, 2, 4, 8), latency_target_ms=10.0)},
    ...                    min_samples=1)
    >>> sizer.choose("model", "cpu")          # nothing measured: start small
    1
    >>> for n, ms in ((1, 3.0), (2, 4.0)):    # a = 2 ms, b = 1 ms per input
    ...     sizer.observe("model", "cpu", n, ms)
    >>> sizer.choose("model", "cpu")          # 4 -> 6 ms predicted; 8 is two steps away
    4
    >>> sizer.observe("model", "cpu", 4, 6.0); sizer.choose("model", "cpu")  # 8 -> 10 ms: ok
    8
"""

from __future__ import annotations

import math
import numbers
import threading
from collections import Counter, OrderedDict, deque
from typing import Callable, Hashable, Mapping

__all__ = ["LatencyTable", "BatchSizer", "RunningMedian", "Lru", "check_number", "check_ms",
           "check_size", "median", "MIN_PLAUSIBLE_MS", "MAX_PLAUSIBLE_MS", "MAX_BATCH",
           "MAX_KEYS", "MAX_SIZES", "STALE_AFTER"]

#: The longest call believed: an hour (BatchPolicy's largest latency target). A longer "call"
#: is a stalled clock, a suspended host or a unit mistake, not a latency to plan batches with.
MAX_PLAUSIBLE_MS = 3_600_000.0
#: The shortest call believed: 100 ns, less than one Python function call costs. A shorter one
#: is a broken timer or record; believed, it would make a stage look free (speed-up 10^12).
MIN_PLAUSIBLE_MS = 1e-4
#: The most inputs one call takes (BatchPolicy.MAX_BATCH_SIZE).
MAX_BATCH = 1_000_000
#: Distinct keys a per-name table keeps (the least recently updated is evicted): stage names
#: come from user operators and records; 10^5 names must not grow a table without end. 1,024
#: is far above the stages one node runs and keeps a table at about a megabyte.
MAX_KEYS = 1024
#: Batch sizes kept per key (partial batches give every size up to the largest preferred one).
MAX_SIZES = 32
#: Batches of a (stage, kind) after which a size not measured since is stale (see module doc):
#: a re-probe costs at most one batch over the target per 64, about 1.5 %.
STALE_AFTER = 64


def check_number(value) -> tuple[float | None, str | None]:
    """``(value as a float, None)`` when it is a finite real number > 0, else ``(None, reason)``
    with reason "non-numeric" (strings, None, bools), "non-finite" (NaN, inf, an int past a
    float's range) or "non-positive".

    >>> check_number(2), check_number(True), check_number(10**400), check_number(-1.0)
    ((2.0, None), (None, 'non-numeric'), (None, 'non-finite'), (None, 'non-positive'))
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None, "non-numeric"
    try:
        number = float(value)
    except OverflowError:
        return None, "non-finite"
    except (TypeError, ValueError):
        return None, "non-numeric"
    if not math.isfinite(number):
        return None, "non-finite"
    if number <= 0:
        return None, "non-positive"
    return number, None


def check_ms(value, low: float = MIN_PLAUSIBLE_MS,
             high: float = MAX_PLAUSIBLE_MS) -> tuple[float | None, str | None]:
    """:func:`check_number`, and "implausible" outside ``[low, high]`` ms."""
    number, why = check_number(value)
    if why is None and not low <= number <= high:
        return None, "implausible"
    return number, why


def check_size(n) -> bool:
    """Whether ``n`` is a batch size: an int (not a bool) in [1, :data:`MAX_BATCH`]."""
    return (not isinstance(n, bool) and isinstance(n, numbers.Integral)
            and 1 <= n <= MAX_BATCH)


class Lru(OrderedDict):
    """A dict of at most ``limit`` keys: :meth:`touch` makes a key the most recent (creating
    it with ``make()``) and evicts the least recent one past the limit (``on_evict(key)``)."""

    def __init__(self, limit: int, on_evict: Callable[[Hashable], None] | None = None) -> None:
        super().__init__()
        self.limit = limit
        self.on_evict = on_evict
        self.evicted = 0
        self.adds = 0  # LatencyTable: accepted samples under this key (the staleness clock)

    def touch(self, key: Hashable, make: Callable[[], object]):
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
            return value
        value = self[key] = make()
        while len(self) > self.limit:
            old, _ = self.popitem(last=False)
            self.evicted += 1
            if self.on_evict is not None:
                self.on_evict(old)
        return value


class RunningMedian:
    """The median of the last ``window`` samples, and how many were ever added.

    A median, not a mean: one extreme sample cannot move the median of three or more at all,
    with no outlier threshold to tune (a winsorised mean still moves by its clip bound, which
    is enough to cross a target set near the estimate); a real change of speed moves it once it
    fills half the window. On steady measurements it is the mean it replaced, and with a window
    of two it is their mean. A list, not a deque: about 200 bytes for 20 samples.
    """

    __slots__ = ("window", "recent", "count", "value", "last")

    def __init__(self, window: int) -> None:
        self.window = window
        self.recent: list[float] = []
        self.count = 0
        self.value = 0.0
        self.last = 0  # the owner's clock at the latest sample

    def add(self, sample: float, restart: bool = False) -> None:
        if restart:
            self.recent.clear()
        self.recent.append(sample)
        if len(self.recent) > self.window:
            del self.recent[0]
        self.count += 1
        self.value = median(self.recent)


def median(values) -> float:
    """The median of a non-empty collection (the mean of the middle two of an even count)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


class LatencyTable:
    """Median latency (ms) per (key, batch size), and an affine fit per key.

    ``window``: samples per size the median is over; ``min_samples``: samples before a size
    counts as measured; ``stale_after``: accepted samples of a key after which a size not
    measured since is stale and its next sample restarts its window (None: never); refused
    samples are counted in ``refused`` (see the module doc). Not thread-safe: its owner locks.
    """

    def __init__(self, window: int = 20, min_samples: int = 1, stale_after: int | None = None,
                 max_keys: int = MAX_KEYS, max_sizes: int = MAX_SIZES) -> None:
        if window < 1 or min_samples < 1:
            raise ValueError("window and min_samples must be at least 1")
        self.window = window
        self.min_samples = min_samples
        self.stale_after = stale_after
        self.max_sizes = max_sizes
        self.refused: Counter[str] = Counter()
        self._fits: dict[Hashable, tuple[float, float] | None] = {}  # dropped on add()
        self._stats: Lru = Lru(max_keys, lambda key: self._fits.pop(key, None))

    def add(self, key: Hashable, n: int, ms: float) -> bool:
        """A call of ``n`` inputs under ``key`` took ``ms``; False: refused (counted)."""
        number, why = check_ms(ms)
        if why is None and not check_size(n):
            why = "bad-size"
        if why is not None:  # checked before anything is touched: no half-written entry
            self.refused[why] += 1
            return False
        sizes = self._stats.touch(key, lambda: Lru(self.max_sizes))
        series = sizes.touch(int(n), lambda: RunningMedian(self.window))
        restart = series.count > 0 and self._stale(sizes, series)  # before the clock ticks
        sizes.adds += 1
        series.add(number, restart)
        series.last = sizes.adds
        self._fits.pop(key, None)
        return True

    def _stale(self, sizes: Lru, series: RunningMedian) -> bool:
        return self.stale_after is not None and sizes.adds - series.last >= self.stale_after

    def stale(self, key: Hashable, n: int) -> bool:
        """Whether size ``n`` of ``key`` was measured, but not in its last ``stale_after``
        samples."""
        sizes = self._stats.get(key)
        series = sizes.get(n) if sizes is not None else None
        return series is not None and self._stale(sizes, series)

    def samples(self, key: Hashable, n: int) -> list[float]:
        """The samples the median of size ``n`` of ``key`` is over (a copy; [] if none)."""
        series = self._stats.get(key, {}).get(n)
        return list(series.recent) if series is not None else []

    def adds(self, key: Hashable) -> int:
        """Samples accepted under ``key`` (while it is kept)."""
        sizes = self._stats.get(key)
        return sizes.adds if sizes is not None else 0

    def measured(self, key: Hashable) -> dict[int, float]:
        """Sizes with at least ``min_samples`` samples -> their median."""
        return {n: s.value for n, s in self._stats.get(key, {}).items()
                if s.count >= self.min_samples}

    def fit(self, key: Hashable) -> tuple[float, float] | None:
        """``(a, b)`` of ``latency = a + b * n`` (both >= 0) over the measured sizes; one size
        gives ``a = 0`` (latency proportional to n: cautious for growing); None: none.
        Cached until the next :meth:`add` of ``key`` (schedulers ask on every pass); a key never
        added is not cached (any name may be asked: the cache must not grow with them)."""
        if key not in self._stats:
            return None
        if key not in self._fits:
            self._fits[key] = self._fit(self.measured(key))
        return self._fits[key]

    @staticmethod
    def _fit(points: dict[int, float]) -> tuple[float, float] | None:
        if not points:
            return None
        if len(points) == 1:
            (n, mean), = points.items()
            return 0.0, mean / n
        count = len(points)
        mean_n = sum(points) / count
        mean_ms = sum(points.values()) / count
        var = sum((n - mean_n) ** 2 for n in points)
        b = sum((n - mean_n) * (ms - mean_ms) for n, ms in points.items()) / var
        if b < 0:  # noise: larger batches measured faster; take the mean, flat
            return mean_ms, 0.0
        a = mean_ms - b * mean_n
        if a < 0:  # through the origin instead (least squares with a = 0)
            return 0.0, sum(n * ms for n, ms in points.items()) / sum(n * n for n in points)
        return a, b

    def estimate(self, key: Hashable, n: int) -> float | None:
        """The measured median at ``n``, else the fit's prediction, else None."""
        series = self._stats.get(key, {}).get(n)
        if series is not None and series.count >= self.min_samples:
            return series.value
        fit = self.fit(key)
        return None if fit is None else fit[0] + fit[1] * n


def _percentile(ordered: list[float], q: float) -> float:
    """Linear-interpolated percentile ``q`` (0-100) of sorted values."""
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


class BatchSizer:
    """Batch size per (stage, unit kind) from measured latency (see the module doc).

    ``policies``: stage name -> its :class:`~workload.operators.BatchPolicy`; ``batching``:
    False = always 1; ``min_samples``: measurements before a size counts as measured;
    ``window``: samples per size the median is over; ``history``: batches kept per (stage,
    kind) for the report's percentiles; ``probe_every``: batches after which a size above the
    choice, held back by its estimate, is stale and re-probed (once per that many batches).
    ``refused``: observations refused, per reason. Thread-safe.
    """

    def __init__(self, policies: Mapping, batching: bool = True, min_samples: int = 3,
                 window: int = 20, history: int = 1024, probe_every: int = STALE_AFTER) -> None:
        self.policies = dict(policies)
        self.batching = batching
        self.table = LatencyTable(window, min_samples, stale_after=probe_every)
        self.probe_every = probe_every
        self.refused: Counter[str] = Counter()
        self._history = history
        self._lock = threading.Lock()
        # (stage, kind) -> report counters / table.adds at the last probe; bounded as the table
        self._runs: Lru = Lru(MAX_KEYS, lambda key: self._probed.pop(key, None))
        self._probed: dict[tuple[str, str], int] = {}

    def choose(self, stage: str, kind: str) -> int:
        """The batch size to form now for ``stage`` on a unit of ``kind``."""
        return self._choose(stage, kind, probe=True)

    def _choose(self, stage: str, kind: str, probe: bool) -> int:
        policy = self.policies[stage]
        sizes = [s for s in policy.preferred_batch_sizes if s <= policy.max_batch_size]
        if not self.batching or policy.max_batch_size <= 1 or not sizes:
            return 1
        if policy.latency_target_ms is None:
            return sizes[-1]
        key = (stage, kind)
        with self._lock:
            measured = self.table.measured(key)
            if not measured:
                return sizes[0]
            frontier = max(measured)
            above = [s for s in sizes if s > frontier]
            limit = above[0] if above else sizes[-1]  # one preferred step past what we know
            best = sizes[0]
            for size in sizes:
                if size > limit:
                    break
                estimate = self.table.estimate(key, size)
                if estimate is not None and estimate <= policy.latency_target_ms:
                    best = size
            return self._probe(key, sizes, best, limit) if probe else best

    def _probe(self, key: tuple[str, str], sizes: list[int], best: int, limit: int) -> int:
        """``best``, or once per ``probe_every`` batches the smallest stale size above it: an
        estimate nobody refreshes could otherwise hold a size back for good. Counted from the
        probe's choice, not its batch: a choice that forms no batch waits for the next turn
        instead of holding every batch at the probed size."""
        adds = self.table.adds(key)
        if adds < self._probed.get(key, 0) + self.probe_every:
            return best
        for size in sizes:
            if best < size <= limit and self.table.stale(key, size):
                self._probed[key] = adds
                return size
        return best

    def observe(self, stage: str, kind: str, n: int, latency_ms: float) -> None:
        """A batch of ``n`` inputs of ``stage`` took ``latency_ms`` on a unit of ``kind``.
        Refused (counted in ``refused``, nothing else changes): not a number, not finite,
        <= 0, implausible, a bad size, a stage without a policy."""
        number, why = check_ms(latency_ms)
        if why is None and not check_size(n):
            why = "bad-size"
        if why is None and stage not in self.policies:
            why = "unknown-stage"
        with self._lock:
            if why is not None:
                self.refused[why] += 1
                return
            self.table.add((stage, kind), n, number)
            runs = self._runs.touch((stage, kind), lambda: {
                "batches": 0, "inputs": 0, "latencies": deque(maxlen=self._history)})
            runs["batches"] += 1
            runs["inputs"] += int(n)
            runs["latencies"].append(number)

    def refused_counts(self) -> dict[str, int]:
        """A copy of ``refused`` (reason -> observations refused), for feedback / metrics."""
        with self._lock:
            return dict(self.refused)

    def report(self) -> dict:
        """``{stage: {unit kind: {"batch_size", "batches", "mean_inputs", "p50_ms",
        "p99_ms"}}}`` over the batches observed (percentiles over the last ``history``)."""
        with self._lock:
            rows = {key: (runs["batches"], runs["inputs"], sorted(runs["latencies"]))
                    for key, runs in self._runs.items()}
        out: dict[str, dict[str, dict]] = {}
        for (stage, kind), (batches, inputs, ordered) in sorted(rows.items()):
            out.setdefault(stage, {})[kind] = {  # the choice, not a probe (reading uses none)
                "batch_size": self._choose(stage, kind, probe=False), "batches": batches,
                "mean_inputs": inputs / batches,
                "p50_ms": _percentile(ordered, 50.0), "p99_ms": _percentile(ordered, 99.0)}
        return out
