"""One job on a running Flink cluster: the ``flink run`` client call that submits it and the
REST wait loops for its state and for its stop-with-savepoint.

Separate from :class:`streamplace.flink_cluster.FlinkCluster`, which starts, stops and
inspects the cluster's processes: these pieces need only the client command line or a
:class:`~placement.service.flink_rest.FlinkRestClient`, none of the processes' state.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from placement.service.flink_rest import FlinkRestClient
from streamplace.flink_files import flink_home
from streamplace.processes import LaunchError

__all__ = ["run_python_job", "wait_for_job_state", "wait_for_savepoint"]


def run_python_job(address: str, script: Path, args: list[str], env: dict[str, str],
                   timeout_s: float, restore_from: str | None = None) -> str:
    """``flink run -d -py script -- args`` against the JobManager at ``address``
    (``host:port``), client and Python workers on this interpreter; returns the job id.
    ``restore_from``: a savepoint or retained checkpoint to start from (state of operators
    that no longer exist is skipped: ``--allowNonRestoredState``)."""
    restore = ["-s", restore_from, "-n"] if restore_from else []
    cmd = [str(flink_home() / "bin" / "flink"), "run", "-d", "-m", address, *restore,
           "-pyexec", sys.executable, "-pyclientexec", sys.executable,
           "-py", str(script), *args]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
    output = result.stdout + result.stderr
    match = re.search(r"JobID ([0-9a-f]{32})", output)
    if result.returncode != 0 or not match:
        raise LaunchError(f"flink run failed (exit {result.returncode}):\n{output[-6000:]}")
    return match.group(1)


def wait_for_job_state(rest: FlinkRestClient, job_id: str, states: set[str],
                       timeout_s: float) -> str:
    """Poll ``job_id`` until it is in one of ``states`` and return that state; LaunchError
    (with the job's exceptions) when it ends in another, or when ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    state = "UNKNOWN"
    while time.monotonic() < deadline:
        info = rest.get_or_none(f"/jobs/{job_id}")
        if info:
            state = info.get("state", "UNKNOWN")
            if state in states:
                return state
            if state in {"FAILED", "CANCELED", "FINISHED"} and state not in states:
                raise LaunchError(f"job {job_id} is {state}: "
                                  f"{(rest.get_or_none(f'/jobs/{job_id}/exceptions') or {})}")
        time.sleep(0.5)
    raise LaunchError(f"job {job_id} did not reach {states} within {timeout_s:.0f} s "
                      f"(last state {state})")


def wait_for_savepoint(rest: FlinkRestClient, job_id: str, trigger: str,
                       timeout_s: float) -> str:
    """Poll the stop-with-savepoint ``trigger`` of ``job_id`` until it completes; returns the
    savepoint path, LaunchError when it failed or did not finish within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = rest.savepoint_status(job_id, trigger) or {}
        if status.get("status", {}).get("id") == "COMPLETED":
            operation = status.get("operation") or {}
            if "location" in operation:
                return operation["location"]
            raise LaunchError(f"stop-with-savepoint of {job_id} failed: "
                              f"{operation.get('failure-cause', operation)}")
        time.sleep(0.5)
    raise LaunchError(f"stop-with-savepoint of {job_id} did not finish in {timeout_s:.0f} s")
