"""Fixtures shared by the unit tests."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@pytest.fixture
def count_stage_calls(monkeypatch):
    """``count(app_ids)`` wraps every stage operator of those built-in applications so each
    call is counted (and still runs); returns the {stage name: calls} dict it fills."""
    from workload.apps.registry import OPERATORS
    from workload.catalog import APPLICATIONS

    def count(*app_ids: str) -> dict[str, int]:
        counts: dict[str, int] = {}

        def counting(name):
            real = OPERATORS[name]

            def wrapper(frames, inputs, **options):
                counts[name] = counts.get(name, 0) + 1
                return real(frames, inputs, **options)
            return wrapper

        for app in app_ids:
            for stage in APPLICATIONS[app].stages:
                monkeypatch.setitem(OPERATORS, stage.name, counting(stage.name))
        return counts
    return count


class _JobManager(BaseHTTPRequestHandler):
    """Answers from ``server.routes[(method, path)] = (status, body bytes)`` (the path with its
    query string), 404 for anything else; records ``(method, path, body sent)`` in
    ``server.seen``."""

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        sent = self.rfile.read(length) if length else b""
        self.server.seen.append((self.command, self.path, sent))
        status, body = self.server.routes.get((self.command, self.path), (404, b'{"errors":[]}'))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = _answer

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def jobmanager():
    """A real local HTTP server playing a Flink JobManager (``url``: its base URL)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _JobManager)
    server.routes, server.seen = {}, []
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
