"""SLO metrics: Jain's index, deadline misses at the boundary, per-tenant numbers, real runs.

Every expected number is computed by hand in the test from the scenario's own numbers.
"""

from __future__ import annotations

import json
import math

import pytest

from simulator import SimulationConfig, Simulator
from simulator.engine import EventRecord
from simulator.slo import DEADLINE_TOLERANCE_S, jain_index, slo_report, task_outcomes
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import Assignment, ClusterSpec, Decision, NodeScheduler, NodeSpec, Policy, Task


def done(task_id, time):
    return EventRecord(time, "complete", task_id, node="n")


def task(task_id, arrival, tenant="", deadline=None):
    return Task(task_id, "video_synopsis", 1000, arrival, tenant=tenant, deadline_s=deadline)


# -- Jain's index -------------------------------------------------------------------------------

JAIN = [  # values -> (sum x)^2 / (n sum x^2), by hand
    ([1.0, 1.0, 1.0, 1.0], 16 / (4 * 4)),        # equal shares: 1
    ([0.5, 0.5], 1.0 / (2 * 0.5)),               # equal, not 1 each: still 1
    ([5.0, 0.0, 0.0, 0.0], 25 / (4 * 25)),       # one tenant gets everything: 1/n
    ([2.0, 0.0], 4 / (2 * 4)),                   # 1/2
    ([1.0, 3.0], 16 / (2 * 10)),                 # 0.8
    ([7.0], 1.0),                                # one tenant is always fair
]


@pytest.mark.parametrize("values, expected", JAIN)
def test_jain_index_by_hand(values, expected):
    assert jain_index(values) == pytest.approx(expected, rel=1e-12)


def test_jain_index_is_undefined_when_nobody_got_anything_and_refuses_bad_input():
    assert math.isnan(jain_index([0.0, 0.0]))
    for bad in ([], [math.nan], [math.inf], [-1.0], [True], ["1"]):
        with pytest.raises(ValueError):
            jain_index(bad)


# -- deadlines at the boundary ------------------------------------------------------------------

BOUNDARY = [  # (arrival, deadline, completion or None, missed), latency = completion - arrival
    (1.0, 2.0, 3.0, False),                      # latency == deadline: met (documented)
    (1.0, 2.0, 2.5, False),                      # early
    (1.0, 2.0, 3.0 + 1e-6, True),                # a microsecond late: missed
    (1.0, 2.0, 3.0 + DEADLINE_TOLERANCE_S / 2, False),  # within the log's 1 ns resolution
    (1.0, 2.0, None, True),                      # never completed: missed
    (1.0, None, 9.0, None),                      # no deadline: neither met nor missed
    (1.0, None, None, None),
]


@pytest.mark.parametrize("arrival, deadline, completion, missed", BOUNDARY)
def test_deadline_miss_at_and_around_the_boundary(arrival, deadline, completion, missed):
    events = [] if completion is None else [done("t", completion)]
    [outcome] = task_outcomes(events, [task("t", arrival, deadline=deadline)])
    assert outcome.missed is missed
    assert outcome.latency_s == (None if completion is None else completion - arrival)


def test_miss_rate_counts_only_tasks_with_deadlines_and_never_completed_ones_as_missed():
    tasks = [task("met", 0.0, "a", 4.0), task("late", 0.0, "a", 4.0),
             task("lost", 0.0, "b", 4.0), task("free", 0.0, "b")]
    events = [done("met", 4.0), done("late", 5.0), done("free", 8.0)]
    alone = {"met": 2.0, "late": 2.0, "lost": 2.0, "free": 4.0}
    report = slo_report(events, tasks, alone)
    assert (report.with_deadline, report.missed) == (3, 2)
    assert report.miss_rate == pytest.approx(2 / 3)
    a, b = report.per_tenant["a"], report.per_tenant["b"]
    assert (a.missed, a.miss_rate, b.missed, b.miss_rate) == (1, 0.5, 1, 1.0)
    # slowdowns: met 4/2, late 5/2 (tenant a); free 8/4 (tenant b); lost has none
    assert a.mean_slowdown == pytest.approx((2.0 + 2.5) / 2)
    assert b.mean_slowdown == pytest.approx(2.0)
    assert report.mean_slowdown == pytest.approx((2.0 + 2.5 + 2.0) / 3)


# -- tenants, throughput and fairness -----------------------------------------------------------

def test_without_tenants_one_tenant_and_perfect_fairness():
    tasks = [task("t0", 0.0), task("t1", 10.0), task("t2", 20.0)]
    report = slo_report([done("t0", 5.0), done("t1", 15.0), done("t2", 30.0)], tasks,
                        {"t0": 1.0, "t1": 1.0, "t2": 1.0})
    assert list(report.per_tenant) == [""]
    assert report.jain_fairness == 1.0
    assert math.isnan(report.miss_rate) and report.with_deadline == 0
    assert report.span_s == 30.0
    assert report.per_tenant[""].throughput_per_min == pytest.approx(3 * 60 / 30.0)
    # latencies 5, 5, 10 over alone 1 each
    assert report.mean_slowdown == pytest.approx((5 + 5 + 10) / 3)


FAIRNESS = [  # completed ids (tenant a submits a0-a2, b submits b0) -> Jain's index by hand
    # every tenant got its proportion: x = (3/4)/(3/4), (1/4)/(1/4) = 1, 1
    (["a0", "a1", "a2", "b0"], 1.0),
    # b got nothing: x_a = 1/(3/4) = 4/3, x_b = 0 -> (4/3)^2 / (2 (4/3)^2) = 1/2 = 1/n
    (["a0", "a1", "a2"], 0.5),
    # a got 2 of 3, b 1 of 1: x_a = (2/3)/(3/4) = 8/9, x_b = (1/3)/(1/4) = 4/3
    #   J = (20/9)^2 / (2 (64/81 + 144/81)) = (400/81) / (416/81) = 25/26
    (["a0", "a1", "b0"], 25 / 26),
    # only b completes: x_a = 0, x_b = 1/(1/4) = 4 -> 1/2
    (["b0"], 0.5),
]


@pytest.mark.parametrize("completed, expected", FAIRNESS)
def test_jain_over_throughput_share_per_demand_share(completed, expected):
    tasks = [task("a0", 0.0, "a"), task("a1", 0.0, "a"), task("a2", 0.0, "a"),
             task("b0", 0.0, "b")]
    events = [done(tid, 10.0 * (i + 1)) for i, tid in enumerate(completed)]
    report = slo_report(events, tasks, {t.task_id: 1.0 for t in tasks})
    assert report.jain_fairness == pytest.approx(expected, rel=1e-12)
    assert report.per_tenant["a"].demand_share == 0.75
    span = 10.0 * len(completed)  # first arrival 0 -> last completion
    assert report.span_s == span
    a_done = sum(tid.startswith("a") for tid in completed)
    assert report.per_tenant["a"].throughput_per_min == pytest.approx(60.0 * a_done / span)
    assert report.per_tenant["b"].throughput_per_min == pytest.approx(
        60.0 * (len(completed) - a_done) / span)


def test_a_horizon_counts_only_completions_up_to_it():
    # a0, a1 complete by 10 s; a2 and b0 only at 30 s: within a 10 s horizon a got 2 of the
    # 2 completions, b none -> x_a = 1/(3/4) = 4/3, x_b = 0 -> J = 1/2; b0's deadline of 20 s
    # is missed (it completes after the horizon), a2 (no deadline) is simply not completed.
    tasks = [task("a0", 0.0, "a"), task("a1", 0.0, "a"), task("a2", 0.0, "a"),
             task("b0", 0.0, "b", 20.0)]
    events = [done("a0", 5.0), done("a1", 10.0), done("a2", 30.0), done("b0", 30.0)]
    alone = {t.task_id: 1.0 for t in tasks}
    whole = slo_report(events, tasks, alone)
    cut = slo_report(events, tasks, alone, horizon_s=10.0)
    assert (whole.jain_fairness, whole.missed, whole.completed) == (1.0, 1, 4)
    assert cut.jain_fairness == pytest.approx(0.5)
    assert (cut.completed, cut.missed, cut.span_s, cut.horizon_s) == (2, 1, 10.0, 10.0)
    assert cut.per_tenant["a"].throughput_per_min == pytest.approx(2 * 60 / 10.0)
    for bad in (math.nan, math.inf, True, "10"):
        with pytest.raises(ValueError, match="horizon_s"):
            slo_report(events, tasks, alone, horizon_s=bad)


SLOWDOWN_FAIRNESS = [  # (a's latencies, b's latencies), alone 1 s each -> Jain over 1/mean
    ((2.0, 2.0), (2.0,), 1.0),                         # slowed down alike
    ((1.0, 3.0), (4.0,), (0.5 + 0.25) ** 2 / (2 * (0.25 + 0.0625))),  # means 2, 4 -> 0.9
    ((2.0,), (), 0.5),                                  # b got nothing: x_b = 0 -> 1/n
]


@pytest.mark.parametrize("a_latencies, b_latencies, expected", SLOWDOWN_FAIRNESS)
def test_slowdown_fairness_by_hand(a_latencies, b_latencies, expected):
    tasks = [task(f"a{i}", 0.0, "a") for i in range(len(a_latencies))] + [task("b0", 0.0, "b")]
    events = [done(f"a{i}", lat) for i, lat in enumerate(a_latencies)]
    events += [done(f"b{i}", lat) for i, lat in enumerate(b_latencies)]
    report = slo_report(events, tasks, {t.task_id: 1.0 for t in tasks})
    assert report.slowdown_fairness == pytest.approx(expected, rel=1e-12)


def test_nothing_completed_leaves_fairness_undefined_and_every_deadline_missed():
    tasks = [task("a0", 0.0, "a", 1.0), task("b0", 0.0, "b", 1.0)]
    report = slo_report([], tasks, {"a0": 1.0, "b0": 1.0})
    assert math.isnan(report.jain_fairness) and math.isnan(report.slowdown_fairness)
    assert (report.missed, report.miss_rate, report.span_s) == (2, 1.0, 0.0)
    assert report.per_tenant["a"].throughput_per_min == 0.0


# -- a task list that does not fit the log is refused -------------------------------------------

@pytest.mark.parametrize("tasks, events, alone, match", [
    ([task("t", 0.0)], [done("ghost", 1.0)], None, "not in the task list"),
    ([task("t", 0.0)], [done("t", 1.0), done("t", 2.0)], None, "twice"),
    ([task("t", 5.0)], [done("t", 1.0)], None, "before its arrival"),
    ([task("t", 0.0)], [done("t", math.nan)], None, "no finite time"),
    ([task("t", 0.0), task("t", 1.0)], [], None, "appears twice"),
    ([task("t", math.nan)], [], None, "arrival_s"),
    ([task("t", 0.0, deadline=math.nan)], [], None, "deadline_s"),
    ([task("t", 0.0, deadline=-1.0)], [], None, "deadline_s"),
    ([task("t", 0.0, tenant="a b")], [], None, "tenant"),
    ([task("t", 0.0)], [], {}, "no alone time"),
    ([task("t", 0.0)], [], {"t": 0.0}, "alone time"),
    ([task("t", 0.0)], [], {"t": math.inf}, "alone time"),
    (["not a task"], [], None, "Task objects"),
])
def test_inconsistent_inputs_raise_clear_errors(tasks, events, alone, match):
    with pytest.raises(ValueError, match=match):
        task_outcomes(events, tasks, alone)


# -- real tiny simulator runs -------------------------------------------------------------------

class FirstNode(Policy):
    name = "first"

    def decide(self, observation):
        return Decision(observation.node_ids[0], "always the first node")


class FirstFit(NodeScheduler):
    name = "first-fit"

    def assign(self, ready, units, now_s):
        room = {u.unit_id: u.capacity - len(u.running) for u in units}
        out = []
        for stage in ready:
            for unit in units:
                if room[unit.unit_id] > 0:
                    room[unit.unit_id] -= 1
                    out.append(Assignment(stage, unit.unit_id, "first fit"))
                    break
        return out


@pytest.fixture(scope="module")
def costs():
    return CostModel(colocation=None)


def _alone_on_one_core_s(costs, size):
    """By hand, as test_simulator's exact log: 1 MB/s down, the chain on one core, 2% up."""
    compute = sum(costs.cpu_ms(s.name, size) for s in APPLICATIONS["face_recognition"].stages)
    return size / 1e6 + compute / 1000.0 + size * 0.02 / 1e6


def test_a_real_run_on_one_core_boundary_met_tight_deadline_missed(costs):
    size = 1_000_000
    latency = _alone_on_one_core_s(costs, size)
    # t1 alone, deadline exactly its latency (met); t2 long after, deadline 10 ms short (missed)
    tasks = [Task("t1", "face_recognition", size, 0.0, tenant="a", deadline_s=latency),
             Task("t2", "face_recognition", size, 1000.0, tenant="b", deadline_s=latency - 0.01)]
    node = NodeSpec("solo", cpu_cores=1, host_memory_gb=8, downlink_mbps=8, uplink_mbps=8)
    sim = Simulator(costs, SimulationConfig(service_noise_sigma=0.0))
    result = sim.run(FirstNode(), FirstFit(), ClusterSpec((node,)), tasks, seed=0)
    report = slo_report(result, tasks, {"t1": latency, "t2": latency})
    by_id = {o.task_id: o for o in report.outcomes}
    assert by_id["t1"].latency_s == pytest.approx(latency, abs=1e-6)
    assert (by_id["t1"].missed, by_id["t2"].missed) == (False, True)
    assert (report.missed, report.miss_rate, report.jain_fairness) == (1, 0.5, 1.0)
    span = 1000.0 + latency
    assert report.span_s == pytest.approx(span, abs=1e-6)
    assert report.per_tenant["b"].throughput_per_min == pytest.approx(60.0 / span, rel=1e-9)
    assert report.mean_slowdown == pytest.approx(1.0, abs=1e-6)
    as_json = json.loads(json.dumps(report.as_dict()))
    assert as_json["per_tenant"]["a"]["missed"] == 0 and len(as_json["outcomes"]) == 2
    assert "outcomes" not in report.as_dict(include_tasks=False)


def test_default_alone_time_is_the_reference_node_estimate(costs):
    size = 1_000_000
    tasks = [Task("t1", "face_recognition", size, 0.0)]
    node = NodeSpec("solo", cpu_cores=1, host_memory_gb=8, downlink_mbps=8, uplink_mbps=8)
    sim = Simulator(costs, SimulationConfig(service_noise_sigma=0.0))
    result = sim.run(FirstNode(), FirstFit(), ClusterSpec((node,)), tasks, seed=0)
    reference_ms = 0.0  # by hand: best of a core and the reference K80 per stage, 1 Gbit/s in
    for stage in APPLICATIONS["face_recognition"].stages:
        gpu = costs.gpu_ms(stage.name, size, "k80")
        reference_ms += min(costs.cpu_ms(stage.name, size), gpu if gpu is not None else math.inf)
    reference_s = reference_ms / 1000.0 + size / (1000e6 / 8)
    report = slo_report(result, tasks, costs=costs)
    assert report.mean_slowdown == pytest.approx(_alone_on_one_core_s(costs, size) / reference_s,
                                                 rel=1e-6)


def test_a_run_without_an_event_log_is_refused(costs):
    tasks = [Task("t1", "face_recognition", 1000, 0.0)]
    node = NodeSpec("solo", cpu_cores=1, host_memory_gb=8)
    sim = Simulator(costs, SimulationConfig(service_noise_sigma=0.0, record_events=False))
    result = sim.run(FirstNode(), FirstFit(), ClusterSpec((node,)), tasks, seed=0)
    with pytest.raises(ValueError, match="record_events"):
        slo_report(result, tasks, {"t1": 1.0})
