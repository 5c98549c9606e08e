"""Shared plumbing of the cluster-level policies: construction, node lookup, tie-breaking.

Every policy in this package is built the same way::

    PolicyClass(cluster, costs=None, seed=0, **settings)

and answers ``decide(observation) -> Decision(node, reason, scores)`` (``workload.model.Policy``).
Rules every policy follows (tested in ``tests/unit/test_policies.py``):

- It decides among ``observation.node_ids`` only: the observation may hold a subset or a
  reordering of ``cluster.nodes`` (nodes join and leave).
- Node specs are looked up by id. A node the policy has no spec for is left out by policies that
  need a spec (they cannot score capacity they do not know) and named in the reason; call
  :meth:`ClusterPolicy.set_cluster` when the cluster changes. Policies that only read the
  observation (random, round-robin, least-loaded, Flink TASKS) take every node.
- Ties go to the node that comes first in ``observation.node_ids`` unless the module says
  otherwise (the Flink rules follow cluster order, as Flink fills TaskManagers in a fixed order).
- Randomness comes from ``random.Random(seed)`` only, so a policy is deterministic for a seed.

Example::

    >>> first_and_second(("tm_a", "tm_b"), {"tm_a": 0.5, "tm_b": 0.2}.__getitem__)
    ('tm_b', 'tm_a')
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from workload.estimates import CostModel
from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Policy, Task

__all__ = ["ClusterPolicy", "EstimatingPolicy", "first_and_second"]


def first_and_second(ids: Sequence[str], key: Callable[[str], Any]) -> tuple[str, str | None]:
    """The id with the smallest ``key`` and the runner-up; ties keep the order of ``ids``.

    A linear scan (no sort, no list): this runs once per routed record.
    """
    best = second = None
    best_key = second_key = None
    for node_id in ids:
        k = key(node_id)
        if best is None or k < best_key:
            best, best_key, second, second_key = node_id, k, best, best_key
        elif second is None or k < second_key:
            second, second_key = node_id, k
    if best is None:
        raise ValueError("no nodes to choose from")
    return best, second


class ClusterPolicy(Policy):
    """Base of the fixed-rule policies: keeps the cluster spec indexed by node id."""

    name = "cluster-policy"

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0) -> None:
        self.costs = costs
        self.seed = seed
        self.set_cluster(cluster)

    def set_cluster(self, cluster: ClusterSpec) -> None:
        """Adopt a new cluster spec (nodes joined or left); per-node state keyed by id survives."""
        self.cluster = cluster
        self._specs: dict[str, NodeSpec] = {n.node_id: n for n in cluster.nodes}
        self._cluster_rank: dict[str, int] = {nid: i for i, nid in enumerate(cluster.node_ids)}
        self._cluster_changed()

    def _cluster_changed(self) -> None:
        """Hook for subclasses that cache per-node numbers."""

    def spec(self, node_id: str) -> NodeSpec | None:
        return self._specs.get(node_id)

    def cluster_rank(self, node_id: str) -> int:
        """Position in ``cluster.nodes``; nodes outside the spec come after all of them."""
        return self._cluster_rank.get(node_id, len(self._cluster_rank))

    @staticmethod
    def states(observation: Observation) -> dict[str, NodeState]:
        if not observation.nodes:
            raise ValueError("the observation has no nodes to choose from")
        return {n.node_id: n for n in observation.nodes}

    def known_ids(self, observation: Observation) -> tuple[list[str], str]:
        """Ids of the observed nodes that have a spec (observation order), and a reason suffix
        naming the ones left out ("" when none is)."""
        if not observation.nodes:
            raise ValueError("the observation has no nodes to choose from")
        specs = self._specs
        ids = [n.node_id for n in observation.nodes if n.node_id in specs]
        if len(ids) == len(observation.nodes):
            return ids, ""
        unknown = [n.node_id for n in observation.nodes if n.node_id not in specs]
        if not ids:
            raise KeyError(f"{self.name}: no spec for any observed node {unknown}; pass the "
                           f"new ClusterSpec with set_cluster()")
        return ids, f"; left out {', '.join(unknown)} (no node spec)"


class EstimatingPolicy(ClusterPolicy):
    """Base of the policies that need public cost estimates (a default ``CostModel()`` when none
    is given). Caches ``task_ms_on`` per (app, input size, node): clips repeat sizes, and the
    estimate walks the task's DAG (a few microseconds per node otherwise).

    ``costs`` may also be a learned model (``placement.measured_costs.MeasuredCosts``: any task
    type, estimates from measured times). Its estimates change with every sample it learns; it
    says so with a ``version`` number, and the cache is dropped whenever that changes."""

    _CACHE_LIMIT = 4096

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0) -> None:
        super().__init__(cluster, costs if costs is not None else CostModel(), seed)

    def _cluster_changed(self) -> None:
        self._task_ms_cache: dict[tuple[str, int, str], float] = {}
        self._cache_version = getattr(self.costs, "version", None)

    def task_ms(self, task: Task, node_id: str) -> float:
        """Estimated milliseconds of ``task`` alone on the idle node (``CostModel.task_ms_on``)."""
        key = (task.app_id, task.input_size, node_id)
        version = getattr(self.costs, "version", None)  # None for a CostModel: never changes
        if version != self._cache_version:
            self._task_ms_cache, self._cache_version = {}, version
        cache = self._task_ms_cache
        value = cache.get(key)
        if value is None:
            if len(cache) >= self._CACHE_LIMIT:
                cache.clear()
            value = cache[key] = self.costs.task_ms_on(task, self._specs[node_id])
        return value
