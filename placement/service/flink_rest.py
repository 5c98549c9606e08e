"""A small client of the Flink JobManager REST API (what the placement service watches).

Standard library only (urllib + json): it also runs where only the router's light dependencies
are installed. Every call has a timeout; a JobManager that cannot be reached raises
:class:`FlinkUnreachable`, an HTTP error (unknown job id, ...) :class:`FlinkRestError`, both
with the URL and the reason.

Endpoints used (Flink 2.2 REST API): ``/overview``, ``/taskmanagers``, ``/jobs/overview``,
``/jobs/<jid>`` (its vertices), ``/jobs/<jid>/vertices/<vid>`` (subtask -> TaskManager).

Example::

    flink = FlinkRestClient("http://127.0.0.1:8081", timeout_s=1.0)
    [tm["id"] for tm in flink.taskmanagers()]           # ['tm_a', 'tm_b', 'tm_c']
    job = flink.jobs()[0]["jid"]
    vertex = flink.job_vertices(job)[0]["id"]
    flink.vertex_subtasks(job, vertex)[0]["taskmanager-id"]
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

__all__ = ["FlinkRestClient", "FlinkUnreachable", "FlinkRestError"]


class FlinkUnreachable(ConnectionError):
    """The JobManager's REST API did not answer (down, wrong address, timeout)."""


class FlinkRestError(RuntimeError):
    """The REST API answered with an HTTP error (e.g. 404 for an unknown job)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class FlinkRestClient:
    """GET-only JSON client of one JobManager; ``timeout_s`` applies to each request."""

    def __init__(self, base_url: str = "http://127.0.0.1:8081", timeout_s: float = 1.0):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def get(self, path: str):
        """The decoded JSON body of ``GET base_url + path``."""
        url = f"{self.base_url}/{path.lstrip('/')}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode("utf-8", "replace")
            raise FlinkRestError(f"Flink REST {url} answered HTTP {exc.code}: {detail}",
                                 exc.code) from None
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError,
                OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise FlinkUnreachable(f"Flink REST API at {self.base_url} is unreachable "
                                   f"({reason}); is the cluster running "
                                   "(streamplace cluster status)?") from None
        try:
            return json.loads(body)
        except ValueError:
            raise FlinkRestError(f"Flink REST {url} did not return JSON: {body[:100]!r}",
                                 200) from None

    def overview(self) -> dict:
        """Cluster overview: taskmanagers, slots-total, slots-available, jobs-running, ..."""
        return self.get("/overview")

    def taskmanagers(self) -> list[dict]:
        """Every registered TaskManager as ``{id, slots, free_slots, resources, free,
        data_port, hardware, extended_resources}`` (``resources``/``free``: Flink's
        totalResource/freeResource; ``extended_resources``: external resources such as the
        per-node one the placement plan uses, e.g. ``{"tm_a": 4.0}``)."""
        out = []
        for tm in self.get("/taskmanagers").get("taskmanagers", []):
            total = tm.get("totalResource") or {}
            out.append({"id": tm.get("id"), "slots": tm.get("slotsNumber"),
                        "free_slots": tm.get("freeSlots"), "resources": total,
                        "free": tm.get("freeResource") or {},
                        "extended_resources": total.get("extendedResources") or {},
                        "data_port": tm.get("dataPort"), "hardware": tm.get("hardware") or {},
                        "last_heartbeat_ms": tm.get("timeSinceLastHeartbeat")})
        return out

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
