"""Background modelling and motion: the ``gmm_background`` and ``frame_difference`` stages.

Both are GPU-capable and run on the device (and in the dtype) of the frames.

Example::

    >>> from workload.apps.frames import make_frames
    >>> frames = make_frames(4096, seed=0)
    >>> bg = gmm_background(frames, {})
    >>> tuple(bg.foreground.shape) == tuple(frames.shape), tuple(bg.means.shape)
    (True, (3, 32, 40))
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from workload.cancel import check_cancelled
from .filters import gaussian_blur

__all__ = ["BackgroundModel", "FrameDifference", "gmm_initial_parameters", "gmm_em",
           "gmm_background", "frame_difference", "fused_foreground"]


@dataclass
class BackgroundModel:
    """Output of ``gmm_background``: a K-component Gaussian mixture per pixel.

    weights, means, variances: (K, H, W). is_background: (K, H, W) bool, which components
    model the background. background: (H, W) mean of each pixel's top-ranked component.
    foreground: (T, H, W) bool, pixels no background component explains.
    """

    weights: torch.Tensor
    means: torch.Tensor
    variances: torch.Tensor
    is_background: torch.Tensor
    background: torch.Tensor
    foreground: torch.Tensor


@dataclass
class FrameDifference:
    """Output of ``frame_difference``: diff (T, H, W) |blur(f_t) - blur(f_{t-1})| (0 at t = 0),
    motion (T, H, W) bool, diff above the threshold."""

    diff: torch.Tensor
    motion: torch.Tensor


def gmm_initial_parameters(x: torch.Tensor, n_components: int, reg_covar: float
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Deterministic start for EM on per-pixel series ``x`` (T, P): equal weights, means at the
    series' quantiles (k + 0.5) / K (linear interpolation, as numpy's default), and every
    component with the series' variance plus ``reg_covar``. Returns (K, P) each.

    Example::

        >>> import torch
        >>> w, m, v = gmm_initial_parameters(torch.tensor([[0.0], [1.0]]), 2, 0.0)
        >>> m.flatten().tolist(), v.flatten().tolist()
        ([0.25, 0.75], [0.25, 0.25])
    """
    k = n_components
    q = (torch.arange(k, dtype=x.dtype, device=x.device) + 0.5) / k
    means = torch.quantile(x, q, dim=0)
    variances = x.var(dim=0, unbiased=False).expand(k, -1) + reg_covar
    weights = torch.full_like(means, 1.0 / k)
    return weights, means, variances.contiguous()


def gmm_em(x: torch.Tensor, weights: torch.Tensor, means: torch.Tensor, variances: torch.Tensor,
           n_iter: int, reg_covar: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n_iter`` rounds of EM for independent 1-D Gaussian mixtures, one per column of ``x``.

    x: (T, P) samples; weights / means / variances: (K, P). The updates are those of
    ``sklearn.mixture.GaussianMixture`` (E-step in log space; M-step with ``10 * eps`` added to
    each component's responsibility mass, ``reg_covar`` added to each variance, weights
    renormalised), so with the same start both give the same mixture.

    Example::

        >>> import torch
        >>> x = torch.tensor([[0.0], [0.1], [1.0], [1.1]], dtype=torch.float64)
        >>> w, m, v = gmm_em(x, *gmm_initial_parameters(x, 2, 1e-6), n_iter=20, reg_covar=1e-6)
        >>> [round(float(a), 3) for a in m.flatten()]
        [0.05, 1.05]
    """
    eps = torch.finfo(x.dtype).eps
    log_2pi = math.log(2 * math.pi)
    xs = x[:, None, :]  # (T, 1, P) against (K, P)
    for _ in range(n_iter):
        check_cancelled()  # a cancelled task stops between iterations
        # E-step: responsibilities (T, K, P).
        log_prob = (-0.5 * (log_2pi + torch.log(variances) + (xs - means) ** 2 / variances)
                    + torch.log(weights))
        resp = torch.softmax(log_prob, dim=1)
        # M-step.
        nk = resp.sum(dim=0) + 10 * eps
        means = (resp * xs).sum(dim=0) / nk
        variances = (resp * (xs - means) ** 2).sum(dim=0) / nk + reg_covar
        weights = nk / nk.sum(dim=0, keepdim=True)
    return weights, means, variances


def gmm_background(frames: torch.Tensor, inputs: dict | None = None, *, n_components: int = 3,
                   n_iter: int = 8, reg_covar: float = 1e-4, background_ratio: float = 0.7,
                   match_sigmas: float = 2.5) -> BackgroundModel:
    """Stage ``gmm_background``: a per-pixel Gaussian mixture background model (GPU-capable).

    Batched EM over the clip, vectorised over all pixels (a clip-level version of
    Stauffer & Grimson's online update, same model and same foreground rule): each pixel's
    intensity series gets a K-component 1-D mixture (:func:`gmm_em`, started by
    :func:`gmm_initial_parameters`). As in Stauffer–Grimson, components are ranked by
    weight / std and the first ones whose cumulative weight reaches ``background_ratio`` are the
    background; a pixel is foreground in a frame when it lies farther than ``match_sigmas``
    standard deviations from every background component. ``reg_covar`` is a variance floor
    (1e-4 = a std of 0.01, the sensor noise), so a pixel that never changes is not a zero-width
    component that flags every noise wiggle.

    Example::

        >>> from workload.apps.frames import make_frames
        >>> m = gmm_background(make_frames(4096, seed=0), {})
        >>> m.weights.sum(0).allclose(torch.ones(32, 40))
        True
    """
    t, h, w = frames.shape
    x = frames.reshape(t, h * w)
    weights, means, variances = gmm_em(
        x, *gmm_initial_parameters(x, n_components, reg_covar), n_iter=n_iter,
        reg_covar=reg_covar)
    # Rank components by weight / std (most stable first) and take the background prefix.
    check_cancelled()
    rank = weights / variances.sqrt()
    order = torch.argsort(rank, dim=0, descending=True)
    sorted_w = torch.gather(weights, 0, order)
    before = sorted_w.cumsum(0) - sorted_w  # weight of the better-ranked components
    is_bg_sorted = before < background_ratio
    is_background = torch.empty_like(is_bg_sorted).scatter_(0, order, is_bg_sorted)
    matches = (x[:, None, :] - means).abs() <= match_sigmas * variances.sqrt()
    foreground = ~(matches & is_background).any(dim=1)
    background = torch.gather(means, 0, order[:1])[0]
    k = n_components
    return BackgroundModel(weights=weights.view(k, h, w), means=means.view(k, h, w),
                           variances=variances.view(k, h, w),
                           is_background=is_background.view(k, h, w),
                           background=background.view(h, w),
                           foreground=foreground.view(t, h, w))


def frame_difference(frames: torch.Tensor, inputs: dict | None = None, *, sigma: float = 1.0,
                     threshold: float = 0.05) -> FrameDifference:
    """Stage ``frame_difference``: motion between consecutive frames (GPU-capable).

    Each frame is Gaussian-blurred (``sigma``, to keep sensor noise under the threshold), then
    ``diff[t] = |blur(f_t) - blur(f_{t-1})|`` (``diff[0] = 0``) and ``motion = diff > threshold``.

    Example::

        >>> import torch
        >>> f = torch.zeros(2, 8, 8); f[1, 2:6, 2:6] = 1.0
        >>> d = frame_difference(f, {})
        >>> bool(d.motion[0].any()), bool(d.motion[1, 4, 4])
        (False, True)
    """
    blurred = gaussian_blur(frames, sigma)
    check_cancelled()
    diff = torch.zeros_like(frames)
    diff[1:] = (blurred[1:] - blurred[:-1]).abs()
    return FrameDifference(diff=diff, motion=diff > threshold)


def fused_foreground(model: BackgroundModel, difference: FrameDifference) -> torch.Tensor:
    """The moving-object mask later stages use: background-model foreground OR motion.

    Motion keeps an object the background model has partly absorbed (slow or stopped for a
    while); the model keeps an object's interior, which differencing misses.

    Example::

        >>> import torch
        >>> m = BackgroundModel(*(None,) * 5, foreground=torch.tensor([True, False]))
        >>> fused_foreground(m, FrameDifference(None, torch.tensor([False, False]))).tolist()
        [True, False]
    """
    return model.foreground | difference.motion
