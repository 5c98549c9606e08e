"""The operator registry and the reference task runner."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import workload.apps as apps
from workload.apps import (OPERATORS, SCENE_FOR_APP, run_stage, run_task, stage_order,
                           task_frames)
from workload.apps.background import BackgroundModel, FrameDifference
from workload.apps.faces import (FaceDetections, FaceDistances, FaceEncodings, FaceLandmarks,
                                 FaceMatches)
from workload.apps.pyramid import DoGPyramid, GaussianPyramid, Keypoints
from workload.apps.synopsis import Synopsis, Tubes
from workload.apps.tracking import TrackingResult
from workload.catalog import APPLICATIONS, STAGE_TYPES

torch.set_num_threads(1)

OUTPUT_TYPES = {
    "gmm_background": BackgroundModel, "frame_difference": FrameDifference,
    "gaussian_pyramid": GaussianPyramid, "dog_pyramid": DoGPyramid,
    "scale_space_extrema": Keypoints, "tracking": TrackingResult, "tube_extraction": Tubes,
    "tube_stitching": Synopsis, "face_detection": FaceDetections,
    "face_landmarks": FaceLandmarks, "face_encoding": FaceEncodings,
    "face_distance": FaceDistances, "face_compare": FaceMatches,
}


def test_every_stage_type_has_an_operator():
    assert set(OPERATORS) == set(STAGE_TYPES) == set(OUTPUT_TYPES)
    assert set(SCENE_FOR_APP) == set(APPLICATIONS)
    assert {"OPERATORS", "run_task", "run_stage", "make_frames"} <= set(apps.__all__)


@pytest.mark.parametrize("app_id", list(APPLICATIONS))
def test_run_task_runs_every_app_end_to_end(app_id):
    out = run_task(app_id, 36_864, seed=1)
    assert list(out) == [s.name for s in APPLICATIONS[app_id].stages]
    for name, value in out.items():
        assert isinstance(value, OUTPUT_TYPES[name]), name
    # Deterministic: a second run gives the same final answer.
    again = run_task(app_id, 36_864, seed=1)
    last = APPLICATIONS[app_id].stages[-1].name
    if app_id == "intrusion_detection":
        assert [t.centroids for t in out[last].tracks] == [t.centroids for t in again[last].tracks]
    elif app_id == "video_synopsis":
        assert torch.equal(out[last].frames, again[last].frames)
    else:
        assert torch.equal(out[last].best_distance, again[last].best_distance)


def test_run_task_respects_dependencies(monkeypatch):
    """Record every operator call: each stage runs once, after all of its dependencies, and
    receives exactly their outputs."""
    calls: list[str] = []
    produced: dict[str, object] = {}

    def recorder(name, op):
        def wrapped(frames, inputs, **kw):
            for dep in APPLICATIONS[current].stage(name).deps:
                assert dep in calls, f"{name} ran before its dependency {dep}"
                assert inputs[dep] is produced[dep]
            assert set(inputs) == set(APPLICATIONS[current].stage(name).deps)
            calls.append(name)
            produced[name] = op(frames, inputs, **kw)
            return produced[name]
        return wrapped

    for name, op in list(OPERATORS.items()):
        monkeypatch.setitem(OPERATORS, name, recorder(name, op))
    for current in APPLICATIONS:
        calls.clear()
        produced.clear()
        run_task(current, 4096, seed=0)
        assert sorted(calls) == sorted(s.name for s in APPLICATIONS[current].stages)


def test_stage_order_is_topological():
    for app in APPLICATIONS.values():
        order = stage_order(app)
        assert sorted(order) == sorted(s.name for s in app.stages)
        for s in app.stages:
            assert all(order.index(d) < order.index(s.name) for d in s.deps)


def test_run_stage_and_unknown_names():
    frames = task_frames("video_synopsis", 4096, seed=0)
    assert isinstance(run_stage("frame_difference", frames), FrameDifference)
    assert run_stage("frame_difference", frames, threshold=2.0).motion.sum() == 0  # options
    with pytest.raises(KeyError):
        run_stage("no_such_stage", frames, {})
    with pytest.raises(KeyError):
        run_task("no_such_app", 4096, 0)


def test_operators_follow_the_input_dtype_and_device():
    frames = task_frames("face_recognition", 4096, seed=0).double()
    out = run_task("face_recognition", 4096, seed=0, frames=frames)
    assert out["face_encoding"].encodings.dtype == torch.float64
    assert out["face_distance"].distances.device == frames.device


def test_workload_core_does_not_import_torch():
    code = ("import sys, workload, workload.catalog; "
            "print('torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert res.stdout.strip() == "False"
