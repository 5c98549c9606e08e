"""benchmarks/finish_balance.py: makespan, each node's last finish and the balanced makespan of
a run, from hand-written spans; only measured tasks count; runs are named by the plan."""

import pytest

from benchmarks.finish_balance import _variant, balance, run_spans
from benchmarks.flink_e2e import VARIANTS, run_plan


def test_a_split_that_ends_together_has_no_headroom():
    # a: 4 tasks ending at 2 s (2/s), b: 2 tasks ending at 2 s (1/s): already balanced
    row = balance({"a": [(0, 500), (0, 1000), (0, 1500), (0, 2000)], "b": [(0, 1000), (0, 2000)]})
    assert row["makespan_s"] == 2.0 and row["balanced_makespan_s"] == pytest.approx(2.0)
    assert row["headroom"] == pytest.approx(0.0)


def test_an_overloaded_node_shows_the_time_a_better_split_would_save():
    # a: 6 tasks ending at 6 s (1/s), b: 1 task ending at 1 s (1/s): 7 tasks at 2/s = 3.5 s
    row = balance({"a": [(0, 1000 * (i + 1)) for i in range(6)], "b": [(0, 1000)]})
    assert row["nodes"]["a"] == {"tasks": 6, "last_finish_s": 6.0}
    assert row["balanced_makespan_s"] == pytest.approx(3.5)
    assert row["headroom"] == pytest.approx(1 - 3.5 / 6.0)


def test_only_measured_tasks_with_usable_numbers_count():
    timing = {"queue_ms": 100.0, "service_ms": 400.0, "finished_at_ms": 1500}
    records = [{"node_id": "a", "completed": [
        {**timing, "task_id": "b1-4-run-0"}, {**timing, "task_id": "b1-4-warm-0"},
        {**timing, "task_id": "b1-4-run-1", "queue_ms": "x"}, "junk"]}]
    assert run_spans(records) == {"b1-4": {"a": [(1000.0, 1500.0)]}}


def test_runs_are_named_by_their_place_in_the_plan():
    names = {f"-{i}": v[0] for i, (_, v) in enumerate(run_plan(0, 2))}
    names["train"] = "training"
    assert _variant("b17-0", names) == VARIANTS[0][0]
    assert _variant("b17-9", names) == VARIANTS[1][0]   # round 1 starts rotated by one
    assert _variant("train17", names) == "training" and _variant("b17-99", names) is None
