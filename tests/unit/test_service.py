"""The placement service without Kafka: HTTP validation and security, decisions, the slot plan,
the model store, learning from synthetic feedback, de-duplication and metrics."""

from __future__ import annotations

import hashlib
import random
import warnings
from collections import Counter

import pytest

from placement.ldwp.modelfile import ModelFileError, load_model
from placement.ldwp.networks import export_layers
from placement.service.app import PlacementService, ServingPolicy, plan_executors
from placement.service.client import PlacementClient, ServiceError, ServiceUnavailable
from placement.service.feedback import Deduplicator
from placement.service.flink_rest import FlinkRestClient, FlinkUnreachable
from placement.service.learner import learning_settings
from placement.service.settings import ServiceSettings, is_loopback
from placement.service.store import ModelStore, UnknownVersion
from streamplace.cluster_spec import LocalClusterSpec
from workload.catalog import app_ids
from workload.codec import encode

with warnings.catch_warnings():  # starlette asks for httpx2; httpx works (FastAPI's docs)
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

NODES = ("tm_a", "tm_b", "tm_c")
FAST = "tm_b"            # 5x lower latency in the synthetic feedback
UNREACHABLE = "http://127.0.0.1:9"   # discard port: nothing listens, connection refused
# A hand-written spec (not the shipped default, which may change): tm_a 2 cores, tm_b 1,
# tm_c 1 at half speed.
SPEC = LocalClusterSpec.model_validate({"taskmanagers": [
    {"id": "tm_a", "cpu_cores": 2, "work_multiplier": 1.0, "slots": 4},
    {"id": "tm_b", "cpu_cores": 1, "work_multiplier": 1.0, "slots": 2},
    {"id": "tm_c", "cpu_cores": 1, "work_multiplier": 2.0, "slots": 2}]})


def synthetic_feedback(n_tasks: int, seed: int = 0, prefix: str = "t",
                       t0_ms: int = 1_700_000_000_000) -> list[dict]:
    """NodeFeedback records of ``n_tasks`` tasks spread at random over NODES; FAST serves in
    about 200 ms and queues little, the others take about 1 s and queue more. One report per
    node per second of finishing time, with its utilisations."""
    rng = random.Random(seed)
    apps = app_ids()
    per_node: dict[str, list[dict]] = {n: [] for n in NODES}
    for i in range(n_tasks):
        node = rng.choice(NODES)
        fast = node == FAST
        service = (200.0 if fast else 1000.0) * rng.uniform(0.8, 1.2)
        queue = (20.0 if fast else 100.0) * rng.uniform(0.5, 1.5)
        decided = t0_ms + i * 50
        per_node[node].append({"task_id": f"{prefix}-{i:06d}", "app_id": apps[i % len(apps)],
                               "input_size": int(rng.lognormvariate(10.5, 0.5)),
                               "queue_ms": queue, "service_ms": service,
                               "finished_at_ms": int(decided + queue + service)})
    reports = []
    for node, timings in per_node.items():
        windows: dict[int, list[dict]] = {}
        for timing in timings:
            windows.setdefault(timing["finished_at_ms"] // 1000, []).append(timing)
        for sequence, (second, done) in enumerate(sorted(windows.items())):
            slow = node != FAST
            reports.append({
                "node_id": node, "emitted_at_ms": (second + 1) * 1000,
                "cpu_util": rng.uniform(0.8, 0.95) if slow else rng.uniform(0.3, 0.5),
                "gpu_util": 0.0, "host_mem_util": 0.5, "gpu_mem_util": 0.0,
                "uplink_bytes_per_s": 1e5, "downlink_bytes_per_s": 1e6,
                "queue_depth": rng.randint(3, 8) if slow else rng.randint(0, 1),
                "in_flight": 2 if slow else 1, "backpressure": 0.0, "completed": done,
                "sequence": sequence})
    reports.sort(key=lambda r: (r["emitted_at_ms"], r["node_id"]))
    return reports


def make_service(tmp_path, spec=SPEC, **settings) -> PlacementService:
    """A service without a consumer; its first version after 200 records (the default, 1,000,
    is sized for real bursts: placement.service.burst_check), judged on those 200; without
    the version trial (its routers are these tests: tests/unit/test_version_trial.py tries
    it), so that every version that passes the checks is published as it falls due; and
    without the starting version (``publish_prior``, tested below and in
    test_service_prior_version.py), so that its learned versions count from 1 and a fresh
    one has no model (its fallback rule decides)."""
    values = {"model_dir": tmp_path / "models", "consume_feedback": False,
              "flink_rest_url": UNREACHABLE, "flink_timeout_s": 0.5, "port": 0,
              "min_records_first_version": 200, "trial_window_tasks": 0,
              "publish_prior": False, **settings}
    return PlacementService(ServiceSettings(**values), spec)


def client_for(service: PlacementService) -> TestClient:
    return TestClient(service.app)


PROBE_TASKS = [{"task_id": f"p{i}", "app_id": app, "input_size": size}
               for i, (app, size) in enumerate((a, s) for a in app_ids()
                                               for s in (1_000, 40_000, 300_000))]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A service that learned from 1,280 synthetic task records (about 4 s on one core): one
    in 16 is held back to judge versions (placement.service.model_gate), 1,200 trained on."""
    service = make_service(tmp_path_factory.mktemp("trained"))
    taken = service.ingest.ingest(synthetic_feedback(1280))
    assert taken == 1280
    assert service.learner.train_pending() == 1280
    assert service.learner.gate.held_back == 80
    return service


# -- validation and security --------------------------------------------------------------------
@pytest.mark.parametrize("body,field", [
    ({"tasks": [{"task_id": "x", "app_id": 5, "input_size": 10}]}, "tasks.0.app_id"),
    ({"tasks": [{"task_id": "x", "app_id": "face_recognition", "input_size": -1}]},
     "tasks.0.input_size"),
    ({"tasks": []}, "tasks"),
    ({}, "tasks"),
    ({"tasks": [{"task_id": "x", "app_id": "video_synopsis", "input_size": 1}],
      "nodes": [{"node_id": "tm_a"}, {"node_id": "tm_a"}]}, "nodes"),
    ({"tasks": [{"task_id": "x", "app_id": "video_synopsis", "input_size": 1}],
      "nodes": [{"node_id": "tm_a", "cpu_util": 1.5}]}, "nodes.0.cpu_util"),
])
def test_decide_rejects_bad_bodies_with_a_clear_422(tmp_path, body, field):
    response = client_for(make_service(tmp_path)).post("/decide", json=body)
    assert response.status_code == 422
    payload = response.json()
    assert payload["message"].startswith("invalid request: ")
    assert f"{field}:" in payload["message"], payload["message"]
    assert payload["detail"]  # FastAPI's per-field list stays available


def test_a_token_is_required_off_loopback(tmp_path):
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    with pytest.raises(ValueError, match="not a loopback address, without a token"):
        make_service(tmp_path, host="0.0.0.0")
    from streamplace.cli import service_settings
    from streamplace.config import ConfigError, load_config
    with pytest.raises(ConfigError, match="token"):
        service_settings(load_config(overrides=["service.host=0.0.0.0"]))
    cfg = load_config(overrides=["service.host=0.0.0.0", "kafka.port=19092"])
    settings = service_settings(cfg, token="a-long-enough-token")
    assert settings.bootstrap_servers == "127.0.0.1:19092"      # follows the kafka section
    assert settings.model_dir == cfg.home / "models"


def test_the_token_is_enforced_everywhere_but_health(tmp_path):
    client = client_for(make_service(tmp_path, token="s3cret-token"))
    assert client.get("/health").status_code == 200
    for path in ("/models", "/models/latest", "/plan", "/cluster", "/metrics", "/openapi.json"):
        response = client.get(path)
        assert response.status_code == 401, path
        assert "bearer token" in response.json()["detail"]
    assert client.get("/models", headers={"Authorization": "Bearer wrong-token"}
                      ).status_code == 401
    good = {"Authorization": "Bearer s3cret-token"}
    assert client.get("/models", headers=good).json() == {"versions": []}
    assert client.post("/decide", json={"tasks": PROBE_TASKS[:1]}).status_code == 401
    assert client.post("/decide", json={"tasks": PROBE_TASKS[:1]}, headers=good
                       ).status_code == 200
    assert "/decide" in client.get("/openapi.json", headers=good).json()["paths"]


# -- decisions, cluster view, plan ----------------------------------------------------------------
def test_decide_without_a_model_uses_the_fallback_and_counts_in_flight(tmp_path):
    equal = LocalClusterSpec.model_validate({"taskmanagers": [
        {"id": n, "cpu_cores": 1, "slots": 2} for n in NODES]})
    client = client_for(make_service(tmp_path, spec=equal, fallback="least_outstanding"))
    response = client.post("/decide", json={"tasks": PROBE_TASKS[:6]})
    assert response.status_code == 200
    decisions = response.json()
    assert [d["task_id"] for d in decisions] == [t["task_id"] for t in PROBE_TASKS[:6]]
    assert all(d["node"] in NODES and d["reason"].startswith("no model version yet")
               for d in decisions)
    # Each decision counts one more task in flight: equal nodes get two tasks each.
    assert Counter(d["node"] for d in decisions) == {n: 2 for n in NODES}
    given = [{"node_id": "tm_a", "queue_depth": 5}, {"node_id": "tm_c"}]
    decisions = client.post("/decide", json={"tasks": PROBE_TASKS[:1], "nodes": given}).json()
    assert decisions[0]["node"] == "tm_c" and set(decisions[0]["scores"]) == {"tm_a", "tm_c"}
    unknown = client.post("/decide", json={"tasks": PROBE_TASKS[:1],
                                           "nodes": [{"node_id": "tm_x"}]})
    assert unknown.status_code == 422 and "no spec for any observed node" in \
        unknown.json()["detail"]


def test_cluster_view_when_flink_is_unreachable(tmp_path):
    service = make_service(tmp_path)
    service.ingest.ingest(synthetic_feedback(30))
    view = client_for(service).get("/cluster").json()
    assert view["flink"]["reachable"] is False and "unreachable" in view["flink"]["error"]
    nodes = {n["node"]: n for n in view["nodes"]}
    assert set(nodes) == set(NODES)
    assert nodes["tm_a"]["feedback"]["age_s"] > 0 and "completed" not in nodes["tm_a"]["feedback"]
    assert nodes["tm_a"]["spec"]["slots"] == 4
    with pytest.raises(FlinkUnreachable, match="unreachable"):
        FlinkRestClient(UNREACHABLE, timeout_s=0.5).taskmanagers()


class _FakeFlink(FlinkRestClient):
    def __init__(self, ids):
        super().__init__("http://fake")
        self.ids = ids

    def taskmanagers(self):
        return [{"id": i, "slots": 2, "free_slots": 1, "resources": {}, "free": {},
                 "extended_resources": {i: 2.0}} for i in self.ids]


def test_plan_and_cluster_leave_out_taskmanagers_flink_does_not_list(tmp_path):
    settings = ServiceSettings(model_dir=tmp_path, consume_feedback=False)
    service = PlacementService(settings, SPEC, flink=_FakeFlink(["tm_a", "tm_b"]))
    client = client_for(service)
    plan = client.get("/plan").json()
    assert plan["nodes"] == {"tm_a": 2, "tm_b": 1} and plan["flink"]["reachable"]
    assert "tm_c" in plan["reason"]
    assert client.get("/plan?max_total=8").json()["nodes"] == {"tm_a": 4, "tm_b": 2}
    assert client.get("/plan?max_total=0").status_code == 422
    nodes = {n["node"]: n for n in client.get("/cluster").json()["nodes"]}
    assert nodes["tm_a"]["in_flink"] and nodes["tm_c"]["in_flink"] is False


# Scenario table (HiveD style): case -> (measured rates, alive nodes, max_total, expected).
# Default spec: tm_a 2 cores x1 (4 slots), tm_b 1 core x1 (2 slots), tm_c 1 core x2 (2 slots).
PLAN_CASES = {
    "spec only, one per core": (None, None, None, {"tm_a": 2, "tm_b": 1, "tm_c": 1}),
    "every slot": (None, None, 8, {"tm_a": 4, "tm_b": 2, "tm_c": 2}),
    "more than the slots is capped": (None, None, 50, {"tm_a": 4, "tm_b": 2, "tm_c": 2}),
    "fewer than the nodes still keeps one each": (None, None, 1,
                                                  {"tm_a": 1, "tm_b": 1, "tm_c": 1}),
    "six by spec capacity": (None, None, 6, {"tm_a": 3, "tm_b": 2, "tm_c": 1}),
    "tm_c left Flink": (None, {"tm_a", "tm_b"}, None, {"tm_a": 2, "tm_b": 1}),
    "unknown alive node ignored": (None, {"tm_a", "tm_x"}, None, {"tm_a": 2}),
    "nothing alive": (None, set(), None, {}),
    "measured: tm_c fastest, capped at its slots": ({"tm_a": 1.0, "tm_b": 1.0, "tm_c": 6.0},
                                                    None, 6, {"tm_a": 2, "tm_b": 2, "tm_c": 2}),
    "measured tm_a only, others scaled": ({"tm_a": 4.0}, None, 6,
                                          {"tm_a": 3, "tm_b": 2, "tm_c": 1}),
    "measured equal rates": ({"tm_a": 2.0, "tm_b": 2.0, "tm_c": 2.0}, None, 6,
                             {"tm_a": 2, "tm_b": 2, "tm_c": 2}),
}


def _rest_tm(node, cores=2, slots=4, own=None, **extra):
    """One entry as FlinkRestClient.taskmanagers() gives it."""
    return {"id": node, "slots": slots, "hardware": {"cpuCores": cores},
            "extended_resources": {} if own is None else {node: own}, **extra}


def test_a_service_whose_spec_is_not_its_clusters_plans_flinks_own_taskmanagers():
    """None of the spec's nodes is in Flink (the service was started with another cluster's
    spec): the plan is for the TaskManagers REST lists, by their cores and own resource."""
    from placement.service.app import unlisted_capacities
    registered = [_rest_tm("worker_1", cores=4, own=3.0), _rest_tm("worker_2", cores=1),
                  _rest_tm("127.0.0.1:4123-ab12cd"),            # Flink's generated id: skipped
                  "not an entry", _rest_tm("worker_3", cores=float("nan"), slots=True)]
    unlisted = unlisted_capacities(registered, ["tm_a", "tm_b", "tm_c"])
    assert [(c.node_id, c.capacity, c.slots) for c in unlisted] == [
        ("worker_1", 4.0, 3), ("worker_2", 1.0, 4), ("worker_3", 1.0, 1)]
    alive = ["worker_1", "worker_2", "worker_3", "127.0.0.1:4123-ab12cd"]
    plan = plan_executors(SPEC, None, alive, None, unlisted)
    assert plan.nodes == {"worker_1": 3, "worker_2": 1, "worker_3": 1}, plan.reason
    assert "none of the cluster spec's nodes is in Flink" in plan.reason
    # a spec node alive: the spec's nodes, as before (the hook then uses the spec's too)
    plan = plan_executors(SPEC, None, ["tm_a", "worker_1"], None,
                          unlisted_capacities([_rest_tm("worker_1")], ["tm_a", "tm_b", "tm_c"]))
    assert plan.nodes == {"tm_a": 2}
    # Flink unreachable: the spec's nodes, whatever was read before
    assert plan_executors(SPEC, None, None, None, unlisted).nodes == {"tm_a": 2, "tm_b": 1,
                                                                      "tm_c": 1}


class _ListedTaskManagers:
    """A FlinkRestClient stand-in: these TaskManagers registered (None: unreachable)."""

    def __init__(self, taskmanagers):
        self.registered = taskmanagers

    def taskmanagers(self):
        if self.registered is None:
            raise FlinkUnreachable("nothing listening")
        return self.registered


@pytest.mark.parametrize("spec_name, registered, served", [
    ("default", [_rest_tm("worker_1", cores=4, own=3.0), _rest_tm("worker_2", cores=1)],
     ["worker_1", "worker_2"]),
    ("default", [_rest_tm("tm_a"), _rest_tm("worker_1")], ["tm_a", "tm_b", "tm_c"]),
    ("default", None, ["tm_a", "tm_b", "tm_c"]),
    ("default", [], ["tm_a", "tm_b", "tm_c"]),
    ("default", [_rest_tm("127.0.0.1:4123-ab")], ["tm_a", "tm_b", "tm_c"]),
    ("hosts", [_rest_tm("worker_1")], ["tm_a", "tm_b", "tm_c"]),   # chosen: kept as it is
])
def test_a_service_on_the_default_spec_serves_the_cluster_flink_lists(tmp_path, caplog,
                                                                     spec_name, registered,
                                                                     served):
    """``streamplace serve`` beside a cluster the default spec does not describe: none of
    its nodes registered, so the service starts from the TaskManagers Flink lists (the hook's
    rule); a spec somebody chose, Flink down, or a spec node registered: the spec (with Flink
    down, a warning says what to do if the cluster is another one: the spec is not looked at
    again)."""
    settings = ServiceSettings(model_dir=tmp_path / "models", consume_feedback=False, port=0,
                               cluster_spec=spec_name, publish_prior=False)
    with caplog.at_level("WARNING", logger="placement.service.app"):
        service = PlacementService(settings, flink=_ListedTaskManagers(registered))
    assert list(service.cluster.node_ids) == served
    warned = "start the service after the cluster" in caplog.text
    assert warned == (registered is None and spec_name == "default")
    if served[0] == "worker_1":
        assert service.cluster.nodes[0].cpu_cores == 4
        assert service.learner.node_ids() == served
        plan = client_for(service).get("/plan").json()
        assert plan["nodes"] == {"worker_1": 3, "worker_2": 1}, plan


def test_unlisted_capacities_are_bounded():
    from placement.service.app import MAX_UNLISTED_NODES, unlisted_capacities
    many = [_rest_tm(f"w{i}") for i in range(MAX_UNLISTED_NODES + 50)]
    assert len(unlisted_capacities(many, [])) == MAX_UNLISTED_NODES
    huge = [_rest_tm("w" * 500), _rest_tm("big", cores=10**400, slots=10**9),
            _rest_tm("dup"), _rest_tm("dup", cores=8)]
    got = {c.node_id: c for c in unlisted_capacities(huge, [])}
    assert set(got) == {"big", "dup"}
    assert got["big"].cores == 4096.0 and got["big"].slots == 1024 and got["dup"].cores == 2


def test_a_service_learns_from_nodes_its_spec_does_not_name_as_they_join(tmp_path):
    """Started with another cluster's spec (found on a real cluster of worker_1..3 beside a
    service on the default spec): the spec's nodes, which never report, are left out, and
    the nodes that report join its observations one by one,
    so its replay holds states of several node counts. Training stacked them into one tensor
    and failed on every step ("all input arrays must have the same shape"); now each node
    count is its own group of the step's loss. (Silent spec nodes are waited for an hour
    here: when they are left out on time is tests/unit/test_absent_nodes.py.)"""
    service = make_service(tmp_path, absent_after_s=3600.0)
    rename = dict(zip(NODES, ("worker_1", "worker_2", "worker_3")))
    reports = [{**r, "node_id": rename[r["node_id"]],
                "completed": [{**t, "task_id": f"{rename[r['node_id']]}-{t['task_id']}"}
                              for t in r["completed"]]}
               for r in synthetic_feedback(640, seed=3)]
    joins = reports[len(reports) // 2]["emitted_at_ms"]   # worker_3 starts halfway
    reports = [r for r in reports if r["node_id"] != "worker_3" or r["emitted_at_ms"] >= joins]
    tasks = sum(len(r["completed"]) for r in reports)
    taken = trained = 0
    for start in range(0, len(reports), 8):   # trained as it arrives, as the service does
        taken += service.ingest.ingest(reports[start:start + 8])
        trained += service.learner.train_pending()
    assert taken == trained == tasks
    shapes = {item[0].shape[0] for item in service.learner.agent.replay.items}
    assert len(shapes) > 1, shapes            # the replay really mixes node counts
    assert service.learner.agent.updates > 0
    # the spec's nodes never reported: not this cluster's, so in no example and no decision
    assert sorted(service.learner.node_ids()) == ["worker_1", "worker_2", "worker_3"]
    assert all(item[0].shape[0] <= 3 for item in service.learner.agent.replay.items)
    answer = client_for(service).post("/decide", json={"tasks": [
        {"task_id": "x", "app_id": "face_recognition", "input_size": 1000}]})
    assert answer.status_code == 200 and answer.json()[0]["node"].startswith("worker_")
    # once one of the spec's nodes reports, the spec's nodes count again
    service.ingest.ingest([{**reports[0], "node_id": "tm_a", "completed": [],
                            "sequence": 10_000}])
    assert sorted(service.learner.node_ids()) == ["tm_a", "tm_b", "tm_c", "worker_1",
                                                  "worker_2", "worker_3"]


@pytest.mark.parametrize("case", list(PLAN_CASES))
def test_plan_executors_scenarios(case):
    rates, alive, max_total, expected = PLAN_CASES[case]
    plan = plan_executors(SPEC, rates, alive, max_total)
    assert plan.nodes == expected, plan.reason
    assert plan.total == sum(expected.values())
    for node, count in plan.nodes.items():
        assert 1 <= count <= SPEC.node(node).slots


# -- model store -------------------------------------------------------------------------------
def _save_model(path, version=0, seed=0):
    from placement.ldwp.agent import LDWPPolicy
    from placement.service.learner import to_cluster_spec
    agent = LDWPPolicy(to_cluster_spec(SPEC), settings=learning_settings({"seed": seed}))
    agent.save(path, version=version)


def test_model_store_round_trip_restart_and_tampering(tmp_path):
    store = ModelStore(tmp_path, keep=3)
    assert store.latest() is None
    first = store.publish(lambda p, v: _save_model(p, v), {"trained_on_records": 10})
    assert first["version"] == 1 and first["filename"] == "v000001.spmodel"
    data = store.read_bytes(1)
    assert hashlib.sha256(data).hexdigest() == first["sha256"] and data[:8] == b"SPMODEL2"
    _layers, meta = store.load(1)
    assert meta["version"] == 1
    for seed in (1, 2, 3):
        store.publish(lambda p, v, s=seed: _save_model(p, v, s), {"trained_on_records": 10 + seed})
    assert [m["version"] for m in store.versions()] == [2, 3, 4]  # keep=3: v1 pruned
    assert not (tmp_path / "v000001.spmodel").exists()
    with pytest.raises(UnknownVersion, match="does not exist"):
        store.metadata(1)
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left behind

    again = ModelStore(tmp_path, keep=3)  # restart: same versions, same metadata
    assert again.versions() == store.versions()
    (tmp_path / "index.json").write_text("{not json")
    rebuilt = ModelStore(tmp_path, keep=3)  # a broken index is rebuilt from the files
    assert [m["version"] for m in rebuilt.versions()] == [2, 3, 4]
    assert rebuilt.latest()["sha256"] == store.latest()["sha256"]

    path = tmp_path / "v000004.spmodel"
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0xFF  # flip one weight byte
    path.write_bytes(bytes(raw))
    with pytest.raises(ModelFileError, match="recorded sha256"):  # the store's own record
        rebuilt.load(4)
    with pytest.raises(ModelFileError, match="SHA-256"):           # and the file's digest
        load_model(path)
    with pytest.raises(ModelFileError, match="sha256"):
        rebuilt.read_bytes(4)
    with pytest.raises(ModelFileError):
        rebuilt.publish(lambda p, v: p.write_bytes(b"not a model"))


# -- learning ------------------------------------------------------------------------------------
def test_learner_publishes_versions_that_prefer_the_fast_node(trained):
    versions = trained.store.versions()
    assert [v["trained_on_records"] for v in versions] == [200, 700, 1200]
    assert [v["new_records"] for v in versions] == [200, 500, 500]
    assert all(len(v["training_data_hash"]) == 64 and v["nodes"] == list(NODES)
               for v in versions)
    assert len({v["training_data_hash"] for v in versions}) == 3
    assert all(v["gate"].startswith(("finite", "held-back error")) for v in versions)
    assert trained.learner.models_rejected == 0
    client = client_for(trained)
    decisions = client.post("/decide", json={"tasks": PROBE_TASKS}).json()
    assert all(d["policy"] == "ldwp v3" for d in decisions)
    picked = Counter(d["node"] for d in decisions)
    assert picked[FAST] == len(PROBE_TASKS), picked
    for d in decisions:
        assert d["scores"][FAST] == max(d["scores"].values())
        assert d["reason"].startswith("LDWP: highest Q")
    assert client.get("/health").json()["model_version"] == 3
    assert client.get("/plan").json()["nodes"][FAST] == 2   # measured: FAST serves 5x faster


def test_learning_is_deterministic_for_the_same_records(tmp_path):
    digests = []
    for run in ("one", "two"):
        service = make_service(tmp_path / run, min_records_first_version=150)
        service.ingest.ingest(synthetic_feedback(160, seed=3))  # 10 held back, 150 trained
        service.learner.train_pending()
        weights = b"".join(w.tobytes() + b.tobytes()
                           for w, b in export_layers(service.learner.agent.q_network))
        digests.append((hashlib.sha256(weights).hexdigest(),
                        service.learner._hash.hexdigest(), service.learner.models_rejected,
                        service.learner.versions_held, len(service.store.versions())))
    assert digests[0] == digests[1] and digests[0][2] + digests[0][3] + digests[0][4] == 1


def test_restart_resumes_from_the_newest_version(tmp_path):
    service = make_service(tmp_path, min_records_first_version=100)
    service.ingest.ingest(synthetic_feedback(106, seed=4))  # one in 16 held back: 100 trained
    service.learner.train_pending()
    first = service.store.latest()
    resumed = make_service(tmp_path, min_records_first_version=100, publish_every=100)
    assert resumed.learner.records_trained == 100
    resumed.ingest.ingest(synthetic_feedback(106, seed=5, prefix="u"))
    resumed.learner.train_pending()
    second = resumed.store.latest()
    assert second["version"] == first["version"] + 1 and second["trained_on_records"] == 200


def test_a_stored_model_built_with_other_model_settings_is_not_resumed(tmp_path):
    """A store whose newest version is another kind of model (here the plain node-scoring
    network of earlier releases) is not resumed under the residual defaults: a fresh model
    starts, numbered after it."""
    plain = {"q_prior": "none", "residual": "additive", "latency_transform": "linear"}
    old = make_service(tmp_path, min_records_first_version=100, learning=plain)
    old.ingest.ingest(synthetic_feedback(106, seed=4))
    old.learner.train_pending()
    assert old.store.latest()["version"] == 1
    fresh = make_service(tmp_path, min_records_first_version=100)
    assert fresh.learner.records_trained == 0
    assert fresh.learner.agent.settings.q_prior == "completion"
    fresh.ingest.ingest(synthetic_feedback(106, seed=5, prefix="u"))
    fresh.learner.train_pending()
    latest = fresh.store.latest()
    assert (latest["version"], latest["trained_on_records"]) == (2, 100)
    same = make_service(tmp_path, min_records_first_version=100)   # same settings: resumed
    assert same.learner.records_trained == 100


def test_initial_model_is_version_one_and_bad_learning_settings_are_named(tmp_path):
    initial = tmp_path / "pretrained.spmodel"
    _save_model(initial, seed=7)
    service = make_service(tmp_path, initial_model=initial)
    meta = service.store.latest()
    assert meta["version"] == 1 and meta["trained_on_records"] == 0
    assert service.store.read_bytes(1) == initial.read_bytes()
    decision = client_for(service).post("/decide", json={"tasks": PROBE_TASKS[:1]}).json()[0]
    assert decision["policy"] == "ldwp v1"
    with pytest.raises(ValueError, match="learnig_rate"):
        learning_settings({"learnig_rate": 0.1})
    with pytest.raises(ValueError, match="top level"):
        ServiceSettings(learning={"network": "paper"})


def test_the_service_starts_from_a_shipped_model_by_name(tmp_path):
    from placement.ldwp.shipped import shipped_model
    service = make_service(tmp_path, initial_model="shipped:residual")
    assert service.store.read_bytes(1) == shipped_model("residual").read_bytes()
    decision = client_for(service).post("/decide", json={"tasks": PROBE_TASKS[:1]}).json()[0]
    assert decision["policy"] == "ldwp v1" and decision["node"] in service.learner.cluster.node_ids
    with pytest.raises(ValueError, match="no shipped model 'nope'"):
        ServiceSettings(initial_model="shipped:nope")
    with pytest.raises(ValueError, match="size-agnostic"):
        ServiceSettings(initial_model="shipped:paper")


# -- de-duplication, metrics, model endpoints -----------------------------------------------------
def test_duplicates_are_dropped_by_sequence_and_task_id(tmp_path):
    service = make_service(tmp_path)
    reports = synthetic_feedback(60)
    assert service.ingest.ingest(reports) == 60
    assert service.ingest.ingest(reports[:10]) == 0          # whole reports re-delivered
    resent = {**reports[0], "sequence": 999, "emitted_at_ms": reports[0]["emitted_at_ms"] + 1}
    assert service.ingest.ingest([resent]) == 0               # new report, old task ids
    dropped = service.ingest.dedup.dropped
    assert dropped == {"sequence": 10, "task_id": len(reports[0]["completed"])}
    assert service.learner.records_taken == 60
    # A TaskManager restart reuses sequence numbers with new emission times: kept.
    restarted = {**reports[0], "emitted_at_ms": reports[0]["emitted_at_ms"] + 10_000,
                 "completed": [{**reports[0]["completed"][0], "task_id": "after-restart"}]}
    assert service.ingest.ingest([restarted]) == 1
    dedup = Deduplicator(task_capacity=2)  # bounded: the oldest ids are forgotten
    for i in range(3):
        dedup.filter({"node_id": "n", "sequence": i, "emitted_at_ms": i,
                      "completed": [{"task_id": f"t{i}"}]})
    assert len(dedup.filter({"node_id": "n", "sequence": 9, "emitted_at_ms": 9,
                             "completed": [{"task_id": "t0"}]})["completed"]) == 1


def test_undecodable_feedback_is_counted_and_skipped(tmp_path):
    service = make_service(tmp_path)
    report = synthetic_feedback(5)[0]
    payloads = [b"", b"junk", encode("NodeFeedback", report),
                encode("TaskEvent", {"task_id": "x", "app_id": "a", "input_size": 1,
                                     "submitted_at_ms": 0})]
    assert service.ingest.ingest_payloads(payloads) == len(report["completed"])
    assert service.ingest.undecodable == 3
    assert service.metrics.value("undecodable_messages_total") == 3


def test_metrics_expose_the_counters(trained):
    text = client_for(trained).get("/metrics").text
    for line in ("streamplace_service_feedback_records_total 1280.0",
                 "streamplace_service_records_trained_total 1200.0",
                 "streamplace_service_model_version 3.0",
                 'streamplace_service_duplicates_dropped_total{kind="task_id"}',
                 'streamplace_service_node_queue_depth{node="tm_b"}',
                 'streamplace_service_decisions_total{source="model"}',
                 "streamplace_service_training_steps_total"):
        assert line in text, line


def test_metrics_export_each_nodes_latest_feedback(tmp_path):
    """The per-node gauges the Grafana dashboard (docker/) shows come from the newest
    NodeFeedback of each node, even when an older report arrives after it."""
    service = make_service(tmp_path)
    base = {"host_mem_util": 0.5, "uplink_bytes_per_s": 0.0, "downlink_bytes_per_s": 0.0,
            "backpressure": 0.0, "completed": []}
    newer = {**base, "node_id": "tm_a", "emitted_at_ms": 2_000, "sequence": 2,
             "cpu_util": 0.75, "gpu_util": 0.5, "gpu_mem_util": 0.25, "queue_depth": 3,
             "in_flight": 2}
    older = {**newer, "emitted_at_ms": 1_000, "sequence": 1, "cpu_util": 0.1, "gpu_util": 0.9,
             "queue_depth": 0, "in_flight": 0}
    service.ingest.ingest([newer, older])
    text = client_for(service).get("/metrics").text
    for line in ('streamplace_service_node_cpu_util{node="tm_a"} 0.75',
                 'streamplace_service_node_gpu_util{node="tm_a"} 0.5',
                 'streamplace_service_node_gpu_mem_util{node="tm_a"} 0.25',
                 'streamplace_service_node_host_mem_util{node="tm_a"} 0.5',
                 'streamplace_service_node_queue_depth{node="tm_a"} 5.0'):
        assert line in text, line


def test_model_endpoints(trained):
    client = client_for(trained)
    latest = client.get("/models/latest").json()
    assert latest["version"] == 3 and latest["trained_on_records"] == 1200
    assert len(client.get("/models").json()["versions"]) == 3
    response = client.get("/models/3/weights")
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["etag"] == f'"{latest["sha256"]}"'
    assert hashlib.sha256(response.content).hexdigest() == latest["sha256"]
    assert client.get("/models/3/weights",
                      headers={"If-None-Match": response.headers["etag"]}).status_code == 304
    missing = client.get("/models/42/weights")
    assert missing.status_code == 404 and "42 does not exist" in missing.json()["detail"]
    assert client.get("/models/abc").status_code == 422


def test_costs_hand_a_new_router_what_the_learner_measured(trained):
    fits = client_for(trained).get("/costs").json()["fits"]
    assert {f["node"] for f in fits} == set(NODES)
    assert {f["task_type"] for f in fits} == set(app_ids())
    for app in app_ids():  # FAST serves about 5x faster: so do its fits
        per_node = {f["node"]: f["fixed_s"] + f["per_unit_s"] * f["mean_size"]
                    for f in fits if f["task_type"] == app}
        assert per_node[FAST] * 2.5 < min(v for n, v in per_node.items() if n != FAST)


def test_client_against_a_running_service(tmp_path):
    service = make_service(tmp_path, token="client-token")
    with service:
        client = PlacementClient(service.url, token="client-token", timeout_s=5.0)
        assert client.health()["status"] == "ok"
        assert client.latest() is None
        assert client.plan()["nodes"] == {"tm_a": 2, "tm_b": 1, "tm_c": 1}
        assert client.costs() == {"fits": []}        # nothing measured yet
        decisions = client.decide(PROBE_TASKS[:3])
        assert len(decisions) == 3 and all(d["node"] in NODES for d in decisions)
        service.ingest.ingest(synthetic_feedback(213))  # 13 held back, 200 trained
        service.learner.train_pending()
        meta = client.latest()
        assert meta["version"] == 1
        assert {f["node"] for f in client.costs()["fits"]} == set(NODES)
        assert hashlib.sha256(client.download(1)).hexdigest() == meta["sha256"]
        with pytest.raises(ServiceError) as info:
            client.download(1, metadata={**meta, "sha256": "0" * 64})
        assert "sha256" in str(info.value)
        with pytest.raises(ServiceError) as info:
            PlacementClient(service.url, timeout_s=5.0).models()
        assert info.value.status == 401
        with pytest.raises(ServiceError) as info:
            client.decide([{"task_id": "x", "app_id": "a", "input_size": -5}])
        assert info.value.status == 422
    with pytest.raises(ServiceUnavailable):
        PlacementClient(service.url, timeout_s=1.0).health()


def test_cli_serve_refuses_an_open_host_without_a_token(capsys, monkeypatch):
    from streamplace.cli import build_parser, main
    monkeypatch.delenv("STREAMPLACE_SERVICE_TOKEN", raising=False)
    assert main(["--set", "service.host=0.0.0.0", "serve"]) == 2
    assert "without a token" in capsys.readouterr().err
    args = build_parser().parse_args(["serve", "--port", "9000", "--token", "abcdefgh12"])
    assert (args.port, args.token) == (9000, "abcdefgh12")


def test_the_queue_the_router_saw_replaces_the_executors_count_for_the_chosen_node(tmp_path):
    """A routed task's example carries the router's in-flight count, estimated backlog and
    measured speed for the node it chose (``routed_queue``, ``routed_backlog_ms``,
    ``routed_speed_factor``), so the service learns latency against the numbers the router
    decides on; an entry of -1 (not routed) keeps the feedback's own numbers."""
    service = make_service(tmp_path, min_records_first_version=10_000, judge="latency")
    reports = synthetic_feedback(30, seed=5)
    for report in reports:
        report["routed_queue"] = [100 + i if i % 2 == 0 else -1
                                  for i in range(len(report["completed"]))]
        report["routed_backlog_ms"] = [1500.0 * (i + 1) if i % 2 == 0 else -1.0
                                       for i in range(len(report["completed"]))]
        report["routed_speed_factor"] = [2.5 if i % 2 == 0 else -1.0
                                         for i in range(len(report["completed"]))]
    service.learner.take(reports)
    examples = list(service.learner.examples._pending)
    assert len(examples) == 30
    by_id = {e.task.task_id: e for e in examples}
    for report in reports:
        own = report["in_flight"] + report["queue_depth"]
        for i, timing in enumerate(report["completed"]):
            chosen = next(s for s in by_id[timing["task_id"]].states
                          if s.node_id == report["node_id"])
            if i % 2 == 0:
                assert chosen.queue_depth == 100 + i
                assert chosen.backlog_s == pytest.approx(1.5 * (i + 1))
                assert chosen.speed_factor == 2.5
            else:
                assert chosen.queue_depth <= max(8 + 2, own)
                assert chosen.backlog_s == 0.0
                # the learner's own measurement of the node (the same rule as the routers')
                assert chosen.speed_factor > 0


def test_a_decide_rule_that_learns_from_outcomes_hears_each_new_completion(tmp_path):
    service = make_service(tmp_path, fallback="dual_agent")
    heard = []
    service.ingest.observers = [lambda *args: heard.append(args)]
    reports = synthetic_feedback(40, seed=2)
    reports[0]["completed"][0]["service_ms"] = float("nan")  # never told to a rule
    service.ingest.ingest(reports)
    service.ingest.ingest(reports)  # re-delivered: nothing new to tell
    assert len(heard) == 39 and len({task for task, _, _ in heard}) == 39
    assert all(0.0 < latency < 2.0 and node in NODES for _, latency, node in heard)


def test_the_service_wires_its_decide_rule_to_the_feedback(tmp_path):
    service = make_service(tmp_path, fallback="liquid")
    assert service.ingest.observers == [service.serving.fallback.observe_completion]
    assert make_service(tmp_path / "b", fallback="least_loaded").ingest.observers == []


def test_the_service_tries_its_first_version_and_health_says_so(tmp_path,
                                                                passing_burst_check):
    """The service's default: the first learned version that passes the checks is a
    candidate on trial (placement.service.version_trial) against the starting version (the
    prior, version 1), and /health shows the trial."""
    service = make_service(tmp_path, trial_window_tasks=200, publish_prior=True)
    service.learner.burst_check = passing_burst_check
    assert service.ingest.ingest(synthetic_feedback(400)) == 400
    service.learner.train_pending()
    latest = service.store.latest()
    assert latest["version"] == 2 and latest["trial_arm"] == "candidate"
    trials = client_for(service).get("/health").json()["learner"]["trials"]
    assert trials["trials"] == 1 and trials["running"] and trials["serving"] == "candidate"
    assert trials["champion_version"] == 1           # the prior, as published at start
    # its tasks (synthetic feedback names no version) only count towards a stall
    assert trials["last_verdict"] is None
    # interleaved (the default share): the routers decide 10% with it beside version 1, and
    # /decide, whose callers report nothing the trial could judge, keeps the champion
    assert (latest["trial_share"], latest["trial_champion"]) == (0.1, 1)
    assert trials["share"] == 0.1 and trials["block_tasks"][0] == [0, 0]
    decision = client_for(service).post("/decide", json={"tasks": PROBE_TASKS[:1]}).json()[0]
    assert decision["policy"] == "ldwp v1"


@pytest.mark.parametrize("entry,served", [
    ({"version": 3}, 3),                                                # serves alone
    ({"version": 3, "trial_share": 0.1, "trial_champion": 2}, 2),       # on trial: champion
    ({"version": 3, "trial_share": 0.1, "trial_champion": -1}, None),   # no champion: as now
    ({"version": 3, "trial_share": float("nan"), "trial_champion": 2}, None),   # unreadable
    ({"version": 3, "trial_share": 0.1, "trial_champion": "2"}, None),
    ({"version": 3, "trial_share": 0.1, "trial_champion": 3}, None),
])
def test_decide_serves_the_newest_version_or_its_trials_champion(entry, served):
    """What /decide loads (None: what serves now keeps serving)."""
    assert ServingPolicy._served_version(entry) == served
