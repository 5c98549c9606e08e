"""benchmarks/zoo.py: its system table, the comparison's own checks, and the README table."""

from __future__ import annotations

import math

import pytest

from benchmarks.zoo import (RELATED, SYSTEMS, compass, readme_table, router_latency, run_one,
                            summarise)


def test_every_system_names_a_registered_policy_and_scheduler():
    from interference.schedulers import NODE_SCHEDULERS
    from placement.policies import POLICIES
    for label, policy, scheduler, family in SYSTEMS:
        assert policy in POLICIES or policy in {"oracle", "ldwp"}, label
        assert scheduler in NODE_SCHEDULERS, label
        assert family in {"baseline", "related", "ours", "oracle"}
    labels = [s[0] for s in SYSTEMS]
    assert len(labels) == len(set(labels))
    # the ten related systems, each by its own module (Dual-agent and the interference-aware
    # parallelisation decide at both levels)
    assert len(RELATED) == 10


def run(system, seed, throughput, bound=100.0, rate=None):
    return {"scenario": "paper", "rate": rate, "system": system, "seed": seed,
            "throughput_per_min": throughput, "latency_p99_s": 10.0, "gpu_utilisation": 0.5,
            "useful_gpu_work_per_gpu_second": 1.0, "oom_failures": 0,
            "upper_bound_per_min": bound}


def test_the_compass_flags_a_run_above_the_bound_and_a_repeat_that_differs():
    runs = [run("A", 1, 50.0), run("B", 1, 120.0)]
    checks = compass(runs, [run("A", 1, 50.0), run("B", 1, 119.0)])
    assert len(checks["above_upper_bound"]) == 1 and "B" in checks["above_upper_bound"][0]
    assert checks["not_deterministic"] == ["B seed 1"]
    assert compass([run("A", 1, 100.5)], [run("A", 1, 100.5)]) == {
        "above_upper_bound": [], "repeated_runs": 1, "not_deterministic": []}


def test_the_readme_table_bolds_the_best_real_system_per_setting():
    label_a, label_oracle = SYSTEMS[0][0], next(s[0] for s in SYSTEMS if s[3] == "oracle")
    rows = summarise([run(label_a, 1, 40.0), run(label_a, 2, 44.0),
                      run(label_oracle, 1, 90.0), run(label_oracle, 2, 90.0)])
    table = readme_table(rows, [("paper saturated", "paper", None)])
    line = next(row for row in table.splitlines() if row.startswith(f"| {label_a} |"))
    assert line.startswith(f"| {label_a} | **42.0 [")  # the oracle is not a system one can run
    assert f"| {label_oracle} | 90.0 [90.0, 90.0] |" in table


def test_one_related_system_runs_deterministically_on_the_paper_cluster():
    job = ("paper", None, "Vapor", "mct", "vapor", 3, 40, "unused")
    first, second = run_one(job), run_one(job)
    assert first["throughput_per_min"] > 0
    assert first["throughput_per_min"] <= first["upper_bound_per_min"]
    assert {k: v for k, v in first.items() if k != "wall_s"} == \
        {k: v for k, v in second.items() if k != "wall_s"}


@pytest.mark.parametrize("policy", ["mct", "liquid", "dual_agent"])
def test_router_latency_is_measured_through_the_router(policy):
    row = router_latency(policy, decisions=300, nodes=4)
    assert row["decisions"] == 300 and 0 < row["p50_us"] <= row["p99_us"]
    assert math.isfinite(row["p99_us"])
