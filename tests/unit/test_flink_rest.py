"""The one Flink REST client against a real local HTTP server that plays a JobManager (the
``jobmanager`` fixture, tests/unit/conftest.py)."""

from __future__ import annotations

import json

import pytest

from placement.service import flink_rest
from placement.service.flink_rest import FlinkRestClient, FlinkRestError, FlinkUnreachable


def _client(server, **kwargs):
    return FlinkRestClient(f"http://127.0.0.1:{server.server_address[1]}", **kwargs)


def test_reads_taskmanagers_jobs_and_subtasks(jobmanager):
    jobmanager.routes.update({
        ("GET", "/taskmanagers"): (200, json.dumps({"taskmanagers": [
            {"id": "tm_a", "slotsNumber": 4, "freeSlots": 1,
             "totalResource": {"extendedResources": {"tm_a": 4.0}}}]}).encode()),
        ("GET", "/jobs/overview"): (200, b'{"jobs": [{"jid": "j1", "state": "RUNNING"}]}'),
        ("GET", "/jobs/j1/vertices/v1"): (200, json.dumps({"subtasks": [
            {"subtask": 0, "taskmanager-id": "tm_a", "status": "RUNNING", "extra": 1}]}).encode()),
    })
    client = _client(jobmanager)
    tm = client.taskmanagers()[0]
    assert (tm["id"], tm["slots"], tm["free_slots"], tm["extended_resources"]) == \
        ("tm_a", 4, 1, {"tm_a": 4.0})
    assert client.jobs() == [{"jid": "j1", "state": "RUNNING"}]
    assert client.vertex_subtasks("j1", "v1")[0]["taskmanager-id"] == "tm_a"


@pytest.mark.parametrize("answer, ids", [
    ({"taskmanagers": ["tm_a", 3, None, {"id": "tm_b", "totalResource": "x"},
                       {"id": "tm_c", "totalResource": {"extendedResources": [1]},
                        "hardware": 7}]}, ["tm_b", "tm_c"]),
    ({"taskmanagers": {"tm_a": {}}}, []),
    ([{"id": "tm_a"}], []),
])
def test_taskmanager_entries_that_are_not_entries_are_skipped(jobmanager, answer, ids):
    """A broken or hostile /taskmanagers answer is not a crash (a 500 of the service's /plan)."""
    jobmanager.routes[("GET", "/taskmanagers")] = (200, json.dumps(answer).encode())
    got = _client(jobmanager).taskmanagers()
    assert [tm["id"] for tm in got] == ids
    assert all(tm["extended_resources"] == {} and tm["hardware"] == {} for tm in got)


def test_stop_with_savepoint_posts_json_and_cancel_patches(jobmanager):
    jobmanager.routes.update({
        ("POST", "/jobs/j1/stop"): (202, b'{"request-id": "t-1"}'),
        ("PATCH", "/jobs/j1?mode=cancel"): (202, b""),
    })
    client = _client(jobmanager)
    assert client.trigger_stop_with_savepoint("j1", "/tmp/sp") == "t-1"
    assert client.cancel("j1") is None   # Flink answers the PATCH with an empty body
    (method, path, body), (method2, path2, _) = jobmanager.seen
    assert (method, path) == ("POST", "/jobs/j1/stop")
    assert json.loads(body) == {"drain": False, "targetDirectory": "/tmp/sp"}
    assert (method2, path2) == ("PATCH", "/jobs/j1?mode=cancel")


@pytest.mark.parametrize("route, error", [
    ((500, b"boom"), FlinkRestError),                    # an HTTP error, with its detail
    ((200, b"<html>not json</html>"), FlinkRestError),   # no JSON
])
def test_errors_are_named_and_get_or_none_turns_them_into_none(jobmanager, route, error):
    jobmanager.routes[("GET", "/overview")] = route
    client = _client(jobmanager)
    with pytest.raises(error):
        client.overview()
    assert client.get_or_none("/overview") is None


def test_a_stop_answer_without_a_request_id_is_an_error(jobmanager):
    jobmanager.routes[("POST", "/jobs/j1/stop")] = (200, b'{"something": "else"}')
    with pytest.raises(FlinkRestError, match="request-id"):
        _client(jobmanager).trigger_stop_with_savepoint("j1", "/tmp/sp")


def test_an_oversized_answer_is_refused_not_read_whole(jobmanager, monkeypatch):
    monkeypatch.setattr(flink_rest, "MAX_RESPONSE_BYTES", 1000)
    jobmanager.routes[("GET", "/jobs/overview")] = (200, b'{"jobs": ["' + b"x" * 5000 + b'"]}')
    with pytest.raises(FlinkRestError, match="more than 1,000 bytes"):
        _client(jobmanager).jobs()


def test_nothing_listening_is_unreachable_and_bad_settings_are_refused():
    client = FlinkRestClient("http://127.0.0.1:9", timeout_s=0.5)   # discard port: closed
    with pytest.raises(FlinkUnreachable, match="unreachable"):
        client.overview()
    assert client.get_or_none("/overview") is None
    with pytest.raises(ValueError):
        FlinkRestClient("ftp://example.org")
    with pytest.raises(ValueError):
        FlinkRestClient("http://127.0.0.1:8081", timeout_s=float("nan"))


def test_metric_values_split_a_long_id_list_into_requests_under_the_query_bound(jobmanager):
    # Flink refuses a request line past its limit (404 "bad-request"): many gauges are asked
    # for in several requests, every value collected, none asked twice
    path = "/jobs/j/vertices/v/metrics"
    ids = [f"{i:02d}.streamplace-router.streamplace_gauge_{i:03d}" for i in range(40)]
    for start in range(0, 40, 10):   # 10 ids of 43 characters (and commas) fit in 480, 11 do not
        chunk = ids[start:start + 10]
        jobmanager.routes[("GET", f"{path}?get={','.join(chunk)}")] = (
            200, json.dumps([{"id": i, "value": str(n)} for n, i in
                             enumerate(chunk, start)]).encode())
    values = _client(jobmanager).metric_values(path, ids, max_query_chars=480)
    assert [v["id"] for v in values] == ids and [v["value"] for v in values][-1] == "39"
    asked = [p for m, p, _ in jobmanager.seen if m == "GET"]
    assert len(asked) == 4 and all(len(p.split("?get=")[1]) < 480 for p in asked)
    assert _client(jobmanager).metric_values(path, []) == []
