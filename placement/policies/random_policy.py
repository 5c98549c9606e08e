"""Random: the paper's Random baseline, a node drawn uniformly for every task.

Every node can run every task (stages without a GPU fall back to CPU cores), so all observed
nodes are feasible. Deterministic for a seed: the draws come from ``random.Random(seed)``.

Example::

    >>> from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_a", 4, 16), NodeSpec("tm_b", 4, 16)))
    >>> policy = RandomPolicy(cluster, seed=7)
    >>> obs = Observation(Task("t1", "video_synopsis", 1000),
    ...                   (NodeState("tm_a"), NodeState("tm_b")), now_s=0.0)
    >>> policy.decide(obs).node in ("tm_a", "tm_b")
    True
"""

from __future__ import annotations

import random

from placement.policies.base import ClusterPolicy
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, Observation

__all__ = ["RandomPolicy"]


class RandomPolicy(ClusterPolicy):
    """Uniform over ``observation.node_ids``; scores are the equal probabilities."""

    name = "random"

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0) -> None:
        super().__init__(cluster, costs, seed)
        self._rng = random.Random(seed)

    def decide(self, observation: Observation) -> Decision:
        ids = observation.node_ids
        if not ids:
            raise ValueError("the observation has no nodes to choose from")
        node = ids[self._rng.randrange(len(ids))]
        share = 1.0 / len(ids)
        return Decision(node, f"random: {node}, uniform over {len(ids)} nodes (seed {self.seed})",
                        dict.fromkeys(ids, share))
