"""A hooked job on a cluster the project's specs do not describe: two TaskManagers named
``edge_1`` and ``edge_2``, submitted with plain ``flink run`` as a user would, nothing telling the
hook about them.

Before 2026-12-07 the hook pinned its executors to the default spec's ``tm_a``/``tm_b``/``tm_c``
there: they stayed unassigned and no order came out (a probe on four such TaskManagers: 0 of
300 outputs in 65 s). Now the hook reads the job's cluster from REST when it is built
(``pyflink_jobs/live_cluster.py``) and places on ``edge_1``/``edge_2``; a spec chosen on purpose
that is not the cluster refuses the job at submission, with both lists.

Its own Flink cluster (ports 48081 / 46123, folder ``<test home>/other-cluster``) beside the
session's, on the session's broker.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest

from streamplace.cluster_health import heal_cluster
from streamplace.config import load_config
from streamplace.flink_cluster import FlinkCluster
from streamplace.flink_jobs import run_python_job
from streamplace.jars import flink_connector_jar, jars_present
from streamplace.kafka_io import produce_raw, read_topic
from streamplace.processes import LaunchError
from streamplace.topics import create_topics

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "examples" / "json_enrich" / "hooked_job.py"
ORDERS = 120
SPEC = """\
taskmanagers:
  - {id: edge_1, cpu_cores: 1, cpu_affinity: [0], slots: 2, task_heap_mb: 256, managed_mb: 256}
  - {id: edge_2, cpu_cores: 1, cpu_affinity: [1], slots: 2, task_heap_mb: 256, managed_mb: 256}
"""


@pytest.fixture(scope="module")
def _started_other_cluster(stack_config, kafka_broker, tmp_path_factory):
    spec = tmp_path_factory.mktemp("spec") / "edge.yaml"
    spec.write_text(SPEC)
    home = stack_config.home / "other-cluster"
    home.mkdir(parents=True, exist_ok=True)
    cfg = load_config(overrides=[
        f"home={home}", f"kafka.port={stack_config.kafka.port}",
        f"kafka.controller_port={stack_config.kafka.controller_port}",
        "flink.rest_port=48081", "flink.rpc_port=46123", f"flink.cluster_spec={spec}",
        "job.checkpoint_interval_ms=1000"])
    if not cfg.jars_dir.exists() and stack_config.jars_dir.is_dir():
        cfg.jars_dir.symlink_to(stack_config.jars_dir)   # the same jars, no second download
    if not jars_present(cfg):
        pytest.skip("Kafka/Flink connector jars missing: run `make jars` first")
    cluster = FlinkCluster(cfg)
    cluster.stop()
    shutil.rmtree(cfg.flink_dir, ignore_errors=True)
    try:
        cluster.start()
        yield cfg, cluster
    finally:
        cluster.stop()


@pytest.fixture
def other_cluster(_started_other_cluster):
    """The module's cluster, whole again for each test. Why: PyFlink 2.2.1 sometimes kills a
    TaskManager as the previous test cancels its job ("Reference count must not be negative",
    seen on edge_2 on 2026-12-07); the next test's executor then waits for it, and REST lists
    one TaskManager (the session's cluster is healed per module for the same reason)."""
    cfg, cluster = _started_other_cluster
    heal_cluster(cluster)
    return cfg, cluster


def _submit(cfg, cluster, topics: dict[str, str], **hook_env: str) -> str:
    env = cluster.files.env("client")
    env["FLINK_CONF_DIR"] = str(cluster.files.conf_dir("jobmanager"))
    for name in [k for k in env if k.startswith("STREAMPLACE_HOOK_")]:
        del env[name]                       # a user's shell: nothing set for the hook
    env.update(hook_env)
    return run_python_job(
        f"{cfg.flink.host}:{cfg.flink.rest_port}", JOB,
        ["--bootstrap-servers", cfg.kafka.bootstrap_servers,
         "--connector-jar", str(flink_connector_jar(cfg)), "--input-topic", topics["in"],
         "--output-topic", topics["out"], "--dead-letter-topic", topics["dead"],
         "--job-name", topics["in"]], env, timeout_s=240)


def _executor_hosts(cluster, job_id: str) -> dict[str, set[str]]:
    hosts = {}
    for vertex in cluster.rest.get(f"/jobs/{job_id}")["vertices"]:
        if vertex["name"].startswith("streamplace-executor"):
            subtasks = cluster.rest.get(f"/jobs/{job_id}/vertices/{vertex['id']}")["subtasks"]
            hosts[vertex["name"]] = {s.get("taskmanager-id") for s in subtasks}
    return hosts


def _orders(prefix: str) -> list[str]:
    return [json.dumps({"id": f"{prefix}-{i}", "customer": f"c{i % 7}",
                        "note": "two words " * (i % 5),
                        "items": [{"price": 1.5 + i, "qty": 1 + i % 3}]}) for i in range(ORDERS)]


def _check_run(cfg, cluster, job_id: str, topics: dict[str, str]) -> None:
    """Every order of the input once in the output, the executors on edge_1 / edge_2."""
    try:
        cluster.wait_job_state(job_id, {"RUNNING"}, timeout_s=120)
        data = _orders(topics["in"])
        report = produce_raw(cfg, topics["in"], [d.encode() for d in data])
        assert report.delivered == ORDERS
        out = read_topic(cfg, topics["out"], None, expected=ORDERS, timeout_s=240, settle_s=3)
        got = Counter(json.loads(r["value"])["id"] for r in out.records)
        assert got == Counter(json.loads(d)["id"] for d in data)       # each once, none lost
        assert _executor_hosts(cluster, job_id) == {"streamplace-executor-edge_1": {"edge_1"},
                                                    "streamplace-executor-edge_2": {"edge_2"}}
        assert cluster.job(job_id)["state"] == "RUNNING"
    finally:
        cluster.cancel_job(job_id)


def _topics(name: str, cfg) -> dict[str, str]:
    topics = {"in": f"{name}-orders", "out": f"{name}-enriched", "dead": f"{name}-dead"}
    create_topics(cfg, list(topics.values()) + ["feedback"])
    return topics


def test_a_users_job_with_plain_flink_run_places_on_the_clusters_own_taskmanagers(
        other_cluster):
    """(Colocated routing on such a cluster, one router per TaskManager of it, was checked the
    same way on four TaskManagers, 300 of 300 orders, and is kept to the unit tests here:
    tests/unit/test_live_cluster.py. The suite's time is near its 30-minute goal.)"""
    cfg, cluster = other_cluster
    topics = _topics("edge-pinned", cfg)
    _check_run(cfg, cluster, _submit(cfg, cluster, topics), topics)


def test_streamplace_job_run_hands_the_hook_the_clusters_spec(other_cluster, capsys):
    """``streamplace job run`` (in-process CLI, the real ``flink run`` under it): the hook gets
    this cluster's spec from the command, so its nodes are the spec's, chosen, and live."""
    from streamplace.cli import main
    cfg, cluster = other_cluster
    topics = _topics("edge-job-run", cfg)
    argv = [f"--set=home={cfg.home}", f"--set=kafka.port={cfg.kafka.port}",
            f"--set=flink.rest_port={cfg.flink.rest_port}",
            f"--set=flink.rpc_port={cfg.flink.rpc_port}",
            f"--set=flink.cluster_spec={cfg.flink.cluster_spec}",
            "job", "run", str(JOB), "--",
            "--bootstrap-servers", cfg.kafka.bootstrap_servers,
            "--connector-jar", str(flink_connector_jar(cfg)), "--input-topic", topics["in"],
            "--output-topic", topics["out"], "--dead-letter-topic", topics["dead"],
            "--job-name", topics["in"]]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    job_id = printed.split()[1]
    assert printed.startswith(f"job {job_id} RUNNING")
    _check_run(cfg, cluster, job_id, topics)


def test_a_chosen_spec_that_is_not_the_cluster_is_refused_at_submission(other_cluster):
    cfg, cluster = other_cluster
    topics = {"in": "edge-orders-2", "out": "edge-enriched-2", "dead": "edge-dead-2"}
    create_topics(cfg, list(topics.values()))
    with pytest.raises(LaunchError) as refused:
        _submit(cfg, cluster, topics, STREAMPLACE_HOOK_CLUSTER_SPEC="hosts")
    message = str(refused.value)
    assert "cluster spec 'hosts'" in message and "registered: edge_1" in message
    assert "edge_2" in message and "STREAMPLACE_HOOK_CLUSTER_SPEC" in message
    assert os.environ.get("STREAMPLACE_HOOK_CLUSTER_SPEC") != "hosts"   # nothing leaked


def test_a_service_on_the_default_spec_serves_this_clusters_taskmanagers(other_cluster,
                                                                         tmp_path):
    """``streamplace serve`` beside this cluster, nothing telling it about edge_1/edge_2:
    it reads them from the real REST answer (cores, slots, own resource) and plans them, as
    the hook places on them. (Probed by hand with a job on three such TaskManagers: 3,000 of
    3,000 orders exactly once, the service learning and gating versions for them.)"""
    import warnings

    from placement.service.app import PlacementService
    from placement.service.settings import ServiceSettings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    cfg, cluster = other_cluster
    service = PlacementService(ServiceSettings(
        model_dir=tmp_path / "models", consume_feedback=False, port=0,
        flink_rest_url=f"http://{cfg.flink.host}:{cfg.flink.rest_port}", publish_prior=False))
    assert list(service.cluster.node_ids) == ["edge_1", "edge_2"]
    plan = TestClient(service.app).get("/plan").json()
    assert set(plan["nodes"]) == {"edge_1", "edge_2"} and plan["flink"]["reachable"], plan
