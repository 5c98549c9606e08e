"""Fast mode: task-level simulation for large clusters and long streams.

What it keeps from the exact mode: arrivals, the cluster policy's decision per task with node
state, per-node parallel task slots with FIFO queues, heterogeneous per-node task times from the
public cost model, hidden per-task noise, and the same metrics where they make sense. What it
drops for speed: stages, GPU co-location, links and staleness (policies see the current state).
Use the exact mode for anything about interference or node-level scheduling.

Policies are asked through ``decide_array(ArrayObservation) -> node index`` when they have it
(numpy over all nodes at once; O(1) Python per decision), else through the ordinary
``decide(Observation)`` (correct but slow on 1,000 nodes).

Example::

    result = FastSimulator().run(LeastLoaded(cluster), cluster, tasks, seed=1)
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass

import numpy as np

from workload.catalog import app_ids
from workload.estimates import CostModel
from workload.model import ClusterSpec, NodeState, Observation, Policy, Task

from simulator.metrics import load_balancing_degree, percentile

__all__ = ["FastSimulator", "ArrayObservation", "FastResult"]


@dataclass
class ArrayObservation:
    """Node state as arrays (index = position in ``node_ids``), for vectorised policies."""

    task: Task
    node_ids: tuple[str, ...]
    load: np.ndarray          # busy slots / slots, the fast mode's Load_i
    queue_depth: np.ndarray   # tasks at the node (running + queued)
    backlog_s: np.ndarray     # estimated seconds of work at the node
    slots: np.ndarray
    now_s: float


@dataclass
class FastResult:
    policy: str
    tasks: int
    completed: int
    makespan_s: float
    throughput_per_min: float
    latency_p50_s: float
    latency_p99_s: float
    mean_wait_s: float
    load_balancing_degree: float
    per_node_tasks: np.ndarray


class FastSimulator:
    def __init__(self, costs: CostModel | None = None, noise_sigma: float = 0.2):
        self.costs = costs or CostModel()
        self.noise_sigma = noise_sigma

    def _coefficients(self, cluster: ClusterSpec) -> tuple[np.ndarray, np.ndarray]:
        """Per (app, node): task seconds = fixed + per_pixel * input_size (the cost model's
        affine fit of its critical-path estimate, so GPU spec speeds count here as in the exact
        mode: ``CostModel.task_time_coefficients`` keys its cache on them)."""
        apps = app_ids()
        fixed = np.zeros((len(apps), len(cluster.nodes)))
        slope = np.zeros_like(fixed)
        for j, node in enumerate(cluster.nodes):
            per_app = self.costs.task_time_coefficients(node)
            for i, app in enumerate(apps):
                fixed[i, j], slope[i, j] = per_app[app]
        return fixed, slope

    def run(self, policy: Policy, cluster: ClusterSpec, tasks: list[Task],
            seed: int = 0) -> FastResult:
        nodes = cluster.nodes
        node_ids = tuple(n.node_id for n in nodes)
        m = len(nodes)
        slots = np.array([n.task_slots for n in nodes], dtype=float)
        busy = np.zeros(m)
        depth = np.zeros(m)
        backlog = np.zeros(m)
        load = np.zeros(m)
        busy_time = np.zeros(m)
        last_change = np.zeros(m)
        per_node = np.zeros(m, dtype=np.int64)
        queues = [deque() for _ in range(m)]
        fixed, slope = self._coefficients(cluster)
        app_index = {a: i for i, a in enumerate(app_ids())}
        rng = random.Random(seed)
        sigma = self.noise_sigma
        heap: list = []
        latencies, waits = [], []
        ordered = sorted(tasks, key=lambda t: (t.arrival_s, t.task_id))
        use_arrays = callable(getattr(policy, "decide_array", None))
        last_completion = 0.0

        def start(j: int, now: float, task: Task, estimate: float, seq: int) -> None:
            noise = math.exp(rng.gauss(0.0, sigma) - sigma * sigma / 2) if sigma else 1.0
            busy_time[j] += busy[j] * (now - last_change[j])
            last_change[j] = now
            busy[j] += 1
            load[j] = busy[j] / slots[j]
            waits.append(now - task.arrival_s)
            heapq.heappush(heap, (now + estimate * noise, seq, j, task.arrival_s, estimate))

        def complete_until(limit: float) -> None:
            nonlocal last_completion
            while heap and heap[0][0] <= limit:
                finish, seq, j, arrival, estimate = heapq.heappop(heap)
                busy_time[j] += busy[j] * (finish - last_change[j])
                last_change[j] = finish
                busy[j] -= 1
                depth[j] -= 1
                backlog[j] = max(0.0, backlog[j] - estimate)
                latencies.append(finish - arrival)
                last_completion = finish
                if queues[j]:
                    task, est, qseq = queues[j].popleft()
                    start(j, finish, task, est, qseq)
                load[j] = busy[j] / slots[j]

        for seq, task in enumerate(ordered):
            now = task.arrival_s
            complete_until(now)
            if use_arrays:
                j = int(policy.decide_array(ArrayObservation(task, node_ids, load, depth, backlog,
                                                             slots, now)))
            else:
                states = tuple(NodeState(node_ids[k], cpu_util=float(load[k]),
                                         queue_depth=int(depth[k]), backlog_s=float(backlog[k]))
                               for k in range(m))
                j = node_ids.index(policy.decide(Observation(task, states, now)).node)
            a = app_index[task.app_id]
            estimate = fixed[a, j] + slope[a, j] * task.input_size
            per_node[j] += 1
            depth[j] += 1
            backlog[j] += estimate
            if busy[j] < slots[j]:
                start(j, now, task, estimate, seq)
            else:
                queues[j].append((task, estimate, seq))
        complete_until(math.inf)
        first = ordered[0].arrival_s if ordered else 0.0
        makespan = max(0.0, last_completion - first)
        span = makespan or 1.0
        utilisation = busy_time / slots / span
        return FastResult(
            policy=getattr(policy, "name", type(policy).__name__), tasks=len(ordered),
            completed=len(latencies), makespan_s=makespan,
            throughput_per_min=60.0 * len(latencies) / makespan if makespan else 0.0,
            latency_p50_s=percentile(latencies, 50), latency_p99_s=percentile(latencies, 99),
            mean_wait_s=float(np.mean(waits)) if waits else math.nan,
            load_balancing_degree=load_balancing_degree(list(utilisation)),
            per_node_tasks=per_node)
