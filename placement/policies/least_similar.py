"""Least-similar node placement: the cluster half of interference-aware parallelization.

Paper: "Interference-Aware Parallelization for Deep Learning Workload in GPU Cluster" (a new job
goes to the node whose running jobs are least similar to it in resource usage, so co-located
work contends for different resources; its GPUs are then mapped by the node half,
:mod:`interference.schedulers.comm_aware`).

What it decides, per task:

1. each node's estimated completion time, as ``mct`` computes it (backlog over the node's
   units plus the task's estimated makespan there); the nodes within ``slack`` of the best are
   candidates, so work never goes to a hopeless node;
2. among them, the node whose current application mix is least similar to the task: cosine of
   the task's resource profile and the sum of the profiles of the tasks in flight there;
3. ties: the earlier completion, then observation order.

Adaptation to streaming tasks and stages: the paper profiles each DL job's GPU usage; a task
here is a DAG of stages, so its profile is the time-weighted mean of its stages' public GPU
profiles (``calibration.yaml``'s ``stage_gpu_profile``, the vectors Mystic and IAWP use),
weighted by each stage's estimated time on the reference GPU, plus one more dimension for the
share of its time in CPU-only stages (those use a core, not the GPU). Profiles are per
application at ``profile_pixels`` (a task's stage times scale together with its size, so the
mix barely depends on it). The paper reads what runs from the cluster; a router only knows
what it sent, so the policy remembers the application of each task it sent, per node: a task
leaves the mix when its completion is reported (``observe_completion``), and a node's mix is
scaled down to the node's ``queue_depth`` whenever the router counts fewer tasks there than the
mix holds (completions that were not reported). At most ``max_tasks`` tasks are remembered.

Parameters (constructor settings):

- ``slack=0.25``: candidates finish within ``(1 + slack)`` times the best estimated
  completion time (0: only the best nodes, i.e. ``mct`` with similarity as tie-breaker).
- ``profile_pixels=268_800_000``: the input size at which application profiles are computed
  (the paper's mean clip, 640 x 480 x 25 fps x 35 s).
- ``max_tasks=10_000``: tasks remembered until their completion (the oldest leave first).

Scores: the cosine similarity of every candidate node (lowest wins); nodes outside the slack
are not scored.

Example::

    >>> from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_a", 4, 16), NodeSpec("tm_b", 4, 16)))
    >>> policy = LeastSimilarPolicy(cluster)
    >>> policy.note_sent(Task("old", "face_recognition", 1000), "tm_a")
    >>> obs = Observation(Task("t1", "face_recognition", 1000),
    ...                   (NodeState("tm_a", queue_depth=1), NodeState("tm_b", queue_depth=1)),
    ...                   0.0)
    >>> policy.decide(obs).node                  # tm_b runs nothing this policy knows of
    'tm_b'
"""

from __future__ import annotations

import math
from collections import OrderedDict

from interference.schedulers.mystic import cosine
from interference.stdm import GPU_METRICS
from placement.policies.base import EstimatingPolicy, first_and_second
from placement.policies.mct import parallel_units
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, Observation, Task

__all__ = ["LeastSimilarPolicy"]


class LeastSimilarPolicy(EstimatingPolicy):
    """Among the nodes that finish the task within ``slack`` of the best, the one whose
    in-flight application mix is least similar to the task."""

    name = "least_similar"

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0, *,
                 slack: float = 0.25, profile_pixels: int = 268_800_000,
                 max_tasks: int = 10_000) -> None:
        if not (math.isfinite(slack) and slack >= 0):
            raise ValueError(f"slack must be a finite number >= 0, got {slack}")
        if int(profile_pixels) != profile_pixels or profile_pixels < 1:
            raise ValueError(f"profile_pixels must be a whole number >= 1, got {profile_pixels}")
        if int(max_tasks) != max_tasks or max_tasks < 1:
            raise ValueError(f"max_tasks must be a whole number >= 1, got {max_tasks}")
        self.slack = float(slack)
        self.profile_pixels = int(profile_pixels)
        self.max_tasks = int(max_tasks)
        # Per node id (kept across set_cluster): application -> tasks in flight the policy sent.
        self.mix: dict[str, dict[str, float]] = {}
        self._sent: OrderedDict[str, tuple[str, str]] = OrderedDict()  # task -> (node, app)
        self._profiles: dict[str, tuple[float, ...]] = {}
        super().__init__(cluster, costs, seed)

    def _cluster_changed(self) -> None:
        super()._cluster_changed()
        self._units = {n.node_id: parallel_units(n) for n in self.cluster.nodes}

    # -- profiles -------------------------------------------------------------------------------
    def profile(self, app_id: str) -> tuple[float, ...]:
        """The application's resource profile: its stages' GPU metrics weighted by their time
        on the reference GPU, and a last entry for the share of time in CPU-only stages."""
        cached = self._profiles.get(app_id)
        if cached is not None:
            return cached
        reference = self.costs.calibration.raw["stage_gpu_speedup"]["reference_gpu"]
        sums = [0.0] * (len(GPU_METRICS) + 1)
        total = 0.0
        for stage in APPLICATIONS[app_id].stages:
            ms, profile = self._stage_ms(stage.name, self.profile_pixels, reference)
            total += ms  # weights are stage times: the pressure over the task's life
            if profile is None:
                sums[-1] += ms  # CPU-only: it presses on a core, not on the GPU
            else:
                for i, metric in enumerate(profile[:len(GPU_METRICS)]):
                    sums[i] += metric * ms
        value = tuple(x / total for x in sums) if total > 0 else tuple(sums)
        self._profiles[app_id] = value
        return value

    def _stage_ms(self, stage: str, size: int, reference: str):
        """(estimated ms, GPU profile) on the reference GPU; (core ms, None) if CPU-only."""
        gpu_ms = self.costs.gpu_ms(stage, size, reference)
        profile = self.costs.stage(stage).gpu_profile
        if gpu_ms is None or not profile:
            return self.costs.cpu_ms(stage, size), None
        return gpu_ms, profile

    def node_vector(self, node_id: str) -> list[float]:
        """Sum of the profiles of the tasks in flight at the node (zeros when none)."""
        mix = self.mix.get(node_id, {})
        vector: list[float] = []
        for app, count in mix.items():
            profile = self.profile(app)
            if not vector:
                vector = [0.0] * len(profile)
            for i, value in enumerate(profile):
                vector[i] += count * value
        return vector

    # -- what the policy remembers --------------------------------------------------------------
    def note_sent(self, task: Task, node_id: str) -> None:
        """Count ``task`` in ``node_id``'s mix until its completion is reported."""
        again = self._sent.pop(task.task_id, None)
        if again is not None:  # the same task sent again (a retry): it left the other node
            self._forget(*again)
        mix = self.mix.setdefault(node_id, {})
        mix[task.app_id] = mix.get(task.app_id, 0.0) + 1.0
        self._sent[task.task_id] = (node_id, task.app_id)
        while len(self._sent) > self.max_tasks:  # forget the oldest: it has most likely left
            old_task, (old_node, old_app) = self._sent.popitem(last=False)
            self._forget(old_node, old_app)

    def _forget(self, node_id: str, app_id: str) -> None:
        mix = self.mix.get(node_id, {})
        if app_id in mix:
            mix[app_id] = max(0.0, mix[app_id] - 1.0)
            if mix[app_id] == 0.0:
                del mix[app_id]

    def observe_completion(self, task_id: str, latency_s: float, node_id: str) -> None:
        sent = self._sent.get(task_id)
        if sent is not None and sent[0] == node_id:   # another node's claim retires nothing
            del self._sent[task_id]
            self._forget(*sent)

    def _bound(self, node_id: str, queue_depth: int) -> None:
        """Scale the node's mix down to what the router counts there (lost completions)."""
        mix = self.mix.get(node_id)
        total = sum(mix.values()) if mix else 0.0
        if total > max(0, queue_depth):
            scale = max(0, queue_depth) / total
            self.mix[node_id] = {app: n * scale for app, n in mix.items() if n * scale > 0}

    # -- the decision ---------------------------------------------------------------------------
    def decide(self, observation: Observation) -> Decision:
        ids, left_out = self.known_ids(observation)
        states, task = self.states(observation), observation.task
        ect = {}
        for nid in ids:
            self._bound(nid, states[nid].queue_depth)
            ect[nid] = (states[nid].backlog_s / self._units[nid]
                        + self.task_ms(task, nid) * states[nid].speed_factor / 1000.0)
        best_ect = min(ect.values())
        limit = best_ect * (1.0 + self.slack)
        candidates = [nid for nid in ids if ect[nid] <= limit]
        mine = self.profile(task.app_id)
        scores = {nid: cosine(mine, self.node_vector(nid)) for nid in candidates}
        node, second = first_and_second(candidates, lambda nid: (scores[nid], ect[nid]))
        self.note_sent(task, node)
        outside = len(ids) - len(candidates)
        nxt = f"next {second} {scores[second]:.3f}" if second else "only candidate"
        return Decision(node, (
            f"least similar: {node} cosine {scores[node]:.3f} to its mix ({nxt}); est. "
            f"completion {ect[node]:.2f}s within {self.slack:.0%} of best {best_ect:.2f}s; "
            f"{outside} of {len(ids)} nodes outside the slack{left_out}"), scores)
