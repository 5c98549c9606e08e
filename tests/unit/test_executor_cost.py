"""benchmarks/executor_cost.py: example (b)'s operator in the executor against the plain map,
outside Flink; each variant runs what its name says."""

from __future__ import annotations

import pytest

from benchmarks.executor_cost import VARIANTS, confidence, run_variant
from benchmarks.flink_e2e_examples import records_for


@pytest.fixture(scope="module")
def reviews() -> list[str]:
    return [r.decode() for r in records_for("text_inference", 120, seed=3, prefix="t")]


def test_each_executor_variant_runs_its_stage_calls_as_named(reviews):
    rows = {v: run_variant(v, reviews) for v in VARIANTS}
    assert all(rows[v]["cpu_us_per_review"] > 0 and rows[v]["reviews_per_s"] > 0
               for v in VARIANTS)
    grouped = rows["executor"]["stage_calls"]
    assert grouped["record+tokenize"]["mean_inputs"] > 1.0      # reviews share calls
    alone = rows["executor, no call groups"]["stage_calls"]
    assert alone["record+tokenize"]["mean_inputs"] == 1.0
    assert alone["TextNet"]["mean_inputs"] > 1.0                # the model still batches
    off = rows["executor, batching off"]["stage_calls"]
    assert all(s["mean_inputs"] == 1.0 for s in off.values())
    assert "thread_cpu_us_per_review" in rows["executor"]


def test_confidence_is_a_t_interval_around_the_mean():
    got = confidence([10.0, 12.0, 14.0])
    assert got["mean"] == 12.0 and got["ci95"][0] < 12.0 < got["ci95"][1]
    assert confidence([5.0])["ci95"] == [5.0, 5.0]
