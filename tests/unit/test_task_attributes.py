"""Tenants, deadlines and priorities: the Task fields, the Kafka attributes, workload generation."""

from __future__ import annotations

import math

import pytest

from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import Task
from workload.task_attributes import (MAX_DEADLINE_MS, TaskSLO, attributes_from_slo,
                                      reference_node, slo_of_task, task_slo_from_attributes,
                                      task_with_slo, with_tenants_and_deadlines)


@pytest.fixture(scope="module")
def costs():
    return CostModel(colocation=None)


# -- Task fields --------------------------------------------------------------------------------

def test_new_task_fields_are_trailing_and_off_by_default():
    old_style = Task("t1", "face_recognition", 10, 2.5, 7.0)  # the five positional fields
    assert (old_style.tenant, old_style.deadline_s, old_style.priority) == ("", None, 0)
    assert old_style == Task("t1", "face_recognition", 10, 2.5, 7.0, "", None, 0)
    assert old_style != Task("t1", "face_recognition", 10, 2.5, 7.0, tenant="a")


# -- attributes: parsing ------------------------------------------------------------------------

PARSED = [  # attributes -> (tenant, deadline_s, priority), by hand
    (None, ("", None, 0)),
    ({}, ("", None, 0)),
    ({"tenant": "team-a"}, ("team-a", None, 0)),
    ({"tenant": "A.b_c-9"}, ("A.b_c-9", None, 0)),
    ({"tenant": "x" * 64}, ("x" * 64, None, 0)),                    # longest name
    ({"deadline_ms": "1500"}, ("", 1.5, 0)),
    ({"deadline_ms": "250.5"}, ("", 0.2505, 0)),
    ({"deadline_ms": ".5"}, ("", 0.0005, 0)),
    ({"deadline_ms": "2e3"}, ("", 2.0, 0)),
    ({"deadline_ms": "86400000"}, ("", 86400.0, 0)),                # exactly one day: accepted
    ({"priority": "7"}, ("", None, 7)),
    ({"priority": "+7"}, ("", None, 7)),
    ({"priority": "-100"}, ("", None, -100)),
    ({"priority": "100"}, ("", None, 100)),
    ({"tenant": "b", "deadline_ms": "10", "priority": "-1", "colour": "nan", "": "?"},
     ("b", 0.01, -1)),                                              # unknown keys ignored
]


@pytest.mark.parametrize("attributes, expected", PARSED)
def test_attributes_parse_to_the_hand_computed_slo(attributes, expected):
    slo = task_slo_from_attributes(attributes)
    assert (slo.tenant, slo.priority) == (expected[0], expected[2])
    if expected[1] is None:
        assert slo.deadline_s is None
    else:
        assert slo.deadline_s == pytest.approx(expected[1], rel=1e-15)


HOSTILE = [  # (key, value): every one must raise a ValueError naming the key
    ("deadline_ms", "nan"), ("deadline_ms", "NaN"), ("deadline_ms", "inf"),
    ("deadline_ms", "Infinity"), ("deadline_ms", "1e999"), ("deadline_ms", "-5"),
    ("deadline_ms", "0"), ("deadline_ms", "0.0"), ("deadline_ms", "1e-400"),
    ("deadline_ms", "86400000.5"), ("deadline_ms", "9e99"), ("deadline_ms", "1_000"),
    ("deadline_ms", " 5"), ("deadline_ms", "5 "), ("deadline_ms", "\u0663"),  # Arabic 3
    ("deadline_ms", ""), ("deadline_ms", "5ms"), ("deadline_ms", "0x10"),
    ("deadline_ms", "1" * 40), ("deadline_ms", "9" * 1_000_000),
    ("deadline_ms", 1500), ("deadline_ms", 1.5), ("deadline_ms", None), ("deadline_ms", b"15"),
    ("tenant", ""), ("tenant", "x" * 65), ("tenant", "a b"), ("tenant", "a/b"),
    ("tenant", "t\u00e4m"), ("tenant", "a\n"), ("tenant", "x" * 1_000_000), ("tenant", 5),
    ("tenant", None), ("tenant", ["a"]),
    ("priority", "101"), ("priority", "-101"), ("priority", "1.0"), ("priority", "1e2"),
    ("priority", ""), ("priority", "0x10"), ("priority", "99999"), ("priority", " 1"),
    ("priority", "\u0663"), ("priority", 5), ("priority", True), ("priority", None),
]


@pytest.mark.parametrize("key, value", HOSTILE,
                         ids=[f"{k}-{str(v)[:12]!r}" for k, v in HOSTILE])
def test_hostile_attributes_raise_a_clear_error_naming_the_key(key, value):
    with pytest.raises(ValueError, match=f"'{key}'") as caught:
        task_slo_from_attributes({key: value, "unrelated": "ok"})
    assert len(str(caught.value)) < 300  # a megabyte of input never lands in a log line


@pytest.mark.parametrize("attributes", [[("tenant", "a")], "tenant=a", 5])
def test_attributes_must_be_a_map(attributes):
    with pytest.raises(ValueError, match="map"):
        task_slo_from_attributes(attributes)


# -- attributes: the inverse --------------------------------------------------------------------

ROUND_TRIPS = [
    (TaskSLO(), {}),
    (TaskSLO("team-a"), {"tenant": "team-a"}),
    (TaskSLO(deadline_s=1.5), {"deadline_ms": "1500.0"}),
    (TaskSLO(priority=-3), {"priority": "-3"}),
    (TaskSLO("b", 0.25, 100), {"tenant": "b", "deadline_ms": "250.0", "priority": "100"}),
    (TaskSLO("c", 86400.0, 0), {"tenant": "c", "deadline_ms": "86400000.0"}),
]


@pytest.mark.parametrize("slo, attributes", ROUND_TRIPS)
def test_round_trip_through_attributes(slo, attributes):
    assert attributes_from_slo(slo) == attributes
    assert task_slo_from_attributes(attributes) == slo


@pytest.mark.parametrize("deadline_s", [1e-6, 0.1, 1 / 3, 2.0 / 7.0, 12.345678901234, 86399.999])
def test_awkward_deadlines_come_back_within_rounding(deadline_s):
    back = task_slo_from_attributes(attributes_from_slo(TaskSLO("t", deadline_s, 1)))
    assert back.tenant == "t" and back.priority == 1
    assert back.deadline_s == pytest.approx(deadline_s, rel=1e-15)


@pytest.mark.parametrize("fields", [dict(deadline_s=math.nan), dict(deadline_s=math.inf),
                                    dict(deadline_s=0.0), dict(deadline_s=-1.0),
                                    dict(deadline_s=86400.001), dict(deadline_s=True),
                                    dict(priority=True), dict(priority=1.0),
                                    dict(priority=101), dict(tenant="a b"), dict(tenant=None)])
def test_task_slo_refuses_bad_fields(fields):
    with pytest.raises(ValueError):
        TaskSLO(**fields)


def test_task_carries_and_returns_its_slo():
    task = Task("t1", "video_synopsis", 100, 3.0)
    slo = TaskSLO("a", 2.0, 5)
    tagged = task_with_slo(task, slo)
    assert slo_of_task(tagged) == slo
    assert (tagged.task_id, tagged.arrival_s, task.tenant) == ("t1", 3.0, "")  # input unchanged
    with pytest.raises(ValueError, match="deadline_s"):
        slo_of_task(Task("t2", "video_synopsis", 1, deadline_s=math.nan))


# -- workload generation ------------------------------------------------------------------------

def _tasks(n, app="face_recognition", size=1_000_000):
    return [Task(f"t{i}", app, size, arrival_s=float(i)) for i in range(n)]


def test_deadline_is_factor_times_the_hand_computed_alone_time_on_the_reference_node(costs):
    size = 2_000_000
    task = Task("f", "face_recognition", size)  # a chain: stage after stage
    alone_ms = 0.0
    for stage in APPLICATIONS["face_recognition"].stages:
        gpu = costs.gpu_ms(stage.name, size, "k80")  # the reference GPU at its own speed
        alone_ms += min(costs.cpu_ms(stage.name, size), gpu if gpu is not None else math.inf)
    alone_ms += size / (1000e6 / 8) * 1000.0  # input over the default 1000 Mbit/s downlink
    [out] = with_tenants_and_deadlines([task], {"a": 1.0}, deadline_factor=2.5, costs=costs)
    assert out.deadline_s == pytest.approx(2.5 * alone_ms / 1000.0, rel=1e-12)
    assert (out.tenant, out.priority, out.task_id, out.input_size) == ("a", 0, "f", size)
    assert reference_node(costs).gpus[0].model == "k80"


def test_same_seed_same_tenants_other_seed_differs_and_inputs_are_untouched(costs):
    tasks = _tasks(200)
    first = with_tenants_and_deadlines(tasks, {"a": 1, "b": 1}, None, seed=4, costs=costs)
    again = with_tenants_and_deadlines(tasks, {"a": 1, "b": 1}, None, seed=4, costs=costs)
    other = with_tenants_and_deadlines(tasks, {"a": 1, "b": 1}, None, seed=5, costs=costs)
    assert first == again and first != other
    assert all(t.tenant == "" and t.deadline_s is None for t in tasks)
    assert [(t.task_id, t.arrival_s) for t in first] == [(t.task_id, t.arrival_s) for t in tasks]
    assert all(t.deadline_s is None for t in first)  # factor None: tenants only


def test_tenant_weights_set_the_shares_and_priorities_follow_the_tenant(costs):
    tasks = with_tenants_and_deadlines(_tasks(4000), {"big": 3.0, "small": 1.0}, None, seed=1,
                                       costs=costs, priorities={"small": 9})
    big = sum(t.tenant == "big" for t in tasks)
    # 3:1 -> 3000 expected; binomial sd = sqrt(4000 x 0.75 x 0.25) ~ 27, allow ~4 sd.
    assert 2890 <= big <= 3110
    assert {t.priority for t in tasks if t.tenant == "small"} == {9}
    assert {t.priority for t in tasks if t.tenant == "big"} == {0}


@pytest.mark.parametrize("kwargs, match", [
    (dict(tenants={}), "tenants"), (dict(tenants=["a"]), "tenants"),
    (dict(tenants={"a": 0}), "weight"), (dict(tenants={"a": math.nan}), "weight"),
    (dict(tenants={"a": -1}), "weight"), (dict(tenants={"a": True}), "weight"),
    (dict(tenants={"bad name": 1}), "tenant name"), (dict(tenants={"": 1}), "tenant name"),
    (dict(deadline_factor=0.0), "deadline_factor"),
    (dict(deadline_factor=math.nan), "deadline_factor"),
    (dict(deadline_factor=math.inf), "deadline_factor"),
    (dict(deadline_factor=-2.0), "deadline_factor"),
    (dict(deadline_factor=1e6), "deadline_factor"), (dict(deadline_factor="3"), "deadline_factor"),
    (dict(priorities={"zzz": 1}), "not one of the tenants"),
    (dict(priorities={"a": 1000}), "priority of tenant"),
])
def test_bad_generation_settings_are_refused(costs, kwargs, match):
    settings = dict(tenants={"a": 1.0}, deadline_factor=2.0, costs=costs) | kwargs
    with pytest.raises(ValueError, match=match):
        with_tenants_and_deadlines(_tasks(2), **settings)


def test_a_deadline_beyond_one_day_is_refused(costs):
    huge = Task("huge", "face_recognition", 10**12)  # hours alone; x 1000 is far past a day
    assert MAX_DEADLINE_MS == 86_400_000
    with pytest.raises(ValueError, match="deadline of task huge"):
        with_tenants_and_deadlines([huge], {"a": 1}, deadline_factor=1000.0, costs=costs)
