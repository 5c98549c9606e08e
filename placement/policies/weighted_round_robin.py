"""Capacity-weighted round-robin: nginx's smooth weighted round-robin, weight = node capacity.

Capacity of a node (a documented proxy, in "reference CPU threads")::

    capacity = cpu_cores * cpu_speed + gpu_weight * sum(gpu.speed for gpu in gpus)

``cpu_speed`` is relative to the profiling CPU thread and ``gpu.speed`` to one K80 die
(``workload/calibration.yaml``); ``gpu_weight`` (default 1.0) says how many CPU threads one
reference GPU counts for. The two units differ, so this is deliberately the simple textbook
weight, not an estimate of throughput (MET / MCT use the cost model for that).

Smooth WRR (nginx ``ngx_http_upstream_get_peer``): every decision adds each present node's weight
to its running ``current`` value, picks the largest ``current`` (ties: observation order) and
subtracts the total weight from the winner. Weights 3:1 give a, a, b, a, a, a, b, a, ...: exactly
3:1 over every 4 decisions, interleaved rather than in bursts. A node missing from an observation
is dropped from the running values and starts again from 0 when it returns.

Example::

    >>> from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_a", 3, 16), NodeSpec("tm_b", 1, 16)))
    >>> policy = WeightedRoundRobinPolicy(cluster)
    >>> obs = Observation(Task("t1", "video_synopsis", 1000),
    ...                   (NodeState("tm_a"), NodeState("tm_b")), now_s=0.0)
    >>> "".join(policy.decide(obs).node[-1] for _ in range(8))
    'aabaaaba'
"""

from __future__ import annotations

from placement.policies.base import ClusterPolicy
from workload.estimates import CostModel, gpu_spec_speed
from workload.model import ClusterSpec, Decision, NodeSpec, Observation

__all__ = ["WeightedRoundRobinPolicy", "node_capacity"]


def node_capacity(node: NodeSpec, gpu_weight: float = 1.0) -> float:
    """``cpu_cores * cpu_speed + gpu_weight * sum of GPU speeds`` (see the module docstring)."""
    return node.cpu_cores * node.cpu_speed + gpu_weight * sum(gpu_spec_speed(g)
                                                              for g in node.gpus)


class WeightedRoundRobinPolicy(ClusterPolicy):
    """Scores: each node's running ``current`` value at the moment of choice (highest wins)."""

    name = "weighted_round_robin"

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0, *,
                 gpu_weight: float = 1.0) -> None:
        if gpu_weight < 0:
            raise ValueError(f"gpu_weight must be >= 0, got {gpu_weight}")
        self.gpu_weight = gpu_weight
        self._current: dict[str, float] = {}
        super().__init__(cluster, costs, seed)

    def _cluster_changed(self) -> None:
        self._weights = {n.node_id: node_capacity(n, self.gpu_weight) for n in self.cluster.nodes}

    def decide(self, observation: Observation) -> Decision:
        ids, left_out = self.known_ids(observation)
        weights, current = self._weights, self._current
        if len(current) > len(ids) or any(nid not in current for nid in ids):
            # The node set changed: keep the running values of present nodes only.
            current = self._current = {nid: current.get(nid, 0.0) for nid in ids}
        total = 0.0
        for nid in ids:
            current[nid] += weights[nid]
            total += weights[nid]
        scores = dict(current)
        node = ids[0]
        for nid in ids:  # strict '>' keeps the first of equal values
            if current[nid] > current[node]:
                node = nid
        current[node] -= total
        return Decision(node, f"weighted round-robin: {node} current {scores[node]:.2f} is "
                              f"highest (capacity {weights[node]:.2f} of {total:.2f}){left_out}",
                        scores)
