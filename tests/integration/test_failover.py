"""A pinned TaskManager dies mid-run: nothing lost, nothing duplicated.

The hooked task pipeline runs on tm_a, tm_b and tm_c. While tasks are being processed, tm_c is
killed (SIGKILL of its JVM and Python workers). The supervisor notices tm_c is gone, cancels
the restarting job, and resubmits it from its last retained checkpoint with tm_c's executor
retired onto tm_a. Every task must appear exactly once in the results (read_committed). tm_c is
started again afterwards, so later tests see the whole cluster.

PyFlink 2.2.1 may kill another TaskManager while a job is cancelled (an earlier test's, or the
supervisor's own cancel). The run starts only on a cluster that stayed whole for a while, and
should a second node die anyway, the supervisor must have moved the job off every lost node.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from streamplace.cluster_health import heal_cluster
from streamplace.jobs import task_pipeline_args
from streamplace.kafka_io import produce_task_events, read_topic, synthetic_task_events
from streamplace.supervisor import JobSupervisor, choose_host
from streamplace.topics import ensure_topics

TASKS = 1_500
PLAN = {"tm_a": 1, "tm_b": 1, "tm_c": 1}
CAPACITIES = {"tm_a": 2.0, "tm_b": 1.0, "tm_c": 0.5}


@pytest.fixture(scope="module")
def failover_run(stack_config, flink_cluster):
    import pyflink_jobs.task_pipeline as pipeline
    cfg = stack_config.model_copy(deep=True)
    cfg.job.topic_tasks, cfg.job.topic_results = "fo-tasks", "fo-results"
    cfg.job.topic_dead_letter, cfg.job.topic_feedback = "fo-dead-letter", "fo-feedback"
    ensure_topics(cfg)
    heal_cluster(flink_cluster, settle_s=10.0)

    def submit(plan, retired, restore):
        args = task_pipeline_args(
            cfg, placement="hook", executor="iawp", policy="least_outstanding",
            plan=",".join(f"{k}={v}" for k, v in plan.items()),
            retired=",".join(f"{k}={v}" for k, v in retired.items()),
            topic_feedback="fo-feedback", group_id="fo-pipeline", transactional_id_prefix="fo",
            executor_capacity=8)
        return flink_cluster.submit_python_job(Path(pipeline.__file__), args,
                                               restore_from=restore)

    job_id = submit(PLAN, {}, None)
    flink_cluster.wait_job_state(job_id, {"RUNNING"}, timeout_s=180)
    supervisor = JobSupervisor(flink_cluster, submit, job_id, PLAN,
                               capacities=CAPACITIES)
    events = list(synthetic_task_events(TASKS, seed=21, prefix="fo"))
    for e in events:
        e["input_size"] = min(e["input_size"], 60_000)
    run = {"events": events, "supervisor": supervisor}
    try:
        report = produce_task_events(cfg, events)
        assert report.errors == [] and report.delivered == TASKS
        # Let a good part of the work finish (and a few checkpoints complete), then crash tm_c.
        read_topic(cfg, cfg.job.topic_results, "TaskResult", expected=TASKS // 4, timeout_s=240)
        killed_at = time.time()
        assert flink_cluster.kill_taskmanager("tm_c", hard=True)
        done = threading.Event()
        reports, running_when_lost = [], {}

        def on_report(report):
            # A node the supervisor retired must really be gone, not a late heartbeat.
            running_when_lost.update({n: flink_cluster.taskmanager_running(n)
                                      for n in report.lost_nodes})
            reports.append(report)
        # Until the job is off tm_c (a collateral loss may be handled in an earlier report).
        watcher = threading.Thread(target=supervisor.watch, kwargs={
            "interval_s": 1.0,
            "until": lambda: done.is_set() or any("tm_c" in r.lost_nodes for r in reports),
            "on_report": on_report}, daemon=True)
        watcher.start()
        watcher.join(timeout=300)
        done.set()
        assert any("tm_c" in r.lost_nodes for r in reports), \
            f"the supervisor never moved the job off tm_c: {reports} {supervisor.errors}"
        run["reports"] = reports
        run["running_when_lost"] = running_when_lost
        run["killed_at"] = killed_at
        run["results"] = read_topic(cfg, cfg.job.topic_results, "TaskResult", expected=TASKS,
                                    timeout_s=400, settle_s=8)
        yield run
    finally:
        flink_cluster.cancel_job(supervisor.job_id)
        heal_cluster(flink_cluster)  # tm_c back for whoever runs next


def test_nothing_lost_nothing_duplicated_when_a_pinned_taskmanager_dies(failover_run):
    ids = [r["task_id"] for r in failover_run["results"].records]
    expected = {e["task_id"] for e in failover_run["events"]}
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicated results"
    assert set(ids) == expected, f"{len(expected - set(ids))} tasks missing"
    not_ok = [(r["task_id"], r["node_id"], r["status"], r.get("error"))
              for r in failover_run["results"].records if r["status"] != "OK"]
    assert not_ok == [], f"{len(not_ok)} results not OK, the first: {not_ok[:5]}"


def test_the_job_was_moved_off_the_dead_node(failover_run, flink_cluster):
    reports = failover_run["reports"]
    report = reports[-1]
    lost = sorted({n for r in reports for n in r.lost_nodes})
    assert "tm_c" in lost, lost
    assert not any(failover_run["running_when_lost"].values()), \
        f"a running TaskManager was counted lost: {failover_run['running_when_lost']}"
    if lost != ["tm_c"]:
        print(f"\nnote: PyFlink also took down {[n for n in lost if n != 'tm_c']}")
    # Off every lost node, each lost node's executor retired onto the most capable one left.
    assert report.plan == {n: 1 for n in PLAN if n not in lost}
    host = choose_host(report.plan, CAPACITIES)
    assert report.retired == {n: host for n in lost}
    assert all(r.restored_from for r in reports), "resubmitted without a checkpoint"
    # Recovery: kill -> noticed (heartbeat timeout) -> resubmitted -> RUNNING.
    total = report.running_at - failover_run["killed_at"]
    print(f"\nrecovery: noticed {report.detected_at - failover_run['killed_at']:.1f} s after the "
          f"kill, RUNNING again {total:.1f} s after it ({report.timings})")
    assert total < 240
