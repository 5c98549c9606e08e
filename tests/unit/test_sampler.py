"""benchmarks.sampler.PeriodicSampler: a sample at the start, in the thread, and at the end;
a bad interval refused."""

from __future__ import annotations

import time

import pytest

from benchmarks.sampler import PeriodicSampler


class Ticks(PeriodicSampler):
    def __init__(self, interval_s):
        super().__init__(interval_s, "ticks")
        self.where = []

    def sample(self):
        self.where.append("thread" if self._thread.is_alive() and self._thread.ident
                          and not self._stop.is_set() else "edge")


def test_samples_at_the_start_in_the_thread_and_at_the_end():
    with Ticks(0.01) as ticks:
        deadline = time.monotonic() + 10.0
        while ticks.where.count("thread") < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
    assert ticks.where[0] == "edge" and ticks.where[-1] == "edge"   # the block's two ends
    assert ticks.where.count("thread") >= 2 and not ticks._thread.is_alive()


@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_a_bad_interval_is_refused(bad):
    with pytest.raises(ValueError, match="sampling interval"):
        Ticks(bad)
