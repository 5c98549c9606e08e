"""Liquid: Intelligent Resource Estimation and Network-Efficient Scheduling for Deep Learning Jobs
on Distributed GPU Clusters (Gu et al., IEEE TPDS), as a streaming cluster policy.

What it decides:

1. a regression estimates each task's demand (here: its completion time on each node) from the
   task's features, starting from the public cost model and refined from measured completions;
2. every node whose estimated completion is within ``slack`` of the best one "fits";
3. among the fitting nodes, the most network-compact wins: one already serving this task type
   (the type's stream spans no new node), then the most downlink headroom, then the estimate.

Adaptation to streaming tasks and stages. Liquid estimates a DL job's GPU and memory demand by
regression over job features and packs the job's workers onto as few machines and links as
possible. A streaming task runs all its stages on one node, so it never spans nodes itself; the
span that grows is the task *type's*: every node serving a type receives its input streams and
holds its operators. So "compact" means "keep each type on the nodes already serving it, and
use the links with room" (the input crosses the node's downlink before any stage runs). The
resource the regression estimates is the one that decides a streaming placement: time. Per
(application, node shape) a ridge regression predicts the latency as
``w_compute * compute_s + w_ready * ready_s``: ``compute_s`` is ``CostModel.task_ms_on``
(affine in the input size, so this regresses on the task's size) and ``ready_s`` is the backlog
spread over the node's computing units (as in ``mct``). Its prior weights ``(1, 1)`` give
exactly the mct estimate before any sample; each completion (``observe_completion``, the
latency the feedback reports, matched to the features kept at decision time) pulls the weights
towards the measured times, e.g. a ready weight above 1 where GPU-heavy work drains slower than
"backlog / units".
Samples are divided by the prior estimate (a relative error), so ``prior_strength`` counts
samples whatever the task size. Memory is bounded: at most ``max_pending`` decided tasks are kept
(oldest forgotten first); the regression keeps 2x2 sums per key, never the samples.

Settings (Liquid's own parameters, adapted; each validated):

- ``slack`` (0.15): a node fits when its estimate is at most (1 + slack) x the best estimate
  (Liquid's "enough resources" test for a job, here a bound on the latency compactness may cost).
- ``prior_strength`` (4.0): ridge weight, in samples, pulling the regression to the cost model.
- ``forgetting`` (0.99): per-sample decay of old samples (1 = never forget), so the model tracks a
  node whose speed or load pattern changes.
- ``plausible_ratio`` (20.0): a sample whose latency is not finite, not positive, or more than
  this factor away from its prior estimate is rejected (counted in ``rejected``), and estimates
  are clipped to the same band.
- ``link_step`` (0.1): downlink headroom is compared in steps of this size (0 = exactly), so a
  stale, noisy utilisation reading does not override the estimate between near-equal links.
- ``max_pending`` (10000): most decided tasks awaiting their completion.
- ``pool_identical_nodes`` (True): nodes with the same spec (cores, speeds, GPU models, link)
  share one regression per application, as Liquid's regression is over job features, not hosts.

Example::

    >>> from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_a", 4, 16), NodeSpec("tm_b", 4, 16, cpu_speed=0.8)))
    >>> policy = LiquidPolicy(cluster, link_step=0.0)
    >>> def task(i):
    ...     return Observation(Task(f"t{i}", "video_synopsis", 36_864),
    ...                        (NodeState("tm_a"), NodeState("tm_b")), now_s=float(i))
    >>> policy.decide(task(0)).node                  # the cost model says tm_a is faster
    'tm_a'
    >>> slow = 4 * policy.prior_s(task(0).task, "tm_a")  # ... but tm_a took 4x as long
    >>> policy.observe_completion("t0", slow, "tm_a")
    >>> [round(float(w), 2) for w in policy.weights("video_synopsis", "tm_a")]
    [1.6, 1.0]
    >>> policy.decide(task(1)).node                  # 1.6x the estimate: tm_b (1.25x) wins
    'tm_b'
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict

import numpy as np

from placement.policies.base import EstimatingPolicy, first_and_second
from placement.policies.mct import parallel_units
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, NodeSpec, Observation, Task

__all__ = ["LiquidPolicy", "node_shape"]

#: Prior regression weights on (compute_s, ready_s): the mct completion time. (No intercept:
#: samples are divided by the prior, and a relative intercept would be collinear with the two.)
PRIOR_WEIGHTS = np.array([1.0, 1.0])


def node_shape(node: NodeSpec) -> tuple:
    """What makes two nodes interchangeable for the regression (everything but the id)."""
    return (node.cpu_cores, node.cpu_speed, tuple((g.model, g.speed) for g in node.gpus),
            node.downlink_mbps)


class LiquidPolicy(EstimatingPolicy):
    """Scores: estimated completion seconds per known node (the regression's; lower is better,
    but the winner is the most compact node within ``slack`` of the lowest)."""

    name = "liquid"

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0, *,
                 slack: float = 0.15, prior_strength: float = 4.0, forgetting: float = 0.99,
                 plausible_ratio: float = 20.0, link_step: float = 0.1,
                 max_pending: int = 10_000, pool_identical_nodes: bool = True) -> None:
        checks = (("slack", slack, 0.0, math.inf, True), ("link_step", link_step, 0.0, 1.0, True),
                  ("prior_strength", prior_strength, 0.0, math.inf, False),
                  ("forgetting", forgetting, 0.0, 1.0, False))
        for label, value, low, high, low_ok in checks:
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value > high \
                    or (value < low if low_ok else value <= low):
                bound = f">= {low:g}" if low_ok else f"> {low:g}"
                raise ValueError(f"{label} must be a finite number {bound}"
                                 f"{'' if high == math.inf else f' and <= {high:g}'}, "
                                 f"got {value!r}")
        if isinstance(plausible_ratio, bool) or not isinstance(plausible_ratio, (int, float)) \
                or not math.isfinite(plausible_ratio) or plausible_ratio <= 1.0:
            raise ValueError(f"plausible_ratio must be a finite number > 1, "
                             f"got {plausible_ratio!r}")
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
            raise ValueError(f"max_pending must be an integer >= 1, got {max_pending!r}")
        if not isinstance(pool_identical_nodes, bool):
            raise ValueError(f"pool_identical_nodes must be True or False, "
                             f"got {pool_identical_nodes!r}")
        self.slack, self.prior_strength, self.forgetting = float(slack), prior_strength, forgetting
        self.plausible_ratio, self.link_step = float(plausible_ratio), float(link_step)
        self.max_pending, self.pool_identical_nodes = max_pending, pool_identical_nodes
        # Per regression key: (sum of x x^T, sum of x y, effective samples, solved weights).
        self._stats: dict[tuple, list] = {}
        # task_id -> (node, app, key, scaled features, prior): what a completion is matched to.
        self._pending: OrderedDict[str, tuple] = OrderedDict()
        self._serving: dict[str, Counter] = {}   # node -> app -> decided tasks not yet done
        self.samples = 0   # completions learned from
        self.rejected = 0  # completions refused (non-finite, implausible, unknown or moved)
        super().__init__(cluster, costs, seed)

    def _cluster_changed(self) -> None:
        super()._cluster_changed()
        self._units = {n.node_id: parallel_units(n) for n in self.cluster.nodes}
        self._shapes = {n.node_id: node_shape(n) for n in self.cluster.nodes}

    # -- the regression ---------------------------------------------------------------------
    def _key(self, app: str, node_id: str) -> tuple:
        return (app, self._shapes[node_id] if self.pool_identical_nodes else node_id)

    def _features(self, task: Task, observation_state, node_id: str) -> tuple[float, float]:
        compute = self.task_ms(task, node_id) * observation_state.speed_factor / 1000.0
        return compute, observation_state.backlog_s / self._units[node_id]

    def prior_s(self, task: Task, node_id: str, backlog_s: float = 0.0) -> float:
        """The cost model's (mct's) completion estimate, before anything is learned."""
        return self.task_ms(task, node_id) / 1000.0 + backlog_s / self._units[node_id]

    def weights(self, app: str, node_id: str) -> np.ndarray:
        """Current (compute, ready) weights for ``app`` on ``node_id``."""
        stats = self._stats.get(self._key(app, node_id))
        return PRIOR_WEIGHTS.copy() if stats is None else stats[3].copy()

    def _estimate(self, key: tuple, compute: float, ready: float) -> float:
        prior = compute + ready
        stats = self._stats.get(key)
        if stats is None or prior <= 0.0:
            return prior
        w = stats[3]
        value = float(w[0] * compute + w[1] * ready)
        # clipped to the band a sample may come from: a few odd samples cannot make a node
        # look free (or hopeless)
        return min(max(value, prior / self.plausible_ratio), prior * self.plausible_ratio)

    def _learn_sample(self, key: tuple, scaled: np.ndarray, target: float) -> None:
        stats = self._stats.get(key)
        if stats is None:
            stats = self._stats[key] = [np.zeros((2, 2)), np.zeros(2), 0.0, PRIOR_WEIGHTS]
        g = self.forgetting
        stats[0] = g * stats[0] + np.outer(scaled, scaled)
        stats[1] = g * stats[1] + scaled * target
        stats[2] = g * stats[2] + 1.0
        # ridge towards the prior (not towards 0): with few samples the cost model still rules
        lam = self.prior_strength
        stats[3] = np.linalg.solve(stats[0] + lam * np.eye(2), stats[1] + lam * PRIOR_WEIGHTS)

    def observe_completion(self, task_id: str, latency_s: float, node_id: str) -> None:
        """A decided task finished after ``latency_s`` (arrival to result) on ``node_id``."""
        record = self._pending.get(task_id)
        if record is None or record[0] != node_id:
            # not decided here, forgotten (max_pending), or claimed by another node than the
            # one it was sent to (a forged or confused report: it stays pending there)
            self.rejected += 1
            return
        del self._pending[task_id]
        node, app, key, scaled, prior = record
        self._release(node, app)
        try:
            latency = float(latency_s)
        except (TypeError, ValueError):
            latency = math.nan
        ratio = latency / prior if prior > 0 else math.nan
        if not math.isfinite(ratio) or latency <= 0 \
                or not 1.0 / self.plausible_ratio <= ratio <= self.plausible_ratio:
            self.rejected += 1  # a reading no run could produce
            return
        self._learn_sample(key, scaled, ratio)
        self.samples += 1

    # -- bookkeeping of what each node serves -------------------------------------------------
    def _release(self, node: str, app: str) -> None:
        served = self._serving.get(node)
        if served is not None:
            served[app] -= 1
            if served[app] <= 0:
                del served[app]

    def _remember(self, task: Task, node: str, compute: float, ready: float) -> None:
        old = self._pending.pop(task.task_id, None)
        if old is not None:
            self._release(old[0], old[1])  # decided again (a retry): the new node counts
        prior = compute + ready
        # samples are divided by the prior estimate: a relative error, so one sample weighs the
        # same whatever the task's size
        scaled = np.array([compute, ready]) / prior if prior > 0 else np.zeros(2)
        self._pending[task.task_id] = (node, task.app_id, self._key(task.app_id, node), scaled,
                                       prior)
        self._serving.setdefault(node, Counter())[task.app_id] += 1
        while len(self._pending) > self.max_pending:
            _, (old_node, old_app, *_) = self._pending.popitem(last=False)
            self._release(old_node, old_app)

    def serving(self, node_id: str, app: str) -> int:
        """Decided tasks of ``app`` at ``node_id`` not yet reported complete."""
        return self._serving.get(node_id, Counter())[app]

    # -- the decision -----------------------------------------------------------------------
    def decide(self, observation: Observation) -> Decision:
        ids, left_out = self.known_ids(observation)
        states, task = self.states(observation), observation.task
        features = {nid: self._features(task, states[nid], nid) for nid in ids}
        scores = {nid: self._estimate(self._key(task.app_id, nid), *features[nid])
                  for nid in ids}
        best, _ = first_and_second(ids, scores.__getitem__)
        limit = scores[best] * (1.0 + self.slack)
        fitting = [nid for nid in ids if scores[nid] <= limit]

        def headroom(nid: str) -> float:
            free = max(0.0, 1.0 - states[nid].downlink_util)
            return math.floor(free / self.link_step + 1e-9) * self.link_step \
                if self.link_step > 0 else free

        # Compact first (a node already serving the type: its stream spans no new node), then
        # the link with the most room, then the estimate; ties keep observation order.
        node, second = first_and_second(fitting, lambda nid: (
            self.serving(nid, task.app_id) == 0, -headroom(nid), scores[nid]))
        span = sum(1 for served in self._serving.values() if served[task.app_id] > 0)
        count = self.serving(node, task.app_id)
        compact = (f"serves {task.app_id} ({count} in flight, span stays {span})" if count
                   else f"new node for {task.app_id} (span {span} -> {span + 1})")
        nxt = f"; next {second} {scores[second]:.3g} s" if second else ""
        w = self.weights(task.app_id, node)
        stats = self._stats.get(self._key(task.app_id, node))
        seen = stats[2] if stats is not None else 0.0  # effective samples (after forgetting)
        reason = (f"liquid: {node} estimate {scores[node]:.3g} s within {self.slack:.0%} of best "
                  f"{best} {scores[best]:.3g} s ({len(fitting)} of {len(ids)} fit); {compact}, "
                  f"link headroom {headroom(node):.2f}; model w=({w[0]:.2f}, {w[1]:.2f}) from "
                  f"{seen:.1f} samples{nxt}{left_out}")
        self._remember(task, node, *features[node])
        return Decision(node, reason, scores)
