"""The foundation's end-to-end check on the real broker and the real 3-TaskManager cluster.

10,000 TaskEvents and 100 malformed records go into Kafka; the task pipeline (executor pinned to
tm_b through its slot sharing group) must write exactly 10,000 results (read_committed: each task
id once, none missing, none extra) and 100 dead letters with reasons, offsets and the raw bytes,
and still be RUNNING afterwards.
"""

from __future__ import annotations

import random

import pytest
import requests

from streamplace.jobs import submit_task_pipeline
from streamplace.kafka_io import (exactly_once_report, produce_raw, read_topic,
                                  synthetic_task_events)
from streamplace.topics import ensure_topics
from workload.codec import encode

VALID, MALFORMED = 10_000, 100
PINNED_NODE = "tm_b"
EXECUTOR_PARALLELISM = 2


def _malformed(rng: random.Random, i: int) -> bytes:
    kinds = [
        lambda: b"",                                          # empty record
        lambda: b'{"task_id": "json-is-not-avro"}',          # JSON text
        lambda: bytes(rng.getrandbits(8) for _ in range(24)),  # random bytes
        lambda: b"\xc3\x01" + bytes(8) + b"\x02",             # right marker, unknown schema
        lambda: encode("TaskEvent", {"task_id": f"cut-{i}", "app_id": "face_recognition",
                                      "input_size": 10, "submitted_at_ms": 1})[:-3],  # truncated
    ]
    return kinds[i % len(kinds)]()


@pytest.fixture(scope="module")
def pipeline_run(stack_config, flink_cluster):
    cfg = stack_config.model_copy(deep=True)
    cfg.job.topic_tasks, cfg.job.topic_results = "e2e-tasks", "e2e-results"
    cfg.job.topic_dead_letter = "e2e-dead-letter"
    ensure_topics(cfg)

    rng = random.Random(7)
    events = list(synthetic_task_events(VALID, seed=3, prefix="e2e"))
    payloads = [encode("TaskEvent", e) for e in events]
    bad = [_malformed(rng, i) for i in range(MALFORMED)]
    mixed = payloads[:]
    for i, raw in enumerate(bad):  # spread the bad records through the stream
        mixed.insert((i + 1) * (len(mixed) // (MALFORMED + 1)), raw)

    job_id = submit_task_pipeline(cfg, flink_cluster, pin_executor_to=PINNED_NODE,
                                  executor_parallelism=EXECUTOR_PARALLELISM,
                                  group_id="e2e-pipeline", transactional_id_prefix="e2e")
    flink_cluster.wait_job_state(job_id, {"RUNNING"}, timeout_s=120)
    report = produce_raw(cfg, cfg.job.topic_tasks, mixed)
    assert report.errors == [] and report.delivered == VALID + MALFORMED

    results = read_topic(cfg, cfg.job.topic_results, "TaskResult", expected=VALID,
                         timeout_s=300, settle_s=5)
    dead = read_topic(cfg, cfg.job.topic_dead_letter, "DeadLetter", expected=MALFORMED,
                      timeout_s=60, settle_s=3)
    yield {"cfg": cfg, "job_id": job_id, "events": events, "bad": bad, "results": results,
           "dead": dead}
    flink_cluster.cancel_job(job_id)


def test_every_task_exactly_once(pipeline_run):
    results = pipeline_run["results"]
    assert results.undecodable == 0
    check = exactly_once_report(results.records, (e["task_id"] for e in pipeline_run["events"]))
    assert check.ok, check.describe()


def test_malformed_records_become_dead_letters(pipeline_run):
    dead = pipeline_run["dead"].records
    assert len(dead) == MALFORMED
    assert all(d["reason"] and d["stage"] == "decode" for d in dead)
    assert all(d["source_topic"] == "e2e-tasks" and d["offset"] >= 0 for d in dead)
    assert len({(d["partition"], d["offset"]) for d in dead}) == MALFORMED
    assert sorted(d["raw"] for d in dead) == sorted(pipeline_run["bad"])


def test_job_still_running_after_bad_input(pipeline_run, flink_cluster):
    assert flink_cluster.job(pipeline_run["job_id"])["state"] == "RUNNING"


def test_executor_instances_run_on_the_pinned_taskmanager(pipeline_run, flink_cluster):
    """The executor's slot sharing group requests tm_b's external resource: the REST API must
    show every executor instance on tm_b, and every result must say it ran on tm_b."""
    job = flink_cluster.job(pipeline_run["job_id"])
    executor = [v for v in job["vertices"] if "executor" in v["name"]]
    assert len(executor) == 1, [v["name"] for v in job["vertices"]]
    detail = requests.get(f"{flink_cluster.rest_url}/jobs/{pipeline_run['job_id']}/vertices/"
                          f"{executor[0]['id']}", timeout=10).json()
    placements = [s["taskmanager-id"] for s in detail["subtasks"]]
    assert placements == [PINNED_NODE] * EXECUTOR_PARALLELISM
    assert {r["node_id"] for r in pipeline_run["results"].records} == {PINNED_NODE}
