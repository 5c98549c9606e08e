"""The router's decision timing: phases from hand-written timestamps, the ring's bounds, and a
router that fills every phase."""

import pytest

from pyflink_jobs.decision_timing import PHASES, DecisionTimer, LatencyRing
from pyflink_jobs.router import Router, RouterNode, RouterSettings
from workload.model import Task


def test_phases_are_the_gaps_between_consecutive_timestamps():
    timer = DecisionTimer(size=10)
    timer.add(1.0, (1.000002, 1.000005, 1.000045, 1.000050), cpu_s=20e-6)
    got = {name: round(timer.percentile_us(name, 50), 3) for name in (*PHASES, "total", "cpu")}
    assert got == {"lock": 2.0, "observation": 3.0, "policy": 40.0, "bookkeeping": 5.0,
                   "total": 50.0, "cpu": 20.0}


def test_unsampled_cpu_time_adds_no_sample():
    timer = DecisionTimer(size=10)
    timer.add(0.0, (1e-6, 2e-6, 3e-6, 4e-6))
    assert len(timer.rings["cpu"]) == 0 and len(timer.rings["total"]) == 1
    assert timer.percentile_us("cpu", 99) == 0.0


def test_cpu_time_is_sampled_every_nth_decision():
    timer = DecisionTimer(cpu_every=4)
    assert [timer.samples_cpu() for _ in range(8)] == [False, False, False, True] * 2


def test_the_ring_keeps_the_newest_samples():
    ring = LatencyRing(3)
    for micros in (100.0, 1.0, 2.0, 3.0):
        ring.add(micros)
    assert sorted(ring.samples) == [1.0, 2.0, 3.0]
    assert ring.percentile(99) == 3.0 and ring.percentile(0) == 1.0


@pytest.mark.parametrize("size", [0, -1, True, 2.5])
def test_a_ring_refuses_a_size_that_is_not_a_positive_int(size):
    with pytest.raises(ValueError, match="size"):
        LatencyRing(size)


def test_a_router_times_every_phase_of_its_decisions():
    router = Router(RouterSettings(nodes=[RouterNode("a"), RouterNode("b")],
                                   policy="least_outstanding"))
    for i in range(16):
        router.decide(Task(f"t{i}", "my_op", 100))
    summary = router.stats()["decision_timing_us"]
    assert set(summary) == {*PHASES, "total", "cpu"}
    assert len(router.timing.rings["total"]) == 16 and len(router.timing.rings["cpu"]) == 2
    # the phases partition the decision: their sum is the total of the same decision
    for i in range(16):
        parts = sum(router.timing.rings[name].samples[i] for name in PHASES)
        assert parts == pytest.approx(router.timing.rings["total"].samples[i], abs=1e-6)
    assert router.latency_percentile_us(99) == summary["total"]["p99"] > 0.0


def test_a_rings_percentiles_follow_every_new_sample_though_its_order_is_kept():
    from pyflink_jobs.decision_timing import LatencyRing
    ring = LatencyRing(size=4)
    for micros in (5.0, 1.0, 3.0):
        ring.add(micros)
    assert (ring.percentile(0), ring.percentile(50), ring.percentile(99)) == (1.0, 3.0, 5.0)
    ring.add(0.5)          # the order kept for the gauges is not stale
    assert ring.percentile(0) == 0.5
    ring.add(9.0)          # full: replaces the oldest (5.0)
    assert sorted(ring.samples) == [0.5, 1.0, 3.0, 9.0] and ring.percentile(99) == 9.0
