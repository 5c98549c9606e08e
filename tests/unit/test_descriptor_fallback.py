"""A user's ``task_type`` / ``task_size`` function that raises or gives junk only describes a
record to the policy: the record gets the default type (the operator's name) or size (its
serialized length), is routed as usual, is counted in ``streamplace_descriptor_fallbacks``,
and the log says so once per kind and reason (pyflink_jobs/router_function.py,
``OperatorRecords``). A record that is really too big is still refused by the limits."""

from __future__ import annotations

import enum

import pytest

from pyflink_jobs.router import RouterNode, RouterSettings
from pyflink_jobs.router_function import (MAX_TASK_SIZE, MAX_TASK_TYPE_CHARS, OperatorRecords,
                                          Refused, RouterFunction)
from workload.codec import decode
from workload.limits import TaskLimits
from workload.operators import as_operator, record_size

from flink_fakes import FakeContext, MetricsContext

LOGGER = "pyflink_jobs.router_function"
RECORD = '{"id": 7, "text": "hello"}'
DEFAULT_TYPE, DEFAULT_SIZE = "echo", len(RECORD)


class Size(enum.IntEnum):
    SMALL = 3


class Label(str):
    def __len__(self):
        raise RuntimeError("a str subclass whose len() raises")


def _raise(exc):
    def describe(record):
        raise exc
    return describe


# (what, task_type function, task_size function, expected (type, size), fallbacks by kind)
CASES = [
    ("valid type and size", lambda r: "kind", lambda r: 7, ("kind", 7), (0, 0)),
    ("type raises", _raise(KeyError("id")), None, (DEFAULT_TYPE, DEFAULT_SIZE), (1, 0)),
    ("type None", lambda r: None, None, (DEFAULT_TYPE, DEFAULT_SIZE), (1, 0)),
    ("type an int: its digits", lambda r: 42, None, ("42", DEFAULT_SIZE), (0, 0)),
    ("type a bool", lambda r: True, None, (DEFAULT_TYPE, DEFAULT_SIZE), (1, 0)),
    ("type a float", lambda r: 1.5, None, (DEFAULT_TYPE, DEFAULT_SIZE), (1, 0)),
    ("type a list", lambda r: ["a"], None, (DEFAULT_TYPE, DEFAULT_SIZE), (1, 0)),
    ("type empty", lambda r: "", None, (DEFAULT_TYPE, DEFAULT_SIZE), (1, 0)),
    ("type too long", lambda r: "x" * (MAX_TASK_TYPE_CHARS + 1), None,
     (DEFAULT_TYPE, DEFAULT_SIZE), (1, 0)),
    ("type unprintable", lambda r: "a\nb", None, (DEFAULT_TYPE, DEFAULT_SIZE), (1, 0)),
    ("type an int of 10**30: too long", lambda r: 10 ** 300, None,
     (DEFAULT_TYPE, DEFAULT_SIZE), (1, 0)),
    ("type a str subclass: a plain copy", lambda r: Label("lab"), None,
     ("lab", DEFAULT_SIZE), (0, 0)),
    ("size raises", None, _raise(ValueError("no size")), (DEFAULT_TYPE, DEFAULT_SIZE), (0, 1)),
    ("size None", None, lambda r: None, (DEFAULT_TYPE, DEFAULT_SIZE), (0, 1)),
    ("size a bool", None, lambda r: True, (DEFAULT_TYPE, DEFAULT_SIZE), (0, 1)),
    ("size NaN", None, lambda r: float("nan"), (DEFAULT_TYPE, DEFAULT_SIZE), (0, 1)),
    ("size a str", None, lambda r: "12", (DEFAULT_TYPE, DEFAULT_SIZE), (0, 1)),
    ("size negative", None, lambda r: -1, (DEFAULT_TYPE, DEFAULT_SIZE), (0, 1)),
    ("size 10**30", None, lambda r: 10 ** 30, (DEFAULT_TYPE, DEFAULT_SIZE), (0, 1)),
    ("size above MAX_TASK_SIZE", None, lambda r: MAX_TASK_SIZE + 1,
     (DEFAULT_TYPE, DEFAULT_SIZE), (0, 1)),
    ("size an IntEnum: its int", None, lambda r: Size.SMALL, (DEFAULT_TYPE, 3), (0, 0)),
    ("both junk", lambda r: object(), lambda r: 2.5, (DEFAULT_TYPE, DEFAULT_SIZE), (1, 1)),
]


def _reader(task_type=None, task_size=None, limits=None, name="echo"):
    reader = OperatorRecords(as_operator(lambda text: text, name=name, task_type=task_type,
                                         task_size=task_size), limits)
    reader.open(FakeContext())
    return reader


@pytest.mark.parametrize("task_type,task_size,expected,fallbacks", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_a_failing_describer_gives_the_default_and_is_counted(task_type, task_size, expected,
                                                              fallbacks, caplog):
    reader = _reader(task_type, task_size)
    with caplog.at_level("WARNING", logger=LOGGER):
        task, record, raw_bytes, _ = reader.read(RECORD)
    assert (task.app_id, task.input_size) == expected
    assert type(task.app_id) is str and type(task.input_size) is int
    assert record == RECORD and raw_bytes == DEFAULT_SIZE  # the record itself: untouched
    assert (reader.descriptor_fallbacks["task_type"],
            reader.descriptor_fallbacks["task_size"]) == fallbacks
    assert len(caplog.records) == sum(fallbacks)  # a warning per fallback, the first time


def test_the_warning_is_logged_once_per_kind_and_reason(caplog):
    answers = iter([KeyError("a"), KeyError("b"), ValueError("c"), None, None, 3.0, 4.0])

    def task_type(record):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    reader = _reader(task_type, task_size=lambda r: None)
    with caplog.at_level("WARNING", logger=LOGGER):
        tasks = [reader.read(RECORD)[0] for _ in range(7)]
    assert {t.app_id for t in tasks} == {DEFAULT_TYPE}
    assert reader.descriptor_fallbacks == {"task_type": 7, "task_size": 7}
    # task_type: KeyError, ValueError, None, float; task_size: None
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 5, messages
    assert [m.split(" ")[0] for m in messages] == ["task_type", "task_size", "task_type",
                                                  "task_type", "task_type"]
    assert "raised KeyError: 'a'" in messages[0] and "the operator's name" in messages[0]
    assert "the record's serialized length" in messages[1]


# (what, limits, task_size function, record, refused?)
LIMIT_CASES = [
    ("a junk size does not make a small record too big", TaskLimits(max_size=100),
     lambda r: 10 ** 30, "small", False),
    ("a raising size does not either", TaskLimits(max_size=100), _raise(OverflowError()),
     "small", False),
    ("a record too big by its own length is refused after a fallback",
     TaskLimits(max_size=8), lambda r: "junk", "nine chars", True),
    ("a record too big by its default size is refused", TaskLimits(max_size=8), None,
     "nine chars", True),
    ("a valid size above the limit is refused", TaskLimits(max_size=100),
     lambda r: 101, "small", True),
]


@pytest.mark.parametrize("limits,task_size,record,refused", [c[1:] for c in LIMIT_CASES],
                         ids=[c[0] for c in LIMIT_CASES])
def test_the_limits_see_the_default_size_after_a_fallback(limits, task_size, record, refused):
    reader = _reader(task_size=task_size, limits=limits)
    if refused:
        with pytest.raises(Refused) as refusal:
            reader.read(record)
        assert refusal.value.stage == "limits"
    else:
        assert reader.read(record)[0].input_size == record_size(record)


def test_an_operator_name_that_is_no_valid_type_still_refuses_as_before():
    reader = _reader(task_type=_raise(KeyError("id")), name="two\nlines")
    with pytest.raises(Refused) as refusal:
        reader.read(RECORD)
    assert refusal.value.stage == "task_type" and "operator's name" in refusal.value.reason


def test_the_router_routes_records_its_describer_fails_on_and_counts_them_in_a_gauge(caplog):
    records = [f'{{"id": {i}}}' for i in range(6)]

    def task_type(record):
        if record.endswith('3}'):
            return "three"
        raise LookupError("no type")

    operator = as_operator(lambda text: text, name="echo", task_type=task_type,
                           task_size=lambda r: float("inf"))
    function = RouterFunction(RouterSettings(nodes=[RouterNode("tm_a", cpu_cores=1),
                                                    RouterNode("tm_b", cpu_cores=1)],
                                             policy="round_robin"), OperatorRecords(operator))
    context = MetricsContext()
    function.open(context)
    try:
        with caplog.at_level("WARNING", logger=LOGGER):
            emitted = [list(function.process_element(r, FakeContext())) for r in records]
    finally:
        function.close()
    routed = [outputs[0][1] for outputs in emitted]
    assert all(len(outputs) == 1 and isinstance(outputs[0], tuple) for outputs in emitted)
    assert [r.record for r in routed] == records  # every record routed, none a dead letter
    assert [r.task_type for r in routed] == ["echo"] * 3 + ["three"] + ["echo"] * 2
    assert [r.task_size for r in routed] == [record_size(r) for r in records]
    assert context.metrics.gauges["streamplace_descriptor_fallbacks"]() == 5 + 6
    assert context.metrics.gauges["streamplace_dead_letters"]() == 0
    assert len(caplog.records) == 2  # task_type LookupError, task_size float: once each


def test_the_router_still_dead_letters_a_record_really_too_big():
    operator = as_operator(lambda text: text, name="echo", task_size=lambda r: None)
    function = RouterFunction(RouterSettings(nodes=[RouterNode("tm_a", cpu_cores=1)],
                                             policy="round_robin"),
                              OperatorRecords(operator, TaskLimits(max_size=8)))
    function.open(FakeContext())
    try:
        [dead] = list(function.process_element("x" * 9, FakeContext()))
        [(_, routed)] = list(function.process_element("x" * 8, FakeContext()))
    finally:
        function.close()
    assert decode("DeadLetter", dead)["stage"] == "limits"
    assert routed.task_size == 8
