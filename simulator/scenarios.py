"""Named, reproducible scenarios: the paper's 11-worker setting and an Alibaba-derived cluster.

Every number comes from ``workload/calibration.yaml`` (paper_setting) or the real traces in the
data folder (with the built-in generators as the stated fallback).

Example::

    >>> cluster = paper_cluster()
    >>> len(cluster.nodes)
    11
    >>> tasks = paper_workload(rate_per_min=50, tasks=30, seed=1)
    >>> len(tasks), tasks[0].arrival_s <= tasks[-1].arrival_s
    (30, True)
"""

from __future__ import annotations

import random

from workload.catalog import app_ids
from workload.estimates import Calibration, load_calibration
from workload.model import ClusterSpec, GpuSpec, NodeSpec, Task

__all__ = ["paper_costs", "paper_cluster", "paper_mig_cluster", "paper_workload",
           "saturated_workload", "alibaba_cluster", "alibaba_workload", "clip_sizes",
           "DEFAULT_MIG_PARTITION"]

#: The MIG partition of ``paper_mig_cluster``'s A100s: all 7 compute slices and 40 GB, one big,
#: one middle and two small slices (ASSUMPTION: a mixed partition, so slice choice matters).
DEFAULT_MIG_PARTITION = "3g.20gb,2g.10gb,1g.5gb,1g.5gb"


def _calibration(calibration: Calibration | None) -> Calibration:
    return calibration or load_calibration()


def paper_cluster(calibration: Calibration | None = None, nodes: int | None = None) -> ClusterSpec:
    """The paper's 11 workers (node-type mix: calibration.yaml, an assumption), optionally the
    first ``nodes`` of them (the paper's 8 -> 11 -> 9 cluster-change experiment)."""
    cal = _calibration(calibration)
    setting = cal.paper_setting
    gpu_models = cal.gpu_models
    specs = []
    for node_type in setting["node_types"]:
        for i in range(node_type["count"]):
            gpus = tuple(GpuSpec(m, float(gpu_models[m]["memory_gb"]), float(gpu_models[m]["speed"]))
                         for m in node_type["gpus"])
            specs.append(NodeSpec(f"{node_type['name']}-{i}", int(node_type["cpu_cores"]),
                                  float(node_type["host_memory_gb"]), gpus,
                                  uplink_mbps=setting["network_mbps"],
                                  downlink_mbps=setting["network_mbps"],
                                  labels=(node_type["name"],)))
    # Interleave types so that a prefix (nodes=8) keeps the mix heterogeneous.
    by_type: dict[str, list[NodeSpec]] = {}
    for spec in specs:
        by_type.setdefault(spec.labels[0], []).append(spec)
    ordered = []
    while any(by_type.values()):
        for queue in by_type.values():
            if queue:
                ordered.append(queue.pop(0))
    if nodes is not None:
        ordered = ordered[:nodes]
    return ClusterSpec(tuple(ordered), name=f"paper-{len(ordered)}")


def paper_mig_cluster(calibration: Calibration | None = None, replaced: str = "p4x4-32g",
                      partition: str = DEFAULT_MIG_PARTITION) -> ClusterSpec:
    """The paper's 11 workers with each ``replaced``-type node's GPUs swapped for ONE A100 40 GB
    partitioned as ``partition`` (a ``mig=`` label, ``simulator.mig``); everything else as in
    :func:`paper_cluster`. The default swaps the 4 x P4 nodes (4 x 1.26 = 5.0 K80 dies of
    compute) for an A100 (4.46), so the cluster's GPU compute stays about the same. A check
    for MIG-aware schedulers; no shipped benchmark runs on it."""
    cal = _calibration(calibration)
    base = paper_cluster(cal)
    if replaced not in {n.labels[0] for n in base.nodes}:
        raise ValueError(f"no node type {replaced!r} in the paper cluster")
    a100 = cal.gpu_models["a100"]
    gpu = GpuSpec("a100", float(a100["memory_gb"]), float(a100["speed"]))
    nodes = tuple(NodeSpec(n.node_id, n.cpu_cores, n.host_memory_gb, (gpu,), n.cpu_speed,
                           n.uplink_mbps, n.downlink_mbps, (*n.labels, f"mig={partition}"))
                  if n.labels[0] == replaced else n for n in base.nodes)
    return ClusterSpec(nodes, name=f"paper-mig-{len(nodes)}")


def clip_sizes(count: int, rng: random.Random, calibration: Calibration | None = None) -> list[int]:
    """Input sizes (pixels) of video clips: width x height x fps x uniform clip length."""
    s = _calibration(calibration).paper_setting
    low, high = s["clip_seconds"]
    per_second = s["clip_width"] * s["clip_height"] * s["clip_fps"]
    return [int(per_second * rng.uniform(low, high)) for _ in range(count)]


def paper_costs(calibration: Calibration | None = None):
    """The cost model of the paper's scenario (its work scale applied)."""
    from workload.estimates import CostModel
    cal = _calibration(calibration)
    return CostModel(cal, work_scale=float(cal.paper_setting["work_scale"]))


def _mixed_tasks(arrivals: list[float], seed: int, calibration, prefix: str) -> list[Task]:
    rng = random.Random(seed)
    apps = list(app_ids())
    kinds = [apps[i % len(apps)] for i in range(len(arrivals))]  # equal mix
    rng.shuffle(kinds)
    sizes = clip_sizes(len(arrivals), rng, calibration)
    return [Task(f"{prefix}{i:05d}", kinds[i], sizes[i], arrivals[i]) for i in range(len(arrivals))]


def paper_workload(rate_per_min: float, tasks: int | None = None, seed: int = 0,
                   calibration: Calibration | None = None) -> list[Task]:
    """Poisson arrivals at ``rate_per_min`` of an equal mix of the three applications."""
    cal = _calibration(calibration)
    count = tasks or int(cal.paper_setting["tasks"])
    rng = random.Random(f"arrivals/{seed}")
    now, arrivals = 0.0, []
    for _ in range(count):
        now += rng.expovariate(rate_per_min / 60.0)
        arrivals.append(now)
    return _mixed_tasks(arrivals, seed, cal, "p")


def saturated_workload(tasks: int | None = None, seed: int = 0,
                       calibration: Calibration | None = None) -> list[Task]:
    """Arrivals far faster than any policy can serve (calibration: saturated_rate_per_min), so
    throughput measures what the cluster can do flat out. (Not all at time 0: a burst of
    identical observations would only measure how a policy breaks ties.)"""
    cal = _calibration(calibration)
    return paper_workload(float(cal.paper_setting["saturated_rate_per_min"]), tasks, seed, cal)


def alibaba_cluster(nodes: int = 16, seed: int = 0, data_dir=None,
                    calibration: Calibration | None = None) -> ClusterSpec:
    """``nodes`` GPU nodes sampled (stratified by GPU model) from Alibaba's v2023 inventory, GPU
    codes mapped to calibrated models (calibration.yaml: alibaba_gpu_models). CPU cores are
    capped at 16 per node so one task cannot spread over a 96-core host (our assumption)."""
    from workload.traces import load_or_generate_nodes, sample_nodes
    cal = _calibration(calibration)
    mapping = cal.raw["alibaba_gpu_models"]
    table = load_or_generate_nodes(data_dir, which="gpu")
    chosen = sample_nodes(table.nodes, nodes, seed=seed, include_cpu_only=False)
    specs = []
    for inv in chosen:
        model = mapping.get(inv.gpu_model, mapping["default"])
        gpu = cal.gpu_models[model]
        gpus = tuple(GpuSpec(model, float(gpu["memory_gb"]), float(gpu["speed"]))
                     for _ in range(max(1, min(inv.gpu_count, 8))))
        specs.append(NodeSpec(inv.name, max(1, min(16, inv.cpu_milli // 1000)),
                              inv.memory_mib / 1024, gpus, uplink_mbps=10_000,
                              downlink_mbps=10_000, labels=(inv.gpu_model or "cpu",)))
    return ClusterSpec(tuple(specs), name=f"alibaba-{nodes}")


def alibaba_workload(tasks: int = 1500, seed: int = 0, target_rate_per_min: float = 50.0,
                     data_dir=None, calibration: Calibration | None = None) -> list[Task]:
    """The Alibaba GenAI request arrival process (real, bursty), time-compressed so that its
    mean rate is ``target_rate_per_min``; a window of ``tasks`` consecutive requests starting at
    a seed-chosen offset; tasks are the three applications in equal mix."""
    from workload.traces import load_or_generate_genai
    trace = load_or_generate_genai(data_dir)
    arrivals = sorted(trace.arrivals())
    rng = random.Random(f"alibaba/{seed}")
    start = rng.randrange(0, max(1, len(arrivals) - tasks))
    window = arrivals[start:start + tasks]
    span = window[-1] - window[0] or 1.0
    factor = span / (len(window) / (target_rate_per_min / 60.0))
    compressed = [(a - window[0]) / factor for a in window]
    return _mixed_tasks(compressed, seed, _calibration(calibration), "a")
