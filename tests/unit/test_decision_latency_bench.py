"""The decision-latency benchmark's helpers: the per-node growth fit and the machine's own tail
(small hand-written inputs; the benchmark itself is run by hand, not as a timed test)."""

import pytest

from benchmarks.decision_latency import (growth, interruption_reading, machine_interruptions,
                                         machine_tail)


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


def test_the_interruption_probe_counts_gaps_over_its_threshold():
    probe = machine_interruptions(seconds=0.05, gap_us=15.0)
    assert probe["seconds"] >= 0.05
    assert probe["gap_threshold_us"] == 15.0
    assert probe["per_second"] >= 0.0
    if probe["median_us"] is not None:     # any gap it counted is above the threshold
        assert probe["median_us"] > 15.0 and probe["p90_us"] >= probe["median_us"]
    assert 0.0 <= probe["share_of_time"] < 1.0


@pytest.mark.parametrize("rate, p50, reaches, below", [
    (400.0, 30.0, True, 25.0),     # 1.2% of 30 us calls hit: p99 is the machine's
    (400.0, 20.0, False, 25.0),    # 0.8%: p99 can be the code's own
    (100.0, 30.0, False, 100.0),
    (0.0, 30.0, False, None),      # no interruption seen: no threshold to give
])
def test_the_interruption_reading_says_when_hits_reach_p99(rate, p50, reaches, below):
    probe = {"per_second": rate, "median_us": 40.0}
    reading = interruption_reading(p50, 70.0, probe)
    assert reading["expected_hit_share"] == pytest.approx(rate * p50 / 1e6)
    assert reading["hits_reach_p99"] is reaches
    assert reading["p50_plus_median_interruption_us"] == pytest.approx(p50 + 40.0)
    assert reading["p99_us"] == 70.0
    if below is None:
        assert "p50_below_which_hits_stay_under_1pct_us" not in reading
    else:
        assert reading["p50_below_which_hits_stay_under_1pct_us"] == pytest.approx(below)
