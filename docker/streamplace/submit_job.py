"""One-shot job submitter of the compose stack (service ``submit-job``).

Waits until every TaskManager of the cluster spec has registered with the JobManager, then
submits ``pyflink_jobs/task_pipeline.py`` with the streamplace hook (``--placement hook``:
router + one pinned IAWP executor per TaskManager) through ``flink run -d``, and waits until the
job is RUNNING. A job of the same name that already runs is left alone (``docker compose up``
twice submits once).

Why not ``streamplace job submit``: it drives the local cluster of ``streamplace up`` (its
configuration folders, and the jars `make jars` fetches with Maven); here the cluster is the
compose stack's and the connector jar is baked into the image.

Settings come from the streamplace configuration (``$STREAMPLACE_CONFIG``: broker, topics,
Flink REST, cluster spec, checkpointing) and a few variables of the compose file:
``JOB_PLAN`` (e.g. ``tm_fast=3,tm_slow=1``; empty: the placement service's plan),
``JOB_POLICY`` (``ldwp`` or a placement.policies rule), ``PLACEMENT_SERVICE_URL``,
``KAFKA_CONNECTOR_JAR``, and ``STREAMPLACE_SERVICE_TOKEN`` (the routers send it to the service).

It runs with the image's virtualenv (``/opt/streamplace/venv/bin/python``), where streamplace
and its packages are installed: the Flink REST calls go through the one client,
:class:`placement.service.flink_rest.FlinkRestClient`, and the cluster spec through
:mod:`workload.cluster_spec`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from placement.service.flink_rest import FlinkRestClient

PIPELINE = "/opt/streamplace/src/pyflink_jobs/task_pipeline.py"
VENV_PYTHON = "/opt/streamplace/venv/bin/python"
DEFAULT_JAR = "/opt/streamplace/jars/flink-sql-connector-kafka-5.0.0-2.2.jar"
#: Seconds one REST poll may take (the JobManager container may still be starting).
REST_TIMEOUT_S = 5.0


def pipeline_args(config, environ=os.environ) -> list[str]:
    """The ``task_pipeline.py`` flags for the compose stack (each a PipelineSettings field)."""
    settings = {
        "bootstrap_servers": config.kafka.bootstrap_servers,
        "connector_jar": environ.get("KAFKA_CONNECTOR_JAR", DEFAULT_JAR),
        "topic_tasks": config.job.topic_tasks, "topic_results": config.job.topic_results,
        "topic_dead_letter": config.job.topic_dead_letter,
        "topic_feedback": config.job.topic_feedback,
        "checkpoint_interval_ms": config.job.checkpoint_interval_ms,
        "transaction_timeout_ms": config.job.transaction_timeout_ms,
        "executor_capacity": config.job.executor_capacity,
        "executor_timeout_s": config.job.executor_timeout_s,
        "placement": "hook", "executor": "iawp", "node_scheduler": "iawp",
        "policy": environ.get("JOB_POLICY", "ldwp"),
        "service_url": environ.get("PLACEMENT_SERVICE_URL", "http://placement:8471"),
        "service_token": environ.get("STREAMPLACE_SERVICE_TOKEN", ""),
        "plan": environ.get("JOB_PLAN", ""),
        "cluster_spec": config.flink.cluster_spec,
        "rest_url": config.flink.rest_url,
    }
    args: list[str] = []
    for key, value in settings.items():
        args += ["--" + key.replace("_", "-"), str(value)]
    return args


def _get(rest_url: str, path: str):
    """The JSON at ``rest_url + path``, None while the JobManager cannot answer it."""
    return FlinkRestClient(rest_url, timeout_s=REST_TIMEOUT_S).get_or_none(path)


def wait_for_taskmanagers(rest_url: str, expected: set[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    registered: set[str] = set()
    while time.monotonic() < deadline:
        overview = _get(rest_url, "/taskmanagers") or {}
        registered = {tm["id"] for tm in overview.get("taskmanagers", [])}
        if expected <= registered:
            print(f"submit-job: TaskManagers registered: {sorted(registered)}", flush=True)
            return
        time.sleep(2)
    raise SystemExit(f"submit-job: TaskManagers {sorted(expected - registered)} did not register "
                     f"within {timeout_s:.0f} s (registered: {sorted(registered)})")


def running_job(rest_url: str, name: str) -> str | None:
    for job in (_get(rest_url, "/jobs/overview") or {}).get("jobs", []):
        if job.get("name") == name and job.get("state") in ("RUNNING", "CREATED", "RESTARTING"):
            return job.get("jid")
    return None


def main() -> int:
    from streamplace.config import load_config
    from workload.cluster_spec import load_cluster_spec
    config = load_config()
    rest_url = config.flink.rest_url
    timeout_s = float(os.environ.get("SUBMIT_TIMEOUT_S", "300"))
    expected = {tm.id for tm in load_cluster_spec(config.flink.cluster_spec).taskmanagers}
    wait_for_taskmanagers(rest_url, expected, timeout_s)
    existing = running_job(rest_url, "streamplace-task-pipeline")
    if existing:
        print(f"submit-job: job {existing} already runs; nothing to do", flush=True)
        return 0
    host_port = rest_url.split("://", 1)[-1]
    cmd = ["/opt/flink/bin/flink", "run", "-d", "-m", host_port,
           "-pyexec", VENV_PYTHON, "-pyclientexec", VENV_PYTHON, "-py", PIPELINE,
           *pipeline_args(config)]
    shown = ["***" if i and cmd[i - 1] == "--service-token" else part
             for i, part in enumerate(cmd)]
    print("submit-job: " + " ".join(shown), flush=True)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    output = result.stdout + result.stderr
    match = re.search(r"JobID ([0-9a-f]{32})", output)
    if result.returncode != 0 or not match:
        print(output[-6000:], file=sys.stderr)
        return 1
    job_id = match.group(1)
    deadline = time.monotonic() + timeout_s
    state = "UNKNOWN"
    while time.monotonic() < deadline:
        state = (_get(rest_url, f"/jobs/{job_id}") or {}).get("state", "UNKNOWN")
        if state == "RUNNING":
            print(f"submit-job: job {job_id} RUNNING (Flink web UI: #/job/running/{job_id})",
                  flush=True)
            return 0
        if state in ("FAILED", "CANCELED", "FINISHED"):
            break
        time.sleep(1)
    print(f"submit-job: job {job_id} is {state}: "
          f"{_get(rest_url, f'/jobs/{job_id}/exceptions')}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
