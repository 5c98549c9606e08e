"""GreenFlow (placement.policies.greenflow): PowerFlow's decision in grams of CO2. On the same
2-node cluster as test_zoo_powerflow (a fast, power-hungry K80 node and a slow, frugal CPU node)
the choice switches from the fast node to the frugal one as the grid's carbon intensity rises
through the budget (constant series at several levels, and one policy across a step up); per-node
series; offset_s; the default synthetic series; a short simulation; bad settings and inputs."""

from __future__ import annotations

import doctest
import math

import pytest

import placement.policies.greenflow as module
from placement.policies.greenflow import (DEFAULT_SERIES_HOURS, DEFAULT_SERIES_SEED,
                                          GreenFlowPolicy)
from simulator.carbon import CarbonSeries, synthetic_series
from workload.estimates import CostModel
from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task

S = NodeState
TASK = Task("t", "video_synopsis", 2_000_000)
GPU_CPU = ClusterSpec((NodeSpec("tm_gpu", 2, 32, gpus=(GpuSpec("k80", 12),)),
                       NodeSpec("tm_cpu", 8, 32)))
# Joules derived by hand in test_zoo_powerflow: tm_cpu 4.583 J (0.329 s), tm_gpu 5.7297 J
# (0.0732 s). Grams = J / 3.6e6 * g/kWh.
E_CPU, E_GPU = 4.583, 5.7297


def grams(joules: float, g_per_kwh: float) -> float:
    return joules / 3.6e6 * g_per_kwh


def flat(level: float) -> CarbonSeries:
    return CarbonSeries((0.0,), (level,))


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def obs(*states: NodeState, now_s: float = 0.0) -> Observation:
    return Observation(TASK, tuple(states), now_s=now_s)


BOTH = (S("tm_gpu"), S("tm_cpu"))
BUDGET = 5.5e-4  # g per task

# Budget 5.5e-4 g: the K80 node fits while 5.7297 J / 3.6e6 * L <= 5.5e-4, i.e. L <= 345.6
# g/kWh; the CPU node while L <= 432.0. (level, expected node, reason keywords)
LEVELS = [
    pytest.param(100.0, "tm_gpu", ["tm_gpu 0.0732 s, 0.000159 g", "intensity 100 g/kWh"],
                 id="clean-grid-fast-node"),
    pytest.param(340.0, "tm_gpu", ["via tm_gpu"], id="just-under-the-switch"),
    pytest.param(350.0, "tm_cpu", ["stopped: tm_gpu", "> allowance 0.00055 g"],
                 id="just-over-the-switch-frugal-node"),
    pytest.param(430.0, "tm_cpu", ["(lowest-carbon node)"], id="frugal-node-still-in-budget"),
    pytest.param(440.0, "tm_cpu", ["OVER BUDGET (allowance 0.00055 g < 0.00056 g): "
                                   "lowest-carbon node"], id="over-budget-least-grams"),
]


@pytest.mark.parametrize("level, expected, keywords", LEVELS)
def test_intensity_rising_through_the_budget(level, expected, keywords, costs):
    policy = GreenFlowPolicy(GPU_CPU, costs, carbon_budget_g=BUDGET, series=flat(level))
    decision = policy.decide(obs(*BOTH))
    assert decision.node == expected, decision.reason
    for keyword in keywords:
        assert keyword in decision.reason, decision.reason
    assert decision.scores["tm_cpu"] == pytest.approx(grams(E_CPU, level), rel=1e-3)
    assert decision.scores["tm_gpu"] == pytest.approx(grams(E_GPU, level), rel=1e-3)


def test_one_policy_switches_when_the_grid_steps_up(costs):
    # 100 g/kWh until 1000 s, then 400. Budget B = 3.6e-4 g/task, running.
    # t=10: gpu 1.59e-4 <= B -> gpu. t=2000: allowance 2B - 1.59e-4 = 5.61e-4: cpu 5.09e-4
    # fits, gpu 6.37e-4 does not -> cpu. t=2001: 3B - 1.59e-4 - 5.09e-4 = 4.12e-4 < 5.09e-4
    # -> over budget -> cpu. Then without a budget the same grid still gives the gpu.
    grid = CarbonSeries((0.0, 1000.0), (100.0, 400.0))
    policy = GreenFlowPolicy(GPU_CPU, costs, carbon_budget_g=3.6e-4, series=grid)
    decisions = [policy.decide(obs(*BOTH, now_s=t)) for t in (10.0, 2000.0, 2001.0)]
    assert [d.node for d in decisions] == ["tm_gpu", "tm_cpu", "tm_cpu"]
    assert "OVER BUDGET" not in decisions[1].reason and "OVER BUDGET" in decisions[2].reason
    assert policy.spent == pytest.approx(grams(E_GPU, 100) + 2 * grams(E_CPU, 400), rel=1e-3)
    free = GreenFlowPolicy(GPU_CPU, costs, series=grid)
    assert free.decide(obs(*BOTH, now_s=2000.0)).node == "tm_gpu"
    # A total budget: 1e-3 g in all. t=10 -> gpu (1.59e-4); t=2000: 8.41e-4 left >= 6.37e-4
    # -> gpu; t=2001: 2.04e-4 left < 5.09e-4 -> over budget -> cpu.
    total = GreenFlowPolicy(GPU_CPU, costs, total_carbon_budget_g=1e-3, series=grid)
    assert [total.decide(obs(*BOTH, now_s=t)).node for t in (10.0, 2000.0, 2001.0)] == \
        ["tm_gpu", "tm_gpu", "tm_cpu"]


def test_offset_places_simulation_time_on_the_series(costs):
    grid = CarbonSeries((0.0, 3600.0), (100.0, 400.0))
    # now 10 s + offset 3600 s reads 400 g/kWh: the budget of the 345.6 switch no longer fits.
    late = GreenFlowPolicy(GPU_CPU, costs, carbon_budget_g=BUDGET, series=grid, offset_s=3600.0)
    decision = late.decide(obs(*BOTH, now_s=10.0))
    assert decision.node == "tm_cpu" and "intensity 400 g/kWh at 10 s" in decision.reason
    early = GreenFlowPolicy(GPU_CPU, costs, carbon_budget_g=BUDGET, series=grid)
    assert early.decide(obs(*BOTH, now_s=10.0)).node == "tm_gpu"


def test_per_node_series_make_the_cleanest_node_differ_from_the_most_frugal(costs):
    # The K80 node on a 50 g/kWh grid: 5.7297 J -> 7.96e-5 g; the CPU node on 500: 6.37e-4 g.
    # The K80 node is now the lowest-carbon (and fastest) node: chosen even over budget.
    series = {"tm_gpu": flat(50.0), "tm_cpu": flat(500.0)}
    policy = GreenFlowPolicy(GPU_CPU, costs, carbon_budget_g=1e-6, series=series)
    decision = policy.decide(obs(*BOTH))
    assert decision.node == "tm_gpu", decision.reason
    assert "OVER BUDGET" in decision.reason and "lowest-carbon node" in decision.reason
    assert "intensity g/kWh tm_gpu 50, tm_cpu 500" in decision.reason


def test_default_series_is_the_seeded_synthetic_year(costs):
    policy = GreenFlowPolicy(GPU_CPU, costs)
    expected = synthetic_series(DEFAULT_SERIES_HOURS, seed=DEFAULT_SERIES_SEED)
    assert policy.series == expected
    decision = policy.decide(obs(*BOTH, now_s=5 * 3600.0))
    assert decision.node == "tm_gpu"  # no budget: the fastest, as mct
    assert f"intensity {expected.at(5 * 3600.0):.3g} g/kWh" in decision.reason


def test_short_simulation_completes():
    from interference.schedulers import make_node_scheduler
    from simulator import Simulator
    from simulator.scenarios import paper_cluster, paper_costs, saturated_workload
    paper, spec = paper_costs(), paper_cluster()
    tasks = saturated_workload(40, seed=7)
    policy = GreenFlowPolicy(spec, paper, seed=7, carbon_budget_g=1e-4, offset_s=12 * 3600.0)
    result = Simulator(paper).run(policy, make_node_scheduler("fcfs", paper, seed=7), spec,
                                  tasks, seed=7)
    assert result.metrics.completed == len(tasks)
    assert policy.decided == len(tasks) and policy.spent > 0


@pytest.mark.parametrize("settings, message", [
    ({"carbon_budget_g": 0}, "carbon_budget_g"), ({"carbon_budget_g": -1e-3}, "carbon_budget_g"),
    ({"carbon_budget_g": math.nan}, "carbon_budget_g"),
    ({"total_carbon_budget_g": math.inf}, "total_carbon_budget_g"),
    ({"carbon_budget_g": 1e-3, "total_carbon_budget_g": 1.0}, "not both"),
    ({"min_seconds_per_g": -1.0}, "min_seconds_per_g"),
    ({"offset_s": math.nan}, "offset_s"), ({"offset_s": math.inf}, "offset_s"),
    ({"offset_s": True}, "offset_s"),
    ({"series": [100.0]}, "series must be a CarbonSeries"),
    ({"series": {"tm_gpu": flat(1.0), "tm_cpu": flat(1.0), "tm_x": flat(1.0)}}, "unknown node"),
    ({"series": {"tm_gpu": flat(1.0)}}, "no carbon series for nodes"),
    ({"series": {"tm_gpu": flat(1.0), "tm_cpu": 300.0}}, "must be a CarbonSeries"),
    ({"count_idle": "yes"}, "count_idle"),
])
def test_bad_settings_raise(settings, message):
    with pytest.raises(ValueError, match=message):
        GreenFlowPolicy(GPU_CPU, **settings)


def test_bad_inputs_raise(costs):
    policy = GreenFlowPolicy(GPU_CPU, costs, series=CarbonSeries((0.0,), (100.0,), end_s=60.0))
    with pytest.raises(ValueError, match="now_s must be a finite number"):
        policy.decide(obs(*BOTH, now_s=math.nan))
    with pytest.raises(ValueError, match="outside the series"):
        policy.decide(obs(*BOTH, now_s=120.0))
    with pytest.raises(ValueError, match="tm_gpu: backlog_s"):
        policy.decide(Observation(TASK, (S("tm_gpu", backlog_s=-2.0), S("tm_cpu")), 0.0))
    assert policy.decided == 0


def test_docstring_examples_run():
    result = doctest.testmod(module)
    assert result.attempted >= 8 and result.failed == 0
