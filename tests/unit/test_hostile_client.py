"""PlacementClient against a hostile or broken server (a tiny http.server on 127.0.0.1, port
0): the timeout is a total deadline per request, not per socket read, and an answer over
MAX_RESPONSE_BYTES is refused without being read whole."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import placement.service.client as client_module
from placement.ldwp.modelfile import MAX_FILE_BYTES
from placement.service.client import (MAX_RESPONSE_BYTES, PlacementClient, ServiceError,
                                      ServiceUnavailable)

TIMEOUT_S = 1.0
#: how far past its deadline a request may end (thread scheduling on a busy 2-core machine)
SLACK_S = 1.0


class _Hostile(BaseHTTPRequestHandler):
    """GET <path> answers as ``ROUTES[path]`` says; the client's side is what is tested."""

    def log_message(self, *_args):   # quiet
        pass

    def do_GET(self):
        try:
            ROUTES[self.path](self)
        except OSError:   # the client hung up (what a deadline does): fine
            pass


def _drip(raw: bytes, every_s: float = 0.25):
    def answer(handler):
        for byte in raw:
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            time.sleep(every_s)
    return answer


def _send(status: int, body: bytes, length: int | None = None, content_type="application/json"):
    def answer(handler):
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        if length is not None:
            handler.send_header("Content-Length", str(length))
        handler.end_headers()   # HTTP/1.0: without a length the body ends when we close
        handler.wfile.write(body)
    return answer


def _drip_body(handler):
    """Headers at once, then the 20-byte body a byte at a time."""
    handler.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 20\r\n\r\n")
    handler.wfile.flush()
    _drip(b'{"status": "ok"    }')(handler)


ROUTES = {
    "/health": _send(200, b'{"status": "ok"}', 16),
    "/drip-body": _drip_body,
    "/drip-headers": _drip(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
                           b"X-Slow: " + b"a" * 40 + b"\r\n\r\n{}"),
    "/declared-huge": _send(200, b"", MAX_RESPONSE_BYTES + 1),
    "/unbounded": _send(200, b"x" * 5000),
    "/error-huge": _send(500, json.dumps({"detail": "y" * 5000}).encode()),
    "/models/1/weights": _send(200, b"model bytes", 11, "application/octet-stream"),
}


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield PlacementClient(f"http://127.0.0.1:{httpd.server_address[1]}", timeout_s=TIMEOUT_S)
    httpd.shutdown()
    httpd.server_close()


def test_the_response_bound_holds_a_model_file():
    assert MAX_RESPONSE_BYTES >= MAX_FILE_BYTES


def test_a_sound_server_is_read_as_before(server):
    assert server.health() == {"status": "ok"}
    digest = hashlib.sha256(b"model bytes").hexdigest()
    assert server.download(1, metadata={"sha256": digest}) == b"model bytes"


@pytest.mark.parametrize("path", ["/drip-body", "/drip-headers"])
def test_a_dripping_server_cannot_hold_a_request_past_its_deadline(server, path):
    """Each byte comes well within the per-read timeout; the whole answer would take 5-20 s."""
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable, match=f"within {TIMEOUT_S}"):
        server._request("GET", path)
    assert time.monotonic() - started < TIMEOUT_S + SLACK_S


@pytest.mark.parametrize("path,limit,reason", [
    ("/declared-huge", None, "Content-Length"),       # refused before reading
    ("/unbounded", 1000, "more than 1,000 bytes"),     # no length: counted while reading
])
def test_an_answer_over_the_bound_is_refused(server, monkeypatch, path, limit, reason):
    if limit is not None:
        monkeypatch.setattr(client_module, "MAX_RESPONSE_BYTES", limit)
    started = time.monotonic()
    with pytest.raises(ServiceError, match=reason) as info:
        server._request("GET", path)
    assert "limit" in str(info.value)
    assert time.monotonic() - started < TIMEOUT_S   # not a deadline: refused at once


def test_an_error_answer_is_read_only_up_to_its_bound(server, monkeypatch):
    monkeypatch.setattr(client_module, "MAX_ERROR_BYTES", 100)
    with pytest.raises(ServiceError) as info:
        server._request("GET", "/error-huge")
    assert info.value.status == 500 and len(str(info.value.detail)) <= 100


def test_an_unreachable_service_is_still_unavailable():
    with pytest.raises(ServiceUnavailable):
        PlacementClient("http://127.0.0.1:9", timeout_s=0.5).health()
