"""Dual-agent RL placement agent (placement.policies.dual_agent): scenario rows where what it
learned changes the node (with MCT's choice beside it), the online "stop choosing the slow node"
loop, refusal of broken samples, bounded memory, and a short deterministic simulation."""

from __future__ import annotations

import doctest
import math
from collections import Counter

import pytest

from interference.schedulers import make_node_scheduler
from placement.policies import dual_agent
from placement.policies.base import EstimatingPolicy
from placement.policies.dual_agent import DualAgentPolicy
from placement.policies.mct import MinimumCompletionTimePolicy
from simulator import Simulator
from simulator.scenarios import paper_cluster, paper_costs, saturated_workload
from workload.estimates import CostModel, load_calibration
from workload.model import (ClusterSpec, Decision, GpuSpec, NodeSpec, NodeState, Observation,
                            Task, Transition)

GPU_MEMORY_GB = {name: float(m["memory_gb"]) for name, m in load_calibration().gpu_models.items()}
APP, SIZE = "face_recognition", 2_000_000


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def node(node_id: str, cores: int, *models: str) -> NodeSpec:
    return NodeSpec(node_id, cores, 32, gpus=tuple(GpuSpec(m, GPU_MEMORY_GB[m]) for m in models))


def observe(*states: NodeState, task_id: str = "t") -> Observation:
    return Observation(Task(task_id, APP, SIZE), tuple(states), now_s=0.0)


HETERO = ClusterSpec((node("tm_cpu", 16), node("tm_k80", 6, "k80"), node("tm_v100", 6, "v100")))
TWIN_V100 = ClusterSpec((node("tm_v1", 6, "v100"), node("tm_v2", 6, "v100"),
                         node("tm_k", 6, "k80")))
TWO_CPU = ClusterSpec((node("tm_a", 4), node("tm_b", 4)))

S = NodeState


def teach(policy: DualAgentPolicy, rows) -> None:
    """Feed completions: each row (node, state kwargs, latency multiplier, count) decides tasks
    seen on that node alone and reports ``multiplier x`` MCT's estimate as their latency; rows
    are interleaved so no node's samples all come last."""
    count = max((r[3] for r in rows), default=0)
    for i in range(count):
        for j, (nid, kwargs, multiplier, n) in enumerate(rows):
            if i >= n:
                continue
            state = S(nid, **kwargs)
            obs = observe(state, task_id=f"teach-{j}-{i}")
            assert policy.decide(obs).node == nid
            latency = multiplier * policy.estimate_s(obs.task, nid, state)
            policy.observe_completion(obs.task.task_id, latency, nid)


DEEP = {"queue_depth": 12}    # 3 tasks per slot on 4 cores: queue bucket 4
SHALLOW = {"queue_depth": 1}  # 0.25 per slot: queue bucket 1

# (settings, cluster, teaching rows, observation, expected node, reason keywords, MCT's node)
SCENARIOS = [
    pytest.param({"epsilon": 0.0}, HETERO, [], observe(S("tm_cpu"), S("tm_k80"), S("tm_v100")),
                 "tm_v100", ["dual-agent: tm_v100", "speed 1.00", "learned 1.00", "next tm_k80"],
                 "tm_v100", id="before-learning-it-is-mct"),
    pytest.param({"epsilon": 0.0}, HETERO, [],
                 observe(S("tm_cpu"), S("tm_k80"), S("tm_v100", queue_depth=40, backlog_s=300.0)),
                 "tm_k80", ["dual-agent: tm_k80"], "tm_k80",
                 id="before-learning-it-avoids-a-backlog-like-mct"),
    pytest.param({"epsilon": 0.0}, HETERO,
                 [("tm_v100", {}, 3.0, 20), ("tm_k80", {}, 1.0, 20), ("tm_cpu", {}, 1.0, 20)],
                 observe(S("tm_cpu"), S("tm_k80"), S("tm_v100")),
                 "tm_k80", ["dual-agent: tm_k80", "speed 1.00", "next tm_v100", "speed 2.41"],
                 "tm_v100", id="node-3x-slower-than-its-spec-is-avoided"),
    pytest.param({"epsilon": 0.0}, TWO_CPU,
                 [("tm_a", DEEP, 3.0, 20), ("tm_b", DEEP, 3.0, 20),
                  ("tm_a", SHALLOW, 1.0, 20), ("tm_b", SHALLOW, 1.0, 20)],
                 # MCT: tm_a ready 1 s (4 s / 4 units), tm_b 2 s; but tm_a's queue is deep.
                 observe(S("tm_a", backlog_s=4.0, **DEEP), S("tm_b", backlog_s=8.0, **SHALLOW)),
                 "tm_b", ["dual-agent: tm_b", "bucket q1/l0", "next tm_a", "bucket q4/l0"],
                 "tm_a", id="learned-value-of-a-deep-queue"),
    pytest.param({"epsilon": 0.0}, TWIN_V100, [("tm_v1", {}, 3.0, 20), ("tm_k", {}, 1.0, 20)],
                 observe(S("tm_v1"), S("tm_v2"), S("tm_k")),
                 "tm_k", ["dual-agent: tm_k", "speed 0.64"], "tm_v1",
                 id="similar-machine-inherits-the-slowness-of-its-twin"),
    pytest.param({"epsilon": 0.0, "share_similar": False}, TWIN_V100,
                 [("tm_v1", {}, 3.0, 20), ("tm_k", {}, 1.0, 20)],
                 observe(S("tm_v1"), S("tm_v2"), S("tm_k")),
                 "tm_v2", ["dual-agent: tm_v2", "speed 1.00"], "tm_v1",
                 id="without-similarity-the-unmeasured-twin-keeps-its-spec"),
    pytest.param({"epsilon": 0.0}, HETERO, [], observe(S("tm_new"), S("tm_k80")),
                 "tm_k80", ["left out tm_new (no node spec)"], "tm_k80",
                 id="unknown-node-left-out"),
]


@pytest.mark.parametrize("settings, spec, rows, obs, expected, keywords, mct_node", SCENARIOS)
def test_scenario(settings, spec, rows, obs, expected, keywords, mct_node, costs):
    policy = DualAgentPolicy(spec, costs, seed=0, **settings)
    teach(policy, rows)
    decision = policy.decide(obs)
    assert decision.node == expected, decision.reason
    for keyword in keywords:
        assert keyword in decision.reason, decision.reason
    assert set(decision.scores) <= set(obs.node_ids)
    assert MinimumCompletionTimePolicy(spec, costs).decide(obs).node == mct_node
    assert policy.refused == 0


def test_it_stops_choosing_a_node_3x_slower_than_its_spec_online(costs):
    """Closed loop with the default (exploring) settings: tm_v100 is best by its spec, but every
    task there takes 3x what MCT predicts."""
    policy = DualAgentPolicy(HETERO, costs, seed=4)
    obs = observe(S("tm_cpu"), S("tm_k80"), S("tm_v100"))
    slow = {"tm_v100": 3.0, "tm_k80": 1.0, "tm_cpu": 1.0}
    chosen = []
    for i in range(300):
        task_obs = Observation(Task(f"t{i}", APP, SIZE), obs.nodes, 0.0)
        decision = policy.decide(task_obs)
        chosen.append(decision.node)
        policy.observe_completion(f"t{i}", slow[decision.node] *
                                  policy.estimate_s(task_obs.task, decision.node), decision.node)
    assert chosen[0] == "tm_v100"
    last = Counter(chosen[-150:])
    assert last["tm_k80"] >= 145 and last["tm_v100"] <= 3, last
    assert policy.epsilon == pytest.approx(0.01)  # decayed to the floor
    assert policy.speed_factors(["tm_v100"])["tm_v100"] > 2.0
    # MCT, told nothing, keeps sending everything to tm_v100
    assert MinimumCompletionTimePolicy(HETERO, costs).decide(obs).node == "tm_v100"


def test_exploration_is_seeded_and_decays(costs):
    obs = observe(S("tm_cpu"), S("tm_k80"), S("tm_v100"))

    def run(seed, **kw):
        policy = DualAgentPolicy(HETERO, costs, seed=seed, **kw)
        return [policy.decide(obs) for _ in range(200)], policy

    always, _ = run(3, epsilon=1.0, epsilon_floor=1.0)
    assert all("explore" in d.reason and "greedy tm_v100" in d.reason for d in always)
    assert set(Counter(d.node for d in always)) == {"tm_cpu", "tm_k80", "tm_v100"}
    assert [d.node for d in always] == [d.node for d in run(3, epsilon=1.0, epsilon_floor=1.0)[0]]
    assert [d.node for d in always] != [d.node for d in run(5, epsilon=1.0, epsilon_floor=1.0)[0]]
    decaying, policy = run(3, epsilon=0.5, epsilon_decay=0.9, epsilon_floor=0.0)
    assert policy.epsilon < 1e-6
    assert not any("explore" in d.reason for d in decaying[60:])
    assert any("explore" in d.reason for d in decaying[:20])


@pytest.mark.parametrize("latency", [math.nan, math.inf, -math.inf, 0.0, -1.0, "abc", None,
                                     10**400])
def test_broken_latencies_are_refused(latency, costs):
    policy = DualAgentPolicy(HETERO, costs, epsilon=0.0)
    policy.decide(observe(S("tm_v100"), task_id="a"))
    policy.observe_completion("a", latency, "tm_v100")
    assert policy.refused == 1 and policy.completions == 0
    assert policy.speed_factors(["tm_v100"]) == {"tm_v100": 1.0}
    assert not any(policy.value.values()) and not any(policy.value_counts.values())
    policy.observe_completion("a", 0.5, "tm_v100")  # the good sample is still taken
    assert policy.completions == 1


def test_unknown_tasks_and_wrong_nodes_are_refused(costs):
    policy = DualAgentPolicy(HETERO, costs, epsilon=0.0)
    policy.decide(observe(S("tm_v100"), task_id="a"))
    policy.observe_completion("never-decided", 1.0, "tm_v100")
    policy.observe_completion("a", 1.0, "tm_k80")
    assert policy.refused == 2 and policy.completions == 0


def test_rewards_non_finite_refused_positive_lowers_the_bucket(costs):
    policy = DualAgentPolicy(HETERO, costs, epsilon=0.0, reward_weight=1.0)
    teach(policy, [("tm_k80", {}, 1.0, 3)])
    obs = observe(S("tm_k80"))
    bucket = policy.bucket("tm_k80", obs.nodes[0])
    before = policy.learned(bucket)
    decision = Decision("tm_k80", "x")
    for bad in (math.nan, math.inf, -math.inf, 10**400):
        policy.learn(Transition(obs, decision, bad, None))
    assert policy.refused == 4 and policy.learned(bucket) == before
    policy.learn(Transition(obs, decision, 0.5, None))
    assert policy.rewards_seen == 1 and policy.learned(bucket) < before
    for _ in range(1000):  # a long run of rewards stays bounded (50x at most)
        policy.learn(Transition(obs, decision, 1.0, None))
    assert policy.value[bucket] == pytest.approx(-math.log(50.0))
    # default reward_weight 0: the reward is counted, not learned from
    plain = DualAgentPolicy(HETERO, costs, epsilon=0.0)
    teach(plain, [("tm_k80", {}, 1.0, 3)])
    value = plain.learned(bucket)
    plain.learn(Transition(obs, decision, 0.5, None))
    assert plain.rewards_seen == 1 and plain.learned(bucket) == value


def test_pending_decisions_are_bounded(costs):
    policy = DualAgentPolicy(HETERO, costs, epsilon=0.0, max_pending=10)
    for i in range(100):
        policy.decide(observe(S("tm_k80"), task_id=f"t{i}"))
    assert len(policy._pending) == 10
    policy.observe_completion("t0", 1.0, "tm_k80")   # forgotten: refused
    policy.observe_completion("t99", 1.0, "tm_k80")  # remembered: learned
    assert (policy.refused, policy.completions) == (1, 1)


def _simulate(seed: int):
    costs = paper_costs()
    cluster = paper_cluster()
    policy = DualAgentPolicy(cluster, costs, seed=seed)
    result = Simulator(costs).run(policy, make_node_scheduler("fcfs", costs, seed=seed), cluster,
                                  saturated_workload(120, seed=seed), seed=seed)
    return result, policy


def test_short_simulation_finishes_and_is_deterministic():
    first, policy = _simulate(5)
    second, _ = _simulate(5)
    assert first.metrics.completed == 120 and first.metrics.policy == "dual_agent"
    assert first.metrics.as_dict() == second.metrics.as_dict()
    assert [d.node for _, d in first.decisions] == [d.node for _, d in second.decisions]
    assert policy.completions == 120 and policy.refused == 0 and policy.rewards_seen == 120
    assert not policy._pending
    assert all(d.reason.startswith("dual-agent: ") for _, d in first.decisions)


@pytest.mark.parametrize("settings", [
    {"epsilon": 1.5}, {"epsilon": -0.1}, {"epsilon": math.nan}, {"epsilon_decay": 0.0},
    {"epsilon_decay": 1.2}, {"epsilon_floor": -0.01}, {"epsilon_floor": 2.0},
    {"learning_rate": 0.0}, {"learning_rate": 1.5}, {"prior_samples": -1.0},
    {"prior_samples": math.inf}, {"reward_weight": -0.5}, {"max_pending": 0},
    {"max_pending": 2.5}, {"queue_edges": ()}, {"queue_edges": (1.0, 0.5)},
    {"queue_edges": (0.0, 1.0)}, {"load_edges": (0.5, math.nan)},
])
def test_bad_settings_raise(settings, costs):
    with pytest.raises(ValueError):
        DualAgentPolicy(HETERO, costs, **settings)


def test_interface_and_docstring_example():
    assert DualAgentPolicy.name == "dual_agent" and issubclass(DualAgentPolicy, EstimatingPolicy)
    assert dual_agent.__all__ == ["DualAgentPolicy"]
    result = doctest.testmod(dual_agent)
    assert result.attempted >= 3 and result.failed == 0
