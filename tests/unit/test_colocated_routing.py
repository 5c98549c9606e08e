"""routing="colocated": routers that run the records they keep on their own node
(pyflink_jobs/inline_executor.py, Router.route's local_node)."""

from __future__ import annotations

import math

import pytest

from pyflink_jobs.router import Router, RouterNode, RouterSettings
from workload.model import Task
from workload.operators import StagedOperator, as_operator, stage

from flink_fakes import FakeContext

NODES = [RouterNode("tm_a", cpu_cores=2), RouterNode("tm_b", cpu_cores=2)]


def _router(**settings) -> Router:
    return Router(RouterSettings(nodes=NODES, policy=settings.pop("policy", "round_robin"),
                                 **settings))


def _teach(router: Router, node: str, task_type: str, work_s: float, samples: int = 3):
    for _ in range(samples):
        assert router.costs.observe(node, task_type, 10, work_s)


# (what the router measured of "t" on tm_a, keep_local_below_ms, quotas) -> kept on tm_a?
KEEP_LOCAL = [
    ("nothing measured: the policy explores", None, 0.25, False, False),
    ("two samples only: not trusted yet", (0.00001, 2), 0.25, False, False),
    ("light, trusted", (0.00001, 3), 0.25, False, True),
    ("heavier than a move", (0.002, 3), 0.25, False, False),
    ("keeping switched off", (0.00001, 3), 0.0, False, False),
    ("tenant quotas count every task", (0.00001, 3), 0.25, True, False),
]


@pytest.mark.parametrize("why,measured,below_ms,quotas,kept", KEEP_LOCAL,
                         ids=[row[0] for row in KEEP_LOCAL])
def test_a_router_keeps_on_its_own_node_only_what_is_measured_lighter_than_a_move(
        why, measured, below_ms, quotas, kept):
    from pyflink_jobs.tenant_quotas import QuotaSettings
    router = _router(keep_local_below_ms=below_ms,
                     tenant_quotas=QuotaSettings({"*": 1.0}) if quotas else None)
    if measured is not None:
        _teach(router, "tm_a", "t", measured[0], measured[1])
    answers = [router.keep_local(Task(f"r{i}", "t", 10), "tm_a") for i in range(4)]
    assert all(a is not None for a in answers) == kept, why
    assert all(a is None for a in answers) == (not kept), why
    if kept:  # ran at once by the caller: nothing held in flight, every one counted routed
        assert answers[0] == pytest.approx(measured[0] * 1000)
        decision, context = router.kept_decision("tm_a", answers[0])
        assert decision.node == "tm_a" and decision.reason.startswith("kept on tm_a")
        assert context.queue == 0
        assert router.in_flight() == {"tm_a": 0, "tm_b": 0}
        assert router.routed["tm_a"] == 4


def test_keep_local_follows_new_timings_and_bounds_what_it_caches():
    from pyflink_jobs.router import MAX_KEPT_LINES
    router = _router()
    _teach(router, "tm_a", "t", 0.00001)
    assert router.keep_local(Task("r0", "t", 10), "tm_a") is not None
    _teach(router, "tm_a", "t", 0.05, samples=40)  # the type became heavy here
    assert router.keep_local(Task("r1", "t", 10), "tm_a") is None
    for i in range(MAX_KEPT_LINES + 10):  # a stream of new types
        assert router.keep_local(Task(f"n{i}", f"type-{i}", 10), "tm_a") is None
    assert len(router.keeping) <= MAX_KEPT_LINES
    assert router.keep_local(Task("r2", "t", 10), "tm_z") is None  # not one of its nodes


def test_route_itself_never_keeps_a_task_the_policy_decides():
    router = _router()
    _teach(router, "tm_a", "t", 0.00001)
    nodes = {router.route(Task(f"r{i}", "t", 10))[0].node for i in range(4)}
    assert nodes == {"tm_a", "tm_b"}


def test_a_task_the_policy_sends_to_the_routers_own_node_is_retired_once_ran_inline():
    router = _router(policy="least_outstanding")
    decision, _ = router.route(Task("r0", "heavy", 10))
    assert router.in_flight()[decision.node] == 1
    router.ran_inline("r0")
    router.ran_inline("r0")  # twice (a replay): counted once
    assert router.in_flight() == {"tm_a": 0, "tm_b": 0}


@pytest.mark.parametrize("value", [-0.1, math.nan, 1001.0])
def test_keep_local_below_ms_is_checked(value):
    with pytest.raises(ValueError, match="keep_local_below_ms"):
        RouterSettings(nodes=NODES, keep_local_below_ms=value)


def _colocated_function(monkeypatch, node_env: str, operator, policy="round_robin", limits=None):
    from pyflink.common import Types

    from pyflink_jobs.executor_function import ExecutorFunctionSettings
    from pyflink_jobs.inline_executor import InlineExecutor, inline_output_tag
    from pyflink_jobs.router_function import OperatorRecords, RouterFunction
    monkeypatch.setenv("STREAMPLACE_NODE_ID", node_env)
    op = as_operator(operator)
    inline = InlineExecutor(op, ExecutorFunctionSettings(bootstrap_servers="127.0.0.1:1",
                                                         feedback_interval_s=60.0),
                            inline_output_tag(Types.STRING()))
    function = RouterFunction(RouterSettings(nodes=NODES, policy=policy),
                              OperatorRecords(op, limits), inline=inline)
    function.open(FakeContext())
    return function


def _close(function):
    if function.inline is not None and getattr(function.inline, "feedback", None):
        function.inline.feedback.producer = None  # nothing to flush to an absent broker
    function.close()


def test_a_colocated_router_runs_its_own_nodes_records_and_sends_the_rest_on(monkeypatch):
    from workload.codec import decode

    def halve(text):
        return str(int(text) // 2)

    function = _colocated_function(monkeypatch, "tm_a", halve)
    try:
        emitted = [list(function.process_element(text, FakeContext()))
                   for text in ["8", "6", "x", "4"]]
        record = function.inline.feedback.build_record()
    finally:
        _close(function)
    # round robin over (tm_a, tm_b): records 0 and 2 are tm_a's, ran here
    [(tag, out)] = emitted[0]
    assert tag.tag_id == "streamplace-ran-in-router" and out == "4"
    [(tag, routed)] = emitted[1]
    assert tag.tag_id == "streamplace-node-tm_b" and routed.record == "6"
    [dead] = emitted[2]  # the operator raised here: a dead letter on the main output
    letter = decode("DeadLetter", dead)
    assert letter["raw"] == b"x" and letter["stage"] == "operator:halve"
    assert [r.record for _, r in emitted[3]] == ["4"]
    assert len(record["completed"]) == 2 and record["node_id"] == "tm_a"
    assert function.router.in_flight() == {"tm_a": 0, "tm_b": 2}
    assert function._counts.values["streamplace_dead_letters"] == 1


def test_records_kept_by_the_light_rule_report_one_timing_in_so_many(monkeypatch):
    from pyflink_jobs.inline_executor import KEPT_TIMING_EVERY, InlineExecutor
    monkeypatch.setattr(InlineExecutor, "report_min_interval_s", 0.0)  # count alone
    function = _colocated_function(monkeypatch, "tm_a", str.upper)
    try:
        _teach(function.router, "tm_a", "upper", 0.00001)
        count = 2 * KEPT_TIMING_EVERY + 1
        emitted = [list(function.process_element(f"r{i}", FakeContext()))
                   for i in range(count)]
        record = function.inline.feedback.build_record()
    finally:
        _close(function)
    assert [out for [(_, out)] in emitted] == [f"R{i}" for i in range(count)]
    assert function.router.routed == {"tm_a": count, "tm_b": 0}
    assert len(record["completed"]) == 3  # the 1st, 17th and 33rd
    assert record["downlink_bytes_per_s"] > 0  # every record's bytes still counted


def test_a_kept_record_the_operator_raises_on_is_a_dead_letter_on_the_lean_path_too(
        monkeypatch):
    from workload.codec import decode

    def shout(text):
        if text.startswith("bad"):
            raise ValueError(f"cannot shout {text}")
        return text.upper()

    function = _colocated_function(monkeypatch, "tm_a", shout)
    try:
        _teach(function.router, "tm_a", "shout", 0.00001)
        emitted = [list(function.process_element(text, FakeContext()))
                   for text in ["a", "bad1", "b", "bad2"]]  # the 1st reported, then lean
    finally:
        _close(function)
    assert [out for _, out in emitted[0] + emitted[2]] == ["A", "B"]
    for raw, [dead] in (("bad1", emitted[1]), ("bad2", emitted[3])):
        letter = decode("DeadLetter", dead)
        assert letter["raw"] == raw.encode() and letter["stage"] == "operator:shout"
        assert "ValueError" in letter["reason"] and "Traceback" in letter["reason"]
    assert function._counts.values["streamplace_dead_letters"] == 2
    assert function.inline._counts.values["streamplace_tasks_failed"] == 2
    assert function.inline._counts.values["streamplace_tasks_ok"] == 2


def test_a_router_on_a_taskmanager_of_no_known_node_only_routes(monkeypatch):
    function = _colocated_function(monkeypatch, "tm_elsewhere", str.upper)
    try:
        emitted = [list(function.process_element(text, FakeContext())) for text in "ab"]
    finally:
        _close(function)
    assert [tag.tag_id for [(tag, _)] in emitted] == ["streamplace-node-tm_a",
                                                       "streamplace-node-tm_b"]


def test_the_hook_refuses_colocated_routing_for_what_needs_the_executors_batching():
    from pyflink_jobs.hook import HookSettings, StreamplaceHook
    hook = StreamplaceHook(HookSettings(routing="colocated", nodes=NODES))
    batched = StagedOperator("scale", [stage("scale", lambda xs: xs, batched=True, batch=8)])
    hook._output_type = None
    for op in (None, as_operator(batched)):
        with pytest.raises(ValueError, match="one-step CPU operator"):
            hook._inline_executor(op)
    assert hook.settings.router_instances() == 2  # one per node
    with pytest.raises(ValueError, match="one router per node"):
        HookSettings(routing="colocated", nodes=NODES, router_parallelism=4)


def test_an_unknown_routing_is_refused_when_set():
    from pyflink_jobs.hook import HookSettings
    from pyflink_jobs.hook import StreamplaceHook
    with pytest.raises(ValueError, match="routing must be one of"):
        HookSettings(routing="colocted")
    with pytest.raises(ValueError, match="routing must be one of"):
        StreamplaceHook.builder().routing("colocted")
    assert StreamplaceHook.builder().routing("colocated").build().settings.routing == \
        "colocated"


def test_sampled_cpu_times_one_call_in_so_many():
    from pyflink_jobs.router_function import SampledCpu
    sampled = SampledCpu(every=4)
    assert sampled.mean_ns() == 0  # nothing sampled yet
    starts = [sampled.start() for _ in range(8)]
    assert [s is not None for s in starts] == [False, False, False, True] * 2
    for started in starts:
        sum(range(20_000))  # some CPU between start and stop
        sampled.stop(started)
    assert sampled.samples == 2 and sampled.mean_ns() > 0


def test_the_router_measures_its_own_cpu_on_every_path(monkeypatch):
    from pyflink_jobs.router_function import OWN_CPU_EVERY

    def halve(text):
        return str(int(text) // 2)

    function = _colocated_function(monkeypatch, "tm_a", halve)
    try:  # kept-or-run-here, sent on, and dead letters (round robin; "x" raises)
        for i in range(3 * OWN_CPU_EVERY):
            list(function.process_element("x" if i % 5 == 0 else str(i), FakeContext()))
    finally:
        _close(function)
    assert function._own_cpu.calls == 3 * OWN_CPU_EVERY
    assert function._own_cpu.samples == 3 and function._own_cpu.mean_ns() > 0


def _light_router(monkeypatch, operator):
    function = _colocated_function(monkeypatch, "tm_a", operator)
    _teach(function.router, "tm_a", as_operator(operator).name, 0.00001)
    assert function._lane is not None  # a text record, the default type and size: light
    return function


def test_the_light_path_gives_a_raising_record_every_attempt_and_its_dead_letter(monkeypatch):
    from workload.codec import decode
    calls = []

    def shout(text):
        calls.append(text)
        if text == "bad":
            raise ValueError("no")
        return text.upper()

    function = _light_router(monkeypatch, shout)
    try:
        emitted = [list(function.process_element(t, FakeContext()))
                   for t in ["a", "b", "bad", "c"]]
        executor = function.inline.executor
        function._lane.flush()
        counts = dict(executor._counts)
    finally:
        _close(function)
    assert [out for _, out in emitted[0] + emitted[1] + emitted[3]] == ["A", "B", "C"]
    [dead] = emitted[2]
    letter = decode("DeadLetter", dead)
    assert letter["raw"] == b"bad" and letter["stage"] == "operator:shout"
    assert "ValueError: no" in letter["reason"], letter
    assert f"after {executor.settings.max_attempts} attempt" in letter["reason"], letter["reason"]
    assert calls.count("bad") == executor.settings.max_attempts  # not one attempt more
    assert counts["completed"] == 3 and counts["failed"] == 1
    assert counts["stages_run"] == 3 + executor.settings.max_attempts
    assert function._counts.values["streamplace_dead_letters"] == 1
    assert function.router.routed == {"tm_a": 4, "tm_b": 0}


def test_the_light_path_counts_every_record_and_its_bytes_by_the_next_report(monkeypatch):
    function = _light_router(monkeypatch, str.upper)
    try:
        for i in range(10):  # the 1st restores the view, the lane's 1st is reported too
            list(function.process_element(f"r{i}é", FakeContext()))
        assert function._lane.done == 8  # held until the next report or close
        function._lane.flush()
        after = function.inline.feedback.build_record()
        ok = function.inline._counts.values["streamplace_tasks_ok"]
    finally:
        _close(function)
    assert ok == 10 and function.inline.executor._counts["completed"] == 10
    assert after["downlink_bytes_per_s"] > 0  # "é" is two bytes: the encoded length counts


@pytest.mark.parametrize("record", [{"n": 1}, ("a", 1)], ids=["dict", "tuple"])
def test_records_other_than_text_take_the_full_path_with_the_same_outputs(monkeypatch, record):
    function = _light_router(monkeypatch, repr)
    try:
        outputs = [list(function.process_element(record, FakeContext())) for _ in range(3)]
    finally:
        _close(function)
    assert function._lane(record) is None
    assert [out for [(_, out)] in outputs] == [repr(record)] * 3
    assert function.router.routed["tm_a"] == 3


def test_an_emulated_slower_node_runs_light_with_every_repeat(monkeypatch):
    monkeypatch.setenv("STREAMPLACE_WORK_MULTIPLIER", "3")
    calls = []

    def count(text):
        calls.append(text)
        return text.upper()

    function = _colocated_function(monkeypatch, "tm_a", count)
    try:
        _teach(function.router, "tm_a", "count", 0.00001)
        outputs = [[out for _, out in function.process_element(f"r{i}", FakeContext())]
                   for i in range(6)]
        light = function._lane.done  # the lane's own records, not its reported first
        function._lane.flush()
        counts = dict(function.inline.executor._counts)
    finally:
        _close(function)
    assert outputs == [[f"R{i}"] for i in range(6)]
    assert light == 4  # the 1st restores the view, the lane's 1st is reported
    assert len(calls) == 6 * 3  # each record's stage ran 3 times, on either path
    assert counts["completed"] == 6 and counts["stages_run"] == 6  # an attempt: one run


# (size of a text record, work fit of "upper" on tm_a: seconds at 0 and per unit) -> kept?
# keep_local_below_ms 0.25: kept while 1000 * (fixed + per_unit * size) < 0.25
LANE_KEEPS = [
    ("light, short", 10, (0.0001, 0.000001), True),
    ("just under the limit", 149, (0.0001, 0.000001), True),
    ("at the limit: not kept", 150, (0.0001, 0.000001), False),
    ("over the limit", 400, (0.0001, 0.000001), False),
    ("heavy at any size", 1, (0.001, 0.0), False),
]


@pytest.mark.parametrize("why,size,fit,kept", LANE_KEEPS, ids=[row[0] for row in LANE_KEEPS])
def test_the_light_lane_keeps_what_the_routers_keep_rule_keeps(monkeypatch, why, size, fit, kept):
    function = _colocated_function(monkeypatch, "tm_a", str.upper)
    try:
        for n in (10, 1000):  # two sizes: the fit's line is (fixed, per_unit)
            for _ in range(3):
                assert function.router.costs.observe("tm_a", "upper", n, fit[0] + fit[1] * n)
        list(function.process_element("warm", FakeContext()))  # restores the node view
        rule = function.router.keeping.kept_ms("upper", size, "tm_a")
        function.router.routed["tm_a"] -= 1 if rule is not None else 0
        before = dict(function.router.routed)
        emitted = function._lane("x" * size)
    finally:
        _close(function)
    assert (rule is not None) == kept, why
    assert (emitted is not None) == kept, why
    if kept:
        assert [out for _, out in emitted] == ["X" * size]
    assert function.router.routed["tm_a"] == before["tm_a"] + (1 if kept else 0)


def test_the_light_lane_follows_new_timings(monkeypatch):
    function = _light_router(monkeypatch, str.upper)
    try:
        list(function.process_element("warm", FakeContext()))
        assert function._lane("a") is not None
        _teach(function.router, "tm_a", "upper", 0.05, samples=40)  # upper became heavy here
        assert function._lane("b") is None  # the full path: the policy decides it
        emitted = list(function.process_element("c", FakeContext()))
    finally:
        _close(function)
    # the policy's: run here (its own node), or sent to tm_b's executor
    assert [tag.tag_id for tag, _ in emitted] in (["streamplace-ran-in-router"],
                                                  ["streamplace-node-tm_b"])


@pytest.mark.parametrize("record,size", [("abc", 3), ("é", 2), (b"\x00\xff", 2)],
                         ids=["ascii", "utf-8", "bytes"])
def test_the_light_lane_counts_a_record_by_its_serialized_length(monkeypatch, record, size):
    function = _light_router(monkeypatch, lambda r: r)
    try:
        for warm in ("warm", "warm"):  # the view restored; the lane's 1st kept is reported
            list(function.process_element(warm, FakeContext()))
        assert function._lane(record) == [(function.inline.output_tag, record)]
        assert (function._lane.done, function._lane.bytes_in) == (1, size)
        assert function._lane.bytes_out == size
    finally:
        _close(function)


@pytest.mark.parametrize("output,size", [("ÿé", 4), (b"\x01", 1), (12345, 5), ({"n": 1}, 7)],
                         ids=["utf-8", "bytes", "int-as-json", "dict-as-json"])
def test_the_light_lane_counts_an_output_by_its_serialized_length(monkeypatch, output, size):
    # the lane measures str / bytes outputs itself and hands any other kind to record_size
    function = _light_router(monkeypatch, lambda r: output)
    try:
        for warm in ("warm", "warm"):
            list(function.process_element(warm, FakeContext()))
        assert function._lane("abc") == [(function.inline.output_tag, output)]
        assert (function._lane.done, function._lane.bytes_in, function._lane.bytes_out) == \
            (1, 3, size)
    finally:
        _close(function)


def test_the_light_lane_runs_a_flat_operator_with_every_output(monkeypatch):
    def words(text):
        yield from text.split()

    function = _light_router(monkeypatch, words)
    try:
        assert function._lane.map_call is None  # several outputs: the list-giving call
        outputs = [[out for _, out in function.process_element(t, FakeContext())]
                   for t in ["a b", "c d e", "", "f"]]
    finally:
        _close(function)
    assert outputs == [["a", "b"], ["c", "d", "e"], [], ["f"]]


def test_the_light_lane_calls_a_plain_map_function_itself():
    from interference.executor.direct import DirectExecutor
    from interference.executor.settings import OperatorExecutorSettings

    def upper(text):
        return text.upper()

    def split(text):
        yield from text.split()

    settings = OperatorExecutorSettings(cpu_workers=1)
    with DirectExecutor(as_operator(upper), settings) as plain:
        assert plain.light_map() is upper
    with DirectExecutor(as_operator(split), settings) as flat:
        assert flat.light_map() is None  # several outputs a record
    with DirectExecutor(as_operator(stage("u", lambda t, device: t)), settings) as device:
        assert device.light_map() is None  # it takes the unit's device
    slower = OperatorExecutorSettings(cpu_workers=1, work_multiplier=3)
    calls = []
    with DirectExecutor(as_operator(lambda t: calls.append(t) or t), slower) as repeated:
        assert repeated.light_map()("x") == "x"
    assert calls == ["x"] * 3  # an emulated slower node: each call runs 3 times


def test_the_light_lane_reports_a_kept_timing_at_most_once_in_its_interval(monkeypatch):
    function = _light_router(monkeypatch, str.upper)
    lane, now, reported = function._lane, [100.0], []
    lane.clock, lane.min_report_interval_s = (lambda: now[0]), 0.05
    report = lane.report
    lane.report = lambda value, kept_ms: reported.append(value) or report(value, kept_ms)
    try:  # r0 restores the view (full path); r1 is the lane's first: reported
        outputs = [list(function.process_element(f"r{i}", FakeContext())) for i in range(49)]
        now[0] += 0.06  # the interval has passed: the next 16th is reported
        outputs += [list(function.process_element(f"s{i}", FakeContext())) for i in range(16)]
        ran = function.inline.gauge_values["streamplace_tasks_ok"]
    finally:
        _close(function)
    assert reported == ["r1", "s0"]  # r17 and r33 came within 50 ms of r1: run light
    assert [out for [(_, out)] in outputs] == [f"R{i}" for i in range(49)] + \
        [f"S{i}" for i in range(16)]
    assert ran == 65  # every record in the gauge at once, not at the next report


@pytest.mark.parametrize("record", ["x" * 11, "é" * 6, b"\x00" * 11],
                         ids=["text", "utf-8 text (12 bytes)", "bytes"])
def test_a_record_over_the_size_limit_never_runs_on_the_light_lane(monkeypatch, record):
    from workload.codec import decode
    from workload.limits import TaskLimits
    calls = []

    def upper(text):
        calls.append(text)
        return text.upper()

    function = _colocated_function(monkeypatch, "tm_a", upper, limits=TaskLimits(max_size=10))
    _teach(function.router, "tm_a", "upper", 0.00001)
    assert function._lane.max_size == 10  # the gate follows the limits
    try:
        list(function.process_element("warm", FakeContext()))  # restores the view
        assert function._lane(record) is None  # not the lane's: the full path refuses it
        [dead] = list(function.process_element(record, FakeContext()))
    finally:
        _close(function)
    letter = decode("DeadLetter", dead)
    assert "above the limit 10" in letter["reason"], letter["reason"]
    assert record not in calls  # the user's operator never saw it


def test_the_light_path_sends_outputs_the_output_type_cannot_carry_to_the_dead_letters(
        monkeypatch):
    """None, and a str where Types.INT() is asked: a plain map fails the job on either."""
    from pyflink.common import Types

    from pyflink_jobs.executor_function import ExecutorFunctionSettings
    from pyflink_jobs.inline_executor import InlineExecutor, inline_output_tag
    from pyflink_jobs.output_fit import OutputFit
    from pyflink_jobs.router_function import OperatorRecords, RouterFunction
    from workload.codec import decode

    def maybe(text):
        return None if text == "none" else "many" if text == "long" else len(text)

    monkeypatch.setenv("STREAMPLACE_NODE_ID", "tm_a")
    op = as_operator(maybe)
    inline = InlineExecutor(op, ExecutorFunctionSettings(
        bootstrap_servers="127.0.0.1:1", feedback_interval_s=60.0,
        output_fit=OutputFit.for_output_type(Types.INT())), inline_output_tag(Types.INT()))
    function = RouterFunction(RouterSettings(nodes=NODES, policy="round_robin"),
                              OperatorRecords(op, None), inline=inline)
    function.open(FakeContext())
    _teach(function.router, "tm_a", op.name, 0.00001)
    try:
        assert function._lane is not None
        emitted = [list(function.process_element(t, FakeContext()))
                   for t in ["ab", "none", "abc", "long"]]
    finally:
        _close(function)
    assert [out for _, out in emitted[0] + emitted[2]] == [2, 3]
    [dead] = emitted[1]
    letter = decode("DeadLetter", dead)
    assert letter["raw"] == b"none" and "returned None" in letter["reason"], letter
    [dead] = emitted[3]
    letter = decode("DeadLetter", dead)
    assert letter["raw"] == b"long", letter
    assert "does not fit the job's output_type" in letter["reason"], letter["reason"]
