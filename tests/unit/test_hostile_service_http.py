"""Hostile HTTP bodies against the placement service (in-process through the ASGI app): a body
over MAX_BODY_BYTES is refused with 413 before it is parsed, a 422 echoes a bounded part of the
input, and text JSON allows but UTF-8 cannot encode (a lone surrogate) is a 422, never a 500."""

from __future__ import annotations

import json
import warnings

import pytest

from placement.service.app import MAX_NAME, MAX_NODES, PlacementService
from placement.service.http_limits import (MAX_BODY_BYTES, MAX_ECHO_CHARS, MAX_ECHO_ITEMS,
                                           bounded_echo, text_safe)
from placement.service.settings import ServiceSettings
from streamplace.cluster_spec import LocalClusterSpec

with warnings.catch_warnings():  # starlette asks for httpx2; httpx works (FastAPI's docs)
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

SPEC = LocalClusterSpec.model_validate({"taskmanagers": [
    {"id": "tm_a", "cpu_cores": 2, "slots": 4}, {"id": "tm_b", "cpu_cores": 1, "slots": 2}]})
TASK = {"task_id": "t1", "app_id": "face_recognition", "input_size": 40_000}
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    service = PlacementService(ServiceSettings(
        model_dir=tmp_path_factory.mktemp("models"), consume_feedback=False,
        flink_rest_url="http://127.0.0.1:9", flink_timeout_s=0.2, port=0), SPEC)
    return TestClient(service.app)


def _chunks(data: bytes, size: int = 1 << 20):
    for start in range(0, len(data), size):
        yield data[start:start + size]


# -- the body bound -------------------------------------------------------------------------------
def test_a_worst_case_valid_decide_body_fits_the_bound():
    """10k tasks with the longest ids and types the API takes, and every node state: the
    bound is generous for any body /decide would accept."""
    tasks = [{"task_id": f"{i:0{512}d}", "app_id": "a" * 128, "input_size": 10 ** 12}
             for i in range(10_000)]
    nodes = [{"node_id": f"{i:0{MAX_NAME}d}", "cpu_util": 0.123456789, "gpu_util": 0.123456789,
              "host_mem_util": 0.123456789, "gpu_mem_util": 0.123456789,
              "uplink_util": 0.123456789, "downlink_util": 0.123456789, "queue_depth": 999_999,
              "backlog_s": 999_999.123456, "age_s": 9_999_999.123456} for i in range(MAX_NODES)]
    assert len(json.dumps({"tasks": tasks, "nodes": nodes}).encode()) < MAX_BODY_BYTES


@pytest.mark.parametrize("label,send", [
    ("declared Content-Length over the bound", lambda c, body: c.post(
        "/decide", content=body, headers=JSON)),
    ("chunked, no length", lambda c, body: c.post(
        "/decide", content=_chunks(body), headers=JSON)),
])
def test_a_body_over_the_bound_is_refused_with_413(client, label, send):
    body = b'{"tasks": [], "pad": "' + b"x" * MAX_BODY_BYTES + b'"}'
    response = send(client, body)
    assert response.status_code == 413, response.text[:200]
    assert "too large" in response.json()["detail"]
    assert f"{MAX_BODY_BYTES:,}" in response.json()["detail"]
    # and the service keeps answering
    assert client.post("/decide", json={"tasks": [TASK]}).status_code == 200


def test_a_body_under_the_bound_reaches_validation(client):
    body = json.dumps({"tasks": [TASK], "pad": "x" * (1 << 20)}).encode()
    for content in (body, _chunks(body, 1 << 16)):
        response = client.post("/decide", content=content, headers=JSON)
        assert response.status_code == 422 and "pad" in response.text   # extra key refused


def test_a_valid_10k_task_body_is_still_decided(client):
    tasks = [{"task_id": f"t{i}", "app_id": f"type-{i % 7}", "input_size": i}
             for i in range(10_000)]
    response = client.post("/decide", json={"tasks": tasks})
    assert response.status_code == 200 and len(response.json()) == 10_000


# -- what a 422 echoes ----------------------------------------------------------------------------
LONG = "x" * 100_000


@pytest.mark.parametrize("label,body,field,most_bytes", [
    ("100k tasks (over the 10k limit)", {"tasks": [TASK] * 100_000}, "tasks", 8_000),
    ("a 100k-character task type", {"tasks": [{**TASK, "app_id": LONG}]}, "app_id", 8_000),
    ("a 100k-character extra key", {"tasks": [TASK], "pad": LONG}, "pad", 8_000),
    ("10k invalid tasks, one error each", {"tasks": [{**TASK, "input_size": -1}] * 10_000},
     "input_size", 40_000),
])
def test_a_422_echoes_a_bounded_part_of_the_input(client, label, body, field, most_bytes):
    response = client.post("/decide", json=body)
    assert response.status_code == 422
    assert len(response.content) < most_bytes, len(response.content)
    assert field in response.text


@pytest.mark.parametrize("label,body,field", [
    ("task_id", '{"tasks": [{"task_id": "\\ud800", "app_id": "face_recognition", '
                '"input_size": 1}]}', "task_id"),
    ("app_id", '{"tasks": [{"task_id": "t", "app_id": "a\\udfffb", "input_size": 1}]}',
     "app_id"),
    ("node_id", '{"tasks": [{"task_id": "t", "app_id": "a", "input_size": 1}], '
                '"nodes": [{"node_id": "\\ud83d"}]}', "node_id"),
    ("an extra key", '{"tasks": [{"task_id": "t", "app_id": "a", "input_size": 1}], '
                     '"\\ud800": 1}', "\\\\ud800"),
])
def test_a_lone_surrogate_is_a_422_not_a_500(client, label, body, field):
    response = client.post("/decide", content=body.encode(), headers=JSON)
    assert response.status_code == 422, response.text[:300]
    assert field in response.text
    response.content.decode("utf-8")   # the answer is valid UTF-8


# -- the helpers ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value,expected", [
    ("short", "short"),
    ("é ok", "é ok"),
    ("a\ud800b", "a\\ud800b"),
    ("x" * (MAX_ECHO_CHARS + 5), "x" * MAX_ECHO_CHARS + "... (5 more chars)"),
    (list(range(MAX_ECHO_ITEMS + 3)), [*range(MAX_ECHO_ITEMS), "... (3 more items)"]),
    ({f"k{i}": i for i in range(MAX_ECHO_ITEMS + 1)},
     {**{f"k{i}": i for i in range(MAX_ECHO_ITEMS)}, "...": "1 more keys"}),
    ([[[["deep"]]]], [[["..."]]]),
    (ValueError("why"), "why"),
    (None, None),
    (2.5, 2.5),
])
def test_bounded_echo(value, expected):
    assert bounded_echo(value) == expected


def test_text_safe_keeps_encodable_text_and_escapes_surrogates():
    assert text_safe("plain") == "plain"
    assert text_safe("\udfff").encode("utf-8") == b"\\udfff"


def test_the_limits_module_examples_hold():
    import doctest

    import placement.service.http_limits as module
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
