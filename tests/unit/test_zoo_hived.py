"""HiveD (placement.policies.hived): buddy allocation of VCs on hand-made racks, a routing
sequence where tenants stay in their VCs, spill opportunistically when over quota and a
guaranteed task avoids (or is marked next to) opportunistic load; records trimmed by
queue_depth; unknown tenants; bad quotas refused; a short simulation."""

from __future__ import annotations

import dataclasses
import doctest
import random

import pytest

import placement.policies.hived as module
from placement.policies.hived import HiveDPolicy, buddy_allocate
from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task


def node(node_id: str, rack: str | None, gpus: int = 0, slots: int = 2) -> NodeSpec:
    labels = (f"rack={rack}",) if rack else ()
    return NodeSpec(node_id, 2, 8, gpus=tuple(GpuSpec("p4", 8) for _ in range(gpus)),
                    labels=labels, slots=slots)


# Racks r1 = {n1, n2}, r2 = {n3, n4}; every node is one cell of 2 slots.
TWO_RACKS = ClusterSpec((node("n1", "r1"), node("n2", "r1"), node("n3", "r2"),
                         node("n4", "r2")))
# Buddy allocation of {"a": 2, "b": 1}: a first (larger quota); both racks fit 2 with 2 free,
# tie -> r1 = n1, n2. Then b: only r2 has room; its nodes tie at 1 free -> n3. n4 is in no VC.
QUOTAS = {"a": 2, "b": 1}


class Driver:
    """Routes tasks one by one; a chosen node's queue_depth grows by one (nothing finishes
    unless ``depth`` is lowered by hand). ``extra``: queue_depth beyond the routed tasks."""

    def __init__(self, policy: HiveDPolicy, extra: dict[str, int] | None = None) -> None:
        self.policy, self.count = policy, 0
        self.depth = {n: (extra or {}).get(n, 0) for n in policy.cluster.node_ids}

    def send(self, tenant: str):
        self.count += 1
        task = Task(f"t{self.count}", "face_recognition", 1000, tenant=tenant)
        obs = Observation(task, tuple(NodeState(n, queue_depth=d)
                                      for n, d in self.depth.items()), 0.0)
        decision = self.policy.decide(obs)
        self.depth[decision.node] += 1
        return decision


def test_buddy_allocation_keeps_higher_level_cells_whole():
    policy = HiveDPolicy(TWO_RACKS, quotas=QUOTAS)
    assert policy.vc_cells("a") == ("r1/n1", "r1/n2")
    assert policy.vc_cells("b") == ("r2/n3",)
    assert policy.vc_cells("nobody") == ()
    # 3 cells fit in no rack (2 each): the fullest rack whole (r1, first on the tie), then 1 of r2
    assert HiveDPolicy(TWO_RACKS, quotas={"a": 3}).vc_cells("a") == ("r1/n1", "r1/n2", "r2/n3")
    # GPU cells: r1 = n1 (2 GPUs) + n2 (1 GPU), r2 = n3 (1 GPU) + n4 (no GPU: one cpu cell).
    # b (2) first: r1 has 3 free, r2 2 -> the smallest that fits is r2 (n3/gpu0 + n4/cpu).
    # a (1): in r1, n2 (1 free) fits and is smaller than n1 (2): n1's two GPUs stay whole.
    gpus = ClusterSpec((node("n1", "r1", 2), node("n2", "r1", 1), node("n3", "r2", 1),
                        node("n4", "r2", 0)))
    policy = HiveDPolicy(gpus, quotas={"a": 1, "b": 2}, cell_level="gpu")
    assert policy.vc_cells("b") == ("r2/n3/gpu0", "r2/n4/cpu")
    assert policy.vc_cells("a") == ("r1/n2/gpu0",)
    # hand trees: largest quota first, smallest fitting subtree, name breaks quota ties
    assert buddy_allocate({"x": 2, "y": 2}, [["p", "q", "r"], ["s", "t"]]) == \
        {"x": ("s", "t"), "y": ("p", "q")}
    assert buddy_allocate({"x": 1}, [[["p"], ["q", "r"]], [["s"]]]) == {"x": ("s",)}


# (tenant, node, words of the reason), in routing order; derived by hand (slots 2 per cell):
ROUTING = [
    ("a", "n1", "tenant a: guaranteed cell r1/n1 (VC a 1 of 2 cells used; cell 1 of 2 slots)"),
    ("a", "n1", "guaranteed cell r1/n1 (VC a 1 of 2 cells used; cell 2 of 2 slots)"),  # packs
    ("a", "n2", "guaranteed cell r1/n2 (VC a 2 of 2 cells used; cell 1 of 2 slots)"),
    ("b", "n3", "tenant b: guaranteed cell r2/n3 (VC b 1 of 1 cells used; cell 1 of 2 slots)"),
    ("b", "n3", "guaranteed cell r2/n3 (VC b 1 of 1 cells used; cell 2 of 2 slots)"),
    # b is at its quota: the free cell in no VC (n4), twice, then nothing is free: the least
    # loaded cell is a's n2 (1 of 2), queued there as opportunistic
    ("b", "n4", "tenant b: opportunistic cell r2/n4 (VC b 1 of 1 cells used, none with room); "
                "free cell in no VC"),
    ("b", "n4", "opportunistic cell r2/n4"),
    ("b", "n2", "opportunistic cell r1/n2 (VC b 1 of 1 cells used, none with room); no free "
                "cell anywhere: queued (1 of 2 slots)"),
    # a's guaranteed slot on n2 is still free: it goes there, marked as ahead of b's task
    ("a", "n2", "guaranteed cell r1/n2 (VC a 2 of 2 cells used; cell 2 of 2 slots); ahead of "
                "1 lower-priority task(s) there: HiveD would preempt them"),
]


def test_tenants_stay_in_their_vc_then_spill_opportunistically():
    driver = Driver(HiveDPolicy(TWO_RACKS, quotas=QUOTAS))
    for step, (tenant, expected, words) in enumerate(ROUTING):
        decision = driver.send(tenant)
        assert decision.node == expected, (step, decision.reason)
        assert words in decision.reason, (step, decision.reason)
        assert decision.scores[decision.node] == 0.0
        assert sorted(decision.scores.values()) == [0.0, 1.0, 2.0, 3.0]
    flags = {r.task_id: (r.tenant, r.guaranteed) for n in TWO_RACKS.node_ids
             for r in driver.policy.outstanding(n)}
    assert flags["t6"] == ("b", False) and flags["t8"] == ("b", False)
    assert flags["t9"] == ("a", True)
    assert [r.task_id for r in driver.policy.outstanding("n2")] == ["t3", "t8", "t9"]


def test_guaranteed_task_prefers_a_cell_without_opportunistic_load():
    # n4 is full of someone else's load (queue_depth 2, no records); b fills n3, then spills to
    # a's idle cells: n1 first (cluster order). a's next task then avoids n1 (b's task there)
    # for n2, though n1 comes first and packing ties at 0 of a's tasks on each.
    driver = Driver(HiveDPolicy(TWO_RACKS, quotas=QUOTAS), extra={"n4": 2})
    assert [driver.send("b").node for _ in range(3)] == ["n3", "n3", "n1"]
    assert [(r.tenant, r.guaranteed) for r in driver.policy.outstanding("n1")] == [("b", False)]
    decision = driver.send("b")
    assert decision.node == "n2" and "idle cell of VC a" in decision.reason
    # now both of a's cells carry one opportunistic task: a goes to n1 (first), marked
    decision = driver.send("a")
    assert decision.node == "n1" and "ahead of 1 lower-priority" in decision.reason
    fresh = Driver(HiveDPolicy(TWO_RACKS, quotas=QUOTAS), extra={"n4": 2})
    for _ in range(3):
        fresh.send("b")
    decision = fresh.send("a")
    assert decision.node == "n2", decision.reason  # not n1, where b's opportunistic task is
    assert decision.reason.endswith("cell 1 of 2 slots)")  # no "ahead of" mark needed


def test_finished_tasks_free_their_cells():
    driver = Driver(HiveDPolicy(TWO_RACKS, quotas=QUOTAS))
    for _ in range(4):
        driver.send("a")  # fills n1 and n2
    decision = driver.send("a")  # over quota: n4 (in no VC) before b's idle n3
    assert decision.node == "n4" and "opportunistic" in decision.reason
    driver.depth["n1"] = 0  # both tasks on n1 finished: their records are dropped
    decision = driver.send("a")
    assert decision.node == "n1" and "guaranteed cell r1/n1" in decision.reason
    assert "VC a 2 of 2 cells used; cell 1 of 2 slots" in decision.reason
    assert [r.task_id for r in driver.policy.outstanding("n1")] == ["t6"]


def test_unknown_and_default_tenants():
    # c has no quota: opportunistic on the free cell in no VC
    decision = Driver(HiveDPolicy(TWO_RACKS, quotas=QUOTAS)).send("c")
    assert decision.node == "n4"
    assert "tenant c: opportunistic cell r2/n4 (no VC: tenant c has no quota)" in decision.reason
    with pytest.raises(KeyError, match="tenant 'c'.*no quota"):
        Driver(HiveDPolicy(TWO_RACKS, quotas=QUOTAS, unknown_tenants="refuse")).send("c")
    # no quotas: the default tenant "" owns every cell (one rack here, no labels)
    flat = ClusterSpec((node("m1", None), node("m2", None)))
    decision = Driver(HiveDPolicy(flat)).send("")
    assert 'tenant "" (default): guaranteed cell default/m1 (VC "" (default) 1 of 2' \
        in decision.reason
    decision = Driver(HiveDPolicy(TWO_RACKS, quotas=QUOTAS)).send("")
    assert "opportunistic" in decision.reason and decision.node == "n4"


def test_gpu_cells_hold_their_share_of_the_node_slots():
    gpus = ClusterSpec((NodeSpec("g", 2, 8, gpus=(GpuSpec("p4", 8),) * 2, slots=4),))
    policy = HiveDPolicy(gpus, quotas={"a": 1}, cell_level="gpu")  # 4 slots / 2 cells = 2
    driver = Driver(policy)
    reasons = [driver.send("a").reason for _ in range(3)]
    assert "guaranteed cell default/g/gpu0" in reasons[0] and "cell 2 of 2 slots" in reasons[1]
    assert "opportunistic cell default/g/gpu1" in reasons[2]  # the cell in no VC
    policy = HiveDPolicy(gpus, quotas={"a": 1}, cell_level="gpu", cell_slots=5)
    assert "cell 1 of 5 slots" in Driver(policy).send("a").reason


@pytest.mark.parametrize("quotas, message", [
    ({"a": 5}, "ask for 5 node cells; this cluster has 4"),
    ({"a": 3, "b": 2}, "ask for 5"),
    ({"a": -1}, "quota of tenant 'a'"), ({"a": 1.5}, "whole number"), ({"a": True}, "whole"),
    ({1: 2}, "tenant names must be strings"), ("a=2", "mapping"),
])
def test_bad_quotas_refused(quotas, message):
    with pytest.raises(ValueError, match=message):
        HiveDPolicy(TWO_RACKS, quotas=quotas)


def test_quotas_rechecked_when_the_cluster_shrinks():
    policy = HiveDPolicy(TWO_RACKS, quotas={"a": 4})
    with pytest.raises(ValueError, match="ask for 4 node cells; this cluster has 2"):
        policy.set_cluster(ClusterSpec(TWO_RACKS.nodes[:2]))
    assert HiveDPolicy(TWO_RACKS, quotas={"a": 0, "b": 4}).vc_cells("a") == ()


@pytest.mark.parametrize("settings, message", [
    ({"cell_level": "rack"}, "cell_level"), ({"cell_slots": 0}, "cell_slots"),
    ({"cell_slots": 1.0}, "cell_slots"), ({"unknown_tenants": "drop"}, "unknown_tenants"),
])
def test_bad_settings_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        HiveDPolicy(TWO_RACKS, **settings)


def test_bad_observations_refused():
    policy = HiveDPolicy(TWO_RACKS, quotas=QUOTAS)
    states = tuple(NodeState(n) for n in TWO_RACKS.node_ids)
    with pytest.raises(ValueError, match="tenant must be a string"):
        policy.decide(Observation(Task("t", "face_recognition", 1, tenant=None), states, 0.0))
    with pytest.raises(ValueError, match="queue_depth"):
        policy.decide(Observation(Task("t", "face_recognition", 1, tenant="a"),
                                  (NodeState("n1", queue_depth=-1),), 0.0))
    decision = policy.decide(Observation(Task("t", "face_recognition", 1, tenant="a"),
                                         (NodeState("new"), NodeState("n2")), 0.0))
    assert decision.node == "n2" and "left out new (no node spec)" in decision.reason


def test_random_observations_are_deterministic_and_valid():
    rng = random.Random(5)
    one, two = (HiveDPolicy(TWO_RACKS, quotas=QUOTAS) for _ in range(2))
    for i in range(300):
        ids = list(TWO_RACKS.node_ids)
        rng.shuffle(ids)
        ids = ids[:rng.randint(1, 4)]
        obs = Observation(Task(f"t{i}", "video_synopsis", 10, tenant=rng.choice("abc")),
                          tuple(NodeState(n, queue_depth=rng.randint(0, 4)) for n in ids), 0.0)
        decision = one.decide(obs)
        assert decision == two.decide(obs)
        assert decision.node in ids and set(decision.scores) == set(ids)
        assert ("guaranteed" in decision.reason) != ("opportunistic" in decision.reason)
        if obs.task.tenant == "c":
            assert "opportunistic" in decision.reason


def test_short_simulation_finishes_and_repeats():
    from interference.schedulers import make_node_scheduler
    from simulator import Simulator
    from simulator.scenarios import paper_cluster, paper_costs, saturated_workload
    paper, spec = paper_costs(), paper_cluster()
    tasks = [dataclasses.replace(t, tenant="a" if i % 3 else "b")
             for i, t in enumerate(saturated_workload(90, seed=2))]
    results = []
    for _ in range(2):
        policy = HiveDPolicy(spec, paper, quotas={"a": 6, "b": 3})
        m = Simulator(paper).run(policy, make_node_scheduler("fcfs", paper, seed=2), spec,
                                 tasks, seed=2).metrics
        assert m.completed == len(tasks)
        results.append(m.as_dict())
    assert results[0] == results[1]


def test_docstring_examples_run():
    result = doctest.testmod(module)
    assert result.attempted >= 6 and result.failed == 0
