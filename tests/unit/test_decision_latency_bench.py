"""The decision-latency benchmark's helpers: the per-node growth fit and the machine's own tail
(small hand-written inputs; the benchmark itself is run by hand, not as a timed test)."""

import pytest

from benchmarks.decision_latency import growth, machine_tail


def _row(nodes, p50, p99, model="residual"):
    return {"model": model, "nodes": nodes,
            "cpu_us": {"decide": {"p50": p50, "p99": p99}}}


def test_growth_fits_the_fixed_cost_and_the_cost_per_node():
    rows = [_row(3, 13.0, 30.0), _row(11, 29.0, 60.0), _row(100, 207.0, 400.0),
            _row(11, 999.0, 999.0, model="paper")]     # another model's row is not read
    fit = growth(rows, "residual")
    assert fit["nodes"] == [3.0, 11.0, 100.0]
    assert fit["p99_us"] == [30.0, 60.0, 400.0]
    assert fit["p50_fit"]["per_node_us"] == pytest.approx(2.0)
    assert fit["p50_fit"]["fixed_us"] == pytest.approx(7.0)


def test_growth_needs_two_node_counts():
    assert growth([_row(11, 29.0, 60.0)], "residual") == {}


def test_the_machine_tail_reports_its_percentiles_and_their_ratio():
    tail = machine_tail(samples=400)
    summary = tail["fixed_work_wall_us"]
    assert 0.0 < summary["p50"] <= summary["p99"] <= summary["max"]
    assert tail["p99_over_p50"] == pytest.approx(summary["p99"] / summary["p50"])
    assert tail["p99_over_p50"] >= 1.0
