"""How far one reported latency may pull what the service's model learns.

The online learner (:mod:`placement.service.learner`) rewards a decision by the task's latency
(queue + service). A latency that is plausible on its own (a minute, under the hour that
``FeedbackExamples`` refuses outright) but far from everything its node and task type took
before is either a freak (a first call loading a model, a paused host) or a forged report;
learned as it is, one such record changed 13 of 200 decisions of the next published model. So
each example's latency is kept within ``ratio`` of the median of the last ``window`` latencies
of its (node, task type), once there are ``min_samples`` of them; before that, within
``cold_ratio`` of the task type's median over every node (nodes differ in speed), and only the
first ``min_samples`` latencies of a type the service has never seen go in as they are.

What goes into the window is the bounded value, so one record moves the median by at most one
rank; a node that really got slower is followed as soon as half of its window says so (32
tasks with the defaults per tenfold slowdown). Why a median and not a mean: a mean moves with the very outlier it
should judge. Why not :class:`placement.measured_costs.MeasuredCosts`' fits: those model work
time against size, and a latency also holds the queue, which no fit of the size predicts.

Example::

    >>> bounds = LatencyBounds(min_samples=3)
    >>> [bounds.bound("tm_a", "op", ms) for ms in (100.0, 120.0, 110.0)]
    [100.0, 120.0, 110.0]
    >>> bounds.bound("tm_a", "op", 60_000.0)       # ten times the median at most
    1100.0
    >>> bounds.bound("tm_b", "op", 60_000.0)       # a node's first: 50x the type's median
    5750.0
"""

from __future__ import annotations

import statistics
from collections import OrderedDict, deque

__all__ = ["LatencyBounds", "LATENCY_WINDOW", "LATENCY_RATIO", "COLD_LATENCY_RATIO"]

#: latencies kept per (node, task type) for their median
LATENCY_WINDOW = 64
#: how many times the pair's median (or its reciprocal) a latency may be
LATENCY_RATIO = 10.0
#: the same against the task type's median over all nodes, for a pair with few samples: wider,
#: because nodes differ in speed (the routers' speed factors span 0.05-50)
COLD_LATENCY_RATIO = 50.0
#: (node, type) pairs and types remembered at most (least recently used forgotten)
MAX_PAIRS = 16_384
MAX_TYPES = 1_024


class LatencyBounds:
    """Per (node, task type) and per type, the recent latencies and the bound they give (see
    the module docstring). Not thread-safe: ``FeedbackExamples`` holds its lock."""

    def __init__(self, window: int = LATENCY_WINDOW, ratio: float = LATENCY_RATIO,
                 cold_ratio: float = COLD_LATENCY_RATIO, min_samples: int = 8):
        if window < 1 or min_samples < 1 or min_samples > window:
            raise ValueError("need 1 <= min_samples <= window")
        if not (ratio > 1.0 and cold_ratio >= ratio):
            raise ValueError("need ratio > 1 and cold_ratio >= ratio")
        self.window, self.ratio, self.cold_ratio = window, ratio, cold_ratio
        self.min_samples = min_samples
        self._pairs: OrderedDict[tuple[str, str], deque] = OrderedDict()
        self._types: OrderedDict[str, deque] = OrderedDict()
        self.bounded = 0   # latencies moved to a bound so far

    def bound(self, node: str, task_type: str, latency_ms: float) -> float:
        """``latency_ms`` within the bound of its pair (or type), remembered; what to learn."""
        pair = self._recent(self._pairs, (node, task_type), MAX_PAIRS)
        kind = self._recent(self._types, task_type, MAX_TYPES)
        if len(pair) >= self.min_samples:
            reference, ratio = statistics.median(pair), self.ratio
        elif len(kind) >= self.min_samples:
            reference, ratio = statistics.median(kind), self.cold_ratio
        else:
            reference = None
        value = latency_ms
        if reference is not None and reference > 0.0:
            value = min(reference * ratio, max(reference / ratio, latency_ms))
            self.bounded += value != latency_ms
        pair.append(value)
        kind.append(value)
        return value

    def _recent(self, table: OrderedDict, key, most: int) -> deque:
        recent = table.get(key)
        if recent is None:
            recent = table[key] = deque(maxlen=self.window)
            if len(table) > most:
                table.popitem(last=False)
        else:
            table.move_to_end(key)
        return recent
