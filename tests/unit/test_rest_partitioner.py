"""The REST-aware partitioner against a small HTTP server that answers like Flink's REST API."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pyflink_jobs.router_function import RestAwarePartitioner

SUBTASKS = [{"subtask": 0, "taskmanager-id": "tm_b"}, {"subtask": 1, "taskmanager-id": "tm_a"},
            {"subtask": 2, "taskmanager-id": "tm_a"}, {"subtask": 3, "taskmanager-id": "tm_c"}]


class FlinkLikeRest(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's naming
        routes = {
            "/jobs/overview": {"jobs": [
                {"jid": "old", "name": "my-job", "state": "CANCELED", "start-time": 5},
                {"jid": "j1", "name": "my-job", "state": "RUNNING", "start-time": 10},
                {"jid": "j0", "name": "other-job", "state": "RUNNING", "start-time": 20}]},
            "/jobs/j1": {"vertices": [
                {"id": "v0", "name": "streamplace-router -> Map"},
                {"id": "v1", "name": "_keyed_stream_values_operator, streamplace-executor"}]},
            "/jobs/j1/vertices/v1": {"subtasks": SUBTASKS},
        }
        body = routes.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body or {"errors": ["not found"]}).encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def rest_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FlinkLikeRest)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_tasks_go_to_instances_on_the_chosen_node_round_robin(rest_url):
    partitioner = RestAwarePartitioner(rest_url, "my-job", "streamplace-executor")
    partitioner.open(None)
    assert [partitioner.partition("tm_a", 4) for _ in range(4)] == [1, 2, 1, 2]
    assert partitioner.partition("tm_b", 4) == 0
    assert partitioner.partition("tm_c", 4) == 3
    assert partitioner.misrouted == 0


def test_a_node_without_instances_is_counted_as_misrouted(rest_url):
    partitioner = RestAwarePartitioner(rest_url, "my-job", "streamplace-executor")
    partitioner.open(None)
    assert partitioner.partition("tm_z", 4) in range(4)
    assert partitioner.misrouted == 1


def test_rest_down_still_partitions():
    partitioner = RestAwarePartitioner("http://127.0.0.1:9", "my-job", "streamplace-executor")
    partitioner.open(None)
    assert [partitioner.partition("tm_a", 3) for _ in range(3)] == [0, 1, 2]
    assert partitioner.misrouted == 3
