"""Measured node speeds (placement.speed): the factor the router and the learner share."""

from __future__ import annotations

import math

import pytest

from placement.speed import ObservedSpeed, timing_work_s
from workload.model import ClusterSpec, NodeSpec

CLUSTER = ClusterSpec((NodeSpec("fast", 1, 8.0), NodeSpec("slow", 1, 8.0, cpu_speed=0.5)))
APP, SIZE = "video_synopsis", 36_864


def test_the_slow_spec_doubles_the_estimate_and_unknowns_estimate_zero():
    speeds = ObservedSpeed(CLUSTER)
    fast, slow = speeds.estimate_s("fast", APP, SIZE), speeds.estimate_s("slow", APP, SIZE)
    assert fast > 0 and slow == pytest.approx(2 * fast, rel=0.1)
    assert speeds.estimate_s("elsewhere", APP, SIZE) == 0.0
    assert speeds.estimate_s("fast", "no_such_app", SIZE) == 0.0


def test_factor_stays_one_until_enough_samples_then_follows_the_ratio():
    speeds = ObservedSpeed(CLUSTER, min_samples=3)
    estimate = speeds.estimate_s("slow", APP, SIZE)
    for i in range(2):
        speeds.observe("slow", APP, SIZE, 3.0 * estimate)
        assert speeds.factor("slow") == 1.0
    speeds.observe("slow", APP, SIZE, 3.0 * estimate)
    assert speeds.factor("slow") == pytest.approx(3.0)
    assert speeds.factor("fast") == 1.0 and speeds.samples("slow") == 3


def test_the_average_moves_towards_new_samples_by_the_smoothing_weight():
    speeds = ObservedSpeed(CLUSTER, smoothing=0.25, min_samples=1)
    estimate = speeds.estimate_s("fast", APP, SIZE)
    for _ in range(4):  # the first four are averaged plainly (weight 1/n >= 0.25)
        speeds.observe("fast", APP, SIZE, 2.0 * estimate)
    speeds.observe("fast", APP, SIZE, 8.0 * estimate)
    # log ratio: log 2 + 0.25 * (log 8 - log 2)
    assert math.log(speeds.factor("fast")) == pytest.approx(math.log(2) + 0.25 * math.log(4))


def test_odd_timings_are_clipped_or_ignored():
    speeds = ObservedSpeed(CLUSTER, min_samples=1, limits=(0.1, 10.0))
    estimate = speeds.estimate_s("fast", APP, SIZE)
    speeds.observe("fast", APP, SIZE, 1e6 * estimate)
    assert speeds.factor("fast") == pytest.approx(10.0)
    speeds.observe("slow", APP, SIZE, 0.0)          # a zero timing says nothing
    speeds.observe("elsewhere", APP, SIZE, 1.0)     # nor does a node without an estimate
    assert speeds.samples("slow") == 0 and speeds.factors() == {"fast": pytest.approx(10.0),
                                                                 "slow": 1.0}


@pytest.mark.parametrize("kwargs,message", [({"smoothing": 0.0}, "smoothing"),
                                            ({"smoothing": 1.5}, "smoothing"),
                                            ({"min_samples": 0}, "min_samples")])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ObservedSpeed(CLUSTER, **kwargs)


@pytest.mark.parametrize("timing,expected", [
    ({"service_ms": 400.0, "work_ms": 50.0}, 0.05),   # waited 350 ms for units others held
    ({"service_ms": 400.0, "work_ms": -1.0}, 0.4),    # not reported (an older executor)
    ({"service_ms": 400.0}, 0.4),                     # a record from before work_ms existed
])
def test_work_time_is_the_stages_run_time_when_reported(timing, expected):
    assert timing_work_s(timing) == pytest.approx(expected)


def test_reported_slowness_with_learned_costs_compares_the_nodes_not_the_calibration():
    from placement.measured_costs import MeasuredCosts
    three = ClusterSpec((NodeSpec("a", 1, 8.0), NodeSpec("b", 1, 8.0), NodeSpec("c", 1, 8.0)))
    speeds = ObservedSpeed(three, MeasuredCosts(three, min_samples=2, speed_refresh_samples=1))
    assert speeds.reported_factors() == {"a": 1.0, "b": 1.0, "c": 1.0}  # nothing learned yet
    for size in (1000, 2000, 3000, 4000):
        speeds.observe("a", "my_op", size, 0.001 * size)
        speeds.observe("b", "my_op", size, 0.003 * size)      # 3x a's time
    # c never ran a shared type: nothing to compare, 1.0; a and b against each other only
    assert speeds.reported_factor("b") == pytest.approx(3.0, rel=0.05)
    assert speeds.reported_factor("a") == pytest.approx(1 / 3, rel=0.05)
    assert speeds.reported_factor("c") == 1.0
    # the factor the models use stays 1: the learned estimates hold the speeds
    assert speeds.factors() == {"a": 1.0, "b": 1.0, "c": 1.0}


def test_reported_slowness_against_the_calibration_is_the_factor():
    speeds = ObservedSpeed(CLUSTER, min_samples=1)
    speeds.observe("slow", APP, SIZE, 2.0 * speeds.estimate_s("slow", APP, SIZE))
    assert speeds.reported_factor("slow") == speeds.factor("slow") == pytest.approx(2.0)
