"""Tracking: the assignment solver against scipy.optimize.linear_sum_assignment, blob
detection against scipy.ndimage, and tracks against the scene's ground truth."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as ndi
import torch
from scipy.optimize import linear_sum_assignment

from workload.apps import run_task
from workload.apps.background import fused_foreground
from workload.apps.frames import make_scene
from workload.apps.pyramid import Keypoints
from workload.apps.tracking import detect_blobs, linear_assignment, tracking

torch.set_num_threads(1)


@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (4, 7), (7, 4), (12, 12), (0, 3)])
def test_linear_assignment_equals_scipy(shape):
    rng = np.random.default_rng(sum(shape))
    for _ in range(5):
        cost = rng.random(shape) * 10
        rows, cols = linear_assignment(cost)
        ref_rows, ref_cols = linear_sum_assignment(cost)
        # Continuous random costs have a unique optimum: the same pairs, not only the same sum.
        np.testing.assert_array_equal(rows, ref_rows)
        np.testing.assert_array_equal(cols, ref_cols)


def test_linear_assignment_with_ties_reaches_the_optimal_cost():
    rng = np.random.default_rng(7)
    for shape in [(6, 6), (5, 8), (8, 5)]:
        cost = rng.integers(0, 4, shape).astype(float)  # many ties
        rows, cols = linear_assignment(cost)
        ref_rows, ref_cols = linear_sum_assignment(cost)
        assert len(rows) == min(shape) == len(set(cols))
        assert cost[rows, cols].sum() == cost[ref_rows, ref_cols].sum()


def test_linear_assignment_rejects_non_finite():
    with pytest.raises(ValueError):
        linear_assignment([[1.0, np.inf]])


def test_detect_blobs_matches_scipy():
    mask = np.random.default_rng(3).random((4, 20, 24)) > 0.8
    per_frame = np.zeros((3, 3, 3))
    per_frame[1] = 1
    ref, n = ndi.label(mask, structure=per_frame)
    index = np.arange(1, n + 1)
    area = ndi.sum_labels(mask, ref, index)
    keep = area >= 3
    det = detect_blobs(torch.from_numpy(mask), min_area=3)
    assert det.frame.numel() == keep.sum() > 10
    com = np.array(ndi.center_of_mass(mask, ref, index))[keep]
    np.testing.assert_allclose(det.centroid.numpy(), com[:, 1:], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(det.frame.numpy(), com[:, 0].astype(int))
    boxes = [(s[1].start, s[2].start, s[1].stop, s[2].stop)
             for s, k in zip(ndi.find_objects(ref), keep) if k]
    np.testing.assert_array_equal(det.box.numpy(), boxes)
    np.testing.assert_array_equal(det.area.numpy(), area[keep])


def test_detect_blobs_counts_keypoints_inside_boxes():
    mask = torch.zeros(2, 10, 10, dtype=torch.bool)
    mask[0, 2:5, 2:5] = True
    mask[1, 6:9, 6:9] = True
    i = lambda *v: torch.tensor(v)
    f = lambda *v: torch.tensor(v, dtype=torch.float32)
    kp = Keypoints(frame=i(0, 0, 1, 0), octave=i(0, 0, 0, 0), scale=i(1, 1, 1, 1),
                   y=i(3, 4, 7, 7), x=i(3, 2, 7, 7), y_image=f(3, 4, 7, 7),
                   x_image=f(3, 2, 7, 7), sigma=f(1, 1, 1, 1), response=f(1, 1, 1, 1))
    det = detect_blobs(mask, min_area=1, keypoints=kp)
    assert det.keypoints.tolist() == [2, 1]  # the frame-0 keypoint at (7, 7) is elsewhere


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tracks_follow_the_ground_truth_objects(seed):
    scene = make_scene(36_864, seed)
    out = run_task("intrusion_detection", 36_864, seed)
    result = out["tracking"]
    assert len(result.tracks) == len(scene.kinds)
    centres = ((scene.boxes[..., :2] + scene.boxes[..., 2:]) / 2).numpy()
    matched = set()
    for tr in result.tracks:
        assert len(tr.frames) == len(tr.centroids) == len(tr.boxes) == len(tr.areas) >= 3
        assert tr.frames == sorted(tr.frames)
        # The object this track follows: the nearest ground-truth centre, averaged over frames.
        errs = [np.mean([np.hypot(*(np.array(c) - centres[t, k]))
                         for t, c in zip(tr.frames, tr.centroids) if scene.visible[t, k]] or [99])
                for k in range(len(scene.kinds))]
        k = int(np.argmin(errs))
        matched.add(k)
        assert errs[k] < 1.5, (seed, tr.track_id, errs)
        visible = set(np.flatnonzero(scene.visible[:, k].numpy()))
        assert len(visible & set(tr.frames)) >= 0.9 * len(visible)  # followed nearly throughout
    assert matched == set(range(len(scene.kinds)))  # one track per object


def test_intrusion_zone_is_respected():
    seed = 1
    out = run_task("intrusion_detection", 36_864, seed)
    inputs = {k: out[k] for k in ("gmm_background", "frame_difference", "scale_space_extrema")}
    h, w = out["gmm_background"].background.shape
    for zone in [(0.0, 0.0, 1.0, 1.0), (0.0, 0.0, 0.0, 0.0), (0.0, 0.0, 0.5, 0.5)]:
        res = tracking(None, inputs, zone=zone)
        zy0, zx0, zy1, zx1 = zone[0] * h, zone[1] * w, zone[2] * h, zone[3] * w
        expected = [tr.track_id for tr in res.tracks
                    if any(zy0 <= y < zy1 and zx0 <= x < zx1 for y, x in tr.centroids)]
        assert res.intrusions == expected
    assert tracking(None, inputs, zone=(0, 0, 1, 1)).intrusions == [0, 1, 2]
    assert tracking(None, inputs, zone=(0, 0, 0, 0)).intrusions == []


def test_tracking_gate_splits_tracks():
    out = run_task("intrusion_detection", 36_864, 1)
    inputs = {k: out[k] for k in ("gmm_background", "frame_difference", "scale_space_extrema")}
    # With a zero gate nothing can be associated: every track is a single detection, and
    # single detections are below min_length, so none survive.
    assert tracking(None, inputs, max_distance=0.0).tracks == []
    assert len(tracking(None, inputs, max_distance=0.0, min_length=1).tracks) == \
        tracking(None, inputs).detections
    # The detections are the blobs of the fused mask.
    det = detect_blobs(fused_foreground(out["gmm_background"], out["frame_difference"]))
    assert tracking(None, inputs).detections == det.frame.numel()
