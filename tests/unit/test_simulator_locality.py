"""Model locality in the simulator (simulator.locality): off changes nothing; on, a cold node
pays the configured load time, a rack peer the local one, a warm node nothing."""

from __future__ import annotations

import doctest

import pytest

import simulator.locality as locality_module
from simulator import LocalityConfig, SimulationConfig, Simulator, paper_cluster, paper_workload
from simulator.locality import WarmSet, rack_of
from workload.estimates import CostModel
from workload.model import ClusterSpec, NodeSpec, Task

from sim_fakes import FirstFit, Route

LOAD = LocalityConfig(warm_ttl_s=60.0, cold_local_ms=2000.0, cold_remote_ms=8000.0)


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def _run(costs, cluster, tasks, locality, routes=None):
    config = SimulationConfig(service_noise_sigma=0.0, locality=locality)
    return Simulator(costs, config).run(Route(routes), FirstFit(), cluster, tasks, seed=0)


def _latencies(result):
    arrival = {}
    out = {}
    for e in result.events:
        if e.kind == "decide":
            arrival[e.task_id] = e.time
        elif e.kind == "complete":
            out[e.task_id] = e.time - arrival[e.task_id]
    return out


def _node(name, *labels, cores=1):
    return NodeSpec(name, cores, 8, downlink_mbps=8, uplink_mbps=8, labels=labels)


def test_off_by_default_and_zero_costs_leave_the_event_log_unchanged(costs):
    assert Simulator(costs).config.locality is None
    cluster = paper_cluster(nodes=3)
    tasks = paper_workload(30, tasks=40, seed=3)
    off = Simulator(costs).run(Route(), FirstFit(), cluster, tasks, seed=5)
    zero = Simulator(costs, SimulationConfig(locality=LocalityConfig(0.0, 0.0, 0.0))).run(
        Route(), FirstFit(), cluster, tasks, seed=5)
    assert off.events == zero.events and off.metrics == zero.metrics
    assert not any(e.kind.startswith("model_load") for e in off.events)
    # and the setting is kept, not dropped, when the simulator fills in calibration defaults
    assert Simulator(costs, SimulationConfig(locality=LOAD)).config.locality == LOAD


def test_a_cold_node_pays_the_load_time_a_warm_one_nothing_and_the_ttl_expires(costs):
    cluster = ClusterSpec((_node("solo"),))
    alone = _latencies(_run(costs, cluster, [Task("x", "face_recognition", 1_000_000)], None))
    base = alone["x"]
    first_done = base + 8.0
    tasks = [Task("t1", "face_recognition", 1_000_000, 0.0),
             # 1 s after t1 left: still warm (ttl 60 s)
             Task("t2", "face_recognition", 1_000_000, first_done + 1.0),
             # 61 s after t2 left: the model was dropped
             Task("t3", "face_recognition", 1_000_000, first_done + 1.0 + base + 61.0)]
    result = _run(costs, cluster, tasks, LOAD)
    got = _latencies(result)
    assert got["t1"] == pytest.approx(base + 8.0, abs=1e-6)
    assert got["t2"] == pytest.approx(base, abs=1e-6)
    assert got["t3"] == pytest.approx(base + 8.0, abs=1e-6)
    loads = [(e.task_id, e.kind) for e in result.events if e.kind.startswith("model_load")]
    assert loads == [("t1", "model_load_store"), ("t3", "model_load_store")]
    received = next(e.time for e in result.events if e.kind == "input_received")
    first_start = next(e.time for e in result.events if e.kind == "start")
    assert first_start - received == pytest.approx(8.0, abs=1e-9)


def test_rack_peers_give_the_local_cost_other_racks_and_unlabelled_nodes_the_remote(costs):
    cluster = ClusterSpec((_node("a", "rack=r1"), _node("b", "gpu-less", "rack=r1"),
                           _node("c", "rack=r2"), _node("d")))
    base = _latencies(_run(costs, ClusterSpec((_node("a"),)),
                           [Task("x", "video_synopsis", 1_000_000)], None))["x"]
    tasks = [Task("t1", "video_synopsis", 1_000_000, 0.0)] + \
        [Task(f"t{i}", "video_synopsis", 1_000_000, 30.0) for i in (2, 3, 4)]
    routes = {"t1": "a", "t2": "b", "t3": "c", "t4": "d"}
    result = _run(costs, cluster, tasks, LOAD, routes)
    got = _latencies(result)
    assert got["t2"] == pytest.approx(base + 2.0, abs=1e-6)     # a (same rack) has it
    assert got["t3"] == pytest.approx(base + 8.0, abs=1e-6)     # other rack: model store
    assert got["t4"] == pytest.approx(base + 8.0, abs=1e-6)     # no label: a rack of its own
    kinds = {e.task_id: e.kind for e in result.events if e.kind.startswith("model_load")}
    assert kinds == {"t1": "model_load_store", "t2": "model_load_rack",
                     "t3": "model_load_store", "t4": "model_load_store"}


def test_a_peer_still_loading_has_nothing_to_copy_and_a_second_task_joins_the_load(costs):
    cluster = ClusterSpec((_node("a", "rack=r1", cores=2), _node("b", "rack=r1")))
    tasks = [Task("t1", "face_recognition", 1_000_000, 0.0),
             Task("t2", "face_recognition", 1_000_000, 0.5),   # b: a is mid-load
             Task("t3", "face_recognition", 1_000_000, 3.0)]   # a again: joins t1's load
    result = _run(costs, cluster, tasks, LOAD, {"t1": "a", "t2": "b", "t3": "a"})
    kinds = {e.task_id: e.kind for e in result.events if e.kind.startswith("model_load")}
    assert kinds == {"t1": "model_load_store", "t2": "model_load_store",
                     "t3": "model_load_wait"}
    starts = {}
    for e in result.events:
        if e.kind == "start":
            starts.setdefault(e.task_id, e.time)
    # t1's input arrives at 1 s (1 MB at 1 MB/s), its load ends at 9 s; t3 waits for that.
    assert starts["t1"] == pytest.approx(9.0, abs=1e-9)
    assert starts["t3"] == pytest.approx(9.0, abs=1e-9)


def test_warm_set_bookkeeping_and_rack_labels():
    cluster = ClusterSpec((NodeSpec("a", 2, 8, labels=("rack=r1",)), NodeSpec("b", 2, 8)))
    warm = WarmSet(LocalityConfig(warm_ttl_s=10.0), cluster)
    assert warm.acquire("a", "video_synopsis", 0.0) == (8.0, "store")
    assert warm.is_warm("a", "video_synopsis", 500.0)          # a task still holds it
    warm.release("a", "video_synopsis", 20.0)
    assert warm.is_warm("a", "video_synopsis", 30.0)
    assert not warm.is_warm("a", "video_synopsis", 30.5)
    with pytest.raises(ValueError, match="without a matching acquire"):
        warm.release("a", "video_synopsis", 31.0)
    assert [rack_of(n) for n in cluster.nodes] == ["r1", "node:b"]
    assert rack_of(NodeSpec("x", 1, 1, labels=("rack=",))) == "node:x"


@pytest.mark.parametrize("settings", [
    {"warm_ttl_s": -1.0}, {"cold_local_ms": -5.0}, {"cold_remote_ms": float("nan")},
    {"cold_local_ms": 9000.0, "cold_remote_ms": 8000.0}, {"warm_ttl_s": "60"}])
def test_bad_locality_settings_are_refused(settings):
    with pytest.raises(ValueError):
        LocalityConfig(**settings)


def test_docstring_example_runs():
    result = doctest.testmod(locality_module)
    assert result.attempted >= 4 and result.failed == 0
