"""Stage profiling: fields, memory accounting, the NVML sampler (with a fake NVML), the JSON
entry point and the committed CPU profile."""

from __future__ import annotations

import json
import sys
import time
import types
from pathlib import Path

import pytest
import torch

from workload.apps import profiling
from workload.apps.frames import DEFAULT_INPUT_SIZE, frame_shape
from workload.apps.profiling import StageProfile, profile_stage
from workload.catalog import STAGE_TYPES

torch.set_num_threads(1)

MEASURED = Path(profiling.__file__).with_name("measured_cpu_profile.json")


def test_cpu_profile_fields():
    p = profile_stage("gmm_background", 4096, device="cpu", repeats=2, seed=1)
    assert isinstance(p, StageProfile)
    assert (p.stage_type, p.app_id, p.device, p.input_size) == \
        ("gmm_background", "intrusion_detection", "cpu", 4096)
    assert p.frame_shape == frame_shape(4096) and p.gpu_capable
    assert len(p.wall_ms) == 2 and p.wall_ms_median == sorted(p.wall_ms)[0] + \
        (sorted(p.wall_ms)[1] - sorted(p.wall_ms)[0]) / 2
    assert all(x > 0 for x in p.wall_ms)
    assert p.gpu_util_mean is p.gpu_util_max is p.gpu_util_samples is None
    # The model alone holds K=3 float32 (weights, means, variances) per pixel plus a bool
    # foreground per voxel; the stage cannot have peaked below its own output.
    t, h, w = p.frame_shape
    assert p.peak_tensor_bytes >= 3 * 3 * h * w * 4 + t * h * w
    assert p.peak_memory_bytes == p.peak_tensor_bytes + p.peak_python_bytes


def test_memory_grows_with_input_size():
    small = profile_stage("frame_difference", 4096, repeats=1)
    large = profile_stage("frame_difference", 147_456, repeats=1)
    assert large.peak_tensor_bytes > 5 * small.peak_tensor_bytes


def test_cpu_only_stage_profiles_with_its_upstream_inputs():
    p = profile_stage("tube_stitching", 4096, repeats=1, measure_memory=False)
    assert p.app_id == "video_synopsis" and not p.gpu_capable
    assert p.peak_memory_bytes is None
    with pytest.raises(KeyError):
        profile_stage("no_such_stage", 4096)


def test_nvml_sampler_with_a_fake_library(monkeypatch):
    """The sampler only needs four NVML calls; a fake module stands in for the GPU."""
    calls = {"init": 0, "shutdown": 0}
    fake = types.ModuleType("pynvml")
    fake.nvmlInit = lambda: calls.__setitem__("init", calls["init"] + 1)
    fake.nvmlShutdown = lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1)
    fake.nvmlDeviceGetHandleByUUID = lambda uuid: "handle"
    fake.nvmlDeviceGetHandleByIndex = lambda index: "handle"
    fake.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=40.0, memory=10.0)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(profiling.torch.cuda, "current_device", lambda: 0)
    with profiling._NvmlSampler(torch.device("cuda", 0), interval_s=0.005) as sampler:
        time.sleep(0.05)
    assert calls == {"init": 1, "shutdown": 1}
    assert len(sampler.gpu) >= 3 and set(sampler.gpu) == {40.0} and set(sampler.memory) == {10.0}


def test_entry_point_writes_json(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert profiling.main(["--out", str(out), "--input-sizes", "4096", "--devices", "cpu",
                           "--repeats", "1", "--stages", "frame_difference",
                           "face_compare"]) == 0
    doc = json.loads(out.read_text())
    assert doc["command"].startswith("python -m workload.apps.profiling --out")
    assert [r["stage_type"] for r in doc["rows"]] == ["frame_difference", "face_compare"]
    assert doc["machine"]["torch"] == torch.__version__
    assert "wrote" in capsys.readouterr().out


def test_committed_cpu_profile_covers_every_stage():
    doc = json.loads(MEASURED.read_text())
    assert doc["command"].startswith("python -m workload.apps.profiling")
    rows = [r for r in doc["rows"] if r["input_size"] == DEFAULT_INPUT_SIZE]
    assert {r["stage_type"] for r in rows} == set(STAGE_TYPES)
    for r in rows:
        assert r["device"] == "cpu" and r["wall_ms_median"] > 0 and r["gpu_util_mean"] is None
        assert r["peak_memory_bytes"] > 0
