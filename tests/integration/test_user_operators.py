"""Users' own PyFlink jobs with the hook, on the real broker and the real 3-TaskManager cluster.

For each example (``examples/json_enrich``: JSON in, a CPU-heavy enrichment function, JSON out;
``examples/text_inference``: a torch classifier as tokenize -> batched model -> label;
``examples/async_scoring``: a PyFlink ``AsyncFunction`` calling an (emulated) remote model, as
PyFlink's own async example; ``examples/video_analytics``: the built-in apps on clips of real
photographs) the plain
job and the hooked job run side by side on the same clean input, and the hooked job runs again
on an input where some records make the operator raise. Checked: every input record's output
exactly once (read_committed; none missing, none extra); the hooked outputs equal the plain
job's (the hook changes where work runs, never what it computes); the records the operator
raised on, and only those, reach the dead-letter topic with the error; the job stays RUNNING;
per node, the router's routed count equals what that node's executor ran; each executor runs on
its planned TaskManager.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from streamplace.cluster_health import heal_cluster
from streamplace.jars import flink_connector_jar
from streamplace.kafka_io import produce_raw, read_topic
from streamplace.topics import create_topics

ROOT = Path(__file__).resolve().parents[2]
NODES = ("tm_a", "tm_b", "tm_c")
WORDS = ("the market rallied as the team won a cup while science labs found new stars and "
         "world leaders met to talk trade goals").split()


def orders(count: int, seed: int, bad_every: int = 0) -> list[str]:
    """JSON orders; with ``bad_every``, every n-th has no ``items`` (enrich raises KeyError)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        order = {"id": f"o{seed}-{i}", "customer": f"c{rng.randrange(50)}",
                 "note": " ".join(rng.choices(WORDS, k=rng.randrange(2, 12))),
                 "items": [{"price": rng.randrange(100, 5000) / 100, "qty": rng.randrange(1, 4)}
                           for _ in range(rng.randrange(1, 5))]}
        if bad_every and i % bad_every == bad_every - 1:
            del order["items"]
        out.append(json.dumps(order))
    return out


def reviews(count: int, seed: int, bad_every: int = 0) -> list[str]:
    """JSON reviews; with ``bad_every``, every n-th has a number for text (tokenize raises)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        text = " ".join(rng.choices(WORDS, k=rng.randrange(3, 40)))
        bad = bad_every and i % bad_every == bad_every - 1
        out.append(json.dumps({"id": f"r{seed}-{i}", "text": 12345 if bad else text}))
    return out


def clips(count: int, seed: int, bad_every: int = 0) -> list[bytes]:
    """TaskEvents (Avro) carrying real clips; with ``bad_every``, every n-th carries a payload
    that is not a clip (the analysis raises)."""
    from streamplace.kafka_io import synthetic_task_events
    from workload.apps.registry import task_payload
    from workload.codec import encode
    events = list(synthetic_task_events(count, seed=seed, prefix=f"v{seed}", payloads=False))
    for i, event in enumerate(events):
        event["input_size"] = min(event["input_size"], 20_000)  # short clips: 2 cores
        if bad_every and i % bad_every == bad_every - 1:
            event["payload"] = b"not a clip" * 10
    for event in events:
        if event.get("payload") is None:
            event["payload"] = task_payload(event["app_id"], event["input_size"],
                                            event["task_id"])
    return [encode("TaskEvent", e) for e in events]


#: example -> (records, bad_every, record maker, id of an output, id of a raw input record)
EXAMPLES = {
    "json_enrich": (240, 12, orders, lambda out: json.loads(out)["id"],
                    lambda raw: json.loads(raw)["id"]),
    "text_inference": (240, 12, reviews, lambda out: json.loads(out)["id"],
                       lambda raw: json.loads(raw)["id"]),
    "async_scoring": (240, 12, reviews, lambda out: json.loads(out)["id"],
                      lambda raw: json.loads(raw)["id"]),
    "video_analytics": (48, 8, clips, lambda out: json.loads(out)["task_id"],
                        lambda raw: _decode_event(raw)["task_id"]),
}


def _decode_event(raw: bytes) -> dict:
    from workload.codec import decode
    return decode("TaskEvent", raw)


def _read_strings(cfg, topic: str, expected: int, timeout_s: float = 300) -> list[str]:
    """Every committed record of ``topic`` as text, until ``expected`` arrived and 5 s more
    (to catch duplicates), or ``timeout_s``."""
    report = read_topic(cfg, topic, None, expected=expected, timeout_s=timeout_s, settle_s=5)
    return [r["value"].decode("utf-8") for r in report.records]


def _vertex_metric(cluster, job_id, vertex_part, name):
    job = cluster.job(job_id)
    vertex = next(v for v in job["vertices"] if vertex_part in v["name"])
    base = f"{cluster.rest_url}/jobs/{job_id}/vertices/{vertex['id']}/metrics"
    ids = [m["id"] for m in requests.get(base, timeout=10).json() if m["id"].endswith(name)]
    if not ids:
        return None
    values = requests.get(base, params={"get": ",".join(ids)}, timeout=10).json()
    return sum(float(v["value"]) for v in values)


def _per_node_counts(cluster, job_id, total):
    """(router's routed count per node, executor's ran count per node), once the gauges (REST
    caches them about 10 s) account for every record, or after a minute."""
    deadline = time.monotonic() + 60
    while True:
        routed = {n: int(_vertex_metric(cluster, job_id, "router",
                                        f"streamplace_routed_{n}") or 0) for n in NODES}
        ran = {n: int((_vertex_metric(cluster, job_id, f"executor-{n}", "streamplace_tasks_ok")
                       or 0) + (_vertex_metric(cluster, job_id, f"executor-{n}",
                                               "streamplace_tasks_failed") or 0))
               for n in NODES}
        if (sum(routed.values()) >= total and sum(ran.values()) >= total) or \
                time.monotonic() > deadline:
            return routed, ran
        time.sleep(2)


def _run_example(stack_config, cluster, example: str, tmp_name: str):
    cfg = stack_config
    heal_cluster(cluster)
    count, bad_every, make_records, out_id, raw_id = EXAMPLES[example]
    jar = str(flink_connector_jar(cfg))
    clean_topic, mixed_topic = f"{tmp_name}-clean-in", f"{tmp_name}-mixed-in"
    out = {k: f"{tmp_name}-{k}" for k in ("plain", "hooked", "mixed")}
    dlq = {k: f"{tmp_name}-{k}-dlq" for k in ("plain", "hooked", "mixed")}
    create_topics(cfg, [clean_topic, mixed_topic, *out.values(), *dlq.values(), "feedback"])
    clean = make_records(count, seed=1)
    mixed = make_records(count, seed=2, bad_every=bad_every)
    for topic, records in ((clean_topic, clean), (mixed_topic, mixed)):
        report = produce_raw(cfg, topic, (r if isinstance(r, bytes) else r.encode()
                                          for r in records))
        assert report.errors == [] and report.delivered == len(records)

    def submit(kind, script, topic):
        return cluster.submit_python_job(ROOT / "examples" / example / script, [
            "--bootstrap-servers", cfg.kafka.bootstrap_servers, "--connector-jar", jar,
            "--input-topic", topic, "--output-topic", out[kind],
            "--dead-letter-topic", dlq[kind], "--job-name", f"{tmp_name}-{kind}"])

    # The clean pair first, then the mixed run: three jobs at once do not fit the small
    # TaskManagers' resources (the third stays CREATED).
    jobs = {"plain": submit("plain", "plain_job.py", clean_topic),
            "hooked": submit("hooked", "hooked_job.py", clean_topic)}
    run = {"clean": [raw_id(r) for r in clean], "mixed": [raw_id(r) for r in mixed],
           "jobs": jobs, "out_id": out_id, "raw_id": raw_id,
           "expected_bad": count // bad_every}
    try:
        for job_id in jobs.values():
            cluster.wait_job_state(job_id, {"RUNNING"}, timeout_s=180)
        # both outputs read at once: each read waits 5 s after its last record for duplicates
        with ThreadPoolExecutor(2) as pool:
            plain, hooked = (pool.submit(_read_strings, cfg, out[kind], len(clean))
                             for kind in ("plain", "hooked"))
            run["plain"], run["hooked"] = plain.result(), hooked.result()
        run["states"] = {k: cluster.job(j)["state"] for k, j in jobs.items()}
        for kind in ("plain", "hooked"):
            cluster.cancel_job(jobs.pop(kind))
        heal_cluster(cluster)
        jobs["mixed"] = submit("mixed", "hooked_job.py", mixed_topic)
        cluster.wait_job_state(jobs["mixed"], {"RUNNING"}, timeout_s=180)
        # every bad_every-th record of the mixed input makes the operator raise
        run["bad"] = [raw_id(r) for i, r in enumerate(mixed) if i % bad_every == bad_every - 1]
        bad = run["bad"]
        with ThreadPoolExecutor(2) as pool:
            mixed_out = pool.submit(_read_strings, cfg, out["mixed"], len(mixed) - len(bad))
            dead = pool.submit(read_topic, cfg, dlq["mixed"], "DeadLetter", expected=len(bad),
                               timeout_s=120, settle_s=5)
            run["mixed_out"], run["dead"] = mixed_out.result(), dead.result().records
        run["states"]["mixed"] = cluster.job(jobs["mixed"])["state"]
        run["counts"] = _per_node_counts(cluster, jobs["mixed"], len(mixed))
        run["where"] = {}
        job = cluster.job(jobs["mixed"])
        for node in NODES:
            vertex = next(v for v in job["vertices"] if f"executor-{node}" in v["name"])
            detail = requests.get(f"{cluster.rest_url}/jobs/{jobs['mixed']}/vertices/"
                                  f"{vertex['id']}", timeout=10).json()
            run["where"][node] = [s["taskmanager-id"] for s in detail["subtasks"]]
        yield run
    finally:
        for job_id in jobs.values():
            cluster.cancel_job(job_id)


@pytest.fixture(scope="module", params=sorted(EXAMPLES))
def example_run(request, stack_config, flink_cluster):
    yield from _run_example(stack_config, flink_cluster, request.param,
                            f"ex-{request.param.replace('_', '-')}")


def _ids(run, texts):
    return Counter(run["out_id"](t) for t in texts)


def test_every_record_is_output_exactly_once(example_run):
    clean = Counter(example_run["clean"])
    assert _ids(example_run, example_run["plain"]) == clean
    hooked = _ids(example_run, example_run["hooked"])
    assert max(hooked.values()) == 1, "duplicated outputs"
    assert set(hooked) == set(clean), "missing or extra outputs"


def test_the_hook_changes_where_work_runs_never_what_it_computes(example_run):
    assert sorted(example_run["hooked"]) == sorted(example_run["plain"])


def test_records_the_operator_raises_on_go_to_dead_letters_and_the_job_keeps_running(example_run):
    bad_ids = set(example_run["bad"])
    good_ids = set(example_run["mixed"]) - bad_ids
    assert len(bad_ids) == example_run["expected_bad"]
    dead_ids = Counter(example_run["raw_id"](d["raw"]) for d in example_run["dead"])
    assert set(dead_ids) == bad_ids and max(dead_ids.values()) == 1
    assert all("Error" in d["reason"] and "Traceback" in d["reason"]
               for d in example_run["dead"]), example_run["dead"][0]["reason"]
    assert all(d["stage"].startswith("operator:") for d in example_run["dead"])
    mixed_ids = _ids(example_run, example_run["mixed_out"])
    assert set(mixed_ids) == good_ids and max(mixed_ids.values()) == 1
    assert example_run["states"] == {"plain": "RUNNING", "hooked": "RUNNING",
                                     "mixed": "RUNNING"}


def test_per_node_routed_equals_executed_on_the_planned_taskmanagers(example_run):
    routed, ran = example_run["counts"]
    assert routed == ran, (routed, ran)
    assert sum(routed.values()) == len(example_run["mixed"])
    assert example_run["where"] == {n: [n] for n in NODES}
