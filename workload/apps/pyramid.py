"""Scale space: the ``gaussian_pyramid``, ``dog_pyramid`` and ``scale_space_extrema`` stages.

SIFT-style (Lowe 2004) scale space of every frame, GPU-capable, on the frames' device and dtype.
Octave o holds ``scales_per_octave + 3`` levels of std ``sigma0 * 2 ** (k / scales_per_octave)``
(in that octave's pixels); octave 0 is the frame itself blurred from an assumed camera blur of
0.5 up to ``sigma0``, and each next octave starts from level ``scales_per_octave`` (twice the
base blur) of the previous one, keeping every second pixel. Each level is blurred directly from
its octave's base by ``sqrt(sigma_k ** 2 - sigma0 ** 2)`` (Gaussians compose), so the levels are
independent of one another and the reference test can rebuild them one by one.

Example::

    >>> from workload.apps.frames import make_frames
    >>> frames = make_frames(4096, seed=0)
    >>> gp = gaussian_pyramid(frames, {})
    >>> [tuple(o.shape) for o in gp.octaves]
    [(8, 5, 32, 40), (8, 5, 16, 20), (8, 5, 8, 10)]
    >>> dog = dog_pyramid(frames, {"gaussian_pyramid": gp})
    >>> kp = scale_space_extrema(frames, {"dog_pyramid": dog})
    >>> kp.count > 0
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from workload.cancel import check_cancelled
from .filters import gaussian_blur, max_filter3, octave_count

__all__ = ["GaussianPyramid", "DoGPyramid", "Keypoints", "gaussian_pyramid", "dog_pyramid",
           "scale_space_extrema"]

CAMERA_BLUR = 0.5  # blur assumed already present in a frame (Lowe's choice)


@dataclass
class GaussianPyramid:
    """Output of ``gaussian_pyramid``: octaves[o] is (T, S, H >> o, W >> o) (S levels);
    sigmas[k] is level k's blur in its own octave's pixels."""

    octaves: list[torch.Tensor]
    sigmas: tuple[float, ...]


@dataclass
class DoGPyramid:
    """Output of ``dog_pyramid``: octaves[o] is (T, S - 1, H >> o, W >> o), level k minus level
    k - 1 ... i.e. ``G[k + 1] - G[k]``; sigmas[k] is the blur of ``G[k]``."""

    octaves: list[torch.Tensor]
    sigmas: tuple[float, ...]


@dataclass
class Keypoints:
    """Output of ``scale_space_extrema``: one row per extremum, all (N,) tensors.

    frame, octave, scale (DoG level), y, x: int64, position in that octave's pixels.
    y_image, x_image: float, position in frame pixels (y << octave). sigma: float, blur in frame
    pixels. response: the DoG value (positive: bright blob, negative: dark blob).
    """

    frame: torch.Tensor
    octave: torch.Tensor
    scale: torch.Tensor
    y: torch.Tensor
    x: torch.Tensor
    y_image: torch.Tensor
    x_image: torch.Tensor
    sigma: torch.Tensor
    response: torch.Tensor

    @property
    def count(self) -> int:
        return int(self.frame.numel())


def gaussian_pyramid(frames: torch.Tensor, inputs: dict | None = None, *, n_octaves: int = 3,
                     scales_per_octave: int = 2, sigma0: float = 1.6) -> GaussianPyramid:
    """Stage ``gaussian_pyramid``: blurred and halved copies of every frame (GPU-capable).

    ``n_octaves`` is an upper bound: octaves stop before a side drops under 8 pixels.

    Example::

        >>> import torch
        >>> gp = gaussian_pyramid(torch.rand(2, 32, 32), {}, n_octaves=2)
        >>> len(gp.octaves), len(gp.sigmas)
        (2, 5)
    """
    t, h, w = frames.shape
    s = scales_per_octave
    sigmas = tuple(sigma0 * 2 ** (k / s) for k in range(s + 3))
    base = gaussian_blur(frames, math.sqrt(sigma0 ** 2 - CAMERA_BLUR ** 2))
    octaves = []
    for o in range(octave_count(h, w, n_octaves)):
        check_cancelled()  # a cancelled task stops between octaves (and blur passes)
        if o > 0:
            base = octaves[-1][:, s, ::2, ::2].contiguous()
        levels = [base] + [gaussian_blur(base, math.sqrt(sk ** 2 - sigma0 ** 2))
                           for sk in sigmas[1:]]
        octaves.append(torch.stack(levels, dim=1))
    return GaussianPyramid(octaves=octaves, sigmas=sigmas)


def dog_pyramid(frames: torch.Tensor, inputs: dict) -> DoGPyramid:
    """Stage ``dog_pyramid``: differences of adjacent Gaussian levels (GPU-capable).

    Needs ``inputs["gaussian_pyramid"]``.

    Example::

        >>> import torch
        >>> gp = gaussian_pyramid(torch.rand(1, 16, 16), {}, n_octaves=1)
        >>> dog_pyramid(None, {"gaussian_pyramid": gp}).octaves[0].shape
        torch.Size([1, 4, 16, 16])
    """
    gp: GaussianPyramid = inputs["gaussian_pyramid"]
    return DoGPyramid(octaves=[o[:, 1:] - o[:, :-1] for o in gp.octaves], sigmas=gp.sigmas)


def scale_space_extrema(frames: torch.Tensor, inputs: dict, *,
                        contrast_threshold: float = 0.02, border: int = 1) -> Keypoints:
    """Stage ``scale_space_extrema``: local extrema of the DoG in (scale, y, x) (GPU-capable).

    A DoG sample is a keypoint when it is the maximum (or the minimum) of its 3x3x3
    neighbourhood in (scale, y, x) of the same frame, its |value| exceeds
    ``contrast_threshold``, it is not on the first or last DoG level (no neighbour on one side)
    and it lies at least ``border`` pixels inside the image. (Lowe's sub-pixel refinement and
    edge-response test are left out: the stage's cost is the 3-D comparison.) Needs
    ``inputs["dog_pyramid"]``.

    Example::

        >>> import torch
        >>> d = torch.zeros(1, 3, 5, 5); d[0, 1, 2, 2] = 1.0
        >>> kp = scale_space_extrema(None, {"dog_pyramid": DoGPyramid([d], (1.0, 2.0, 4.0))})
        >>> kp.count, kp.y.tolist(), kp.scale.tolist()
        (1, [2], [1])
    """
    dog: DoGPyramid = inputs["dog_pyramid"]
    rows = []
    for o, d in enumerate(dog.octaves):
        check_cancelled()
        t, s, h, w = d.shape
        if s < 3 or h <= 2 * border or w <= 2 * border:
            continue
        local_max = max_filter3(d, (1, 2, 3))
        local_min = -max_filter3(-d, (1, 2, 3))
        hit = (((d == local_max) & (d > contrast_threshold))
               | ((d == local_min) & (d < -contrast_threshold)))
        inner = torch.zeros_like(hit)
        inner[:, 1:s - 1, border:h - border, border:w - border] = True
        idx = (hit & inner).nonzero()
        rows.append((o, idx, d[idx[:, 0], idx[:, 1], idx[:, 2], idx[:, 3]]))
    device = dog.octaves[0].device if dog.octaves else torch.device("cpu")
    dtype = dog.octaves[0].dtype if dog.octaves else torch.float32
    if not rows:
        empty_i = torch.zeros(0, dtype=torch.int64, device=device)
        empty_f = torch.zeros(0, dtype=dtype, device=device)
        return Keypoints(empty_i, empty_i, empty_i, empty_i, empty_i, empty_f, empty_f,
                         empty_f, empty_f)
    sigmas = torch.tensor(dog.sigmas, dtype=dtype, device=device)
    frame = torch.cat([idx[:, 0] for _, idx, _ in rows])
    octave = torch.cat([torch.full_like(idx[:, 0], o) for o, idx, _ in rows])
    scale = torch.cat([idx[:, 1] for _, idx, _ in rows])
    y = torch.cat([idx[:, 2] for _, idx, _ in rows])
    x = torch.cat([idx[:, 3] for _, idx, _ in rows])
    factor = (2.0 ** octave).to(dtype)
    return Keypoints(frame=frame, octave=octave, scale=scale, y=y, x=x,
                     y_image=y.to(dtype) * factor, x_image=x.to(dtype) * factor,
                     sigma=sigmas[scale] * factor,
                     response=torch.cat([r for _, _, r in rows]))
