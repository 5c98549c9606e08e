"""MCT at measured drain rates: the meter's scenario table (what one interval teaches, what it
must not), the policy against MCT before any evidence, and hostile observations."""

from __future__ import annotations

import math
import random

import pytest

from placement.policies import MeasuredDrainMCTPolicy, MinimumCompletionTimePolicy, make_policy
from placement.policies.mct_drain import (MAX_RATE_SHARE, MIN_RATE_SHARE, PRIOR_S,
                                          DrainRateMeter)
from workload.estimates import CostModel
from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task

UNITS = 4.0


def meter_after(before: float, sent: float, after: float, span: float = 10.0) -> DrainRateMeter:
    meter = DrainRateMeter({"n": UNITS})
    meter.observe(100.0, {"n": before})
    meter.sent("n", sent)
    meter.observe(100.0 + span, {"n": after})
    return meter


def shrunk(drained: float, busy: float) -> float:
    return (drained + PRIOR_S * UNITS) / (busy + PRIOR_S)


# (name, backlog before, sent, backlog after, interval s, expected rate)
METER_SCENARIOS = [
    ("cleared 30 s of work in 10 s", 40.0, 0.0, 10.0, 10.0, shrunk(30.0, 10.0)),
    ("cleared what it was sent and more", 40.0, 20.0, 50.0, 10.0, shrunk(10.0, 10.0)),
    ("cleared nothing while busy", 40.0, 0.0, 40.0, 10.0, shrunk(0.0, 10.0)),
    ("idle at the start: no lesson", 0.0, 5.0, 3.0, 10.0, UNITS),
    ("emptied by the end: no lesson", 40.0, 0.0, 0.0, 10.0, UNITS),
    ("grew by more than was sent: no lesson", 10.0, 1.0, 30.0, 10.0, UNITS),
    ("interval too long: no lesson", 40.0, 0.0, 10.0, 600.0, UNITS),
    ("clock went back: no lesson", 40.0, 0.0, 10.0, -5.0, UNITS),
    ("NaN backlog: no lesson", math.nan, 0.0, 10.0, 10.0, UNITS),
    ("infinite backlog: no lesson", 40.0, 0.0, math.inf, 10.0, UNITS),
    ("huge drop: capped", 1e6, 0.0, 1.0, 1.0, MAX_RATE_SHARE * UNITS),
    ("implausible backlog: no lesson", 1e12, 0.0, 1.0, 1.0, UNITS),
]


@pytest.mark.parametrize("name,before,sent,after,span,expected", METER_SCENARIOS,
                         ids=[s[0] for s in METER_SCENARIOS])
def test_meter_scenarios(name, before, sent, after, span, expected):
    assert meter_after(before, sent, after, span).rate("n") == pytest.approx(expected)


def test_rate_never_below_its_floor():
    meter = DrainRateMeter({"n": UNITS}, prior_s=0.001)
    for step in range(50):          # busy for 50 intervals, never clearing anything
        meter.observe(float(step), {"n": 100.0})
    assert meter.rate("n") == pytest.approx(MIN_RATE_SHARE * UNITS)


def test_older_intervals_fade():
    meter = DrainRateMeter({"n": UNITS}, prior_s=1.0, half_life_s=20.0)
    backlog, now = 1000.0, 0.0
    for _ in range(30):             # 300 s clearing 1 s of work a second
        meter.observe(now, {"n": backlog})
        now, backlog = now + 10.0, backlog - 10.0
    slow = meter.rate("n")
    for _ in range(30):             # then 300 s clearing 8 a second
        meter.observe(now, {"n": backlog})
        now, backlog = now + 10.0, backlog + 100.0 - 80.0
        meter.sent("n", 100.0)
    assert slow == pytest.approx(1.0, abs=0.2)
    assert meter.rate("n") == pytest.approx(8.0, abs=0.5)


def test_meter_refuses_bad_settings():
    for prior, half in ((0.0, 10.0), (math.nan, 10.0), (10.0, 0.0), (10.0, -1.0)):
        with pytest.raises(ValueError):
            DrainRateMeter({"n": 1.0}, prior_s=prior, half_life_s=half)
    DrainRateMeter({"n": 1.0}, half_life_s=math.inf)   # never forget: allowed


def test_meter_ignores_unknown_nodes_and_bad_sends():
    meter = DrainRateMeter({"n": UNITS})
    meter.observe(0.0, {"n": 10.0, "stranger": 5.0})
    for work in (math.nan, -3.0, math.inf):
        meter.sent("n", work)
    meter.sent("stranger", 2.0)
    meter.observe(10.0, {"n": 10.0, "stranger": 1.0})
    assert meter.rate("n") == pytest.approx(shrunk(0.0, 10.0))
    assert meter.rate("stranger") == 1.0 * 1.0   # not a node of the meter: its default units


CLUSTER = ClusterSpec((NodeSpec("two_gpu", 6, 16, gpus=(GpuSpec("p4", 8.0),) * 2),
                       NodeSpec("four_gpu", 6, 32, gpus=(GpuSpec("p4", 8.0),) * 4),
                       NodeSpec("cpu", 8, 32)))
APPS = ("video_synopsis", "face_recognition", "intrusion_detection")


def random_observations(count: int, seed: int):
    rng = random.Random(seed)
    for i in range(count):
        yield Observation(Task(f"t{i}", rng.choice(APPS), rng.randrange(100_000, 3_000_000)),
                          tuple(NodeState(n.node_id, queue_depth=rng.randrange(5),
                                          backlog_s=rng.random() * 50.0)
                                for n in CLUSTER.nodes), float(i))


def test_decides_as_mct_before_any_evidence():
    costs = CostModel()
    # prior_s so large that no interval moves a rate: every decision is MCT's
    drain = MeasuredDrainMCTPolicy(CLUSTER, costs, prior_s=1e12)
    mct = MinimumCompletionTimePolicy(CLUSTER, costs)
    for obs in random_observations(200, seed=3):
        assert drain.decide(obs).node == mct.decide(obs).node


def test_a_node_seen_draining_slowly_gets_less():
    costs = CostModel()
    twins = ClusterSpec((NodeSpec("a", 4, 16), NodeSpec("b", 4, 16)))
    policy = MeasuredDrainMCTPolicy(twins, costs, prior_s=1.0)
    task = Task("t", "face_recognition", 1_000_000)
    # a clears 4 s of work a second, b 1: the policy watches for 60 s
    backlog = {"a": 100.0, "b": 100.0}
    for step in range(7):
        policy.meter.observe(step * 10.0, dict(backlog))
        backlog = {"a": backlog["a"] - 40.0 + 40.0, "b": backlog["b"] - 10.0 + 10.0}
        policy.meter.sent("a", 40.0)
        policy.meter.sent("b", 10.0)
    assert policy.meter.rate("a") > 3.0 * policy.meter.rate("b")
    # b holds a third of a's backlog: MCT (equal units) picks b, the measured rates pick a
    # (seen long after the last interval: this observation itself teaches nothing)
    obs = Observation(task, (NodeState("a", backlog_s=60.0), NodeState("b", backlog_s=20.0)),
                      1000.0)
    assert MinimumCompletionTimePolicy(twins, costs).decide(obs).node == "b"
    decision = policy.decide(obs)
    assert decision.node == "a"
    assert "drains" in decision.reason


def test_known_rates_are_used_and_validated():
    costs = CostModel()
    twins = ClusterSpec((NodeSpec("a", 4, 16), NodeSpec("b", 4, 16)))
    task = Task("t", "face_recognition", 1_000_000)
    obs = Observation(task, (NodeState("a", backlog_s=60.0), NodeState("b", backlog_s=20.0)),
                      0.0)
    assert MeasuredDrainMCTPolicy(twins, costs, rates={"a": 8.0, "b": 1.0}).decide(obs).node \
        == "a"
    for bad in ({"a": 0.0}, {"a": -1.0}, {"a": math.nan}, {"a": math.inf}, {"a": "8"}):
        with pytest.raises(ValueError, match="finite and positive"):
            MeasuredDrainMCTPolicy(twins, costs, rates=bad)


def test_known_rates_skip_the_meter_and_a_partial_table_measures_the_rest():
    costs = CostModel()
    trio = ClusterSpec((NodeSpec("a", 4, 16), NodeSpec("b", 4, 16), NodeSpec("c", 4, 16)))
    task = Task("t", "face_recognition", 1_000_000)

    def observe(policy, backlogs, now):
        states = tuple(NodeState(n, backlog_s=b) for n, b in backlogs.items())
        return policy.decide(Observation(task, states, now))

    full = MeasuredDrainMCTPolicy(trio, costs, rates={"a": 8.0, "b": 1.0, "c": 2.0})
    for second in range(5):
        observe(full, {"a": 30.0, "b": 20.0, "c": 25.0}, float(second))
    assert full.meter._last_time is None and not full.meter._sent   # never asked
    # only c unknown: its rate is measured (the known two are never counted as sent)
    partial = MeasuredDrainMCTPolicy(trio, costs, prior_s=1.0, rates={"a": 8.0, "b": 1.0})
    for second in range(40):
        observe(partial, {"a": 30.0, "b": 20.0, "c": 100.0 - 2.0 * second}, float(second))
    # c's backlog fell 2 s a second (plus what was sent there): measured well below the
    # prior of its 4 units; a and b are never counted as sent
    assert 1.5 < partial.meter.rate("c") < 3.5
    assert set(partial.meter._sent) <= {"c"}


def test_hostile_backlogs_change_no_rate():
    costs = CostModel()
    policy = make_policy("mct_drain", CLUSTER, costs)
    hostile = (math.nan, math.inf, -math.inf, -1e300, 1e308)
    for i, value in enumerate(hostile * 3):
        states = tuple(NodeState(n.node_id, backlog_s=value) for n in CLUSTER.nodes)
        decision = policy.decide(Observation(Task(f"h{i}", "video_synopsis", 500_000), states,
                                             float(i)))
        assert decision.node in CLUSTER.node_ids
    units = {n.node_id: n.cpu_cores + len(n.gpus) for n in CLUSTER.nodes}
    assert {n: policy.meter.rate(n) for n in units} == pytest.approx(units)


def test_the_flink_router_runs_it_on_measured_costs():
    """The router's rule by name, on its learned work times (MeasuredCosts): a node that
    reports its completions slowly is seen draining slowly and gets less."""
    from pyflink_jobs.router import Router, RouterNode, RouterSettings
    clock = [1000.0]
    router = Router(RouterSettings(nodes=[RouterNode("fast", cpu_cores=2),
                                          RouterNode("slow", cpu_cores=2)],
                                   policy="mct_drain", executor_capacity=10_000),
                    clock=lambda: clock[0])
    router.fixed_policy.meter.prior_s = 1.0      # let a short run move the rates
    inflight = {"fast": [], "slow": []}
    counts = {"fast": 0, "slow": 0}
    for i in range(1200):
        clock[0] += 0.005          # two tasks per 10 ms: more than both nodes finish
        decision, _ = router.route_event({"task_id": f"t{i}", "app_id": "face_recognition",
                                          "input_size": 100_000})
        inflight[decision.node].append(f"t{i}")
        counts[decision.node] += 1
        if i % 2:
            continue
        # "fast" finishes a task every 10 ms, "slow" one every 40 ms
        for node, every in (("fast", 1), ("slow", 4)):
            if (i // 2) % every == 0 and inflight[node]:
                task_id = inflight[node].pop(0)
                router.on_feedback({"node_id": node, "emitted_at_ms": int(clock[0] * 1000),
                                    "completed": [{"task_id": task_id,
                                                   "app_id": "face_recognition",
                                                   "input_size": 100_000, "queue_ms": 1.0,
                                                   "service_ms": 20.0,
                                                   "finished_at_ms": int(clock[0] * 1000)}]})
    meter = router.fixed_policy.meter
    assert meter.rate("fast") > 2.0 * meter.rate("slow")
    assert counts["fast"] > 2 * counts["slow"]
