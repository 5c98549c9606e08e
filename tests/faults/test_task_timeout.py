"""Tasks that run past the executor's timeout (issue: one 10^8-pixel task once held a node's
checkpoint for minutes): each ends as one FAILED result saying it timed out, its work is
cancelled so its lane is freed, the other tasks keep their results exactly once, and commits
go on (the gap is read against the control scenario)."""

from __future__ import annotations

import time

from fault_harness import events, run_with_fault, scenario_config

TIMEOUT_S = 4.0
HEAVY_AT = (120, 240, 360)   # three long tasks spread through the paced stream
HEAVY_SIZE = 6_000_000       # about 10-20 s of intrusion detection here: far past the timeout


def test_tasks_past_the_timeout_fail_alone_and_commits_go_on(fault_config, fault_cluster,
                                                             fault_report):
    cfg = scenario_config(fault_config, "timeout")
    sent = events(480, 2, "timeout")
    for i in HEAVY_AT:
        sent[i].update(app_id="intrusion_detection", input_size=HEAVY_SIZE,
                       task_id=f"heavy-{i}")
    heavy = {f"heavy-{i}" for i in HEAVY_AT}

    def inject(_job_id):  # the heavy tasks are the fault; they are already in the stream
        now = time.time()
        return now, now

    run = run_with_fault(cfg, fault_cluster, "timeout", inject, sent=sent,
                         executor_timeout_s=TIMEOUT_S)
    state = fault_cluster.job(run.job_id)["state"]
    fault_cluster.cancel_job(run.job_id)
    by_id = {r["task_id"]: r for r in run.results}
    ids = run.ids
    normal_ok = sum(1 for t, r in by_id.items() if t not in heavy and r["status"] == "OK")
    figures = run.figures()
    figures.update(exactly_once=len(ids) == len(set(ids)) == len(sent), heavy_tasks=len(heavy),
                   heavy_timed_out=sum(1 for t in heavy if "timed out" in
                                       (by_id.get(t, {}).get("error") or "")),
                   normal_ok=normal_ok, normal=len(sent) - len(heavy),
                   executor_timeout_s=TIMEOUT_S)
    fault_report["tasks past the executor timeout"] = figures
    assert len(ids) == len(set(ids)) and set(ids) == {e["task_id"] for e in sent}, figures
    assert figures["heavy_timed_out"] == len(heavy), figures
    assert normal_ok >= 0.9 * figures["normal"], figures
    assert state == "RUNNING"
