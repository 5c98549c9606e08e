"""Scheduling Distributed Deep Learning Jobs in Heterogeneous Clusters with Placement Awareness,
as a streaming cluster policy.

What it decides:

1. a throughput model per (unit type, placement span): tasks/s of this task's application that a
   node sustains when the task's stages stay on one GPU model, or spill to the node's CPU cores;
2. each node's best span gives its throughput for the task; its remaining work (``backlog_s``,
   or ``queue_depth``) says how much of that throughput is already promised;
3. the task goes greedily to the node with the largest throughput-weighted headroom: the rate
   the node can give one more task of this kind after the work already there.

Adaptation to streaming tasks and stages. The paper models a DL job's throughput on each GPU
type for each placement (workers packed on one machine or spread over several, which slows
them) and places jobs greedily by their remaining work. A streaming task runs on one node, so
its "span" is inside the node: its GPU-capable stages either stay on one GPU model (the packed
placement) or some spill to CPU cores (the spread one, paying ``spill_penalty`` for moving frames
between host and device); CPU-only stages always run on cores. For each node and task we solve
the node's fluid throughput from the public CostModel: the GPU-capable work goes to the GPUs of
one model, and (with spilling) the stages that gain least from a GPU move to the cores until
both pools finish together; the downlink (``transfer_s``) caps the rate too. Mixing two GPU
models in one task is not considered (a spread placement the paper also avoids). The paper
orders *jobs* by remaining work; a router sees one task at a time, so the remaining work that
steers the greedy choice is the node's: ``headroom = rate / (1 + tasks ahead)`` with tasks ahead
= ``backlog_s`` over this task's own work (both in the cost model's best-unit seconds), or
``queue_depth`` with ``headroom_basis="queue"``. On an idle cluster this prefers the node with
the most *throughput* for the type, where mct prefers the one with the lowest *latency*.

Settings:

- ``spill_penalty`` (1.25, ASSUMPTION): CPU time of a spilled GPU-capable stage is multiplied by
  this (host/device copies; the paper's slowdown of a spread placement). >= 1.
- ``allow_spill`` (True): False keeps the packed span only (GPU-capable stages on GPUs).
- ``gpu_slots`` (1.0): stages' worth of work one GPU does at once in the model. Co-location gains
  are measured only in the hidden truth, so the public default is 1 (no gain); >= 1.
- ``headroom_basis`` ("backlog"): what "remaining work at a node" is: ``"backlog"`` (estimated
  seconds) or ``"queue"`` (tasks in flight).

Example::

    >>> from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_gpu", 2, 16, gpus=(GpuSpec("k80", 12),)),
    ...                        NodeSpec("tm_cpu", 24, 64)))
    >>> obs = Observation(Task("t1", "face_recognition", 2_000_000),
    ...                   (NodeState("tm_gpu"), NodeState("tm_cpu")), 0.0)
    >>> decision = PlacementAwarePolicy(cluster).decide(obs)
    >>> decision.node     # a task alone is faster on the K80, but 24 cores sustain more tasks/s
    'tm_cpu'
    >>> for part in decision.reason.split("; "):
    ...     print(part)
    placement-aware: tm_cpu cpu, link-bound 62.5 tasks/s / (1 + 0.00 ahead) = 62.5
    next tm_gpu gpu:k80+cpu 48.9 tasks/s / (1 + 0.00 ahead) = 48.9 (ahead by backlog)
"""

from __future__ import annotations

import math

from placement.policies.base import EstimatingPolicy, first_and_second
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, NodeSpec, Observation, Task

__all__ = ["PlacementAwarePolicy", "span_seconds"]

#: A task whose estimated work is zero still takes a moment (keeps rates finite).
_MIN_SECONDS = 1e-9


def span_seconds(gpu_stages: list[tuple[float, float]], cpu_only_s: float, gpus: float,
                 cores: int, allow_spill: bool) -> tuple[float, float]:
    """Seconds per task at the sustained rate (the busier pool's time per task), and the CPU
    seconds of GPU-capable work spilled to cores. ``gpu_stages``: (spilled CPU s, GPU s).

    Packed: all GPU-capable work on the ``gpus``. Spilling moves the stages that gain least from
    a GPU to the ``cores`` first, the last one fractionally, until both pools take equally long.

    >>> span_seconds([(4.0, 1.0)], 0.0, gpus=1, cores=3, allow_spill=False)
    (1.0, 0.0)
    >>> [round(x, 3) for x in span_seconds([(4.0, 1.0)], 0.0, gpus=1, cores=3,
    ...                                     allow_spill=True)]     # 3/7 of the stage spilled
    [0.571, 1.714]
    """
    gpu_s = sum(g for _, g in gpu_stages)
    cpu_s, spilled = cpu_only_s, 0.0
    if allow_spill:
        for c, g in sorted(gpu_stages, key=lambda cg: (cg[0] / cg[1] if cg[1] > 0 else math.inf)):
            if gpu_s / gpus <= cpu_s / cores or g <= 0:
                break  # the cores are the bottleneck already: spilling more only hurts
            if (gpu_s - g) / gpus >= (cpu_s + c) / cores:
                gpu_s, cpu_s, spilled = gpu_s - g, cpu_s + c, spilled + c  # move it all
                continue
            part = (gpu_s / gpus - cpu_s / cores) / (g / gpus + c / cores)  # pools meet
            gpu_s, cpu_s, spilled = gpu_s - part * g, cpu_s + part * c, spilled + part * c
            break
    return max(gpu_s / gpus, cpu_s / cores), spilled


class PlacementAwarePolicy(EstimatingPolicy):
    """Scores: throughput-weighted headroom per known node in tasks/s (highest wins)."""

    name = "placement_aware"

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0, *,
                 spill_penalty: float = 1.25, allow_spill: bool = True, gpu_slots: float = 1.0,
                 headroom_basis: str = "backlog") -> None:
        for label, value in (("spill_penalty", spill_penalty), ("gpu_slots", gpu_slots)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 1.0:
                raise ValueError(f"{label} must be a finite number >= 1, got {value!r}")
        if not isinstance(allow_spill, bool):
            raise ValueError(f"allow_spill must be True or False, got {allow_spill!r}")
        if headroom_basis not in ("backlog", "queue"):
            raise ValueError(f"headroom_basis must be 'backlog' or 'queue', "
                             f"got {headroom_basis!r}")
        self.spill_penalty, self.allow_spill = float(spill_penalty), allow_spill
        self.gpu_slots, self.headroom_basis = float(gpu_slots), headroom_basis
        super().__init__(cluster, costs, seed)

    def _cluster_changed(self) -> None:
        super()._cluster_changed()
        self._rate_cache: dict[tuple, tuple[float, str]] = {}

    def throughput(self, task: Task, node_id: str) -> tuple[float, str]:
        """(tasks/s, span) of ``task``'s kind and size on the node, best span; cached per
        (app, size, node shape). Span: ``gpu:<model>`` (packed), ``gpu:<model>+cpu`` (spilled),
        ``cpu`` (no GPU), with ``, link-bound`` when the downlink sets the rate."""
        spec = self._specs[node_id]
        key = (task.app_id, task.input_size, spec.cpu_cores, spec.cpu_speed,
               tuple(g.model for g in spec.gpus), spec.downlink_mbps)
        cached = self._rate_cache.get(key)
        if cached is None:
            if len(self._rate_cache) >= self._CACHE_LIMIT:
                self._rate_cache.clear()
            cached = self._rate_cache[key] = self._solve(task, spec)
        return cached

    def _solve(self, task: Task, spec: NodeSpec) -> tuple[float, str]:
        costs, size = self.costs, task.input_size
        stages = APPLICATIONS[task.app_id].stages
        cpu_only = sum(costs.cpu_ms(s.name, size, spec.cpu_speed) for s in stages
                       if not s.gpu_capable) / 1000.0
        capable = [s.name for s in stages if s.gpu_capable]
        all_cpu = cpu_only + sum(costs.cpu_ms(n, size, spec.cpu_speed) for n in capable) / 1000.0
        best_s, span = all_cpu / spec.cpu_cores, "cpu"  # no GPU: every stage on the cores
        counts: dict[tuple[str, float | None], int] = {}
        for gpu in spec.gpus:  # GPUs of one model at one spec speed form one unit type
            counts[gpu.model, gpu.speed] = counts.get((gpu.model, gpu.speed), 0) + 1
        # sorted: the same answer whatever the GPUs' order
        for model, speed in sorted(counts, key=lambda k: (k[0], k[1] or 0.0)):
            pairs = [(costs.cpu_ms(n, size, spec.cpu_speed) / 1000.0 * self.spill_penalty,
                      costs.gpu_ms(n, size, model, speed) / 1000.0) for n in capable]
            seconds, spilled = span_seconds(pairs, cpu_only,
                                            counts[model, speed] * self.gpu_slots,
                                            spec.cpu_cores, self.allow_spill)
            if seconds < best_s or span == "cpu":  # a GPU span always beats "no GPU" on ties
                best_s, span = seconds, f"gpu:{model}" + ("+cpu" if spilled > 0 else "")
        link_s = costs.transfer_s(task, spec)  # inputs cross the downlink one after another
        if link_s > best_s:
            best_s, span = link_s, span + ", link-bound"
        return 1.0 / max(best_s, _MIN_SECONDS), span

    def decide(self, observation: Observation) -> Decision:
        ids, left_out = self.known_ids(observation)
        states, task = self.states(observation), observation.task
        rates: dict[str, float] = {}
        spans: dict[str, str] = {}
        ahead: dict[str, float] = {}
        scores: dict[str, float] = {}
        for nid in ids:
            rate, spans[nid] = self.throughput(task, nid)
            # speed_factor: measured task time over the estimate (1 in the simulator)
            rates[nid] = rate / states[nid].speed_factor
            if self.headroom_basis == "queue":
                ahead[nid] = float(states[nid].queue_depth)
            else:  # the backlog in units of this task's own work (both best-unit seconds)
                work_s = max(self.costs.task_work_ms(task, self._specs[nid]) / 1000.0,
                             _MIN_SECONDS)
                ahead[nid] = states[nid].backlog_s / work_s
            scores[nid] = rates[nid] / (1.0 + ahead[nid])
        node, second = first_and_second(ids, lambda nid: -scores[nid])

        def parts(nid: str) -> str:
            return (f"{nid} {spans[nid]} {rates[nid]:.3g} tasks/s / (1 + {ahead[nid]:.2f} "
                    f"ahead) = {scores[nid]:.3g}")

        nxt = f"; next {parts(second)}" if second else "; only node"
        basis = "queued tasks" if self.headroom_basis == "queue" else "backlog"
        return Decision(node, f"placement-aware: {parts(node)}{nxt} (ahead by {basis})"
                              f"{left_out}", scores)
