"""The one client of the Flink JobManager REST API (what the placement service watches, and what
the launcher, ``streamplace doctor``, the REST-aware partitioner and the compose stack's job
submitter talk to).

Standard library only (urllib + json): it also runs where only the router's light dependencies
are installed (a Flink Python worker, the job submitter of the compose image), and it keeps
``requests`` off the router's import path. Every call has a timeout (``timeout_s`` of the
client, or of the call); a JobManager that cannot be reached raises :class:`FlinkUnreachable`,
an HTTP error (unknown job id, ...) :class:`FlinkRestError`, both with the URL and the reason.
Callers that only poll (is it up yet? which TaskManagers registered?) use :meth:`get_or_none`,
which answers None for both.

Endpoints used (Flink 2.2 REST API): ``/overview``, ``/taskmanagers``, ``/jobs/overview``,
``/jobs/<jid>`` (its vertices), ``/jobs/<jid>/vertices/<vid>`` (subtask -> TaskManager),
``/jobmanager/config``, ``/jobs/<jid>/checkpoints``, ``/jobs/<jid>/exceptions``,
``POST /jobs/<jid>/stop`` (stop-with-savepoint), ``/jobs/<jid>/savepoints/<trigger>``,
``PATCH /jobs/<jid>?mode=cancel``; and for the engine benchmarks' diagnostics (through
:meth:`get`, :meth:`metric_values`): ``/jobs/<jid>/vertices/<vid>/metrics``, ``/jobs/<jid>/vertices/<vid>/taskmanagers``
and ``/jobs/<jid>/checkpoints/details/<id>/subtasks/<vid>``.

Example::

    flink = FlinkRestClient("http://127.0.0.1:8081", timeout_s=1.0)
    [tm["id"] for tm in flink.taskmanagers()]           # ['tm_a', 'tm_b', 'tm_c']
    job = flink.jobs()[0]["jid"]
    vertex = flink.job_vertices(job)[0]["id"]
    flink.vertex_subtasks(job, vertex)[0]["taskmanager-id"]
    flink.get_or_none("/overview")                      # None while the JobManager is down
    flink.cancel(job)
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from workload.cluster_spec import (DEFAULT_MANAGED_MB, DEFAULT_TASK_HEAP_MB, MAX_MEMORY_MB,
                                   MIN_MEMORY_MB)
from workload.limits import finite_real
from workload.model import MAX_NODE_GPUS, heap_and_managed_gb

__all__ = ["FlinkRestClient", "FlinkUnreachable", "FlinkRestError", "DEFAULT_TIMEOUT_S",
           "MAX_METRICS_QUERY_CHARS", "GPU_RESOURCE", "registered_gpus",
           "registered_memory_mb", "RegisteredTaskManager", "registered_taskmanager",
           "listed_taskmanager", "MAX_TASKMANAGER_ID_CHARS", "MAX_TASKMANAGER_CORES",
           "MAX_TASKMANAGER_SLOTS"]

#: Seconds one request may take unless the client or the call says otherwise: the service polls
#: on its request path, so a JobManager that hangs must cost it about a second, not minutes.
DEFAULT_TIMEOUT_S = 1.0

#: Bytes of an HTTP error's body kept in the exception message (Flink's errors are short JSON;
#: a proxy's HTML page must not flood a log line).
ERROR_DETAIL_BYTES = 300
#: the largest answer read (a /jobs/overview of thousands of jobs is a few MB); a larger body
#: is refused, so a broken or hostile endpoint cannot take the caller's memory
MAX_RESPONSE_BYTES = 16 << 20
#: Longest ``?get=`` list of metric ids one request carries (FlinkRestClient.metric_values)
MAX_METRICS_QUERY_CHARS = 3000


#: The external resource Flink's GPU plugin declares (``external-resources: gpu``, amount the
#: TaskManager's GPUs): how REST tells a TaskManager's GPUs
GPU_RESOURCE = "gpu"


def registered_gpus(total_resource) -> int:
    """The GPUs a TaskManager declares through Flink's GPU plugin (``totalResource`` of
    ``GET /taskmanagers``: ``extendedResources.gpu``), whole, in [0, MAX_NODE_GPUS]; 0
    when it declares none or not a number. What the hook's routers and the placement service
    both read of a TaskManager no cluster spec describes.

    >>> registered_gpus({"extendedResources": {"gpu": 2.0}}), registered_gpus({})
    (2, 0)
    """
    extended = total_resource.get("extendedResources") if isinstance(total_resource, dict) \
        else None
    amount = finite_real(extended.get(GPU_RESOURCE)) if isinstance(extended, dict) else None
    return 0 if amount is None else int(min(MAX_NODE_GPUS, max(0.0, amount)))


def registered_memory_mb(total_resource) -> tuple[int, int] | None:
    """(task heap, managed memory) in MB as REST's ``totalResource`` lists them, each clamped to
    the cluster spec's bounds; None when either is missing or not a number."""
    if not isinstance(total_resource, dict):
        return None
    numbers = [finite_real(total_resource.get(key)) for key in ("taskHeapMemory", "managedMemory")]
    if any(n is None for n in numbers):
        return None
    heap, managed = (int(min(MAX_MEMORY_MB, max(MIN_MEMORY_MB, n))) for n in numbers)
    return heap, managed


#: Longest TaskManager id believed (Flink's generated ones are about 40 characters)
MAX_TASKMANAGER_ID_CHARS = 200
#: Most CPU cores and task slots believed of one TaskManager (REST's numbers are hints for
#: the cost model and the plan, not trusted sizes)
MAX_TASKMANAGER_CORES, MAX_TASKMANAGER_SLOTS = 4096, 1024


def _mapping(value) -> dict:
    """A field that is not a JSON object reads as empty."""
    return value if isinstance(value, dict) else {}


def listed_taskmanager(entry) -> dict | None:
    """One entry of ``GET /taskmanagers`` as :meth:`FlinkRestClient.taskmanagers` gives it
    (``{id, slots, free_slots, resources, free, extended_resources, data_port, hardware,
    last_heartbeat_ms}``); None when the entry is not a JSON object."""
    if not isinstance(entry, dict):
        return None
    total = _mapping(entry.get("totalResource"))
    return {"id": entry.get("id"), "slots": entry.get("slotsNumber"),
            "free_slots": entry.get("freeSlots"), "resources": total,
            "free": _mapping(entry.get("freeResource")),
            "extended_resources": _mapping(total.get("extendedResources")),
            "data_port": entry.get("dataPort"), "hardware": _mapping(entry.get("hardware")),
            "last_heartbeat_ms": entry.get("timeSinceLastHeartbeat")}


@dataclass(frozen=True)
class RegisteredTaskManager:
    """What streamplace believes of one registered TaskManager, each number checked and
    bounded: the one reading of REST's answer that the hook (``pyflink_jobs.live_cluster``)
    and the placement service (``/plan``, the spec of a cluster it was not told about) share,
    so both place on the same cluster. Made by :func:`registered_taskmanager`."""

    node_id: str
    cpu_cores: int = 1          # REST's hardware.cpuCores, whole, in [1, MAX_TASKMANAGER_CORES]
    slots: int = 1              # its task slots, in [1, MAX_TASKMANAGER_SLOTS]
    gpus: int = 0               # Flink's GPU plugin's "gpu" resource (registered_gpus)
    memory_mb: tuple[int, int] | None = None   # (task heap, managed) (registered_memory_mb)
    #: its external resources' amounts, finite and >= 0 (others are left out)
    resources: dict[str, float] = field(default_factory=dict)

    def resource(self, name: str) -> float:
        """The amount of the external resource ``name`` it declares (0: none)."""
        return self.resources.get(name, 0.0)

    @property
    def own_resource(self) -> float:
        """The external resource named after its id: what pins the hook's executors there."""
        return self.resource(self.node_id)

    @property
    def memory_gb(self) -> float:
        """Host memory for the cost model by the cluster spec's rule; when REST is silent, the
        spec's default heap and managed memory, as a spec made of this TaskManager has."""
        return heap_and_managed_gb(*(self.memory_mb or (DEFAULT_TASK_HEAP_MB, DEFAULT_MANAGED_MB)))


def registered_taskmanager(listed) -> RegisteredTaskManager | None:
    """A :func:`listed_taskmanager` entry (``FlinkRestClient.taskmanagers()``) as a
    :class:`RegisteredTaskManager`; None when it is not one: not an object, or an id that is
    not a non-empty string of at most :data:`MAX_TASKMANAGER_ID_CHARS` characters. A number
    REST leaves out or garbles takes its default; one out of range is clamped.

    >>> tm = registered_taskmanager(listed_taskmanager({"id": "tm_a", "slotsNumber": 2,
    ...     "hardware": {"cpuCores": 8}, "totalResource": {"extendedResources": {"tm_a": 2}}}))
    >>> tm.cpu_cores, tm.slots, tm.own_resource, tm.gpus
    (8, 2, 2.0, 0)
    """
    if not isinstance(listed, dict):
        return None
    node_id = listed.get("id")
    if not isinstance(node_id, str) or not node_id or len(node_id) > MAX_TASKMANAGER_ID_CHARS:
        return None

    def bounded(value, low: float, high: float, default: float) -> float:
        number = finite_real(value)
        return default if number is None else min(high, max(low, number))

    total = _mapping(listed.get("resources"))
    amounts = {name: finite_real(amount)
               for name, amount in _mapping(listed.get("extended_resources")).items()}
    return RegisteredTaskManager(
        node_id,
        cpu_cores=int(bounded(_mapping(listed.get("hardware")).get("cpuCores"), 1.0,
                              MAX_TASKMANAGER_CORES, 1.0)),
        slots=int(bounded(listed.get("slots"), 1.0, MAX_TASKMANAGER_SLOTS, 1.0)),
        gpus=registered_gpus(total), memory_mb=registered_memory_mb(total),
        resources={name: max(0.0, amount) for name, amount in amounts.items()
                   if isinstance(name, str) and amount is not None})


class FlinkUnreachable(ConnectionError):
    """The JobManager's REST API did not answer (down, wrong address, timeout); ``reason``:
    what the connection attempt said (empty when not known)."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason


class FlinkRestError(RuntimeError):
    """The REST API answered with an HTTP error (e.g. 404 for an unknown job), or with a body
    that is not JSON (``status`` 200 then)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def _checked_base_url(base_url: str) -> str:
    # A URL without scheme or host would fail every request with a confusing urllib error;
    # the address comes from settings and flags, so say what is wrong once, up front.
    if not isinstance(base_url, str):
        raise ValueError(f"Flink REST URL must be a string, got {base_url!r}")
    parts = urllib.parse.urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"Flink REST URL {base_url!r} must look like http://host:port")
    return base_url.strip().rstrip("/")


def _checked_timeout(timeout_s: float) -> float:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
            or not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ValueError(f"timeout_s must be a finite number of seconds > 0, got {timeout_s!r}")
    return float(timeout_s)


class FlinkRestClient:
    """JSON client of one JobManager; ``timeout_s`` applies to each request (a call's own
    ``timeout_s`` overrides it)."""

    def __init__(self, base_url: str = "http://127.0.0.1:8081",
                 timeout_s: float = DEFAULT_TIMEOUT_S):
        self.base_url = _checked_base_url(base_url)
        self.timeout_s = _checked_timeout(timeout_s)

    # -- transport ---------------------------------------------------------------------------
    def request(self, method: str, path: str, body: dict | None = None,
                timeout_s: float | None = None):
        """The decoded JSON body of ``method base_url + path`` (``body`` sent as JSON); None
        for an empty body (Flink answers some PATCHes with none)."""
        url = f"{self.base_url}/{path.lstrip('/')}"
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        timeout = self.timeout_s if timeout_s is None else _checked_timeout(timeout_s)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:ERROR_DETAIL_BYTES].decode("utf-8", "replace")
            raise FlinkRestError(f"Flink REST {method} {url} answered HTTP {exc.code}: "
                                 f"{detail}", exc.code) from None
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError,
                OSError, http.client.HTTPException) as exc:
            # HTTPException: something answered on the port, but not HTTP (or hung up mid-way).
            reason = getattr(exc, "reason", None) or exc
            raise FlinkUnreachable(f"Flink REST API at {self.base_url} is unreachable "
                                   f"({reason}); is the cluster running "
                                   "(streamplace cluster status)?", str(reason)) from None
        if len(raw) > MAX_RESPONSE_BYTES:
            raise FlinkRestError(f"Flink REST {method} {url} answered more than "
                                 f"{MAX_RESPONSE_BYTES:,} bytes: refused", 200)
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise FlinkRestError(f"Flink REST {url} did not return JSON: {raw[:100]!r}",
                                 200) from None

    def get(self, path: str, timeout_s: float | None = None):
        """The decoded JSON body of ``GET base_url + path``."""
        return self.request("GET", path, timeout_s=timeout_s)

    def get_or_none(self, path: str, timeout_s: float | None = None):
        """:meth:`get`, or None when the JobManager is unreachable, answers an HTTP error or
        no JSON: for polling, where "not (yet) there" is an answer, not a failure."""
        try:
            return self.get(path, timeout_s=timeout_s)
        except (FlinkUnreachable, FlinkRestError):
            return None

    def post(self, path: str, body: dict, timeout_s: float | None = None):
        """The decoded JSON answer of ``POST base_url + path`` with ``body`` as JSON."""
        return self.request("POST", path, body, timeout_s=timeout_s)

    def patch(self, path: str, body: dict | None = None, timeout_s: float | None = None):
        """The decoded JSON answer (None when empty) of ``PATCH base_url + path``."""
        return self.request("PATCH", path, body, timeout_s=timeout_s)

    # -- what the service and the launcher read ----------------------------------------------
    def overview(self) -> dict:
        """Cluster overview: taskmanagers, slots-total, slots-available, jobs-running, ..."""
        return self.get("/overview")

    def taskmanagers(self) -> list[dict]:
        """Every registered TaskManager as ``{id, slots, free_slots, resources, free,
        data_port, hardware, extended_resources}`` (``resources``/``free``: Flink's
        totalResource/freeResource; ``extended_resources``: external resources such as the
        per-node one the placement plan uses, e.g. ``{"tm_a": 4.0}``)."""
        answer = self.get("/taskmanagers")
        entries = answer.get("taskmanagers") if isinstance(answer, dict) else None
        # an entry that is not a TaskManager's object is not one
        return [tm for tm in map(listed_taskmanager, entries if isinstance(entries, list) else [])
                if tm is not None]

    def jobs(self) -> list[dict]:
        """``{jid, name, state, start-time, ...}`` for every job the JobManager knows."""
        return self.get("/jobs/overview").get("jobs", [])

    def job_vertices(self, job_id: str) -> list[dict]:
        """The job's operators (vertices): ``{id, name, parallelism, status, ...}``."""
        return self.get(f"/jobs/{job_id}").get("vertices", [])

    def vertex_subtasks(self, job_id: str, vertex_id: str) -> list[dict]:
        """Where each parallel instance of a vertex runs: ``{subtask, taskmanager-id,
        endpoint, attempt, status}``."""
        keys = ("subtask", "taskmanager-id", "endpoint", "attempt", "status")
        return [{k: s.get(k) for k in keys}
                for s in self.get(f"/jobs/{job_id}/vertices/{vertex_id}").get("subtasks", [])]

    def metric_values(self, path: str, ids: list[str],
                      max_query_chars: int = MAX_METRICS_QUERY_CHARS) -> list[dict]:
        """``{id, value}`` of the metrics ``ids`` at a metrics ``path`` (e.g.
        ``/jobs/<jid>/vertices/<vid>/metrics``), asked ``?get=id,id,...`` in as many requests
        as keep each query under ``max_query_chars``: Flink refuses a longer request line
        (HTTP 404 "bad-request"), which a vertex's gauges over a few subtasks pass."""
        values, chunk, chars = [], [], 0
        for metric in ids:
            if chunk and chars + len(metric) + 1 > max_query_chars:
                values += self.get(f"{path}?get={urllib.parse.quote(','.join(chunk), safe=',')}")
                chunk, chars = [], 0
            chunk.append(metric)
            chars += len(metric) + 1
        if chunk:
            values += self.get(f"{path}?get={urllib.parse.quote(','.join(chunk), safe=',')}")
        return values

    def jobmanager_config(self) -> dict[str, str]:
        """The JobManager's effective configuration as ``{key: value}``."""
        return {e["key"]: e["value"] for e in self.get("/jobmanager/config")
                if isinstance(e, dict) and "key" in e and "value" in e}

    # -- job control -------------------------------------------------------------------------
    def trigger_stop_with_savepoint(self, job_id: str, target_directory: str,
                                    drain: bool = False, timeout_s: float | None = None) -> str:
        """Ask Flink to stop ``job_id`` with a savepoint into ``target_directory``; returns the
        trigger id to poll with :meth:`savepoint_status`."""
        answer = self.post(f"/jobs/{job_id}/stop",
                           {"drain": drain, "targetDirectory": target_directory},
                           timeout_s=timeout_s)
        trigger = answer.get("request-id") if isinstance(answer, dict) else None
        if not isinstance(trigger, str) or not trigger:
            raise FlinkRestError(f"stop-with-savepoint of {job_id}: Flink answered no "
                                 f"request-id: {str(answer)[:200]}", 200)
        return trigger

    def savepoint_status(self, job_id: str, trigger: str) -> dict | None:
        """Flink's status of a savepoint trigger (``{status: {id}, operation: {location |
        failure-cause}}``), or None when it cannot be read now."""
        return self.get_or_none(f"/jobs/{job_id}/savepoints/{trigger}")

    def cancel(self, job_id: str, timeout_s: float | None = None) -> None:
        """Cancel ``job_id`` (Flink answers at once; the job reaches CANCELED later)."""
        self.patch(f"/jobs/{job_id}?mode=cancel", timeout_s=timeout_s)
