"""Video synopsis: the ``tube_extraction`` (GPU-capable) and ``tube_stitching`` (CPU only)
stages.

A tube is one moving object's space-time volume: a connected component (26-connected) of the
moving-object mask over (T, H, W). Stitching shifts tubes in time so the synopsis is shorter
than the clip while tubes do not overlap (Pritch, Rav-Acha & Peleg's video synopsis, with a
greedy placement instead of their energy minimisation).

Example::

    >>> from workload.apps import run_task
    >>> out = run_task("video_synopsis", 36_864, seed=1)
    >>> out["tube_extraction"].count, out["tube_stitching"].length < 17
    (3, True)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workload.cancel import check_cancelled

from .background import BackgroundModel, FrameDifference, fused_foreground
from .components import label_components, component_stats
from .devices import to_device

__all__ = ["Tubes", "Synopsis", "tube_extraction", "tube_stitching", "overlap_by_shift"]


@dataclass
class Tubes:
    """Output of ``tube_extraction``; tube k (0-based) has label k + 1.

    labels: (T, H, W) int64, 0 = background. size: (n,) voxels. centroid: (n, 3) float64
    (t, y, x). lo / hi: (n, 3) int64 inclusive-exclusive bounding box (t, y, x).
    background: (H, W) the background image (from the background model), for rendering.
    """

    labels: torch.Tensor
    size: torch.Tensor
    centroid: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor
    background: torch.Tensor

    @property
    def count(self) -> int:
        return int(self.size.numel())


@dataclass
class Synopsis:
    """Output of ``tube_stitching``.

    start: (n,) int64 each tube's first frame in the synopsis (tube order as in Tubes).
    order: the order tubes were placed in. length: synopsis frames. overlap: voxels where
    placed tubes overlap (0 unless ``max_overlap`` allows some). frames: (length, H, W) the
    synopsis video (background plus every tube's pixels at their new times).
    """

    start: torch.Tensor
    order: list[int]
    length: int
    overlap: int
    frames: torch.Tensor


def tube_extraction(frames: torch.Tensor, inputs: dict, *, min_voxels: int = 20) -> Tubes:
    """Stage ``tube_extraction``: space-time connected components of the moving-object mask
    (GPU-capable; runs on the device of the background model).

    The mask is the background-model foreground OR frame-difference motion; components under
    ``min_voxels`` voxels are noise and dropped; the rest are renumbered 1..n keeping their
    order (first voxel in raster order). Needs ``inputs["gmm_background"]`` and
    ``inputs["frame_difference"]``.

    Example::

        >>> from workload.apps.frames import make_frames
        >>> from workload.apps.background import gmm_background, frame_difference
        >>> f = make_frames(4096, seed=0)
        >>> tubes = tube_extraction(f, {"gmm_background": gmm_background(f),
        ...                             "frame_difference": frame_difference(f)})
        >>> int(tubes.labels.max()) == tubes.count
        True
    """
    model: BackgroundModel = inputs["gmm_background"]
    diff: FrameDifference = inputs["frame_difference"]
    labels, n = label_components(fused_foreground(model, diff))
    stats = component_stats(labels, n)
    keep = stats.size >= min_voxels
    # Renumber kept components 1..k in order; dropped ones map to 0.
    remap = torch.zeros(n + 1, dtype=torch.int64, device=labels.device)
    remap[1:][keep] = torch.arange(1, int(keep.sum()) + 1, device=labels.device)
    return Tubes(labels=remap[labels], size=stats.size[keep], centroid=stats.centroid[keep],
                 lo=stats.lo[keep], hi=stats.hi[keep], background=model.background)


def overlap_by_shift(canvas: torch.Tensor, tube: torch.Tensor) -> torch.Tensor:
    """Overlap (voxel count) of a tube placed at every start frame on an occupancy canvas.

    canvas: (L, h, w) occupancy counts; tube: (d, h, w) 0/1, d <= L. Entry s is
    ``(canvas[s:s + d] * tube).sum()``, for s in 0..L - d (a 1-D correlation in time).

    Example::

        >>> import torch
        >>> canvas = torch.tensor([1., 0., 0., 1.]).view(4, 1, 1)
        >>> overlap_by_shift(canvas, torch.ones(2, 1, 1)).tolist()
        [1.0, 0.0, 1.0]
    """
    d = tube.shape[0]
    shifts = canvas.shape[0] - d + 1
    cost = torch.zeros(shifts, dtype=canvas.dtype, device=canvas.device)
    for k in range(d):  # d small slabs against all shifts at once
        cost += (canvas[k:k + shifts] * tube[k]).sum(dim=(1, 2))
    return cost


def tube_stitching(frames: torch.Tensor, inputs: dict, *, max_overlap: int = 0,
                   keep_order: bool = True) -> Synopsis:
    """Stage ``tube_stitching``: greedy time shifts of the tubes into a short synopsis, and its
    rendering (CPU only).

    Tubes are placed one at a time, by their original first frame (ties: tube order). Each
    goes to the earliest synopsis frame where it overlaps already placed tubes in at most
    ``max_overlap`` voxels (:func:`overlap_by_shift`) and, with ``keep_order``, not before the
    previously placed tube's start (events keep their chronological order). The canvas is as
    long as all tubes end to end, so a collision-free start always exists. The synopsis frames
    are the background with each tube's original pixels pasted at its new time (later tubes
    on top). Needs ``inputs["tube_extraction"]``; moves it and the frames to the CPU.

    Example::

        >>> from workload.apps import run_task
        >>> syn = run_task("video_synopsis", 36_864, seed=1)["tube_stitching"]
        >>> syn.overlap, syn.frames.shape[0] == syn.length
        (0, True)
    """
    tubes: Tubes = to_device(inputs["tube_extraction"], "cpu")
    frames = frames.cpu()
    n = tubes.count
    _, h, w = tubes.labels.shape
    if n == 0:
        return Synopsis(start=torch.zeros(0, dtype=torch.int64), order=[], length=0, overlap=0,
                        frames=frames.new_zeros(0, h, w))
    lo, hi = tubes.lo.tolist(), tubes.hi.tolist()
    durations = [b[0] - a[0] for a, b in zip(lo, hi)]
    canvas = torch.zeros(sum(durations), h, w)
    order = sorted(range(n), key=lambda k: (lo[k][0], k))
    start = [0] * n
    earliest = 0
    total_overlap = 0
    for k in order:
        check_cancelled()  # a cancelled task stops between tubes
        (t0, y0, x0), (t1, y1, x1) = lo[k], hi[k]
        # Work inside the tube's bounding box: nothing outside it can collide.
        occ = (tubes.labels[t0:t1, y0:y1, x0:x1] == k + 1).to(canvas.dtype)
        cost = overlap_by_shift(canvas[:, y0:y1, x0:x1], occ)
        ok = (cost <= max_overlap).nonzero().squeeze(1)
        ok = ok[ok >= earliest] if keep_order else ok
        s = int(ok[0])
        start[k] = s
        total_overlap += int(cost[s])
        canvas[s:s + t1 - t0, y0:y1, x0:x1] += occ
        if keep_order:
            earliest = s
    length = max(start[k] + durations[k] for k in range(n))
    video = tubes.background.to(frames.dtype).expand(length, h, w).clone()
    for k in order:
        check_cancelled()  # a cancelled task stops between tubes
        (t0, y0, x0), (t1, y1, x1) = lo[k], hi[k]
        s = start[k]
        occ = tubes.labels[t0:t1, y0:y1, x0:x1] == k + 1
        region = video[s:s + t1 - t0, y0:y1, x0:x1]
        region[occ] = frames[t0:t1, y0:y1, x0:x1][occ]
    return Synopsis(start=torch.tensor(start, dtype=torch.int64), order=order, length=length,
                    overlap=total_overlap, frames=video)
