"""GreenFlow ("GreenFlow: a carbon-efficient scheduler"), as a streaming cluster policy:
PowerFlow's decision (:mod:`placement.policies.powerflow`) with grams of CO2 in place of joules
and a carbon budget in place of the energy budget.

What it decides. GreenFlow trades job completion time against carbon: it gives jobs the
resources that buy the most time per gram while the carbon spent stays within a budget, and when
the budget is spent it falls back to the placement that emits least. Adapted to one streaming
task at a time, exactly as PowerFlow here: per known node the task's estimated completion time
(``mct``'s) and its estimated joules (PowerFlow's ``energy_j``: dynamic power of the best unit per
stage, plus the node's idle power over the task's completion-time increment with
``count_idle``) become grams::

    grams = joules / 3.6e6 * intensity(now_s + offset_s)     (intensity in gCO2/kWh)

Then PowerFlow's greedy walk runs over grams: from the node emitting least, step to the node
that saves the most seconds per extra gram, while it fits the task's carbon allowance and saves
at least ``min_seconds_per_g``. Over budget (not even the cleanest node fits) the task goes to
the node with the least grams: as the grid gets dirtier the same allowance buys fewer joules, so
tasks move to the frugal (lower-power) nodes; when it gets cleaner they move back to the fast
ones. The budget runs over the policy's own decisions, as PowerFlow's (estimated grams, not
measured). One series for every node makes grams proportional to joules, so only the budget
reacts to the grid; a mapping of per-node series (nodes in different grid regions) also changes
which node is cleanest.

The intensity is read at the decision time (``Observation.now_s``, shifted by ``offset_s``), not
averaged over the task's run: tasks last seconds and grid data changes every 5-60 minutes.

Settings (ASSUMPTIONS of the adaptation unless said):

- ``carbon_budget_g`` (None: no budget): average grams of CO2 per task; > 0, finite.
- ``total_carbon_budget_g`` (None): grams for the policy's whole life instead; not with the
  per-task one.
- ``min_seconds_per_g`` (0.0): the least seconds saved per extra gram for a step; >= 0.
- ``series`` (None: ``synthetic_series(DEFAULT_SERIES_HOURS, seed=DEFAULT_SERIES_SEED)``, a
  seeded year of hourly intensities from ``carbon.synthetic`` in the calibration, all
  assumptions): a :class:`~simulator.carbon.CarbonSeries` for every node, or a mapping node id ->
  series covering every node of the cluster (unknown ids refused).
- ``offset_s`` (0.0: simulation time 0 is the series' time 0, midnight of its first day):
  added to ``now_s`` to read the series; finite. A time outside the series is refused (raises).
- ``count_idle`` (True), ``power`` (None: the calibration's): as PowerFlow.

Scores: estimated grams per known node.

Example::

    >>> from simulator.carbon import CarbonSeries
    >>> from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_gpu", 2, 32, gpus=(GpuSpec("k80", 12),)),
    ...                        NodeSpec("tm_cpu", 8, 32)))
    >>> grid = CarbonSeries((0.0, 3600.0), (100.0, 300.0))   # clean, then dirty from 1 h
    >>> policy = GreenFlowPolicy(cluster, carbon_budget_g=3e-4, series=grid)
    >>> states = (NodeState("tm_gpu"), NodeState("tm_cpu"))
    >>> task = Task("t1", "video_synopsis", 2_000_000)
    >>> policy.decide(Observation(task, states, now_s=60.0)).node
    'tm_gpu'
    >>> late = policy.decide(Observation(task, states, now_s=4000.0))
    >>> late.node
    'tm_cpu'
    >>> parts = late.reason.split("; ")     # and why not the GPU, and the budget
    >>> print(parts[0]); print(parts[-1])
    greenflow: tm_cpu 0.329 s, 0.000382 g (lowest-carbon node)
    intensity 300 g/kWh at 4e+03 s
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from placement.policies.powerflow import PowerFlowPolicy
from simulator.carbon import JOULES_PER_KWH, CarbonSeries, synthetic_series
from simulator.energy import PowerModel
from workload.estimates import CostModel
from workload.model import ClusterSpec, Observation

__all__ = ["GreenFlowPolicy", "DEFAULT_SERIES_HOURS", "DEFAULT_SERIES_SEED"]

#: Length of the default synthetic series: a (leap) year of hours, ASSUMPTION (long enough for any
#: simulated run; a decision past its end raises).
DEFAULT_SERIES_HOURS = 24 * 366
#: Seed of the default synthetic series, ASSUMPTION (fixed so runs repeat).
DEFAULT_SERIES_SEED = 0


class GreenFlowPolicy(PowerFlowPolicy):
    """Scores: estimated grams of CO2 per known node (the decision is the budgeted walk)."""

    name = "greenflow"
    unit = "g"
    baseline_label = "lowest-carbon node"

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0, *,
                 carbon_budget_g: float | None = None,
                 total_carbon_budget_g: float | None = None, min_seconds_per_g: float = 0.0,
                 series: CarbonSeries | Mapping[str, CarbonSeries] | None = None,
                 offset_s: float = 0.0, count_idle: bool = True,
                 power: PowerModel | None = None) -> None:
        if isinstance(offset_s, bool) or not isinstance(offset_s, (int, float)) \
                or not math.isfinite(offset_s):
            raise ValueError(f"offset_s must be a finite number of seconds, got {offset_s!r}")
        self.offset_s = float(offset_s)
        if isinstance(series, Mapping):
            known = set(cluster.node_ids)
            for node_id, one in series.items():
                if node_id not in known:
                    raise ValueError(f"series given for unknown node {node_id!r}; nodes: "
                                     f"{sorted(known)}")
                if not isinstance(one, CarbonSeries):
                    raise ValueError(f"series[{node_id!r}] must be a CarbonSeries, got "
                                     f"{type(one).__name__}")
            series = dict(series)
        elif series is not None and not isinstance(series, CarbonSeries):
            raise ValueError(f"series must be a CarbonSeries, a mapping node id -> CarbonSeries "
                             f"or None, got {type(series).__name__}")
        self.series = series  # read by _cluster_changed (coverage of a mapping)
        super().__init__(cluster, costs, seed, count_idle=count_idle, power=power)
        self._set_budget(carbon_budget_g, total_carbon_budget_g, min_seconds_per_g,
                         ("carbon_budget_g", "total_carbon_budget_g", "min_seconds_per_g"))
        if self.series is None:
            self.series = synthetic_series(DEFAULT_SERIES_HOURS, seed=DEFAULT_SERIES_SEED,
                                           calibration=self.costs.calibration)

    def _cluster_changed(self) -> None:
        super()._cluster_changed()
        if isinstance(self.series, dict):
            missing = [n for n in self.cluster.node_ids if n not in self.series]
            if missing:
                raise ValueError(f"{self.name}: no carbon series for nodes {missing}; the "
                                 f"series mapping must cover every node")

    def intensity(self, node_id: str, now_s: float) -> float:
        """gCO2/kWh in force for the node at simulation time ``now_s`` (series time
        ``now_s + offset_s``); raises ValueError outside the series."""
        one = self.series[node_id] if isinstance(self.series, dict) else self.series
        return one.at(now_s + self.offset_s)

    def _costs(self, observation: Observation, ids: list[str],
               joules: dict[str, float]) -> tuple[dict[str, float], str]:
        now = observation.now_s
        if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
            raise ValueError(f"{self.name}: observation now_s must be a finite number, "
                             f"got {now!r}")
        rates = {nid: self.intensity(nid, now) for nid in ids}
        grams = {nid: joules[nid] / JOULES_PER_KWH * rates[nid] for nid in ids}
        if isinstance(self.series, dict):
            words = ", ".join(f"{nid} {rates[nid]:.3g}" for nid in ids)
            return grams, f"; intensity g/kWh {words} at {now:.3g} s"
        return grams, f"; intensity {rates[ids[0]]:.3g} g/kWh at {now:.3g} s"
