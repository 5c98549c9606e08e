"""The learner's CPU budget (placement.service.cpu_budget): past its share of one core the
training thread sleeps, windows restart so idle time is not banked, and a bad share is refused
where the service is configured."""

from __future__ import annotations

import time

import pytest

from placement.service.cpu_budget import CpuBudget
from placement.service.settings import ServiceSettings


class Clocks:
    def __init__(self):
        self.cpu, self.wall = 0.0, 100.0

    def work(self, seconds):      # busy: CPU and wall time together
        self.cpu += seconds
        self.wall += seconds

    def idle(self, seconds):
        self.wall += seconds


def budget(share, window_s=5.0):
    clocks = Clocks()
    return CpuBudget(share, window_s, lambda: clocks.cpu, lambda: clocks.wall), clocks


# (name, share, busy seconds in the window, idle seconds in it, expected pause)
PAUSE_CASES = [
    ("within the share", 0.5, 1.0, 1.0, 0.0),
    ("busy all the time at half a core: as long again", 0.5, 1.0, 0.0, 1.0),
    ("a quarter core busy for 1 s: 3 s more", 0.25, 1.0, 0.0, 3.0),
    ("idle time in the window counts", 0.25, 1.0, 2.0, 1.0),
    ("never past the window", 0.1, 2.0, 0.0, 5.0),
    ("a whole core: never", 1.0, 3.0, 0.0, 0.0),
]


@pytest.mark.parametrize("name,share,busy,idle,expected", PAUSE_CASES,
                         ids=[c[0] for c in PAUSE_CASES])
def test_the_pause_keeps_the_thread_within_its_share(name, share, busy, idle, expected):
    b, clocks = budget(share)
    assert b.pause_s() == 0.0          # the first call opens the window
    clocks.work(busy)
    clocks.idle(idle)
    assert b.pause_s() == pytest.approx(expected)


def test_an_idle_hour_banks_nothing():
    b, clocks = budget(0.25)
    b.pause_s()
    clocks.idle(3600.0)
    assert b.pause_s() == 0.0          # a new window begins here
    clocks.work(1.0)
    assert b.pause_s() == pytest.approx(3.0)
    assert b.paused_s == pytest.approx(3.0)


@pytest.mark.parametrize("share", [0, -0.5, 1.5, float("nan"), True, "half"])
def test_a_share_outside_0_1_is_refused(share):
    with pytest.raises(ValueError, match="CPU share"):
        CpuBudget(share)


@pytest.mark.parametrize("share", [0, 1.5, float("nan")])
def test_the_service_setting_is_checked(share):
    with pytest.raises(ValueError):
        ServiceSettings(learner_cpu_share=share)


def test_a_training_thread_on_a_budget_uses_about_its_share(tmp_path):
    """The learner's own thread, on real clocks: a quarter of a core over about 1.5 s of
    queued work (wide bounds: CI machines are noisy; unbounded it would use nearly all)."""
    from test_model_gate import CLUSTER, feedback
    from placement.service.learner import OnlineLearner
    from placement.service.store import ModelStore
    learner = OnlineLearner(CLUSTER, ModelStore(tmp_path), publish_every=10**9,
                            min_records_first_version=10**9, cpu_share=0.25)
    learner.take(feedback(3000))
    started = time.monotonic()
    learner.start()
    time.sleep(1.5)
    learner.stop()
    wall = time.monotonic() - started
    assert learner.loop.paused_s > 0.5
    assert learner.loop.paused_s < wall
    assert learner.records_trained > 0


def test_a_restart_opens_a_new_window_for_a_new_threads_clock():
    b, clocks = budget(0.25)
    b.pause_s()
    clocks.work(1.0)
    b.restart()                        # a new thread: its CPU clock is not the last one's
    clocks.cpu = 0.0
    assert b.pause_s() == 0.0          # the window begins again, nothing owed from before
    clocks.work(1.0)
    assert b.pause_s() == pytest.approx(3.0)
