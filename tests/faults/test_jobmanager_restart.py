"""The JobManager is killed (SIGKILL) mid-stream and started again. The local cluster runs
without HA services (no ZooKeeper/Kubernetes), so the new JobManager does not know the job:
it is resubmitted from its newest retained checkpoint on disk, with the same transactional id
prefix, so the sink aborts the old attempt's open transactions. Every result exactly once."""

from __future__ import annotations

import time

from fault_harness import run_with_fault, scenario_config, submit


def test_jobmanager_restart_mid_stream(fault_config, fault_cluster, fault_report):
    cfg = scenario_config(fault_config, "jmrestart")
    restored = {}

    def inject(job_id):
        started = time.time()
        restored["taskmanagers_back_s"] = round(fault_cluster.restart_jobmanager(hard=True), 1)
        checkpoint = fault_cluster.latest_checkpoint_on_disk(job_id)
        assert checkpoint, "no retained checkpoint to restore from"
        restored["checkpoint"] = checkpoint.rsplit("/", 1)[-1]
        # the fault ends when the resubmitted job runs; its results then count as recovery
        new_job = submit(cfg, fault_cluster, "jmrestart", restore_from=checkpoint,
                         wait_checkpoint=False)
        return started, time.time(), new_job

    run = run_with_fault(cfg, fault_cluster, "jmrestart", inject)
    state = fault_cluster.job(run.job_id)["state"]
    fault_cluster.cancel_job(run.job_id)
    figures = {**run.figures(), **restored}
    fault_report["JobManager killed, restarted, job resubmitted"] = figures
    assert run.exactly_once(), figures
    assert state == "RUNNING"
