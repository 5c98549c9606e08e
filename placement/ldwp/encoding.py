"""The agent's observation encoder: the paper's flat vector or our per-node rows.

The node-rows layout needs each node's estimated time for the task. For a static cost model
(``workload.estimates.CostModel``) the per-node (fixed, per-pixel) coefficients are built once
per cluster, so encoding costs no cost-model call on the router's hot path; a learned model
(``placement.measured_costs.MeasuredCosts``) is asked live on every encode instead.

Example::

    encoder = ObservationEncoder(cluster, costs, network="node_scoring")
    rows = encoder(observation)          # (nodes, row size) float32
"""

from __future__ import annotations

import numpy as np

from placement.ldwp.features import (is_live_costs, node_rows, node_spec_features,
                                     paper_vector, task_estimates)
from workload.model import ClusterSpec, Observation

__all__ = ["ObservationEncoder"]


class ObservationEncoder:
    """Encodes observations for one agent's network layout and cluster."""

    def __init__(self, cluster: ClusterSpec, costs, network: str,
                 task_encoding: str = "catalog", spec_features: bool = False,
                 paper_nodes: int | None = None):
        self.cluster, self.costs = cluster, costs
        self.network, self.task_encoding = network, task_encoding
        self.spec_features, self.paper_nodes = spec_features, paper_nodes
        self._cache: dict = {}

    def __call__(self, observation: Observation,
                 estimates_s: dict[str, float] | None = None) -> np.ndarray:
        """``estimates_s`` (node rows): per node the task's estimated seconds to use instead of
        asking the cost model now (the service keeps the ones current when it decided)."""
        if self.network == "paper":
            if len(observation.nodes) != self.paper_nodes:
                raise ValueError(f"the paper network was built for {self.paper_nodes} nodes "
                                 f"and sees {len(observation.nodes)}; transfer it first "
                                 "(placement.ldwp.transfer)")
            return paper_vector(observation)
        # a node the agent's cluster spec does not know gets no estimate (unknown, 0)
        table = self.coefficients()
        if estimates_s is None:
            live = self.costs if is_live_costs(self.costs) else None
            estimates, units = task_estimates(observation, table, live)
        else:
            units = {n: table[n][1] for n in observation.node_ids if n in table}
            estimates = {n: float(estimates_s.get(n, 0.0)) for n in units}
        return node_rows(observation, estimates, units,
                         self._cache["specs"] if self.spec_features else None,
                         self.task_encoding)

    def coefficients(self) -> dict:
        """Per node of the cluster: ({app: (fixed_s, per_pixel_s)}, parallel units), built
        once per cluster (empty tables for a learned cost model: it is asked live)."""
        key = tuple(self.cluster.node_ids)
        if self._cache.get("key") != key:
            live = is_live_costs(self.costs)
            table = {spec.node_id: ({} if live else self.costs.task_time_coefficients(spec),
                                    spec.cpu_cores + len(spec.gpus))
                     for spec in self.cluster.nodes}
            specs = {spec.node_id: node_spec_features(spec) for spec in self.cluster.nodes}
            self._cache = {"key": key, "table": table, "specs": specs}
        return self._cache["table"]
