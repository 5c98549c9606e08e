"""10,000 hostile records of 13 kinds interleaved with 2,000 good tasks: every good task's
result exactly once, every hostile record in the dead-letter topic exactly once with its reason
and its raw bytes, and the job still RUNNING."""

from __future__ import annotations

import random
import time
from collections import Counter

from fault_harness import events, scenario_config, submit

from streamplace.kafka_io import produce_raw, read_topic
from workload.codec import encode

GOOD, HOSTILE = 2_000, 10_000
BASE = {"task_id": "h", "app_id": "face_recognition", "input_size": 1_000, "submitted_at_ms": 1}


def _event(i: int, **fields) -> bytes:
    return encode("TaskEvent", {**BASE, "task_id": f"hostile-{i}", **fields})


#: kind -> (the stage that must refuse it, a maker of its bytes from (rng, i))
KINDS = {
    "empty": ("decode", lambda rng, i: b""),
    "json text": ("decode", lambda rng, i: b'{"task_id": "json-%d"}' % i),
    "random bytes": ("decode", lambda rng, i: bytes(rng.getrandbits(8) for _ in range(32))),
    "unknown schema": ("decode", lambda rng, i: b"\xc3\x01" + rng.randbytes(8) + b"\x02"),
    "truncated": ("decode", lambda rng, i: _event(i)[:-3]),
    "a TaskResult": ("decode", lambda rng, i: encode("TaskResult", {
        "task_id": f"r-{i}", "app_id": "face_recognition", "node_id": "tm_a", "status": "OK",
        "submitted_at_ms": 1, "started_at_ms": 1, "finished_at_ms": 2, "stage_timings": [],
        "output_digest": "", "error": None})),
    "negative size": ("limits", lambda rng, i: _event(i, input_size=-873_743_342)),
    "huge size": ("limits", lambda rng, i: _event(i, input_size=10**12)),
    "NaN work": ("limits", lambda rng, i: _event(i, expected_work_ms=float("nan"))),
    "infinite work": ("limits", lambda rng, i: _event(i, expected_work_ms=float("inf"))),
    "negative work": ("limits", lambda rng, i: _event(i, expected_work_ms=-5.0)),
    "5,000-char task id": ("limits", lambda rng, i: _event(i, task_id=f"{i}-" + "x" * 5_000)),
    "1,000-char type": ("limits", lambda rng, i: _event(i, app_id="y" * 1_000)),
}


def test_hostile_records_are_dead_letters_and_good_tasks_exactly_once(
        fault_config, fault_cluster, fault_report):
    cfg = scenario_config(fault_config, "hostile")
    rng = random.Random(5)
    names = list(KINDS)
    hostile = [(names[i % len(names)], KINDS[names[i % len(names)]][1](rng, i))
               for i in range(HOSTILE)]
    good = events(GOOD, seed=3, prefix="good")
    stream = [("good", encode("TaskEvent", e)) for e in good] + hostile
    random.Random(6).shuffle(stream)
    job_id = submit(cfg, fault_cluster, "hostile")
    began = time.time()
    report = produce_raw(cfg, cfg.job.topic_tasks, [raw for _, raw in stream], timeout_s=120)
    assert report.errors == [] and report.delivered == GOOD + HOSTILE
    results = read_topic(cfg, cfg.job.topic_results, "TaskResult", expected=GOOD,
                         timeout_s=600, settle_s=5)
    dead = read_topic(cfg, cfg.job.topic_dead_letter, "DeadLetter", expected=HOSTILE,
                      timeout_s=120, settle_s=5).records
    elapsed = time.time() - began
    state = fault_cluster.job(job_id)["state"]
    fault_cluster.cancel_job(job_id)

    ids = [r["task_id"] for r in results.records]
    assert len(ids) == len(set(ids)) == GOOD and set(ids) == {e["task_id"] for e in good}
    assert all(r["status"] == "OK" for r in results.records)
    assert len(dead) == HOSTILE, f"{len(dead)} dead letters for {HOSTILE} hostile records"
    assert len({(d["partition"], d["offset"]) for d in dead}) == HOSTILE  # each once
    assert all(d["reason"] for d in dead)
    expected_stage = {raw: KINDS[kind][0] for kind, raw in hostile}
    assert Counter(d["raw"] for d in dead) == Counter(raw for _, raw in hostile)
    wrong = [(d["stage"], expected_stage[d["raw"]], d["reason"][:80]) for d in dead
             if d["stage"] != expected_stage[d["raw"]]]
    assert not wrong, wrong[:5]
    assert state == "RUNNING"
    fault_report["hostile records"] = {
        "tasks": GOOD, "hostile": HOSTILE, "kinds": len(KINDS), "exactly_once": True,
        "dead_letters": len(dead), "dead_letters_by_stage": dict(Counter(d["stage"]
                                                                         for d in dead)),
        "job_state_after": state, "seconds_to_all_results": round(elapsed, 1)}
