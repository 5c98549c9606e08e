"""Synthetic frames and the shared primitives (blur, resampling, connected components),
checked against scipy.ndimage."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as ndi
import torch

from workload.apps.components import component_stats, label_components
from workload.apps.filters import (gaussian_blur, max_filter3, resize_bilinear,
                                   resize_coordinates, sample_bilinear)
from workload.apps.frames import (DEFAULT_INPUT_SIZE, IDENTITIES, TEMPLATE_SIZE, frame_shape,
                                  make_frames, make_scene)

torch.set_num_threads(1)


# ---------------------------------------------------------------------------------- frames

@pytest.mark.parametrize("size", [1, 4096, DEFAULT_INPUT_SIZE, 147_456, 1 << 20])
def test_frame_shape_tracks_the_pixel_budget(size):
    t, h, w = frame_shape(size)
    assert 4 <= t <= 64 and h % 8 == 0 and w % 8 == 0 and min(h, w) >= 32
    if min(h, w) > 32:  # above the 32-pixel side floor the clip holds about input_size pixels
        assert 0.8 * size <= t * h * w <= 1.25 * size
    else:
        assert t * h * w >= size


def test_frame_shape_grows_with_input_size():
    sizes = [frame_shape(s) for s in (4096, 36_864, 147_456, 1 << 20)]
    assert [np.prod(s) for s in sizes] == sorted(np.prod(s) for s in sizes)
    assert frame_shape(DEFAULT_INPUT_SIZE) == (17, 40, 56)
    with pytest.raises(ValueError):
        frame_shape(0)


@pytest.mark.parametrize("scene", ["objects", "faces"])
def test_frames_are_deterministic_for_a_seed(scene):
    a = make_frames(4096, seed=11, scene=scene)
    b = make_frames(4096, seed=11, scene=scene)
    c = make_frames(4096, seed=12, scene=scene)
    assert a.dtype == torch.float32 and tuple(a.shape) == frame_shape(4096)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert float(a.min()) >= 0.0 and float(a.max()) <= 1.0


def test_scene_ground_truth_matches_the_pixels():
    s = make_scene(DEFAULT_INPUT_SIZE, seed=3)
    t, h, w = s.frames.shape
    n = len(s.kinds)
    assert s.boxes.shape == (t, n, 4) and s.visible.shape == (t, n)
    # Objects are brighter than the background (0.15-0.45), visible ones cover pixels.
    assert s.coverage.any()
    assert float(s.frames[s.coverage].mean()) > float(s.frames[~s.coverage].mean()) + 0.3
    # Objects move: some box centre travels at least a quarter of the width.
    cx = (s.boxes[..., 1] + s.boxes[..., 3]) / 2
    assert float((cx.max(0).values - cx.min(0).values).max()) > w / 4
    f = make_scene(DEFAULT_INPUT_SIZE, seed=3, scene="faces")
    assert set(f.kinds) == {"face"} and all(0 <= i < len(IDENTITIES) for i in f.identities)
    heights = f.boxes[..., 2] - f.boxes[..., 0]
    assert float(heights.min()) >= TEMPLATE_SIZE[0] - 1e-4  # big enough to detect


# ------------------------------------------------------------------------------- filters

@pytest.mark.parametrize("sigma", [0.7, 1.0, 2.5])
def test_gaussian_blur_matches_scipy(sigma):
    x = np.random.default_rng(0).random((3, 13, 17))
    ours = gaussian_blur(torch.from_numpy(x), sigma).numpy()
    ref = ndi.gaussian_filter(x, sigma=(0, sigma, sigma), mode="nearest", truncate=4.0)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-12)
    ours32 = gaussian_blur(torch.from_numpy(x).float(), sigma).numpy()
    np.testing.assert_allclose(ours32, ref, rtol=0, atol=1e-6)


def test_sample_bilinear_matches_map_coordinates():
    rng = np.random.default_rng(1)
    img = rng.random((2, 9, 11))
    ys = rng.uniform(-2, 11, (2, 5, 6))  # some outside: borders clamp
    xs = rng.uniform(-2, 13, (2, 5, 6))
    ours = sample_bilinear(torch.from_numpy(img), torch.from_numpy(ys), torch.from_numpy(xs))
    ref = np.stack([ndi.map_coordinates(img[k], [ys[k], xs[k]], order=1, mode="nearest")
                    for k in range(2)])
    np.testing.assert_allclose(ours.numpy(), ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("out_hw", [(10, 13), (7, 5), (20, 30)])
def test_resize_bilinear_matches_map_coordinates(out_hw):
    img = np.random.default_rng(2).random((2, 12, 16))
    oh, ow = out_hw
    ours = resize_bilinear(torch.from_numpy(img), oh, ow).numpy()
    yy, xx = np.meshgrid(resize_coordinates(12, oh).numpy(), resize_coordinates(16, ow).numpy(),
                         indexing="ij")
    ref = np.stack([ndi.map_coordinates(im, [yy, xx], order=1, mode="nearest") for im in img])
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dims", [(1,), (1, 2), (0, 1, 2), (0, 2, 3)])
def test_max_filter3_matches_scipy_maximum_filter(dims):
    x = np.random.default_rng(4).random((3, 4, 6, 7))
    size = [3 if d in dims else 1 for d in range(4)]
    ref = ndi.maximum_filter(x, size=size, mode="constant", cval=-np.inf)
    np.testing.assert_array_equal(max_filter3(torch.from_numpy(x), dims).numpy(), ref)


# ---------------------------------------------------------------------------- components

@pytest.mark.parametrize("seed", [0, 1])
def test_label_components_equals_scipy_label(seed):
    m = np.random.default_rng(seed).random((6, 14, 19)) > 0.82
    ours, n = label_components(torch.from_numpy(m))
    ref, rn = ndi.label(m, structure=np.ones((3, 3, 3)))
    assert n == rn > 5
    np.testing.assert_array_equal(ours.numpy(), ref)  # same numbers, not only same partition
    per_frame = np.zeros((3, 3, 3))
    per_frame[1] = 1
    ours2, n2 = label_components(torch.from_numpy(m), per_frame=True)
    ref2, rn2 = ndi.label(m, structure=per_frame)
    assert n2 == rn2
    np.testing.assert_array_equal(ours2.numpy(), ref2)
    ours3, n3 = label_components(torch.from_numpy(m[0]))
    ref3, rn3 = ndi.label(m[0], structure=np.ones((3, 3)))
    assert n3 == rn3
    np.testing.assert_array_equal(ours3.numpy(), ref3)


def test_label_components_long_snake_and_empty():
    # A one-pixel-wide serpentine: the worst case for plain propagation.
    m = np.zeros((1, 15, 15), dtype=bool)
    m[0, ::2, :] = True
    m[0, 1::4, -1] = True
    m[0, 3::4, 0] = True
    ours, n = label_components(torch.from_numpy(m))
    assert n == 1 and set(np.unique(ours.numpy())) == {0, 1}
    empty, n0 = label_components(torch.zeros(2, 3, 3, dtype=torch.bool))
    assert n0 == 0 and not empty.any()


def test_component_stats_match_scipy():
    m = np.random.default_rng(3).random((5, 12, 12)) > 0.7
    ref, n = ndi.label(m, structure=np.ones((3, 3, 3)))
    stats = component_stats(torch.from_numpy(ref).long(), n)
    index = np.arange(1, n + 1)
    np.testing.assert_array_equal(stats.size.numpy(), ndi.sum_labels(m, ref, index))
    np.testing.assert_allclose(stats.centroid.numpy(),
                               np.array(ndi.center_of_mass(m, ref, index)), rtol=0, atol=1e-12)
    slices = ndi.find_objects(ref)
    np.testing.assert_array_equal(stats.lo.numpy(), [[s.start for s in sl] for sl in slices])
    np.testing.assert_array_equal(stats.hi.numpy(), [[s.stop for s in sl] for sl in slices])
