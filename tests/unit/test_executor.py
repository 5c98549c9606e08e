"""The IAWP node executor on this machine's CPU cores: DAG order, concurrency, failures and
retries, the work multiplier, every scheduler, asyncio, device discovery and telemetry; tasks
with a real clip in their payload, bad payloads, the answer (``output``) and the TaskResult
built from an outcome.

Small clips (4,096 pixels: stages take about a millisecond) keep the file fast."""

from __future__ import annotations

import asyncio
import doctest
import hashlib
import json
import logging
import threading
import time

import pytest

from interference.executor import (ExecutorSettings, NodeExecutor, NodeTelemetry, StageRecord,
                                   TaskOutcome, discover_units)
import interference.executor as executor_package
from interference.executor import clips as clips_module
from interference.executor import corun as corun_module
from interference.executor import devices as devices_module
from interference.executor import executor as executor_module
from interference.executor import results as results_module
from interference.executor import telemetry as telemetry_module
from interference.executor.devices import cuda_available, gpu_model_key
from interference.executor.executor import output_digest, task_seed
from workload.apps import registry
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


def test_work_multiplier_really_runs_each_operator_that_many_times(monkeypatch,
                                                                   count_stage_calls):
    counts = count_stage_calls("face_recognition")
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


# ---------------------------------------------------------------------------------- payloads
#: The keys of each application's answer (workload.apps.registry.summarise_output).
SUMMARY_KEYS = {
    "intrusion_detection": {"app_id", "tracks", "intrusions", "intruder_ids", "detections",
                            "keypoints", "zone", "tracked"},
    "video_synopsis": {"app_id", "tubes", "clip_frames", "synopsis_frames", "compression",
                       "overlap", "starts", "tube_boxes"},
    "face_recognition": {"app_id", "faces", "frames_with_faces", "identified", "identities",
                         "detected"},
}


def reference(app_id: str, frames) -> tuple[str, dict]:
    """(digest, answer) of a task run by the sequential reference runner on ``frames``, with
    one torch thread as the executor's CPU workers have (same kernels, same bits)."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        outputs = registry.run_task(app_id, SIZE, seed=0, frames=frames)
    finally:
        torch.set_num_threads(threads)
    h = hashlib.blake2b(digest_size=16)
    used = {d for s in APPLICATIONS[app_id].stages for d in s.deps}
    for stage in APPLICATIONS[app_id].stages:
        if stage.name not in used:  # a sink: the task's result
            h.update(stage.name.encode() + output_digest(outputs[stage.name]).encode())
    return h.hexdigest(), registry.summarise_output(app_id, outputs)


@pytest.mark.parametrize("app_id", APPS)
def test_a_task_with_a_payload_runs_on_the_decoded_clip(node, app_id):
    task_id = f"real-{app_id}"
    payload = registry.task_payload(app_id, SIZE, task_id)
    synthetic = node.submit(task_id, app_id, SIZE).result(timeout=60)
    real = node.submit(task_id, app_id, SIZE, payload=payload).result(timeout=60)
    assert synthetic.status == real.status == "OK", (synthetic.error, real.error)
    assert real.output_digest != synthetic.output_digest  # other frames, other results
    # Exactly what the reference runner computes on the decoded clip, and on the synthetic one
    # without a payload (as before payloads existed: task_frames seeded by the task id).
    digest, answer = reference(app_id, registry.task_frames_from_payload(app_id, payload))
    assert (real.output_digest, real.output) == (digest, answer)
    digest, answer = reference(app_id, registry.task_frames(app_id, SIZE, task_seed(task_id)))
    assert (synthetic.output_digest, synthetic.output) == (digest, answer)
    assert set(real.output) == SUMMARY_KEYS[app_id] and real.output["app_id"] == app_id
    assert json.loads(json.dumps(real.output)) == real.output  # JSON-able as it is
    assert sorted(r.stage for r in real.stages) == sorted(s.name for s in
                                                          APPLICATIONS[app_id].stages)


def test_run_task_takes_a_payload_in_asyncio(node):
    payload = registry.task_payload("face_recognition", SIZE, "async-real")
    outcome = asyncio.run(node.run_task("async-real", "face_recognition", SIZE,
                                        payload=payload))
    assert outcome.status == "OK" and set(outcome.output) == SUMMARY_KEYS["face_recognition"]
    assert outcome.output_digest == reference(
        "face_recognition", registry.task_frames_from_payload("face_recognition", payload))[0]


def _truncated_payload() -> bytes:
    """A real clip whose last frame's JPEG body is zeroed: the container and every header
    check out, the decoder fails on the pixels."""
    data = bytearray(registry.task_payload("video_synopsis", SIZE, "trunc"))
    data[-300:] = bytes(300)
    return bytes(data)


@pytest.mark.parametrize("payload,phrase", [
    (b"garbage", "does not start with b'SPCL'"),
    (b"", "clip payload is empty"),
    (b"SPCL\x01\x00\x50" + bytes(320), "80 frames, over the limit of 64"),
    (_truncated_payload(), "does not decode"),
    ("SPCL as text", "must be bytes"),
])
def test_a_bad_payload_fails_its_task_at_once_and_the_next_one_runs(node, monkeypatch,
                                                                      payload, phrase):
    decodes = []
    real_decode = registry.task_frames_from_payload

    def counting(*args, **kwargs):
        decodes.append(1)
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(registry, "task_frames_from_payload", counting)
    # intrusion_detection has three root stages: two start at once on the two workers and
    # both need the clip; it must be decoded once, and the task failed without retries.
    start = time.perf_counter()
    bad = node.submit("bad-payload", "intrusion_detection", SIZE, payload=payload)
    outcome = bad.result(timeout=10)
    assert time.perf_counter() - start < 5.0
    assert outcome.status == "FAILED" and outcome.output is None, outcome
    assert outcome.error.startswith("bad payload:") and phrase in outcome.error, outcome.error
    assert outcome.stages == [] and outcome.output_digest == ""
    assert len(decodes) <= 1  # 0: refused at admission (not bytes)
    good = node.submit("after-bad-payload", "intrusion_detection", SIZE,
                       payload=registry.task_payload("intrusion_detection", SIZE, "after"))
    assert good.result(timeout=60).status == "OK"
    assert node.snapshot()["in_flight"] == 0


def test_any_decoder_error_is_a_bad_payload_not_a_crash(node, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("decoder exploded")

    monkeypatch.setattr(registry, "task_frames_from_payload", broken)
    outcome = node.submit("decoder-bug", "video_synopsis", SIZE, payload=b"SPCL").result(
        timeout=10)
    assert outcome.status == "FAILED"
    assert outcome.error.startswith("bad payload: RuntimeError: decoder exploded"), outcome.error
    monkeypatch.undo()
    assert node.submit("decoder-fixed", "video_synopsis", SIZE).result(timeout=60).status == "OK"


def test_a_summary_failure_leaves_the_task_ok_without_output(node, monkeypatch, caplog):
    class SummaryBug(Exception):
        pass

    def broken(app_id, outputs):
        raise SummaryBug("no summary today")

    monkeypatch.setattr(registry, "summarise_output", broken)
    with caplog.at_level(logging.WARNING, logger="interference.executor"):
        outcomes = [node.submit(f"no-summary-{i}", "video_synopsis", SIZE).result(timeout=60)
                    for i in range(2)]
    assert [(o.status, o.output) for o in outcomes] == [("OK", None), ("OK", None)]
    assert all(len(o.output_digest) == 32 for o in outcomes)
    logged = [r for r in caplog.records if "no output summary" in r.getMessage()]
    assert len(logged) == 1 and "SummaryBug" in logged[0].getMessage()  # once, not per task


def test_result_record_carries_the_output_as_json_and_encodes():
    from pyflink_jobs.executor_function import result_record
    from workload.codec import decode, encode
    event = {"task_id": "t-1", "app_id": "video_synopsis", "input_size": SIZE,
             "submitted_at_ms": 1_000, "payload": b"SPCL"}
    answer = {"tubes": 2, "app_id": "video_synopsis", "starts": [0, 3], "compression": 0.5}
    outcome = TaskOutcome("t-1", "video_synopsis", "tm_a", "OK", 1_010, 1_020, 1.0, 9.0,
                          [StageRecord("gmm_background", "cpu:0", 1_010, 1_015, 1)],
                          "ab" * 16, None, answer)
    record = result_record(event, outcome, "tm_a", "tm_a")
    assert record["output"] == json.dumps(answer, sort_keys=True)
    assert list(json.loads(record["output"])) == sorted(answer)  # sorted keys: stable bytes
    decoded = decode("TaskResult", encode("TaskResult", record))
    assert json.loads(decoded["output"]) == answer and decoded["routed_to"] == "tm_a"
    assert decoded["stage_timings"][0]["stage"] == "gmm_background"
    failed = TaskOutcome("t-2", "video_synopsis", "tm_a", "FAILED", 1, 1, 0.0, 0.0, [], "",
                         "bad payload: clip payload is empty")
    assert failed.output is None
    record = result_record(event, failed, "tm_a")
    assert record["output"] is None
    decoded = decode("TaskResult", encode("TaskResult", record))
    assert decoded["output"] is None and decoded["error"].startswith("bad payload")


@pytest.mark.parametrize("module", [executor_package, executor_module, devices_module,
                                    telemetry_module, clips_module, corun_module,
                                    results_module])
def test_docstring_examples(module):
    assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0
