"""benchmarks/tail_balance.py's bookkeeping: node ends from an event log, the even-ending
figure, and the drain-rate calibration on a short run (the benchmark itself is not a test)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from benchmarks import tail_balance
from benchmarks.ldwp import _setup
from placement.policies import make_policy
from simulator.events import EventRecord


def test_a_nodes_end_is_its_last_event_and_events_without_a_node_are_skipped():
    events = [EventRecord(1.0, "decide", "t1"), EventRecord(2.0, "start", "t1", node="a"),
              EventRecord(9.0, "finish", "t1", node="a"), EventRecord(4.0, "finish", "t2",
                                                                      node="b")]
    assert tail_balance.node_ends(SimpleNamespace(events=events)) == {"a": 9.0, "b": 4.0}


@pytest.fixture(scope="module")
def paper():
    return _setup()


def test_the_even_ending_figure_is_at_least_the_throughput(paper):
    costs, cluster = paper
    row = tail_balance.run_row("MCT", make_policy("mct", cluster, costs), costs, cluster, 501,
                               tasks=120)
    assert row["completed"] == 120 and row["last_end_s"] >= row["mean_end_s"]
    assert row["even_ending_per_min"] >= row["throughput_per_min"] > 0
    assert sum(row["node_tasks"].values()) == 120


def test_the_calibration_moves_every_rate_and_keeps_them_finite(paper):
    costs, cluster = paper
    rates, history = tail_balance.calibrate_drain_rates(costs, cluster, seeds=(11,), rounds=2,
                                                        tasks=120)
    assert len(history) == 2 and set(rates) == set(cluster.node_ids)
    assert all(math.isfinite(r) and r > 0 for r in rates.values())
    assert rates != history[0]["rates"]          # the first round's ends moved them
