"""MCT / ETC (minimum completion time): the paper's ETC cluster rule.

The node minimising ready time + expected time to compute (ETC)::

    completion_s = backlog_s / parallel_units + task_ms_on(task, node) / 1000
    parallel_units = cpu_cores + number of GPUs     (the node's computing units)

``backlog_s`` (``NodeState``) is the estimated work already at the node in unit-seconds (the sum
of ``CostModel.task_work_ms`` of its tasks), so spreading it over the node's computing units gives
when the node can start on a new task; ``task_ms_on`` is the task's estimated makespan alone on the
idle node (critical path on best units plus input transfer), times the node's measured
``speed_factor`` where the observation has one (the Flink router's; 1 in the simulator). Both come from public estimates
(profiles), which is the paper's stated default for ETC; the simulator's true run times are never
seen. Ties: observation order.

Example::

    >>> from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_cpu", 8, 32),
    ...                        NodeSpec("tm_gpu", 4, 32, gpus=(GpuSpec("v100", 16),))))
    >>> busy = NodeState("tm_gpu", backlog_s=60.0)     # a minute of queued work on 5 units
    >>> obs = Observation(Task("t1", "face_recognition", 2_000_000),
    ...                   (NodeState("tm_cpu"), busy), 0.0)
    >>> MinimumCompletionTimePolicy(cluster).decide(obs).node
    'tm_cpu'
"""

from __future__ import annotations

from placement.policies.base import EstimatingPolicy, first_and_second
from workload.model import Decision, NodeSpec, Observation, Task

__all__ = ["MinimumCompletionTimePolicy", "parallel_units"]


def parallel_units(node: NodeSpec) -> int:
    """Computing units that work off a node's backlog in parallel: its cores plus its GPUs."""
    return node.cpu_cores + len(node.gpus)


class MinimumCompletionTimePolicy(EstimatingPolicy):
    """Scores: estimated completion time in seconds per node (lowest wins).

    A subclass may divide the backlog by something else than the unit count
    (:meth:`_drain_rates`) and hear which node it picked (:meth:`_decided`)."""

    name = "mct"
    #: how the reason names the rule
    rule = "minimum completion time"

    def _cluster_changed(self) -> None:
        super()._cluster_changed()
        self._units = {n.node_id: parallel_units(n) for n in self.cluster.nodes}

    def _drain_rates(self, observation: Observation, ids, states) -> dict[str, float]:
        """What each node's backlog is divided by: its parallel units."""
        return self._units

    def _rate_note(self, rate: float) -> str:
        """The divisor in the reason ("" for the unit count)."""
        return ""

    def _decided(self, task: Task, node: str) -> None:
        """``task`` goes to ``node`` (a hook for rules that learn from what they sent)."""

    def decide(self, observation: Observation) -> Decision:
        ids, left_out = self.known_ids(observation)
        states = self.states(observation)
        task = observation.task
        rates = self._drain_rates(observation, ids, states)
        ready = {nid: states[nid].backlog_s / rates[nid] for nid in ids}
        # speed_factor: the node's measured task time over the estimate (1 in the simulator;
        # the Flink router measures it from the feedback, placement.speed)
        scores = {nid: ready[nid] + self.task_ms(task, nid) * states[nid].speed_factor / 1000.0
                  for nid in ids}
        node, second = first_and_second(ids, scores.__getitem__)
        self._decided(task, node)

        def parts(nid: str) -> str:
            return f"ready {ready[nid]:.2f} s{self._rate_note(rates[nid])} + compute " \
                   f"{scores[nid] - ready[nid]:.2f} s = {scores[nid]:.2f} s"

        nxt = f"next {second} {parts(second)}" if second else "only node"
        return Decision(node, f"{self.rule}: {node} {parts(node)} ({nxt}){left_out}", scores)
