"""Tenant quotas enforced by the router, honoured by the executor, on the real broker and cluster.

The task pipeline runs with ``placement=hook`` and ``tenant_shares="flood=1,light=1"``, the plan
giving one executor instance, on tm_b (so every task meets in one executor's queues). One
``light`` task goes first (the light tenant becomes active: it keeps its share for the quota's
window), then a burst of ``FLOOD`` tasks of tenant ``flood``, then ``LIGHT`` tasks of tenant
``light``. The router sees ``flood`` far over its half of the tasks in flight and demotes all but
its first few (priority 0 -> -100, forwarded in the TaskEvent's ``priority`` attribute), while
the light tasks stay in quota. Every task fits in the executor at once and there are several
times more flood tasks than CPU workers, so most flood tasks wait for a core when the light ones
arrive: the executor must start the light tasks first (their mean ``started_at_ms`` earlier
than the flood tasks' sent before them). Every task has exactly one result; the job keeps
running. Without quotas the light tasks would wait behind the flood (arrival order).

Same shape and sizes as ``test_deadline_order.py`` (face_recognition, about a quarter of a second
per task on one core).
"""

from __future__ import annotations

import os
import statistics
import time

import pytest

from placement.service import PlacementService, ServiceSettings
from placement.service.client import PlacementClient
from streamplace.jobs import submit_task_pipeline
from streamplace.kafka_io import exactly_once_report, produce_raw, read_topic
from streamplace.topics import ensure_topics
from workload.codec import encode
from workload.task_attributes import TENANT_KEY

PINNED_NODE = "tm_b"
PLAN = "tm_a=0,tm_b=1,tm_c=0"
APP, SIZE = "face_recognition", 147_456
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count()
                                                                                or 1)
# The flood far outnumbers the light tasks: its first few tasks are within its share (they
# start in arrival order, as light ones would), the rest demoted; with few light tasks behind a
# large demoted flood the order shows in the means, not only at the margins.
FLOOD = min(40, 6 * CORES + 2)
LIGHT = min(8, max(4, CORES))
#: Everything in flight in the executor (and the router's queue bound) at once.
CAPACITY = FLOOD + LIGHT + 1


def _event(task_id: str, tenant: str, now_ms: int) -> dict:
    return {"task_id": task_id, "app_id": APP, "input_size": SIZE, "submitted_at_ms": now_ms,
            "source": "tenant-quotas", "expected_work_ms": None,
            "attributes": {TENANT_KEY: tenant}, "payload": None}


@pytest.fixture(scope="module")
def quota_run(stack_config, flink_cluster):
    cfg = stack_config.model_copy(deep=True)
    cfg.job.topic_tasks, cfg.job.topic_results = "quota-tasks", "quota-results"
    cfg.job.topic_dead_letter, cfg.job.topic_feedback = "quota-dead-letter", "quota-feedback"
    ensure_topics(cfg)

    job_id = submit_task_pipeline(
        cfg, flink_cluster, placement="hook", executor="iawp", node_scheduler="iawp",
        policy="least_outstanding", plan=PLAN, tenant_shares="flood=1,light=1",
        topic_feedback="quota-feedback", executor_capacity=CAPACITY, executor_timeout_s=600,
        group_id="quota-pipeline", transactional_id_prefix="quota")
    flink_cluster.wait_job_state(job_id, {"RUNNING"}, timeout_s=180)
    now = int(time.time() * 1000)
    first = [_event("light-first", "light", now)]
    flood = [_event(f"flood-{i:03d}", "flood", now) for i in range(FLOOD)]
    light = [_event(f"light-{i:03d}", "light", now) for i in range(LIGHT)]
    events = first + flood + light
    for batch in (first, flood, light):  # in send order: the flood reaches the executor first
        # one partition: the job reads them in the order sent (across partitions the light
        # tasks could come long after the flood, or before it)
        report = produce_raw(cfg, cfg.job.topic_tasks, [encode("TaskEvent", e) for e in batch],
                             partition=0)
        assert report.errors == [] and report.delivered == len(batch)
    results = read_topic(cfg, cfg.job.topic_results, "TaskResult", expected=len(events),
                         timeout_s=600, settle_s=5)
    yield {"job_id": job_id, "events": events, "results": results, "cfg": cfg}
    flink_cluster.cancel_job(job_id)


def test_every_task_exactly_once_on_the_planned_node(quota_run):
    results = quota_run["results"]
    assert results.undecodable == 0
    check = exactly_once_report(results.records, (e["task_id"] for e in quota_run["events"]))
    assert check.ok, check.describe()
    assert {r["node_id"] for r in results.records} == {PINNED_NODE}


def test_the_in_quota_tenant_starts_before_the_demoted_flood_sent_before_it(quota_run):
    by_id = {r["task_id"]: r for r in quota_run["results"].records}
    flood = [r for i, r in by_id.items() if i.startswith("flood-")]
    light = [r for i, r in by_id.items() if i.startswith("light-") and i != "light-first"]
    assert len(flood) == FLOOD and len(light) == LIGHT
    t0 = min(r["started_at_ms"] for r in flood + light)
    flood_mean = statistics.fmean(r["started_at_ms"] - t0 for r in flood)
    light_mean = statistics.fmean(r["started_at_ms"] - t0 for r in light)
    figures = {"cores": CORES, "flood": FLOOD, "light": LIGHT,
               "flood_mean_start_ms": round(flood_mean), "light_mean_start_ms": round(light_mean)}
    print("tenant quotas:", figures)
    assert light_mean < flood_mean, figures


def test_the_service_reports_what_each_tenant_got(quota_run, flink_cluster, tmp_path):
    """A placement service consuming the job's feedback topic from Kafka counts every task
    under its tenant at ``GET /tenants`` (feedback is at-least-once: counted once)."""
    cfg = quota_run["cfg"]
    service = PlacementService(ServiceSettings(
        port=0, bootstrap_servers=cfg.kafka.bootstrap_servers, feedback_topic="quota-feedback",
        group_id=f"quota-service-{time.time_ns()}", flink_rest_url=flink_cluster.rest_url,
        model_dir=str(tmp_path / "models"))).start()
    try:
        client = PlacementClient(service.url)
        expected = {"flood": FLOOD, "light": LIGHT + 1}
        deadline = time.monotonic() + 60
        while True:
            tenants = client.tenants()["tenants"]
            got = {name: t["completed"] for name, t in tenants.items()}
            if got == expected or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        service.stop()
    assert got == expected, tenants
    for name in expected:
        assert tenants[name]["mean_latency_ms"] > 0, tenants[name]
        assert tenants[name]["deadlines_known"] == 0  # no deadline_ms attribute was sent


def test_the_feedback_carries_each_tasks_energy_and_the_nodes_power(quota_run):
    """Energy per task on the real engines: each NodeFeedback carries the node's power (NVML on
    a GPU host, the stated CPU estimate here) and one energy figure per completed timing, each
    finite and positive for a task whose stages ran (``interference.executor.power``)."""
    import math

    from interference.executor.power import SOURCE_CPU, SOURCE_NVML_CPU
    cfg = quota_run["cfg"]
    feedback = read_topic(cfg, "quota-feedback", "NodeFeedback", expected=None, timeout_s=30,
                          idle_s=5).records
    ours = {e["task_id"] for e in quota_run["events"]}
    energies = {}
    for record in feedback:
        assert record["power_source"] in (SOURCE_CPU, SOURCE_NVML_CPU), record["power_source"]
        assert math.isfinite(record["power_w"]) and record["power_w"] > 0, record["power_w"]
        assert len(record["completed_energy_j"]) == len(record["completed"])
        for timing, joules in zip(record["completed"], record["completed_energy_j"]):
            if timing["task_id"] in ours:
                energies[timing["task_id"]] = joules
    assert set(energies) == ours  # every task's timing came with its energy
    assert all(math.isfinite(j) and j > 0 for j in energies.values()), energies


def test_job_still_running(quota_run, flink_cluster):
    assert flink_cluster.job(quota_run["job_id"])["state"] == "RUNNING"
