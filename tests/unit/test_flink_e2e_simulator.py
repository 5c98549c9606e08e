"""benchmarks/flink_e2e.py's simulator part: the work scale that puts compute and the shaped
links in a real run's proportion, and the per-type factors the measuring rules are told."""

from __future__ import annotations

import argparse

import pytest

from benchmarks.flink_e2e import _positive_scale, simulate


@pytest.mark.parametrize("text,value", [("4", 4.0), ("0.5", 0.5), ("1000", 1000.0)])
def test_a_work_scale_in_range_is_taken(text, value):
    assert _positive_scale(text) == value


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "1e9", "four", ""])
def test_a_work_scale_out_of_range_or_no_number_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        _positive_scale(text)


@pytest.fixture(scope="module")
def scaled_pair():
    return {scale: simulate("hosts", None, 30, seeds=(0,), records="payload", work_scale=scale)
            for scale in (1.0, 4.0)}


def test_the_simulator_part_says_what_it_ran(scaled_pair):
    for scale, part in scaled_pair.items():
        assert part["work_scale"] == scale
        assert part["policies_measure_type_factors"] is True
        assert part["hidden_task_type_factors"] == (("tm_c", "video_synopsis", 3.0),)


def test_four_times_the_compute_makes_every_placement_slower(scaled_pair):
    def rates(part):
        return {s["variant"]: s["throughput_per_s"]["mean"] for s in part["summary"]}
    fast, slow = rates(scaled_pair[1.0]), rates(scaled_pair[4.0])
    assert fast.keys() == slow.keys()
    for variant in fast:
        assert slow[variant] < fast[variant], variant
