"""Shared links in the simulator (simulator.shared_links): off changes nothing; on, transfers
crossing a rack's link share it fairly, and a transfer runs at the minimum of its fair shares."""

from __future__ import annotations

import doctest

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator.shared_links as shared_module
from simulator import (SharedLink, SharedLinksConfig, SimulationConfig, Simulator, paper_cluster,
                       paper_workload)
from simulator.shared_links import fair_rate
from workload.estimates import CostModel, load_calibration
from workload.model import ClusterSpec, NodeSpec, Task

from sim_fakes import FirstFit, Route

MB = 1_000_000  # bytes; a node link of 8 Mbit/s moves one a second


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def _node(name, mbps=8.0, rack="r1"):
    return NodeSpec(name, 4, 8, downlink_mbps=mbps, uplink_mbps=mbps,
                    labels=(f"rack={rack}",) if rack else ())


def _input_seconds(costs, cluster, tasks, shared, routes):
    """Per task: decision -> input received, in seconds."""
    config = SimulationConfig(service_noise_sigma=0.0, shared_links=shared)
    result = Simulator(costs, config).run(Route(routes), FirstFit(), cluster, tasks, seed=0)
    start, out = {}, {}
    for e in result.events:
        if e.kind == "decide":
            start[e.task_id] = e.time
        elif e.kind == "input_received":
            out[e.task_id] = e.time - start[e.task_id]
    return out


def _rack(capacity_mbps, *nodes):
    return SharedLinksConfig((SharedLink("r1", nodes, capacity_mbps),))


def test_doctests():
    assert doctest.testmod(shared_module).failed == 0


def test_off_by_default_leaves_the_event_log_unchanged(costs):
    assert Simulator(costs).config.shared_links is None
    cluster = paper_cluster(nodes=3)
    tasks = paper_workload(30, tasks=40, seed=3)
    default = Simulator(costs).run(Route(), FirstFit(), cluster, tasks, seed=5)
    off = Simulator(costs, SimulationConfig(shared_links=None)).run(
        Route(), FirstFit(), cluster, tasks, seed=5)
    assert default.events == off.events and default.metrics == off.metrics
    shared = _rack(10.0, *cluster.node_ids)
    # the setting is kept, not dropped, when the simulator fills in calibration defaults
    assert Simulator(costs, SimulationConfig(shared_links=shared)).config.shared_links == shared


def test_a_link_too_wide_to_bind_times_transfers_as_without_it(costs):
    cluster = paper_cluster(nodes=3)
    tasks = paper_workload(30, tasks=40, seed=3)
    off = Simulator(costs).run(Route(), FirstFit(), cluster, tasks, seed=5)
    wide = SharedLinksConfig.from_labels(
        ClusterSpec(tuple(NodeSpec(n.node_id, 1, 1, labels=("rack=all",))
                          for n in cluster.nodes)), capacity_mbps=1e9)
    on = Simulator(costs, SimulationConfig(shared_links=wide)).run(
        Route(), FirstFit(), cluster, tasks, seed=5)
    assert on.metrics.completed == off.metrics.completed
    assert on.metrics.latency_p99_s == pytest.approx(off.metrics.latency_p99_s, rel=1e-9)
    assert [(e.kind, e.task_id) for e in on.events] == [(e.kind, e.task_id) for e in off.events]


def test_on_a_binding_link_changes_the_run(costs):
    cluster = paper_cluster(nodes=3)
    tasks = paper_workload(60, tasks=40, seed=3)
    off = Simulator(costs).run(Route(), FirstFit(), cluster, tasks, seed=5)
    tight = _rack(200.0, *cluster.node_ids)   # 200 Mbit/s for three Gigabit nodes
    on = Simulator(costs, SimulationConfig(shared_links=tight)).run(
        Route(), FirstFit(), cluster, tasks, seed=5)
    assert on.events != off.events
    assert on.metrics.latency_p99_s > off.metrics.latency_p99_s


# (case, rack capacity Mbit/s, node link Mbit/s per node, tasks (id, node, MB, arrival s),
#  expected input seconds per task)
CASES = [
    ("one transfer, rack as wide as the node link", 8.0, {"a": 8.0, "b": 8.0},
     [("t1", "a", 1, 0.0)], {"t1": 1.0}),
    ("two transfers on one shared link take twice as long", 8.0, {"a": 8.0, "b": 8.0},
     [("t1", "a", 1, 0.0), ("t2", "b", 1, 0.0)], {"t1": 2.0, "t2": 2.0}),
    ("the node link limits: the wide shared link does not speed it up", 80.0,
     {"a": 8.0, "b": 8.0}, [("t1", "a", 1, 0.0), ("t2", "b", 1, 0.0)], {"t1": 1.0, "t2": 1.0}),
    ("a node link of its own still splits between its transfers", 80.0, {"a": 8.0, "b": 8.0},
     [("t1", "a", 1, 0.0), ("t2", "a", 1, 0.0)], {"t1": 2.0, "t2": 2.0}),
    # both at 0.5 MB/s until t1 is done at 2 s; t2's last MB then alone at 1 MB/s: 3 s, not 4
    ("finishing one transfer speeds up the other", 8.0, {"a": 8.0, "b": 8.0},
     [("t1", "a", 1, 0.0), ("t2", "b", 2, 0.0)], {"t1": 2.0, "t2": 3.0}),
    # a's own 4 Mbit/s link caps t1 at 0.5 MB/s (its rack share is 0.5 too); b's rack share
    # 0.5 MB/s of an 8 Mbit/s link: both 2 s
    ("each transfer at the minimum of its fair shares", 8.0, {"a": 4.0, "b": 8.0},
     [("t1", "a", 1, 0.0), ("t2", "b", 1, 0.0)], {"t1": 2.0, "t2": 2.0}),
    # c is on no shared link: unaffected by the busy rack
    ("a node outside the group is not slowed", 8.0, {"a": 8.0, "b": 8.0, "c": 8.0},
     [("t1", "a", 1, 0.0), ("t2", "b", 1, 0.0), ("t3", "c", 1, 0.0)],
     {"t1": 2.0, "t2": 2.0, "t3": 1.0}),
    # t2 arrives at 0.5 s when t1 has 0.5 MB left: both at 0.5 MB/s, t1 done at 1.5 s;
    # t2 then has 0.5 MB left alone: done at 2 s (1.5 s after it arrived)
    ("a later arrival re-times the transfer in flight", 8.0, {"a": 8.0, "b": 8.0},
     [("t1", "a", 1, 0.0), ("t2", "b", 1, 0.5)], {"t1": 1.5, "t2": 1.5}),
]


@pytest.mark.parametrize("case,rack_mbps,links,tasks,expected", CASES, ids=[c[0] for c in CASES])
def test_contention_arithmetic(costs, case, rack_mbps, links, tasks, expected):
    cluster = ClusterSpec(tuple(_node(n, mbps, rack=None if n == "c" else "r1")
                                for n, mbps in links.items()))
    shared = _rack(rack_mbps, *[n for n in links if n != "c"])
    work = [Task(tid, "video_synopsis", mb * MB, arrival) for tid, _, mb, arrival in tasks]
    got = _input_seconds(costs, cluster, work, shared, {tid: n for tid, n, _, _ in tasks})
    assert got == pytest.approx(expected, abs=1e-6)


def test_results_cross_the_shared_uplink_too(costs):
    cluster = ClusterSpec((_node("a"), _node("b")))
    tasks = [Task("t1", "video_synopsis", MB, 0.0), Task("t2", "video_synopsis", MB, 0.0)]
    routes = {"t1": "a", "t2": "b"}
    done = {}
    for shared in (None, _rack(8.0 * 0.02 / 2, "a", "b")):  # the two results at half rate
        config = SimulationConfig(service_noise_sigma=0.0, shared_links=shared)
        result = Simulator(costs, config).run(Route(routes), FirstFit(), cluster, tasks, seed=0)
        done[shared is None] = {e.task_id: e.time for e in result.events if e.kind == "complete"}
    # with the 0.08 Mbit/s rack, the uploads (20 KB each, both at once) crawl at 5 KB/s
    assert all(done[False][t] > done[True][t] + 1.0 for t in ("t1", "t2"))


def test_labels_and_calibration_build_the_config():
    cluster = ClusterSpec((_node("a", rack="r1"), _node("b", rack="r2"), _node("c", rack="r1"),
                           _node("d", rack=None)))
    config = SharedLinksConfig.from_labels(
        cluster, SharedLinksConfig.capacity_from_calibration(load_calibration()))
    assert [(g.name, g.nodes, g.capacity_mbps) for g in config.links] == [
        ("rack=r1", ("a", "c"), 10000.0), ("rack=r2", ("b",), 10000.0)]
    assert config.links_of("d") == ()


@pytest.mark.parametrize("build,match", [
    (lambda: SharedLink("r", ("a",), 0.0), "capacity_mbps must be a finite number > 0"),
    (lambda: SharedLink("r", ("a",), float("nan")), "capacity_mbps"),
    (lambda: SharedLink("r", (), 10.0), "non-empty tuple of distinct"),
    (lambda: SharedLink("r", ("a", "a"), 10.0), "distinct"),
    (lambda: SharedLink("", ("a",), 10.0), "non-empty name"),
    (lambda: SharedLinksConfig(()), "at least one shared link"),
    (lambda: SharedLinksConfig((SharedLink("r", ("a",), 1.0), SharedLink("r", ("b",), 1.0))),
     "distinct"),
    (lambda: SharedLinksConfig.from_labels(ClusterSpec((_node("a", rack=None),)), 10.0),
     "rack=<name>"),
    (lambda: SimulationConfig(shared_links="rack"), "SharedLinksConfig or None"),
    (lambda: SharedLinksConfig.capacity_from_calibration(load_calibration(), "nope"),
     "shared_links.nope"),
])
def test_bad_settings_raise(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_a_link_naming_an_unknown_node_is_refused(costs):
    config = SimulationConfig(shared_links=_rack(8.0, "a", "ghost"))
    with pytest.raises(ValueError, match="ghost"):
        Simulator(costs, config).run(Route(), FirstFit(), ClusterSpec((_node("a"),)),
                                     [Task("t1", "video_synopsis", MB)], seed=0)


def test_fair_rate_is_the_minimum_fair_share():
    assert fair_rate(100.0, 2, []) == 50.0
    assert fair_rate(100.0, 1, [(300.0, 3), (1000.0, 5)]) == 100.0
    assert fair_rate(100.0, 1, [(300.0, 6), (1000.0, 5)]) == 50.0


@settings(max_examples=12, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.sampled_from("ab"), st.integers(1, 4), st.integers(0, 6)),
                min_size=1, max_size=6),
       st.sampled_from([4.0, 8.0, 16.0]))
def test_property_transfers_are_never_faster_than_alone_and_the_rack_never_exceeds_capacity(
        work, rack_mbps):
    """Each input takes at least its bytes over its narrowest link; everything the rack moved
    took at least its bytes over the rack's capacity (bounded, derandomized: deterministic)."""
    costs = CostModel()
    cluster = ClusterSpec((_node("a"), _node("b")))
    tasks = [Task(f"t{i}", "video_synopsis", mb * MB, arrival / 2)
             for i, (_, mb, arrival) in enumerate(work)]
    routes = {f"t{i}": node for i, (node, _, _) in enumerate(work)}
    got = _input_seconds(costs, cluster, tasks, _rack(rack_mbps, "a", "b"), routes)
    narrowest_mb_s = min(8.0, rack_mbps) / 8
    for task in tasks:
        assert got[task.task_id] >= task.input_size / MB / narrowest_mb_s - 1e-6
    first = min(t.arrival_s for t in tasks)
    last = max(t.arrival_s + got[t.task_id] for t in tasks)
    assert last - first >= sum(t.input_size for t in tasks) / MB / (rack_mbps / 8) - 1e-6
