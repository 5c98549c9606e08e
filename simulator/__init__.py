"""Discrete-event digital twin of a heterogeneous CPU-GPU cluster (imports only ``workload``).

Policies are handed in; the simulator never imports ``placement`` or ``interference``.

Example::

    from simulator import Simulator, paper_cluster, paper_workload
    result = Simulator().run(policy, node_scheduler, paper_cluster(), paper_workload(50), seed=1)
    print(result.metrics.throughput_per_min)
"""

from simulator.engine import EventRecord, SimulationConfig, SimulationResult, Simulator
from simulator.locality import LocalityConfig
from simulator.metrics import Metrics
from simulator.oracle import GreedyOracle
from simulator.shared_links import SharedLink, SharedLinksConfig
from simulator.scenarios import (alibaba_cluster, alibaba_workload, paper_cluster,
                                 paper_workload, saturated_workload)

__all__ = ["Simulator", "SimulationConfig", "SimulationResult", "EventRecord", "LocalityConfig",
           "SharedLink", "SharedLinksConfig", "Metrics", "GreedyOracle", "paper_cluster",
           "paper_workload", "saturated_workload",
           "alibaba_cluster", "alibaba_workload"]
