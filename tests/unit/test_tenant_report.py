"""Per-tenant figures in the placement service: the feedback's tenant arrays, the report's
arithmetic and bounds, de-duplication keeping the per-task arrays aligned, /tenants and the
Prometheus gauges, and the executor's feedback filling the arrays."""

from __future__ import annotations

import math
import warnings

import pytest

from placement.service.feedback import Deduplicator
from placement.service.tenants import (INVALID_TENANT, LATENCIES_KEPT, NO_TENANT, OTHER_TENANTS,
                                       TenantReport, jain_index)
from pyflink_jobs.feedback import FeedbackPublisher, FinishedTask
from pyflink_jobs.routed import DecisionContext, RoutedRecord
from workload.codec import decode, encode
from workload.feedback import PER_TASK_ARRAYS

from test_service import make_service, synthetic_feedback

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


def report_of(tasks, node="tm_a", sequence=0):
    """A NodeFeedback with one timing per (task id, tenant, latency ms, deadline met)."""
    return {"node_id": node, "emitted_at_ms": 1_000 + sequence, "sequence": sequence,
            "completed": [{"task_id": t, "app_id": "enrich", "input_size": 1,
                           "queue_ms": 0.25 * ms, "service_ms": 0.75 * ms,
                           "finished_at_ms": 1_000} for t, _, ms, _ in tasks],
            "completed_tenant": [tenant for _, tenant, _, _ in tasks],
            "completed_deadline_met": [met for _, _, _, met in tasks]}


# Scenario table: completed tasks -> what the report says of one tenant.
CASES = [
    ("one tenant, two tasks", [("t1", "a", 10.0, -1), ("t2", "a", 30.0, -1)], "a",
     {"completed": 2, "mean_latency_ms": 20.0, "deadlines_known": 0, "deadline_miss_rate": None}),
    ("deadlines: one of two missed", [("t1", "a", 10.0, 1), ("t2", "a", 30.0, 0)], "a",
     {"completed": 2, "deadlines_known": 2, "deadlines_missed": 1, "deadline_miss_rate": 0.5}),
    ("no tenant", [("t1", "", 10.0, -1)], NO_TENANT, {"completed": 1}),
    ("a hostile tenant name", [("t1", "a b;\n", 10.0, -1), ("t2", "x" * 65, 5.0, -1)],
     INVALID_TENANT, {"completed": 2}),
    ("a non-finite latency counts the task, not the latency",
     [("t1", "a", float("nan"), -1), ("t2", "a", 8.0, -1)], "a",
     {"completed": 2, "mean_latency_ms": 8.0}),
    ("a deadline flag that is not 0 or 1 is no deadline", [("t1", "a", 1.0, 7)], "a",
     {"deadlines_known": 0}),
]


@pytest.mark.parametrize("name,tasks,tenant,expected", CASES, ids=[c[0] for c in CASES])
def test_the_report_counts_each_tenants_tasks(name, tasks, tenant, expected):
    report = TenantReport()
    assert report.take([report_of(tasks)]) == len(tasks)
    figures = report.summary()["tenants"][tenant]
    for key, value in expected.items():
        assert figures[key] == value, (key, figures)


def test_a_tenant_array_of_another_length_cannot_name_anyone():
    record = report_of([("t1", "a", 1.0, 1), ("t2", "b", 1.0, 1)])
    record["completed_tenant"] = ["a"]          # one name for two timings
    record["completed_deadline_met"] = [1]
    report = TenantReport()
    report.take([record])
    tenants = report.summary()["tenants"]
    assert set(tenants) == {INVALID_TENANT}
    assert tenants[INVALID_TENANT]["completed"] == 2
    assert tenants[INVALID_TENANT]["deadlines_known"] == 0


def test_tenants_beyond_the_bound_are_pooled_and_latencies_kept_are_bounded():
    report = TenantReport(max_tenants=2)
    report.take([report_of([(f"t{i}", f"tenant{i}", 1.0, -1) for i in range(5)])])
    assert set(report.summary()["tenants"]) == {"tenant0", "tenant1", OTHER_TENANTS}
    assert report.summary()["tenants"][OTHER_TENANTS]["completed"] == 3
    report = TenantReport()
    report.take([report_of([(f"t{i}", "a", float(i), -1) for i in range(LATENCIES_KEPT + 10)])])
    figures = report.summary()["tenants"]["a"]
    assert figures["completed"] == LATENCIES_KEPT + 10
    assert figures["p99_latency_ms"] <= LATENCIES_KEPT + 9
    with pytest.raises(ValueError, match="max_tenants"):
        TenantReport(max_tenants=0)


@pytest.mark.parametrize("values,expected", [
    ([10.0, 10.0, 10.0], 1.0), ([10.0, 0.0], 0.5), ([], None), ([0.0, 0.0], None)])
def test_jain_index(values, expected):
    assert jain_index(values) == expected


def test_jain_over_named_tenants_only():
    report = TenantReport()
    report.take([report_of([("t1", "a", 10.0, -1), ("t2", "b", 30.0, -1),
                            ("t3", "", 1000.0, -1)])])
    assert report.summary()["jain_mean_latency"] == pytest.approx(40.0 ** 2 / (2 * 1000.0))


def test_dropping_a_repeated_timing_drops_the_same_position_of_every_per_task_array():
    dedup = Deduplicator()
    first = report_of([("t1", "a", 1.0, 1)], sequence=0)
    again = report_of([("t1", "a", 1.0, 1), ("t2", "b", 2.0, 0)], sequence=1)
    for record, queues in ((first, [5]), (again, [5, 9])):
        record.update(routed_queue=queues, routed_backlog_ms=[float(q) for q in queues],
                      routed_speed_factor=[1.0] * len(queues),
                      completed_energy_j=[float(10 * q) for q in queues])
    dedup.filter(first)
    kept = dedup.filter(again)
    assert [t["task_id"] for t in kept["completed"]] == ["t2"]
    assert kept["routed_queue"] == [9] and kept["routed_backlog_ms"] == [9.0]
    assert kept["completed_energy_j"] == [90.0]
    assert kept["completed_tenant"] == ["b"] and kept["completed_deadline_met"] == [0]
    # an array that never matched its timings is dropped, not shifted
    broken = report_of([("t3", "c", 1.0, 1), ("t4", "c", 1.0, 1)], sequence=2)
    broken["routed_queue"] = [1]
    assert dedup.filter(broken)["routed_queue"] == []
    assert set(PER_TASK_ARRAYS) >= {"routed_queue", "completed_tenant", "completed_energy_j"}


def test_the_service_reports_tenants_at_its_endpoint_and_in_metrics(tmp_path):
    service = make_service(tmp_path)
    reports = synthetic_feedback(30)
    for report in reports:
        n = len(report["completed"])
        report["completed_tenant"] = ["gold" if i % 2 else "bronze" for i in range(n)]
        report["completed_deadline_met"] = [1] * n
    service.ingest.ingest(reports)
    service.ingest.ingest(reports)  # re-delivered: counted once
    client = TestClient(service.app)
    body = client.get("/tenants").json()
    assert sum(t["completed"] for t in body["tenants"].values()) == 30
    assert set(body["tenants"]) == {"gold", "bronze"}
    assert 0.5 <= body["jain_mean_latency"] <= 1.0
    text = client.get("/metrics").text
    assert 'streamplace_service_tenant_completed{tenant="gold"}' in text
    assert "streamplace_service_tenant_jain_mean_latency" in text


def routed(task_id, at_ms):
    return RoutedRecord(task_id, "video_synopsis", 10, "tm_a", at_ms, DecisionContext(1, 5.0, 1.0),
                        record=None)


def test_the_executors_feedback_names_each_tasks_tenant_and_deadline():
    publisher = FeedbackPublisher("tm_a", lambda: {})

    class Outcome:
        queue_ms, service_ms, finished_at_ms, stages = 1.0, 100.0, 10_500, ()

    events = [{"task_id": "t1", "app_id": "video_synopsis", "input_size": 10,
               "attributes": {"tenant": "gold", "deadline_ms": "1000"}},
              {"task_id": "t2", "app_id": "video_synopsis", "input_size": 10,
               "attributes": {"tenant": "gold", "deadline_ms": "200"}},
              {"task_id": "t3", "app_id": "video_synopsis", "input_size": 10,
               "attributes": {"tenant": "bad name!"}},
              {"task_id": "t4", "app_id": "video_synopsis", "input_size": 10}]
    for event in events:  # each routed at 10,000 ms: 500 ms before it finished
        publisher.task_finished(FinishedTask.from_task_outcome(event, Outcome()),
                                routed(event["task_id"], 10_000), bytes_in=1, bytes_out=1)
    record = publisher.build_record()
    assert record["completed_tenant"] == ["gold", "gold", "", ""]
    assert record["completed_deadline_met"] == [1, 0, -1, -1]
    decoded = decode("NodeFeedback", encode("NodeFeedback", record))
    assert decoded["completed_tenant"] == record["completed_tenant"]
    assert all(math.isfinite(x) for x in decoded["completed_energy_j"])


def test_the_executors_own_parse_of_the_attributes_is_used_as_given():
    from workload.task_attributes import TaskSLO

    class Outcome:
        queue_ms, service_ms, finished_at_ms, stages = 1.0, 100.0, 10_500, ()

    event = {"task_id": "t1", "app_id": "video_synopsis", "input_size": 10,
             "attributes": {"tenant": "ignored", "deadline_ms": "5"}}
    finished = FinishedTask.from_task_outcome(event, Outcome(),
                                              TaskSLO(tenant="gold", deadline_s=0.25))
    assert (finished.tenant, finished.deadline_ms) == ("gold", 250.0)
    assert finished.deadline_met(250.0) == 1 and finished.deadline_met(251.0) == 0
