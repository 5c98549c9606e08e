"""The benchmark plumbing (not the numbers): one run works end to end, intervals are right."""

from __future__ import annotations

import pytest

from benchmarks.baselines import PAIRS, confidence_interval, run_one, summarise


def test_one_baseline_run_end_to_end():
    row = run_one(("paper", 50, "Random", "random", "fcfs", 1001, 15))
    assert row["pair"] == "Random" and row["throughput_per_min"] > 0
    assert row["throughput_per_min"] <= row["upper_bound_per_min"] + 1e-9


def test_every_pair_names_a_registered_policy_and_scheduler():
    from interference.schedulers import NODE_SCHEDULERS
    from placement.policies import POLICIES
    for label, policy, scheduler in PAIRS:
        assert policy in POLICIES or policy == "oracle", label
        assert scheduler in NODE_SCHEDULERS, label


def test_confidence_interval_matches_student_t():
    mean, low, high = confidence_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    # t(0.975, 4) = 2.776; stdev = 1.5811; half = 2.776 * 1.5811 / sqrt(5) = 1.963
    assert mean == 3.0 and low == pytest.approx(1.037, abs=1e-3)
    assert high == pytest.approx(4.963, abs=1e-3)


def test_summary_groups_by_scenario_rate_and_pair():
    runs = [{"scenario": "paper", "rate": 50, "pair": "A", "seed": s, **{
        m: float(s) for m in ("throughput_per_min", "gpu_utilisation", "latency_p99_s",
                              "latency_p50_s", "mean_wait_s", "load_balancing_degree",
                              "useful_gpu_work_per_gpu_second", "cpu_utilisation",
                              "oom_failures", "upper_bound_per_min")}} for s in (1, 2, 3)]
    rows = summarise(runs)
    assert len(rows) == 1 and rows[0]["seeds"] == 3
    assert rows[0]["throughput_per_min"]["mean"] == 2.0


def test_the_e2e_read_stops_when_its_job_ends():
    """A job that failed (no slots, a lost TaskManager) makes the result read stop within a
    poll, not after its whole timeout."""
    import threading
    import time

    from benchmarks.flink_e2e import _stop_when_job_ends

    class Cluster:
        def __init__(self):
            self.states = iter(["RUNNING", "RUNNING", "FAILED"])

        def job(self, job_id):
            return {"state": next(self.states, "FAILED")}

    stop = threading.Event()
    started = time.monotonic()
    _stop_when_job_ends(Cluster(), "job-1", stop, poll_s=0.01)
    assert stop.wait(5.0) and time.monotonic() - started < 5.0
    quiet = threading.Event()
    thread = _stop_when_job_ends(type("Up", (), {"job": lambda self, j: {"state": "RUNNING"}})(),
                                 "job-2", quiet, poll_s=0.01)
    assert not quiet.wait(0.1)
    quiet.set()
    thread.join(1.0)
    assert not thread.is_alive()
