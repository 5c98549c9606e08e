"""The hook changes where work runs, never what a job computes, also where the result depends
on more than each record's own output: event-time windows after the hooked operator (each
record's timestamp kept, no watermark passing a record still in flight, on the one-step path
and on the async executors' path) and the Table API on both sides of it. Each job runs as a
plain script in its own mini cluster, plain and hooked, on the same input; their results must
be equal (``tests/integration/jobs/semantics_job.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamplace.jars import flink_connector_jar
from streamplace.topics import create_topics

JOB = Path(__file__).resolve().parent / "jobs" / "semantics_job.py"
ROOT = Path(__file__).resolve().parents[2]
OUTPUTS_MARK = "STREAMPLACE_OUTPUTS "


def _run(stack_config, job: str, mode: str) -> list[str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        [sys.executable, str(JOB), "--job", job, "--mode", mode,
         "--bootstrap-servers", stack_config.kafka.bootstrap_servers,
         "--connector-jar", str(flink_connector_jar(stack_config))],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    marked = [line for line in done.stdout.splitlines() if line.startswith(OUTPUTS_MARK)]
    assert len(marked) == 1, done.stdout[-3000:]
    return json.loads(marked[0][len(OUTPUTS_MARK):])


@pytest.fixture(scope="module")
def plain_results(stack_config, kafka_broker):
    create_topics(stack_config, ["feedback"])
    return {job: _run(stack_config, job, "plain") for job in ("event-time", "table")}


@pytest.mark.parametrize("job, mode", [("event-time", "hook"), ("event-time", "hook-async"),
                                       ("table", "hook")])
def test_hooked_results_equal_the_plain_jobs(stack_config, plain_results, job, mode):
    hooked = _run(stack_config, job, mode)
    plain = plain_results[job]
    # 300 records, 3 keys, 20 s windows of 1 s apart: 45 windows; 300 rows through SQL
    assert len(plain) == (45 if job == "event-time" else 300)
    assert hooked == plain
