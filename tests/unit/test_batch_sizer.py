"""Batch sizes from measured latency: the largest preferred size meeting the target on
hand-written latency tables, growth from small, the limits, and the affine fit."""

from __future__ import annotations

import doctest

import pytest

from interference.executor import batch_sizer as batch_sizer_module
from interference.executor.batch_sizer import BatchSizer, LatencyTable
from workload.operators import BatchPolicy

SIZES = (1, 2, 4, 8, 16, 32)


def affine(a: float, b: float):
    return lambda n: a + b * n


def sizer_with(table: dict[int, float], target: float | None, sizes=SIZES,
               max_batch_size: int = 0, samples: int = 3) -> BatchSizer:
    """A sizer for stage "s" on "cpu" that measured ``table`` (size -> ms), ``samples`` each."""
    policy = BatchPolicy(sizes, max_batch_size, 1000, target)
    sizer = BatchSizer({"s": policy}, min_samples=3)
    for n, ms in table.items():
        for _ in range(samples):
            sizer.observe("s", "cpu", n, ms)
    return sizer


def test_the_largest_size_meeting_the_target_on_a_measured_table():
    latency = affine(2.0, 0.5)  # 16 -> 10 ms, 32 -> 18 ms
    sizer = sizer_with({n: latency(n) for n in SIZES}, target=10.0)
    assert sizer.choose("s", "cpu") == 16
    assert sizer_with({n: latency(n) for n in SIZES}, target=9.99).choose("s", "cpu") == 8
    assert sizer_with({n: latency(n) for n in SIZES}, target=100.0).choose("s", "cpu") == 32


def test_a_non_monotone_table_still_takes_the_largest_size_that_meets_the_target():
    table = {1: 3.0, 2: 12.0, 4: 5.0, 8: 9.0, 16: 30.0, 32: 60.0}  # 2 was measured when busy
    assert sizer_with(table, target=10.0).choose("s", "cpu") == 8


def test_nothing_meets_the_target_gives_the_smallest_size():
    assert sizer_with({n: 50.0 + n for n in SIZES}, target=10.0).choose("s", "cpu") == 1


def test_it_starts_small_and_grows_one_step_at_a_time_as_measurements_come_in():
    latency = affine(1.0, 0.25)  # 16 -> 5 ms meets 6 ms; 32 -> 9 ms does not
    sizer = sizer_with({}, target=6.0)
    chosen = []
    for _ in range(30):
        size = sizer.choose("s", "cpu")
        chosen.append(size)
        sizer.observe("s", "cpu", size, latency(size))
    assert chosen[0] == 1
    assert all(b in (a, 2 * a) for a, b in zip(chosen, chosen[1:])), chosen  # one step at a time
    assert sorted(set(chosen)) == [1, 2, 4, 8, 16] and chosen[-1] == 16


def test_unmeasured_sizes_are_predicted_by_the_fit_but_only_one_step_ahead():
    # 1 and 2 measured (a = 2, b = 1): 4 -> 6 ms is predicted, 8 -> 10 ms is two steps away
    sizer = sizer_with({1: 3.0, 2: 4.0}, target=10.0)
    assert sizer.choose("s", "cpu") == 4


def test_rising_latency_shrinks_the_choice():
    sizer = sizer_with({n: affine(1.0, 0.25)(n) for n in SIZES}, target=6.0)
    assert sizer.choose("s", "cpu") == 16
    for _ in range(40):  # the node got busy: 16 now takes 12 ms
        sizer.observe("s", "cpu", 16, 12.0)
    assert sizer.choose("s", "cpu") == 8


def test_limits_no_target_batching_off_and_kinds_are_separate():
    sizer = sizer_with({}, target=None, sizes=(1, 4, 12), max_batch_size=16)
    assert sizer.choose("s", "cpu") == 12  # no target: the largest preferred size
    fast = sizer_with({n: 0.001 for n in (1, 2, 4)}, target=100.0, sizes=(1, 2, 4))
    assert fast.choose("s", "cpu") == 4  # never above the largest preferred / max size
    assert BatchSizer({"s": BatchPolicy.up_to(8)}, batching=False).choose("s", "cpu") == 1
    assert BatchSizer({"s": BatchPolicy()}).choose("s", "cpu") == 1
    measured_on_gpu = sizer_with({n: 1.0 for n in SIZES}, target=5.0)
    assert measured_on_gpu.choose("s", "gpu") == 1  # a kind starts on its own


def test_the_report_counts_batches_inputs_and_percentiles():
    sizer = BatchSizer({"s": BatchPolicy.up_to(8)})
    for n, ms in ((2, 1.0), (4, 2.0), (8, 3.0), (8, 4.0), (2, 5.0)):
        sizer.observe("s", "cpu", n, ms)
    row = sizer.report()["s"]["cpu"]
    assert row["batches"] == 5 and row["mean_inputs"] == pytest.approx(24 / 5)
    assert row["batch_size"] == 8
    assert row["p50_ms"] == pytest.approx(3.0) and row["p99_ms"] == pytest.approx(4.96)


def test_the_latency_table_fits_affine_latency():
    table = LatencyTable(min_samples=1)
    assert table.fit("k") is None and table.estimate("k", 4) is None
    table.add("k", 4, 8.0)
    assert table.fit("k") == (0.0, 2.0)  # one size: proportional
    for n in (1, 2, 8):
        table.add("k", n, 3.0 + 0.5 * n)
    a, b = table.fit("k")
    assert a > 0 and b > 0 and table.estimate("k", 8) == pytest.approx(7.0)
    falling = LatencyTable(min_samples=1)
    falling.add("k", 1, 5.0)
    falling.add("k", 8, 3.0)
    assert falling.fit("k") == (4.0, 0.0)  # larger measured faster: flat, not negative
    window = LatencyTable(window=2, min_samples=1)
    for ms in (10.0, 10.0, 10.0, 2.0):
        window.add("k", 1, ms)
    assert window.estimate("k", 1) == pytest.approx(6.0)  # the recent samples weigh most


def test_docstring_examples():
    assert doctest.testmod(batch_sizer_module, optionflags=doctest.ELLIPSIS).failed == 0
