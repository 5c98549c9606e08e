"""The placement service's client, for routers inside Flink Python workers and for scripts.

Import-light on purpose (standard library only: urllib, json, hashlib): it runs in every Flink
Python worker, where torch and HTTP libraries would cost start-up time and memory. Every call
has a short timeout; when the service is down, slow or unreachable the client raises
:class:`ServiceUnavailable`, so a router keeps its last model (or the least-loaded fallback)
and loses nothing. An HTTP error answer (401, 404, 422, ...) raises :class:`ServiceError` with
the service's message.

Example::

    client = PlacementClient("http://127.0.0.1:8471", token=None, timeout_s=1.0)
    try:
        meta = client.latest()                   # None while no version exists
        if meta and meta["version"] != my_version:
            weights = client.download(meta["version"])   # sha256-checked bytes
    except ServiceUnavailable:
        pass                                     # keep deciding with what we have
"""

from __future__ import annotations

import hashlib
import json
import socket
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["PlacementClient", "ServiceUnavailable", "ServiceError"]


class ServiceUnavailable(ConnectionError):
    """The service did not answer (down, refused, timed out): fall back, do not fail."""


class ServiceError(RuntimeError):
    """The service answered with an error; ``status`` is the HTTP status, ``detail`` its
    message (FastAPI's ``detail``)."""

    def __init__(self, message: str, status: int, detail=None):
        super().__init__(message)
        self.status = status
        self.detail = detail


class PlacementClient:
    """Talks to ``streamplace serve`` at ``base_url``; ``token`` is sent as a bearer token."""

    def __init__(self, base_url: str = "http://127.0.0.1:8471", token: str | None = None,
                 timeout_s: float = 1.0):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    # -- transport ----------------------------------------------------------------------------
    def _request(self, method: str, path: str, body=None, raw: bool = False):
        url = self.base_url + path
        headers = {"Accept": "application/octet-stream" if raw else "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                payload = response.read()
                response_headers = dict(response.headers.items())
        except urllib.error.HTTPError as exc:
            text = exc.read().decode("utf-8", "replace")
            try:
                detail = json.loads(text).get("detail", text)
            except (ValueError, AttributeError):
                detail = text
            raise ServiceError(f"{method} {url} -> HTTP {exc.code}: {detail}", exc.code,
                               detail) from None
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError,
                OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServiceUnavailable(f"placement service at {self.base_url} is unavailable: "
                                     f"{reason}") from None
        if raw:
            return payload, response_headers
        try:
            return json.loads(payload)
        except ValueError:
            raise ServiceError(f"{method} {url} did not return JSON", 200) from None

    # -- API ----------------------------------------------------------------------------------
    def health(self) -> dict:
        """``GET /health`` (no token needed)."""
        return self._request("GET", "/health")

    def models(self) -> list[dict]:
        """Metadata of every kept version, oldest first."""
        return self._request("GET", "/models")["versions"]

    def latest(self) -> dict | None:
        """Metadata of the newest model version, or None when there is none yet."""
        try:
            return self._request("GET", "/models/latest")
        except ServiceError as exc:
            if exc.status == 404:
                return None
            raise

    def model(self, version: int) -> dict:
        """Metadata of one version (``ServiceError`` 404 if unknown)."""
        return self._request("GET", f"/models/{int(version)}")

    def download(self, version: int, metadata: dict | None = None) -> bytes:
        """The model file of ``version``, checked against the sha256 in its metadata (fetched
        unless given); a mismatch raises ``ServiceError``."""
        meta = metadata or self.model(version)
        data, headers = self._request("GET", f"/models/{int(version)}/weights", raw=True)
        digest = hashlib.sha256(data).hexdigest()
        if digest != meta["sha256"]:
            raise ServiceError(f"model version {version}: downloaded {len(data)} bytes with "
                               f"sha256 {digest}, metadata says {meta['sha256']}", 200)
        return data

    def decide(self, tasks: list[dict], nodes: list[dict] | None = None) -> list[dict]:
        """``POST /decide``: tasks ``{task_id, app_id, input_size}``; nodes optional
        ``{node_id, cpu_util, ..., queue_depth}``. Returns ``{task_id, node, reason, scores}``
        per task."""
        body = {"tasks": list(tasks)}
        if nodes is not None:
            body["nodes"] = list(nodes)
        return self._request("POST", "/decide", body)

    def plan(self, max_total: int | None = None) -> dict:
        """``GET /plan``: executor instances per TaskManager."""
        query = f"?{urllib.parse.urlencode({'max_total': max_total})}" if max_total else ""
        return self._request("GET", f"/plan{query}")

    def costs(self) -> dict:
        """``GET /costs``: the measured work-time fits a new router starts from
        (:mod:`placement.cost_snapshot`; validate before use: ``seed_costs`` does)."""
        return self._request("GET", "/costs")

    def cluster(self) -> dict:
        """``GET /cluster``: TaskManagers (Flink REST) merged with the latest feedback."""
        return self._request("GET", "/cluster")

    def tenants(self) -> dict:
        """``GET /tenants``: per-tenant completions, latencies and deadline misses."""
        return self._request("GET", "/tenants")
