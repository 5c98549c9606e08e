"""Image filtering and resampling primitives shared by the operators (torch, any device).

Conventions, chosen so each primitive has an exact scipy.ndimage counterpart (the unit tests
compare against it):

- :func:`gaussian_blur` is ``scipy.ndimage.gaussian_filter(x, sigma=(0, s, s), mode="nearest",
  truncate=4.0)``: same kernel radius rule and replicated borders.
- :func:`sample_bilinear` is ``scipy.ndimage.map_coordinates(img, [ys, xs], order=1,
  mode="nearest")``: pixel centres at integer coordinates, borders clamped.
- :func:`resize_bilinear` samples at ``(i + 0.5) * in / out - 0.5`` (half-pixel centres, as
  OpenCV and ``torch.nn.functional.interpolate(align_corners=False)`` do).

Example::

    >>> import torch
    >>> gaussian_blur(torch.ones(1, 8, 8), 1.0).allclose(torch.ones(1, 8, 8))
    True
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from workload.cancel import check_cancelled

__all__ = ["gaussian_kernel1d", "gaussian_blur", "sample_bilinear", "resize_bilinear",
           "resize_coordinates", "local_maxima_2d", "max_filter3", "octave_count"]


def gaussian_kernel1d(sigma: float, truncate: float = 4.0, *, dtype=torch.float32,
                      device=None) -> torch.Tensor:
    """Normalised 1-D Gaussian of radius ``int(truncate * sigma + 0.5)`` (scipy's rule).

    Example::

        >>> gaussian_kernel1d(1.0).shape
        torch.Size([9])
    """
    if sigma <= 0:
        raise ValueError(f"sigma must be positive, got {sigma}")
    radius = int(truncate * float(sigma) + 0.5)
    # Built in float64 then cast, so float32 and float64 callers get the same rounded weights.
    x = torch.arange(-radius, radius + 1, dtype=torch.float64)
    kernel = torch.exp(-0.5 * x * x / (float(sigma) ** 2))
    return (kernel / kernel.sum()).to(dtype=dtype, device=device)


def gaussian_blur(images: torch.Tensor, sigma: float, truncate: float = 4.0) -> torch.Tensor:
    """Blur each (H, W) image of an (N, H, W) or (H, W) tensor; borders replicate the edge.

    Separable: one horizontal then one vertical 1-D pass, each a conv2d over the batch.

    Example::

        >>> import torch
        >>> gaussian_blur(torch.zeros(2, 5, 7), 1.5).shape
        torch.Size([2, 5, 7])
    """
    squeeze = images.dim() == 2
    x = images[None] if squeeze else images
    if x.dim() != 3:
        raise ValueError(f"expected (N, H, W) or (H, W), got shape {tuple(images.shape)}")
    n, h, w = x.shape
    if x.numel() == 0:
        return images.clone()
    kernel = gaussian_kernel1d(sigma, truncate, dtype=x.dtype, device=x.device)
    r = kernel.numel() // 2
    y = x.reshape(n, 1, h, w)
    # 'replicate' pads any width (unlike 'reflect'), so tiny images with a wide kernel work.
    y = F.conv2d(F.pad(y, (r, r, 0, 0), mode="replicate"), kernel.view(1, 1, 1, -1))
    check_cancelled()  # between the passes: a cancelled task's stage stops here
    y = F.conv2d(F.pad(y, (0, 0, r, r), mode="replicate"), kernel.view(1, 1, -1, 1))
    y = y.reshape(n, h, w)
    return y[0] if squeeze else y


def sample_bilinear(images: torch.Tensor, ys: torch.Tensor, xs: torch.Tensor) -> torch.Tensor:
    """Bilinear samples of ``images`` (N, H, W) at pixel coordinates ``ys``, ``xs`` (N, h, w).

    Sample ``k`` reads image ``k``; coordinates outside the image clamp to the border.

    Example::

        >>> import torch
        >>> img = torch.arange(4.0).view(1, 2, 2)
        >>> sample_bilinear(img, torch.tensor([[[0.5]]]), torch.tensor([[[0.5]]])).item()
        1.5
    """
    n, h, w = images.shape
    if n == 0:
        return images.new_zeros(ys.shape)
    # grid_sample with align_corners=False puts pixel i's centre at normalised (2i + 1) / size - 1.
    grid = torch.stack(((2 * xs + 1) / w - 1, (2 * ys + 1) / h - 1), dim=-1).to(images.dtype)
    out = F.grid_sample(images[:, None], grid, mode="bilinear", padding_mode="border",
                        align_corners=False)
    return out[:, 0]


def resize_bilinear(images: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Resize (N, H, W) images to (N, height, width), sampling at half-pixel centres.

    Example::

        >>> import torch
        >>> resize_bilinear(torch.ones(3, 8, 8), 4, 6).shape
        torch.Size([3, 4, 6])
    """
    n, h, w = images.shape
    if (height, width) == (h, w):
        return images.clone()
    out = F.interpolate(images[:, None], size=(height, width), mode="bilinear",
                        align_corners=False, antialias=False)
    return out[:, 0]


def resize_coordinates(size_in: int, size_out: int, *, dtype=torch.float64) -> torch.Tensor:
    """Source coordinate of each output pixel used by :func:`resize_bilinear` (for tests)."""
    scale = size_in / size_out
    return ((torch.arange(size_out, dtype=dtype) + 0.5) * scale - 0.5).clamp(min=0)


def local_maxima_2d(maps: torch.Tensor, threshold: float) -> torch.Tensor:
    """Boolean mask of pixels of (N, H, W) ``maps`` that equal their 3x3 maximum and exceed
    ``threshold`` (plateaus keep every tied pixel; NMS sorts them out later).

    Example::

        >>> import torch
        >>> m = torch.zeros(1, 3, 3); m[0, 1, 1] = 1.0
        >>> local_maxima_2d(m, 0.5).nonzero().tolist()
        [[0, 1, 1]]
    """
    if maps.numel() == 0:
        return torch.zeros_like(maps, dtype=torch.bool)
    return (maps == max_filter3(maps, (1, 2))) & (maps > threshold)


def max_filter3(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """Maximum over a window of 3 along each axis in ``dims`` (the edges see only real
    neighbours), i.e. ``scipy.ndimage.maximum_filter`` with size 3 on those axes and
    ``mode="constant", cval=-inf``.

    Separable shifted maxima: on a CPU about 25x faster than ``max_pool3d``, and exact.

    Example::

        >>> import torch
        >>> max_filter3(torch.tensor([[0., 5., 0., 0., 1.]]), (1,)).tolist()
        [[5.0, 5.0, 5.0, 1.0, 1.0]]
    """
    for d in dims:
        check_cancelled()
        n = x.shape[d]
        if n < 2:
            continue
        out = x.clone()
        out.narrow(d, 1, n - 1).copy_(torch.maximum(x.narrow(d, 1, n - 1), x.narrow(d, 0, n - 1)))
        out.narrow(d, 0, n - 1).copy_(torch.maximum(out.narrow(d, 0, n - 1),
                                                    x.narrow(d, 1, n - 1)))
        x = out
    return x


def octave_count(height: int, width: int, requested: int, min_side: int = 8) -> int:
    """How many halvings (octaves) fit before the shorter side drops under ``min_side``."""
    fits = int(math.floor(math.log2(max(1, min(height, width)) / min_side))) + 1
    return max(1, min(requested, fits))
