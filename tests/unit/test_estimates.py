"""Public cost estimates follow the calibration: measured CPU times, assumed speed-ups, measured
GPU speed factors."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from workload.estimates import CostModel, load_calibration
from workload.model import ComputingUnit, GpuSpec, NodeSpec, Task


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def test_cpu_times_reproduce_the_measured_profile(costs):
    rows = json.loads((resources.files("workload") / "apps" /
                       "measured_cpu_profile.json").read_text())["rows"]
    for row in rows:
        if row["device"] == "cpu":
            assert costs.cpu_ms(row["stage_type"], row["input_size"]) == pytest.approx(
                row["wall_ms_median"], rel=0.02, abs=0.005), row["stage_type"]


def test_cpu_only_stages_have_no_gpu_time(costs):
    assert costs.gpu_ms("tracking", 10_000, "v100") is None
    assert costs.unit_ms("tube_stitching", 10_000, ComputingUnit("gpu:0", "gpu", model="p4")) \
        is None


def test_gpu_time_is_cpu_time_over_speedup_and_gpu_speed(costs):
    cal = load_calibration()
    size = 5_000_000
    expected = costs.cpu_ms("face_encoding", size) / cal.stages["face_encoding"].gpu_speedup
    assert costs.gpu_ms("face_encoding", size, "k80") == pytest.approx(expected)
    assert costs.gpu_ms("face_encoding", size, "p4") == pytest.approx(expected / 1.26)


def test_measured_gavel_speed_factors_are_used_when_the_data_is_there(costs):
    if costs.colocation is None:
        pytest.skip("Gavel data not found: fallback speeds are used")
    job = load_calibration().stages["face_encoding"].gavel_job
    assert costs.gpu_speed("face_encoding", "v100") == pytest.approx(
        costs.colocation.speed_factor(job, "v100"))


def test_fallback_speeds_without_data():
    offline = CostModel(colocation=None)
    assert offline.gpu_speed("face_encoding", "v100") == 3.7


def test_task_estimate_is_the_critical_path_plus_transfer(costs):
    node = NodeSpec("n", 6, 32, gpus=(GpuSpec("p4", 8),))
    task = Task("t", "face_recognition", 2_000_000)
    chain = sum(costs.stage_best_ms(s, task.input_size, node) for s in
                ("face_detection", "face_landmarks", "face_encoding", "face_distance",
                 "face_compare"))
    assert costs.task_ms_on(task, node) == pytest.approx(chain + 1000 * costs.transfer_s(task,
                                                                                         node))
    # A node without GPUs is slower for the same task.
    assert costs.task_ms_on(task, NodeSpec("c", 6, 32)) > costs.task_ms_on(task, node)


def test_unknown_gpu_model_is_named(costs):
    with pytest.raises(ValueError, match="h999"):
        costs.gpu_ms("face_encoding", 10, "h999")


def test_unit_times_are_remembered_within_a_bound(monkeypatch):
    from workload import estimates
    monkeypatch.setattr(estimates, "UNIT_MS_CACHE_ENTRIES", 4)
    model = CostModel()
    core, gpu = ComputingUnit("cpu:0", "cpu", speed=2.0), ComputingUnit("gpu:0", "gpu",
                                                                        model="k80")
    for size in range(1000, 1020):
        assert model.unit_ms("tracking", size, core) == model.cpu_ms("tracking", size, 2.0)
        assert model.unit_ms("face_detection", size, gpu) == model.gpu_ms("face_detection",
                                                                          size, "k80")
        assert model.unit_ms("tracking", size, gpu) is None  # CPU-only stage: remembered None
        assert len(model._unit_ms_cache) <= 4
