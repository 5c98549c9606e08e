"""Placement-aware heterogeneous scheduling (placement.policies.placement_aware): scenario table
where the defining decisions show (throughput per placement span rather than one task's latency;
spilling GPU-capable stages to cores; headroom left after the node's remaining work), each beside
what mct picks; the span solver against hand-computed values; a short simulation; bad settings."""

from __future__ import annotations

import doctest
import math
import random

import pytest

import placement.policies.placement_aware as module
from placement.policies.mct import MinimumCompletionTimePolicy
from placement.policies.placement_aware import PlacementAwarePolicy, span_seconds
from workload.catalog import APPLICATIONS, app_ids
from workload.estimates import CostModel
from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task

S = NodeState
FAST_LINK = 10_000  # Mbps: the scenarios below are about units, not the link


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def gpus(model: str, count: int = 1) -> tuple[GpuSpec, ...]:
    return tuple(GpuSpec(model, 12) for _ in range(count))


def node(node_id: str, cores: int, *gpu: GpuSpec, link: float = FAST_LINK) -> NodeSpec:
    return NodeSpec(node_id, cores, 16, gpus=tuple(gpu), downlink_mbps=link)


def cluster(*nodes: NodeSpec) -> ClusterSpec:
    return ClusterSpec(tuple(nodes))


def obs(*states: NodeState, app: str = "face_recognition", size: int = 2_000_000):
    return Observation(Task("t", app, size), tuple(states), now_s=0.0)


FACE_WORK_P4_S = CostModel().task_work_ms(Task("t", "face_recognition", 2_000_000),
                                           node("x", 6, *gpus("p4"))) / 1000.0
CPU_VS_K80 = cluster(node("tm_gpu", 2, *gpus("k80")), node("tm_cpu", 24))
FEW_MANY = cluster(node("tm_few", 1, *gpus("p4", 2)), node("tm_many", 16, *gpus("p4")))
CORES_GPUS = cluster(node("tm_a", 32, *gpus("k80")), node("tm_b", 1, *gpus("k80", 2)))
SMALL_BIG = cluster(node("tm_small", 6, *gpus("p4")), node("tm_big", 6, *gpus("p4", 4)))
TWIN = cluster(node("tm_a", 6, *gpus("p4")), node("tm_b", 6, *gpus("p4")))

# (settings, cluster, observation, expected node, reason keywords, mct's node)
SCENARIOS = [
    pytest.param({}, CPU_VS_K80, obs(S("tm_gpu"), S("tm_cpu")),
                 "tm_cpu", ["tm_cpu cpu 67.3 tasks/s", "next tm_gpu gpu:k80+cpu 48.9"],
                 "tm_gpu", id="most-throughput-not-lowest-latency"),
    pytest.param({}, FEW_MANY, obs(S("tm_few"), S("tm_many"), app="intrusion_detection"),
                 "tm_many", ["tm_many gpu:p4+cpu 52.6", "next tm_few gpu:p4 17.7"],
                 "tm_few", id="cpu-only-stages-need-cores-beside-the-gpus"),
    pytest.param({}, CORES_GPUS, obs(S("tm_a"), S("tm_b")),
                 "tm_a", ["tm_a gpu:k80+cpu 120", "next tm_b gpu:k80+cpu 86.8"],
                 "tm_a", id="spilling-to-32-cores-beats-a-second-gpu"),
    pytest.param({"allow_spill": False}, CORES_GPUS, obs(S("tm_a"), S("tm_b")),
                 "tm_b", ["tm_b gpu:k80 80.2", "next tm_a gpu:k80 40.1"],
                 "tm_a", id="packed-span-only-counts-gpus"),
    pytest.param({"spill_penalty": 10.0}, CORES_GPUS, obs(S("tm_a"), S("tm_b")),
                 "tm_b", ["tm_b gpu:k80+cpu 81.2", "next tm_a gpu:k80+cpu 53.6"],
                 "tm_a", id="costly-spill-makes-the-second-gpu-win"),
    pytest.param({}, SMALL_BIG, obs(S("tm_small"), S("tm_big", backlog_s=FACE_WORK_P4_S)),
                 "tm_big", ["tm_big gpu:p4+cpu 237 tasks/s / (1 + 1.00 ahead) = 118"],
                 "tm_small", id="busy-fast-node-still-has-more-headroom"),
    pytest.param({}, SMALL_BIG, obs(S("tm_small"), S("tm_big", backlog_s=4 * FACE_WORK_P4_S)),
                 "tm_small", ["(1 + 4.00 ahead) = 47.3"],
                 "tm_small", id="until-its-remaining-work-eats-the-headroom"),
    pytest.param({}, TWIN, obs(S("tm_a", backlog_s=0.5 * FACE_WORK_P4_S, queue_depth=3),
                               S("tm_b", backlog_s=2 * FACE_WORK_P4_S, queue_depth=1)),
                 "tm_a", ["(1 + 0.50 ahead)", "ahead by backlog"],
                 "tm_a", id="remaining-work-by-backlog"),
    pytest.param({"headroom_basis": "queue"}, TWIN,
                 obs(S("tm_a", backlog_s=0.5 * FACE_WORK_P4_S, queue_depth=3),
                     S("tm_b", backlog_s=2 * FACE_WORK_P4_S, queue_depth=1)),
                 "tm_b", ["(1 + 1.00 ahead)", "ahead by queued tasks"],
                 "tm_a", id="remaining-work-by-queue-depth"),
    pytest.param({}, cluster(node("tm_slow_link", 64, link=1000), node("tm_k80", 2,
                                                                        *gpus("k80"))),
                 obs(S("tm_slow_link"), S("tm_k80")),
                 "tm_slow_link", ["tm_slow_link cpu, link-bound 62.5"],
                 "tm_k80", id="the-downlink-caps-the-rate"),
]


@pytest.mark.parametrize("settings, spec, observation, expected, keywords, mct_node",
                         SCENARIOS)
def test_scenario(settings, spec, observation, expected, keywords, mct_node, costs):
    decision = PlacementAwarePolicy(spec, costs, **settings).decide(observation)
    assert decision.node == expected, decision.reason
    for keyword in keywords:
        assert keyword in decision.reason, decision.reason
    assert set(decision.scores) == set(observation.node_ids)
    # the contrast: the simpler minimum-completion-time rule on the same observation
    assert MinimumCompletionTimePolicy(spec, costs).decide(observation).node == mct_node


def test_span_solver_against_hand_computed_values():
    # CPU-bound already: nothing spills.
    assert span_seconds([(4.0, 1.0)], 6.0, gpus=1, cores=3, allow_spill=True) == (2.0, 0.0)
    # Two stages; the one that gains least (2x) moves whole, the other (10x) stays:
    # GPU 1 + 1 = 2 s on 2 GPUs -> 1 s; moving (2, 1): GPU 1/2 = 0.5 vs CPU 2/4 = 0.5.
    seconds, spilled = span_seconds([(10.0, 1.0), (2.0, 1.0)], 0.0, gpus=2, cores=4,
                                    allow_spill=True)
    assert seconds == pytest.approx(0.5) and spilled == pytest.approx(2.0)
    # Fraction f of (4, 1) on 1 GPU + 3 cores: (1 - f) = 4f / 3 -> f = 3/7.
    seconds, spilled = span_seconds([(4.0, 1.0)], 0.0, gpus=1, cores=3, allow_spill=True)
    assert seconds == pytest.approx(4 / 7) and spilled == pytest.approx(12 / 7)
    assert span_seconds([], 3.0, gpus=2, cores=3, allow_spill=True) == (1.0, 0.0)


def test_throughput_model_invariants(costs):
    rng = random.Random(2)
    models = ["k80", "p4", "v100", "t4"]
    for _ in range(60):
        gpu_list = tuple(GpuSpec(rng.choice(models), 12) for _ in range(rng.randint(0, 4)))
        spec = NodeSpec("n", rng.randint(1, 32), 16, gpus=gpu_list,
                        cpu_speed=rng.choice([0.5, 1.0, 2.0]), downlink_mbps=FAST_LINK)
        reversed_spec = NodeSpec("r", spec.cpu_cores, 16, gpus=gpu_list[::-1],
                                 cpu_speed=spec.cpu_speed, downlink_mbps=FAST_LINK)
        task = Task("t", rng.choice(app_ids()), rng.randint(1000, 5 * 10**7))
        clusters = cluster(spec, reversed_spec)
        spill = PlacementAwarePolicy(clusters, costs)
        packed = PlacementAwarePolicy(clusters, costs, allow_spill=False)
        rate, span = spill.throughput(task, "n")
        assert spill.throughput(task, "r") == (rate, span)  # GPU order does not matter
        assert rate >= packed.throughput(task, "n")[0] * (1 - 1e-12)
        assert rate <= 1.0 / costs.transfer_s(task, spec) * (1 + 1e-12)
        if not gpu_list:
            total = sum(costs.cpu_ms(s.name, task.input_size, spec.cpu_speed)
                        for s in APPLICATIONS[task.app_id].stages) / 1000.0
            assert span.startswith("cpu")
            assert rate == pytest.approx(min(spec.cpu_cores / total,
                                             1 / costs.transfer_s(task, spec)))
        else:
            assert span.startswith("gpu:")


def test_speed_factor_scales_the_rate(costs):
    plain = PlacementAwarePolicy(TWIN, costs).decide(obs(S("tm_a"), S("tm_b")))
    slowed = PlacementAwarePolicy(TWIN, costs).decide(obs(S("tm_a", speed_factor=2.0),
                                                          S("tm_b")))
    assert plain.node == "tm_a" and slowed.node == "tm_b"
    assert slowed.scores["tm_a"] == pytest.approx(plain.scores["tm_a"] / 2)


def test_unknown_nodes_are_left_out(costs):
    policy = PlacementAwarePolicy(TWIN, costs)
    decision = policy.decide(obs(S("tm_new"), S("tm_b")))
    assert decision.node == "tm_b" and "left out tm_new (no node spec)" in decision.reason
    with pytest.raises(KeyError, match="set_cluster"):
        policy.decide(obs(S("tm_new")))


def test_random_observations_are_deterministic_and_valid(costs):
    spec = ClusterSpec((NodeSpec("a", 6, 32, gpus=(GpuSpec("p4", 8),) * 2),
                        NodeSpec("b", 6, 16, gpus=(GpuSpec("k80", 12),)), NodeSpec("c", 4, 8),
                        NodeSpec("d", 8, 64, gpus=(GpuSpec("v100", 16), GpuSpec("t4", 16)))))
    rng = random.Random(11)
    one, two = (PlacementAwarePolicy(spec, costs, seed=4) for _ in range(2))
    for _ in range(200):
        ids = list(spec.node_ids)
        rng.shuffle(ids)
        ids = ids[:rng.randint(1, 4)]
        states = tuple(S(n, *(rng.random() for _ in range(6)), queue_depth=rng.randint(0, 9),
                         backlog_s=rng.random() * 30) for n in ids)
        o = Observation(Task("t", rng.choice(app_ids()), rng.randint(1, 5 * 10**7)), states, 0.0)
        decision = one.decide(o)
        assert decision.node in o.node_ids and decision.reason
        assert set(decision.scores) == set(o.node_ids)
        assert all(math.isfinite(v) and v > 0 for v in decision.scores.values())
        assert decision.scores[decision.node] == max(decision.scores.values())
        assert two.decide(o) == decision


def test_short_simulation_finishes_and_repeats():
    from interference.schedulers import make_node_scheduler
    from simulator import Simulator
    from simulator.scenarios import paper_cluster, paper_costs, saturated_workload
    paper, spec = paper_costs(), paper_cluster()
    tasks = saturated_workload(120, seed=3)
    results = []
    for _ in range(2):
        m = Simulator(paper).run(PlacementAwarePolicy(spec, paper, seed=3),
                                 make_node_scheduler("fcfs", paper, seed=3), spec, tasks,
                                 seed=3).metrics
        assert m.completed == len(tasks)
        results.append(m.as_dict())
    assert results[0] == results[1]
    assert min(results[0]["per_node_tasks"].values()) > 0  # greedy, but it spreads under load


@pytest.mark.parametrize("settings, message", [
    ({"spill_penalty": 0.5}, "spill_penalty"), ({"spill_penalty": math.inf}, "spill_penalty"),
    ({"spill_penalty": "2"}, "spill_penalty"), ({"gpu_slots": 0}, "gpu_slots"),
    ({"gpu_slots": math.nan}, "gpu_slots"), ({"allow_spill": 1}, "allow_spill"),
    ({"headroom_basis": "load"}, "headroom_basis"),
])
def test_bad_settings_raise(settings, message):
    with pytest.raises(ValueError, match=message):
        PlacementAwarePolicy(TWIN, **settings)


def test_docstring_examples_run():
    result = doctest.testmod(module)
    assert result.attempted >= 3 and result.failed == 0
