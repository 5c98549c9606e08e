"""The control: the same paced run with no fault, so each scenario's gap and recovery can be
read against what the pipeline does by itself (checkpoints under its own backlog)."""

from __future__ import annotations

import time

from fault_harness import run_with_fault, scenario_config


def test_no_fault_control(fault_config, fault_cluster, fault_report):
    cfg = scenario_config(fault_config, "control")

    def inject(_job_id):
        now = time.time()
        return now, now

    run = run_with_fault(cfg, fault_cluster, "control", inject)
    figures = run.figures()
    fault_report["control: no fault"] = figures
    state = fault_cluster.job(run.job_id)["state"]
    fault_cluster.cancel_job(run.job_id)
    assert run.exactly_once(), figures
    assert state == "RUNNING"
