"""The IAWP node executor on this machine's CPU cores: DAG order, concurrency, failures and
retries, the work multiplier, every scheduler, asyncio, device discovery and telemetry.

Small clips (4,096 pixels: stages take about a millisecond) keep the file fast."""

from __future__ import annotations

import asyncio
import doctest
import threading

import pytest

from interference.executor import (ExecutorSettings, NodeExecutor, NodeTelemetry, StageRecord,
                                   TaskOutcome, discover_units)
import interference.executor as executor_package
from interference.executor import devices as devices_module
from interference.executor import executor as executor_module
from interference.executor import telemetry as telemetry_module
from interference.executor.devices import cuda_available, gpu_model_key
from interference.executor.executor import output_digest, task_seed
from workload.apps.registry import OPERATORS
from workload.catalog import APPLICATIONS

SIZE = 4096
APPS = tuple(APPLICATIONS)


def settings(**overrides) -> ExecutorSettings:
    return ExecutorSettings(**{"cpu_workers": 2, "use_gpu": "never", **overrides})


@pytest.fixture(scope="module")
def node():
    with NodeExecutor(settings(node_id="tm_test")) as executor:
        yield executor


def by_stage(outcome: TaskOutcome) -> dict[str, StageRecord]:
    return {r.stage: r for r in outcome.stages}


@pytest.mark.parametrize("app_id", APPS)
def test_a_task_runs_its_dag_in_dependency_order(node, app_id):
    outcome = node.submit(f"order-{app_id}", app_id, SIZE).result(timeout=60)
    assert outcome.status == "OK", outcome.error
    assert (outcome.task_id, outcome.app_id, outcome.node_id) == (f"order-{app_id}", app_id,
                                                                  "tm_test")
    names = [r.stage for r in outcome.stages]
    assert sorted(names) == sorted(s.name for s in APPLICATIONS[app_id].stages)  # once each
    records = by_stage(outcome)
    for stage in APPLICATIONS[app_id].stages:
        for dep in stage.deps:
            assert records[stage.name].started_at_ms >= records[dep].finished_at_ms, \
                (stage.name, dep)
    for record in outcome.stages:
        assert record.unit in ("cpu:0", "cpu:1") and record.attempts == 1
        assert outcome.started_at_ms <= record.started_at_ms <= record.finished_at_ms \
            <= outcome.finished_at_ms
    assert outcome.queue_ms >= 0 and outcome.service_ms > 0 and outcome.error is None
    assert len(outcome.output_digest) == 32


def test_many_concurrent_tasks_complete_exactly_once(node):
    before = node.snapshot()
    ids = [f"many-{i}" for i in range(12)]
    futures = [node.submit(task_id, APPS[i % 3], SIZE) for i, task_id in enumerate(ids)]
    outcomes = [f.result(timeout=60) for f in futures]
    assert [o.task_id for o in outcomes] == ids
    assert all(o.status == "OK" for o in outcomes), [o.error for o in outcomes]
    snap = node.snapshot()
    assert snap["in_flight"] == 0 and snap["queue_depth"] == 0
    assert snap["completed"] - before["completed"] == 12
    assert snap["stages_run"] - before["stages_run"] == sum(len(o.stages) for o in outcomes)
    for key in ("cpu_util", "host_mem_util", "gpu_util", "gpu_mem_util"):
        assert 0.0 <= snap[key] <= 1.0, key
    # Same task id and size on the same device: same frames, same result.
    again = node.submit("many-0", APPS[0], SIZE).result(timeout=60)
    assert again.output_digest == outcomes[0].output_digest
    assert task_seed("many-0") == task_seed("many-0") != task_seed("many-1")


def test_learned_slowdowns_after_concurrent_runs(node):
    futures = [node.submit(f"learn-{i}", APPS[i % 3], SIZE) for i in range(12)]
    assert all(f.result(timeout=60).status == "OK" for f in futures)
    learned = node.learned_slowdowns()
    assert learned
    for (stage, partners, kind), value in learned.items():
        assert stage in OPERATORS and kind == "cpu" and partners == tuple(sorted(partners))
        assert value["count"] >= 1 and value["mean_rate"] > 0
        assert value["slowdown"] == pytest.approx(1.0 / value["mean_rate"])


def test_bad_requests_fail_at_once_with_a_reason(node):
    unknown = node.submit("bad-1", "no_such_app", SIZE).result(timeout=5)
    assert unknown.status == "FAILED" and "unknown application 'no_such_app'" in unknown.error
    for size in (0, -5, 2.5, "4096", True):
        outcome = node.submit("bad-2", "face_recognition", size).result(timeout=5)
        assert outcome.status == "FAILED" and "input_size" in outcome.error, size
        assert outcome.stages == [] and outcome.output_digest == ""


def test_a_failing_stage_is_retried_then_fails_its_task_only(node, monkeypatch):
    calls = []

    def boom(frames, inputs, **options):
        calls.append(threading.current_thread().name)
        raise RuntimeError("boom in face_distance")

    monkeypatch.setitem(OPERATORS, "face_distance", boom)
    failing = node.submit("fail-1", "face_recognition", SIZE)
    others = [node.submit(f"fine-{app}", app, SIZE) for app in APPS[:2]]
    outcome = failing.result(timeout=60)
    assert outcome.status == "FAILED"
    assert "face_distance" in outcome.error and "boom in face_distance" in outcome.error
    assert "2 attempt" in outcome.error and len(calls) == node.settings.max_attempts == 2
    assert "face_compare" not in by_stage(outcome)  # its dependant never ran
    assert all(f.result(timeout=60).status == "OK" for f in others)
    assert node.snapshot()["in_flight"] == 0


def test_a_transient_failure_succeeds_on_the_second_attempt(node, monkeypatch):
    real = OPERATORS["tube_extraction"]
    calls = []

    def flaky(frames, inputs, **options):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("transient")
        return real(frames, inputs, **options)

    monkeypatch.setitem(OPERATORS, "tube_extraction", flaky)
    outcome = node.submit("flaky-1", "video_synopsis", SIZE).result(timeout=60)
    assert outcome.status == "OK", outcome.error
    assert by_stage(outcome)["tube_extraction"].attempts == 2 and len(calls) == 2
    assert by_stage(outcome)["tube_stitching"].attempts == 1


def test_work_multiplier_really_runs_each_operator_that_many_times(monkeypatch):
    counts: dict[str, int] = {}

    def counting(name):
        real = OPERATORS[name]

        def wrapper(frames, inputs, **options):
            counts[name] = counts.get(name, 0) + 1
            return real(frames, inputs, **options)
        return wrapper

    for name in [s.name for s in APPLICATIONS["face_recognition"].stages]:
        monkeypatch.setitem(OPERATORS, name, counting(name))
    monkeypatch.setenv("STREAMPLACE_WORK_MULTIPLIER", "2")
    monkeypatch.setenv("STREAMPLACE_NODE_ID", "tm_slow")
    config = ExecutorSettings.from_env(cpu_workers=1, use_gpu="never")
    assert (config.work_multiplier, config.node_id, config.repeats) == (2.0, "tm_slow", 2)
    with NodeExecutor(config) as executor:
        outcome = executor.submit("double-1", "face_recognition", SIZE).result(timeout=60)
    assert outcome.status == "OK" and outcome.node_id == "tm_slow"
    assert counts == {s.name: 2 for s in APPLICATIONS["face_recognition"].stages}


@pytest.mark.parametrize("scheduler", ["fcfs", "pats", "iawp"])
def test_each_scheduler_runs_tasks_and_run_task_works_in_asyncio(scheduler):
    async def main(executor):
        return await asyncio.gather(*(executor.run_task(f"{scheduler}-{i}", APPS[i % 3], SIZE)
                                      for i in range(6)))

    # max_in_flight 2 < 6 tasks: run_task must wait for slots without blocking the loop
    with NodeExecutor(settings(scheduler=scheduler, max_in_flight=2)) as executor:
        assert executor.scheduler.name == scheduler
        outcomes = asyncio.run(main(executor))
        assert executor.snapshot()["completed"] == 6
    assert [o.status for o in outcomes] == ["OK"] * 6
    assert sorted(o.task_id for o in outcomes) == sorted(f"{scheduler}-{i}" for i in range(6))


def test_close_finishes_in_flight_tasks_then_refuses_new_ones():
    executor = NodeExecutor(settings(cpu_workers=1))
    futures = [executor.submit(f"close-{i}", APPS[i % 3], SIZE) for i in range(3)]
    executor.close()
    assert all(f.done() and f.result().status == "OK" for f in futures)
    with pytest.raises(RuntimeError, match="closed"):
        executor.submit("late", "face_recognition", SIZE)
    executor.close()  # idempotent


def test_duplicate_task_id_in_flight_fails_the_second(node, monkeypatch):
    gate = threading.Event()
    real = OPERATORS["face_compare"]

    def slow(frames, inputs, **options):
        gate.wait(timeout=30)
        return real(frames, inputs, **options)

    monkeypatch.setitem(OPERATORS, "face_compare", slow)
    first = node.submit("dup-1", "face_recognition", SIZE)
    second = node.submit("dup-1", "face_recognition", SIZE)
    outcome = second.result(timeout=30)
    gate.set()
    assert outcome.status == "FAILED" and "already in flight" in outcome.error
    assert first.result(timeout=60).status == "OK"


def test_settings_are_validated():
    with pytest.raises(ValueError, match="use_gpu"):
        ExecutorSettings(use_gpu="sometimes")
    with pytest.raises(ValueError, match="work_multiplier"):
        ExecutorSettings(work_multiplier=0)
    with pytest.raises(ValueError, match="unknown node scheduler"):
        NodeExecutor(settings(scheduler="nope"))
    assert ExecutorSettings(work_multiplier=0.2).repeats == 1


def test_cpu_only_discovery_and_telemetry():
    units = discover_units(ExecutorSettings(cpu_workers=0, use_gpu="auto"))
    if not cuda_available():
        assert units and {u.kind for u in units} == {"cpu"}
        assert len(units) == devices_module.cpu_count()
        with pytest.raises(RuntimeError, match="use_gpu='always'"):
            discover_units(ExecutorSettings(use_gpu="always"))
    assert [u.unit_id for u in discover_units(settings(cpu_workers=3))] == \
        ["cpu:0", "cpu:1", "cpu:2"]
    with NodeTelemetry(min_interval_s=0.0) as telemetry:
        sum(i * i for i in range(200_000))  # some CPU time to measure
        sample = telemetry.sample()
        for key in ("cpu_util", "host_mem_util", "gpu_util", "gpu_mem_util"):
            assert 0.0 <= sample[key] <= 1.0, key
        assert sample["rss_mb"] > 0
        if telemetry.nvml_error is not None:
            assert sample["gpu_util"] == 0.0 and sample["gpus"] == []


def test_gpu_names_map_to_calibration_keys():
    assert gpu_model_key("Tesla K80") == "k80"
    assert gpu_model_key("Tesla P4") == "p4" and gpu_model_key("Tesla P40") != "p4"
    assert gpu_model_key("NVIDIA A10G") == "a10" and gpu_model_key("NVIDIA H200") == "a10"
    assert gpu_model_key("Tesla T4") == "t4" and gpu_model_key("Tesla V100-PCIE-32GB") == "v100"


def test_output_digest_is_stable_across_containers():
    import torch
    assert output_digest({"a": torch.ones(3)}) == output_digest({"a": torch.ones(3)})
    assert output_digest([torch.ones(3)]) != output_digest([torch.zeros(3)])


@pytest.mark.parametrize("module", [executor_package, executor_module, devices_module,
                                    telemetry_module])
def test_docstring_examples(module):
    assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0
