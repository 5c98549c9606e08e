"""benchmarks/manager_queue.py's choices and gains, on small hand-written run tables."""

from __future__ import annotations

import pytest

from benchmarks.manager_queue import (ON_ARRIVAL, QUEUED, choose_limits, mode_gains,
                                      queue_gains)


def _tuning(system, by_limit):
    return [{"system": system, "limit": w, "throughput_per_min": t}
            for w, values in by_limit.items() for t in values]


def test_each_system_gets_the_limit_with_its_best_mean_and_ties_go_to_the_smaller():
    runs = (_tuning("A", {8: [10, 12], 16: [20, 22], 32: [21, 19]})
            + _tuning("B", {8: [30, 30], 16: [30, 30], 32: [29, 29]}))
    assert choose_limits(runs, (8, 16, 32)) == {"A": 16, "B": 8}


def _run(system, mode, seed, throughput):
    return {"system": system, "mode": mode, "seed": seed, "throughput_per_min": throughput}


def test_gains_are_over_the_paper_baselines_in_the_same_mode_only():
    runs = []
    for seed in (1, 2, 3):
        for mode, base in ((ON_ARRIVAL, 10.0), (QUEUED, 20.0)):
            runs += [_run(p, mode, seed, base) for p in ("Random", "ETC", "PATS")]
        runs += [_run("LDWP", ON_ARRIVAL, seed, 13.0), _run("LDWP", QUEUED, seed, 22.0)]
    assert mode_gains(runs, "LDWP", ON_ARRIVAL)["per_seed"] == pytest.approx([0.3] * 3)
    assert mode_gains(runs, "LDWP", QUEUED)["per_seed"] == pytest.approx([0.1] * 3)
    queued = queue_gains(runs, "LDWP")
    assert queued["per_seed"] == pytest.approx([22 / 13 - 1] * 3)
    assert queued["mean"] == pytest.approx(22 / 13 - 1)


def test_a_queue_gain_pairs_runs_by_seed_and_skips_a_seed_missing_one_mode():
    runs = [_run("X", ON_ARRIVAL, 1, 10.0), _run("X", QUEUED, 1, 15.0),
            _run("X", ON_ARRIVAL, 2, 20.0), _run("X", QUEUED, 2, 22.0),
            _run("X", QUEUED, 3, 99.0)]
    assert queue_gains(runs, "X")["per_seed"] == pytest.approx([0.5, 0.1])
