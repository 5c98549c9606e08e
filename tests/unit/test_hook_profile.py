"""The hook's per-record Python profile (benchmarks/hook_profile.py) runs without a broker."""

from __future__ import annotations

import math


def test_the_profile_times_every_part_without_kafka():
    from benchmarks.hook_profile import measure
    row = measure(50)
    parts = ("router_us", "pickle_us", "unpickle_us", "executor_us", "plain_us")
    assert all(math.isfinite(row[p]) and row[p] > 0 for p in parts), row
    assert row["streamplace_us"] == sum(row[p] for p in parts[:4])
    assert row["routed_record_bytes"] > 0


def test_the_colocated_router_keeps_and_runs_every_light_record_itself():
    from benchmarks.hook_profile import measure
    row = measure(50)
    assert math.isfinite(row["colocated_us"]) and row["colocated_us"] > 0
    assert row["colocated_kept_share"] == 1.0  # a trusted light type: never asks the policy
