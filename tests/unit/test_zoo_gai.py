"""GAI (placement.policies.gai): the smallest fitting subtree on hand-made racks, a high priority
taking a node held by lower-priority work (and a default priority not), records trimmed by
queue_depth, the fallbacks; bad settings and observations refused; a short simulation."""

from __future__ import annotations

import doctest
import random

import pytest

import placement.policies.gai as module
from placement.policies.gai import GaiPolicy
from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task


def node(node_id: str, rack: str, gpus: int = 1, cores: int = 2) -> NodeSpec:
    return NodeSpec(node_id, cores, 8, gpus=tuple(GpuSpec("p4", 8) for _ in range(gpus)),
                    labels=(f"rack={rack}",))


# Racks r1 = {n1, n2}, r2 = {n3, n4}; each node: 1 GPU unit, 2 core units, 3 task slots.
TWO_RACKS = ClusterSpec((node("n1", "r1"), node("n2", "r1"), node("n3", "r2"),
                         node("n4", "r2")))
IDS = TWO_RACKS.node_ids


def obs(task: Task, **states: dict) -> Observation:
    """All four nodes; ``states``: NodeState fields per node id."""
    return Observation(task, tuple(NodeState(n, **states.get(n, {})) for n in IDS), 0.0)


def task(task_id: str = "t", priority: int = 0, app: str = "face_recognition") -> Task:
    return Task(task_id, app, 1000, priority=priority)


BUSY = {"gpu_util": 1.0}
ALL_GPUS_BUSY = {n: BUSY for n in IDS}

# (settings, task, node states, expected node, reason words); derived by hand:
SCENARIOS = [
    # idle tree: racks tie at 2 free GPUs, nodes at 1: cluster order
    pytest.param({}, task(), {}, "n1", "rack r1 (2 free), node n1 (1 of 1 free)", id="idle"),
    # n1's GPU is busy: r1 has 1 free, r2 2 -> the rack with room (r1), not a fresh rack (r2)
    pytest.param({}, task(), {"n1": BUSY}, "n2", "smallest subtree with a free gpu unit: rack "
                 "r1 (1 free)", id="rack-with-room-not-a-fresh-rack"),
    # n3 busy: r2 is the rack with room (1 free) -> n4, though n1 (fresh r1) comes first
    pytest.param({}, task(), {"n3": BUSY}, "n4", "rack r2 (1 free), node n4 (1 of 1 free)",
                 id="partly-used-rack-before-cluster-order"),
    # n1 and n3 busy: both racks 1 free: cluster order -> n2
    pytest.param({}, task(), {"n1": BUSY, "n3": BUSY}, "n2", "rack r1 (1 free)", id="tie"),
    # no free GPU, unexplained load counts as priority 0: p5 would preempt it on n1
    pytest.param({}, task(priority=5), ALL_GPUS_BUSY, "n1",
                 "no free gpu unit in the tree; takes a gpu unit held by priority-0 work: would "
                 "preempt unrecorded load", id="p5-takes-priority-0-load"),
    # a priority-0 task cannot preempt priority-0 work: a core instead. n1's cores are busy
    # (cpu_util 1): r1 has 2 free cores (n2), r2 4 -> n2
    pytest.param({}, task(), {**ALL_GPUS_BUSY, "n1": {"gpu_util": 1.0, "cpu_util": 1.0}}, "n2",
                 "smallest subtree with a free cpu unit: rack r1 (2 free), node n2 (2 of 2 free)",
                 id="p0-does-not-preempt"),
    # the same p5 task when unrecorded load counts as priority 10: nothing to preempt -> cores
    pytest.param({"unrecorded_priority": 10}, task(priority=5),
                 {**ALL_GPUS_BUSY, "n1": {"gpu_util": 1.0, "cpu_util": 1.0}}, "n2",
                 "free cpu unit", id="unrecorded-high-priority-is-not-preempted"),
    pytest.param({"preemption": False}, task(priority=5),
                 {**ALL_GPUS_BUSY, "n1": {"gpu_util": 1.0, "cpu_util": 1.0}}, "n2",
                 "free cpu unit", id="preemption-off"),
    # GPU tasks as CPU demand: n1's cores half busy (cpu_util 0.5 of 2 -> 1 busy): r1 3 free,
    # r2 4 -> r1, then the node with fewer free units: n1
    pytest.param({"gpu_demand": False}, task(), {"n1": {"cpu_util": 0.5}}, "n1",
                 "free cpu unit: rack r1 (3 free), node n1 (1 of 2 free)", id="cpu-demand"),
    # everything busy, nothing lower to preempt: fewest outstanding per slot (n3: 0 of 3)
    pytest.param({}, task(), {n: {"gpu_util": 1.0, "cpu_util": 1.0, "queue_depth": 0 if
                                  n == "n3" else 2} for n in IDS}, "n3",
                 "nothing fits and nothing is preemptible: fewest outstanding per slot (0/3)",
                 id="fallback"),
]


@pytest.mark.parametrize("settings, the_task, states, expected, words", SCENARIOS)
def test_scenario(settings, the_task, states, expected, words):
    decision = GaiPolicy(TWO_RACKS, **settings).decide(obs(the_task, **states))
    assert decision.node == expected, decision.reason
    assert words in decision.reason, decision.reason
    assert decision.reason.startswith(f"gai: p{the_task.priority} task t -> ")
    assert sorted(decision.scores.values()) == [0.0, 1.0, 2.0, 3.0]
    assert decision.scores[expected] == 0.0


def test_smallest_node_inside_the_rack():
    # one rack: n_big has 2 GPUs, 1 busy (1 free); n_small 1 free of 1; n_idle 2 free of 2.
    # Best fit at node level: the fewest free that fits -> n_big (first of the 1-free tie)
    spec = ClusterSpec((node("n_idle", "r", 2), node("n_big", "r", 2), node("n_small", "r")))
    states = (NodeState("n_idle"), NodeState("n_big", gpu_util=0.5), NodeState("n_small"))
    decision = GaiPolicy(spec).decide(Observation(task(), states, 0.0))
    assert decision.node == "n_big" and "node n_big (1 of 2 free)" in decision.reason


class Driver:
    """Routes tasks; the chosen node's queue_depth grows by one (nothing finishes unless
    ``depth`` is lowered by hand). Utilisation stays 0: the policy's records hold the units."""

    def __init__(self, policy: GaiPolicy) -> None:
        self.policy, self.depth = policy, {n: 0 for n in IDS}

    def send(self, task_id: str, priority: int = 0):
        decision = self.policy.decide(Observation(
            task(task_id, priority), tuple(NodeState(n, queue_depth=d)
                                           for n, d in self.depth.items()), 0.0))
        self.depth[decision.node] += 1
        return decision


def test_priority_5_takes_the_node_held_by_priority_0_work():
    driver = Driver(GaiPolicy(TWO_RACKS))
    # t1 p3 -> n1 (idle tie); t2 -> n2 (r1 has 1 free: best fit); t3 -> n3, t4 -> n4
    assert [driver.send(f"t{i}", p).node for i, p in ((1, 3), (2, 0), (3, 0), (4, 0))] == \
        ["n1", "n2", "n3", "n4"]
    # every GPU held. p5: lowest victim priority 0 on n2, n3, n4 (n1 holds p3) -> n2, newest t2
    decision = driver.send("t5", 5)
    assert decision.node == "n2", decision.reason
    assert "held by priority-0 work: would preempt task t2 (streaming tasks are not killed" \
        in decision.reason
    # another p5: n2 now has a rival at >= 5 (t5); n3 none -> n3, would preempt t3
    decision = driver.send("t6", 5)
    assert decision.node == "n3" and "would preempt task t3" in decision.reason
    # a p0 task cannot preempt: a free core, all racks 4 free, all nodes 2 -> n1
    decision = driver.send("t7", 0)
    assert decision.node == "n1" and "free cpu unit" in decision.reason
    # p4 can preempt the p3 on n1 and the p0 on n4: the lowest, p0 on n4
    decision = driver.send("t8", 4)
    assert decision.node == "n4" and "priority-0 work: would preempt task t4" in decision.reason
    held = [(h.task_id, h.priority, h.kind) for h in driver.policy.outstanding("n2")]
    assert held == [("t2", 0, "gpu"), ("t5", 5, "gpu")]


def test_finished_tasks_free_their_units():
    driver = Driver(GaiPolicy(TWO_RACKS))
    for i in range(4):
        driver.send(f"t{i}")  # one per GPU
    driver.depth["n3"] = 0  # t2 on n3 finished: its record is dropped, its GPU is free again
    decision = driver.send("t9")
    assert decision.node == "n3" and "free gpu unit: rack r2 (1 free)" in decision.reason
    assert [h.task_id for h in driver.policy.outstanding("n3")] == ["t9"]


def test_cpu_only_nodes_serve_the_cpu_step():
    spec = ClusterSpec((node("c1", "r1", gpus=0), node("g1", "r2")))
    states = (NodeState("c1"), NodeState("g1", gpu_util=1.0, cpu_util=1.0))
    decision = GaiPolicy(spec).decide(Observation(task(), states, 0.0))
    assert decision.node == "c1" and "free cpu unit" in decision.reason


@pytest.mark.parametrize("settings, message", [
    ({"gpu_demand": 1}, "gpu_demand"), ({"preemption": "yes"}, "preemption"),
    ({"unrecorded_priority": 101}, "unrecorded_priority"),
    ({"unrecorded_priority": 0.5}, "unrecorded_priority"),
    ({"unrecorded_priority": True}, "unrecorded_priority"),
])
def test_bad_settings_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        GaiPolicy(TWO_RACKS, **settings)


def test_bad_observations_refused():
    policy = GaiPolicy(TWO_RACKS)
    with pytest.raises(ValueError, match="priority must be an integer"):
        policy.decide(obs(task(priority=500)))
    with pytest.raises(ValueError, match="priority must be an integer"):
        policy.decide(obs(Task("t", "face_recognition", 1, priority=True)))
    with pytest.raises(ValueError, match="gpu_util must be a finite"):
        policy.decide(obs(task(), n2={"gpu_util": float("nan")}))
    with pytest.raises(ValueError, match="queue_depth"):
        policy.decide(obs(task(), n2={"queue_depth": -1}))
    with pytest.raises(KeyError, match="unknown application"):
        policy.decide(obs(task(app="nope")))
    decision = policy.decide(Observation(task(), (NodeState("new"), NodeState("n4")), 0.0))
    assert decision.node == "n4" and "left out new (no node spec)" in decision.reason


def test_random_observations_are_deterministic_and_valid():
    rng = random.Random(9)
    one, two = GaiPolicy(TWO_RACKS), GaiPolicy(TWO_RACKS)
    for i in range(300):
        ids = list(IDS)
        rng.shuffle(ids)
        ids = ids[:rng.randint(1, 4)]
        states = tuple(NodeState(n, cpu_util=rng.random(), gpu_util=rng.choice([0.0, 1.0]),
                                 queue_depth=rng.randint(0, 4)) for n in ids)
        o = Observation(task(f"t{i}", rng.randint(-3, 6)), states, 0.0)
        decision = one.decide(o)
        assert decision == two.decide(o)
        assert decision.node in ids and set(decision.scores) == set(ids)
        assert decision.scores[decision.node] == 0.0


def test_short_simulation_finishes_and_repeats():
    import dataclasses

    from interference.schedulers import make_node_scheduler
    from simulator import Simulator
    from simulator.scenarios import paper_cluster, paper_costs, saturated_workload
    paper, spec = paper_costs(), paper_cluster()
    tasks = [dataclasses.replace(t, priority=5 if i % 4 == 0 else 0)
             for i, t in enumerate(saturated_workload(90, seed=4))]
    results = []
    for _ in range(2):
        m = Simulator(paper).run(GaiPolicy(spec, paper), make_node_scheduler("fcfs", paper,
                                                                             seed=4),
                                 spec, tasks, seed=4).metrics
        assert m.completed == len(tasks)
        results.append(m.as_dict())
    assert results[0] == results[1]


def test_docstring_examples_run():
    result = doctest.testmod(module)
    assert result.attempted >= 3 and result.failed == 0
