"""Flink ``taskmanager.load-balance.mode: TASKS``: balance the number of tasks per TaskManager.

Flink's TASKS mode "tries to schedule evenly tasks across all available TaskManagers ... based
the number of tasks" (Flink 2.2 option text; ``TasksBalancedRequestSlotMatchingStrategy``), so
every TaskManager runs about the same number of tasks whatever its size; that is the point of the
mode, and what separates it from ``least_outstanding`` with ``per_slot=True``. Here: the node with
the fewest tasks in flight (``queue_depth``); ties go to cluster order (nodes outside the cluster
spec after those in it, in observation order). Needs no node spec.

Example::

    >>> from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_big", 32, 64), NodeSpec("tm_small", 2, 8)))
    >>> states = (NodeState("tm_big", queue_depth=3), NodeState("tm_small", queue_depth=2))
    >>> obs = Observation(Task("t1", "video_synopsis", 1000), states, 0.0)
    >>> FlinkTasksBalancePolicy(cluster).decide(obs).node
    'tm_small'
"""

from __future__ import annotations

from placement.policies.base import ClusterPolicy, first_and_second
from workload.model import Decision, Observation

__all__ = ["FlinkTasksBalancePolicy"]


class FlinkTasksBalancePolicy(ClusterPolicy):
    """Scores: tasks in flight per node (lowest wins)."""

    name = "flink_tasks_balance"

    def decide(self, observation: Observation) -> Decision:
        if not observation.nodes:
            raise ValueError("the observation has no nodes to choose from")
        scores = {n.node_id: float(n.queue_depth) for n in observation.nodes}
        rank = self.cluster_rank
        node, second = first_and_second(observation.node_ids,
                                        lambda nid: (scores[nid], rank(nid)))
        nxt = f"next {second} {scores[second]:.0f}" if second else "only node"
        return Decision(node, f"tasks balance: {node} has the fewest tasks {scores[node]:.0f} "
                              f"({nxt}), capacity not considered", scores)
