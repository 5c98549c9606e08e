"""Per-task deadlines honoured by the executor's queue order, on the real broker and cluster.

One burst of TaskEvents goes to the task pipeline with the built-in (IAWP) executor, one instance
pinned to tm_b: first ``PLAIN`` tasks without a deadline, then ``TIGHT`` tasks with a tight
``deadline_ms`` attribute, then ``INVALID`` tasks whose attributes are out of bounds. Every task
fits in the executor at once (``executor_capacity``), and there are several times more plain
tasks than the executor has CPU workers, so most plain tasks wait for a core when the tight ones
arrive. The executor must start the tight tasks first: their mean ``started_at_ms`` is earlier
than the plain tasks' that were sent before them. Every task has exactly one result (read
committed), the invalid ones are FAILED naming the key, and the job keeps running.

The tasks are face_recognition (a chain of five stages, about a quarter of a second in all at
147,456 pixels on one core), so a burst lasts seconds while Kafka delivers it in milliseconds.
"""

from __future__ import annotations

import os
import statistics
import time

import pytest

from streamplace.jobs import submit_task_pipeline
from streamplace.kafka_io import exactly_once_report, produce_raw, read_topic
from streamplace.topics import ensure_topics
from workload.codec import encode
from workload.task_attributes import DEADLINE_MS_KEY, PRIORITY_KEY

PINNED_NODE = "tm_b"
APP, SIZE = "face_recognition", 147_456
#: The executor instance gets one CPU worker per core of its TaskManager (one instance per
#: node): three times as many plain tasks as that (at most 40), so most of them queue.
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count()
                                                                                or 1)
PLAIN = min(40, 3 * CORES + 2)
TIGHT = min(20, max(8, CORES))
INVALID = 2
TIGHT_DEADLINE_MS = "500"
#: Everything in flight in the executor at once (below its max_in_flight of 64).
CAPACITY = PLAIN + TIGHT + INVALID


def _event(task_id: str, attributes: dict[str, str], now_ms: int) -> dict:
    return {"task_id": task_id, "app_id": APP, "input_size": SIZE, "submitted_at_ms": now_ms,
            "source": "deadline-order", "expected_work_ms": None, "attributes": attributes,
            "payload": None}


@pytest.fixture(scope="module")
def deadline_run(stack_config, flink_cluster):
    cfg = stack_config.model_copy(deep=True)
    cfg.job.topic_tasks, cfg.job.topic_results = "deadline-tasks", "deadline-results"
    cfg.job.topic_dead_letter = "deadline-dead-letter"
    ensure_topics(cfg)

    job_id = submit_task_pipeline(
        cfg, flink_cluster, executor="iawp", node_scheduler="iawp",
        pin_executor_to=PINNED_NODE, executor_parallelism=1, executor_capacity=CAPACITY,
        executor_timeout_s=600, group_id="deadline-pipeline",
        transactional_id_prefix="deadline")
    flink_cluster.wait_job_state(job_id, {"RUNNING"}, timeout_s=180)
    now = int(time.time() * 1000)
    plain = [_event(f"plain-{i:03d}", {}, now) for i in range(PLAIN)]
    tight = [_event(f"tight-{i:03d}", {DEADLINE_MS_KEY: TIGHT_DEADLINE_MS}, now)
             for i in range(TIGHT)]
    invalid = [_event(f"invalid-{i:03d}", attributes, now) for i, attributes in
               enumerate([{DEADLINE_MS_KEY: "soon"}, {PRIORITY_KEY: "1000"}][:INVALID])]
    events = plain + tight + invalid
    # In send order: the plain tasks are in Kafka (and reach the executor) before the tight ones.
    for batch in (plain, tight, invalid):
        report = produce_raw(cfg, cfg.job.topic_tasks, [encode("TaskEvent", e) for e in batch])
        assert report.errors == [] and report.delivered == len(batch)
    results = read_topic(cfg, cfg.job.topic_results, "TaskResult", expected=len(events),
                         timeout_s=600, settle_s=5)
    yield {"job_id": job_id, "events": events, "results": results}
    flink_cluster.cancel_job(job_id)


def _by_id(run) -> dict[str, dict]:
    return {r["task_id"]: r for r in run["results"].records}


def test_every_task_exactly_once(deadline_run):
    results = deadline_run["results"]
    assert results.undecodable == 0
    check = exactly_once_report(results.records, (e["task_id"] for e in deadline_run["events"]))
    # the invalid-attribute tasks fail on purpose (test_invalid_...): only they may be not OK
    assert not (check.duplicates or check.missing or check.unexpected), check.describe()
    assert all(task_id.startswith("invalid-") for task_id, _ in check.not_ok), check.describe()
    assert {r["node_id"] for r in results.records} == {PINNED_NODE}


def test_tight_deadlines_start_before_the_plain_tasks_sent_before_them(deadline_run):
    by_id = _by_id(deadline_run)
    plain = [r for i, r in by_id.items() if i.startswith("plain-")]
    tight = [r for i, r in by_id.items() if i.startswith("tight-")]
    assert len(plain) == PLAIN and len(tight) == TIGHT
    assert all(r["status"] == "OK" for r in plain + tight), \
        [(r["task_id"], r["error"]) for r in plain + tight if r["status"] != "OK"]
    t0 = min(r["started_at_ms"] for r in plain + tight)
    plain_mean = statistics.fmean(r["started_at_ms"] - t0 for r in plain)
    tight_mean = statistics.fmean(r["started_at_ms"] - t0 for r in tight)
    figures = {"cores": CORES, "plain": PLAIN, "tight": TIGHT,
               "plain_mean_start_ms": round(plain_mean), "tight_mean_start_ms": round(tight_mean)}
    print("deadline order:", figures)
    assert tight_mean < plain_mean, figures
    # The same holds for completion: deadline tasks were served first, not just started.
    plain_end = statistics.fmean(r["finished_at_ms"] - t0 for r in plain)
    tight_end = statistics.fmean(r["finished_at_ms"] - t0 for r in tight)
    assert tight_end < plain_end, {**figures, "plain_mean_end_ms": round(plain_end),
                                   "tight_mean_end_ms": round(tight_end)}


def test_invalid_attributes_fail_their_task_with_the_key_named(deadline_run):
    by_id = _by_id(deadline_run)
    for task_id, key in [("invalid-000", DEADLINE_MS_KEY), ("invalid-001", PRIORITY_KEY)]:
        result = by_id[task_id]
        assert result["status"] == "FAILED" and result["stage_timings"] == []
        assert "invalid task attributes" in result["error"] and repr(key) in result["error"]


def test_job_still_running_after_invalid_attributes(deadline_run, flink_cluster):
    assert flink_cluster.job(deadline_run["job_id"])["state"] == "RUNNING"
