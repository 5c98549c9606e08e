"""Dual-agent RL, placement agent: a learned value over nodes with online machine speeds.

Paper: "A Dual-Agent Scheduler for Distributed Deep Learning Jobs on Public Cloud via
Reinforcement Learning" (Xing, Mao, Yin, Pan, Zhang, Xiao, Long; KDD 2023).

What it decides: the node for the task at the head of the queue. Each node's cost is a predicted
latency: the MCT completion estimate (``backlog_s / units + task_ms_on``), times the node's
learned speed factor, times a learned correction for the node's (queue depth, load) bucket; the
lowest wins, except that with probability epsilon (decaying to a floor) a seeded RNG explores.

Adapted for streaming tasks and stages, and why:

- The paper's placement agent places whole DL jobs on GPU machines and learns their performance
  with a Random Walk Gaussian Process (similar machines perform alike; fluctuation is uncertain).
  Here tasks arrive one at a time, so the placement agent is this cluster policy; the machine
  speed is a per-node estimate of ``log(latency / MCT estimate)`` from ``observe_completion``,
  taken relative to the median node (a common queueing bias cancels out), shrunk towards the
  prior by ``prior_samples`` pseudo-samples (uncertainty: few samples, little trust), whose prior
  is the pooled estimate of the other nodes of the same hardware shape when ``share_similar``
  (the paper's machine similarity; the spec's speed otherwise).
- The paper's neural agents (trained by multi-agent RL) become a tabular value over discretised
  features (plain Python, no torch; one entry per bucket, fixed size): the residual
  ``log latency - log(estimate x speed)`` per (queue depth per slot, load) bucket, learned from
  completion latencies (the job completion time the paper minimises). With nothing learned the
  cost is MCT's, so the policy works before any learning.
- The paper's ordering agent orders waiting jobs; in streaming it orders the ready stages of one
  node: ``interference.schedulers.dual_agent_order``. The two learn from their own signals
  (latency here, stage throughput there) instead of one joint multi-agent reward, because the
  two sit in different processes (router and executor).
- ``learn(transition)``: the engine's reward (the change of the windowed throughput) credits a
  decision with completions of tasks placed long before, so it only nudges the bucket's value
  when ``reward_weight > 0`` (default 0: latencies alone train the value).

Settings (the paper's RL parameters, each a constructor keyword):

- ``epsilon=0.1`` initial exploration, ``epsilon_decay=0.99`` per decision, ``epsilon_floor=0.01``
  (the schedule never rises above ``epsilon``; 0 never explores);
- ``learning_rate=0.1``: step of the moving averages (plain averages for the first samples);
- ``prior_samples=5.0``: pseudo-samples of the prior (the GP's uncertainty, as shrinkage);
- ``queue_edges=(0.25, 0.5, 1, 2, 4)`` tasks per slot, ``load_edges=(0.25, 0.5, 0.75)``: buckets;
- ``reward_weight=0.0``; ``share_similar=True``; ``max_pending=10000`` (decisions remembered
  until their completion, oldest dropped first: bounded memory).

Non-finite or non-positive latencies, unknown tasks and non-finite rewards are refused (counted
in ``refused``), never learned from. Ties: observation order.

Example::

    >>> from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_a", 4, 16, gpus=(GpuSpec("v100", 16),)),
    ...                        NodeSpec("tm_b", 4, 16, gpus=(GpuSpec("k80", 12),))))
    >>> policy = DualAgentPolicy(cluster, epsilon=0.0)
    >>> obs = Observation(Task("t1", "face_recognition", 2_000_000),
    ...                   (NodeState("tm_a"), NodeState("tm_b")), 0.0)
    >>> policy.decide(obs).node                     # nothing learned yet: MCT's choice
    'tm_a'
    >>> for i in range(20):                         # tm_a's tasks take 3x what MCT predicts
    ...     for node in ("tm_a", "tm_b"):
    ...         one = Observation(Task(f"{node}{i}", "face_recognition", 2_000_000),
    ...                           (NodeState(node),), 0.0)
    ...         _ = policy.decide(one)
    ...         slow = 3.0 if node == "tm_a" else 1.0
    ...         policy.observe_completion(f"{node}{i}", slow * policy.estimate_s(one.task, node),
    ...                                   node)
    >>> policy.decide(obs).node
    'tm_b'
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Sequence

from placement.policies.base import EstimatingPolicy, first_and_second
from placement.policies.mct import parallel_units
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, NodeState, Observation, Task, Transition

__all__ = ["DualAgentPolicy"]

#: A latency more than 50x off the estimate is clipped (one odd sample must not dominate).
_LOG_CLIP = math.log(50.0)


def _edges(name: str, edges: Sequence[float]) -> tuple[float, ...]:
    values = tuple(float(e) for e in edges)
    if not values or any(not math.isfinite(e) or e <= 0 for e in values) or \
            any(b <= a for a, b in zip(values, values[1:])):
        raise ValueError(f"{name} must be positive, finite and strictly increasing, got {edges}")
    return values


class DualAgentPolicy(EstimatingPolicy):
    """Scores: predicted latency in seconds per node (lowest wins)."""

    name = "dual_agent"

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0, *,
                 epsilon: float = 0.1, epsilon_decay: float = 0.99, epsilon_floor: float = 0.01,
                 learning_rate: float = 0.1, prior_samples: float = 5.0,
                 queue_edges: Sequence[float] = (0.25, 0.5, 1.0, 2.0, 4.0),
                 load_edges: Sequence[float] = (0.25, 0.5, 0.75), reward_weight: float = 0.0,
                 share_similar: bool = True, max_pending: int = 10_000) -> None:
        checks = [("epsilon", epsilon, 0.0 <= epsilon <= 1.0),
                  ("epsilon_decay", epsilon_decay, 0.0 < epsilon_decay <= 1.0),
                  ("epsilon_floor", epsilon_floor, 0.0 <= epsilon_floor <= 1.0),
                  ("learning_rate", learning_rate, 0.0 < learning_rate <= 1.0),
                  ("prior_samples", prior_samples, 0.0 <= prior_samples < math.inf),
                  ("reward_weight", reward_weight, 0.0 <= reward_weight < math.inf),
                  ("max_pending", max_pending, isinstance(max_pending, int) and max_pending >= 1)]
        for what, value, ok in checks:
            if not ok:  # NaN fails every comparison, so it lands here too
                raise ValueError(f"{what}: bad value {value!r} (epsilon, its floor and "
                                 f"learning_rate in [0, 1], decay in (0, 1], max_pending >= 1)")
        self.epsilon0, self.epsilon_decay, self.epsilon_floor = epsilon, epsilon_decay, \
            epsilon_floor
        self.learning_rate, self.prior_samples = learning_rate, float(prior_samples)
        self.queue_edges = _edges("queue_edges", queue_edges)
        self.load_edges = _edges("load_edges", load_edges)
        self.reward_weight, self.share_similar = reward_weight, bool(share_similar)
        self.max_pending = max_pending
        self.rng = random.Random(seed)
        self.epsilon = epsilon
        self.decisions = self.refused = self.completions = self.rewards_seen = 0
        # The value table: residual log latency per (queue bucket, load bucket), and its counts.
        buckets = [(q, load) for q in range(len(self.queue_edges) + 1)
                   for load in range(len(self.load_edges) + 1)]
        self.value: dict[tuple[int, int], float] = dict.fromkeys(buckets, 0.0)
        self.value_counts: dict[tuple[int, int], int] = dict.fromkeys(buckets, 0)
        # Per node: moving mean of log(latency / estimate) and the number of samples.
        self._log_ratio: dict[str, float] = {}
        self._samples: dict[str, int] = {}
        self._pending: dict[str, tuple[str, float, tuple[int, int]]] = {}
        self._factor_cache: dict[str, float] | None = None
        super().__init__(cluster, costs, seed)

    def _cluster_changed(self) -> None:
        super()._cluster_changed()
        self._units = {n.node_id: parallel_units(n) for n in self.cluster.nodes}
        self._slots = {n.node_id: n.task_slots for n in self.cluster.nodes}
        # Hardware shape: the machines the paper's GP would call alike.
        self._shape = {n.node_id: (n.cpu_cores, n.cpu_speed, tuple(sorted(g.model for g in n.gpus)))
                       for n in self.cluster.nodes}
        self._factor_cache = None  # shapes (and so the peers) may have changed

    # -- the features ------------------------------------------------------------------------
    def estimate_s(self, task: Task, node_id: str, state: NodeState | None = None) -> float:
        """MCT's completion estimate (s) on a known node: ready time plus the task alone."""
        state = state or NodeState(node_id)
        ready = state.backlog_s / self._units[node_id]
        return max(1e-9, ready + self.task_ms(task, node_id) * state.speed_factor / 1000.0)

    def bucket(self, node_id: str, state: NodeState) -> tuple[int, int]:
        """(queue-depth-per-slot bucket, load bucket) of a node."""
        per_slot = state.queue_depth / self._slots.get(node_id, 1)
        return (bisect.bisect_right(self.queue_edges, per_slot),
                bisect.bisect_right(self.load_edges, state.load))

    def _shrink(self, count: float) -> float:
        return count / (count + self.prior_samples) if count + self.prior_samples > 0 else 0.0

    def speed_factors(self, node_ids: Sequence[str]) -> dict[str, float]:
        """Learned time multiplier per node, relative to the median measured node (1 = as the
        spec says; shrunk towards the prior while samples are few). Cached until the next
        completion: the router asks for every node on every decision."""
        if self._factor_cache is None:
            self._factor_cache = self._compute_factors()
        cache = self._factor_cache
        return {nid: cache.get(nid, 1.0) for nid in node_ids}

    def _compute_factors(self) -> dict[str, float]:
        measured = sorted(self._log_ratio[n] for n in self._samples)
        if not measured:
            return {}
        mid = len(measured) // 2
        reference = measured[mid] if len(measured) % 2 else (measured[mid - 1] + measured[mid]) / 2
        # per hardware shape: (samples, samples x mean log ratio), so each node's peers are the
        # group minus itself (one pass, not a scan of the peers per node)
        groups: dict[object, list[float]] = {}
        for nid, n in self._samples.items():
            group = groups.setdefault(self._shape.get(nid, nid), [0.0, 0.0])
            group[0] += n
            group[1] += n * self._log_ratio[nid]
        out = {}
        for nid in set(self._specs) | set(self._samples):
            own = self._samples.get(nid, 0)
            prior = 0.0
            if self.share_similar:  # the other machines of this shape, pooled
                count, total = groups.get(self._shape.get(nid, nid), (0.0, 0.0))
                count -= own
                if count > 0:
                    pooled = (total - own * self._log_ratio.get(nid, 0.0)) / count
                    prior = self._shrink(count) * (pooled - reference)
            rel = prior if not own else (
                own * (self._log_ratio[nid] - reference) + self.prior_samples * prior) / \
                (own + self.prior_samples)
            out[nid] = math.exp(rel)
        return out

    def learned(self, bucket: tuple[int, int]) -> float:
        """The bucket's learned latency multiplier (1 before any sample)."""
        return math.exp(self._shrink(self.value_counts[bucket]) * self.value[bucket])

    # -- deciding ---------------------------------------------------------------------------
    def decide(self, observation: Observation) -> Decision:
        ids, left_out = self.known_ids(observation)
        states, task = self.states(observation), observation.task
        speed = self.speed_factors(ids)
        raw = {nid: self.estimate_s(task, nid, states[nid]) for nid in ids}
        buckets = {nid: self.bucket(nid, states[nid]) for nid in ids}
        learned = {nid: self.learned(buckets[nid]) for nid in ids}
        scores = {nid: raw[nid] * speed[nid] * learned[nid] for nid in ids}
        best, second = first_and_second(ids, scores.__getitem__)
        epsilon, draw = self.epsilon, self.rng.random()  # one draw per decision: reproducible
        self.decisions += 1
        # decays to the floor, never above the initial value (epsilon=0: never explores)
        self.epsilon = min(self.epsilon0, max(self.epsilon_floor,
                                              self.epsilon0 * self.epsilon_decay ** self.decisions))

        def parts(nid: str) -> str:
            q, load = buckets[nid]
            return (f"{scores[nid]:.3g} s = est {raw[nid]:.3g} s x speed {speed[nid]:.2f} x "
                    f"learned {learned[nid]:.2f} (bucket q{q}/l{load})")

        if draw < epsilon and len(ids) > 1:
            node = ids[self.rng.randrange(len(ids))]
            reason = (f"dual-agent: explore {node} (draw {draw:.3f} < epsilon {epsilon:.3f}); "
                      f"greedy {best} {parts(best)}{left_out}")
        else:
            node = best
            nxt = f"next {second} {parts(second)}" if second else "only node"
            reason = (f"dual-agent: {node} predicted {parts(node)} ({nxt}); epsilon "
                      f"{epsilon:.3f}{left_out}")
        self._pending.pop(task.task_id, None)  # re-decided: the newest placement counts
        self._pending[task.task_id] = (node, raw[node], buckets[node])
        while len(self._pending) > self.max_pending:  # bounded: forget the oldest decision
            self._pending.pop(next(iter(self._pending)))
        return Decision(node, reason, scores)

    # -- learning ---------------------------------------------------------------------------
    def _step(self, count: int) -> float:
        # plain average for the first samples (no early outlier lingers), then a moving average
        return max(self.learning_rate, 1.0 / (count + 1))

    def observe_completion(self, task_id: str, latency_s: float, node_id: str) -> None:
        """A task finished ``latency_s`` after it arrived (the feedback topic's record)."""
        pending = self._pending.get(task_id)
        try:
            latency = float(latency_s)
        except (TypeError, ValueError, OverflowError):
            latency = math.nan
        if pending is None or pending[0] != node_id or not (math.isfinite(latency)
                                                             and latency > 0.0):
            self.refused += 1  # unknown task, another node's, or a broken number
            return
        del self._pending[task_id]
        node, raw, bucket = pending
        ratio = min(_LOG_CLIP, max(-_LOG_CLIP, math.log(latency / raw)))
        count = self._samples.get(node, 0)
        previous = self._log_ratio.get(node, ratio)
        self._log_ratio[node] = previous + self._step(count) * (ratio - previous)
        self._samples[node] = count + 1
        self._factor_cache = None
        # The value learns what the node's speed does not explain (SGD on the same error).
        speed = self.speed_factors([node])[node]
        residual = min(_LOG_CLIP, max(-_LOG_CLIP, ratio - math.log(speed)))
        n = self.value_counts[bucket]
        self.value[bucket] += self._step(n) * (residual - self.value[bucket])
        self.value_counts[bucket] = n + 1
        self.completions += 1

    def learn(self, transition: Transition) -> None:
        """The engine's reward (change of windowed throughput): refused unless finite; with
        ``reward_weight > 0`` a positive reward lowers the chosen bucket's value (seen once the
        bucket has completions: the value is shrunk by its sample count like every other)."""
        try:
            reward = float(transition.reward)
        except (TypeError, ValueError, OverflowError):
            reward = math.nan
        if not math.isfinite(reward):
            self.refused += 1
            return
        self.rewards_seen += 1
        node = transition.decision.node
        states = {n.node_id: n for n in transition.observation.nodes}
        if self.reward_weight > 0 and node in states and node in self._specs:
            bucket = self.bucket(node, states[node])
            nudge = self.learning_rate * self.reward_weight * max(-1.0, min(1.0, reward))
            # clipped like the latency residuals, so a run of rewards cannot run away
            self.value[bucket] = max(-_LOG_CLIP, min(_LOG_CLIP, self.value[bucket] - nudge))
