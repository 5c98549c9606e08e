"""``streamplace doctor``: does an existing Flink cluster have what the hook needs?

Checks, through the Flink REST API (and the local file system where the cluster is local):

1. the JobManager answers;
2. fine-grained resource management is on (the hook pins executors with it);
3. every TaskManager offers an external resource named after its resource id (one unit per
   executor instance the plan may pin there);
4. ``python.executable`` is set and, when that interpreter exists on this machine, it can import
   streamplace, the hook and pyflink;
5. the Kafka connector jar is present (the hook's jobs add it with ``env.add_jars``).

Each check says OK, WARN or MISSING with what to change. Exit code 1 when something required is
missing.

Example::

    $ streamplace doctor --rest-url http://127.0.0.1:8081
    OK       jobmanager        Flink 2.2.1 at http://127.0.0.1:8081, 3 TaskManagers
    OK       fine-grained      cluster.fine-grained-resource-management.enabled = true
    ...
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from placement.service.flink_rest import FlinkRestClient, FlinkRestError, FlinkUnreachable

__all__ = ["Check", "run_checks", "format_checks", "check_taskmanager_resources"]

OK, WARN, MISSING = "OK", "WARN", "MISSING"


@dataclass(frozen=True)
class Check:
    name: str
    status: str   # OK | WARN | MISSING
    detail: str
    fix: str = ""


def check_taskmanager_resources(taskmanagers: list[dict]) -> list[Check]:
    """One check per TaskManager: an external resource named after its id, amount >= 1."""
    checks = []
    for tm in sorted(taskmanagers, key=lambda t: str(t.get("id"))):
        tm_id = tm.get("id", "?")
        extended = (tm.get("totalResource") or {}).get("extendedResources") or {}
        amount = extended.get(tm_id)
        if amount is None:
            others = f" (it has {sorted(extended)})" if extended else ""
            checks.append(Check(f"resource:{tm_id}", MISSING,
                                f"no external resource named {tm_id!r}{others}",
                                f"start it with -D external-resources={tm_id} "
                                f"-D external-resource.{tm_id}.amount=<instances>"))
        elif float(amount) < 1:
            checks.append(Check(f"resource:{tm_id}", MISSING, f"{tm_id} amount {amount} < 1",
                                f"-D external-resource.{tm_id}.amount=<instances, at least 1>"))
        else:
            checks.append(Check(f"resource:{tm_id}", OK,
                                f"external resource {tm_id} = {float(amount):g} "
                                "(most executor instances it can host)"))
    from pyflink_jobs.flink_ops import ROUTER_RESOURCE
    without = sorted(str(tm.get("id", "?")) for tm in taskmanagers
                     if ((tm.get("totalResource") or {}).get("extendedResources") or {})
                     .get(ROUTER_RESOURCE) is None)
    if without:  # only the hook's colocated routing needs it: a warning, not a failure
        checks.append(Check(f"resource:{ROUTER_RESOURCE}", WARN,
                            f"no {ROUTER_RESOURCE} resource on {without}: routing='colocated' "
                            "cannot place its routers there",
                            f"add {ROUTER_RESOURCE} to external-resources, with "
                            f"-D external-resource.{ROUTER_RESOURCE}.amount=1"))
    return checks


def _python_check(executable: str | None) -> Check:
    if not executable:
        return Check("python", MISSING, "python.executable is not set",
                     "set python.executable (and python.client.executable) to a virtualenv "
                     "with streamplace installed, or ship it with python.archives")
    path = Path(executable)
    if not path.exists():
        return Check("python", WARN, f"python.executable = {executable} (not on this machine: "
                     "cannot check it from here)",
                     "make sure streamplace is installed in that interpreter on every host")
    probe = "import streamplace, pyflink_jobs.hook, pyflink; print(pyflink.__file__)"
    try:
        done = subprocess.run([str(path), "-c", probe], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("python", MISSING, f"{executable} did not run: {exc}")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return Check("python", MISSING, f"{executable} cannot import the hook: {last}",
                     f"{executable} -m pip install streamplace")
    return Check("python", OK, f"{executable} imports streamplace, the hook and pyflink")


def run_checks(rest_url: str, connector_jar: Path | None = None,
               timeout_s: float = 5.0) -> list[Check]:
    """The checks of the module docstring against the JobManager at ``rest_url`` (each REST
    call waits at most ``timeout_s``); one MISSING ``jobmanager`` check when it does not answer."""
    rest_url = rest_url.rstrip("/")
    try:
        flink = FlinkRestClient(rest_url, timeout_s=timeout_s)
        overview = flink.overview()
        if not isinstance(overview, dict):
            raise FlinkRestError(f"/overview answered {str(overview)[:100]}, not an object", 200)
    except FlinkUnreachable as exc:
        return [Check("jobmanager", MISSING, f"no Flink REST API at {rest_url} ({exc.reason})",
                      "start the cluster (streamplace cluster start) or pass --rest-url")]
    except (FlinkRestError, ValueError) as exc:  # an HTTP error, not JSON, or a bad URL
        return [Check("jobmanager", MISSING, f"no Flink REST API at {rest_url} ({exc})",
                      "start the cluster (streamplace cluster start) or pass --rest-url")]
    checks = [Check("jobmanager", OK, f"Flink {overview.get('flink-version', '?')} at "
                    f"{rest_url}, {overview.get('taskmanagers', 0)} TaskManagers")]
    config = flink.jobmanager_config()
    key = "cluster.fine-grained-resource-management.enabled"
    if str(config.get(key, "false")).lower() == "true":
        checks.append(Check("fine-grained", OK, f"{key} = true"))
    else:
        checks.append(Check("fine-grained", MISSING, f"{key} is not true",
                            f"set {key}: true (or route with the REST-aware partitioner, see "
                            "docs/hook.md)"))
    # Flink's own records (totalResource.extendedResources), as check_taskmanager_resources
    # reads them; the client's taskmanagers() reshapes them for the service.
    taskmanagers = (flink.get("/taskmanagers") or {}).get("taskmanagers", [])
    if not taskmanagers:
        checks.append(Check("taskmanagers", MISSING, "no TaskManager is registered"))
    checks.extend(check_taskmanager_resources(taskmanagers))
    checks.append(_python_check(config.get("python.executable")))
    if connector_jar is not None:
        if Path(connector_jar).exists():
            checks.append(Check("connector-jar", OK, str(connector_jar)))
        else:
            checks.append(Check("connector-jar", MISSING, f"{connector_jar} does not exist",
                                "streamplace jars"))
    return checks


def format_checks(checks: list[Check]) -> str:
    lines = []
    for check in checks:
        lines.append(f"{check.status:<8} {check.name:<17} {check.detail}")
        if check.fix and check.status != OK:
            lines.append(f"{'':<8} {'':<17} fix: {check.fix}")
    return "\n".join(lines)
