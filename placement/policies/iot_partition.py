"""IoT adaptive partitioning ("Adaptive partitioning and efficient scheduling for distributed
DNN training in heterogeneous IoT environment", Huang et al., Computer Communications 2024), as
a streaming cluster policy that partitions a task's stages over weak, unequal nodes.

What it decides. The paper (PG-MPSS) partitions a DNN into consecutive pieces and maps each
piece to one of a set of heterogeneous, memory-constrained IoT devices, minimising the
per-iteration time of a synchronous pipeline: the pieces' compute and the transfers between
devices all lie on the path of an iteration, and a device can only take a piece whose memory it
can hold. It learns the partition and the mapping with a policy-gradient double network and
compares against dynamic programming, a genetic algorithm, PSO and Average&Greedy.

Here (our reading; only the abstract and summaries were at hand, so the learned networks are not
reproduced): a streaming task is one microbatch, so the per-iteration time of its pipeline is
its end-to-end latency, and a task's 4-6 stages make the exact optimum of the paper's objective
cheap. We compute it by the same dynamic program over cut points as Pipe-Torch
(:func:`placement.policies.pipe_torch.best_partition`), with the two differences that define
this system:

1. **latency, not bottleneck**: segment times (ready + compute + data in, as Pipe-Torch's
   :class:`~placement.policies.pipe_torch.ChainEstimate`) are *summed*, so every cut pays its
   transfer in full: a split is taken only when a node much better at the later stages (or a
   full node) repays it, and never just to shorten the slowest step;
2. **memory-bound devices**: a node may only take a segment whose stages all fit at once in its
   free memory (the paper's resident partition): ``sum of CostModel.gpu_memory_mb`` of the
   segment's stages (model context plus frames) <= ``usable_memory_fraction`` x (free host
   memory + free GPU memory, from the observed utilisation). A node that cannot hold a stage is
   refused; a task no single node can hold is split over nodes that can.

If no partition fits anywhere, the task goes whole to the node with the most free memory and the
reason says so (the simulator may then run out of GPU memory and retry, as for any policy).

Settings (ASSUMPTIONS of the adaptation, named here):

- ``max_segments`` (3): the most nodes a task spans; >= 1.
- ``candidate_nodes`` (4): the nodes considered, lowest whole-task completion estimate first
  (``mct``'s score); >= 1.
- ``min_split_gain`` (0.05): as Pipe-Torch's, on the latency: a split must beat the best whole
  placement that fits by this fraction; in [0, 1).
- ``usable_memory_fraction`` (0.9): the share of a node's free memory a segment may take (the
  rest left to the runtime, as on a small device); in (0, 1].

Scores: the best end-to-end latency (s) with the first segment on each candidate (inf where
nothing fits).

Example::

    >>> from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("a", 1, 16), NodeSpec("b", 1, 16)))  # 1 Gbps links
    >>> obs = Observation(Task("t", "face_recognition", 2_000_000),
    ...                   (NodeState("a"), NodeState("b")), 0.0)
    >>> decision = IoTPartitionPolicy(cluster).decide(obs)     # Pipe-Torch splits this one
    >>> decision.node, decision.stage_nodes
    ('a', None)
"""

from __future__ import annotations

import math
import operator

from placement.policies.pipe_torch import ChainEstimate, PipeTorchPolicy, as_decision, describe
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, NodeState, Observation

__all__ = ["IoTPartitionPolicy"]


class IoTPartitionPolicy(PipeTorchPolicy):
    """Scores: the best end-to-end latency (s) with the first segment on each candidate."""

    name = "iot_partition"

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0, *,
                 max_segments: int = 3, candidate_nodes: int = 4, min_split_gain: float = 0.05,
                 usable_memory_fraction: float = 0.9) -> None:
        if isinstance(usable_memory_fraction, bool) \
                or not isinstance(usable_memory_fraction, (int, float)) \
                or not math.isfinite(usable_memory_fraction) \
                or not 0 < usable_memory_fraction <= 1:
            raise ValueError(f"usable_memory_fraction must be a number in (0, 1], got "
                             f"{usable_memory_fraction!r}")
        self.usable_memory_fraction = float(usable_memory_fraction)
        super().__init__(cluster, costs, seed, max_segments=max_segments,
                         candidate_nodes=candidate_nodes, min_split_gain=min_split_gain)

    def free_memory_mb(self, state: NodeState) -> float:
        """What a segment may take on the node: the usable share of its free host and GPU
        memory (MB), from the observed utilisation."""
        spec = self.spec(state.node_id)
        host = spec.host_memory_gb * 1024 * (1.0 - min(1.0, max(0.0, state.host_mem_util)))
        gpu = sum(g.memory_gb for g in spec.gpus) * 1024 * (
            1.0 - min(1.0, max(0.0, state.gpu_mem_util)))
        return self.usable_memory_fraction * (host + gpu)

    def decide(self, observation: Observation) -> Decision:
        ids, left_out = self.known_ids(observation)
        states, task = self.states(observation), observation.task
        if task.app_id not in APPLICATIONS:
            raise KeyError(f"{self.name}: unknown application {task.app_id!r}")
        stages = APPLICATIONS[task.app_id].stages
        need = [self.costs.gpu_memory_mb(s.name, task.input_size) for s in stages]
        free = {nid: self.free_memory_mb(states[nid]) for nid in ids}
        # Only nodes that can hold at least the task's smallest stage are worth a candidate slot.
        able = [nid for nid in ids if free[nid] >= min(need)] or ids
        candidates = self.candidates(task, able, states)

        def fits(node: str, start: int, end: int) -> bool:
            return sum(need[start:end]) <= free[node]

        chain = ChainEstimate(task, self, states, self._units, self.fractions)
        partition, scores, note = self.plan(chain, candidates, operator.add, fits)
        if partition is None:
            home = max(ids, key=lambda n: (free[n], -ids.index(n)))
            scores.setdefault(home, math.inf)
            return Decision(home, f"iot-partition: no partition of {task.app_id} "
                                  f"({sum(need):.0f} MB over {len(stages)} stages) fits the "
                                  f"free memory of {candidates}; whole on {home}, the most "
                                  f"free memory ({free[home]:.0f} MB){left_out}", scores)
        refused = [nid for nid in candidates if not fits(nid, 0, len(stages))]
        why = (f"; cannot hold the whole task ({sum(need):.0f} MB): "
               + ", ".join(f"{nid} ({free[nid]:.0f} MB free)" for nid in refused)
               if refused else "")
        reason = (f"iot-partition: latency {partition.value:.3g} s over "
                  f"{len(partition.segments)} segment(s): {describe(chain, partition)}"
                  f"{note}{why}{left_out}")
        return as_decision(chain, partition, reason, scores)
