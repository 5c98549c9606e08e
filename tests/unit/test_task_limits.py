"""Bounds on what a task may be (workload.limits) and the router refusing what lies outside."""

from __future__ import annotations

import ast
import doctest
import pickle
from pathlib import Path

import pytest

import workload.limits as limits_module
from pyflink_jobs.hook import HookSettings, cluster_task_limits
from pyflink_jobs.router_function import OperatorRecords, Refused, TaskEventRecords
from workload.catalog import app_ids
from workload.codec import encode
from workload.limits import (BYTES_PER_PIXEL, BYTES_PER_RECORD_BYTE, DEFAULT_MAX_TASK_SIZE,
                             DEFAULT_NODE_MEMORY_BYTES, TaskLimits)
from workload.operators import as_operator, record_bytes
from flink_fakes import FakeContext

LIMITS = TaskLimits()


def task_event(**changes) -> dict:
    event = {"task_id": "t1", "app_id": "face_recognition", "input_size": 36_864,
             "submitted_at_ms": 0, "expected_work_ms": None}
    event.update(changes)
    return event


# -- the limits on their own ----------------------------------------------------------------

HOSTILE_SIZES = [
    ("negative", -5, "must be >= 0"),
    ("int32 wrap-around", -873743342, "must be >= 0"),
    ("10**8 pixels: GBs in a worker", 10**8, "above the limit"),
    ("10**15", 10**15, "above the limit"),
    ("too many digits to print", 10**100_000, "above the limit"),
    ("hugely negative", -(10**100_000), "must be >= 0"),
    ("None", None, "must be an integer"),
    ("NaN", float("nan"), "must be an integer"),
    ("infinity", float("inf"), "must be an integer"),
    ("bool", True, "must be an integer"),
    ("a float", 1.5, "must be an integer"),
    ("a string", "4096", "must be an integer"),
]


@pytest.mark.parametrize("name,size,why", HOSTILE_SIZES, ids=[c[0] for c in HOSTILE_SIZES])
def test_hostile_sizes_are_refused_with_a_reason_naming_the_size(name, size, why):
    reason = LIMITS.check("face_recognition", size)
    assert reason is not None and reason.startswith("size") and why in reason
    assert len(reason) < 200  # a reason, never a copy of the hostile value


HOSTILE_WORK = [
    ("NaN", float("nan"), "finite"),
    ("infinity", float("inf"), "finite"),
    ("minus infinity", float("-inf"), "finite"),
    ("negative", -1.0, ">= 0"),
    ("more than a day", 25 * 3600 * 1000.0, "above the limit"),
    ("a number no float can hold", 10**400, "above the limit"),
    ("bool", True, "must be a number"),
    ("a string", "23000", "must be a number"),
]


@pytest.mark.parametrize("name,work,why", HOSTILE_WORK, ids=[c[0] for c in HOSTILE_WORK])
def test_hostile_expected_work_is_refused_with_a_reason_naming_it(name, work, why):
    reason = LIMITS.check("face_recognition", 4096, expected_work_ms=work)
    assert reason is not None and reason.startswith("expected_work_ms") and why in reason


HOSTILE_LABELS = [
    ("empty type", {"task_type": ""}, "task_type"),
    ("type of 201 characters", {"task_type": "x" * 201}, "task_type"),
    ("type not a string", {"task_type": 42}, "task_type"),
    ("type None", {"task_type": None}, "task_type"),
    ("id of 201 characters", {"task_id": "t" * 201}, "task_id"),
    ("empty id", {"task_id": ""}, "task_id"),
    ("id not a string", {"task_id": 7}, "task_id"),
]


@pytest.mark.parametrize("name,changes,field", HOSTILE_LABELS, ids=[c[0] for c in HOSTILE_LABELS])
def test_hostile_ids_and_types_are_refused_with_a_reason_naming_the_field(name, changes, field):
    values = {"task_type": "face_recognition", "size": 4096, "task_id": "t1", **changes}
    reason = LIMITS.check(values["task_type"], values["size"], task_id=values["task_id"])
    assert reason is not None and reason.startswith(field)


def test_a_task_at_the_limits_is_accepted_and_one_past_them_refused():
    assert LIMITS.check("video_synopsis", 0) is None
    assert LIMITS.check("video_synopsis", DEFAULT_MAX_TASK_SIZE, expected_work_ms=0.0,
                        task_id="t" * 200) is None
    assert LIMITS.check("video_synopsis", DEFAULT_MAX_TASK_SIZE + 1) is not None
    assert LIMITS.check("x" * 200, 1, expected_work_ms=24 * 3600 * 1000.0) is None


def test_a_str_whose_length_raises_is_refused_not_raised():
    class Hostile(str):
        def __len__(self):
            raise RuntimeError("no")

    assert "could not be checked" in LIMITS.check(Hostile("face_recognition"), 1)


def test_every_size_the_projects_generators_send_is_accepted():
    from streamplace.kafka_io import synthetic_task_events
    from streamplace.replay import trace_events
    events = list(synthetic_task_events(3000, seed=4))
    events += [timed.event for timed in trace_events("alibaba-genai", limit=1200,
                                                     payloads=False)[0]]
    events += [timed.event for timed in trace_events("synthetic", limit=1200, payloads=False)[0]]
    # the unit tests' and benchmarks' own sizes, up to the synthetic generator's cap
    events += [task_event(app_id=app, input_size=size)
               for app in app_ids() for size in (1, 4096, 36_864, 147_456, 921_600, 1 << 20)]
    for limits in (LIMITS, cluster_task_limits("default"), cluster_task_limits("gpu-host")):
        reasons = [limits.check_event(e) for e in events]
        assert [r for r in reasons if r] == []
    assert max(e["input_size"] for e in events) == 1 << 20
    assert DEFAULT_MAX_TASK_SIZE >= 4 * (1 << 20)  # a margin above the largest we generate


def test_a_per_type_limit_overrides_the_default_both_ways():
    limits = TaskLimits(max_size=1000, max_size_by_type={"face_recognition": 10,
                                                         "big_operator": 10**6})
    assert limits.max_size_for("face_recognition") == 10
    assert "above the limit 10 for task type face_recognition" in \
        limits.check("face_recognition", 11)
    assert limits.check("big_operator", 500_000) is None
    assert limits.check("video_synopsis", 500) is None
    assert "above the limit 1000" in limits.check("video_synopsis", 1001)


# The rule: max_size = floor(memory_fraction * memory_bytes / bytes_per_unit).
FROM_MEMORY_CASES = [
    ("hand numbers", dict(memory_bytes=1000, bytes_per_unit=10, memory_fraction=0.5), 50),
    ("rounds down", dict(memory_bytes=1000, bytes_per_unit=3, memory_fraction=0.5), 166),
    ("whole node", dict(memory_bytes=1000, bytes_per_unit=10, memory_fraction=1.0), 100),
    ("4 GiB of pixels", dict(memory_bytes=4 << 30), 21_474_836),
    ("laptop pixels", dict(memory_bytes=DEFAULT_NODE_MEMORY_BYTES), 8_053_063),
    ("laptop record bytes", dict(memory_bytes=1536 << 20, bytes_per_unit=BYTES_PER_RECORD_BYTE),
     50_331_648),
]


@pytest.mark.parametrize("name,arguments,max_size", FROM_MEMORY_CASES,
                         ids=[c[0] for c in FROM_MEMORY_CASES])
def test_from_memory_follows_the_documented_rule(name, arguments, max_size):
    assert TaskLimits.from_memory(**arguments).max_size == max_size


def test_the_named_defaults_are_the_rule_on_the_laptop_memory():
    assert TaskLimits().max_size == DEFAULT_MAX_TASK_SIZE == 8_053_063
    assert TaskLimits.for_task_events().max_size == DEFAULT_MAX_TASK_SIZE
    assert TaskLimits.for_operator_records().max_size == 50_331_648
    assert TaskLimits.from_memory(1 << 30, BYTES_PER_PIXEL, max_size_by_type={"a": 5}) \
        .max_size_by_type == {"a": 5}


@pytest.mark.parametrize("arguments", [
    dict(memory_bytes=0), dict(memory_bytes=-1), dict(memory_bytes=float("nan")),
    dict(memory_bytes=1 << 30, bytes_per_unit=0), dict(memory_bytes=1 << 30, memory_fraction=0),
    dict(memory_bytes=1 << 30, memory_fraction=1.5), dict(memory_bytes="1 GB"),
])
def test_from_memory_refuses_nonsense(arguments):
    with pytest.raises(ValueError):
        TaskLimits.from_memory(**arguments)


@pytest.mark.parametrize("fields", [
    dict(max_size=-1), dict(max_size=1.5), dict(max_size=True),
    dict(max_size_by_type={"face_recognition": -1}), dict(max_size_by_type={"": 5}),
    dict(max_expected_work_ms=float("nan")), dict(max_expected_work_ms=-1.0),
    dict(max_task_id_chars=0), dict(max_task_type_chars=None),
])
def test_wrong_settings_fail_when_the_limits_are_made(fields):
    with pytest.raises(ValueError):
        TaskLimits(**fields)


def test_limits_pickle_and_do_not_follow_the_callers_dict():
    by_type = {"face_recognition": 10}
    limits = TaskLimits(max_size_by_type=by_type)
    by_type["face_recognition"] = 10**9
    assert limits.max_size_for("face_recognition") == 10
    assert pickle.loads(pickle.dumps(limits)) == limits


def test_cluster_limits_come_from_the_smallest_taskmanager():
    # default spec: tm_b and tm_c have 256 + 256 MB + 1,024 MB of fixed JVM parts = 1,536 MiB
    assert cluster_task_limits("default").max_size == 8_053_063
    # gpu-host: tm_cpu, 768 + 1,024 + 1,024 = 2,816 MiB
    assert cluster_task_limits("gpu-host").max_size == (2816 << 20) // 2 // BYTES_PER_PIXEL
    assert cluster_task_limits("gpu-host", BYTES_PER_RECORD_BYTE).max_size == \
        (2816 << 20) // 2 // BYTES_PER_RECORD_BYTE
    assert cluster_task_limits("/no/such/spec.yaml").max_size == DEFAULT_MAX_TASK_SIZE
    assert cluster_task_limits("").max_size == DEFAULT_MAX_TASK_SIZE


def test_hook_settings_take_limits_and_the_environment_cannot_break_them():
    limits = TaskLimits(max_size=10)
    assert HookSettings(limits=limits).limits is limits
    settings = HookSettings.from_env({"STREAMPLACE_HOOK_LIMITS": "garbage"}, limits=limits)
    assert settings.limits is limits
    assert HookSettings().limits is None  # derived from the cluster spec when the job is built


def test_the_hook_gives_its_readers_the_settings_limits_or_the_cluster_specs():
    from pyflink_jobs.hook import StreamplaceHook
    from pyflink_jobs.router import RouterNode
    given = TaskLimits(max_size=10)
    assert StreamplaceHook(HookSettings(limits=given)).task_limits(user_records=True) is given
    gpu_host = StreamplaceHook(HookSettings(cluster_spec="gpu-host"))
    assert gpu_host.task_limits(user_records=False) == cluster_task_limits("gpu-host")
    assert gpu_host.task_limits(user_records=True) == \
        cluster_task_limits("gpu-host", BYTES_PER_RECORD_BYTE)
    explicit_nodes = StreamplaceHook(HookSettings(nodes=[RouterNode("n1", cpu_cores=1)],
                                                  cluster_spec="gpu-host"))
    assert explicit_nodes.task_limits(user_records=False).max_size == DEFAULT_MAX_TASK_SIZE


def test_the_module_examples_hold_and_it_imports_only_the_lowest_layer():
    assert doctest.testmod(limits_module).failed == 0
    tree = ast.parse(Path(limits_module.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= {"__future__", "math", "numbers", "collections", "dataclasses",
                        "sys"}


# -- the router's readers refuse into the dead letters --------------------------------------

def _event_reader(limits=None):
    reader = TaskEventRecords(limits)
    reader.open(None)
    return reader


REFUSED_EVENTS = [
    ("negative size", {"input_size": -5}, "input_size"),
    ("int32 wrap-around", {"input_size": -873743342}, "input_size"),
    ("10**8 pixels", {"input_size": 10**8}, "input_size"),
    ("10**15 pixels", {"input_size": 10**15}, "input_size"),
    ("NaN work", {"expected_work_ms": float("nan")}, "expected_work_ms"),
    ("infinite work", {"expected_work_ms": float("inf")}, "expected_work_ms"),
    ("negative work", {"expected_work_ms": -1.0}, "expected_work_ms"),
    ("a year of work", {"expected_work_ms": 3.2e10}, "expected_work_ms"),
    ("long task id", {"task_id": "t" * 5000}, "task_id"),
    ("long app id", {"app_id": "a" * 5000}, "app_id"),
    ("empty app id", {"app_id": ""}, "app_id"),
]


@pytest.mark.parametrize("name,changes,field", REFUSED_EVENTS, ids=[c[0] for c in REFUSED_EVENTS])
def test_task_events_outside_the_limits_are_refused_with_the_raw_bytes(name, changes, field):
    payload = encode("TaskEvent", task_event(**changes))
    with pytest.raises(Refused) as refused:
        _event_reader().read(payload)
    assert refused.value.stage == "limits" and refused.value.reason.startswith(field)
    assert refused.value.raw == payload
    # from the Table API source: the Kafka coordinates travel with the refusal
    with pytest.raises(Refused) as refused:
        _event_reader().read((payload, "tasks", 3, 41))
    assert refused.value.stage == "limits" and refused.value.source == ("tasks", 3, 41)
    assert refused.value.raw == payload


def test_task_events_within_the_limits_become_tasks_and_the_reader_goes_on():
    reader = _event_reader()
    with pytest.raises(Refused):
        reader.read(encode("TaskEvent", task_event(input_size=10**8)))
    task, event, raw_bytes, _ = reader.read(encode("TaskEvent", task_event(
        task_id="t2", input_size=1 << 20, expected_work_ms=567_000.0)))
    assert (task.task_id, task.input_size, task.expected_work_ms) == ("t2", 1 << 20, 567_000.0)


def test_the_task_event_reader_applies_the_limits_it_is_given():
    reader = _event_reader(TaskLimits(max_size=100, max_size_by_type={"video_synopsis": 10**7}))
    assert reader.read(encode("TaskEvent", task_event(app_id="video_synopsis",
                                                      input_size=5_000_000)))[0].input_size
    with pytest.raises(Refused) as refused:
        reader.read(encode("TaskEvent", task_event(input_size=101)))
    assert refused.value.stage == "limits" and "limit 100 " in refused.value.reason


def _operator_reader(limits=None, **extractors):
    reader = OperatorRecords(as_operator(str.upper, name="shout", **extractors), limits)
    reader.open(None)
    return reader


@pytest.mark.parametrize("limits,extractors,record", [
    (TaskLimits(max_size=8), {}, "nine char"),
    (None, {"task_size": lambda r: 10**9}, "x"),
    (TaskLimits(max_size_by_type={"small": 3}), {"task_type": lambda r: "small"}, "four"),
    (TaskLimits(max_task_type_chars=4), {}, "x"),  # the operator's name, "shout", is 5 long
])
def test_operator_records_outside_the_limits_are_refused_with_the_raw_record(limits, extractors,
                                                                             record):
    with pytest.raises(Refused) as refused:
        _operator_reader(limits, **extractors).read(record)
    assert refused.value.stage == "limits"
    assert refused.value.raw == record_bytes(record)


def test_operator_records_within_the_limits_pass_and_per_type_limits_apply():
    reader = _operator_reader(TaskLimits(max_size=8, max_size_by_type={"big": 100}),
                              task_type=lambda r: "big" if len(r) > 8 else "small")
    task = reader.read("x" * 50)[0]
    assert (task.app_id, task.input_size) == ("big", 50)
    assert reader.read("tiny")[0].input_size == 4


def test_an_operator_size_too_big_to_print_falls_back_to_the_default_not_raised(caplog):
    reader = _operator_reader(task_size=lambda r: 10**100_000)
    with caplog.at_level("WARNING", logger="pyflink_jobs.router_function"):
        assert reader.read("x")[0].input_size == len("x")
    assert reader.descriptor_fallbacks["task_size"] == 1
    assert "digits" in caplog.text




def test_the_router_function_dead_letters_a_task_outside_the_limits_and_keeps_routing():
    from pyflink_jobs.router import RouterNode, RouterSettings
    from pyflink_jobs.router_function import RouterFunction
    from workload.codec import decode

    function = RouterFunction(RouterSettings(nodes=[RouterNode("tm_a", cpu_cores=1)],
                                             policy="least_outstanding"))
    function.open(FakeContext())
    huge = encode("TaskEvent", task_event(task_id="huge", input_size=10**8))
    [dead] = list(function.process_element((huge, "tasks", 0, 7), FakeContext()))
    letter = decode("DeadLetter", dead)
    assert letter["stage"] == "limits" and letter["reason"].startswith("input_size")
    assert (letter["raw"], letter["source_topic"], letter["offset"]) == (huge, "tasks", 7)
    assert function._counts.values["streamplace_dead_letters"] == 1
    [(tag, routed)] = list(function.process_element(
        encode("TaskEvent", task_event(task_id="fine")), FakeContext()))
    assert (routed.task_id, routed.node) == ("fine", "tm_a")
    function.close()


def test_the_pipelines_decoder_dead_letters_tasks_outside_the_limits_too():
    from pyflink_jobs.task_pipeline import DecodeTaskEvents, parse_args
    from workload.codec import decode

    decoder = DecodeTaskEvents(TaskLimits(max_size=1000))
    decoder.open(None)
    big = encode("TaskEvent", task_event(input_size=1001))
    [(_, dead)] = list(decoder.process_element((big, "tasks", 1, 9), None))
    letter = decode("DeadLetter", dead)
    assert (letter["stage"], letter["raw"], letter["offset"]) == ("limits", big, 9)
    [event] = list(decoder.process_element((encode("TaskEvent", task_event(input_size=1000)),
                                            "tasks", 1, 10), None))
    assert event["input_size"] == 1000
    # the job's flag: 0 = from the cluster spec's memory
    assert parse_args([]).max_task_size == 0
    assert parse_args(["--max-task-size", "500000"]).max_task_size == 500_000
