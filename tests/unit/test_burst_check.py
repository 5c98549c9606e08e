"""The burst check (placement.service.burst_check): measured drain rates, a router-like burst
split, and the verdict on recorded model versions (one whose correction drains slower than its
prior is refused, one that drains faster passes), plus the learner refusing such a version."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.replay_decisions import read_feedback
from placement.ldwp.modelfile import load_model
from placement.measured_costs import COST_SMOOTHING, MeasuredCosts
from placement.service.burst_check import BurstCheck, DrainRates, burst_split, drain_s
from placement.service.learner import to_cluster_spec
from placement.speed import timing_sample
from workload.cluster_spec import load_cluster_spec
from workload.model import ClusterSpec
from workload.feedback import node_state_from_feedback
from workload.model import NodeState, Task

RUN = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "replay" / \
    "hosts_2026-12-03"


# Scenario table: the [decided, finished] spans (ms) of one node's tasks -> its rate (tasks/s):
# in each busy period (spans that overlap), the finishes after its first over the time from its
# first to its last finish; None when no period has two finishes at different times.
RATE_CASES = [
    ("one task says nothing", [(0, 500)], None),
    ("a lead of 10 s is left out", [(0, 10_000), (0, 10_500), (0, 11_000)], 2 / 1.0),
    ("back to back is one period", [(0, 1000), (1000, 2000)], 1.0),
    ("two periods: their paced times add", [(0, 1000), (0, 1500), (60_000, 61_000),
                                            (60_000, 62_000)], 2 / 1.5),
    ("idle between periods is not work", [(0, 1000), (500, 2000), (90_000, 91_000),
                                          (90_500, 92_000)], 2 / 2.0),
    ("in any order", [(0, 2000), (500, 1000), (0, 1500)], 2 / 1.0),
    ("finishing together: no time to measure", [(0, 1000), (0, 1000)], None),
]


@pytest.mark.parametrize("name,spans,rate", RATE_CASES, ids=[c[0] for c in RATE_CASES])
def test_drain_rates(name, spans, rate):
    rates = DrainRates()
    for decided, finished in spans:
        assert rates.add_task("a", decided, finished)
    assert rates.rates().get("a") == (pytest.approx(rate) if rate is not None else None)


def test_a_host_whose_executor_idles_behind_a_thin_link_drains_at_the_links_pace():
    """A burst of 20 records sent at once crosses the link one every 0.5 s and each runs in
    10 ms: the executor has work 2% of the time (its reports rarely show any, so the rule
    before had almost no gap to measure, or ~100 tasks/s), the node finishes 2 a second."""
    rates = DrainRates()
    for i in range(20):
        rates.add_task("tm_a", 0, 500 * (i + 1) + 10)
    assert rates.rates()["tm_a"] == pytest.approx(19 / 9.5)


def test_recorded_feedback_gives_spans_from_the_routers_decision():
    """``add`` reads a report's usable timings (the service's rule,
    ``workload.feedback.timing_latency``): span = finished - (queue + service)."""
    rates = DrainRates()
    record = {"node_id": "a", "completed": [
        {"task_id": "t1", "finished_at_ms": 2000, "queue_ms": 1500.0, "service_ms": 500.0},
        {"task_id": "t2", "finished_at_ms": 3000, "queue_ms": 1000.0, "service_ms": 1000.0},
        {"task_id": "t3", "finished_at_ms": "x", "queue_ms": 0.0, "service_ms": 1.0},  # broken
        {"task_id": "t4", "finished_at_ms": 2500, "queue_ms": -5.0, "service_ms": 1.0},  # < 0
        {"queue_ms": 0.0}]}
    assert rates.add(record) == 2   # spans [0, 2000] and [1000, 3000]: one busy period
    assert rates.rates()["a"] == pytest.approx(1 / 1.0)


@pytest.mark.parametrize("node,decided,finished", [
    (5, 0, 1), (None, 0, 1), ("a", float("nan"), 1), ("a", 0, float("inf")), ("a", True, 5),
    ("a", "0", 5), ("a", 10, 5), ("a", 0, 3_600_001)])
def test_drain_rates_refuse_hostile_spans(node, decided, finished):
    rates = DrainRates()
    assert not rates.add_task(node, decided, finished)
    assert rates.rates() == {}


def test_drain_rates_stay_bounded():
    rates = DrainRates(window=3, max_nodes=2)
    for i in range(10):
        rates.add_task(f"n{i}", 0, 1000)
        rates.add_task(f"n{i}", 0, 2000)
    assert set(rates.rates()) == {"n0", "n1"}
    for i in range(100):   # only the newest 3 spans of a node count
        rates.add_task("n0", 0, 1000 * i)
    assert rates.rates()["n0"] == pytest.approx(2 / 2.0)


class ByEstimate:
    """MCT in miniature: the node whose backlog plus this task's estimate is smallest."""

    def __init__(self, costs):
        self.costs = costs

    def decide(self, observation):
        task = observation.task

        def completion(state):
            return state.backlog_s + self.costs.estimate_s(state.node_id, task.app_id,
                                                           task.input_size, explore=False)
        from workload.model import Decision
        return Decision(min(observation.nodes, key=completion).node_id, "test")


def test_a_burst_split_counts_each_decisions_work_against_its_node():
    costs = MeasuredCosts(None, min_samples=1)
    for node, seconds in (("fast", 0.01), ("slow", 0.03)):
        costs.observe(node, "op", 100, seconds)
    split = burst_split(ByEstimate(costs), [NodeState("fast"), NodeState("slow")], costs,
                        [Task(f"t{i}", "op", 100) for i in range(40)])
    assert split == {"fast": 30, "slow": 10}
    assert drain_s(split, {"fast": 100.0, "slow": 20.0}) == pytest.approx(0.5)


@pytest.mark.parametrize("capacity", [2, 5, 1000])
def test_a_burst_split_with_capacity_is_the_routers_own_split(capacity):
    """The check's simulation and a real Router (MCT, same measured costs) agree task for
    task, whether the nodes fill up (small capacity) or never do."""
    from pyflink_jobs.hook import nodes_from_cluster_spec
    from pyflink_jobs.router import Router, RouterSettings
    nodes = nodes_from_cluster_spec("hosts")
    router = Router(RouterSettings(nodes=nodes, policy="mct", executor_capacity=capacity),
                    clock=lambda: 100.0)
    for node, seconds in (("tm_a", 0.01), ("tm_b", 0.02), ("tm_c", 0.05)):
        for size in (80, 100, 120):
            router.costs.observe(node, "op", size, seconds * size / 100)
    tasks = [Task(f"t{i}", "op", 80 + (i * 7) % 41) for i in range(300)]
    states = list(router.observation(tasks[0]).nodes)
    share = {n.node_id: RouterSettings(nodes=nodes, executor_capacity=capacity).capacity_share(n)
             for n in nodes}
    split = burst_split(router.policy, states, router.costs, tasks, share)
    for task in tasks:
        router.route(task)
    assert split == dict(router.routed)
    assert (router.full_skips > 0) is (capacity < 100)


def _recorded_busy_states(cluster, count: int = 4) -> list[tuple[NodeState, ...]]:
    """Node states the recorded run's routers saw while a node was busy (its CPU over 30%):
    the nodes' newest reports after each report, the last 200 such snapshots, ``count`` of
    the busy ones evenly spread."""
    newest, snapshots = {}, []
    for record in read_feedback(RUN / "feedback.jsonl.gz"):
        newest[record["node_id"]] = record
        if len(newest) == len(cluster.nodes):
            snapshots.append(tuple(node_state_from_feedback(newest[n.node_id], n.uplink_mbps,
                                                            n.downlink_mbps)
                                   for n in cluster.nodes))
    busy = [s for s in snapshots[-200:] if max(n.cpu_util for n in s) > 0.3]
    return [busy[k * len(busy) // count] for k in range(count)]


def test_a_version_that_wins_on_idle_states_and_loses_on_busy_ones_is_refused(recorded_run):
    """Version 8 drains the burst faster than its prior with the newest (idle) states, but
    routers decide bursts while the nodes report load: judged over the states the recent tasks
    were decided in it is slower (its correction moves work off the loaded node that the
    prior's own backlog already accounts for), so it is refused; snapshots=0 keeps the
    newest-states verdict."""
    cluster, costs, rates, tasks, states = recorded_run
    busy = _recorded_busy_states(cluster)
    layers, metadata = load_model(RUN / "models" / "v000008.spmodel")
    verdicts = {}
    for snapshots in (0, 4):
        check = BurstCheck(snapshots=snapshots)
        for i, task in enumerate(tasks):
            check.observe_task(task, busy[i * len(busy) // len(tasks)])
        verdicts[snapshots] = check.check(layers, metadata, cluster, costs, states, rates)
    assert verdicts[0].ok and verdicts[0].trained_drain_s < verdicts[0].prior_drain_s
    assert not verdicts[4].ok and "over 5 node states" in verdicts[4].reason
    assert verdicts[4].trained_drain_s > verdicts[0].trained_drain_s


def test_recorded_states_missing_a_node_are_not_judged_on(recorded_run):
    cluster, costs, rates, tasks, states = recorded_run
    check = BurstCheck(snapshots=4)
    for task in tasks:
        check.observe_task(task, tuple(states[:2]))    # the third node never reported
    layers, metadata = load_model(RUN / "models" / "v000008.spmodel")
    verdict = check.check(layers, metadata, cluster, costs, states, rates)
    assert verdict.ok and "over 1 node state)" in verdict.reason


def _recorded(smoothing: float):
    """What a service had after one quick round set on the emulated hosts: costs learned from
    every timing, drain rates, the newest 2,000 tasks, each node's newest reported state."""
    cluster = to_cluster_spec(load_cluster_spec("hosts"))
    costs = MeasuredCosts(cluster, smoothing=smoothing)
    rates, tasks, newest = DrainRates(), [], {}
    for record in read_feedback(RUN / "feedback.jsonl.gz"):
        newest[record["node_id"]] = record
        for timing in record.get("completed") or ():
            sample = timing_sample(timing)
            if sample is not None:
                costs.observe(record["node_id"], *sample)
                tasks.append(Task(timing["task_id"], sample[0], sample[1]))
        rates.add(record)
    states = [node_state_from_feedback(newest[n.node_id], n.uplink_mbps, n.downlink_mbps)
              for n in cluster.nodes]
    return cluster, costs, rates.rates(), tasks[-2000:], states


@pytest.fixture(scope="module")
def recorded_run():
    """The recorded run as its service saw it: work-time fits with the smoothing of the time
    (0.05, about the last 20 tasks)."""
    return _recorded(0.05)


def test_with_todays_steadier_costs_the_prior_drains_faster_and_version_8_is_refused():
    """The same run with MeasuredCosts' default smoothing (COST_SMOOTHING, about the last 200
    tasks): the prior alone splits the burst better than before, better than version 8, which
    was trained on the noisier costs (benchmarks/cost_smoothing.py)."""
    cluster, costs, rates, tasks, states = _recorded(COST_SMOOTHING)
    check = BurstCheck()
    for task in tasks:
        check.observe_task(task)
    layers, metadata = load_model(RUN / "models" / "v000008.spmodel")
    verdict = check.check(layers, metadata, cluster, costs, states, rates)
    old = _recorded(0.05)
    before = BurstCheck()
    for task in old[3]:
        before.observe_task(task)
    then = before.check(layers, metadata, old[0], old[1], old[4], old[2])
    assert verdict.prior_drain_s < then.prior_drain_s
    assert not verdict.ok and verdict.trained_drain_s > verdict.prior_drain_s


@pytest.mark.parametrize("version,ok", [(8, True), (24, False)])
def test_recorded_versions_pass_or_fail_by_their_burst_against_their_prior(recorded_run,
                                                                           version, ok):
    cluster, costs, rates, tasks, states = recorded_run
    check = BurstCheck()
    for task in tasks:
        check.observe_task(task)
    layers, metadata = load_model(RUN / "models" / f"v{version:06d}.spmodel")
    verdict = check.check(layers, metadata, cluster, costs, states, rates)
    assert verdict.ok is ok
    assert verdict.trained_drain_s is not None and verdict.prior_drain_s is not None
    assert (verdict.trained_drain_s <= verdict.prior_drain_s) is ok
    if not ok:
        assert "its prior's" in verdict.reason


def test_too_little_to_judge_is_held_and_says_so(recorded_run):
    cluster, costs, rates, tasks, states = recorded_run
    layers, metadata = load_model(RUN / "models" / "v000024.spmodel")
    check = BurstCheck(burst=2000, min_tasks=1000)
    for task in tasks[:500]:
        check.observe_task(task)
    verdict = check.check(layers, metadata, cluster, costs, states, rates)
    assert verdict.ok and verdict.held and verdict.reason.startswith("held: 500 recent tasks")
    for task in tasks:
        check.observe_task(task)
    no_rates = check.check(layers, metadata, cluster, costs, states, {})
    assert no_rates.held and "no measured drain rate" in no_rates.reason
    judged = check.check(layers, metadata, cluster, costs, states, rates)
    assert not judged.held and judged.trained_drain_s is not None
    one_node = ClusterSpec(tuple(n for n in cluster.nodes if n.node_id == "tm_a"))
    alone = check.check(layers, metadata, one_node, costs, states, rates)
    assert alone.ok and not alone.held and alone.reason.startswith("not judged")


def test_bad_settings_are_refused():
    for kwargs in ({"burst": 0}, {"min_tasks": 0}, {"tolerance": -0.1},
                   {"tolerance": float("nan")}, {"capacity_per_node": 0},
                   {"capacity_per_node": True}, {"capacity_per_node": 2.5},
                   {"snapshots": -1}, {"snapshots": 1.5}, {"snapshots": None}):
        with pytest.raises(ValueError):
            BurstCheck(**kwargs)


class Verdicts:
    """A burst check that answers from a script (what the learner does with a verdict)."""

    def __init__(self, *verdicts):
        from placement.service.burst_check import BurstVerdict
        self.verdicts = [BurstVerdict(ok, reason, 1.0, 2.0, reason.startswith("held"))
                         for ok, reason in verdicts]
        self.tasks = 0

    def observe_task(self, task, states=None):
        assert states is not None and all(hasattr(s, "cpu_util") for s in states)
        self.tasks += 1

    def check(self, layers, metadata, cluster, costs, states, rates):
        return self.verdicts.pop(0)


def test_the_learner_refuses_a_version_that_fails_the_burst_check(tmp_path):
    from test_model_gate import CLUSTER, feedback
    from placement.service.learner import OnlineLearner
    from placement.service.store import ModelStore
    check = Verdicts((True, "burst drains in 1 s (prior 2 s)"),
                     (False, "its decisions drain slower than its prior's"))
    learner = OnlineLearner(CLUSTER, ModelStore(tmp_path), min_records_first_version=150,
                            publish_every=150, burst_check=check, publish_prior=False)
    learner.take(feedback(330))
    learner.train_pending()
    assert check.tasks == 330 and check.verdicts == []
    versions = learner.store.versions()
    assert len(versions) == 1 and versions[0]["burst_check"].startswith("burst drains")
    assert versions[0]["burst_drain_s"] == 1.0 and versions[0]["prior_burst_drain_s"] == 2.0
    assert learner.models_rejected == 1 and "slower than its prior" in learner.last_error


def test_a_version_the_check_cannot_judge_yet_is_held_not_published_nor_rolled_back(tmp_path):
    """Versions published unjudged lost to their prior in the closed loop (burst_check's
    docstring): held, the routers keep the prior and the learner trains on."""
    from test_model_gate import CLUSTER, feedback
    from placement.service.learner import OnlineLearner
    from placement.service.store import ModelStore
    check = Verdicts((True, "held: 150 recent tasks (judged from 1000), 1 node states"),
                     (True, "burst drains in 1 s (prior 2 s)"))
    learner = OnlineLearner(CLUSTER, ModelStore(tmp_path), min_records_first_version=150,
                            publish_every=150, burst_check=check, publish_prior=False)
    learner.take(feedback(330))
    learner.train_pending()
    assert check.verdicts == []
    versions = learner.store.versions()
    assert len(versions) == 1 and versions[0]["trained_on_records"] == 300
    assert learner.versions_held == 1 and learner.models_rejected == 0
    assert learner.agent.updates > 0 and len(learner.agent.replay.items) >= 300


def test_refusals_in_a_row_space_the_next_checks_out_and_a_publish_resets_them(tmp_path):
    """A check splits a 2,000-task burst ten times (seconds of CPU): a learner whose versions
    keep failing it waits publish_every times 2, 4, then 8 before the next one."""
    from test_model_gate import CLUSTER, feedback
    from placement.service.learner import OnlineLearner
    from placement.service.store import ModelStore
    check = Verdicts(*[(False, "its decisions drain slower than its prior's")] * 3,
                     (True, "burst drains in 1 s (prior 2 s)"),
                     (False, "its decisions drain slower than its prior's"))
    learner = OnlineLearner(CLUSTER, ModelStore(tmp_path), min_records_first_version=100,
                            publish_every=100, burst_check=check, publish_prior=False,
                            trial=None)
    checked_at = []
    original = check.check

    def counted(*args):
        checked_at.append(learner.records_trained)
        return original(*args)

    check.check = counted
    learner.take(feedback(1600))
    learner.train_pending()
    # refused at 100, 300 (+200), 700 (+400); published at 1,500 (+800, the cap); then +100
    assert checked_at == [100, 300, 700, 1500]
    assert learner.models_rejected == 3 and len(learner.store.versions()) == 1
    learner.take(feedback(150, seed=9, prefix="w"))   # (some are held back by the gate)
    learner.train_pending()
    assert checked_at == [100, 300, 700, 1500, 1600]   # published: publish_every again
