"""A node slow for one task type only (issue 13, item 3): the cluster spec's emulation field
``task_type_multipliers``, its environment variable, and both executors repeating exactly that
type's work, scenario tables for every bound."""

from __future__ import annotations

import json
import math

import pytest

from interference.executor import (ExecutorSettings, NodeExecutor, OperatorExecutor,
                                   OperatorExecutorSettings)
from interference.executor.settings import (ENV_TASK_TYPE_MULTIPLIERS, NodeSettings,
                                            parse_task_type_multipliers)
from streamplace.config import load_config
from streamplace.flink_cluster import FlinkCluster
from workload.catalog import APPLICATIONS
from workload.cluster_spec import LocalClusterSpec, load_cluster_spec
from workload.operators import StagedOperator, stage

SIZE = 4096


def _spec(**tm_fields) -> LocalClusterSpec:
    return LocalClusterSpec.model_validate(
        {"taskmanagers": [{"id": "tm_a", "cpu_cores": 1, **tm_fields}]})


# -- the spec ---------------------------------------------------------------------------------
def test_the_spec_takes_bounded_multipliers_and_nothing_else():
    assert _spec(task_type_multipliers={"ocr": 3}).taskmanagers[0].task_type_multipliers == \
        {"ocr": 3.0}
    assert _spec().taskmanagers[0].task_type_multipliers == {}


@pytest.mark.parametrize("value", [
    {"ocr": 0.5}, {"ocr": math.nan}, {"ocr": math.inf}, {"ocr": 101}, {"": 2},
    {"x" * 129: 2}, {f"t{i}": 2 for i in range(65)}], ids=[
    "below-one", "nan", "inf", "over-100", "empty-type", "long-type", "too-many"])
def test_the_spec_refuses_bad_multipliers(value):
    with pytest.raises(ValueError, match="task_type_multipliers|multiplier|task type"):
        _spec(task_type_multipliers=value)


# -- the environment variable -----------------------------------------------------------------
@pytest.mark.parametrize("text,error", [
    ('{"ocr": 2, "asr": 1.5}', None),
    ("not json", "not JSON"),
    ('["ocr", 2]', "object"),
    ('{"ocr": "2"}', "not a number"),
    ('{"ocr": true}', "not a number"),
    ('{"ocr": NaN}', "not a number"),
    ('{"ocr": 1e300}', "not a number"),
    ('{"ocr": 0}', "not a number"),
    (json.dumps({f"t{i}": 2 for i in range(65)}), "at most 64"),
    ('{"ocr": 2' + " " * 20_000 + "}", "characters"),
], ids=["ok", "not-json", "a-list", "a-string", "a-bool", "nan", "huge", "zero", "too-many",
        "too-long"])
def test_the_variable_is_parsed_with_bounds(text, error):
    if error is None:
        assert parse_task_type_multipliers(text) == {"ocr": 2.0, "asr": 1.5}
    else:
        with pytest.raises(ValueError, match=error):
            parse_task_type_multipliers(text)


@pytest.mark.parametrize("multiplier,factors,task_type,repeats", [
    (1.0, {}, "ocr", 1),
    (1.0, {"ocr": 3}, "ocr", 3),
    (1.0, {"ocr": 3}, "asr", 1),
    (2.0, {"ocr": 1.5}, "ocr", 3),
    (2.0, {"ocr": 1.5}, "asr", 2),
    (1.0, {"ocr": 3}, None, 1),
    (1.0, {"ocr": 3}, 42, 1),
])
def test_repeats_per_task_type(multiplier, factors, task_type, repeats):
    settings = NodeSettings(work_multiplier=multiplier, task_type_multipliers=factors)
    assert settings.repeats_for(task_type) == repeats


def test_settings_read_the_variable_and_refuse_a_bad_one(monkeypatch):
    monkeypatch.setenv(ENV_TASK_TYPE_MULTIPLIERS, '{"face_recognition": 2}')
    assert ExecutorSettings.from_env().task_type_multipliers == {"face_recognition": 2.0}
    monkeypatch.setenv(ENV_TASK_TYPE_MULTIPLIERS, '{"face_recognition": -1}')
    with pytest.raises(ValueError, match=ENV_TASK_TYPE_MULTIPLIERS):
        ExecutorSettings.from_env()
    with pytest.raises(ValueError, match="not a number"):
        NodeSettings(task_type_multipliers={"x": math.nan})


def test_each_taskmanager_gets_its_own_multipliers_in_its_environment(tmp_path):
    spec = LocalClusterSpec.model_validate({"taskmanagers": [
        {"id": "tm_a", "cpu_cores": 1, "cpu_affinity": [0],
         "task_type_multipliers": {"text_inference": 3}},
        {"id": "tm_b", "cpu_cores": 1, "cpu_affinity": [1]}]})
    cluster = FlinkCluster(load_config(overrides=[f"home={tmp_path}"]), spec=spec, plan=None)
    exported = [json.loads(cluster.files.taskmanager_env(tm)[ENV_TASK_TYPE_MULTIPLIERS])
                for tm in spec.taskmanagers]
    assert exported == [{"text_inference": 3.0}, {}]


def test_the_shipped_specs_parse_with_the_field():
    for name in ("default", "hosts"):
        for tm in load_cluster_spec(name).taskmanagers:
            assert all(1 <= f <= 100 for f in tm.task_type_multipliers.values())


# -- the executors ----------------------------------------------------------------------------
def test_the_node_executor_repeats_only_the_listed_application(count_stage_calls):
    slow, fast = "face_recognition", "video_synopsis"
    counts = count_stage_calls(slow, fast)
    config = ExecutorSettings(cpu_workers=1, use_gpu="never", task_type_multipliers={slow: 2})
    with NodeExecutor(config) as executor:
        for app in (slow, fast):
            assert executor.submit(f"{app}-1", app, SIZE).result(timeout=60).status == "OK"
    assert {s.name: counts[s.name] for s in APPLICATIONS[slow].stages} == \
        {s.name: 2 for s in APPLICATIONS[slow].stages}
    assert {s.name: counts[s.name] for s in APPLICATIONS[fast].stages} == \
        {s.name: 1 for s in APPLICATIONS[fast].stages}


@pytest.mark.parametrize("operator_name,calls", [("ocr", 3), ("other", 1)])
def test_the_operator_executor_repeats_when_its_operator_is_listed(operator_name, calls):
    seen: list[int] = []
    op = StagedOperator(operator_name, [stage("s", lambda x: seen.append(x) or x)])
    config = OperatorExecutorSettings(cpu_workers=1, use_gpu="never",
                                      task_type_multipliers={"ocr": 3})
    with OperatorExecutor(op, config) as executor:
        assert executor.submit("r", 7).result(timeout=60).outputs == [7]
    assert seen == [7] * calls
