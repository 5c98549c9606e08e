"""Round-robin over node ids: each task goes to the node after the previous one.

The cycle order is the cluster order, with nodes first seen later appended; the cursor is the id
of the last node chosen, not an index, so a node leaving or joining never shifts the cycle: the
next task goes to the next present node after the cursor.

Example::

    >>> from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_a", 4, 16), NodeSpec("tm_b", 4, 16)))
    >>> policy = RoundRobinPolicy(cluster)
    >>> obs = Observation(Task("t1", "video_synopsis", 1000),
    ...                   (NodeState("tm_a"), NodeState("tm_b")), now_s=0.0)
    >>> [policy.decide(obs).node for _ in range(3)]
    ['tm_a', 'tm_b', 'tm_a']
"""

from __future__ import annotations

from placement.policies.base import ClusterPolicy
from workload.model import Decision, Observation

__all__ = ["RoundRobinPolicy"]


class RoundRobinPolicy(ClusterPolicy):
    """Scores: how many steps after the cursor each node comes (the chosen one is lowest)."""

    name = "round_robin"

    def _cluster_changed(self) -> None:
        # The ring only grows: a node that left keeps its place, so when it returns the cycle
        # resumes around it instead of reshuffling.
        if not hasattr(self, "_ring"):
            self._ring: list[str] = []
            self._ring_pos: dict[str, int] = {}
            self._last: str | None = None
        for node_id in self.cluster.node_ids:
            self._add(node_id)

    def _add(self, node_id: str) -> None:
        if node_id not in self._ring_pos:
            self._ring_pos[node_id] = len(self._ring)
            self._ring.append(node_id)

    def decide(self, observation: Observation) -> Decision:
        ids = observation.node_ids
        if not ids:
            raise ValueError("the observation has no nodes to choose from")
        for node_id in ids:
            self._add(node_id)
        size = len(self._ring)
        start = self._ring_pos[self._last] + 1 if self._last is not None else 0
        # Steps from the cursor: 1 for the node right after it, `size` for the cursor itself.
        scores = {nid: float((self._ring_pos[nid] - start) % size + 1) for nid in ids}
        node = min(ids, key=scores.__getitem__)
        previous, self._last = self._last, node
        if previous is None:
            reason = f"round-robin: {node} starts the cycle"
        else:
            reason = f"round-robin: {node} is next after {previous}"
        return Decision(node, reason, scores)
