"""Face recognition: the ``face_detection``, ``face_landmarks``, ``face_encoding``,
``face_distance`` and ``face_compare`` stages (all GPU-capable, on the frames' device/dtype).

The stage split follows the ``face_recognition`` library the paper's application is modelled
on (face locations, landmarks, encodings, face distance, compare faces). Detection and
landmarks are real image processing on our synthetic faces; the encoder is a small CNN with
fixed seeded weights, a compute-shaped stand-in for the trained 128-D face embedding network
(dlib's ResNet): its distances are well defined and deterministic but carry no learned meaning.

Example::

    >>> from workload.apps import run_task
    >>> out = run_task("face_recognition", 36_864, seed=1)
    >>> out["face_detection"].count, tuple(out["face_encoding"].encodings.shape)
    (34, (34, 128))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from workload.cancel import check_cancelled
from .filters import gaussian_blur, local_maxima_2d, resize_bilinear, sample_bilinear
from .frames import IDENTITIES, LANDMARK_LAYOUT, face_template, render_faces

__all__ = ["FaceDetections", "FaceLandmarks", "FaceEncodings", "FaceDistances", "FaceMatches",
           "normalized_cross_correlation", "box_iou", "nms", "face_detection",
           "LANDMARK_REGIONS", "PATCH_SIZE", "CHIP_SIZE", "similarity_from_points",
           "canonical_landmarks", "face_landmarks", "ENCODING_DIM", "ENCODER_SEED",
           "encoder_weights", "encode_chips", "face_encoding", "DEFAULT_TOLERANCE",
           "GALLERY_IDENTITIES", "default_gallery", "face_distance", "face_compare"]


@dataclass
class FaceDetections:
    """Output of ``face_detection``, one row per face, ordered by frame then score (desc).

    frame: (N,) int64. boxes: (N, 4) (y0, x0, y1, x1) box edges in pixel-centre coordinates
    (pixel i covers [i - 0.5, i + 0.5]). scores: (N,) normalised cross-correlation in [-1, 1].
    """

    frame: torch.Tensor
    boxes: torch.Tensor
    scores: torch.Tensor

    @property
    def count(self) -> int:
        return int(self.frame.numel())


@dataclass
class FaceLandmarks:
    """Output of ``face_landmarks``: per detected face (rows as in FaceDetections).

    points: (N, 3, 2) (y, x) in frame pixels: left eye, right eye, mouth. crops: (N, P, P) the
    box resampled. chips: (N, C, C) the face aligned by a similarity transform that puts the
    landmarks where LANDMARK_LAYOUT says (the encoder's input).
    """

    frame: torch.Tensor
    boxes: torch.Tensor
    points: torch.Tensor
    crops: torch.Tensor
    chips: torch.Tensor


@dataclass
class FaceEncodings:
    """Output of ``face_encoding``: encodings (N, 128), unit length, rows as in the
    detections; frame: (N,) int64."""

    frame: torch.Tensor
    encodings: torch.Tensor


@dataclass
class FaceDistances:
    """Output of ``face_distance``: distances (N, G) Euclidean, from each face to each gallery
    entry; gallery_ids: the IDENTITIES index of each gallery entry; frame: (N,) int64."""

    frame: torch.Tensor
    distances: torch.Tensor
    gallery_ids: tuple[int, ...]


@dataclass
class FaceMatches:
    """Output of ``face_compare``: matches (N, G) bool (distance <= tolerance); best (N,)
    nearest gallery column or -1 when none matches; identity (N,) its IDENTITIES index or -1;
    best_distance (N,); frame (N,) int64."""

    frame: torch.Tensor
    matches: torch.Tensor
    best: torch.Tensor
    identity: torch.Tensor
    best_distance: torch.Tensor


# ---------------------------------------------------------------------------------------------
# Detection


def normalized_cross_correlation(images: torch.Tensor, template: torch.Tensor) -> torch.Tensor:
    """Zero-normalised cross-correlation of a (th, tw) template at every valid position of
    (N, H, W) images: (N, H - th + 1, W - tw + 1), each value the Pearson correlation of the
    window with the template (0 where the window is flat).

    Example::

        >>> import torch
        >>> img = torch.rand(1, 9, 9)
        >>> ncc = normalized_cross_correlation(img, img[0, 2:6, 3:8])
        >>> round(float(ncc[0, 2, 3]), 5)
        1.0
    """
    th, tw = template.shape
    n_px = th * tw
    # Centre each image first: NCC ignores offsets, and it keeps float32 sums well conditioned.
    x = (images - images.mean(dim=(1, 2), keepdim=True))[:, None]
    tz = template - template.mean()
    t_norm = torch.sqrt((tz * tz).sum())
    ones = torch.ones(1, 1, th, tw, dtype=images.dtype, device=images.device)
    num = F.conv2d(x, tz[None, None])
    s1 = F.conv2d(x, ones)
    s2 = F.conv2d(x * x, ones)
    den = torch.sqrt((s2 - s1 * s1 / n_px).clamp(min=0)) * t_norm
    flat = den <= 1e-6 * t_norm
    return torch.where(flat, torch.zeros_like(num), num / torch.where(flat, 1, den))[:, 0]


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Intersection over union of (n, 4) and (m, 4) boxes (y0, x0, y1, x1): (n, m).

    Example::

        >>> import torch
        >>> a, b = torch.tensor([[0., 0., 2., 2.]]), torch.tensor([[1., 1., 3., 3.]])
        >>> round(box_iou(a, b).item(), 4)
        0.1429
    """
    area_a = (a[:, 2] - a[:, 0]).clamp(min=0) * (a[:, 3] - a[:, 1]).clamp(min=0)
    area_b = (b[:, 2] - b[:, 0]).clamp(min=0) * (b[:, 3] - b[:, 1]).clamp(min=0)
    top_left = torch.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (bottom_right - top_left).clamp(min=0).prod(dim=2)
    union = area_a[:, None] + area_b[None, :] - inter
    return inter / union.clamp(min=torch.finfo(union.dtype).tiny)


def nms(boxes: torch.Tensor, scores: torch.Tensor, groups: torch.Tensor,
        iou_threshold: float) -> torch.Tensor:
    """Greedy non-maximum suppression within groups (e.g. frames).

    Boxes are visited by decreasing score (ties: lower index first); one is kept unless a kept
    box of its group overlaps it with IoU > ``iou_threshold``. Returns kept indices, by
    decreasing score.

    Example::

        >>> import torch
        >>> b = torch.tensor([[0., 0., 2., 2.], [0., 0., 2., 2.1], [5., 5., 6., 6.]])
        >>> nms(b, torch.tensor([0.9, 0.8, 0.7]), torch.zeros(3, dtype=torch.long), 0.5).tolist()
        [0, 2]
    """
    if boxes.shape[0] == 0:
        return torch.zeros(0, dtype=torch.int64, device=boxes.device)
    order = torch.argsort(scores, descending=True, stable=True)
    b, g = boxes[order], groups[order]
    # The pairwise test runs on the device; the short sequential sweep runs on the host.
    suppresses = ((box_iou(b, b) > iou_threshold) & (g[:, None] == g[None, :])).cpu().numpy()
    removed = np.zeros(len(order), dtype=bool)
    keep = []
    for i in range(len(order)):
        if not removed[i]:
            keep.append(i)
            removed |= suppresses[i]
    return order[torch.tensor(keep, dtype=torch.int64, device=boxes.device)]


def face_detection(frames: torch.Tensor, inputs: dict | None = None, *, scale_step: float = 1.2,
                   threshold: float = 0.6, iou_threshold: float = 0.3,
                   max_levels: int = 12) -> FaceDetections:
    """Stage ``face_detection``: template matching over an image pyramid plus NMS
    (GPU-capable).

    Each frame is resized by ``scale_step ** -level`` (bilinear) until it is smaller than the
    (12, 10) face template (:func:`~workload.apps.frames.face_template`); at each level the
    normalised cross-correlation with the template is computed, its 3x3 local maxima above
    ``threshold`` become candidate boxes (mapped back to frame pixels), and :func:`nms` per
    frame keeps the best of overlapping candidates.

    Example::

        >>> from workload.apps.frames import make_frames
        >>> det = face_detection(make_frames(36_864, seed=1, scene="faces"))
        >>> det.count, tuple(det.boxes.shape)
        (34, (34, 4))
    """
    t, h, w = frames.shape
    template = face_template(dtype=frames.dtype, device=frames.device)
    th, tw = template.shape
    found_frame, found_boxes, found_scores = [], [], []
    for level in range(max_levels):
        check_cancelled()  # a cancelled task stops between pyramid levels
        scale = scale_step ** -level
        lh, lw = round(h * scale), round(w * scale)
        if lh < th or lw < tw:
            break
        ncc = normalized_cross_correlation(resize_bilinear(frames, lh, lw), template)
        peaks = local_maxima_2d(ncc, threshold).nonzero()
        sy, sx = h / lh, w / lw
        py, px = peaks[:, 1].to(frames.dtype), peaks[:, 2].to(frames.dtype)
        # Window edges (py - 0.5 .. py + th - 0.5 at this level) in frame pixels.
        found_boxes.append(torch.stack((py * sy - 0.5, px * sx - 0.5,
                                        (py + th) * sy - 0.5, (px + tw) * sx - 0.5), dim=1))
        found_scores.append(ncc[peaks[:, 0], peaks[:, 1], peaks[:, 2]])
        found_frame.append(peaks[:, 0])
    if not found_frame:  # frames smaller than the template: nothing can be found
        return FaceDetections(frame=torch.zeros(0, dtype=torch.int64, device=frames.device),
                              boxes=frames.new_zeros(0, 4), scores=frames.new_zeros(0))
    frame_idx = torch.cat(found_frame)
    boxes, scores = torch.cat(found_boxes), torch.cat(found_scores)
    keep = nms(boxes, scores, frame_idx, iou_threshold)
    # Order by frame, then score: stable sort of the score-ordered survivors by frame.
    keep = keep[torch.argsort(frame_idx[keep], stable=True)]
    return FaceDetections(frame=frame_idx[keep], boxes=boxes[keep], scores=scores[keep])


# ---------------------------------------------------------------------------------------------
# Landmarks and alignment

#: Search windows (row0, row1, col0, col1), fractions of the face box: left eye, right eye,
#: mouth. Each landmark is the darkest smoothed pixel of its window.
LANDMARK_REGIONS = ((0.2, 0.55, 0.1, 0.5), (0.2, 0.55, 0.5, 0.9), (0.6, 0.9, 0.25, 0.75))
PATCH_SIZE = 24
CHIP_SIZE = 32


def _box_grid(boxes: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Frame coordinates of a size x size grid of pixel centres spanning each box."""
    frac = (torch.arange(size, dtype=boxes.dtype, device=boxes.device) + 0.5) / size
    ys = boxes[:, 0, None] + frac[None] * (boxes[:, 2] - boxes[:, 0])[:, None]
    xs = boxes[:, 1, None] + frac[None] * (boxes[:, 3] - boxes[:, 1])[:, None]
    n = boxes.shape[0]
    return ys[:, :, None].expand(n, size, size), xs[:, None, :].expand(n, size, size)


def similarity_from_points(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """Least-squares similarity transforms (scale, rotation, shift) taking (N, k, 2) points
    ``src`` (y, x) onto ``dst``: (N, 2, 3) matrices M with dst ~ M @ (y, x, 1).

    Example::

        >>> import torch
        >>> src = torch.tensor([[[0., 0.], [0., 1.], [1., 0.]]], dtype=torch.float64)
        >>> (similarity_from_points(src, 2 * src + 1)[0].round(decimals=6) + 0.0).tolist()
        [[2.0, 0.0, 1.0], [0.0, 2.0, 1.0]]
    """
    # Closed form of Umeyama's fit with points as complex numbers x + iy: dst = a * src + b.
    sx, sy = src[..., 1], src[..., 0]
    dx, dy = dst[..., 1], dst[..., 0]
    sxc, syc = sx - sx.mean(1, keepdim=True), sy - sy.mean(1, keepdim=True)
    dxc, dyc = dx - dx.mean(1, keepdim=True), dy - dy.mean(1, keepdim=True)
    norm = (sxc ** 2 + syc ** 2).sum(1)
    a_re = (sxc * dxc + syc * dyc).sum(1) / norm
    a_im = (sxc * dyc - syc * dxc).sum(1) / norm
    bx = dx.mean(1) - (a_re * sx.mean(1) - a_im * sy.mean(1))
    by = dy.mean(1) - (a_im * sx.mean(1) + a_re * sy.mean(1))
    # Rows: y' = a_re*y + a_im*x + by ; x' = -a_im*y + a_re*x + bx.
    return torch.stack((torch.stack((a_re, a_im, by), 1), torch.stack((-a_im, a_re, bx), 1)), 1)


def canonical_landmarks(chip_size: int, dtype=torch.float32, device=None) -> torch.Tensor:
    """(3, 2) pixel positions (y, x) of LANDMARK_LAYOUT in a chip_size x chip_size chip."""
    return torch.tensor(LANDMARK_LAYOUT, dtype=dtype, device=device) * chip_size - 0.5


def face_landmarks(frames: torch.Tensor, inputs: dict, *, sigma: float = 1.0,
                   patch_size: int = PATCH_SIZE, chip_size: int | None = None) -> FaceLandmarks:
    """Stage ``face_landmarks``: eyes and mouth of each detected face, and an aligned chip
    (GPU-capable).

    Each box is resampled to a ``patch_size`` square (bilinear), smoothed (Gaussian,
    ``sigma``), and each landmark is the darkest pixel of its LANDMARK_REGIONS window (the eyes
    and the mouth are the dark features of a face). A least-squares similarity transform from
    the canonical layout to the found points then resamples the face into a ``chip_size``
    chip (default CHIP_SIZE), the encoder's input. Needs ``inputs["face_detection"]``.

    Example::

        >>> from workload.apps.frames import make_frames
        >>> f = make_frames(36_864, seed=1, scene="faces")
        >>> lm = face_landmarks(f, {"face_detection": face_detection(f)})
        >>> tuple(lm.points.shape), tuple(lm.chips.shape)
        ((34, 3, 2), (34, 32, 32))
    """
    det: FaceDetections = inputs["face_detection"]
    chip_size = CHIP_SIZE if chip_size is None else chip_size
    n, p = det.count, patch_size
    images = frames[det.frame]
    ys, xs = _box_grid(det.boxes, p)
    crops = sample_bilinear(images, ys, xs)
    smooth = gaussian_blur(crops, sigma).reshape(n, p * p)
    points = []
    rows = torch.arange(n, device=frames.device)
    for r0, r1, c0, c1 in LANDMARK_REGIONS:
        window = torch.zeros(p, p, dtype=torch.bool, device=frames.device)
        window[int(r0 * p):int(r1 * p), int(c0 * p):int(c1 * p)] = True
        flat = torch.where(window.reshape(-1), smooth, torch.inf).argmin(dim=1)
        i, j = flat // p, flat % p
        points.append(torch.stack((ys[rows, i, j], xs[rows, i, j]), 1))
    points = torch.stack(points, dim=1) if n else frames.new_zeros(0, 3, 2)
    canon = canonical_landmarks(chip_size, frames.dtype, frames.device)
    m = similarity_from_points(canon.expand(n, 3, 2), points)
    cy, cx = torch.meshgrid(torch.arange(chip_size, dtype=frames.dtype, device=frames.device),
                            torch.arange(chip_size, dtype=frames.dtype, device=frames.device),
                            indexing="ij")
    chip_y = m[:, 0, 0, None, None] * cy + m[:, 0, 1, None, None] * cx + m[:, 0, 2, None, None]
    chip_x = m[:, 1, 0, None, None] * cy + m[:, 1, 1, None, None] * cx + m[:, 1, 2, None, None]
    chips = sample_bilinear(images, chip_y, chip_x)
    return FaceLandmarks(frame=det.frame, boxes=det.boxes, points=points,
                         crops=crops, chips=chips)


# ---------------------------------------------------------------------------------------------
# Encoding, distance, comparison

ENCODING_DIM = 128
ENCODER_SEED = 2021  # fixed: every process, device and run builds the same encoder
_ENCODER_CHANNELS = (16, 32, 64)
_weight_cache: dict[tuple[str, torch.dtype], dict[str, torch.Tensor]] = {}


def encoder_weights(dtype: torch.dtype = torch.float32,
                    device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """The face encoder's fixed weights (He-normal, drawn from ``ENCODER_SEED`` in float64 on
    the CPU, then cast): conv1..conv3 (3x3, padding 1) with biases b1..b3, then fc, fc_bias
    (from the flattened 64 x 4 x 4 feature map of a 32 x 32 chip).

    Example::

        >>> w = encoder_weights()
        >>> tuple(w["conv1"].shape), tuple(w["fc"].shape)
        ((16, 1, 3, 3), (128, 1024))
    """
    key = (str(torch.device(device)), dtype)
    if key not in _weight_cache:
        g = torch.Generator().manual_seed(ENCODER_SEED)
        weights, c_in = {}, 1
        for i, c_out in enumerate(_ENCODER_CHANNELS, start=1):
            std = (2.0 / (c_in * 9)) ** 0.5
            weights[f"conv{i}"] = torch.randn(c_out, c_in, 3, 3, generator=g,
                                              dtype=torch.float64) * std
            weights[f"b{i}"] = 0.01 * torch.randn(c_out, generator=g, dtype=torch.float64)
            c_in = c_out
        flat = c_in * (CHIP_SIZE // 8) ** 2  # three 2x poolings
        weights["fc"] = torch.randn(ENCODING_DIM, flat, generator=g,
                                    dtype=torch.float64) * (1.0 / flat) ** 0.5
        weights["fc_bias"] = 0.01 * torch.randn(ENCODING_DIM, generator=g, dtype=torch.float64)
        _weight_cache[key] = {k: v.to(dtype=dtype, device=device) for k, v in weights.items()}
    return _weight_cache[key]


def encode_chips(chips: torch.Tensor) -> torch.Tensor:
    """Unit-length 128-D encodings of (N, C, C) face chips with the fixed-weight CNN.

    Each chip is standardised (zero mean, unit std), then conv-ReLU-maxpool(2) three times,
    flattened (a global average would wash out where the features are, and with it most of
    what tells two synthetic faces apart), a linear layer to 128, and L2 normalisation.

    Example::

        >>> import torch
        >>> e = encode_chips(torch.rand(2, 32, 32))
        >>> tuple(e.shape), e.norm(dim=1).allclose(torch.ones(2))
        ((2, 128), True)
    """
    w = encoder_weights(chips.dtype, chips.device)
    n = chips.shape[0]
    if tuple(chips.shape[1:]) != (CHIP_SIZE, CHIP_SIZE):
        raise ValueError(f"the encoder takes {CHIP_SIZE}x{CHIP_SIZE} chips, got "
                         f"{tuple(chips.shape[1:])}")
    if n == 0:
        return chips.new_zeros(0, ENCODING_DIM)
    x = chips - chips.mean(dim=(1, 2), keepdim=True)
    x = (x / (x.std(dim=(1, 2), unbiased=False, keepdim=True) + 1e-6))[:, None]
    x = F.max_pool2d(F.relu(F.conv2d(x, w["conv1"], w["b1"], padding=1)), 2)
    x = F.max_pool2d(F.relu(F.conv2d(x, w["conv2"], w["b2"], padding=1)), 2)
    x = F.max_pool2d(F.relu(F.conv2d(x, w["conv3"], w["b3"], padding=1)), 2).flatten(1)
    x = x @ w["fc"].T + w["fc_bias"]
    return x / x.norm(dim=1, keepdim=True).clamp(min=1e-12)


def face_encoding(frames: torch.Tensor, inputs: dict) -> FaceEncodings:
    """Stage ``face_encoding``: a 128-D encoding per aligned face chip (GPU-capable).

    A compute-shaped stand-in for a trained face-embedding network: a small CNN with fixed
    seeded weights (:func:`encoder_weights`, :func:`encode_chips`), deterministic, with no
    learned notion of identity. Needs ``inputs["face_landmarks"]``.

    Example::

        >>> import torch
        >>> lm = FaceLandmarks(*(torch.zeros(0),) * 4, chips=torch.rand(3, 32, 32))
        >>> tuple(face_encoding(None, {"face_landmarks": lm}).encodings.shape)
        (3, 128)
    """
    lm: FaceLandmarks = inputs["face_landmarks"]
    return FaceEncodings(frame=lm.frame, encodings=encode_chips(lm.chips))


#: Match threshold for the stand-in encoder (face_recognition's 0.6 belongs to its trained
#: model): on synthetic faces, same-person distances average about 0.28, others about 0.40.
DEFAULT_TOLERANCE = 0.32

#: The identities the gallery knows (indices into IDENTITIES); the others are strangers.
GALLERY_IDENTITIES = (0, 1, 2, 3)
_gallery_cache: dict[tuple[str, torch.dtype], torch.Tensor] = {}


def default_gallery(dtype: torch.dtype = torch.float32,
                    device: str | torch.device = "cpu") -> torch.Tensor:
    """Encodings (G, 128) of the GALLERY_IDENTITIES: each person's face rendered upright into a
    chip with its features where LANDMARK_LAYOUT puts them, then encoded.

    Example::

        >>> tuple(default_gallery().shape)
        (4, 128)
    """
    key = (str(torch.device(device)), dtype)
    if key not in _gallery_cache:
        c = CHIP_SIZE
        yy, xx = torch.meshgrid(torch.arange(c, dtype=torch.float64),
                                torch.arange(c, dtype=torch.float64), indexing="ij")
        chips = []
        for i in GALLERY_IDENTITIES:
            alpha, value = render_faces(yy, xx, torch.tensor((c - 1) / 2),
                                        torch.tensor((c - 1) / 2), c / 2, c / 2, IDENTITIES[i])
            chips.append(0.3 * (1 - alpha) + value * alpha)
        chips = torch.stack(chips).to(dtype=dtype, device=device)
        _gallery_cache[key] = encode_chips(chips)
    return _gallery_cache[key]


def face_distance(frames: torch.Tensor, inputs: dict, *,
                  gallery: torch.Tensor | None = None,
                  gallery_ids: tuple[int, ...] | None = None) -> FaceDistances:
    """Stage ``face_distance``: Euclidean distance of every encoding to every gallery entry
    (GPU-capable). Default gallery: :func:`default_gallery`. Needs ``inputs["face_encoding"]``.

    Example::

        >>> import torch
        >>> enc = FaceEncodings(torch.zeros(1, dtype=torch.long), torch.eye(2)[:1])
        >>> face_distance(None, {"face_encoding": enc}, gallery=torch.eye(2),
        ...               gallery_ids=(7, 8)).distances.tolist()
        [[0.0, 1.4142135381698608]]
    """
    enc: FaceEncodings = inputs["face_encoding"]
    x = enc.encodings
    if gallery is None:
        gallery = default_gallery(x.dtype, x.device)
        gallery_ids = GALLERY_IDENTITIES
    elif gallery_ids is None:
        gallery_ids = tuple(range(gallery.shape[0]))
    # Explicit differences rather than the |a|^2 + |b|^2 - 2ab expansion: exact near zero.
    d = torch.sqrt(((x[:, None, :] - gallery.to(x)[None, :, :]) ** 2).sum(-1))
    return FaceDistances(frame=enc.frame, distances=d, gallery_ids=tuple(gallery_ids))


def face_compare(frames: torch.Tensor, inputs: dict, *,
                 tolerance: float = DEFAULT_TOLERANCE) -> FaceMatches:
    """Stage ``face_compare``: which gallery entries each face matches (GPU-capable).

    ``matches = distances <= tolerance``; ``best`` is the nearest gallery column when it
    matches, else -1. Needs ``inputs["face_distance"]``.

    Example::

        >>> import torch
        >>> fd = FaceDistances(torch.zeros(2, dtype=torch.long),
        ...                    torch.tensor([[0.2, 0.9], [0.8, 0.5]]), (5, 6))
        >>> m = face_compare(None, {"face_distance": fd})
        >>> m.best.tolist(), m.identity.tolist()
        ([0, -1], [5, -1])
    """
    fd: FaceDistances = inputs["face_distance"]
    d = fd.distances
    matches = d <= tolerance
    if d.shape[1] == 0:
        best_d = d.new_full((d.shape[0],), torch.inf)
        nearest = torch.full((d.shape[0],), -1, dtype=torch.int64, device=d.device)
    else:
        best_d, nearest = d.min(dim=1)
    best = torch.where(best_d <= tolerance, nearest, -1)
    ids = torch.tensor(fd.gallery_ids + (-1,), dtype=torch.int64, device=d.device)
    return FaceMatches(frame=fd.frame, matches=matches, best=best, identity=ids[best],
                       best_distance=best_d)
