"""Dual-agent RL ordering agent (interference.schedulers.dual_agent_order): scenario rows where the
ordering rule (fixed, or learned from a fake world whose clock runs faster under one rule) decides
which stage gets the contested unit, with MCT's answer beside it; the bandit; the exact epoch
reward; refusals; a random property loop; and a short deterministic simulation."""

from __future__ import annotations

import doctest
import math
import random

import pytest

from interference.schedulers import dual_agent_order
from interference.schedulers._checks import BaseNodeScheduler, validate_assignments
from interference.schedulers.dual_agent_order import (ORDER_RULES, DualAgentOrderScheduler,
                                                      RuleBandit)
from interference.schedulers.mct_unit import MctUnitScheduler
from stage_builders import (SIZE, assign_twice, check_expected, costs,  # noqa: F401 (fixture)
                            cpu, gpu, label, random_node, simulate, st)


def mapping(out) -> dict[str, str]:
    return {label(a.stage): a.unit_id for a in out}


def teach(scheduler: DualAgentOrderScheduler, world: dict[str, float], ready, units,
          calls: int) -> float:
    """Call ``assign`` ``calls`` times; after each call the clock moves on by ``world[rule]``
    seconds (a world where that rule's stages finish, and the next call comes, that fast).
    Returns the time reached."""
    now = 0.0
    for _ in range(calls):
        scheduler.assign(ready, units, now)
        now += world[scheduler.rule]
    return now


# face_landmarks (older, 5x on a GPU) and face_encoding (newer, 20x) both want the one k80.
GPU_RACE = ([cpu(0), gpu(0)], [st("face_landmarks", "t1", 0.0), st("face_encoding", "t2", 0.1)])
# tracking (older, 2.1 s) and tube_stitching (newer, 0.76 s): CPU-only, one core.
CORE_RACE = ([cpu(0)], [st("tracking", "t1", 0.0), st("tube_stitching", "t2", 0.1)])
FAST_SPEEDUP = {"oldest": 1.0, "shortest": 1.0, "longest": 1.0, "speedup": 0.1}
FAST_SHORTEST = {"oldest": 1.0, "shortest": 0.1, "longest": 1.0, "speedup": 1.0}
LEARN = {"epoch_calls": 2, "epsilon": 0.0, "epsilon_floor": 0.0}

# (settings, fake world or None, (units, ready), {stage: (unit, keyword) or None for waiting},
#  whether MCT's assignment differs)
SCENARIOS = [
    pytest.param({}, None, GPU_RACE,
                 {"t1/face_landmarks": ("gpu:0", "rule oldest (trying each rule once); #1 of 2"),
                  "t2/face_encoding": None}, False, id="before-learning-it-is-mct"),
    pytest.param({"rules": ("speedup",)}, None, GPU_RACE,
                 {"t2/face_encoding": ("gpu:0", "rule speedup (only rule); #1 of 2"),
                  "t1/face_landmarks": None}, True, id="speedup-rule-gives-the-gpu-to-20x"),
    pytest.param({"rules": ("shortest",)}, None, CORE_RACE,
                 {"t2/tube_stitching": ("cpu:0", "rule shortest"), "t1/tracking": None}, True,
                 id="shortest-rule-takes-the-short-stage-first"),
    pytest.param({"rules": ("longest",)}, None, CORE_RACE,
                 {"t1/tracking": ("cpu:0", "rule longest"), "t2/tube_stitching": None}, False,
                 id="longest-rule-takes-the-long-stage-first"),
    pytest.param(LEARN, FAST_SPEEDUP, GPU_RACE,
                 {"t2/face_encoding": ("gpu:0", "rule speedup (best value"),
                  "t1/face_landmarks": None}, True, id="learned-speedup-first"),
    pytest.param(LEARN, FAST_SHORTEST, CORE_RACE,
                 {"t2/tube_stitching": ("cpu:0", "rule shortest (best value"),
                  "t1/tracking": None}, True, id="learned-shortest-first"),
]


@pytest.mark.parametrize("settings, world, node, expected, mct_differs", SCENARIOS)
def test_scenarios(settings, world, node, expected, mct_differs, costs):
    units, ready = node
    scheduler = DualAgentOrderScheduler(costs, seed=0, **settings)
    now = 0.0 if world is None else teach(scheduler, world, ready, units, 20)
    out = scheduler.assign(ready, units, now)
    check_expected(out, ready, units, expected)
    mct = MctUnitScheduler(costs).assign(ready, units, now)
    assert (mapping(mct) != mapping(out)) == mct_differs
    if world is not None:
        best = min(world, key=world.get)
        assert max(scheduler.bandit.values, key=scheduler.bandit.values.get) == best
        assert all(scheduler.bandit.counts[r] >= 1 for r in ORDER_RULES)


def test_epoch_reward_is_reference_work_per_second_times_corun_rate(costs):
    scheduler = DualAgentOrderScheduler(costs, rules=("oldest", "shortest"), epoch_calls=2)
    units = [cpu(0), cpu(1)]
    a, b = st("tracking", "t1"), st("tube_stitching", "t2")
    assert [x.stage for x in scheduler.assign([a], units, 0.0)] == [a]
    scheduler.observe_corun("face_detection", "face_encoding", "k80", 0.5)
    scheduler.observe_corun("face_encoding", "face_detection", "k80", 1.4)  # capped at 1
    assert [x.stage for x in scheduler.assign([b], units, 1.0)] == [b]
    scheduler.assign([], units, 4.0)  # the call after the epoch's last closes it
    work_s = (costs.cpu_ms("tracking", SIZE) + costs.cpu_ms("tube_stitching", SIZE)) / 1000
    assert scheduler.bandit.values["oldest"] == pytest.approx(work_s / 4.0 * 0.75)
    assert scheduler.rule == "shortest" and scheduler.why == "trying each rule once"


def test_bandit_tries_each_rule_then_is_greedy_and_explores_by_seed():
    def bandit(seed, epsilon=0.0):
        return RuleBandit(ORDER_RULES, random.Random(seed), epsilon=epsilon, epsilon_decay=1.0,
                          epsilon_floor=0.0, learning_rate=0.5)

    greedy = bandit(0)
    for rule, reward in zip(ORDER_RULES, (1.0, 3.0, 2.0, 3.0)):
        assert greedy.choose() == (rule, "trying each rule once")
        assert greedy.update(rule, reward)
    assert greedy.choose()[0] == "shortest"  # tie with speedup: rule order
    assert greedy.update("shortest", 1.0) and greedy.values["shortest"] == pytest.approx(2.0)
    assert greedy.choose()[0] == "speedup"
    assert not greedy.update("speedup", math.nan) and not greedy.update("random", 1.0)
    assert greedy.values["speedup"] == 3.0 and greedy.updates == 5

    def picks(seed):
        b = bandit(seed, epsilon=1.0)
        for rule in ORDER_RULES:
            b.update(rule, 1.0)
        return [b.choose() for _ in range(60)]

    first = picks(1)
    assert first == picks(1) and first != picks(2)
    assert all("explore" in why for _, why in first)
    assert {rule for rule, _ in first} == set(ORDER_RULES)


@pytest.mark.parametrize("rate", [math.nan, math.inf, -0.5, "x", None, 10**400])
def test_broken_corun_rates_are_refused(rate, costs):
    scheduler = DualAgentOrderScheduler(costs, epoch_calls=1)
    scheduler.observe_corun("face_detection", "face_encoding", "k80", rate)
    assert scheduler.refused == 1
    scheduler.assign([st("tracking")], [cpu(0)], 0.0)
    scheduler.assign([], [cpu(0)], 2.0)
    assert scheduler.bandit.values["oldest"] == pytest.approx(
        costs.cpu_ms("tracking", SIZE) / 1000 / 2.0)  # efficiency stays 1: nothing learned


def test_bad_clocks_never_learn(costs):
    scheduler = DualAgentOrderScheduler(costs, epoch_calls=1)
    units, ready = [cpu(0), gpu(0)], [st("face_detection"), st("tracking", "t2")]
    for now in (math.nan, math.inf):
        out = scheduler.assign(ready, units, now)
        validate_assignments(out, ready, units)
    assert scheduler.refused == 2 and scheduler.bandit.updates == 0
    scheduler.assign(ready, units, 5.0)
    scheduler.assign(ready, units, 1.0)  # time went back (a new run): the epoch is dropped
    scheduler.assign(ready, units, 1.0)  # no time passed since: nothing to measure yet
    assert scheduler.bandit.updates == 0 and scheduler.rule == "oldest"
    scheduler.assign(ready, units, 3.0)
    assert scheduler.bandit.updates == 1


def test_property_rules_hold_for_every_rule_and_while_learning(costs):
    rng = random.Random(7)
    learners = [DualAgentOrderScheduler(costs, seed=3, epoch_calls=3) for _ in range(2)]
    now, checked = 0.0, 0
    for _ in range(200):
        units, ready = random_node(rng, max_cpus=4, busy_share=0.3, speeds=[0.5, 1.0, 1.5])
        now += rng.uniform(0.0, 2.0)
        for rule in ORDER_RULES:
            out, fixed = assign_twice(lambda: DualAgentOrderScheduler(costs, rules=(rule,)),
                                      ready, units, now)
            assert all(f"rule {rule}" in a.reason for a in out)
            checked += len(out)
            assert sorted(map(label, fixed.order(rule, ready, units))) == sorted(map(label, ready))
        with pytest.raises(ValueError, match="unknown ordering rule"):
            learners[0].order("fifo", ready, units)
        first = learners[0].assign(ready, units, now)
        validate_assignments(first, ready, units)
        assert first == learners[1].assign(ready, units, now)  # same seed, same history
        if rng.random() < 0.2:
            for learner in learners:
                learner.observe_corun("face_detection", "gmm_background", "k80", 0.7)
    assert checked > 300 and learners[0].bandit.updates > 10
    assert learners[0].bandit.values == learners[1].bandit.values


def _simulate(seed: int, policy: str):
    run = simulate(lambda costs, _: DualAgentOrderScheduler(costs, seed=seed, epoch_calls=10),
                   seed, policy=policy)
    return run.result.metrics, run.scheduler


@pytest.mark.parametrize("policy", ["mct", "least_loaded"])
def test_short_simulation_finishes_and_is_deterministic(policy):
    first, scheduler = _simulate(11, policy)
    second, twin = _simulate(11, policy)
    assert first.completed == 120 and first.node_scheduler == "dual_agent_order"
    assert first.as_dict() == second.as_dict()
    assert scheduler.bandit.values == twin.bandit.values and scheduler.bandit.updates >= 4
    assert all(v is not None and v > 0 for v in scheduler.bandit.values.values())


@pytest.mark.parametrize("settings", [
    {"rules": ()}, {"rules": ("oldest", "oldest")}, {"rules": ("random",)}, {"epoch_calls": 0},
    {"epoch_calls": 2.5}, {"epsilon": 1.1}, {"epsilon": math.nan}, {"epsilon_decay": 0.0},
    {"epsilon_floor": -0.1}, {"learning_rate": 0.0}, {"learning_rate": 2.0},
])
def test_bad_settings_raise(settings, costs):
    with pytest.raises(ValueError):
        DualAgentOrderScheduler(costs, **settings)


def test_interface_and_docstring_example():
    assert DualAgentOrderScheduler.name == "dual_agent_order"
    assert issubclass(DualAgentOrderScheduler, BaseNodeScheduler)
    assert DualAgentOrderScheduler(rules="speedup").bandit.rules == ("speedup",)
    result = doctest.testmod(dual_agent_order)
    assert result.attempted >= 3 and result.failed == 0
