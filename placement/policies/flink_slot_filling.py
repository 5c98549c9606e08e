"""Flink's default slot filling: fill one TaskManager before the next.

Flink 2.2's ``taskmanager.load-balance.mode`` is NONE by default ("the default mode without any
specified strategy"): the slot manager takes the first TaskManager with a matching free slot
(``DefaultResourceAllocationStrategy.AnyMatchingResourceMatchingStrategy``), which on a standing
cluster fills one TaskManager's slots before the next gets any; MIN_RESOURCES ("allocate slots on
minimum number of available TaskManagers") does the same on purpose. This policy mirrors that per
task: the first node in cluster order whose ``queue_depth`` is below its ``NodeSpec.task_slots``
takes the task. When every node is full (Flink would wait for a slot; a router cannot hold the
record back) the least over-subscribed node, the lowest ``queue_depth / task_slots``, takes it.
Fill order and ties follow cluster order, not observation order: Flink's order is the
TaskManagers', not the order their reports arrive in.

Example::

    >>> from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_a", 2, 16, slots=2), NodeSpec("tm_b", 2, 16, slots=2)))
    >>> obs = Observation(Task("t1", "video_synopsis", 1000),
    ...                   (NodeState("tm_a", queue_depth=1), NodeState("tm_b")), 0.0)
    >>> FlinkSlotFillingPolicy(cluster).decide(obs).node       # tm_a still has a free slot
    'tm_a'
"""

from __future__ import annotations

from placement.policies.base import ClusterPolicy, first_and_second
from workload.model import Decision, Observation

__all__ = ["FlinkSlotFillingPolicy"]


class FlinkSlotFillingPolicy(ClusterPolicy):
    """Scores: used fraction of slots, ``queue_depth / task_slots`` (above 1 = over-subscribed)."""

    name = "flink_slot_filling"

    def decide(self, observation: Observation) -> Decision:
        ids, left_out = self.known_ids(observation)
        states, specs = self.states(observation), self._specs
        scores = {nid: states[nid].queue_depth / specs[nid].task_slots for nid in ids}
        in_fill_order = sorted(ids, key=self.cluster_rank)
        for nid in in_fill_order:
            if states[nid].queue_depth < specs[nid].task_slots:
                return Decision(nid, f"slot filling: {nid} has a free slot "
                                     f"({states[nid].queue_depth} of {specs[nid].task_slots} "
                                     f"used), first in cluster order{left_out}", scores)
        node, second = first_and_second(in_fill_order, scores.__getitem__)

        def used(nid: str) -> str:
            return f"{states[nid].queue_depth}/{specs[nid].task_slots} = {scores[nid]:.2f}"

        nxt = f"next {second} {used(second)}" if second else "only node"
        return Decision(node, f"slot filling: every node full; {node} least over-subscribed "
                              f"{used(node)} ({nxt}){left_out}", scores)
