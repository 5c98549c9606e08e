"""The placement service's HTTP API refuses nonsense and never answers with a value its own
schema forbids: names and numbers of /decide bodies are validated, unknown nodes are named,
a policy's non-finite scores are replaced by the fallback rule's decision, hostile (NaN)
feedback cannot break /cluster, /plan, /health or /metrics, and the OpenAPI spec declares the
bearer scheme exactly when a token is configured."""

from __future__ import annotations

import json
import logging
import math
import warnings

import pytest

from placement.service.app import MAX_NODES, PlacementService
from placement.service.settings import ServiceSettings
from streamplace.cluster_spec import LocalClusterSpec
from workload.model import Decision

with warnings.catch_warnings():  # starlette asks for httpx2; httpx works (FastAPI's docs)
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

NODES = ("tm_a", "tm_b", "tm_c")
SPEC = LocalClusterSpec.model_validate({"taskmanagers": [
    {"id": "tm_a", "cpu_cores": 2, "work_multiplier": 1.0, "slots": 4},
    {"id": "tm_b", "cpu_cores": 1, "work_multiplier": 1.0, "slots": 2},
    {"id": "tm_c", "cpu_cores": 1, "work_multiplier": 2.0, "slots": 2}]})
TASK = {"task_id": "t1", "app_id": "face_recognition", "input_size": 40_000}
NAN, INF = float("nan"), float("inf")


def make_service(tmp_path, **settings) -> PlacementService:
    values = {"model_dir": tmp_path / "models", "consume_feedback": False,
              "flink_rest_url": "http://127.0.0.1:9", "flink_timeout_s": 0.5, "port": 0,
              "publish_prior": False, **settings}   # no starting version
    return PlacementService(ServiceSettings(**values), SPEC)


def client_for(service: PlacementService) -> TestClient:
    # server exceptions become 500 answers (what a caller would get), not test errors
    return TestClient(service.app, raise_server_exceptions=False)


def post_json(client: TestClient, body, **kwargs):
    """POST ``body`` as JSON the way Python writes it: NaN and Infinity included (which
    ``json.loads``, and so the service, reads back)."""
    return client.post("/decide", content=json.dumps(body),
                       headers={"Content-Type": "application/json"}, **kwargs)


def strict_json(response):
    """The body as standard JSON: fails on NaN/Infinity, which JSON does not have."""
    def refuse(constant):
        raise AssertionError(f"{response.url} answered non-standard JSON: {constant}")
    return json.loads(response.text, parse_constant=refuse)


@pytest.fixture
def service(tmp_path):
    return make_service(tmp_path)


@pytest.fixture
def client(service):
    return client_for(service)


# -- bad bodies: a 422 that names the field and the problem ---------------------------------------
def task(**fields):
    return {"tasks": [{**TASK, **fields}]}


def node(**fields):
    return {"tasks": [TASK], "nodes": [{"node_id": "tm_a", **fields}]}


BAD_BODIES = {
    "empty app_id": (task(app_id=""), "tasks.0.app_id", "at least 1 character"),
    "blank app_id": (task(app_id="   "), "tasks.0.app_id", "must not be blank"),
    "newline in app_id": (task(app_id="face\nrecognition"), "tasks.0.app_id", "printable"),
    "escape in task_id": (task(task_id="t\x1b[31m"), "tasks.0.task_id", "printable"),
    "NUL in task_id": (task(task_id="t\x00"), "tasks.0.task_id", "control characters"),
    "long app_id": (task(app_id="x" * 129), "tasks.0.app_id", "at most 128 characters"),
    "long task_id": (task(task_id="x" * 513), "tasks.0.task_id", "at most 512 characters"),
    "app_id not a string": (task(app_id=7), "tasks.0.app_id", "valid string"),
    "input_size too large": (task(input_size=10**12 + 1), "tasks.0.input_size",
                             "less than or equal to 1000000000000"),
    "input_size a bool": (task(input_size=True), "tasks.0.input_size", "valid integer"),
    "input_size a float": (task(input_size=1.5), "tasks.0.input_size", "valid integer"),
    "NUL in node_id": (node(node_id="tm\x00a"), "nodes.0.node_id", "printable"),
    "tab in node_id": (node(node_id="tm\ta"), "nodes.0.node_id", "printable"),
    "long node_id": (node(node_id="n" * 257), "nodes.0.node_id", "at most 256 characters"),
    "empty node_id": (node(node_id=""), "nodes.0.node_id", "at least 1 character"),
    "NaN age": (node(age_s=NAN), "nodes.0.age_s", "finite number"),
    "infinite backlog": (node(backlog_s=INF), "nodes.0.backlog_s", "finite number"),
    "NaN utilisation": (node(cpu_util=NAN), "nodes.0.cpu_util", "finite number"),
    "huge backlog": (node(backlog_s=1e7), "nodes.0.backlog_s", "less than or equal"),
    "huge age": (node(age_s=1e12), "nodes.0.age_s", "less than or equal"),
    "huge queue": (node(queue_depth=10**7), "nodes.0.queue_depth", "less than or equal"),
    "negative age": (node(age_s=-1.0), "nodes.0.age_s", "greater than or equal to 0"),
    "unknown node field": (node(speed=3), "nodes.0.speed", "Extra inputs"),
    "too many nodes": ({"tasks": [TASK], "nodes": [{"node_id": f"n{i}"}
                                                   for i in range(MAX_NODES + 1)]},
                       "nodes", f"at most {MAX_NODES} items"),
    "repeated node": ({"tasks": [TASK], "nodes": [{"node_id": "tm_a"}] * 3}, "nodes",
                      "repeated: ['tm_a']"),
}


@pytest.mark.parametrize("case", list(BAD_BODIES))
def test_bad_bodies_get_a_422_naming_the_field_and_problem(client, case):
    body, field, problem = BAD_BODIES[case]
    response = post_json(client, body)
    assert response.status_code == 422, response.text
    message = strict_json(response)["message"]   # NaN echoed back as null, not a 500
    assert f"{field}:" in message and problem in message, message


# -- node names: only nodes the service knows -----------------------------------------------------
UNKNOWN_NODES = {
    "one unknown": (["tm_x"], ["'tm_x'"], "no spec for any observed node"),
    "unknown among known": (["tm_a", "ghost", "tm_c"], ["'ghost'"], "unknown node ids"),
    "case matters": (["TM_A"], ["'TM_A'"], "unknown node ids"),
    "many unknown, listing bounded": ([f"ghost{i:03d}-" + "x" * 200 for i in range(300)],
                                      ["'ghost000-", "(290 more)"], "unknown node ids"),
}


@pytest.mark.parametrize("case", list(UNKNOWN_NODES))
def test_unknown_nodes_are_refused_naming_them_and_the_known_ones(client, case):
    ids, named, phrase = UNKNOWN_NODES[case]
    response = post_json(client, {"tasks": [TASK], "nodes": [{"node_id": i} for i in ids]})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert phrase in detail and all(n in detail for n in named), detail
    assert "knows ['tm_a', 'tm_b', 'tm_c']" in detail
    assert "'tm_a'" not in detail.split("knows")[0]   # known nodes are not called unknown
    assert len(detail) < 2_000                          # bounded, however many were sent


def test_a_node_seen_only_in_feedback_is_known(service, client):
    report = {"node_id": "tm_new", "emitted_at_ms": 1_700_000_000_000, "cpu_util": 0.5,
              "gpu_util": 0.0, "host_mem_util": 0.5, "gpu_mem_util": 0.0,
              "uplink_bytes_per_s": 0.0, "downlink_bytes_per_s": 0.0, "queue_depth": 0,
              "in_flight": 0, "backpressure": 0.0, "completed": [], "sequence": 0}
    service.learner.take([report])
    assert "tm_new" in service.learner.node_ids()
    response = post_json(client, {"tasks": [TASK],
                                  "nodes": [{"node_id": "tm_a"}, {"node_id": "tm_new"}]})
    assert response.status_code == 200, response.text
    assert response.json()[0]["node"] == "tm_a"   # the fallback rule needs a spec: tm_a


def test_no_known_nodes_at_all_is_a_503(service, client, monkeypatch):
    monkeypatch.setattr(service.learner, "node_states", lambda now_ms=None: [])
    response = post_json(client, {"tasks": [TASK]})
    assert response.status_code == 503
    assert "knows no nodes" in response.json()["detail"]


# -- task types: any well-formed name ---------------------------------------------------------
WELL_FORMED_TYPES = ["my_team.resize_v2", "détection de visages", "op/with spaces-and:colons",
                     "x" * 128]


def _initial_model(tmp_path):
    from placement.ldwp.agent import LDWPPolicy
    from placement.service.learner import learning_settings, to_cluster_spec
    path = tmp_path / "initial.spmodel"
    LDWPPolicy(to_cluster_spec(SPEC), settings=learning_settings({"seed": 0})).save(path,
                                                                                     version=0)
    return path


@pytest.mark.parametrize("app_id", WELL_FORMED_TYPES)
def test_a_well_formed_unknown_task_type_is_placed_by_fallback_and_model(tmp_path, app_id):
    fallback = client_for(make_service(tmp_path / "f"))
    model = client_for(make_service(tmp_path / "m", initial_model=_initial_model(tmp_path)))
    for client, policy in ((fallback, "least_loaded"), (model, "ldwp v1")):
        response = post_json(client, task(app_id=app_id, task_id=f"own {app_id}"))
        assert response.status_code == 200, response.text
        decision = strict_json(response)[0]
        assert decision["policy"] == policy and decision["node"] in NODES
        assert set(decision["scores"]) == set(NODES)
        assert all(math.isfinite(v) for v in decision["scores"].values())


# -- a policy's unusable decision: the fallback rule decides instead ------------------------------
class StubPolicy:
    """A stand-in for a poisoned model: always this decision."""

    name = "stub"

    def __init__(self, decision: Decision):
        self.decision = decision

    def decide(self, _observation):
        return self.decision


UNUSABLE = {
    "NaN score": (Decision("tm_a", "poisoned", {"tm_a": NAN, "tm_b": 1.0, "tm_c": 0.0}),
                  "non_finite_scores", "model v3 gave non-finite scores; fallback least_loaded:"),
    "infinite score": (Decision("tm_b", "overflow", {"tm_a": -INF, "tm_b": INF, "tm_c": 0.0}),
                       "non_finite_scores", "model v3 gave non-finite scores"),
    "score not a number": (Decision("tm_a", "broken", {"tm_a": None, "tm_b": 0.0}),
                           "non_finite_scores", "model v3 gave non-finite scores"),
    "node not offered": (Decision("tm_zz", "confused", {"tm_zz": 1.0}), "unknown_node",
                         "model v3 chose 'tm_zz', not one of the offered nodes; fallback"),
    "scores a node not offered": (Decision("tm_a", "confused", {"tm_a": 1.0, "ghost": 2.0}),
                                  "unknown_node", "model v3 scored nodes it was not offered"),
}


@pytest.mark.parametrize("case", list(UNUSABLE))
def test_an_unusable_model_decision_is_replaced_by_the_fallback(service, client, monkeypatch,
                                                                 caplog, case):
    decision, problem, reason = UNUSABLE[case]
    monkeypatch.setattr(service.serving, "current",
                        lambda: (StubPolicy(decision), "model", 3))
    tasks = [{**TASK, "task_id": f"t{i}"} for i in range(3)]
    with caplog.at_level(logging.WARNING, logger="placement.service.app"):
        response = post_json(client, {"tasks": tasks})
    assert response.status_code == 200, response.text
    decisions = strict_json(response)
    assert [d["task_id"] for d in decisions] == ["t0", "t1", "t2"]
    for d in decisions:
        assert d["policy"] == "least_loaded" and d["node"] in NODES
        assert d["reason"].startswith(reason), d["reason"]
        assert set(d["scores"]) == set(NODES)
        assert all(isinstance(v, float) and math.isfinite(v) for v in d["scores"].values())
    metrics = service.metrics
    assert metrics.value("unusable_decisions_total", problem=problem) == 3
    assert metrics.value("decisions_total", source="fallback") == 3
    assert metrics.value("decisions_total", source="model") == 0
    warnings_logged = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings_logged) == 1   # one line per request, not per task
    assert "3 of 3 tasks" in warnings_logged[0].getMessage()


def test_usable_and_unusable_decisions_mix_in_one_batch(service, client, monkeypatch):
    class Flaky(StubPolicy):
        def decide(self, observation):
            bad = observation.task.task_id == "bad"
            return Decision("tm_c", "model", {"tm_a": 0.0, "tm_b": 0.0,
                                              "tm_c": NAN if bad else 1.0})
    monkeypatch.setattr(service.serving, "current", lambda: (Flaky(None), "model", 7))
    response = post_json(client, {"tasks": [{**TASK, "task_id": "good"},
                                            {**TASK, "task_id": "bad"}]})
    good, bad = strict_json(response)
    assert (good["policy"], good["node"], good["reason"]) == ("ldwp v7", "tm_c", "model")
    assert bad["policy"] == "least_loaded" and bad["reason"].startswith("model v7 gave non-finite")
    assert service.metrics.value("decisions_total", source="model") == 1
    assert service.metrics.value("decisions_total", source="fallback") == 1


class Exploding(StubPolicy):
    def decide(self, _observation):
        raise RuntimeError("weights on fire")


NO_DECISION = {
    # (policy /decide uses, its source, what the fallback rule does, words of the 503)
    "model and fallback both NaN": (
        StubPolicy(Decision("tm_a", "x", {"tm_a": NAN})), "model",
        StubPolicy(Decision("tm_a", "y", {"tm_a": NAN})),
        "model v3 gave non-finite scores and the fallback stub gave non-finite scores"),
    "fallback raises": (
        StubPolicy(Decision("tm_a", "x", {"tm_a": INF})), "model", Exploding(None),
        "and the fallback stub failed too (RuntimeError: weights on fire)"),
    "the fallback rule itself gives NaN": (
        StubPolicy(Decision("tm_a", "x", {"tm_a": NAN})), "fallback", None,
        "fallback stub gave non-finite scores"),
    "the fallback rule itself raises": (
        Exploding(None), "fallback", None, "fallback stub raised RuntimeError: weights on fire"),
}


class Overflowing(StubPolicy):
    """A model whose numbers overflow on every decision (a loaded file with a huge setting)."""

    def decide(self, _observation):
        raise OverflowError("(34, 'Numerical result out of range')")


def test_a_model_that_raises_is_replaced_by_the_fallback_not_a_500(service, client,
                                                                   monkeypatch):
    monkeypatch.setattr(service.serving, "current", lambda: (Overflowing(None), "model", 4))
    response = post_json(client, {"tasks": [{**TASK, "task_id": f"t{i}"} for i in range(2)]})
    assert response.status_code == 200, response.text
    for d in strict_json(response):
        assert d["policy"] == "least_loaded" and d["node"] in NODES
        assert d["reason"].startswith("model v4 raised OverflowError"), d["reason"]
    assert service.metrics.value("unusable_decisions_total", problem="raised") == 2


@pytest.mark.parametrize("case", list(NO_DECISION))
def test_when_no_usable_decision_exists_the_answer_is_a_503(service, client, monkeypatch, case):
    policy, source, fallback, words = NO_DECISION[case]
    monkeypatch.setattr(service.serving, "current",
                        lambda: (policy, source, 3 if source == "model" else None))
    if fallback is not None:
        monkeypatch.setattr(service.serving, "fallback", fallback)
    response = post_json(client, {"tasks": [TASK]})
    assert response.status_code == 503, response.text
    detail = strict_json(response)["detail"]
    assert words in detail and "no decision is returned" in detail, detail


# -- the OpenAPI spec: auth declared exactly when a token is set ----------------------------------
def _operations(spec):
    return {(path, method): op for path, ops in spec["paths"].items()
            for method, op in ops.items()}


def test_without_a_token_the_spec_claims_no_auth(client):
    spec = strict_json(client.get("/openapi.json"))
    assert "securitySchemes" not in spec.get("components", {})
    assert all("security" not in op for op in _operations(spec).values())
    assert client.get("/models").status_code == 200     # and none is asked for
    scores = spec["components"]["schemas"]["DecisionOut"]["properties"]["scores"]
    assert scores["additionalProperties"] == {"type": "number"}
    assert "finite" in scores["description"]


def test_with_a_token_the_spec_declares_bearer_on_every_endpoint_but_health(tmp_path):
    client = client_for(make_service(tmp_path, token="s3cret-token"))
    assert client.get("/health").status_code == 200
    spec = strict_json(client.get("/openapi.json",
                                  headers={"Authorization": "Bearer s3cret-token"}))
    schemes = spec["components"]["securitySchemes"]
    assert list(schemes.values()) == [{"type": "http", "scheme": "bearer",
                                       "description": "service.token"}]
    name = next(iter(schemes))
    operations = _operations(spec)
    assert ("/health", "get") in operations and ("/decide", "post") in operations
    for (path, method), op in operations.items():
        expected = None if path == "/health" else [{name: []}]
        assert op.get("security") == expected, (path, method)


def test_a_token_set_after_the_app_was_built_is_still_enforced(service, client):
    service.settings.token = "late-token-1"
    assert client.get("/models").status_code == 401
    assert client.get("/models", headers={"Authorization": "Bearer late-token-1"}
                      ).status_code == 200
    assert client.get("/models", headers={"Authorization": "Basic late-token-1"}
                      ).status_code == 401
    assert client.get("/health").status_code == 200


# -- other endpoints: bounded parameters, no NaN in any answer ------------------------------------
@pytest.mark.parametrize("path", ["/models/0", "/models/-1", "/models/abc", "/models/1e3",
                                  f"/models/{10**9 + 1}", f"/models/{10**9 + 1}/weights",
                                  "/models/0/weights", "/plan?max_total=0",
                                  "/plan?max_total=10001", "/plan?max_total=nan"])
def test_bad_path_and_query_parameters_get_a_422(client, path):
    response = client.get(path)
    assert response.status_code == 422, response.text
    assert strict_json(response)["message"].startswith("invalid request: ")


HOSTILE = {"node_id": "tm_a", "emitted_at_ms": NAN, "cpu_util": NAN, "gpu_util": INF,
           "host_mem_util": -INF, "gpu_mem_util": 0.5, "uplink_bytes_per_s": NAN,
           "downlink_bytes_per_s": 0.0, "queue_depth": NAN, "in_flight": "many",
           "backpressure": INF, "sequence": 1}


def test_hostile_feedback_in_the_learners_view_breaks_no_endpoint(service, client,
                                                                   monkeypatch):
    monkeypatch.setattr(service.learner, "latest_feedback", lambda: {"tm_a": dict(HOSTILE)})
    monkeypatch.setattr(service.learner, "measured_rates",
                        lambda: {"tm_a": NAN, "tm_b": INF, "tm_c": 2.0, "tm_x": -1.0})
    cluster = client.get("/cluster")
    assert cluster.status_code == 200
    feedback = {n["node"]: n["feedback"] for n in strict_json(cluster)["nodes"]}["tm_a"]
    assert feedback["cpu_util"] is None and feedback["gpu_util"] is None
    assert feedback["age_s"] is None and feedback["gpu_mem_util"] == 0.5
    plan = client.get("/plan")
    assert plan.status_code == 200
    body = strict_json(plan)
    assert body["measured_rates"] == {"tm_c": 2.0}    # non-finite and non-positive left out
    assert sum(body["nodes"].values()) == body["total"] > 0
    assert client.get("/health").status_code == 200 and strict_json(client.get("/health"))
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    for line in ('streamplace_service_node_cpu_util{node="tm_a"} NaN',
                 'streamplace_service_node_gpu_mem_util{node="tm_a"} 0.5',
                 'streamplace_service_node_queue_depth{node="tm_a"} NaN',
                 'streamplace_service_node_feedback_age_seconds{node="tm_a"} NaN'):
        assert line in metrics.text, line


def test_hostile_feedback_taken_by_the_learner_breaks_no_endpoint(service, client):
    """The same through ``learner.take`` (whatever the learner keeps of such a report)."""
    report = {**HOSTILE, "emitted_at_ms": 1_700_000_000_000, "queue_depth": 1, "in_flight": 0,
              "completed": [], "node_id": "tm_b"}
    try:
        service.learner.take([report])
    except (ValueError, TypeError, OverflowError):
        pass   # refusing the report outright is fine too
    for path in ("/cluster", "/plan", "/health"):
        response = client.get(path)
        assert response.status_code == 200, path
        strict_json(response)
    assert client.get("/metrics").status_code == 200
    response = post_json(client, {"tasks": [TASK]})
    assert response.status_code == 200
    assert all(math.isfinite(v) for v in strict_json(response)[0]["scores"].values())
