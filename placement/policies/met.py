"""MET (minimum execution time): the node where the task alone would finish soonest, ignoring
how busy the nodes are.

Execution time = ``CostModel.task_ms_on(task, node)``: the task's DAG critical path with every
stage on the node's best unit (fastest core or fastest GPU), plus the input transfer over the
node's downlink. Public estimates only. Because MET ignores load, it piles work onto the fastest
node; it is the classic foil for MCT (``mct.py``). Ties: observation order.

Example::

    >>> from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_cpu", 8, 32),
    ...                        NodeSpec("tm_gpu", 4, 32, gpus=(GpuSpec("v100", 16),))))
    >>> obs = Observation(Task("t1", "face_recognition", 2_000_000),
    ...                   (NodeState("tm_cpu"), NodeState("tm_gpu", cpu_util=1.0)), 0.0)
    >>> MinimumExecutionTimePolicy(cluster).decide(obs).node
    'tm_gpu'
"""

from __future__ import annotations

from placement.policies.base import EstimatingPolicy, first_and_second
from workload.model import Decision, Observation

__all__ = ["MinimumExecutionTimePolicy"]


class MinimumExecutionTimePolicy(EstimatingPolicy):
    """Scores: estimated execution time in ms per node (lowest wins)."""

    name = "met"

    def decide(self, observation: Observation) -> Decision:
        ids, left_out = self.known_ids(observation)
        task = observation.task
        scores = {nid: self.task_ms(task, nid) for nid in ids}
        node, second = first_and_second(ids, scores.__getitem__)
        nxt = f"next {second} {scores[second]:.1f} ms" if second else "only node"
        return Decision(node, f"minimum execution time: {node} {scores[node]:.1f} ms for "
                              f"{task.app_id} ({nxt}), load ignored{left_out}", scores)
