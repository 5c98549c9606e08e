"""Multi-object tracking for intrusion detection: the ``tracking`` stage (CPU only).

Detections are the connected blobs of the moving-object mask in each frame (background-model
foreground OR frame-difference motion), annotated with the scale-space keypoints that fall in
them. Tracks are built frame by frame: each open track predicts its position with constant
velocity, predictions and detections are paired by an optimal assignment on Euclidean distance
(the Hungarian method, :func:`linear_assignment`), pairs farther apart than a gate are refused,
unpaired detections open new tracks, and a track unseen for more than ``max_missed`` frames is
closed. A track of at least ``min_length`` detections that enters the restricted zone is an
intrusion.

Example::

    >>> from workload.apps import run_task
    >>> out = run_task("intrusion_detection", 36_864, seed=1)
    >>> len(out["tracking"].tracks)
    3
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from workload.cancel import check_cancelled

from .background import BackgroundModel, FrameDifference, fused_foreground
from .components import component_stats, label_components
from .devices import to_device
from .pyramid import Keypoints

__all__ = ["linear_assignment", "Detections", "detect_blobs", "Track", "TrackingResult",
           "tracking"]


def linear_assignment(cost) -> tuple[np.ndarray, np.ndarray]:
    """Minimum-cost assignment of rows to columns of a finite (n, m) cost matrix.

    The Hungarian method with potentials (Kuhn–Munkres, shortest augmenting paths, O(n^2 m)),
    vectorised over columns with numpy. Like ``scipy.optimize.linear_sum_assignment``: every row
    (or every column, if there are fewer) is assigned once; returns (rows, cols) sorted by row.

    Example::

        >>> rows, cols = linear_assignment([[4.0, 1.0, 3.0], [2.0, 0.0, 5.0], [3.0, 2.0, 2.0]])
        >>> rows.tolist(), cols.tolist()
        ([0, 1, 2], [1, 0, 2])
    """
    a = np.asarray(cost, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"cost must be 2-D, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError("cost must be finite")
    if a.shape[0] > a.shape[1]:
        cols, rows = linear_assignment(a.T)
        order = np.argsort(rows)
        return rows[order], cols[order]
    n, m = a.shape
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    # Index 0 is a virtual column; p[j] = row (1-based) matched to column j, 0 = none.
    u = np.zeros(n + 1)
    v = np.zeros(m + 1)
    p = np.zeros(m + 1, dtype=np.int64)
    way = np.zeros(m + 1, dtype=np.int64)
    for i in range(1, n + 1):
        p[0] = i
        j0 = 0
        minv = np.full(m + 1, np.inf)
        used = np.zeros(m + 1, dtype=bool)
        while True:  # grow a shortest augmenting path from row i
            used[j0] = True
            i0 = p[j0]
            free = ~used
            free[0] = False
            reduced = a[i0 - 1] - u[i0] - v[1:]
            better = free[1:] & (reduced < minv[1:])
            minv[1:][better] = reduced[better]
            way[1:][better] = j0
            masked = np.where(free, minv, np.inf)
            j1 = int(np.argmin(masked))
            delta = masked[j1]
            u[p[used]] += delta
            v[used] -= delta
            minv[~used] -= delta
            j0 = j1
            if p[j0] == 0:
                break
        while j0:  # flip the path
            j1 = way[j0]
            p[j0] = p[j1]
            j0 = j1
    cols = np.nonzero(p[1:])[0]
    rows = p[1:][cols] - 1
    order = np.argsort(rows)
    return rows[order].astype(np.int64), cols[order].astype(np.int64)


@dataclass
class Detections:
    """Blobs of a (T, H, W) mask, one row each, ordered by frame then raster order.

    frame: (N,) int64. centroid: (N, 2) float64 (y, x). box: (N, 4) int64 (y0, x0, y1, x1),
    inclusive-exclusive. area: (N,) int64 pixels. keypoints: (N,) int64 keypoints inside the box.
    """

    frame: torch.Tensor
    centroid: torch.Tensor
    box: torch.Tensor
    area: torch.Tensor
    keypoints: torch.Tensor


def detect_blobs(mask: torch.Tensor, min_area: int = 6,
                 keypoints: Keypoints | None = None) -> Detections:
    """Connected blobs (8-connected, per frame) of a (T, H, W) boolean mask, at least
    ``min_area`` pixels each, with the number of ``keypoints`` inside each blob's box.

    Example::

        >>> import torch
        >>> m = torch.zeros(1, 6, 6, dtype=torch.bool); m[0, 1:4, 1:3] = True
        >>> d = detect_blobs(m, min_area=1)
        >>> d.centroid.tolist(), d.box.tolist(), d.area.tolist()
        ([[2.0, 1.5]], [[1, 1, 4, 3]], [6])
    """
    labels, n = label_components(mask, per_frame=True)
    stats = component_stats(labels, n)
    keep = stats.size >= min_area
    frame = stats.lo[keep, 0]
    box = torch.cat((stats.lo[keep, 1:], stats.hi[keep, 1:]), dim=1)
    counts = torch.zeros(int(keep.sum()), dtype=torch.int64, device=mask.device)
    if keypoints is not None and keypoints.count and counts.numel():
        ky = keypoints.y_image.to(mask.device, torch.float64)[:, None]
        kx = keypoints.x_image.to(mask.device, torch.float64)[:, None]
        inside = ((keypoints.frame.to(mask.device)[:, None] == frame[None])
                  & (ky >= box[None, :, 0]) & (ky < box[None, :, 2])
                  & (kx >= box[None, :, 1]) & (kx < box[None, :, 3]))
        counts = inside.sum(dim=0)
    return Detections(frame=frame, centroid=stats.centroid[keep, 1:], box=box,
                      area=stats.size[keep], keypoints=counts)


@dataclass
class Track:
    """One tracked object: parallel lists, one entry per frame it was detected in."""

    track_id: int
    frames: list[int] = field(default_factory=list)
    centroids: list[tuple[float, float]] = field(default_factory=list)
    boxes: list[tuple[int, int, int, int]] = field(default_factory=list)
    areas: list[int] = field(default_factory=list)
    keypoints: int = 0

    def predict(self, t: int) -> tuple[float, float]:
        """Constant-velocity position at frame ``t`` from the last two detections."""
        (y, x), last = self.centroids[-1], self.frames[-1]
        if len(self.frames) < 2:
            return y, x
        (py, px), prev = self.centroids[-2], self.frames[-2]
        dt = (t - last) / (last - prev)
        return y + (y - py) * dt, x + (x - px) * dt


@dataclass
class TrackingResult:
    """Output of ``tracking``: tracks (at least ``min_length`` detections, by first frame),
    intrusions (ids of tracks that entered the zone), zone (y0, x0, y1, x1) in pixels, and the
    number of detections used."""

    tracks: list[Track]
    intrusions: list[int]
    zone: tuple[float, float, float, float]
    detections: int


def tracking(frames: torch.Tensor, inputs: dict, *, min_area: int = 6,
             max_distance: float | None = None, max_missed: int = 2, min_length: int = 3,
             zone: tuple[float, float, float, float] = (0.0, 2 / 3, 1.0, 1.0)
             ) -> TrackingResult:
    """Stage ``tracking``: associate detections across frames, flag intrusions (CPU only).

    Needs ``inputs["gmm_background"]``, ``inputs["frame_difference"]`` and
    ``inputs["scale_space_extrema"]``; moves them to the CPU. ``max_distance`` defaults to 15%
    of the longer frame side; ``zone`` is (y0, x0, y1, x1) as fractions of the frame (default:
    the right third).

    Example::

        >>> from workload.apps import run_task
        >>> out = run_task("intrusion_detection", 36_864, seed=1)
        >>> out["tracking"].intrusions  # all three cross into the right third
        [0, 1, 2]
    """
    inputs = to_device({k: inputs[k] for k in ("gmm_background", "frame_difference",
                                                "scale_space_extrema")}, "cpu")
    model: BackgroundModel = inputs["gmm_background"]
    diff: FrameDifference = inputs["frame_difference"]
    t_len, h, w = model.foreground.shape
    gate = 0.15 * max(h, w) if max_distance is None else float(max_distance)
    dets = detect_blobs(fused_foreground(model, diff), min_area, inputs["scale_space_extrema"])
    frame_of = dets.frame.numpy()
    pos = dets.centroid.numpy()
    boxes, areas, kps = dets.box.tolist(), dets.area.tolist(), dets.keypoints.tolist()

    finished: list[Track] = []
    open_tracks: list[Track] = []
    next_id = 0
    for t in range(t_len):
        check_cancelled()  # a cancelled task stops between frames
        idx = np.nonzero(frame_of == t)[0]
        still_open = []
        for tr in open_tracks:  # close tracks that have been unseen for too long
            (still_open if t - tr.frames[-1] <= max_missed + 1 else finished).append(tr)
        open_tracks = still_open
        taken = np.zeros(len(idx), dtype=bool)
        if open_tracks and len(idx):
            pred = np.array([tr.predict(t) for tr in open_tracks])
            dist = np.sqrt(((pred[:, None, :] - pos[idx][None, :, :]) ** 2).sum(-1))
            # Out-of-gate pairs get a prohibitive (finite) cost, then are refused below.
            cost = np.where(dist <= gate, dist, gate * 1e3 + dist)
            for r, c in zip(*linear_assignment(cost)):
                if dist[r, c] <= gate:
                    _extend(open_tracks[r], t, int(idx[c]), pos, boxes, areas, kps)
                    taken[c] = True
        for c in np.nonzero(~taken)[0]:
            tr = Track(next_id)
            next_id += 1
            _extend(tr, t, int(idx[c]), pos, boxes, areas, kps)
            open_tracks.append(tr)
    finished.extend(open_tracks)
    tracks = sorted((tr for tr in finished if len(tr.frames) >= min_length),
                    key=lambda tr: (tr.frames[0], tr.track_id))
    for new_id, tr in enumerate(tracks):  # ids 0..n-1 in order of appearance
        tr.track_id = new_id
    zy0, zx0, zy1, zx1 = zone[0] * h, zone[1] * w, zone[2] * h, zone[3] * w
    intrusions = [tr.track_id for tr in tracks
                  if any(zy0 <= y < zy1 and zx0 <= x < zx1 for y, x in tr.centroids)]
    return TrackingResult(tracks=tracks, intrusions=intrusions, zone=(zy0, zx0, zy1, zx1),
                          detections=len(frame_of))


def _extend(tr: Track, t: int, k: int, pos, boxes, areas, kps) -> None:
    tr.frames.append(t)
    tr.centroids.append((float(pos[k, 0]), float(pos[k, 1])))
    tr.boxes.append(tuple(boxes[k]))
    tr.areas.append(int(areas[k]))
    tr.keypoints += int(kps[k])
