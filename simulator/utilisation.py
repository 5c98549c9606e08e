"""What the simulator measures: utilisation integrals, feedback samples and the run's metrics.

Every node keeps time integrals of its busy CPU cores, busy GPUs, GPU memory, host memory and
busy links; :meth:`UtilisationMeter.accumulate` brings them up to the clock and must be called
before anything that changes those quantities. Every ``feedback_interval_s`` a sample turns the
integrals' growth since the previous sample into a ``NodeState``: the (stale) state policies
see, as the Flink router sees the feedback topic. At the end the integrals over the whole run
give the paper's load balancing degree and the utilisation metrics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from workload.model import NodeState, Observation, Task

from simulator.events import SAMPLE, EventQueue
from simulator.metrics import Metrics, load_balancing_degree, percentile
from simulator.runtime import Node

__all__ = ["UtilisationMeter", "Completions"]


@dataclass
class Completions:
    """What the completed tasks leave for the metrics (seconds of simulated time)."""

    count: int = 0
    last_s: float = 0.0            # time of the latest completion
    latencies: list[float] = field(default_factory=list)   # arrival -> completion
    waits: list[float] = field(default_factory=list)       # arrival -> first stage start


class UtilisationMeter:
    """The nodes' utilisation integrals, their feedback samples and the final metrics."""

    def __init__(self, queue: EventQueue, nodes: dict[str, Node], feedback_interval_s: float,
                 record_samples: bool, measured_factors: dict[tuple[str, str], float] | None = None):
        self.queue = queue
        # (node, task type) -> factor the policies see as measured (SimulationConfig.
        # policies_measure_type_factors); empty: every estimate as the public profiles give it
        self.measured_factors = measured_factors or {}
        self.nodes = nodes
        self.feedback_interval_s = feedback_interval_s
        self.record_samples = record_samples
        self.gpu_busy_s = 0.0          # GPU-seconds with at least one stage running
        self.samples: list[tuple[float, NodeState]] = []
        self.last_sample_s = 0.0

    def accumulate(self, node: Node) -> None:
        """Add the node's state since its last update to its integrals (state is unchanged
        between calls, so callers call this before they change it)."""
        now = self.queue.now
        dt = now - node.last_integral_s
        if dt > 0:
            cpu_busy = sum(1 for u in node.units if not u.is_gpu and u.runs)
            gpus = [u for u in node.units if u.is_gpu]
            # A busy MIG slice is its compute fraction of a busy GPU (1 for a whole GPU).
            gpu_busy = sum(u.compute_fraction for u in gpus if u.runs)
            gpu_mem = sum(r.memory_mb for u in gpus for r in u.runs)
            host_bytes = node.host_bytes
            values = (cpu_busy, gpu_busy, gpu_mem, host_bytes,
                      1.0 if node.down.runs else 0.0, 1.0 if node.up.runs else 0.0)
            for i, v in enumerate(values):
                node.integrals[i] += v * dt
            self.gpu_busy_s += gpu_busy * dt
        node.last_integral_s = now

    def sample(self, next_s: float | None = None) -> None:
        """Handle a ``SAMPLE`` event: every node's state over the last interval, and the next
        sample queued (one interval on, or at ``next_s``: the engine skips an idle cluster's
        samples, all zeros, up to its next event)."""
        now = self.queue.now
        interval = self.feedback_interval_s
        for node_id, node in self.nodes.items():
            self.accumulate(node)
            delta = [a - b for a, b in zip(node.integrals, node.sample_integrals)]
            node.sample_integrals = list(node.integrals)
            spec = node.spec
            gpu_count = len(spec.gpus)
            gpu_mem_total = sum(g.memory_gb * 1024 for g in spec.gpus)
            span = interval if now > 0 else 1.0
            node.sample_state = NodeState(
                node_id,
                cpu_util=delta[0] / span / spec.cpu_cores,
                gpu_util=delta[1] / span / gpu_count if gpu_count else 0.0,
                gpu_mem_util=delta[2] / span / gpu_mem_total if gpu_mem_total else 0.0,
                host_mem_util=(min(1.0, delta[3] / span / (spec.host_memory_gb * 2**30))
                               if spec.host_memory_gb else 0.0),
                downlink_util=delta[4] / span, uplink_util=delta[5] / span,
                queue_depth=len(node.tasks))
            if self.record_samples and now > 0:
                self.samples.append((now, node.sample_state))
        self.last_sample_s = now
        # The run loop stops once every task completed, so the next sample can always be queued.
        self.queue.push(now + interval if next_s is None else next_s, SAMPLE, None)

    def observation(self, task: Task) -> Observation:
        """What a policy sees when ``task`` arrives: the last samples (stale by up to one
        interval) with exact task counts and estimated backlogs, like the Flink router."""
        now = self.queue.now
        states = []
        # what a router that measures per task type and node knows (none: every factor 1,
        # and x 1.0 is exact, so a run without measured factors is unchanged)
        factor = self.measured_factors
        for node_id, node in self.nodes.items():
            base = node.sample_state or NodeState(node_id)
            backlog = sum(t.estimate_left_s * factor.get((node_id, t.task.app_id), 1.0)
                          for t in node.tasks.values())
            speed = factor.get((node_id, task.app_id), 1.0)
            states.append(NodeState(
                node_id, base.cpu_util, base.gpu_util, base.host_mem_util, base.gpu_mem_util,
                base.uplink_util, base.downlink_util, queue_depth=len(node.tasks),
                backlog_s=backlog, age_s=now - self.last_sample_s, speed_factor=speed))
        return Observation(task, tuple(states), now)

    def metrics(self, *, policy: str, node_scheduler: str, seed: int, tasks: int,
                first_arrival_s: float, completions: Completions, gpu_useful_s: float,
                oom_failures: int, decisions: int, per_node_tasks: dict[str, int],
                upper_bound_per_min: float, truth_source: str) -> Metrics:
        """The run's metrics, the integrals taken up to the clock (the end of the run)."""
        for node in self.nodes.values():
            self.accumulate(node)
        makespan = max(0.0, completions.last_s - first_arrival_s)
        loads, cpu_busy, cpu_total = {}, 0.0, 0
        gpu_total = 0
        for node_id, node in self.nodes.items():
            spec = node.spec
            span = makespan or 1.0
            gpus = len(spec.gpus)
            gpu_mem = sum(g.memory_gb * 1024 for g in spec.gpus)
            cpu_u = node.integrals[0] / span / spec.cpu_cores
            gpu_u = node.integrals[1] / span / gpus if gpus else 0.0
            mem_u = node.integrals[2] / span / gpu_mem if gpu_mem else 0.0
            host_u = (min(1.0, node.integrals[3] / span / (spec.host_memory_gb * 2**30))
                      if spec.host_memory_gb else 0.0)
            loads[node_id] = (cpu_u + gpu_u + mem_u + host_u) / 4.0
            cpu_busy += node.integrals[0]
            cpu_total += spec.cpu_cores
            gpu_total += gpus
        span = makespan or 1.0
        finished = completions.count
        waits, latencies = completions.waits, completions.latencies
        return Metrics(
            policy=policy, node_scheduler=node_scheduler, seed=seed,
            tasks=tasks, completed=finished, makespan_s=makespan,
            throughput_per_min=60.0 * finished / makespan if makespan > 0 else 0.0,
            mean_wait_s=sum(waits) / len(waits) if waits else math.nan,
            latency_p50_s=percentile(latencies, 50),
            latency_p99_s=percentile(latencies, 99),
            gpu_utilisation=self.gpu_busy_s / span / gpu_total if gpu_total else 0.0,
            cpu_utilisation=cpu_busy / span / cpu_total,
            useful_gpu_work_per_gpu_second=(gpu_useful_s / self.gpu_busy_s
                                            if self.gpu_busy_s else 0.0),
            load_balancing_degree=load_balancing_degree(list(loads.values())),
            upper_bound_per_min=upper_bound_per_min,
            oom_failures=oom_failures, decisions=decisions,
            per_node_tasks=dict(per_node_tasks), per_node_load=loads,
            truth_source=truth_source)
