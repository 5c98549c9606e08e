"""A greedy oracle: minimum completion time computed from the simulator's hidden truth.

It frames every comparison from above (with the upper bound): it sees what no real policy can,
namely each stage's true duration (the hidden per-task noise), the exact work still queued at
every node right now (not a stale sample) and true GPU speeds. It is still greedy (one task at a
time, no look-ahead), so a learned policy may in principle beat it; it is not an optimum.

Example::

    metrics = Simulator().run(GreedyOracle(), fcfs, cluster, tasks, seed=1).metrics
"""

from __future__ import annotations

from workload.catalog import APPLICATIONS
from workload.model import Decision, Observation, Policy

__all__ = ["GreedyOracle"]


class GreedyOracle(Policy):
    name = "oracle"
    #: The simulator hands such policies its running state (``self.execution``).
    wants_ground_truth = True

    def __init__(self):
        self.execution = None

    def _completion_s(self, node, task) -> float:
        ex = self.execution
        units = node.spec.cpu_cores + len(node.spec.gpus)
        finish: dict[str, float] = {}
        for stage in APPLICATIONS[task.app_id].stages:
            start = max((finish[d] for d in stage.deps), default=0.0)
            finish[stage.name] = start + ex.true_best_s(node, task, stage.name)
        transfer = task.input_size / node.down.bandwidth_bytes_s * (1 + len(node.down.runs))
        return node.true_left_s / units + max(finish.values()) + transfer

    def decide(self, observation: Observation) -> Decision:
        if self.execution is None:
            raise RuntimeError("GreedyOracle only runs inside the simulator")
        task = observation.task
        scores = {n: self._completion_s(self.execution.nodes[n], task)
                  for n in observation.node_ids}
        best = min(observation.node_ids, key=lambda n: (scores[n], observation.node_ids.index(n)))
        return Decision(best, f"oracle: true completion {scores[best]:.1f} s on {best}", scores)
