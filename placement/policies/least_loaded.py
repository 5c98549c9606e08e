"""Least-loaded: the node with the lowest Load_i, the paper's load measure.

Load_i = mean of CPU, host-memory, GPU and GPU-memory utilisation (``NodeState.load``), as
reported (possibly stale by the feedback interval). Ties: observation order.

Example::

    >>> from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_a", 4, 16), NodeSpec("tm_b", 4, 16)))
    >>> obs = Observation(Task("t1", "video_synopsis", 1000),
    ...                   (NodeState("tm_a", cpu_util=0.8), NodeState("tm_b", cpu_util=0.4)), 0.0)
    >>> LeastLoadedPolicy(cluster).decide(obs).reason
    'least loaded: tm_b load 0.10 (next tm_a 0.20)'
"""

from __future__ import annotations

from placement.policies.base import ClusterPolicy, first_and_second
from workload.model import Decision, Observation

__all__ = ["LeastLoadedPolicy"]


class LeastLoadedPolicy(ClusterPolicy):
    """Scores: Load_i per node (lowest wins)."""

    name = "least_loaded"

    def decide(self, observation: Observation) -> Decision:
        if not observation.nodes:
            raise ValueError("the observation has no nodes to choose from")
        scores = {n.node_id: n.load for n in observation.nodes}
        node, second = first_and_second(observation.node_ids, scores.__getitem__)
        nxt = f"next {second} {scores[second]:.2f}" if second else "only node"
        return Decision(node, f"least loaded: {node} load {scores[node]:.2f} ({nxt})", scores)

    def decide_array(self, observation) -> int:
        """Fast path for ``simulator.fast`` (an ``ArrayObservation``): index of the lowest load,
        first index on ties (``numpy.argmin``), without building per-node objects."""
        import numpy as np
        return int(np.argmin(observation.load))
