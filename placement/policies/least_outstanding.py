"""Least-outstanding: the node with the fewest tasks in flight (``NodeState.queue_depth``).

With ``per_slot=True`` (default) the count is divided by the node's ``NodeSpec.task_slots``, so a
node with twice the slots takes twice the tasks; with ``per_slot=False`` it is the raw count (no
node spec needed). Ties: lower Load_i, then observation order.

Example::

    >>> from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_a", 2, 16), NodeSpec("tm_b", 8, 16)))
    >>> obs = Observation(Task("t1", "video_synopsis", 1000),
    ...                   (NodeState("tm_a", queue_depth=1), NodeState("tm_b", queue_depth=3)), 0.0)
    >>> LeastOutstandingPolicy(cluster).decide(obs).node     # 3/8 < 1/2
    'tm_b'
    >>> LeastOutstandingPolicy(cluster, per_slot=False).decide(obs).node
    'tm_a'
"""

from __future__ import annotations

from placement.policies.base import ClusterPolicy, first_and_second
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, Observation

__all__ = ["LeastOutstandingPolicy"]


class LeastOutstandingPolicy(ClusterPolicy):
    """Scores: outstanding tasks (per slot when ``per_slot``) per node (lowest wins)."""

    name = "least_outstanding"

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0, *,
                 per_slot: bool = True) -> None:
        self.per_slot = per_slot
        super().__init__(cluster, costs, seed)

    def _describe(self, node_id: str, depth: int, score: float) -> str:
        if self.per_slot:
            return f"{node_id} {depth}/{self._specs[node_id].task_slots} = {score:.2f}"
        return f"{node_id} {depth}"

    def decide(self, observation: Observation) -> Decision:
        states = self.states(observation)
        if self.per_slot:
            ids, left_out = self.known_ids(observation)
            specs = self._specs
            scores = {nid: states[nid].queue_depth / specs[nid].task_slots for nid in ids}
        else:
            ids, left_out = observation.node_ids, ""
            scores = {nid: float(states[nid].queue_depth) for nid in ids}
        node, second = first_and_second(ids, lambda nid: (scores[nid], states[nid].load))
        what = "fewest outstanding per slot" if self.per_slot else "fewest outstanding"
        text = f"{what}: {self._describe(node, states[node].queue_depth, scores[node])}"
        if second is None:
            text += " (only node)"
        else:
            text += f" (next {self._describe(second, states[second].queue_depth, scores[second])}"
            if scores[second] == scores[node]:
                text += f"; tie broken by load {states[node].load:.2f} vs " \
                        f"{states[second].load:.2f}"
            text += ")"
        return Decision(node, text + left_out, scores)
