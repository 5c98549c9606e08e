"""SJF-BCO (placement.policies.sjf_bco + interference.schedulers.sjf_bco_order): scenario tables
where the defining decisions show: a task avoids a node whose rack link its own earlier tasks
keep busy; a slightly slower node on a quiet link beats a faster one on a saturated link when
the contention weight says so (and not when it is 0); the ledger forgets transfers once they are
estimated done or reported complete; the smallest task's stages start first on a node; a short
simulation with shared links on; bad settings."""

from __future__ import annotations

import doctest

import pytest

import interference.schedulers.sjf_bco_order as order_module
import placement.policies.sjf_bco as module
from interference.schedulers import validate_assignments
from interference.schedulers.sjf_bco_order import SjfBcoOrderScheduler
from placement.policies.sjf_bco import SjfBcoPolicy
from simulator import SharedLinksConfig, SimulationConfig, Simulator
from workload.estimates import CostModel
from workload.model import ClusterSpec, ComputingUnit, NodeSpec, NodeState, Observation, Stage, Task

MB = 1_000_000
BIG = 125 * MB   # 1 s over a Gigabit link alone


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def obs(*nodes: str, task_id: str = "t", now: float = 0.0, size: int = BIG) -> Observation:
    return Observation(Task(task_id, "video_synopsis", size),
                       tuple(NodeState(n) for n in nodes), now)


def node(name: str, rack: str, cpu_speed: float = 1.0, mbps: float = 1000.0) -> NodeSpec:
    return NodeSpec(name, 4, 16, cpu_speed=cpu_speed, downlink_mbps=mbps, uplink_mbps=mbps,
                    labels=(f"rack={rack}",))


def busy(policy: SjfBcoPolicy, target: str, count: int, now: float = 0.0) -> None:
    """``count`` earlier tasks the policy itself sent to ``target`` (it was the only node)."""
    for i in range(count):
        assert policy.decide(obs(target, task_id=f"early{i}", now=now)).node == target


# Racks r1 = {a, b}, r2 = {c, d}; every node and both rack uplinks 1 Gbit/s.
EQUAL = ClusterSpec((node("a", "r1"), node("b", "r1"), node("c", "r2"), node("d", "r2")))
EQUAL_RACKS = SharedLinksConfig.from_labels(EQUAL, capacity_mbps=1000)
# A fast node (cores 10% faster) behind a rack link its peer keeps busy, a slower quiet one.
FAST_SLOW = ClusterSpec((node("fast", "r1", cpu_speed=1.1), node("peer", "r1"),
                         node("slow", "r2")))
FAST_SLOW_RACKS = SharedLinksConfig.from_labels(FAST_SLOW, capacity_mbps=1000)

# (id, cluster, shared links, settings, node kept busy, transfers there, candidates, expected)
# Hand numbers (video_synopsis, 125 MB, 4 cores, CostModel): compute 19.52 s at speed 1,
# 17.75 s at 1.1; transfer alone 1 s. With 3 transfers on r1, "fast" gets a quarter of the rack
# link: 4 s, contention 3 s. Scores: slow 20.52; fast 18.75 + weight x 3 (ahead below 0.59).
SCENARIOS = [
    ("equal nodes: the one whose rack link is busy loses", EQUAL, EQUAL_RACKS, {}, "a", 1,
     ("b", "c"), "c"),
    ("the busy node and its rack peer both lose to the other rack", EQUAL,
     EQUAL_RACKS, {}, "a", 1, ("a", "b", "d"), "d"),
    ("without shared links only the node's own link counts: b is quiet", EQUAL, None, {}, "a",
     1, ("a", "b", "c"), "b"),
    ("weight 0: contention ignored, the faster node", FAST_SLOW, FAST_SLOW_RACKS,
     {"contention_weight": 0.0}, "peer", 3, ("fast", "slow"), "fast"),
    ("weight 0.5: 1.5 s of contention < 1.77 s faster compute", FAST_SLOW, FAST_SLOW_RACKS,
     {"contention_weight": 0.5}, "peer", 3, ("fast", "slow"), "fast"),
    ("weight 1 (default): the slightly slower node on the quiet link", FAST_SLOW,
     FAST_SLOW_RACKS, {}, "peer", 3, ("fast", "slow"), "slow"),
    ("weight 1, rack quiet: the faster node", FAST_SLOW, FAST_SLOW_RACKS, {}, "peer", 0,
     ("fast", "slow"), "fast"),
    ("weight 1, one transfer on the rack: 1 s contention < 1.77 s", FAST_SLOW, FAST_SLOW_RACKS,
     {}, "peer", 1, ("fast", "slow"), "fast"),
]


@pytest.mark.parametrize("case,cluster,racks,settings,target,count,candidates,expected",
                         SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_scenarios(costs, case, cluster, racks, settings, target, count, candidates, expected):
    policy = SjfBcoPolicy(cluster, costs, shared_links=racks, **settings)
    busy(policy, target, count)
    decision = policy.decide(obs(*candidates))
    assert decision.node == expected, decision.reason
    assert decision.reason.startswith(f"sjf_bco: {expected} ")
    assert min(decision.scores, key=decision.scores.get) == expected


def test_the_reason_and_scores_carry_the_hand_numbers(costs):
    policy = SjfBcoPolicy(FAST_SLOW, costs, shared_links=FAST_SLOW_RACKS)
    busy(policy, "peer", 3)
    decision = policy.decide(obs("fast", "slow"))
    assert decision.scores["fast"] == pytest.approx(17.747 + 1 + 3, abs=1e-3)
    assert decision.scores["slow"] == pytest.approx(19.522 + 1, abs=1e-3)
    assert "slow 20.5 s = compute 19.5 s + transfer alone 1 s + 1 x contention 0 s" \
        in decision.reason
    assert "next fast 21.7 s = compute 17.7 s + transfer alone 1 s + 1 x contention 3 s " \
           "(0 in flight on its link, 3 on rack=r1)" in decision.reason


def test_a_slow_link_is_overhead_not_contention(costs):
    """A quiet node behind a 100 Mbit/s link (10 s alone) loses to a Gigabit one with a transfer
    in flight (2 s): overhead and contention are weighed in the same seconds."""
    cluster = ClusterSpec((node("thin", "r1", mbps=100.0), node("wide", "r2")))
    policy = SjfBcoPolicy(cluster, costs)
    busy(policy, "wide", 1)
    decision = policy.decide(obs("thin", "wide"))
    assert decision.node == "wide", decision.reason
    assert decision.scores["thin"] - decision.scores["wide"] == pytest.approx(10 - 2, abs=1e-6)


def test_the_ledger_forgets_finished_and_completed_transfers(costs):
    policy = SjfBcoPolicy(EQUAL, costs, shared_links=EQUAL_RACKS)
    busy(policy, "a", 1)                       # estimated done at 1 s
    assert policy.decide(obs("a", "c", now=0.5, task_id="x")).node == "c"
    assert policy.in_flight(0.9) == {"a": 1, "c": 1}
    # at 1.2 s a's transfer is estimated done; c's (started at 0.5 s, 1 s) is not
    assert policy.in_flight(1.2) == {"c": 1}
    assert policy.decide(obs("a", "c", now=1.2, task_id="y")).node == "a"
    policy.observe_completion("x", 30.0, "c")  # reported complete: its input had arrived
    assert policy.in_flight(1.3) == {"a": 1}
    policy.observe_completion("unknown", 1.0, "c")  # harmless


def test_the_ledger_is_bounded(costs):
    policy = SjfBcoPolicy(EQUAL, costs, max_ledger=3)
    busy(policy, "a", 5)
    assert policy.in_flight(0.0) == {"a": 3}


def test_deterministic_and_ties_in_observation_order(costs):
    policy = SjfBcoPolicy(EQUAL, costs, shared_links=EQUAL_RACKS)
    assert policy.decide(obs("b", "a", task_id="1")).node == "b"
    wide = SharedLinksConfig.from_labels(EQUAL, capacity_mbps=1500)  # 1.5 nodes' worth
    twins = [SjfBcoPolicy(EQUAL, costs, shared_links=wide) for _ in range(2)]
    runs = [[p.decide(obs("a", "b", "c", "d", task_id=str(i))) for i in range(8)] for p in twins]
    assert runs[0] == runs[1]
    assert [d.node for d in runs[0][:4]] == ["a", "c", "b", "d"]  # racks alternate
    # a rack link only as wide as one node's: a's rack peer b is no better than a itself
    narrow = SjfBcoPolicy(EQUAL, costs, shared_links=EQUAL_RACKS)
    assert [narrow.decide(obs("a", "b", "c", "d", task_id=str(i))).node
            for i in range(4)] == ["a", "c", "a", "c"]


# -- smallest first on the node ---------------------------------------------------------------

CORE = [ComputingUnit("cpu:0", "cpu")]
TWO_CORES = [ComputingUnit("cpu:0", "cpu"), ComputingUnit("cpu:1", "cpu")]


def stage(task_id: str, size: int, ready_at: float = 0.0, app: str = "video_synopsis",
          name: str = "background_subtraction") -> Stage:
    return Stage(task_id, app, name, size, ready_at_s=ready_at)


# (id, ready stages, units, expected task ids started, in order)
ORDER_CASES = [
    ("the smaller task first, though it came later", [stage("big", 9 * MB, 0.0),
                                                       stage("small", MB, 5.0)], CORE, ["small"]),
    ("equal sizes: first come first served", [stage("late", MB, 2.0), stage("early", MB, 1.0)],
     CORE, ["early"]),
    ("room for two: both, smallest first", [stage("big", 9 * MB), stage("mid", 3 * MB),
                                            stage("small", MB)], TWO_CORES, ["small", "mid"]),
    ("size is the whole task's: a cheap stage of a big task waits",
     [stage("big", 9 * MB, 0.0, name="tube_stitching"), stage("small", 2 * MB, 1.0)], CORE,
     ["small"]),
    ("unknown applications go last", [stage("odd", MB, 0.0, app="no_such_app"),
                                      stage("known", 9 * MB, 3.0)], CORE, ["known"]),
]


@pytest.mark.parametrize("case,ready,units,expected", ORDER_CASES, ids=[c[0] for c in ORDER_CASES])
def test_smallest_task_first_on_the_node(costs, case, ready, units, expected):
    assignments = SjfBcoOrderScheduler(costs).assign(ready, units, now_s=10.0)
    validate_assignments(assignments, ready, units)
    assert [a.stage.task_id for a in assignments] == expected
    assert all(a.reason.startswith("SJF-BCO: task ") for a in assignments)


def test_gpu_first_for_gpu_capable_stages(costs):
    units = [ComputingUnit("cpu:0", "cpu"), ComputingUnit("gpu:0", "gpu", model="k80")]
    [a] = SjfBcoOrderScheduler(costs).assign([stage("t", MB)], units, 0.0)
    assert a.unit_id == "gpu:0"
    [a] = SjfBcoOrderScheduler(costs, prefer_gpu=False).assign([stage("t", MB)], units, 0.0)
    assert a.unit_id == "cpu:0"


# -- a short simulation with shared links on ---------------------------------------------------

def test_a_simulation_with_shared_links_runs_and_keeps_bursts_off_one_rack(costs):
    cluster = ClusterSpec(tuple(node(f"n{i}", f"r{i // 2}", mbps=1000.0) for i in range(4)))
    racks = SharedLinksConfig.from_labels(cluster, capacity_mbps=1000)
    tasks = [Task(f"t{i}", "video_synopsis", 20 * MB, arrival_s=0.01 * i) for i in range(8)]
    sim = Simulator(costs, SimulationConfig(service_noise_sigma=0.0, shared_links=racks))
    result = sim.run(SjfBcoPolicy(cluster, costs, shared_links=racks),
                     SjfBcoOrderScheduler(costs), cluster, tasks, seed=1)
    assert result.metrics.completed == 8
    # one task per rack before either rack's link is shared
    assert sorted(d.node for _, d in result.decisions[:2]) == ["n0", "n2"]


# -- validation and docs -----------------------------------------------------------------------

@pytest.mark.parametrize("settings,match", [
    ({"contention_weight": -1.0}, "contention_weight must be a finite number >= 0"),
    ({"contention_weight": float("inf")}, "contention_weight"),
    ({"contention_weight": True}, "contention_weight"),
    ({"bytes_per_unit": -0.5}, "bytes_per_unit"),
    ({"fixed_bytes": float("nan")}, "fixed_bytes"),
    ({"max_ledger": 0}, "max_ledger must be an int >= 1"),
    ({"shared_links": "rack"}, "SharedLinksConfig or None"),
])
def test_bad_settings_raise(costs, settings, match):
    with pytest.raises(ValueError, match=match):
        SjfBcoPolicy(EQUAL, costs, **settings)


def test_bad_scheduler_setting_raises(costs):
    with pytest.raises(ValueError, match="prefer_gpu must be True or False"):
        SjfBcoOrderScheduler(costs, prefer_gpu="yes")


def test_a_task_bytes_setting_changes_the_transfer_estimate(costs):
    policy = SjfBcoPolicy(EQUAL, costs, bytes_per_unit=0.0, fixed_bytes=125 * MB / 10)
    estimate = policy.estimate(Task("t", "video_synopsis", BIG), "a", 1.0, 0.0, {})
    assert estimate.transfer_alone_s == pytest.approx(0.1)


def test_docstring_examples_run():
    assert doctest.testmod(module).failed == 0
    assert doctest.testmod(order_module).failed == 0


def test_the_ledger_stays_bounded_over_a_long_run(costs):
    policy = SjfBcoPolicy(EQUAL, costs, max_ledger=2)
    for i in range(50):
        policy.decide(obs("a", "b", "c", "d", task_id=f"t{i % 7}", now=0.1 * i))
        assert sum(policy.in_flight(0.1 * i).values()) <= 2
        assert len(policy._ends) <= 2 * 2 + 1


def test_the_shared_links_benchmark_runs_a_tiny_setting():
    from benchmarks.shared_links import SYSTEMS, racked_cluster, run_one
    cluster = racked_cluster()
    assert [n.labels[-1] for n in cluster.nodes] == ["rack=r0"] * 3 + ["rack=r1"] * 3
    label, policy, scheduler, told = SYSTEMS[0]
    row = run_one(label, policy, scheduler, told, rate=30.0, tasks=6, seed=1)
    assert row["system"] == "SJF-BCO" and row["throughput_per_min"] > 0
    assert row["input_transfer_mean_s"] > 0
