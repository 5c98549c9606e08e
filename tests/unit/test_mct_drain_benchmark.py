"""benchmarks/mct_drain.py: the rates it measures from a run and its paired summary."""

from __future__ import annotations

import pytest

from benchmarks import mct_drain


def test_a_short_run_measures_a_rate_per_busy_node():
    row = mct_drain.run(("MCT+HEFT", "mct", {}, 501, 40, True))
    rates = row["measured_rates"]
    assert row["throughput_per_min"] > 0
    assert rates and all(0.0 < r < 50.0 for r in rates.values())
    # the measured table is what the fixed-rate rule takes
    fixed = mct_drain.run(("fixed", "mct_drain", {"rates": rates}, 502, 40, False))
    assert fixed["throughput_per_min"] > 0 and "measured_rates" not in fixed


def rows(label, values, seeds=(1, 2, 3)):
    return [{"system": label, "seed": s, "throughput_per_min": v, "gpu_utilisation": 0.5}
            for s, v in zip(seeds, values)]


def test_summary_pairs_each_seed_with_mct_and_the_paper_baselines():
    runs = rows("MCT+HEFT", [60.0, 80.0, 100.0]) + rows("drain", [66.0, 88.0, 110.0])
    paper = [{"scenario": "paper", "rate": None, "system": b, "seed": s,
              "throughput_per_min": 50.0} for b in mct_drain.PAPER_BASELINES for s in (1, 2, 3)]
    summary = mct_drain.summarise(runs, ["MCT+HEFT", "drain"], (1, 2, 3), paper)
    drain = summary[1]
    assert drain["change_vs_mct_heft"]["per_seed"] == pytest.approx([0.1, 0.1, 0.1])
    assert drain["change_vs_mct_heft"]["ci95"] == pytest.approx([0.1, 0.1])
    assert drain["throughput_per_min"]["mean"] == pytest.approx(88.0)
    assert drain["gain_over_paper_baselines_mean"]["mean"] == pytest.approx(88.0 / 50.0 - 1)
    # without the paper baselines on those seeds there is no gain over them
    assert "gain_over_paper_baselines_mean" not in mct_drain.summarise(
        runs, ["drain"], (1, 2, 3), paper[:2])[0]


def test_the_ldwp_experiment_swaps_units_for_rates_and_nothing_else(monkeypatch):
    from benchmarks import ldwp_drain_prior
    from placement.ldwp import encoding
    from placement.ldwp.agent import LDWPPolicy, LDWPSettings
    from simulator.scenarios import paper_cluster, paper_costs
    # restored after the test: the experiment changes the class for its whole process
    monkeypatch.setattr(encoding.ObservationEncoder, "coefficients",
                        encoding.ObservationEncoder.coefficients)
    cluster = paper_cluster()
    before = LDWPPolicy(cluster, paper_costs(), LDWPSettings(seed=0)).encoder.coefficients()
    ldwp_drain_prior.use_rates_as_units({"p4x4-32g-0": 6.5})
    after = LDWPPolicy(cluster, paper_costs(), LDWPSettings(seed=0)).encoder.coefficients()
    assert after["p4x4-32g-0"] == (before["p4x4-32g-0"][0], 6.5)
    assert {n: v for n, v in after.items() if n != "p4x4-32g-0"} == \
        {n: v for n, v in before.items() if n != "p4x4-32g-0"}
