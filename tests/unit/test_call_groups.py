"""Call groups (interference.executor.batching, workload.operators.each_input): a per-record
stage takes the inputs of several records ready at once in one call, and still calls the user's
function exactly once per record, failing only the record whose own call raised."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from interference.executor import OperatorExecutor, OperatorExecutorSettings
from interference.executor.batching import (MAX_CALL_GROUP, PendingInput, StageQueues,
                                            call_group_size)
from workload.async_calls import SomeCallsFailed
from workload.operators import (BatchPolicy, StagedOperator, as_operator, chain_cpu_stages,
                                each_input, stage)

TIMEOUT = 60


def gated_operator(calls: Counter, gate: threading.Event, bad: str = "") -> StagedOperator:
    """parse (per record; the first call waits for ``gate``, so the others pile up ready)
    -> double (per record) -> label (per record). Every call is counted per input."""
    def parse(text):
        calls["parse", text] += 1
        gate.wait(TIMEOUT)
        if text == bad:
            raise ValueError(f"bad record {text!r}")
        return int(text)

    def double(x):
        calls["double", x] += 1
        return 2 * x

    return as_operator([parse, double, str])


def run(operator, records, **overrides):
    with OperatorExecutor(operator, OperatorExecutorSettings(
            **{"cpu_workers": 1, "use_gpu": "never", **overrides})) as executor:
        futures = [executor.submit(f"r{i}", r) for i, r in enumerate(records)]
        return [f.result(timeout=TIMEOUT) for f in futures], executor.batch_report()


def test_ready_records_share_one_call_and_each_input_is_called_once():
    calls, gate = Counter(), threading.Event()
    records = [str(i) for i in range(40)]
    timer = threading.Timer(0.2, gate.set)     # the first call holds the one unit meanwhile
    timer.start()
    outcomes, report = run(gated_operator(calls, gate), records)
    assert [o.outputs for o in outcomes] == [[str(2 * i)] for i in range(40)]
    assert all(n == 1 for n in calls.values()) and len(calls) == 80   # once per record
    groups = [r.batch_size for o in outcomes for r in o.stages]
    assert max(groups) > 1 and max(groups) <= MAX_CALL_GROUP
    # the three per-record steps are chained into one stage, which took call groups
    (name,) = report
    assert report[name]["cpu"]["mean_inputs"] > 1


def test_a_record_that_raises_fails_alone_and_no_other_call_is_made_twice():
    calls, gate = Counter(), threading.Event()
    gate.set()
    records = [str(i) for i in range(30)]
    outcomes, _ = run(gated_operator(calls, gate, bad="7"), records, max_attempts=1)  # the hook's
    assert [o.status for o in outcomes].count("FAILED") == 1
    assert outcomes[7].status == "FAILED" and "bad record '7'" in outcomes[7].error
    assert all(o.outputs == [str(2 * i)] for i, o in enumerate(outcomes) if i != 7)
    assert all(n == 1 for n in calls.values())   # max_attempts 1: as a plain map, once


def test_a_retried_record_is_retried_alone():
    calls, gate = Counter(), threading.Event()
    gate.set()
    outcomes, _ = run(gated_operator(calls, gate, bad="3"), [str(i) for i in range(12)],
                      max_attempts=3)
    assert outcomes[3].status == "FAILED" and calls["parse", "3"] == 3
    assert all(n == 1 for key, n in calls.items() if key != ("parse", "3"))


def test_batching_off_calls_one_input_at_a_time():
    calls, gate = Counter(), threading.Event()
    timer = threading.Timer(0.1, gate.set)
    timer.start()
    outcomes, _ = run(gated_operator(calls, gate), [str(i) for i in range(10)], batching=False)
    assert all(r.batch_size == 1 for o in outcomes for r in o.stages)


# (name, ready inputs, budget, grouped?, the calls' measured ms per input, the groups formed)
FORMING = [
    ("all ready, one free unit", 10, 1, True, [0.01], [10]),
    ("shared over two free units", 10, 2, True, [0.01], [5, 5]),
    ("uneven share", 7, 2, True, [0.01], [4, 3]),
    ("at most MAX_CALL_GROUP", 70, 1, True, [0.01], [MAX_CALL_GROUP]),
    ("no free unit", 5, 0, True, [0.01], []),
    ("not measured yet: one, which measures it", 5, 1, True, [], [1]),
    ("as many as fit in CALL_GROUP_MS", 20, 1, True, [0.5], [4]),
    ("a heavy step spreads over the units", 6, 2, True, [40.0], [1, 1]),
    ("one slow first call does not hold it", 10, 1, True, [200.0, 0.01, 0.01], [10]),
    ("not a grouped stage", 3, 2, False, [0.01], [1, 1]),
]


@pytest.mark.parametrize("name,ready,budget,grouped,measured,groups", FORMING,
                         ids=[f[0] for f in FORMING])
def test_call_groups_form_from_what_is_ready(name, ready, budget, grouped, measured, groups):
    queues = StageQueues({"parse": BatchPolicy()}, grouped=["parse"] if grouped else [])
    for ms in measured:
        queues.timed("parse", 1, ms)
    for i in range(ready):
        queues.put("parse", PendingInput(None, "parse", i, since=0.0))
    assert [len(g) for g in queues.form("parse", 1, budget, now=0.0)] == groups
    assert queues.grouped("parse") is grouped


def test_call_group_times_that_cannot_be_true_are_ignored():
    queues = StageQueues({"parse": BatchPolicy()}, grouped=["parse"])
    for inputs, ms in ((1, float("nan")), (1, -1.0), (0, 1.0), (1, float("inf")), (1, 0.0)):
        queues.timed("parse", inputs, ms)
    for i in range(5):
        queues.put("parse", PendingInput(None, "parse", i, since=0.0))
    assert [len(g) for g in queues.form("parse", 1, 1, now=0.0)] == [1]   # still unmeasured
    assert call_group_size(None) == 1 and call_group_size(float("nan")) == 1


def test_no_call_groups_with_batching_off():
    queues = StageQueues({"parse": BatchPolicy()}, batching=False, grouped=["parse"])
    for i in range(4):
        queues.put("parse", PendingInput(None, "parse", i, since=0.0))
    assert not queues.grouped("parse")
    assert [len(g) for g in queues.form("parse", 1, budget=1, now=0.0)] == [1]


def test_each_input_reports_which_inputs_failed():
    assert each_input("s", int, ["1", "2"]) == [1, 2]
    with pytest.raises(ValueError):      # one input: its own error, as a plain call
        each_input("s", int, ["x"])
    with pytest.raises(SomeCallsFailed) as caught:
        each_input("s", int, ["1", "x", "3"])
    assert caught.value.results == [1, None, 3] and set(caught.value.errors) == {1}


def test_which_stages_take_call_groups():
    async def fetch(x):
        return x

    op = StagedOperator("mixed", [
        stage("parse", int),
        stage("words", lambda x: iter([x]), deps=("parse",)),
        stage("model", lambda xs: xs, deps=("words",), batched=True, batch=8),
        stage("call", fetch, deps=("model",)),
    ])
    groupable = {s.name: s.groupable for s in op.stages}
    assert groupable == {"parse": True, "words": True, "model": False, "call": False}
    chained = chain_cpu_stages(as_operator([str.strip, str.split, len]))
    assert [(s.name, s.groupable) for s in chained.stages] == [("strip+split+len", True)]


def test_the_hook_setting_reaches_the_executor_settings():
    from pyflink_jobs.hook import HookSettings, StreamplaceHook
    assert HookSettings.from_env({"STREAMPLACE_HOOK_CALL_GROUPS": "false"}).call_groups is False
    for enabled in (True, False):
        hook = StreamplaceHook.create("127.0.0.1:9", call_groups=enabled)
        hook.nodes = hook.settings.resolved_nodes()
        assert hook.executor_settings(1, "tm_a").call_groups is enabled


def test_a_heavy_per_record_step_still_spreads_over_the_units():
    """Grouping a step whose calls take longer than CALL_GROUP_MS would queue its records on
    one unit while the other idles: measured heavy, it runs one input a call, on both units."""
    import time as clock

    def heavy(x):
        clock.sleep(0.03)
        return x

    outcomes, report = run(as_operator([heavy]), list(range(8)), cpu_workers=2,
                           chain_cpu_stages=False)
    assert all(o.status == "OK" for o in outcomes)
    runs = [r for o in outcomes for r in o.stages]
    assert {r.unit for r in runs} == {"cpu:0", "cpu:1"}
    assert all(r.batch_size == 1 for r in runs)
