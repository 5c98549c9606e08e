"""A user's hooked job run as a plain script (``python my_job.py``: PyFlink's mini cluster in
the script's own process, no standalone cluster) runs and finishes with every output once.

There are no TaskManagers to pin executors to there, and the mini cluster has only as many
slots as the job's largest parallelism: the hook puts all its operators in the default slot
sharing group (``StreamplaceHook.local``). Before that, such a job failed at once with
NoResourceAvailableException. Also checked here: a job that names no dead-letter topic keeps
running past records its operator raises on (PyFlink fails an operator whose side output nobody
reads: ``flink_ops.DeadLetterLog`` reads and logs them), and two hooks in one job get uids of
their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from streamplace.jars import flink_connector_jar
from streamplace.topics import create_topics

JOB = Path(__file__).resolve().parent / "jobs" / "local_job.py"
ROOT = Path(__file__).resolve().parents[2]
OUTPUTS_MARK = "STREAMPLACE_OUTPUTS "  # how jobs/local_job.py marks its line of outputs
RECORDS = 60


def _expected(operator: str, twice: bool) -> Counter:
    ids = [i for i in range(RECORDS) if operator != "picky" or (i % 5 != 4 and i % 7 != 6)]
    return Counter(json.dumps({"id": i, "text": f"RECORD {i}"}) + ("!" if twice else "")
                   for i in ids)


@pytest.mark.parametrize("operator, twice", [("map", False), ("async", False),
                                             ("picky", True)])
def test_a_hooked_script_runs_in_its_own_mini_cluster(stack_config, kafka_broker, operator,
                                                      twice):
    """``picky`` raises on every 5th record, returns an int where the job's type is STRING on
    every 7th, and the job names no dead-letter topic: those records are logged as dead
    letters, the rest come out; ``twice``: two hooks in one job."""
    create_topics(stack_config, ["feedback"])
    env = dict(os.environ)
    # PyFlink starts its Python workers with the `python` on PATH, as in the user's venv
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        [sys.executable, str(JOB), "--bootstrap-servers", stack_config.kafka.bootstrap_servers,
         "--connector-jar", str(flink_connector_jar(stack_config)), "--records", str(RECORDS),
         "--operator", operator] + (["--twice"] if twice else []),
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "local execution" in done.stderr  # the hook said how it runs here
    # the marked line, not the last: the mini cluster's JVM sometimes prints a stack trace to
    # stdout as it shuts down, after the job's own output (seen once in about six runs)
    marked = [line for line in done.stdout.splitlines() if line.startswith(OUTPUTS_MARK)]
    assert len(marked) == 1, done.stdout[-3000:]
    outputs = json.loads(marked[0][len(OUTPUTS_MARK):])
    assert Counter(outputs) == _expected(operator, twice)
