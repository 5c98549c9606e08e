"""Gaussian / DoG pyramids and scale-space extrema against scipy.ndimage."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.ndimage as ndi
import torch

from workload.apps.frames import make_frames
from workload.apps.pyramid import (CAMERA_BLUR, DoGPyramid, dog_pyramid, gaussian_pyramid,
                                   scale_space_extrema)

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def frames64():
    return make_frames(36_864, seed=4, dtype=torch.float64)[:4]


def _scipy_pyramid(frames: np.ndarray, n_octaves: int, s: int, sigma0: float):
    blur = lambda x, sig: ndi.gaussian_filter(x, (0, sig, sig), mode="nearest", truncate=4.0)
    sigmas = [sigma0 * 2 ** (k / s) for k in range(s + 3)]
    base = blur(frames, math.sqrt(sigma0 ** 2 - CAMERA_BLUR ** 2))
    octaves = []
    for o in range(n_octaves):
        if o:
            base = octaves[-1][:, s, ::2, ::2]
        octaves.append(np.stack([base] + [blur(base, math.sqrt(sk ** 2 - sigma0 ** 2))
                                          for sk in sigmas[1:]], axis=1))
    return octaves, sigmas


def test_gaussian_pyramid_matches_scipy(frames64):
    gp = gaussian_pyramid(frames64, {}, n_octaves=3, scales_per_octave=2, sigma0=1.6)
    ref, sigmas = _scipy_pyramid(frames64.numpy(), 3, 2, 1.6)
    assert len(gp.octaves) == 3
    np.testing.assert_allclose(gp.sigmas, sigmas, rtol=1e-12)
    for ours, theirs in zip(gp.octaves, ref):
        assert ours.shape == theirs.shape
        np.testing.assert_allclose(ours.numpy(), theirs, rtol=0, atol=1e-12)
    gp32 = gaussian_pyramid(frames64.float(), {})
    for ours, theirs in zip(gp32.octaves, ref):
        np.testing.assert_allclose(ours.numpy(), theirs, rtol=0, atol=2e-6)


def test_octaves_stop_at_eight_pixels():
    gp = gaussian_pyramid(torch.rand(1, 32, 40), {}, n_octaves=6)
    assert [o.shape[2] for o in gp.octaves] == [32, 16, 8]


def test_dog_is_the_difference_of_adjacent_levels(frames64):
    gp = gaussian_pyramid(frames64, {})
    dog = dog_pyramid(frames64, {"gaussian_pyramid": gp})
    ref, _ = _scipy_pyramid(frames64.numpy(), len(gp.octaves), 2, 1.6)
    for ours, theirs in zip(dog.octaves, ref):
        np.testing.assert_allclose(ours.numpy(), np.diff(theirs, axis=1), rtol=0, atol=1e-12)


def _scipy_extrema(dog_octaves, thr, border=1):
    """(frame, octave, scale, y, x) of 3x3x3 extrema found with scipy's rank filters."""
    found = set()
    for o, d in enumerate(dog_octaves):
        mx = ndi.maximum_filter(d, size=(1, 3, 3, 3), mode="constant", cval=-np.inf)
        mn = ndi.minimum_filter(d, size=(1, 3, 3, 3), mode="constant", cval=np.inf)
        hit = ((d == mx) & (d > thr)) | ((d == mn) & (d < -thr))
        t, s, h, w = d.shape
        inner = np.zeros_like(hit)
        inner[:, 1:s - 1, border:h - border, border:w - border] = True
        found |= {(f, o, k, y, x) for f, k, y, x in zip(*np.nonzero(hit & inner))}
    return found


@pytest.mark.parametrize("thr", [0.0, 0.02])
def test_extrema_equal_scipy_rank_filters(frames64, thr):
    dog = dog_pyramid(frames64, {"gaussian_pyramid": gaussian_pyramid(frames64.float(), {})})
    kp = scale_space_extrema(frames64, {"dog_pyramid": dog}, contrast_threshold=thr)
    ours = set(zip(*(v.tolist() for v in (kp.frame, kp.octave, kp.scale, kp.y, kp.x))))
    ref = _scipy_extrema([d.numpy() for d in dog.octaves], thr)
    assert len(ref) >= 5
    assert ours == ref
    # Positions, blur and response agree with the rows they describe.
    np.testing.assert_array_equal(kp.y_image.numpy(), kp.y.numpy() * 2.0 ** kp.octave.numpy())
    for f, o, k, y, x, r in zip(kp.frame, kp.octave, kp.scale, kp.y, kp.x, kp.response):
        assert float(r) == float(dog.octaves[int(o)][f, k, y, x])


def test_a_bright_blob_is_a_negative_extremum_at_its_centre():
    yy, xx = np.meshgrid(np.arange(32.0), np.arange(32.0), indexing="ij")
    blob = 0.2 + 0.6 * np.exp(-((yy - 15) ** 2 + (xx - 17) ** 2) / (2 * 2.5 ** 2))
    f = torch.from_numpy(blob)[None]
    dog = dog_pyramid(f, {"gaussian_pyramid": gaussian_pyramid(f, {})})
    kp = scale_space_extrema(f, {"dog_pyramid": dog})
    strongest = int(kp.response.abs().argmax())
    assert float(kp.response[strongest]) < 0  # blurring lowers a bright peak
    assert (float(kp.y_image[strongest]), float(kp.x_image[strongest])) == (15.0, 17.0)


def test_no_extrema_in_an_empty_pyramid():
    d = torch.zeros(1, 2, 5, 5)  # two DoG levels: no interior scale
    kp = scale_space_extrema(None, {"dog_pyramid": DoGPyramid([d], (1.0, 2.0, 3.0))})
    assert kp.count == 0
