"""Pipe-Torch ("Optimizing pipelined distributed deep learning in a heterogeneously networked
GPU cluster"), as a streaming cluster policy that splits a task's stages over nodes.

What it decides. Pipe-Torch partitions a model's layers into contiguous pipeline stages over
heterogeneous GPUs joined by links of unequal speed, choosing the cut points (by dynamic
programming) so that the pipeline's slowest step, compute or communication, is as fast as it
can be. Here a task's stages (the DAG in topological order, ``workload.catalog``) are the layers
and the stream of tasks is the pipeline's microbatches, so a *segment* of consecutive stages runs
on one node and the policy minimises the bottleneck::

    segment time = ready_s(node) + compute_s(segment, node) + in_s(segment)
    bottleneck   = max over segments of segment time

- ``compute_s``: the segment's critical path with each stage on the node's best unit
  (``CostModel.stage_best_ms``, the public estimate), times the node's ``speed_factor``;
- ``ready_s``: the node's backlog spread over its units, as ``mct`` (the streaming adaptation:
  the node's pipeline step is shared with every other task queued there, so a loaded node is a
  slow step);
- ``in_s``: the data entering the segment over the slower of the previous node's uplink and this
  node's downlink (link-aware): every output of an earlier stage that a stage at or after the
  cut still needs (``workload.stage_output`` bytes), plus the task's input while an entry stage
  is still to come (the input itself for the first segment, over its node's downlink).

The dynamic program runs over (stages placed, node of the last segment, nodes used): each node
holds at most one segment (a pipeline step per device, as in the paper). The answer becomes a
``Decision`` whose ``node`` holds the first segment and, when there is more than one segment,
``stage_nodes`` (the simulator's cross-node stage placement axis, ``simulator.stage_split``).
Ties: fewer segments, then candidate order. One segment is the whole task on that node, exactly
a plain decision; a split must beat the best whole placement by ``min_split_gain``.

Adapted, and why: the paper's per-layer profile is the calibration's per-stage estimate; its
measured bandwidth between GPUs is the node specs' up- and downlink (static, as the paper
profiles once); a stage skipping a segment is costed as if forwarded through the segment
between (the simulator sends it directly: a small over-estimate, PipeDream's convention).

Settings (ASSUMPTIONS of the adaptation, named here):

- ``max_segments`` (3): the most nodes one task spans; >= 1. The apps have 4-6 stages.
- ``candidate_nodes`` (4): the dynamic program considers the nodes with the lowest whole-task
  completion estimate (``mct``'s score) only, keeping a decision within a few milliseconds;
  >= 1.
- ``min_split_gain`` (0.05): a split is taken only when it beats the best whole placement by
  at least this fraction; in [0, 1). Not in the paper (its model is static, its gains large);
  here estimates are public ones and true stage times vary around them (the simulator's
  ``service_noise_sigma`` 0.2), so a split for a gain of a few percent costs link time for
  nothing.

Scores: the bottleneck (s) of the best partition whose first segment is on each candidate.

Example::

    >>> from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("a", 1, 16), NodeSpec("b", 1, 16)))  # 1 Gbps links
    >>> obs = Observation(Task("t", "face_recognition", 2_000_000),
    ...                   (NodeState("a"), NodeState("b")), 0.0)
    >>> decision = PipeTorchPolicy(cluster).decide(obs)
    >>> decision.node, sorted(set(decision.stage_nodes.values()))
    ('a', ['a', 'b'])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from placement.policies.base import EstimatingPolicy
from placement.policies.mct import parallel_units
from workload.catalog import APPLICATIONS, StageDef
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, NodeState, Observation, Task
from workload.stage_output import stage_output_bytes, stage_output_fractions

__all__ = ["PipeTorchPolicy", "Segment", "Partition", "ChainEstimate", "best_partition",
           "describe", "as_decision", "check_count"]

#: Relative slack when comparing objective values (sums of floats): ties go to fewer segments.
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Segment:
    """Stages ``start``..``end - 1`` (topological order) on ``node``, and their times (s)."""

    node: str
    start: int
    end: int
    ready_s: float
    compute_s: float
    in_s: float

    @property
    def time_s(self) -> float:
        return self.ready_s + self.compute_s + self.in_s


@dataclass(frozen=True)
class Partition:
    segments: tuple[Segment, ...]
    value: float          # the objective (bottleneck or sum), seconds


def check_count(label: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{label} must be an integer >= 1, got {value!r}")
    return value


class ChainEstimate:
    """One task's stages in topological order and what a segment of them costs on a node."""

    def __init__(self, task: Task, policy: EstimatingPolicy, states: dict[str, NodeState],
                 units: dict[str, int], fractions: dict[str, float]):
        self.task, self.policy, self.states, self.units = task, policy, states, units
        self.stages: tuple[StageDef, ...] = APPLICATIONS[task.app_id].stages
        index = {s.name: i for i, s in enumerate(self.stages)}
        self.input_bytes = float(task.input_size)  # one byte per pixel, as CostModel.transfer_s
        n = len(self.stages)
        # live[a]: bytes crossing a cut before stage a (a >= 1)
        self.live = [0.0] * (n + 1)
        last_use = {s.name: max((index[c.name] for c in self.stages if s.name in c.deps),
                                default=-1) for s in self.stages}
        last_entry = max(i for i, s in enumerate(self.stages) if not s.deps)
        for a in range(1, n):
            live = sum(stage_output_bytes(fractions, s.name, self.input_bytes)
                       for i, s in enumerate(self.stages[:a]) if last_use[s.name] >= a)
            self.live[a] = live + (self.input_bytes if last_entry >= a else 0.0)
        self._stage_s: dict[tuple[str, str], float] = {}
        self._segments: dict[tuple, Segment] = {}

    def stage_s(self, node: str, stage: str) -> float:
        key = (node, stage)
        if key not in self._stage_s:
            spec = self.policy.spec(node)
            self._stage_s[key] = (self.policy.costs.stage_best_ms(stage, self.task.input_size,
                                                                  spec) / 1000.0
                                  * self.states[node].speed_factor)
        return self._stage_s[key]

    def ready_s(self, node: str) -> float:
        return self.states[node].backlog_s / self.units[node]

    def compute_s(self, node: str, start: int, end: int) -> float:
        """Critical path of stages ``start..end-1`` on the node (outside inputs at time 0)."""
        finish: dict[str, float] = {}
        for stage in self.stages[start:end]:
            begin = max((finish[d] for d in stage.deps if d in finish), default=0.0)
            finish[stage.name] = begin + self.stage_s(node, stage.name)
        return max(finish.values())

    def in_s(self, previous: str | None, node: str, start: int) -> float:
        """Seconds for the data entering a segment at ``start`` on ``node`` from ``previous``
        (None: the first segment, the input over the node's downlink)."""
        spec = self.policy.spec(node)
        if previous is None:
            return self.input_bytes / (spec.downlink_mbps * 1e6 / 8)
        rate_mbps = min(self.policy.spec(previous).uplink_mbps, spec.downlink_mbps)
        return self.live[start] / (rate_mbps * 1e6 / 8)

    def segment(self, previous: str | None, node: str, start: int, end: int) -> Segment:
        key = (previous, node, start, end)
        seg = self._segments.get(key)
        if seg is None:
            seg = self._segments[key] = Segment(node, start, end, self.ready_s(node),
                                                self.compute_s(node, start, end),
                                                self.in_s(previous, node, start))
        return seg


def best_partition(chain: ChainEstimate, candidates: Sequence[str], max_segments: int,
                   combine: Callable[[float, float], float],
                   allowed: Callable[[str, int, int], bool] = lambda node, a, b: True,
                   first: str | None = None) -> Partition | None:
    """Dynamic programming over cut points: contiguous segments of ``chain``'s stages, each on
    a different candidate node, at most ``max_segments``, minimising the segment times folded
    with ``combine`` (``max``: the pipeline's bottleneck; a sum: end-to-end latency). ``allowed``
    may refuse a (node, start, end) segment; ``first`` fixes the first segment's node. None when
    no partition is allowed. Ties: fewer segments, then earlier candidates."""
    n = len(chain.stages)
    # best[(end, node index, used mask)] = (value, segments)
    best: dict[tuple[int, int, int], tuple[float, tuple[Segment, ...]]] = {}
    for j, node in enumerate(candidates):
        if first is not None and node != first:
            continue
        for end in range(1, n + 1):
            if allowed(node, 0, end):
                seg = chain.segment(None, node, 0, end)
                best[(end, j, 1 << j)] = (seg.time_s, (seg,))
    for start in range(1, n):  # extend every partial partition ending at ``start``
        for (end, j, mask), (value, segs) in sorted(best.items()):
            if end != start or len(segs) >= max_segments:
                continue
            for k, node in enumerate(candidates):
                if mask & (1 << k):
                    continue
                for stop in range(start + 1, n + 1):
                    if not allowed(node, start, stop):
                        continue
                    seg = chain.segment(candidates[j], node, start, stop)
                    key, new = (stop, k, mask | (1 << k)), combine(value, seg.time_s)
                    old = best.get(key)
                    if old is None or new < old[0] * (1 - _TOLERANCE):
                        best[key] = (new, segs + (seg,))
    finished = [(v, len(s), [candidates.index(g.node) for g in s], s)
                for (end, _, _), (v, s) in best.items() if end == n]
    if not finished:
        return None
    low = min(v for v, *_ in finished)
    value, _, _, segs = min((f for f in finished if f[0] <= low * (1 + _TOLERANCE)),
                            key=lambda f: (f[1], f[2]))
    return Partition(segs, value)


def describe(chain: ChainEstimate, partition: Partition) -> str:
    """``stage..stage@node t s`` per segment, joined by `` | ``."""
    parts = []
    for seg in partition.segments:
        names = [s.name for s in chain.stages[seg.start:seg.end]]
        span = names[0] if len(names) == 1 else f"{names[0]}..{names[-1]}"
        parts.append(f"{span}@{seg.node} {seg.time_s:.3g} s (ready {seg.ready_s:.3g} + compute "
                     f"{seg.compute_s:.3g} + in {seg.in_s:.3g})")
    return " | ".join(parts)


def as_decision(chain: ChainEstimate, partition: Partition, reason: str,
                scores: dict[str, float]) -> Decision:
    """The partition as a Decision: ``stage_nodes`` only when it spans more than one node."""
    home = partition.segments[0].node
    if len(partition.segments) == 1:
        return Decision(home, reason, scores)
    plan = {s.name: seg.node for seg in partition.segments
            for s in chain.stages[seg.start:seg.end]}
    return Decision(home, reason, scores, stage_nodes=plan)


class PipeTorchPolicy(EstimatingPolicy):
    """Scores: the best bottleneck (s) with the first segment on each candidate node."""

    name = "pipe_torch"

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0, *,
                 max_segments: int = 3, candidate_nodes: int = 4,
                 min_split_gain: float = 0.05) -> None:
        self.max_segments = check_count("max_segments", max_segments)
        self.candidate_nodes = check_count("candidate_nodes", candidate_nodes)
        if isinstance(min_split_gain, bool) or not isinstance(min_split_gain, (int, float)) \
                or not 0 <= min_split_gain < 1:
            raise ValueError(f"min_split_gain must be a number in [0, 1), got "
                             f"{min_split_gain!r}")
        self.min_split_gain = float(min_split_gain)
        super().__init__(cluster, costs, seed)
        self.fractions = stage_output_fractions(self.costs.calibration)

    def _cluster_changed(self) -> None:
        super()._cluster_changed()
        self._units = {n.node_id: parallel_units(n) for n in self.cluster.nodes}

    def candidates(self, task: Task, ids: list[str], states: dict[str, NodeState]) -> list[str]:
        """The ``candidate_nodes`` nodes with the lowest whole-task completion estimate (mct's
        score); ties keep observation order."""
        for nid in ids:
            state = states[nid]
            if not (math.isfinite(state.backlog_s) and state.backlog_s >= 0
                    and math.isfinite(state.speed_factor) and state.speed_factor > 0):
                raise ValueError(f"node {nid}: backlog_s must be finite and >= 0 and "
                                 f"speed_factor finite and > 0, got {state.backlog_s!r}, "
                                 f"{state.speed_factor!r}")
        score = {nid: states[nid].backlog_s / self._units[nid]
                 + self.task_ms(task, nid) * states[nid].speed_factor / 1000.0 for nid in ids}
        order = {nid: i for i, nid in enumerate(ids)}
        return sorted(ids, key=lambda n: (score[n], order[n]))[:self.candidate_nodes]

    def decide(self, observation: Observation) -> Decision:
        ids, left_out = self.known_ids(observation)
        states, task = self.states(observation), observation.task
        if task.app_id not in APPLICATIONS:
            raise KeyError(f"{self.name}: unknown application {task.app_id!r}")
        candidates = self.candidates(task, ids, states)
        chain = ChainEstimate(task, self, states, self._units, self.fractions)
        partition, scores, note = self.plan(chain, candidates, max)
        reason = (f"pipe-torch: bottleneck {partition.value:.3g} s over "
                  f"{len(partition.segments)} segment(s): {describe(chain, partition)}{note}"
                  f"{left_out}")
        return as_decision(chain, partition, reason, scores)

    def plan(self, chain: ChainEstimate, candidates: list[str],
             combine: Callable[[float, float], float],
             allowed: Callable[[str, int, int], bool] = lambda node, a, b: True
             ) -> tuple[Partition | None, dict[str, float], str]:
        """The best partition (None when none is allowed), the best value per first node
        (inf where none is allowed), and words on a split given up for ``min_split_gain``.
        Ties: fewer segments, then candidate order."""
        found = {nid: best_partition(chain, candidates, self.max_segments, combine, allowed,
                                     first=nid) for nid in candidates}
        scores = {nid: (p.value if p is not None else math.inf) for nid, p in found.items()}
        feasible = [nid for nid in candidates if found[nid] is not None]
        if not feasible:
            return None, scores, ""
        home = min(feasible, key=lambda n: (scores[n] * (1 - _TOLERANCE),
                                            len(found[n].segments), candidates.index(n)))
        best = found[home]
        whole = best_partition(chain, candidates, 1, combine, allowed)
        if len(best.segments) == 1 or whole is None:
            return best, scores, ""
        if best.value > whole.value * (1 - self.min_split_gain):
            return whole, scores, (f"; a split ({best.value:.3g} s) gains less than "
                                   f"min_split_gain {self.min_split_gain:g} over it")
        return best, scores, f" (whole on {whole.segments[0].node}: {whole.value:.3g} s)"
