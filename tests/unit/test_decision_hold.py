"""Deciding late (pyflink_jobs.decision_hold): a router waits for room before it decides, wakes on
a completion report from another thread, never waits past its bound, and stops holding while
the feedback is quiet."""

from __future__ import annotations

import threading
import time

import pytest

from pyflink_jobs.decision_hold import DecisionHold, held_router_bundle, hold_limits
from pyflink_jobs.hook import HookSettings
from pyflink_jobs.router import Router, RouterNode, RouterSettings
from workload.model import Task

NODES = [RouterNode("tm_a", cpu_cores=2), RouterNode("tm_b", cpu_cores=1)]


def feedback(node, completed):
    return {"node_id": node, "emitted_at_ms": 1_000_000, "cpu_util": 0.0, "gpu_util": 0.0,
            "host_mem_util": 0.1, "gpu_mem_util": 0.0, "uplink_bytes_per_s": 0.0,
            "downlink_bytes_per_s": 0.0, "queue_depth": 0, "in_flight": 0,
            "completed": [{"task_id": t, "app_id": "review", "input_size": 100,
                           "queue_ms": 1.0, "service_ms": 2.0, "finished_at_ms": 1_000_000}
                          for t in completed], "sequence": 1}


def holding_router(depth=1.0, max_s=5.0, capacity=2):
    return Router(RouterSettings(nodes=NODES, policy="least_outstanding",
                                 executor_capacity=capacity, hold_in_flight=depth,
                                 hold_max_s=max_s))


# (name, capacity shares, hold_in_flight, expected limits)
LIMIT_CASES = [
    ("one times the share", {"a": 32, "b": 16}, 1.0, {"a": 32, "b": 16}),
    ("fractions round up", {"a": 3}, 1.5, {"a": 5}),
    ("never below one", {"a": 1}, 0.1, {"a": 1}),
]


@pytest.mark.parametrize("name,shares,depth,expected", LIMIT_CASES,
                         ids=[c[0] for c in LIMIT_CASES])
def test_hold_limits_are_the_depth_times_each_nodes_share(name, shares, depth, expected):
    assert hold_limits(shares, depth) == expected


@pytest.mark.parametrize("depth", [0, -1, float("nan"), float("inf"), 5000, True, "2"])
def test_a_depth_outside_its_range_is_refused(depth):
    with pytest.raises(ValueError, match="hold_in_flight"):
        hold_limits({"a": 1}, depth)


# (name, in-flight counts, room?)
ROOM_CASES = [
    ("both below", {"a": 0, "b": 0}, True),
    ("one below", {"a": 4, "b": 1}, True),
    ("both at the limit", {"a": 4, "b": 2}, False),
    ("both over it", {"a": 9, "b": 9}, False),
]


@pytest.mark.parametrize("name,counts,room", ROOM_CASES, ids=[c[0] for c in ROOM_CASES])
def test_room_is_some_node_below_its_limit(name, counts, room):
    assert DecisionHold({"a": 4, "b": 2}).has_room(counts) is room


def test_a_router_with_room_decides_at_once_and_counts_no_hold():
    router = holding_router(capacity=2)
    router.decide(Task("t0", "review", 100))
    assert router.hold.holds == 0 and router.stats()["hold"]["limits"] == {"tm_a": 2,
                                                                            "tm_b": 2}


def test_a_full_router_waits_for_a_completion_reported_on_another_thread():
    router = holding_router(capacity=1, max_s=5.0)
    first = [router.decide(Task(f"t{i}", "review", 100)).node for i in range(2)]
    assert sorted(first) == ["tm_a", "tm_b"]          # one each: now no node has room
    decided = []

    def decide_third():
        decided.append(router.decide(Task("t2", "review", 100)).node)

    worker = threading.Thread(target=decide_third)
    worker.start()
    time.sleep(0.2)
    assert decided == [] and worker.is_alive()        # held: nothing decided yet
    freed = first.index("tm_b")
    router.on_feedback(feedback("tm_b", [f"t{freed}"]))   # the feedback tail's thread
    worker.join(timeout=5.0)
    assert decided == ["tm_b"]                        # the node that made room
    stats = router.stats()["hold"]
    assert stats["holds"] == 1 and stats["timeouts"] == 0 and 0.1 < stats["held_s"] < 5.0


def test_a_wait_ends_at_its_bound_and_the_quiet_feedback_stops_holding_until_a_completion():
    router = holding_router(capacity=1, max_s=0.05)
    for i in range(2):
        router.decide(Task(f"t{i}", "review", 100))
    started = time.monotonic()
    router.decide(Task("t2", "review", 100))          # no report comes: decided after the bound
    router.decide(Task("t3", "review", 100))          # quiet: no wait at all
    assert time.monotonic() - started < 1.0
    assert router.hold.timeouts == 1 and router.hold.holds == 1 and router.hold.quiet
    router.on_feedback(feedback("tm_a", ["t0"]))      # a completion: holding resumes
    assert not router.hold.quiet


def test_a_report_that_retires_nothing_of_ours_wakes_nobody():
    router = holding_router(capacity=1, max_s=0.05)
    for i in range(2):
        router.decide(Task(f"t{i}", "review", 100))
    router.decide(Task("t2", "review", 100))          # times out: quiet
    router.on_feedback(feedback("tm_a", ["someone-elses"]))   # another router's task
    assert router.hold.quiet                          # still quiet: nothing of ours retired


def test_without_a_depth_the_router_never_holds():
    router = Router(RouterSettings(nodes=NODES, policy="least_outstanding",
                                   executor_capacity=1))
    for i in range(5):
        router.decide(Task(f"t{i}", "review", 100))
    assert router.hold is None and "hold" not in router.stats()


@pytest.mark.parametrize("bad", [-1.0, float("nan"), 10_000.0, True])
def test_router_settings_refuse_a_bad_depth(bad):
    with pytest.raises(ValueError, match="hold_in_flight"):
        RouterSettings(nodes=NODES, hold_in_flight=bad)


def test_the_hook_reads_the_depth_from_the_environment_and_reads_feedback_itself():
    settings = HookSettings.from_env({"STREAMPLACE_HOOK_HOLD_IN_FLIGHT": "2.5"})
    assert settings.hold_in_flight == 2.5
    assert settings.feedback_from_topic()             # "auto": the router must see completions
    assert not HookSettings().feedback_from_topic()   # (pinned routing without a hold)


def test_the_hook_refuses_a_hold_fed_by_the_broadcast_input():
    with pytest.raises(ValueError, match="broadcast input cannot read a completion"):
        HookSettings(hold_in_flight=2.0, router_feedback="broadcast")


@pytest.mark.parametrize("bad", [-0.5, float("nan"), "many", 5000])
def test_the_hook_refuses_a_bad_depth(bad):
    with pytest.raises(ValueError, match="hold_in_flight"):
        HookSettings(hold_in_flight=bad)


# -- the holding router's own PyFlink bundles ---------------------------------------------------

# (name, the hold's limits, expected bundle size)
BUNDLE_CASES = [
    ("a quarter of the whole depth", {"tm_a": 96, "tm_b": 96, "tm_c": 96}, 72),
    ("never below one record", {"tm_a": 1}, 1),
    ("never above PyFlink's default", {"tm_a": 5000, "tm_b": 5000}, 1000),
]


@pytest.mark.parametrize("name,limits,expected", BUNDLE_CASES, ids=[c[0] for c in BUNDLE_CASES])
def test_a_holding_routers_bundle_is_a_share_of_its_depth(name, limits, expected):
    assert held_router_bundle(limits) == expected


@pytest.mark.parametrize("limits", [{}, {"tm_a": 0}])
def test_a_bundle_for_no_depth_is_refused(limits):
    with pytest.raises(ValueError, match="at least 1"):
        held_router_bundle(limits)


def _bundle(stream):
    """(bundle size, bundle time ms) the Python operator behind ``stream`` will run with."""
    from pyflink.java_gateway import get_gateway
    options = get_gateway().jvm.org.apache.flink.python.PythonOptions
    config = stream._j_data_stream.getTransformation().getOperatorFactory().getOperator() \
        .getConfiguration()
    return config.get(options.MAX_BUNDLE_SIZE), config.get(options.MAX_BUNDLE_TIME_MILLS)


def test_one_operator_gets_bundles_of_its_own_and_the_rest_keep_the_jobs():
    from pyflink.common import Types
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink_jobs.flink_ops import own_python_bundle
    env = StreamExecutionEnvironment.get_execution_environment()
    source = env.from_collection(["a", "b"], type_info=Types.STRING())
    router = source.map(str.upper, output_type=Types.STRING())
    executor = router.map(str.lower, output_type=Types.STRING())
    assert own_python_bundle(router, 7, 20)
    assert _bundle(router) == (7, 20)
    assert _bundle(executor) == (1000, 1000)             # PyFlink's defaults, untouched
    assert not own_python_bundle(source, 7, 20)          # a Java source: nothing to set
    assert not own_python_bundle(object(), 7, 20)        # a stand-in stream (no JVM behind)
    for size, time_ms in [(0, 20), (7, 0), (7.5, 20), (True, 20)]:
        with pytest.raises(ValueError, match="at least 1"):
            own_python_bundle(router, size, time_ms)


def test_the_python_operators_fused_in_front_get_the_same_bundle():
    """PyFlink fuses consecutive Python operators into one that runs with the first one's
    configuration: a user's map in front of the router gets the router's bundle (measured: the
    fused operator logged the first one's bundle size), a Python operator after it does not."""
    from pyflink.common import Types
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink_jobs.flink_ops import own_python_bundle
    env = StreamExecutionEnvironment.get_execution_environment()
    source = env.from_collection(["a", "b"], type_info=Types.STRING())
    parse = source.map(str.strip, output_type=Types.STRING())        # the user's own map
    router = parse.map(str.upper, output_type=Types.STRING())
    after = router.map(str.lower, output_type=Types.STRING())
    apart = parse.rebalance().map(str.lower, output_type=Types.STRING())  # not in front
    assert own_python_bundle(router, 9, 30)
    assert _bundle(router) == _bundle(parse) == (9, 30)
    assert _bundle(after) == _bundle(apart) == (1000, 1000)


def test_a_hooked_router_that_decides_late_sends_in_small_bundles():
    from pyflink.common import Types
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink_jobs.hook import StreamplaceHook
    results = {}
    for depth in (0.0, 3.0):
        env = StreamExecutionEnvironment.get_execution_environment()
        lines = env.from_collection(["a", "b"], type_info=Types.STRING())
        hook = StreamplaceHook(HookSettings(nodes=[RouterNode("tm_a"), RouterNode("tm_b")],
                                            executor_capacity=8, hold_in_flight=depth))
        hook.apply(env, lines, str.upper, output_type=Types.STRING())
        routers = [t for t in env._j_stream_execution_environment.getTransformations()
                   if t.getName() == "streamplace-router"]
        assert len(routers) == 1
        config = routers[0].getOperatorFactory().getOperator().getConfiguration()
        results[depth] = config.getString("python.fn-execution.bundle.size", "1000")
    # 2 nodes x 8 x 3 = 48 in flight at most, a quarter of it per bundle; no hold: the job's own
    assert results == {0.0: "1000", 3.0: "12"}


def _router_gauges(router):
    from types import SimpleNamespace
    from pyflink_jobs.router_function import _register_router_gauges
    from flink_fakes import RecordingMetrics
    group = RecordingMetrics()
    function = SimpleNamespace(router=router, _own_cpu=SimpleNamespace(mean_ns=lambda: 0),
                               refresher=None, reader=None, _tail=None)
    _register_router_gauges(group, function)
    return group.gauges


def test_the_holds_waits_show_in_the_routers_gauges_only_when_it_holds():
    router = holding_router(capacity=1, max_s=0.05)
    gauges = _router_gauges(router)
    for i in range(3):                                # the third waits out its bound
        router.decide(Task(f"t{i}", "review", 100))
    assert gauges["streamplace_hold_waits"]() == 1
    assert gauges["streamplace_hold_timeouts"]() == 1
    assert 40 <= gauges["streamplace_hold_ms"]() < 1000
    plain = Router(RouterSettings(nodes=NODES, policy="least_outstanding"))
    assert not any(name.startswith("streamplace_hold") for name in _router_gauges(plain))
