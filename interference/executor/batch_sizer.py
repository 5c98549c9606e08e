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
is what a record of that batch waits for, whatever slowed it down. The window (the last
``window`` samples weigh most) lets the choice follow load.

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

import threading
from collections import deque
from typing import Hashable, Mapping

__all__ = ["LatencyTable", "BatchSizer"]


class LatencyTable:
    """Running mean latency (ms) per (key, batch size), and an affine fit per key.

    ``window``: the running mean weighs about the last ``window`` samples (a plain mean until
    then); ``min_samples``: samples before a size's mean counts as measured. Not thread-safe:
    its owner locks.
    """

    def __init__(self, window: int = 20, min_samples: int = 1) -> None:
        if window < 1 or min_samples < 1:
            raise ValueError("window and min_samples must be at least 1")
        self.window = window
        self.min_samples = min_samples
        self._stats: dict[Hashable, dict[int, list[float]]] = {}  # key -> n -> [mean, count]
        self._fits: dict[Hashable, tuple[float, float] | None] = {}  # dropped on add()

    def add(self, key: Hashable, n: int, ms: float) -> None:
        stats = self._stats.setdefault(key, {}).setdefault(int(n), [0.0, 0])
        stats[1] += 1
        stats[0] += (float(ms) - stats[0]) / min(stats[1], self.window)
        self._fits.pop(key, None)

    def measured(self, key: Hashable) -> dict[int, float]:
        """Sizes with at least ``min_samples`` samples -> their mean."""
        return {n: mean for n, (mean, count) in self._stats.get(key, {}).items()
                if count >= self.min_samples}

    def fit(self, key: Hashable) -> tuple[float, float] | None:
        """``(a, b)`` of ``latency = a + b * n`` (both >= 0) over the measured sizes; one size
        gives ``a = 0`` (latency proportional to n: cautious for growing); None: none.
        Cached until the next :meth:`add` of ``key`` (schedulers ask on every pass)."""
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
        """The measured mean at ``n``, else the fit's prediction, else None."""
        stats = self._stats.get(key, {}).get(n)
        if stats is not None and stats[1] >= self.min_samples:
            return stats[0]
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
    ``window``: running-mean window; ``history``: batches kept per (stage, kind) for the
    report's percentiles. Thread-safe.
    """

    def __init__(self, policies: Mapping, batching: bool = True, min_samples: int = 3,
                 window: int = 20, history: int = 1024) -> None:
        self.policies = dict(policies)
        self.batching = batching
        self.table = LatencyTable(window, min_samples)
        self._history = history
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], dict] = {}  # (stage, kind) -> report counters

    def choose(self, stage: str, kind: str) -> int:
        """The batch size to form now for ``stage`` on a unit of ``kind``."""
        policy = self.policies[stage]
        sizes = [s for s in policy.preferred_batch_sizes if s <= policy.max_batch_size]
        if not self.batching or policy.max_batch_size <= 1 or not sizes:
            return 1
        if policy.latency_target_ms is None:
            return sizes[-1]
        with self._lock:
            measured = self.table.measured((stage, kind))
            if not measured:
                return sizes[0]
            frontier = max(measured)
            above = [s for s in sizes if s > frontier]
            limit = above[0] if above else sizes[-1]  # one preferred step past what we know
            best = sizes[0]
            for size in sizes:
                if size > limit:
                    break
                estimate = self.table.estimate((stage, kind), size)
                if estimate is not None and estimate <= policy.latency_target_ms:
                    best = size
            return best

    def observe(self, stage: str, kind: str, n: int, latency_ms: float) -> None:
        """A batch of ``n`` inputs of ``stage`` took ``latency_ms`` on a unit of ``kind``."""
        with self._lock:
            self.table.add((stage, kind), n, latency_ms)
            runs = self._runs.setdefault((stage, kind), {
                "batches": 0, "inputs": 0, "latencies": deque(maxlen=self._history)})
            runs["batches"] += 1
            runs["inputs"] += n
            runs["latencies"].append(float(latency_ms))

    def report(self) -> dict:
        """``{stage: {unit kind: {"batch_size", "batches", "mean_inputs", "p50_ms",
        "p99_ms"}}}`` over the batches observed (percentiles over the last ``history``)."""
        with self._lock:
            rows = {key: (runs["batches"], runs["inputs"], sorted(runs["latencies"]))
                    for key, runs in self._runs.items()}
        out: dict[str, dict[str, dict]] = {}
        for (stage, kind), (batches, inputs, ordered) in sorted(rows.items()):
            out.setdefault(stage, {})[kind] = {
                "batch_size": self.choose(stage, kind), "batches": batches,
                "mean_inputs": inputs / batches,
                "p50_ms": _percentile(ordered, 50.0), "p99_ms": _percentile(ordered, 99.0)}
        return out
