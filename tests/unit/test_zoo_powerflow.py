"""PowerFlow (placement.policies.powerflow): a scenario table on a 2-node cluster (a fast,
power-hungry K80 node and a slow, frugal 8-core CPU node) where the defining decision shows: mct
takes the fast node, PowerFlow under a tight energy budget the frugal one, under a loose one the
fast one; the running budget; the energy estimate against a hand computation; the greedy walk on
hand-made frontiers; a short simulation; bad settings and inputs."""

from __future__ import annotations

import doctest
import math

import pytest

import placement.policies.powerflow as module
from placement.policies.mct import MinimumCompletionTimePolicy
from placement.policies.powerflow import PowerFlowPolicy, frontier_walk
from simulator.energy import PowerModel
from workload.estimates import CostModel
from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task

S = NodeState
TASK = Task("t", "video_synopsis", 2_000_000)
GPU_CPU = ClusterSpec((NodeSpec("tm_gpu", 2, 32, gpus=(GpuSpec("k80", 12),)),
                       NodeSpec("tm_cpu", 8, 32)))

# Hand computation (video_synopsis, 2 MP; stage ms from CostModel: gmm_background 240.275 on a
# core / 24.027 on a K80, frame_difference 10.149 / 1.691, tube_extraction 53.105 / 13.276,
# tube_stitching 19.913 CPU-only; watts from calibration power: core 4.25 idle / 14.17 busy,
# K80 25 / 150; input transfer 2 MB over 1 Gbps = 16 ms):
#   tm_cpu: all on cores. time = max(240.275, 10.149) + 53.105 + 19.913 + 16 = 329.3 ms.
#     dynamic = 9.92 W * 0.32344 s = 3.2085 J; idle = 8 * 4.25 W * 0.32344 s / 8 = 1.3746 J;
#     energy 4.583 J.
#   tm_gpu: three stages on the K80, tube_stitching on a core. time = 24.027 + 13.276 + 19.913
#     + 16 = 73.2 ms. dynamic = 125 W * 0.038995 s + 9.92 W * 0.019913 s = 5.0719 J;
#     idle = (2 * 4.25 + 25) W * 0.058908 s / 3 units = 0.6578 J; energy 5.7297 J.
#   So the K80 node is 0.256 s faster for 1.147 J more: 0.223 s/J.
E_CPU, E_GPU = 4.583, 5.7297
E_CPU_DYNAMIC, E_GPU_DYNAMIC = 3.2085, 5.0719


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def obs(*states: NodeState, task: Task = TASK) -> Observation:
    return Observation(task, tuple(states), now_s=0.0)


BOTH = obs(S("tm_gpu"), S("tm_cpu"))

# (settings, observation, expected node, reason keywords, mct's node)
SCENARIOS = [
    pytest.param({}, BOTH, "tm_gpu", ["from lowest-energy node tm_cpu", "no budget"],
                 "tm_gpu", id="no-budget-walks-to-the-fastest"),
    pytest.param({"energy_budget_j": 5.0}, BOTH, "tm_cpu",
                 ["tm_cpu 0.329 s, 4.58 J (lowest-energy node)",
                  "stopped: tm_gpu would save 0.256 s for 1.15 J more (0.223 s/J) but needs "
                  "5.73 J > allowance 5 J"],
                 "tm_gpu", id="tight-budget-keeps-the-frugal-node"),       # 4.58 <= 5 < 5.73
    pytest.param({"energy_budget_j": 6.0}, BOTH, "tm_gpu",
                 ["tm_gpu 0.0732 s, 5.73 J", "budget 6 J/task"],
                 "tm_gpu", id="loose-budget-buys-the-fast-node"),          # 5.73 <= 6
    pytest.param({"energy_budget_j": 1.0}, BOTH, "tm_cpu",
                 ["OVER BUDGET (allowance 1 J < 4.58 J): lowest-energy node"],
                 "tm_gpu", id="over-budget-takes-the-lowest-energy-node"),
    pytest.param({"total_energy_budget_j": 5.0}, BOTH, "tm_cpu", ["budget 5 J in all"],
                 "tm_gpu", id="total-budget-tight"),
    pytest.param({"total_energy_budget_j": 100.0}, BOTH, "tm_gpu", ["budget 100 J in all"],
                 "tm_gpu", id="total-budget-loose"),
    pytest.param({"min_seconds_per_j": 0.3}, BOTH, "tm_cpu", ["below min 0.3 s/J"],
                 "tm_gpu", id="step-below-min-gain-not-taken"),           # 0.223 < 0.3
    pytest.param({"min_seconds_per_j": 0.2}, BOTH, "tm_gpu", ["via tm_gpu"],
                 "tm_gpu", id="step-above-min-gain-taken"),
    # Without idle power: 3.21 J vs 5.07 J, so a 5.2 J budget now fits the K80 node (with idle
    # power it needs 5.73 J: see the next row).
    pytest.param({"energy_budget_j": 5.2, "count_idle": False}, BOTH, "tm_gpu",
                 ["tm_gpu 0.0732 s, 5.07 J"], "tm_gpu", id="dynamic-power-only"),
    pytest.param({"energy_budget_j": 5.2}, BOTH, "tm_cpu", ["needs 5.73 J > allowance 5.2 J"],
                 "tm_gpu", id="idle-power-counted"),
    # A measured 2x slowdown doubles the K80 node's time and joules: 11.5 J > 6 J.
    pytest.param({"energy_budget_j": 6.0}, obs(S("tm_gpu", speed_factor=2.0), S("tm_cpu")),
                 "tm_cpu", ["needs 11.5 J"], "tm_gpu", id="speed-factor-scales-energy"),
    # 3 s of backlog on 3 units: the K80 node is ready at 1 s, done at 1.07 s > 0.329 s; the
    # frugal node is also the fastest, so the walk has nowhere to go.
    pytest.param({}, obs(S("tm_gpu", backlog_s=3.0), S("tm_cpu")), "tm_cpu",
                 ["tm_cpu 0.329 s, 4.58 J (lowest-energy node); no budget"],
                 "tm_cpu", id="busy-fast-node-no-longer-faster"),
    pytest.param({"energy_budget_j": 6.0}, obs(S("tm_new"), S("tm_gpu"), S("tm_cpu")), "tm_gpu",
                 ["left out tm_new (no node spec)"], "tm_gpu", id="unknown-node-left-out"),
]


@pytest.mark.parametrize("settings, observation, expected, keywords, mct_node", SCENARIOS)
def test_scenario(settings, observation, expected, keywords, mct_node, costs):
    decision = PowerFlowPolicy(GPU_CPU, costs, **settings).decide(observation)
    assert decision.node == expected, decision.reason
    for keyword in keywords:
        assert keyword in decision.reason, decision.reason
    known = [n for n in observation.node_ids if n != "tm_new"]
    assert set(decision.scores) == set(known)
    assert MinimumCompletionTimePolicy(GPU_CPU, costs).decide(observation).node == mct_node


def test_energy_estimate_matches_the_hand_computation(costs):
    policy = PowerFlowPolicy(GPU_CPU, costs)
    assert policy.energy_j(TASK, "tm_cpu") == pytest.approx(E_CPU, rel=1e-3)
    assert policy.energy_j(TASK, "tm_gpu") == pytest.approx(E_GPU, rel=1e-3)
    assert policy.energy_j(TASK, "tm_gpu", speed_factor=2.0) == pytest.approx(2 * E_GPU,
                                                                              rel=1e-3)
    dynamic = PowerFlowPolicy(GPU_CPU, costs, count_idle=False)
    assert dynamic.energy_j(TASK, "tm_cpu") == pytest.approx(E_CPU_DYNAMIC, rel=1e-3)
    assert dynamic.energy_j(TASK, "tm_gpu") == pytest.approx(E_GPU_DYNAMIC, rel=1e-3)
    for nid in GPU_CPU.node_ids:  # the work it charges is the cost model's unit-time
        work_s = policy.energy_parts(TASK, nid)[1]
        assert work_s == pytest.approx(costs.task_work_ms(TASK, policy.spec(nid)) / 1000.0)
    # An explicit power model is used as given: a 10x hungrier K80 makes its node 10x dearer
    # in dynamic energy on its GPU stages.
    raw = costs.calibration.raw
    hungry_raw = {**raw, "power": {**raw["power"], "gpus": {**raw["power"]["gpus"], "k80": {
        **raw["power"]["gpus"]["k80"], "busy_w": 1275.0}}}}
    hungry = PowerFlowPolicy(GPU_CPU, costs, count_idle=False,
                             power=PowerModel.from_calibration(hungry_raw))
    assert hungry.energy_j(TASK, "tm_gpu") == pytest.approx(
        1250 * 0.038995 + 9.92 * 0.019913, rel=1e-3)


def test_running_budget_alternates(costs):
    # Budget B = 0.6 E_gpu + 0.4 E_cpu per task (5.271 J). Allowance of task k+1: (k+1) B - spent.
    # 1: B < E_gpu -> cpu (spent E_cpu). 2: 2B - E_cpu = 1.2 E_gpu - 0.2 E_cpu > E_gpu -> gpu.
    # 3: 3B - E_cpu - E_gpu = 0.8 E_gpu + 0.2 E_cpu < E_gpu -> cpu.
    # 4: 4B - 2 E_cpu - E_gpu = 1.4 E_gpu - 0.4 E_cpu > E_gpu -> gpu.
    policy = PowerFlowPolicy(GPU_CPU, costs, energy_budget_j=0.6 * E_GPU + 0.4 * E_CPU)
    nodes = [policy.decide(BOTH).node for _ in range(4)]
    assert nodes == ["tm_cpu", "tm_gpu", "tm_cpu", "tm_gpu"]
    assert policy.decided == 4
    assert policy.spent == pytest.approx(2 * E_CPU + 2 * E_GPU, rel=1e-3)
    # A total budget runs out: task 1 -> gpu (5.73 <= 12), task 2 -> gpu (6.27 left >= 5.73),
    # task 3 -> over budget (0.54 left < 4.58) -> cpu, the lowest-energy node.
    total = PowerFlowPolicy(GPU_CPU, costs, total_energy_budget_j=12.0)
    decisions = [total.decide(BOTH) for _ in range(3)]
    assert [d.node for d in decisions] == ["tm_gpu", "tm_gpu", "tm_cpu"]
    assert "OVER BUDGET" in decisions[2].reason and "OVER" not in decisions[1].reason


# (times, costs, allowance, min_gain, expected path, refused node, why); derivations inline.
WALKS = [
    # a -> b: 6 s for 6 J (1 s/J) beats a -> c: 9 s for 45 J (0.2 s/J); then b -> c: 3 s for
    # 39 J (0.077 s/J).
    ({"a": 10, "b": 4, "c": 1}, {"a": 5, "b": 11, "c": 50}, None, 0.0, ["a", "b", "c"], None, ""),
    ({"a": 10, "b": 4, "c": 1}, {"a": 5, "b": 11, "c": 50}, 20.0, 0.0, ["a", "b"], "c",
     "allowance"),
    ({"a": 10, "b": 4, "c": 1}, {"a": 5, "b": 11, "c": 50}, 20.0, 2.0, ["a"], "b", "min_gain"),
    # Equal cost: the cheapest-then-fastest start is b; nothing is faster, so no step.
    ({"a": 3, "b": 2}, {"a": 5, "b": 5}, None, 0.0, ["b"], None, ""),
    # Equal gain (1 s/J) from a to b and to c: the cheaper, b, first; then b -> c is 1 s/J.
    ({"a": 4, "b": 3, "c": 2}, {"a": 0, "b": 1, "c": 2}, None, 0.0, ["a", "b", "c"], None, ""),
    # Over the allowance from the start: stays at the cheapest, refusing the best step.
    ({"a": 4, "b": 1}, {"a": 5, "b": 9}, 1.0, 0.0, ["a"], "b", "allowance"),
]


@pytest.mark.parametrize("times, cost, allowance, min_gain, path, refused, why", WALKS)
def test_frontier_walk(times, cost, allowance, min_gain, path, refused, why):
    got_path, got_refused, got_why = frontier_walk(list(times), times, cost, allowance,
                                                   min_gain)
    assert got_path == path and got_why == why
    assert (got_refused[0] if got_refused else None) == refused


def test_short_simulation_completes_and_saves_energy():
    from interference.schedulers import make_node_scheduler
    from simulator import Simulator
    from simulator.energy import energy_report
    from simulator.scenarios import paper_cluster, paper_costs, saturated_workload
    paper, spec = paper_costs(), paper_cluster()
    power = PowerModel.from_calibration(paper.calibration)
    tasks = saturated_workload(40, seed=5)
    busy = {}
    for label, settings in (("free", {}), ("tight", {"energy_budget_j": 1e-3})):
        result = Simulator(paper).run(PowerFlowPolicy(spec, paper, seed=5, **settings),
                                      make_node_scheduler("fcfs", paper, seed=5), spec, tasks,
                                      seed=5)
        assert result.metrics.completed == len(tasks)
        busy[label] = energy_report(result, spec, power).busy_j
    # Everything on the lowest-energy nodes spends fewer busy joules than the fastest nodes.
    assert busy["tight"] < busy["free"]


@pytest.mark.parametrize("settings, message", [
    ({"energy_budget_j": 0}, "energy_budget_j"), ({"energy_budget_j": -1.0}, "energy_budget_j"),
    ({"energy_budget_j": math.nan}, "energy_budget_j"),
    ({"energy_budget_j": math.inf}, "energy_budget_j"),
    ({"energy_budget_j": "5"}, "energy_budget_j"), ({"energy_budget_j": True}, "energy_budget_j"),
    ({"total_energy_budget_j": 0.0}, "total_energy_budget_j"),
    ({"energy_budget_j": 5.0, "total_energy_budget_j": 50.0}, "not both"),
    ({"min_seconds_per_j": -0.1}, "min_seconds_per_j"),
    ({"min_seconds_per_j": math.nan}, "min_seconds_per_j"),
    ({"count_idle": 1}, "count_idle"), ({"power": "calibration"}, "power"),
])
def test_bad_settings_raise(settings, message):
    with pytest.raises(ValueError, match=message):
        PowerFlowPolicy(GPU_CPU, **settings)


def test_bad_inputs_raise(costs):
    unknown_gpu = ClusterSpec((NodeSpec("tm_h", 4, 64, gpus=(GpuSpec("h200", 141, 8.0),)),))
    with pytest.raises(ValueError, match="no power entry for GPU model 'h200'"):
        PowerFlowPolicy(unknown_gpu, costs)
    policy = PowerFlowPolicy(GPU_CPU, costs)
    with pytest.raises(ValueError, match="no power entry"):
        policy.set_cluster(unknown_gpu)
    policy = PowerFlowPolicy(GPU_CPU, costs)
    for state, field in ((S("tm_gpu", backlog_s=math.nan), "backlog_s"),
                         (S("tm_gpu", backlog_s=-1.0), "backlog_s"),
                         (S("tm_gpu", speed_factor=0.0), "speed_factor"),
                         (S("tm_gpu", speed_factor=math.inf), "speed_factor")):
        with pytest.raises(ValueError, match=f"tm_gpu: {field}"):
            policy.decide(obs(state, S("tm_cpu")))
    with pytest.raises(KeyError, match="set_cluster"):
        policy.decide(obs(S("tm_new")))
    with pytest.raises(KeyError, match="unknown application"):
        policy.decide(obs(S("tm_cpu"), task=Task("t", "no_such_app", 10)))
    assert policy.decided == 0  # refused decisions spend nothing


def test_deterministic_and_order_free_ties(costs):
    twins = ClusterSpec((NodeSpec("tm_a", 8, 32), NodeSpec("tm_b", 8, 32)))
    policy = PowerFlowPolicy(twins, costs, energy_budget_j=10.0)
    assert policy.decide(obs(S("tm_a"), S("tm_b"))).node == "tm_a"  # a tie: observation order
    assert policy.decide(obs(S("tm_b"), S("tm_a"))).node == "tm_b"
    one, two = PowerFlowPolicy(GPU_CPU, costs, energy_budget_j=5.3), \
        PowerFlowPolicy(GPU_CPU, costs, energy_budget_j=5.3)
    assert [one.decide(BOTH) for _ in range(5)] == [two.decide(BOTH) for _ in range(5)]


def test_docstring_examples_run():
    result = doctest.testmod(module)
    assert result.attempted >= 6 and result.failed == 0
