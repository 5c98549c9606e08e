"""Cluster-level baseline policies: scenario tables (expected node + a keyword of the reason, as
HiveD's tests check decisions and their explanations), sequences for the stateful rules, and
properties every registered policy must keep on random observations."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from placement.policies import (ALIASES, POLICIES, MinimumCompletionTimePolicy, make_policy)
from placement.policies.weighted_round_robin import node_capacity
from workload.catalog import app_ids
from workload.estimates import CostModel, load_calibration
from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task

GPU_MEMORY_GB = {name: float(m["memory_gb"]) for name, m in load_calibration().gpu_models.items()}


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def gpus(*models: str) -> tuple[GpuSpec, ...]:
    return tuple(GpuSpec(m, GPU_MEMORY_GB[m]) for m in models)


def cluster(*nodes: NodeSpec) -> ClusterSpec:
    return ClusterSpec(tuple(nodes))


def observe(*states: NodeState, app: str = "face_recognition",
            size: int = 2_000_000) -> Observation:
    return Observation(Task("t", app, size), tuple(states), now_s=0.0)


# Clusters of the scenarios.
HETERO = cluster(NodeSpec("tm_cpu", 16, 64), NodeSpec("tm_k80", 6, 32, gpus=gpus("k80")),
                 NodeSpec("tm_v100", 6, 32, gpus=gpus("v100")))
SMALL_BIG = cluster(NodeSpec("tm_small", 2, 8), NodeSpec("tm_big", 32, 128))
TWO_GPU = cluster(NodeSpec("tm_p4", 6, 32, gpus=gpus("p4")),
                  NodeSpec("tm_t4", 6, 32, gpus=gpus("t4")))
TWO_CPU = cluster(NodeSpec("tm_a", 4, 16), NodeSpec("tm_b", 4, 16))

S = NodeState
# (policy, settings, cluster, observation, expected node, keywords the reason must contain)
SCENARIOS = [
    pytest.param("least_loaded", {}, TWO_CPU,
                 # tm_b has the hottest CPU but the lowest mean of the four utilisations.
                 observe(S("tm_a", cpu_util=0.5, host_mem_util=0.5, gpu_util=0.5),
                         S("tm_b", cpu_util=0.9, host_mem_util=0.1)),
                 "tm_b", ["least loaded", "tm_b load 0.25", "next tm_a 0.38"],
                 id="least-loaded-uses-mean-of-four-utilisations"),
    pytest.param("least_loaded", {}, TWO_CPU,
                 observe(S("tm_b", cpu_util=0.4), S("tm_a", cpu_util=0.4)),
                 "tm_b", ["least loaded"], id="least-loaded-tie-goes-to-observation-order"),
    pytest.param("met", {}, HETERO,
                 observe(S("tm_cpu"), S("tm_k80"),
                         S("tm_v100", cpu_util=1, gpu_util=1, queue_depth=40, backlog_s=300.0)),
                 "tm_v100", ["minimum execution time", "tm_v100", "load ignored"],
                 id="met-takes-the-fastest-gpu-even-when-busy"),
    pytest.param("mct", {}, HETERO,
                 observe(S("tm_cpu"), S("tm_k80"),
                         S("tm_v100", cpu_util=1, gpu_util=1, queue_depth=40, backlog_s=300.0)),
                 "tm_k80", ["minimum completion time", "tm_k80", "ready 0.00 s"],
                 id="mct-avoids-the-fast-node-with-a-long-backlog"),
    pytest.param("mct", {}, HETERO, observe(S("tm_cpu"), S("tm_k80"), S("tm_v100")),
                 "tm_v100", ["minimum completion time", "tm_v100"],
                 id="mct-equals-met-on-an-idle-cluster"),
    pytest.param("etc", {}, HETERO,
                 observe(S("tm_cpu"), S("tm_k80", backlog_s=70.0), S("tm_v100", backlog_s=70.0)),
                 "tm_cpu", ["minimum completion time", "tm_cpu"],
                 id="etc-alias-sends-work-to-the-idle-cpu-node-when-gpus-are-backed-up"),
    pytest.param("least_outstanding", {}, SMALL_BIG,
                 observe(S("tm_small", queue_depth=1), S("tm_big", queue_depth=10)),
                 "tm_big", ["fewest outstanding per slot", "tm_big 10/32 = 0.31",
                            "next tm_small 1/2 = 0.50"],
                 id="least-outstanding-per-slot"),
    pytest.param("least_outstanding", {"per_slot": False}, SMALL_BIG,
                 observe(S("tm_small", queue_depth=1), S("tm_big", queue_depth=10)),
                 "tm_small", ["fewest outstanding", "tm_small 1"],
                 id="least-outstanding-raw-count"),
    pytest.param("least_outstanding", {"per_slot": False}, TWO_CPU,
                 observe(S("tm_a", queue_depth=2, cpu_util=0.9), S("tm_b", queue_depth=2)),
                 "tm_b", ["tie broken by load"], id="least-outstanding-tie-broken-by-load"),
    pytest.param("flink_tasks_balance", {}, SMALL_BIG,
                 observe(S("tm_small", queue_depth=2), S("tm_big", queue_depth=3)),
                 "tm_small", ["tasks balance", "fewest tasks 2", "capacity not considered"],
                 id="tasks-balance-ignores-capacity"),
    pytest.param("flink_tasks_balance", {}, SMALL_BIG,
                 observe(S("tm_big", queue_depth=1), S("tm_small", queue_depth=1)),
                 "tm_small", ["tasks balance"], id="tasks-balance-tie-goes-to-cluster-order"),
    pytest.param("flink_slot_filling", {}, SMALL_BIG,
                 observe(S("tm_big"), S("tm_small", queue_depth=1)),
                 "tm_small", ["slot filling", "free slot", "1 of 2 used"],
                 id="slot-filling-keeps-filling-the-first-node"),
    pytest.param("flink_slot_filling", {}, SMALL_BIG,
                 observe(S("tm_small", queue_depth=2), S("tm_big", queue_depth=3)),
                 "tm_big", ["slot filling", "tm_big has a free slot (3 of 32 used)"],
                 id="slot-filling-moves-on-when-the-first-is-full"),
    pytest.param("flink_slot_filling", {}, SMALL_BIG,
                 observe(S("tm_small", queue_depth=3), S("tm_big", queue_depth=40)),
                 "tm_big", ["every node full", "least over-subscribed", "40/32 = 1.25"],
                 id="slot-filling-all-full-takes-least-over-subscribed"),
    pytest.param("kubernetes", {}, TWO_GPU,
                 # tm_p4 is idle except that its only GPU has 3% of 8 GB free; the task's
                 # largest GPU stage needs about 316 MB.
                 observe(S("tm_p4", gpu_mem_util=0.97),
                         S("tm_t4", cpu_util=0.5, host_mem_util=0.5, gpu_util=0.5,
                           gpu_mem_util=0.5)),
                 "tm_t4", ["kubernetes", "filtered tm_p4", "GPU memory"],
                 id="kubernetes-filters-a-node-without-gpu-memory"),
    pytest.param("kubernetes", {}, TWO_GPU,
                 observe(S("tm_p4", gpu_mem_util=0.99), S("tm_t4", host_mem_util=1.2)),
                 "tm_p4", ["no node fits", "tm_p4 least over-committed 1.03 by GPU memory",
                           "next tm_t4 1.21"],
                 id="kubernetes-all-filtered-takes-least-over-committed"),
    pytest.param("kubernetes", {}, TWO_CPU,
                 observe(S("tm_a", cpu_util=0.6, host_mem_util=0.6),
                         S("tm_b", cpu_util=0.2, host_mem_util=0.3)),
                 "tm_b", ["kubernetes", "least-allocated", "balanced"],
                 id="kubernetes-prefers-the-less-requested-node"),
    pytest.param("kubernetes", {}, TWO_CPU,
                 # Same mean request; tm_b is balanced (CPU = memory), tm_a is lopsided.
                 observe(S("tm_a", cpu_util=0.05, host_mem_util=0.75),
                         S("tm_b", cpu_util=0.35, host_mem_util=0.45)),
                 "tm_b", ["balanced"], id="kubernetes-prefers-balanced-allocation"),
]


@pytest.mark.parametrize("name, settings, spec, obs, expected, keywords", SCENARIOS)
def test_scenario(name, settings, spec, obs, expected, keywords, costs):
    decision = make_policy(name, spec, costs=costs, **settings).decide(obs)
    assert decision.node == expected, decision.reason
    for keyword in keywords:
        assert keyword in decision.reason
    assert set(decision.scores) <= set(obs.node_ids)


def test_kubernetes_scores_follow_the_kube_scheduler_formulas(costs):
    policy = make_policy("kubernetes", TWO_CPU, costs=costs)
    obs = observe(S("tm_a", cpu_util=0.2, host_mem_util=0.6), S("tm_b", cpu_util=0.9),
                  app="video_synopsis", size=1000)
    decision = policy.decide(obs)
    # CPU-only node: the whole task is CPU work (1 core of 4); host memory is the 200 MiB
    # default (1000 pixels are less) of 16 GB.
    cpu, mem = 0.2 + 1 / 4, 0.6 + 200 * 2**20 / 1e9 / 16
    least = 100 * (1 - (cpu + mem) / 2)
    balanced = 100 * (1 - abs(cpu - mem) / 2)
    assert decision.scores["tm_a"] == pytest.approx(least + balanced)
    # tm_b: 0.9 + 0.25 CPU exceeds the node, so it is filtered.
    assert decision.node == "tm_a" and "filtered tm_b (CPU 1.15)" in decision.reason


def test_met_and_mct_read_the_cost_model(costs):
    task_obs = observe(S("tm_cpu"), S("tm_k80", backlog_s=7.0), S("tm_v100"))
    decision = make_policy("mct", HETERO, costs=costs).decide(task_obs)
    k80 = HETERO.nodes[1]
    # backlog 7 s over 6 cores + 1 GPU = 1 s ready, plus the task's estimate alone.
    assert decision.scores["tm_k80"] == pytest.approx(
        1.0 + costs.task_ms_on(task_obs.task, k80) / 1000)
    met = make_policy("met", HETERO, costs=costs).decide(task_obs)
    assert met.scores["tm_cpu"] == pytest.approx(costs.task_ms_on(task_obs.task,
                                                                  HETERO.nodes[0]))


def run(policy, obs: Observation, decisions: int, update=None) -> list[str]:
    """Decide repeatedly; ``update(obs, node)`` returns the next observation (e.g. the chosen
    node's queue grows by one)."""
    chosen = []
    for _ in range(decisions):
        node = policy.decide(obs).node
        chosen.append(node)
        if update:
            obs = update(obs, node)
    return chosen


def one_more_task(obs: Observation, node: str) -> Observation:
    return Observation(obs.task, tuple(
        NodeState(n.node_id, queue_depth=n.queue_depth + (n.node_id == node)) for n in obs.nodes),
        obs.now_s)


def test_slot_filling_fills_tm_a_to_its_slots_then_moves_on():
    spec = cluster(NodeSpec("tm_a", 2, 8, slots=3), NodeSpec("tm_b", 2, 8, slots=2))
    # Reports arrive with tm_b first: the fill order is still the cluster's.
    chosen = run(make_policy("flink_slot_filling", spec), observe(S("tm_b"), S("tm_a")), 9,
                 one_more_task)
    # Full after 5; then the least over-subscribed: a 4/3 vs b 2/2 -> b 3/2 -> a ...
    assert chosen == ["tm_a"] * 3 + ["tm_b"] * 2 + ["tm_a", "tm_b", "tm_a", "tm_b"]


def test_tasks_balance_alternates_regardless_of_capacity():
    chosen = run(make_policy("flink_tasks_balance", SMALL_BIG),
                 observe(S("tm_big"), S("tm_small")), 6, one_more_task)
    assert chosen == ["tm_small", "tm_big"] * 3


def test_weighted_round_robin_3_to_1_exact_sequence():
    spec = cluster(NodeSpec("tm_a", 3, 8), NodeSpec("tm_b", 1, 8))
    chosen = run(make_policy("weighted_round_robin", spec), observe(S("tm_a"), S("tm_b")), 10)
    assert [c[-1] for c in chosen] == list("aabaaabaaa")
    assert Counter(chosen[:8]) == {"tm_a": 6, "tm_b": 2}  # exactly 3:1 per cycle of 4


def test_weighted_round_robin_capacity_counts_cpus_and_gpus():
    node = NodeSpec("n", 6, 32, gpus=(GpuSpec("p4", 8, speed=1.5), GpuSpec("p4", 8, speed=1.5)),
                    cpu_speed=0.5)
    assert node_capacity(node) == pytest.approx(6 * 0.5 + 3.0)
    assert node_capacity(node, gpu_weight=10) == pytest.approx(3.0 + 30.0)
    spec = cluster(NodeSpec("tm_cpu", 2, 8), NodeSpec("tm_gpu", 1, 8, gpus=(GpuSpec("t4", 16,
                                                                                     3.0),)))
    chosen = run(make_policy("weighted_round_robin", spec), observe(S("tm_cpu"), S("tm_gpu")), 6)
    assert Counter(chosen) == {"tm_cpu": 2, "tm_gpu": 4}  # capacities 2 : 4


def test_weighted_round_robin_survives_a_node_leaving():
    spec = cluster(NodeSpec("tm_a", 3, 8), NodeSpec("tm_b", 1, 8), NodeSpec("tm_c", 1, 8))
    policy = make_policy("weighted_round_robin", spec)
    run(policy, observe(S("tm_a"), S("tm_b"), S("tm_c")), 3)
    chosen = run(policy, observe(S("tm_a"), S("tm_c")), 8)
    assert Counter(chosen) == {"tm_a": 6, "tm_c": 2}


def test_round_robin_cycles_and_survives_a_node_leaving_and_joining():
    spec = cluster(NodeSpec("tm_a", 2, 8), NodeSpec("tm_b", 2, 8), NodeSpec("tm_c", 2, 8))
    policy = make_policy("round_robin", spec)
    all_three = observe(S("tm_a"), S("tm_b"), S("tm_c"))
    assert run(policy, all_three, 4) == ["tm_a", "tm_b", "tm_c", "tm_a"]
    assert run(policy, observe(S("tm_c"), S("tm_a")), 3) == ["tm_c", "tm_a", "tm_c"]
    # tm_b returns and tm_d (not in the spec) joins at the end of the cycle.
    assert run(policy, observe(S("tm_d"), S("tm_a"), S("tm_b"), S("tm_c")), 5) == \
        ["tm_d", "tm_a", "tm_b", "tm_c", "tm_d"]
    # tm_d leaves again: the cycle resumes after it, at tm_a.
    assert policy.decide(all_three).reason == "round-robin: tm_a is next after tm_d"


def test_round_robin_reason_names_the_previous_node():
    policy = make_policy("round_robin", TWO_CPU)
    obs = observe(S("tm_a"), S("tm_b"))
    assert "starts the cycle" in policy.decide(obs).reason
    assert policy.decide(obs).reason == "round-robin: tm_b is next after tm_a"


def test_random_is_deterministic_per_seed_and_covers_all_nodes():
    spec = cluster(*(NodeSpec(f"tm_{i}", 2, 8) for i in range(4)))
    obs = observe(*(S(f"tm_{i}") for i in range(4)))
    first = run(make_policy("random", spec, seed=3), obs, 400)
    assert first == run(make_policy("random", spec, seed=3), obs, 400)
    assert first != run(make_policy("random", spec, seed=4), obs, 400)
    counts = Counter(first)
    assert set(counts) == set(obs.node_ids)
    assert all(60 <= c <= 140 for c in counts.values()), counts  # uniform: 100 expected each


def test_nodes_without_a_spec_are_left_out_until_the_cluster_is_updated(costs):
    policy = make_policy("met", HETERO, costs=costs)
    obs = observe(S("tm_new"), S("tm_k80"))
    decision = policy.decide(obs)
    assert decision.node == "tm_k80" and "left out tm_new (no node spec)" in decision.reason
    with pytest.raises(KeyError, match="set_cluster"):
        policy.decide(observe(S("tm_new")))
    policy.set_cluster(cluster(*HETERO.nodes, NodeSpec("tm_new", 6, 32, gpus=gpus("v100"))))
    assert policy.decide(obs).node == "tm_new"


def test_registry_names_aliases_and_errors():
    assert set(POLICIES) == {"random", "round_robin", "weighted_round_robin", "least_loaded",
                             "least_outstanding", "met", "mct", "mct_drain", "flink_slot_filling",
                             "flink_tasks_balance", "kubernetes", "liquid", "placement_aware",
                             "delay_locality", "dual_agent", "least_similar", "powerflow",
                             "greenflow", "hived", "gai", "sjf_bco", "pipe_torch",
                             "iot_partition"}
    assert all(cls.name == name for name, cls in POLICIES.items())
    assert isinstance(make_policy("etc", TWO_CPU), MinimumCompletionTimePolicy)
    assert set(ALIASES.values()) <= set(POLICIES)
    with pytest.raises(ValueError, match="known policies: .*least_loaded"):
        make_policy("fastest", TWO_CPU)
    with pytest.raises(TypeError):
        make_policy("least_loaded", TWO_CPU, per_slot=True)


RANDOM_CLUSTER = cluster(NodeSpec("tm_a", 6, 32, gpus=gpus("p4", "p4")),
                         NodeSpec("tm_b", 6, 16, gpus=gpus("k80")),
                         NodeSpec("tm_c", 4, 8),
                         NodeSpec("tm_d", 8, 64, gpus=gpus("v100", "t4"), slots=4))


def random_observation(rng: random.Random) -> Observation:
    ids = list(RANDOM_CLUSTER.node_ids)
    rng.shuffle(ids)
    ids = ids[:rng.randint(1, len(ids))]  # nodes joined/left and reports reordered
    states = tuple(NodeState(nid, *(rng.random() * 1.2 for _ in range(6)),
                             queue_depth=rng.randint(0, 12), backlog_s=rng.random() * 30)
                   for nid in ids)
    return Observation(Task("t", rng.choice(app_ids()), rng.randint(1, 50_000_000)), states, 0.0)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_returns_an_observed_node_with_a_reason(name, costs):
    rng = random.Random(11)
    observations = [random_observation(rng) for _ in range(150)]
    policy, again = (make_policy(name, RANDOM_CLUSTER, costs=costs, seed=5) for _ in range(2))
    for obs in observations:
        decision = policy.decide(obs)
        assert decision.node in obs.node_ids
        assert decision.reason.strip()
        assert decision.node in decision.scores and set(decision.scores) <= set(obs.node_ids)
        assert again.decide(obs) == decision  # deterministic for a seed


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_works_on_a_one_node_cluster(name, costs):
    spec = cluster(NodeSpec("solo", 1, 2, slots=1))
    policy = make_policy(name, spec, costs=costs)
    for depth in (0, 5):  # idle, then over-subscribed and over-loaded
        obs = observe(S("solo", cpu_util=depth, host_mem_util=depth, queue_depth=depth,
                        backlog_s=depth))
        decision = policy.decide(obs)
        assert decision.node == "solo" and decision.reason
    with pytest.raises(ValueError, match="no nodes"):
        policy.decide(Observation(obs.task, (), 0.0))
