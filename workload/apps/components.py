"""Connected-component labelling and per-component statistics in torch (any device).

Used by tracking (blobs within each frame) and tube extraction (blobs connected across space and
time). The labeller is label propagation with pointer jumping, all tensor ops, so it runs on a
GPU as well as on a CPU: every foreground voxel starts with its own flat index as label, then
repeatedly takes the smallest label in its neighbourhood (a 3x3(x3) max over negated labels) and the
label of the voxel its label names (pointer jumping, which shortens long chains to about
log(diameter) rounds). It stops when nothing changes; each component then holds the flat index
of its first voxel in raster order, and components are numbered 1..n in that order, which is
the numbering of ``scipy.ndimage.label`` with a full 3x3(x3) structure.

Example::

    >>> import torch
    >>> m = torch.tensor([[1, 0, 1], [1, 0, 0], [0, 0, 1]], dtype=torch.bool)
    >>> labels, n = label_components(m)
    >>> n, labels.tolist()
    (3, [[1, 0, 2], [1, 0, 0], [0, 0, 3]])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .filters import max_filter3

__all__ = ["label_components", "ComponentStats", "component_stats"]


def label_components(mask: torch.Tensor, per_frame: bool = False) -> tuple[torch.Tensor, int]:
    """Label the connected components of a boolean (H, W) or (T, H, W) mask.

    Connectivity is full (8 neighbours in 2-D, 26 in 3-D). With ``per_frame=True`` a (T, H, W)
    mask is labelled frame by frame (no connection across time), with labels unique over the
    whole volume. Returns (int64 labels, 0 = background, and the number of components).

    Example::

        >>> import torch
        >>> m = torch.zeros(2, 3, 3, dtype=torch.bool); m[0, 0, 0] = m[1, 0, 0] = True
        >>> label_components(m)[1], label_components(m, per_frame=True)[1]
        (1, 2)
    """
    mask = mask.bool()
    if mask.dim() == 2:
        vol, kernel = mask[None], (1, 3, 3)
    elif mask.dim() == 3:
        vol, kernel = mask, ((1, 3, 3) if per_frame else (3, 3, 3))
    else:
        raise ValueError(f"expected a 2-D or 3-D mask, got shape {tuple(mask.shape)}")
    if not bool(vol.any()):
        return torch.zeros(mask.shape, dtype=torch.int64, device=mask.device), 0
    n = vol.numel()
    # float32 holds every integer index exactly up to 2**24; beyond, use float64.
    ftype = torch.float32 if n < 2 ** 24 else torch.float64
    flat_mask = vol.reshape(-1)
    neg_inf = torch.tensor(float("-inf"), dtype=ftype, device=mask.device)
    # Negated labels, so the max-pool picks the smallest label; background is -inf.
    neg = torch.where(flat_mask, -torch.arange(n, dtype=ftype, device=mask.device), neg_inf)
    dims = (1, 2) if kernel[0] == 1 else (0, 1, 2)
    fg_index = flat_mask.nonzero().squeeze(1)
    while True:
        pooled = max_filter3(neg.view(vol.shape), dims).reshape(-1)
        new = torch.where(flat_mask, pooled, neg_inf)
        # Pointer jumping: a voxel's label names a voxel of the same component; borrow its label.
        pointed = (-new[fg_index]).long()
        new[fg_index] = torch.maximum(new[fg_index], new[pointed])
        if torch.equal(new, neg):
            break
        neg = new
    roots = (-neg[fg_index]).long()
    uniq = torch.unique(roots)  # sorted: first voxel in raster order, as scipy numbers them
    labels = torch.zeros(n, dtype=torch.int64, device=mask.device)
    labels[fg_index] = torch.searchsorted(uniq, roots) + 1
    return labels.view(mask.shape), int(uniq.numel())


@dataclass
class ComponentStats:
    """Per-component statistics of an int label volume (T, H, W), components 1..n at row k-1.

    size: voxel count. centroid: (t, y, x) mean coordinate. lo / hi: inclusive-exclusive
    bounding box corner (t, y, x), i.e. ``labels[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]``.
    """

    size: torch.Tensor
    centroid: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor


def component_stats(labels: torch.Tensor, n: int) -> ComponentStats:
    """Sizes, centroids and bounding boxes of components 1..n of a (T, H, W) label volume.

    Example::

        >>> import torch
        >>> lab = torch.tensor([[[0, 1, 1], [0, 0, 2]]])
        >>> s = component_stats(lab, 2)
        >>> s.size.tolist(), s.centroid.tolist(), s.hi.tolist()
        ([2, 1], [[0.0, 0.0, 1.5], [0.0, 1.0, 2.0]], [[1, 1, 3], [1, 2, 3]])
    """
    device = labels.device
    fg = labels.reshape(-1) > 0
    ids = labels.reshape(-1)[fg] - 1
    coords = torch.stack(torch.unravel_index(fg.nonzero().squeeze(1), labels.shape), dim=1)
    size = torch.zeros(n, dtype=torch.int64, device=device).index_add_(
        0, ids, torch.ones_like(ids))
    sums = torch.zeros(n, 3, dtype=torch.float64, device=device).index_add_(
        0, ids, coords.double())
    big = torch.iinfo(torch.int64).max
    lo = torch.full((n, 3), big, dtype=torch.int64, device=device)
    hi = torch.full((n, 3), -1, dtype=torch.int64, device=device)
    idx = ids[:, None].expand(-1, 3)
    lo.scatter_reduce_(0, idx, coords, reduce="amin")
    hi.scatter_reduce_(0, idx, coords, reduce="amax")
    centroid = sums / size.clamp(min=1)[:, None].double()
    return ComponentStats(size=size, centroid=centroid, lo=lo, hi=hi + 1)
