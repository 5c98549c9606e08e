"""What a simulation run reports (paper metrics plus the ones that keep utilisation honest)."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

__all__ = ["Metrics", "percentile", "load_balancing_degree"]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]); nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


def load_balancing_degree(loads: list[float]) -> float:
    """The paper's degree: 1 - standard deviation of the nodes' mean Load_i."""
    return 1.0 - (statistics.pstdev(loads) if len(loads) > 1 else 0.0)


@dataclass
class Metrics:
    policy: str
    node_scheduler: str
    seed: int
    tasks: int
    completed: int
    makespan_s: float
    throughput_per_min: float          # completed / (last completion - first arrival)
    mean_wait_s: float                 # arrival -> first stage start
    latency_p50_s: float               # arrival -> completion
    latency_p99_s: float
    gpu_utilisation: float             # time-average share of GPUs running >= 1 stage
    cpu_utilisation: float
    useful_gpu_work_per_gpu_second: float  # reference-GPU seconds of finished work / busy GPU s
    load_balancing_degree: float
    upper_bound_per_min: float
    oom_failures: int
    decisions: int
    per_node_tasks: dict[str, int] = field(default_factory=dict)
    per_node_load: dict[str, float] = field(default_factory=dict)
    truth_source: str = ""

    def as_dict(self) -> dict:
        return asdict(self)
