"""The broker stops mid-stream for 10 s and starts again: the job recovers by itself (its
restart strategy), every result exactly once; what it costs is measured."""

from __future__ import annotations

import time

from fault_harness import run_with_fault, scenario_config

OUTAGE_S = 10.0


def test_broker_stop_and_start_mid_stream(fault_config, fault_cluster, fault_broker,
                                          fault_report):
    cfg = scenario_config(fault_config, "broker")

    def inject(_job_id):
        started = time.time()
        fault_broker.stop()
        time.sleep(OUTAGE_S)
        fault_broker.start()
        return started, time.time()

    run = run_with_fault(cfg, fault_cluster, "broker", inject)
    figures = run.figures()
    fault_report["broker stop 10 s, start"] = figures
    state = fault_cluster.job(run.job_id)["state"]
    fault_cluster.cancel_job(run.job_id)
    assert run.exactly_once(), figures
    assert state == "RUNNING"
