"""MCT at measured drain rates: the minimum completion time with each node's backlog divided
by how fast that node has been seen to work it off, not by its unit count.

The paper's ETC (``mct``) spreads a node's backlog over its computing units::

    ready_s = backlog_s / (cpu_cores + number of GPUs)

which says a node with 4 GPUs and 6 cores clears 10 unit-seconds of estimated work a second.
On the simulated paper cluster none does: measured over MCT's own runs, the 4-GPU nodes
cleared 0.60-0.68 of that, the 2-GPU nodes 0.47-0.55 (GPU co-runs, stages that must wait for
their predecessors, input transfers). MCT so overfills the 2-GPU nodes: they finished up to
270 s after the 4-GPU ones, and a split at the drain rates it had measured would have ended
the same run about 14% sooner (docs/results-simulator.md, "MCT at measured drain rates").

This rule learns each node's drain rate from what every policy already sees, without any new
feedback: between two observations a node's backlog (estimated seconds of work) falls by what
it finished, and rises by the work this policy sent it, which the policy knows. So::

    drained_s  = backlog_before + sent - backlog_now      (a busy interval: both backlogs > 0)
    rate       = (sum of drained_s + PRIOR_S x units) / (sum of busy seconds + PRIOR_S)
    completion = backlog_s / rate + task_ms x speed_factor / 1000

with older intervals forgotten with half-life ``half_life_s`` of busy time (``rates``: known
drain rates per node, e.g. measured on an earlier run, used instead of the online estimate). Before a node has
been busy its rate is its unit count (exactly ``mct``); ``PRIOR_S`` seconds of the unit count
stay in every estimate, so a rate moves as evidence comes in, never from one interval. An
observation that does not add up (a non-finite or implausible backlog, one that grew by more than was sent:
another router's work or a restart) teaches nothing; rates stay within
[``MIN_RATE_SHARE``, ``MAX_RATE_SHARE``] times the unit count, so no observation can make a node
look idle or infinitely fast.

Example::

    >>> from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_a", 4, 16), NodeSpec("tm_b", 4, 16)))
    >>> policy = MeasuredDrainMCTPolicy(cluster)
    >>> obs = Observation(Task("t1", "video_synopsis", 1000),
    ...                   (NodeState("tm_a", backlog_s=1.0), NodeState("tm_b")), 0.0)
    >>> policy.decide(obs).node
    'tm_b'
"""

from __future__ import annotations

import math

from placement.policies.mct import MinimumCompletionTimePolicy
from workload.estimates import CostModel
from workload.model import ClusterSpec, Observation, Task

__all__ = ["MeasuredDrainMCTPolicy", "DrainRateMeter"]

#: seconds of "the node clears its unit count" kept in every rate (the shrinkage toward MCT);
#: chosen with HALF_LIFE_S on the paper setting's tuning seeds (``benchmarks/mct_drain.py``:
#: 10 s gave 62.9 tasks/min there, 800 s 81.5, 3,200 s 76.0)
PRIOR_S = 800.0
#: busy seconds after which an interval counts half (math.inf: never forget; 120 s followed a
#: changed node sooner and did worse on the tuning seeds)
HALF_LIFE_S = math.inf
#: a rate stays within these shares of the node's unit count
MIN_RATE_SHARE = 0.05
MAX_RATE_SHARE = 4.0
#: intervals longer than this teach nothing (a pause in the stream, a stale clock)
MAX_INTERVAL_S = 60.0
#: a backlog above this (about 115 days of work) is not believed: that interval teaches nothing
MAX_BACKLOG_S = 1e7


class DrainRateMeter:
    """Per node: estimated seconds of work cleared per second of busy time, learned from the
    backlogs of consecutive observations and the work sent in between.

    >>> meter = DrainRateMeter({"n": 2}, prior_s=10.0)
    >>> meter.rate("n")                                   # nothing seen yet: its units
    2.0
    >>> meter.observe(0.0, {"n": 10.0}); meter.sent("n", 2.0)
    >>> meter.observe(10.0, {"n": 7.0})                   # cleared 5 s of work in 10 s
    >>> round(meter.rate("n"), 3)                         # (5 + 10 x 2) / (10 + 10)
    1.25
    """

    def __init__(self, units: dict[str, float], prior_s: float = PRIOR_S,
                 half_life_s: float = HALF_LIFE_S):
        if not (math.isfinite(prior_s) and prior_s > 0.0 and half_life_s > 0.0):
            raise ValueError("prior_s must be finite and positive, half_life_s positive "
                             "(math.inf: never forget)")
        self.units = {n: float(u) for n, u in units.items()}
        self.prior_s = prior_s
        self.half_life_s = half_life_s
        self.drained: dict[str, float] = dict.fromkeys(self.units, 0.0)
        self.busy: dict[str, float] = dict.fromkeys(self.units, 0.0)
        self._last_time: float | None = None
        self._last_backlog: dict[str, float] = {}
        self._sent: dict[str, float] = {}

    def sent(self, node: str, work_s: float) -> None:
        """This policy sent ``work_s`` estimated seconds of work to ``node``."""
        if node in self.units and math.isfinite(work_s) and work_s >= 0.0:
            self._sent[node] = self._sent.get(node, 0.0) + work_s

    def observe(self, now_s: float, backlogs: dict[str, float]) -> None:
        """The backlogs (estimated seconds of work) seen at ``now_s``."""
        last_time, last, sent = self._last_time, self._last_backlog, self._sent
        self._last_time, self._last_backlog, self._sent = now_s, dict(backlogs), {}
        if last_time is None or not math.isfinite(now_s):
            return
        span = now_s - last_time
        if not (0.0 < span <= MAX_INTERVAL_S):
            return
        keep = 0.5 ** (span / self.half_life_s)
        for node, now in backlogs.items():
            before = last.get(node)
            if node not in self.units or before is None:
                continue
            added = sent.get(node, 0.0)
            if not (0.0 < now <= MAX_BACKLOG_S and 0.0 < before <= MAX_BACKLOG_S):
                continue          # not busy for the whole interval (or nonsense): no lesson
            drained = before + added - now
            if drained < -1e-9:
                continue          # grew by more than this policy sent: not its work alone
            self.drained[node] = self.drained[node] * keep + max(drained, 0.0)
            self.busy[node] = self.busy[node] * keep + span

    def rate(self, node: str) -> float:
        """Estimated seconds of work ``node`` clears per second (its units before evidence)."""
        units = self.units.get(node, 1.0)
        rate = (self.drained.get(node, 0.0) + self.prior_s * units) / \
            (self.busy.get(node, 0.0) + self.prior_s)
        return min(max(rate, MIN_RATE_SHARE * units), MAX_RATE_SHARE * units)


class MeasuredDrainMCTPolicy(MinimumCompletionTimePolicy):
    """Scores: estimated completion time in seconds per node, the backlog over the node's
    measured drain rate (lowest wins)."""

    name = "mct_drain"
    rule = "minimum completion time at measured drain rates"

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0,
                 prior_s: float = PRIOR_S, half_life_s: float = HALF_LIFE_S,
                 rates: dict[str, float] | None = None) -> None:
        self._prior_s, self._half_life_s = prior_s, half_life_s
        if rates is not None:
            bad = {n: r for n, r in rates.items()
                   if not (isinstance(r, (int, float)) and math.isfinite(r) and r > 0.0)}
            if bad:
                raise ValueError(f"drain rates must be finite and positive, got {bad}")
        #: drain rates known in advance (e.g. measured on an earlier run); None: learned online
        self.fixed_rates = None if rates is None else {n: float(r) for n, r in rates.items()}
        super().__init__(cluster, costs, seed)

    def _cluster_changed(self) -> None:
        super()._cluster_changed()
        self.meter = DrainRateMeter(self._units, self._prior_s, self._half_life_s)

    def _drain_rates(self, observation: Observation, ids, states) -> dict[str, float]:
        meter, fixed = self.meter, self.fixed_rates
        if fixed and all(nid in fixed for nid in ids):
            return {nid: fixed[nid] for nid in ids}   # every rate known: nothing to measure
        meter.observe(observation.now_s, {nid: states[nid].backlog_s for nid in ids})
        return {nid: fixed[nid] if fixed and nid in fixed else meter.rate(nid) for nid in ids}

    def _rate_note(self, rate: float) -> str:
        return f" (drains {rate:.2f}/s)"

    def _decided(self, task: Task, node: str) -> None:
        if self.fixed_rates and node in self.fixed_rates:
            return                                     # its rate is known: the meter never asks
        self.meter.sent(node, self.costs.task_work_ms(task, self._specs[node]) / 1000.0)
