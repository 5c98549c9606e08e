"""routing="colocated" on the real broker and the real 3-TaskManager cluster: one router per
TaskManager, each running what it routes to its own node (pyflink_jobs/inline_executor.py).

``examples/json_enrich/hooked_job.py`` unchanged, the routing set by the environment of the
submission (``STREAMPLACE_HOOK_ROUTING=colocated``), on orders of which every 12th makes
``enrich`` raise. Checked: each good order's output exactly once and equal to ``enrich`` run
here on the same order; the raising orders, and only those, in the dead letters; the job stays
RUNNING; the routers run one per TaskManager; per node, routed = ran (in its router plus its
executor), and the routers ran records themselves; each router applied NodeFeedback it read
from the topic itself.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from collections import Counter
from pathlib import Path

import pytest
import requests

from streamplace.cluster_health import heal_cluster
from streamplace.jars import flink_connector_jar
from streamplace.kafka_io import produce_raw, read_topic
from streamplace.topics import create_topics

from test_user_operators import NODES, orders

ROOT = Path(__file__).resolve().parents[2]
COUNT, BAD_EVERY = 240, 12
#: records sent after the first ones' outputs are in (so every router has heard feedback)
SECOND_WAVE = 60


def _enrich():
    spec = importlib.util.spec_from_file_location(
        "json_enrich_plain", ROOT / "examples" / "json_enrich" / "plain_job.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.enrich


def _subtask_metric(cluster, job_id, vertex, index, name) -> float:
    base = f"{cluster.rest_url}/jobs/{job_id}/vertices/{vertex['id']}/subtasks/{index}/metrics"
    ids = [m["id"] for m in requests.get(base, timeout=10).json() if m["id"].endswith(name)]
    if not ids:
        return 0.0
    return sum(float(v["value"]) for v in
               requests.get(base, params={"get": ",".join(ids)}, timeout=10).json())


def _counts(cluster, job_id):
    """(routed per node, ran per node, ran by the routers per node, router TaskManagers,
    NodeFeedback records each router applied)."""
    job = cluster.job(job_id)
    routed, ran, inline, hosts, heard = Counter(), Counter(), Counter(), [], Counter()
    for vertex in job["vertices"]:
        detail = requests.get(f"{cluster.rest_url}/jobs/{job_id}/vertices/{vertex['id']}",
                              timeout=10).json()
        for index, subtask in enumerate(detail["subtasks"]):
            done = sum(_subtask_metric(cluster, job_id, vertex, index, f"streamplace_tasks_{s}")
                       for s in ("ok", "failed"))
            if "router" in vertex["name"]:
                hosts.append(subtask["taskmanager-id"])
                heard[subtask["taskmanager-id"]] = int(_subtask_metric(
                    cluster, job_id, vertex, index, "streamplace_feedback_records"))
                inline[subtask["taskmanager-id"]] += int(done)
                ran[subtask["taskmanager-id"]] += int(done)
                for node in NODES:
                    routed[node] += int(_subtask_metric(cluster, job_id, vertex, index,
                                                        f"streamplace_routed_{node}"))
            elif "executor-" in vertex["name"]:
                ran[vertex["name"].rsplit("executor-", 1)[1]] += int(done)
    return routed, ran, inline, sorted(hosts), heard


@pytest.fixture(scope="module")
def colocated_run(stack_config, flink_cluster):
    cfg, cluster = stack_config, flink_cluster
    heal_cluster(cluster)
    name = "colocated"
    topics = {k: f"{name}-{k}" for k in ("in", "out", "dlq")}
    create_topics(cfg, [*topics.values(), "feedback"])
    records = orders(COUNT, seed=3, bad_every=BAD_EVERY)
    bad = [r for i, r in enumerate(records) if i % BAD_EVERY == BAD_EVERY - 1]
    first = records[:COUNT - SECOND_WAVE]
    saved = os.environ.get("STREAMPLACE_HOOK_ROUTING")
    os.environ["STREAMPLACE_HOOK_ROUTING"] = "colocated"
    try:
        job_id = cluster.submit_python_job(ROOT / "examples" / "json_enrich" / "hooked_job.py", [
            "--bootstrap-servers", cfg.kafka.bootstrap_servers,
            "--connector-jar", str(flink_connector_jar(cfg)), "--input-topic", topics["in"],
            "--output-topic", topics["out"], "--dead-letter-topic", topics["dlq"],
            "--job-name", name])
    finally:
        if saved is None:
            os.environ.pop("STREAMPLACE_HOOK_ROUTING", None)
        else:
            os.environ["STREAMPLACE_HOOK_ROUTING"] = saved
    try:
        cluster.wait_job_state(job_id, {"RUNNING"}, timeout_s=180)
        report = produce_raw(cfg, topics["in"], (r.encode() for r in first))
        assert report.errors == [] and report.delivered == len(first)
        read_topic(cfg, topics["out"], None, expected=len(set(first) - set(bad)),
                   timeout_s=300, settle_s=0)
        # A router's gauges reach REST at the end of a bundle of records: the second wave
        # makes every router report the feedback it applied while the first one ran.
        time.sleep(2.0)
        report = produce_raw(cfg, topics["in"], (r.encode() for r in records[len(first):]))
        assert report.errors == [] and report.delivered == SECOND_WAVE
        out = read_topic(cfg, topics["out"], None, expected=COUNT - len(bad), timeout_s=300,
                         settle_s=5).records
        dead = read_topic(cfg, topics["dlq"], "DeadLetter", expected=len(bad), timeout_s=120,
                          settle_s=5).records
        deadline = time.monotonic() + 60  # REST caches the gauges about 10 s
        while True:
            counts = _counts(cluster, job_id)
            if sum(counts[0].values()) >= COUNT and sum(counts[1].values()) >= COUNT and \
                    len(counts[4]) == len(NODES) and min(counts[4].values()) > 0 or \
                    time.monotonic() > deadline:
                break
            time.sleep(2)
        yield {"records": records, "bad": bad, "out": [r["value"].decode() for r in out],
               "dead": dead, "state": cluster.job(job_id)["state"], "counts": counts,
               "vertices": [v["name"] for v in cluster.job(job_id)["vertices"]]}
    finally:
        cluster.cancel_job(job_id)


def test_each_good_record_is_output_exactly_once_as_the_plain_operator_computes_it(colocated_run):
    enrich = _enrich()
    good = [r for r in colocated_run["records"] if r not in set(colocated_run["bad"])]
    assert Counter(colocated_run["out"]) == Counter(enrich(r) for r in good)


def test_raising_records_go_to_dead_letters_and_the_job_keeps_running(colocated_run):
    dead_ids = Counter(json.loads(d["raw"])["id"] for d in colocated_run["dead"])
    assert dead_ids == Counter(json.loads(r)["id"] for r in colocated_run["bad"])
    assert all("KeyError" in d["reason"] and d["stage"] == "operator:enrich"
               for d in colocated_run["dead"])
    assert colocated_run["state"] == "RUNNING"


def test_one_router_per_taskmanager_and_routed_equals_ran_per_node(colocated_run):
    routed, ran, inline, hosts, _ = colocated_run["counts"]
    assert hosts == sorted(NODES)
    assert routed == ran and sum(routed.values()) == COUNT, (routed, ran)
    assert sum(inline.values()) > 0, inline


def test_each_router_reads_the_executors_feedback_from_the_topic_itself(colocated_run):
    # routing "colocated" reads the feedback topic in each router (pyflink_jobs/feedback_tail):
    # every router applied reports, though the job has no feedback source
    heard = colocated_run["counts"][4]
    assert sorted(heard) == sorted(NODES) and min(heard.values()) > 0, heard
    assert not any("feedback-source" in v for v in colocated_run["vertices"]), \
        colocated_run["vertices"]
