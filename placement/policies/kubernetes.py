"""Kubernetes default scoring: NodeResourcesFit filter, LeastAllocated + BalancedAllocation scores.

kube-scheduler filters out nodes whose free resources cannot hold the pod's requests
(NodeResourcesFit), then sums the scores of its plugins (default weight 1 each). We use the two
resource scorers of ``pkg/scheduler/framework/plugins/noderesources`` with MaxNodeScore = 100
(the framework's scale; the old priority functions used 10, which changes no decision):

- LeastAllocated: ``mean over resources of (1 - requested_fraction) * 100`` (a fraction above 1
  scores 0), ``least_allocated.go``.
- BalancedAllocation: ``(1 - std(requested fractions)) * 100`` with the population standard
  deviation and each fraction capped at 1, ``balanced_allocation.go`` (for two resources this is
  ``|a - b| / 2``, the generalised form of the old ``1 - |cpu - mem|``).
- total = LeastAllocated + BalancedAllocation.

Adaptation to streaming tasks (a task is not a pod with declared requests):

- "Already requested" = the node's reported utilisation (NodeState), the only usage we observe.
- The task's request is estimated per node from the public costs, because the executor runs each
  stage on that node's best unit (``CostModel.stage_best_ms``):
  * CPU cores = share of the task's estimated work that runs on CPU cores there (1.0 on a node
    without GPUs), at least 0.1 core (kube-scheduler's non-zero default request, 100m);
  * host memory = ``input_size * host_bytes_per_pixel`` bytes (the frames as received, one byte
    per pixel as in ``CostModel.transfer_s``), at least 200 MiB (kube-scheduler's default);
  * GPU = share of the work that runs on GPUs, as a fraction of one GPU;
  * GPU memory = the largest ``CostModel.gpu_memory_mb`` among the stages that run on a GPU there
    (a task's stages use the GPU one after another, so the peak is its largest stage).
- Resources: CPU and host memory always; GPU and GPU memory only where the task would use a GPU
  (kube-scheduler likewise leaves out an extended resource the pod does not request).
- Fractions: ``util + request / capacity`` with capacity = cores, host GB, number of GPUs, total
  GPU GB of the node.
- Filter: the node fits when CPU and host-memory fractions are at most 1 and the task's GPU memory
  fits on one GPU with the node's GPU-memory utilisation spread evenly, i.e.
  ``gpu_mem_util + request_gb / largest_gpu_gb <= 1``. The largest of these three numbers is the
  node's over-commit; if no node fits, the least over-committed node takes the task.

Example::

    >>> from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_a", 6, 32, gpus=(GpuSpec("p4", 8),)),
    ...                        NodeSpec("tm_b", 6, 32, gpus=(GpuSpec("v100", 16),))))
    >>> obs = Observation(Task("t1", "face_recognition", 2_000_000),
    ...                   (NodeState("tm_a", gpu_mem_util=0.99), NodeState("tm_b")), 0.0)
    >>> KubernetesPolicy(cluster).decide(obs).node             # tm_a has no GPU memory left
    'tm_b'
"""

from __future__ import annotations

import math

from placement.policies.base import EstimatingPolicy, first_and_second
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, NodeState, Observation, Task

__all__ = ["KubernetesPolicy", "MAX_NODE_SCORE"]

#: kube-scheduler's framework.MaxNodeScore.
MAX_NODE_SCORE = 100.0
#: kube-scheduler's non-zero defaults for pods that request nothing (100m CPU, 200 MiB memory).
DEFAULT_CPU_REQUEST_CORES = 0.1
DEFAULT_MEMORY_REQUEST_GB = 200 * 2**20 / 1e9


class KubernetesPolicy(EstimatingPolicy):
    """Scores: the total kube-scheduler score of each node that fits (highest wins); when no node
    fits, each node's over-commit instead (lowest wins), and the reason says so."""

    name = "kubernetes"

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0, *,
                 host_bytes_per_pixel: float = 1.0) -> None:
        if host_bytes_per_pixel < 0:
            raise ValueError(f"host_bytes_per_pixel must be >= 0, got {host_bytes_per_pixel}")
        self.host_bytes_per_pixel = host_bytes_per_pixel
        super().__init__(cluster, costs, seed)

    def _cluster_changed(self) -> None:
        super()._cluster_changed()
        self._request_cache: dict[tuple[str, int, str], tuple[float, float, float, float]] = {}

    def request(self, task: Task, node_id: str) -> tuple[float, float, float, float]:
        """(CPU cores, host GB, GPUs, GPU GB) the task would request on the node (cached)."""
        key = (task.app_id, task.input_size, node_id)
        cached = self._request_cache.get(key)
        if cached is not None:
            return cached
        spec, costs, size = self._specs[node_id], self.costs, task.input_size
        cpu_work = gpu_work = gpu_mem_mb = 0.0
        for stage in APPLICATIONS[task.app_id].stages:
            on_cpu = costs.cpu_ms(stage.name, size, spec.cpu_speed)
            best = costs.stage_best_ms(stage.name, size, spec)
            if best < on_cpu:  # its best unit is a GPU
                gpu_work += best
                gpu_mem_mb = max(gpu_mem_mb, costs.gpu_memory_mb(stage.name, size))
            else:
                cpu_work += on_cpu
        total = cpu_work + gpu_work
        cpu_share = cpu_work / total if total > 0 else 1.0
        value = (max(DEFAULT_CPU_REQUEST_CORES, cpu_share),
                 max(DEFAULT_MEMORY_REQUEST_GB, size * self.host_bytes_per_pixel / 1e9),
                 1.0 - cpu_share if gpu_work > 0 else 0.0,
                 gpu_mem_mb / 1000.0)
        if len(self._request_cache) >= self._CACHE_LIMIT:
            self._request_cache.clear()
        self._request_cache[key] = value
        return value

    def _fractions(self, task: Task, state: NodeState) -> tuple[list[float], float, str]:
        """Requested fractions of the resources scored on this node, its over-commit, and the
        resource that sets the over-commit."""
        spec = self._specs[state.node_id]
        cpu_req, mem_req, gpu_req, gpu_mem_req = self.request(task, state.node_id)
        cpu = state.cpu_util + cpu_req / spec.cpu_cores
        mem = state.host_mem_util + mem_req / spec.host_memory_gb if spec.host_memory_gb > 0 \
            else math.inf
        fractions = [cpu, mem]
        overcommit, what = (cpu, "CPU") if cpu >= mem else (mem, "host memory")
        if gpu_req > 0 and spec.gpus:
            total_gb = sum(g.memory_gb for g in spec.gpus)
            largest_gb = max(g.memory_gb for g in spec.gpus)
            fractions.append(state.gpu_util + gpu_req / len(spec.gpus))
            fractions.append(state.gpu_mem_util + gpu_mem_req / total_gb if total_gb > 0
                             else math.inf)
            fits_one_gpu = state.gpu_mem_util + gpu_mem_req / largest_gb if largest_gb > 0 \
                else math.inf
            if fits_one_gpu > overcommit:
                overcommit, what = fits_one_gpu, "GPU memory"
        return fractions, overcommit, what

    @staticmethod
    def _scores(fractions: list[float]) -> tuple[float, float]:
        capped = [min(f, 1.0) for f in fractions]
        mean = sum(capped) / len(capped)
        least = MAX_NODE_SCORE * (1.0 - mean)
        std = math.sqrt(sum((f - mean) ** 2 for f in capped) / len(capped))
        return least, MAX_NODE_SCORE * (1.0 - std)

    def decide(self, observation: Observation) -> Decision:
        ids, left_out = self.known_ids(observation)
        states, task = self.states(observation), observation.task
        fitting: list[str] = []
        filtered: list[str] = []
        parts: dict[str, tuple[float, float]] = {}
        overcommit: dict[str, float] = {}
        why: dict[str, str] = {}
        for nid in ids:
            fractions, overcommit[nid], why[nid] = self._fractions(task, states[nid])
            if overcommit[nid] <= 1.0:
                fitting.append(nid)
                parts[nid] = self._scores(fractions)
            else:
                filtered.append(nid)
        note = "; filtered " + ", ".join(f"{nid} ({why[nid]} {overcommit[nid]:.2f})"
                                         for nid in filtered) if filtered else ""
        if not fitting:
            node, second = first_and_second(ids, overcommit.__getitem__)
            nxt = f"next {second} {overcommit[second]:.2f}" if second else "only node"
            return Decision(node, f"kubernetes: no node fits; {node} least over-committed "
                                  f"{overcommit[node]:.2f} by {why[node]} ({nxt}){left_out}",
                            overcommit)
        scores = {nid: parts[nid][0] + parts[nid][1] for nid in fitting}
        node, second = first_and_second(fitting, lambda nid: -scores[nid])
        least, balanced = parts[node]
        nxt = f"next {second} {scores[second]:.1f}" if second else "only fitting node"
        return Decision(node, f"kubernetes: {node} score {scores[node]:.1f} = least-allocated "
                              f"{least:.1f} + balanced {balanced:.1f} ({nxt}){note}{left_out}",
                        scores)
