"""gmm_background against scikit-learn's GaussianMixture, frame_difference against scipy."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.ndimage as ndi
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture

from workload.apps.background import (frame_difference, fused_foreground, gmm_background,
                                      gmm_initial_parameters)
from workload.apps.frames import make_scene

torch.set_num_threads(1)

K, N_ITER, REG = 3, 8, 1e-4


@pytest.fixture(scope="module")
def scene64():
    return make_scene(36_864, seed=5, dtype=torch.float64)


def _sklearn_fit(series: np.ndarray) -> GaussianMixture:
    """The same start as gmm_initial_parameters, computed here with numpy."""
    means = np.quantile(series, (np.arange(K) + 0.5) / K)
    var = series.var() + REG
    gm = GaussianMixture(K, covariance_type="full", tol=0.0, max_iter=N_ITER, reg_covar=REG,
                         weights_init=np.full(K, 1 / K), means_init=means[:, None],
                         precisions_init=np.full((K, 1, 1), 1 / var))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # tol=0: runs exactly max_iter
        gm.fit(series[:, None])
    return gm


def _test_pixels(scene, count=24):
    """Pixels an object crosses at some time, and pixels it never does."""
    covered = scene.coverage.any(0).reshape(-1).numpy()
    rng = np.random.default_rng(0)
    return np.concatenate([rng.choice(np.flatnonzero(covered), count // 2, replace=False),
                           rng.choice(np.flatnonzero(~covered), count // 2, replace=False)])


def test_initial_parameters_are_numpy_quantiles(scene64):
    x = scene64.frames.reshape(scene64.frames.shape[0], -1)
    w, m, v = gmm_initial_parameters(x, K, REG)
    np.testing.assert_allclose(m.numpy(), np.quantile(x.numpy(), (np.arange(K) + 0.5) / K,
                                                      axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(v.numpy()[0], x.numpy().var(axis=0) + REG, rtol=1e-12)
    assert torch.allclose(w, torch.full_like(w, 1 / K))


def test_gmm_matches_sklearn_per_pixel(scene64):
    model = gmm_background(scene64.frames, {}, n_components=K, n_iter=N_ITER, reg_covar=REG)
    t = scene64.frames.shape[0]
    x = scene64.frames.reshape(t, -1).numpy()
    for p in _test_pixels(scene64):
        gm = _sklearn_fit(x[:, p])
        # Float64 both sides, same EM updates: agreement to rounding (1e-9 absolute).
        np.testing.assert_allclose(model.means.reshape(K, -1)[:, p].numpy(), gm.means_[:, 0],
                                   rtol=0, atol=1e-9)
        np.testing.assert_allclose(model.variances.reshape(K, -1)[:, p].numpy(),
                                   gm.covariances_[:, 0, 0], rtol=0, atol=1e-9)
        np.testing.assert_allclose(model.weights.reshape(K, -1)[:, p].numpy(), gm.weights_,
                                   rtol=0, atol=1e-9)


def test_gmm_foreground_rule_matches_a_numpy_reference(scene64):
    ratio, c = 0.7, 2.5
    model = gmm_background(scene64.frames, {}, background_ratio=ratio, match_sigmas=c)
    t = scene64.frames.shape[0]
    x = scene64.frames.reshape(t, -1).numpy()
    fg = model.foreground.reshape(t, -1).numpy()
    for p in _test_pixels(scene64):
        gm = _sklearn_fit(x[:, p])
        sd = np.sqrt(gm.covariances_[:, 0, 0])
        order = np.argsort(-(gm.weights_ / sd), kind="stable")
        cum_before = np.cumsum(gm.weights_[order]) - gm.weights_[order]
        background = order[cum_before < ratio]
        ref = ~np.any(np.abs(x[:, p, None] - gm.means_[background, 0]) <= c * sd[background],
                      axis=1)
        np.testing.assert_array_equal(fg[:, p], ref)


def test_gmm_float32_agrees_with_float64(scene64):
    m64 = gmm_background(scene64.frames, {})
    m32 = gmm_background(scene64.frames.float(), {})
    assert m32.means.dtype == torch.float32
    np.testing.assert_allclose(m32.background.numpy(), m64.background.numpy(), atol=1e-4)
    # Threshold decisions may flip only for a few samples sitting on the 2.5-sigma edge.
    assert (m32.foreground != m64.foreground).float().mean() < 1e-3


def test_gmm_foreground_finds_the_moving_objects():
    s = make_scene(36_864, seed=2)
    model = gmm_background(s.frames, {})
    fg, gt = model.foreground, s.coverage
    recall = float((fg & gt).sum() / gt.sum())
    false_alarm = float((fg & ~gt).sum() / (~gt).sum())
    assert recall > 0.85 and false_alarm < 0.03, (recall, false_alarm)
    # The background image is the frame without the objects (close to the static texture).
    still = ~gt.any(0)
    err = (model.background - s.frames.median(dim=0).values).abs()[still]
    assert float(err.mean()) < 0.02


def test_frame_difference_matches_scipy(scene64):
    sigma, thr = 1.0, 0.05
    out = frame_difference(scene64.frames, {}, sigma=sigma, threshold=thr)
    f = scene64.frames.numpy()
    blurred = ndi.gaussian_filter(f, sigma=(0, sigma, sigma), mode="nearest", truncate=4.0)
    ref = np.concatenate([np.zeros_like(f[:1]), np.abs(np.diff(blurred, axis=0))])
    np.testing.assert_allclose(out.diff.numpy(), ref, rtol=0, atol=1e-12)
    # Same threshold decisions wherever the value is not within rounding of the threshold.
    clear = np.abs(ref - thr) > 1e-9
    np.testing.assert_array_equal(out.motion.numpy()[clear], (ref > thr)[clear])
    assert out.motion.any() and not out.motion[0].any()


def test_fused_foreground_is_the_union(scene64):
    model, diff = gmm_background(scene64.frames, {}), frame_difference(scene64.frames, {})
    fused = fused_foreground(model, diff)
    assert torch.equal(fused, model.foreground | diff.motion)
