"""A pinned TaskManager is killed (SIGKILL of its JVM and Python workers) mid-stream: the
supervisor resubmits the job from its last retained checkpoint with the dead node's executor
retired onto another; every result exactly once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from fault_harness import PLAN, run_with_fault, scenario_config, submit

from streamplace.cluster_health import heal_cluster
from streamplace.jobs import task_pipeline_args
from streamplace.supervisor import JobSupervisor


def test_taskmanager_killed_mid_stream(fault_config, fault_cluster, fault_report):
    import pyflink_jobs.task_pipeline as pipeline
    cfg = scenario_config(fault_config, "tmkill")
    common = dict(placement="hook", executor="iawp", policy="least_outstanding",
                  topic_feedback=cfg.job.topic_feedback, group_id="tmkill-pipeline",
                  transactional_id_prefix="tmkill", executor_capacity=8)

    def resubmit(plan, retired, restore):
        args = task_pipeline_args(
            cfg, plan=",".join(f"{k}={v}" for k, v in plan.items()),
            retired=",".join(f"{k}={v}" for k, v in retired.items()), **common)
        return fault_cluster.submit_python_job(Path(pipeline.__file__), args,
                                               restore_from=restore)

    heal_cluster(fault_cluster, settle_s=10.0)  # no TaskManager still dying from a cancel
    job_id = submit(cfg, fault_cluster, "tmkill")
    supervisor = JobSupervisor(fault_cluster, resubmit, job_id, PLAN,
                               capacities={"tm_a": 2.0, "tm_b": 1.0, "tm_c": 0.5})
    recovered = {}

    def inject(_job_id):
        started = time.time()
        assert fault_cluster.kill_taskmanager("tm_c", hard=True)
        reports = []
        watcher = threading.Thread(target=supervisor.watch, kwargs={
            "interval_s": 1.0, "until": lambda: any("tm_c" in r.lost_nodes for r in reports),
            "on_report": reports.append}, daemon=True)
        watcher.start()
        watcher.join(timeout=300)
        assert any("tm_c" in r.lost_nodes for r in reports), \
            f"the supervisor never moved the job off tm_c: {reports} {supervisor.errors}"
        recovered["report"] = reports[-1]
        return started, reports[-1].running_at, supervisor.job_id

    try:
        run = run_with_fault(cfg, fault_cluster, "tmkill", inject, job_id=job_id)
        state = fault_cluster.job(run.job_id)["state"]
    finally:
        fault_cluster.cancel_job(supervisor.job_id)
        heal_cluster(fault_cluster)  # tm_c back for the next scenario
    report = recovered["report"]
    figures = run.figures()
    figures["noticed_s"] = round(report.detected_at - run.fault_started, 1)
    figures["restored_from_checkpoint"] = bool(report.restored_from)
    fault_report["TaskManager killed (SIGKILL)"] = figures
    assert run.exactly_once(), figures
    assert state == "RUNNING" and "tm_c" in report.lost_nodes
