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
    best = max(history, key=lambda h: h["throughput_per_min"])
    assert rates == best["rates"]                 # the best measured round's table


def test_the_backlog_factors_scale_what_the_wrapped_policy_sees(paper):
    from workload.model import NodeState, Observation, Task
    seen = []

    class Recorder:
        name = "recorder"

        def decide(self, observation):
            seen.append({n.node_id: n.backlog_s for n in observation.nodes})
            return None

    wrapped = tail_balance.ScaledBacklog(Recorder(), {"a": 2.0})
    wrapped.decide(Observation(Task("t", "video_synopsis", 10),
                               (NodeState("a", backlog_s=3.0), NodeState("b", backlog_s=3.0)), 0))
    assert seen == [{"a": 6.0, "b": 3.0}] and wrapped.name == "recorder_scaled_backlog"
    costs, cluster = paper
    factors, history = tail_balance.calibrate_backlog_factors(
        make_policy("mct", cluster, costs), costs, cluster, seeds=(11,), rounds=2, tasks=120)
    assert len(history) == 2 and all(math.isfinite(f) and f > 0 for f in factors.values())
