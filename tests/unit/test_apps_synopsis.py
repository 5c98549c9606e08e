"""Tube extraction against scipy.ndimage, tube stitching's collision costs against
scipy.signal.correlate, and the synopsis rendering."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as ndi
import torch
from scipy.signal import correlate

from workload.apps import run_task
from workload.apps.background import fused_foreground
from workload.apps.synopsis import Tubes, overlap_by_shift, tube_extraction, tube_stitching

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def synopsis_run():
    return run_task("video_synopsis", 36_864, seed=2)


def test_tube_extraction_equals_scipy_label(synopsis_run):
    out = synopsis_run
    mask = fused_foreground(out["gmm_background"], out["frame_difference"]).numpy()
    ref, n = ndi.label(mask, structure=np.ones((3, 3, 3)))
    index = np.arange(1, n + 1)
    sizes = ndi.sum_labels(mask, ref, index)
    kept = index[sizes >= 20]
    remap = np.zeros(n + 1, dtype=np.int64)
    remap[kept] = np.arange(1, len(kept) + 1)
    tubes = tube_extraction(None, {k: out[k] for k in ("gmm_background", "frame_difference")},
                            min_voxels=20)
    assert tubes.count == len(kept) >= 2
    np.testing.assert_array_equal(tubes.labels.numpy(), remap[ref])
    np.testing.assert_array_equal(tubes.size.numpy(), sizes[sizes >= 20])
    np.testing.assert_allclose(tubes.centroid.numpy(),
                               np.array(ndi.center_of_mass(mask, ref, kept)), rtol=0, atol=1e-12)
    slices = [ndi.find_objects(ref)[k - 1] for k in kept]
    np.testing.assert_array_equal(tubes.lo.numpy(), [[s.start for s in sl] for sl in slices])
    np.testing.assert_array_equal(tubes.hi.numpy(), [[s.stop for s in sl] for sl in slices])
    assert tubes.background is out["gmm_background"].background


def test_overlap_by_shift_equals_scipy_correlate():
    rng = np.random.default_rng(0)
    canvas = rng.integers(0, 3, (12, 5, 6)).astype(float)
    tube = (rng.random((4, 5, 6)) > 0.5).astype(float)
    ours = overlap_by_shift(torch.from_numpy(canvas), torch.from_numpy(tube)).numpy()
    ref = correlate(canvas, tube, mode="valid", method="direct")[:, 0, 0]
    np.testing.assert_array_equal(ours, ref)


def _check_greedy_rule(tubes: Tubes, syn, max_overlap: int, keep_order: bool = True):
    """Recompute every placement decision with scipy.signal.correlate."""
    labels = tubes.labels.numpy()
    lo, hi = tubes.lo.numpy(), tubes.hi.numpy()
    _, h, w = labels.shape
    durations = hi[:, 0] - lo[:, 0]
    canvas = np.zeros((durations.sum(), h, w))
    assert syn.order == sorted(range(tubes.count), key=lambda k: (lo[k, 0], k))
    earliest, total = 0, 0
    for k in syn.order:
        occ = (labels[lo[k, 0]:hi[k, 0]] == k + 1).astype(float)
        cost = correlate(canvas, occ, mode="valid", method="direct")[:, 0, 0]
        allowed = [s for s in range(len(cost))
                   if cost[s] <= max_overlap and (s >= earliest or not keep_order)]
        s = int(syn.start[k])
        assert s == allowed[0], (k, s, allowed[:3])
        total += int(cost[s])
        canvas[s:s + durations[k]] += occ
        earliest = s if keep_order else 0
    assert syn.overlap == total
    assert syn.length == int(max(syn.start[k] + durations[k] for k in range(tubes.count)))


def _toy_tubes() -> tuple[Tubes, torch.Tensor]:
    """Three tubes on a 10-frame clip: two cross the same spot at different times (they must
    not be stacked), the third is elsewhere."""
    t, h, w = 10, 8, 8
    labels = torch.zeros(t, h, w, dtype=torch.int64)
    labels[0:4, 0:4, 0:4] = 1
    labels[5:9, 1:5, 1:5] = 2
    labels[6:10, 5:8, 4:8] = 3
    lo = torch.tensor([[0, 0, 0], [5, 1, 1], [6, 5, 4]])
    hi = torch.tensor([[4, 4, 4], [9, 5, 5], [10, 8, 8]])
    size = torch.tensor([int((labels == k).sum()) for k in (1, 2, 3)])
    frames = torch.rand(t, h, w, generator=torch.Generator().manual_seed(0))
    return Tubes(labels=labels, size=size, centroid=torch.zeros(3, 3), lo=lo, hi=hi,
                 background=torch.full((h, w), 0.25)), frames


@pytest.mark.parametrize("max_overlap", [0, 5, 1000])
def test_stitching_follows_the_greedy_rule(max_overlap):
    tubes, frames = _toy_tubes()
    syn = tube_stitching(frames, {"tube_extraction": tubes}, max_overlap=max_overlap)
    _check_greedy_rule(tubes, syn, max_overlap)
    if max_overlap == 0:
        assert syn.start.tolist() == [0, 4, 4] and syn.length == 8 and syn.overlap == 0
    if max_overlap == 1000:
        assert syn.start.tolist() == [0, 0, 0] and syn.length == 4


def test_stitching_without_order_packs_tighter():
    tubes, frames = _toy_tubes()
    syn = tube_stitching(frames, {"tube_extraction": tubes}, keep_order=False)
    _check_greedy_rule(tubes, syn, 0, keep_order=False)
    assert syn.start.tolist() == [0, 4, 0]


def test_synopsis_frames_paste_tube_pixels_on_the_background():
    tubes, frames = _toy_tubes()
    syn = tube_stitching(frames, {"tube_extraction": tubes})
    expected = np.full((syn.length, 8, 8), 0.25, dtype=np.float32)
    for k in syn.order:
        t0, t1 = int(tubes.lo[k, 0]), int(tubes.hi[k, 0])
        s = int(syn.start[k])
        occ = tubes.labels[t0:t1].numpy() == k + 1
        expected[s:s + t1 - t0][occ] = frames[t0:t1].numpy()[occ]
    np.testing.assert_array_equal(syn.frames.numpy(), expected)


def test_real_synopsis_is_shorter_and_collision_free(synopsis_run):
    tubes, syn = synopsis_run["tube_extraction"], synopsis_run["tube_stitching"]
    _check_greedy_rule(tubes, syn, 0)
    assert syn.overlap == 0
    assert syn.length <= int(tubes.hi[:, 0].max())  # never longer than the original activity
    assert syn.frames.shape == (syn.length, *tubes.labels.shape[1:])


def test_no_tubes_gives_an_empty_synopsis():
    tubes, frames = _toy_tubes()
    empty = Tubes(labels=torch.zeros_like(tubes.labels), size=torch.zeros(0, dtype=torch.int64),
                  centroid=torch.zeros(0, 3), lo=torch.zeros(0, 3, dtype=torch.int64),
                  hi=torch.zeros(0, 3, dtype=torch.int64), background=tubes.background)
    syn = tube_stitching(frames, {"tube_extraction": empty})
    assert syn.length == 0 and syn.frames.shape == (0, 8, 8) and syn.order == []
