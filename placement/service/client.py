"""The placement service's client, for routers inside Flink Python workers and for scripts.

Import-light on purpose (standard library only: urllib, json, hashlib): it runs in every Flink
Python worker, where torch and HTTP libraries would cost start-up time and memory. Every call
has a short timeout, a total deadline for the whole request (connect, headers and body: a
server dripping a byte a second cannot hold a router for longer), and reads at most
:data:`MAX_RESPONSE_BYTES`; when the service is down, slow or unreachable the client raises
:class:`ServiceUnavailable`, so a router keeps its last model (or the least-loaded fallback)
and loses nothing. An HTTP error answer (401, 404, 422, ...) or an answer over the size bound
raises :class:`ServiceError` with the service's message.

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
import http.client
import json
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["PlacementClient", "ServiceUnavailable", "ServiceError", "MAX_RESPONSE_BYTES",
           "MAX_ERROR_BYTES"]

#: The largest answer read, bytes: a model file (``placement.ldwp.modelfile.MAX_FILE_BYTES``,
#: 64 MiB; not imported, this module stays standard-library only) plus 1 MiB. Every JSON
#: answer is far smaller; a larger one is refused without reading it all.
MAX_RESPONSE_BYTES = (64 << 20) + (1 << 20)
#: The most of an error answer's body read for its message.
MAX_ERROR_BYTES = 64 << 10
_CHUNK_BYTES = 64 << 10


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
        deadline = _Deadline(self.timeout_s)
        try:
            with deadline.opener().open(request, timeout=self.timeout_s) as response:
                payload = _read_bounded(response, MAX_RESPONSE_BYTES)
                response_headers = dict(response.headers.items())
            if deadline.expired:  # the cut socket read as the end of the body: not an answer
                raise TimeoutError("deadline passed")
        except urllib.error.HTTPError as exc:
            try:
                text = _read_bounded(exc, MAX_ERROR_BYTES, cut=True).decode("utf-8", "replace")
            except (OSError, http.client.HTTPException):
                text = exc.reason if isinstance(exc.reason, str) else ""
            try:
                detail = json.loads(text).get("detail", text)
            except (ValueError, AttributeError):
                detail = text
            raise ServiceError(f"{method} {url} -> HTTP {exc.code}: {detail}", exc.code,
                               detail) from None
        except _TooLarge as exc:
            raise ServiceError(f"{method} {url}: the answer is {exc}, over the "
                               f"{MAX_RESPONSE_BYTES:,}-byte limit: refused", 200) from None
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError,
                OSError, http.client.HTTPException) as exc:
            # HTTPException: a broken answer (bad status line, cut body), also what a read
            # cut by the deadline raises
            reason = getattr(exc, "reason", exc)
            if deadline.expired:
                reason = f"no complete answer within {self.timeout_s} s"
            raise ServiceUnavailable(f"placement service at {self.base_url} is unavailable: "
                                     f"{reason}") from None
        finally:
            deadline.cancel()
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


# -- bounded reading ---------------------------------------------------------------------------
class _TooLarge(Exception):
    """An answer over the size bound (its declared or read size in the message)."""


def _read_bounded(response, limit: int, cut: bool = False) -> bytes:
    """The body of ``response``, at most ``limit`` bytes: over it, :class:`_TooLarge` (or,
    with ``cut``, the first ``limit`` bytes). A declared Content-Length over the limit is
    refused before reading."""
    declared = response.headers.get("Content-Length") if response.headers else None
    if not cut and declared is not None and declared.strip().isdigit() \
            and int(declared) > limit:
        raise _TooLarge(f"{int(declared):,} bytes (Content-Length)")
    chunks, size = [], 0
    while size <= limit:
        chunk = response.read(min(_CHUNK_BYTES, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    data = b"".join(chunks)
    if len(data) > limit:
        if cut:
            return data[:limit]
        raise _TooLarge(f"more than {limit:,} bytes")
    return data


class _Deadline:
    """A total deadline for one request: a timer shuts the connection's socket down when it
    passes, which ends a blocked read at once (urllib's timeout is per socket operation, so a
    server sending a byte a second never trips it).

    ``opener()`` gives an opener whose HTTP(S) connections register their socket here."""

    def __init__(self, seconds: float):
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, seconds), self._expire)
        self._timer.daemon = True
        self._timer.start()

    def opener(self) -> urllib.request.OpenerDirector:
        deadline = self

        def connection(base):
            class Connection(base):
                def connect(self):
                    super().connect()
                    deadline._attach(self.sock)
            return Connection

        class Http(urllib.request.HTTPHandler):
            def http_open(self, req):
                return self.do_open(connection(http.client.HTTPConnection), req)

        class Https(urllib.request.HTTPSHandler):
            def https_open(self, req):
                return self.do_open(connection(http.client.HTTPSConnection), req,
                                    context=self._context)

        return urllib.request.build_opener(Http, Https)

    def _attach(self, sock) -> None:
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:
            _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def cancel(self) -> None:
        self._timer.cancel()


def _shut(sock) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed
        pass
