"""Deterministic synthetic video clips: the input data of every task.

A task is ``(app_id, input_size)``; the paper's TSize becomes ``input_size``, read as the clip's
size in bytes of 8-bit grayscale video, i.e. its total pixel count T * H * W (the synthetic task
generator draws it lognormally around 36k, see ``streamplace.kafka_io``). :func:`frame_shape`
splits it into frames: T grows with the cube root (longer and larger clips together),
frames are 4:3, sides are multiples of 8 (three pyramid octaves halve cleanly) and at least 32
(so a face stays big enough to detect):

============  =================  =============
input_size    (T, H, W)          pixels
============  =================  =============
4,096         (8, 32, 40)        10,240
36,864        (17, 40, 56)       38,080  (the default: the generator's median)
147,456       (26, 64, 88)       146,432
1,048,576     (51, 128, 168)     1,096,704
============  =================  =============

The scene is textured noise (a static smoothed-noise background plus per-frame sensor noise)
with a few objects moving at constant velocity: bright Gaussian blobs and rectangles
(``scene="objects"``, for intrusion detection and video synopsis; each is visible for part of the
clip, so tubes start and end at different times), or face-like ovals with two dark eyes and a
dark mouth (``scene="faces"``, for face recognition). Everything is drawn from a CPU
``torch.Generator`` seeded with ``seed`` and only then moved to ``device``, so the same
``(input_size, seed, scene)`` gives bit-identical frames on CPU, and the same values on any
device.

Example::

    >>> frames = make_frames(36_864, seed=7)
    >>> tuple(frames.shape), frames.dtype
    ((17, 40, 56), torch.float32)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from workload.cancel import check_cancelled
from .filters import gaussian_blur

__all__ = ["DEFAULT_INPUT_SIZE", "SCENES", "FaceIdentity", "IDENTITIES", "TEMPLATE_SIZE",
           "LANDMARK_LAYOUT", "Scene", "frame_shape", "make_scene", "make_frames",
           "render_faces", "face_template"]

#: The default task size (pixels): about the median of the synthetic task generator.
DEFAULT_INPUT_SIZE = 36_864
SCENES = ("objects", "faces")

MIN_FRAMES, MAX_FRAMES = 4, 64
MIN_SIDE = 32
SENSOR_NOISE = 0.01  # std of per-frame noise on [0, 1] intensities
MIN_TRAVEL = 0.5  # objects cross at least half the frame width: a pixel is covered briefly


@dataclass(frozen=True)
class FaceIdentity:
    """Shape parameters of one synthetic person (fractions of the face's half-width rx)."""

    eye_dx: float     # horizontal offset of each eye from the face centre
    eye_size: float   # eye blob std
    mouth_width: float  # mouth blob horizontal std
    skin: float       # face brightness


#: Synthetic people. The face-recognition gallery knows the first four; the others are strangers.
IDENTITIES: tuple[FaceIdentity, ...] = (
    FaceIdentity(0.40, 0.14, 0.28, 0.85),
    FaceIdentity(0.33, 0.11, 0.40, 0.80),
    FaceIdentity(0.47, 0.17, 0.20, 0.90),
    FaceIdentity(0.38, 0.19, 0.34, 0.75),
    FaceIdentity(0.44, 0.10, 0.24, 0.95),
    FaceIdentity(0.30, 0.15, 0.30, 0.70),
)
_MEAN_IDENTITY = FaceIdentity(0.40, 0.14, 0.28, 0.85)

#: Face template (height, width) used by face detection: a face spans the whole window.
TEMPLATE_SIZE = (12, 10)

#: Where the eyes and the mouth sit inside a face box, as (row, col) fractions of the box, for
#: the mean identity: left eye, right eye, mouth. Face landmarks and alignment use this layout.
LANDMARK_LAYOUT = ((0.375, 0.5 - 0.5 * _MEAN_IDENTITY.eye_dx),
                   (0.375, 0.5 + 0.5 * _MEAN_IDENTITY.eye_dx),
                   (0.725, 0.5))

_EYE_DY = -0.25    # eye row offset from the face centre, in units of ry
_MOUTH_DY = 0.45   # mouth row offset from the face centre, in units of ry


@dataclass
class Scene:
    """A clip and its ground truth.

    frames: (T, H, W) float in [0, 1].
    boxes: (T, n, 4) float, each object's box (y0, x0, y1, x1) per frame, in pixel-centre
        coordinates (pixel i covers [i - 0.5, i + 0.5]); rows of invisible frames are still set.
    visible: (T, n) bool, whether object k is in frame t.
    kinds: per object, "blob", "rect" or "face".
    identities: per object, an index into IDENTITIES for faces, else -1.
    coverage: (T, H, W) bool, pixels where some object's coverage (alpha) exceeds 0.5.
    """

    frames: torch.Tensor
    boxes: torch.Tensor
    visible: torch.Tensor
    kinds: tuple[str, ...]
    identities: tuple[int, ...]
    coverage: torch.Tensor


def frame_shape(input_size: int) -> tuple[int, int, int]:
    """(T, H, W) of the clip of a task of ``input_size`` pixels (see the module docstring).

    Example::

        >>> frame_shape(36_864)
        (17, 40, 56)
    """
    if int(input_size) < 1:
        raise ValueError(f"input_size must be >= 1, got {input_size}")
    t = int(min(MAX_FRAMES, max(MIN_FRAMES, round(input_size ** (1 / 3) / 2))))
    per_frame = input_size / t
    h = max(MIN_SIDE, 8 * round(math.sqrt(per_frame * 3 / 4) / 8))
    w = max(MIN_SIDE, 8 * round(h * 4 / 3 / 8))
    return t, h, w


def _uniform(g: torch.Generator, low: float, high: float, n: int = 1) -> torch.Tensor:
    return low + (high - low) * torch.rand(n, generator=g, dtype=torch.float64)


def _background(g: torch.Generator, h: int, w: int) -> torch.Tensor:
    noise = torch.rand(h, w, generator=g, dtype=torch.float64)
    tex = gaussian_blur(noise, 1.5)
    tex = (tex - tex.min()) / (tex.max() - tex.min() + 1e-12)
    ramp = torch.linspace(0.0, 1.0, w, dtype=torch.float64).expand(h, w)
    return 0.15 + 0.25 * tex + 0.05 * ramp


def _track(g: torch.Generator, t: int, cy_range: tuple[float, float],
           cx_range: tuple[float, float], min_dx: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Constant-velocity centre (cy, cx) per frame, start and end inside the given ranges."""
    y0, y1 = _uniform(g, *cy_range, 2)
    x0 = _uniform(g, *cx_range)[0]
    x1 = _uniform(g, *cx_range)[0]
    if abs(float(x1 - x0)) < min_dx:  # make sure it really moves: go to the farther end
        lo, hi = cx_range
        x1 = torch.tensor(lo if float(x0) - lo > hi - float(x0) else hi, dtype=torch.float64)
    s = torch.linspace(0.0, 1.0, t, dtype=torch.float64)
    return y0 + (y1 - y0) * s, x0 + (x1 - x0) * s


def render_faces(yy: torch.Tensor, xx: torch.Tensor, cy: torch.Tensor, cx: torch.Tensor,
                 ry: float, rx: float, identity: FaceIdentity) -> tuple[torch.Tensor, torch.Tensor]:
    """Alpha (coverage) and intensity of a face centred at (cy, cx) with radii (ry, rx).

    ``yy``/``xx`` are pixel-centre coordinate grids; ``cy``/``cx`` broadcast against them (e.g.
    (T, 1, 1) for one centre per frame). Composite as ``bg * (1 - alpha) + value * alpha``.

    Example::

        >>> import torch
        >>> yy, xx = torch.meshgrid(torch.arange(12.), torch.arange(10.), indexing="ij")
        >>> a, v = render_faces(yy, xx, torch.tensor(5.5), torch.tensor(4.5), 6, 5, IDENTITIES[0])
        >>> bool(a[6, 5] == 1.0), bool(v[4, 3] < v[6, 5])  # an eye is darker than the cheek
        (True, True)
    """
    dy, dx = (yy - cy) / ry, (xx - cx) / rx
    radius = torch.sqrt(dy * dy + dx * dx)
    # About one pixel of soft edge, so sub-pixel motion changes the frame smoothly.
    alpha = ((1.0 - radius) * min(ry, rx) + 0.5).clamp(0.0, 1.0)

    def blob(oy: float, ox: float, sy: float, sx: float) -> torch.Tensor:
        return torch.exp(-0.5 * (((dy - oy) / sy) ** 2 + ((dx - ox) / sx) ** 2))

    eye_sy = identity.eye_size * rx / ry
    eyes = (blob(_EYE_DY, -identity.eye_dx, eye_sy, identity.eye_size)
            + blob(_EYE_DY, identity.eye_dx, eye_sy, identity.eye_size))
    mouth = blob(_MOUTH_DY, 0.0, 0.08, identity.mouth_width)
    value = (identity.skin - 0.75 * eyes - 0.55 * mouth).clamp(min=0.0)
    return alpha, value


def face_template(dtype=torch.float32, device=None, background: float = 0.3) -> torch.Tensor:
    """The (12, 10) mean-identity face on a flat background, the detector's NCC template.

    Example::

        >>> tuple(face_template().shape)
        (12, 10)
    """
    th, tw = TEMPLATE_SIZE
    yy, xx = torch.meshgrid(torch.arange(th, dtype=torch.float64),
                            torch.arange(tw, dtype=torch.float64), indexing="ij")
    alpha, value = render_faces(yy, xx, torch.tensor((th - 1) / 2), torch.tensor((tw - 1) / 2),
                                th / 2, tw / 2, _MEAN_IDENTITY)
    return (background * (1 - alpha) + value * alpha).to(dtype=dtype, device=device)


def make_scene(input_size: int, seed: int, device: str | torch.device = "cpu",
               scene: str = "objects", dtype: torch.dtype = torch.float32) -> Scene:
    """A deterministic clip of ``input_size`` pixels and its ground truth (see module docstring).

    Example::

        >>> s = make_scene(36_864, seed=1, scene="faces")
        >>> s.kinds
        ('face', 'face')
    """
    if scene not in SCENES:
        raise ValueError(f"scene must be one of {SCENES}, got {scene!r}")
    t, h, w = frame_shape(input_size)
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    # Everything in float64 on CPU, one fixed draw order: bit-identical for a seed.
    bg = _background(g, h, w)
    yy, xx = torch.meshgrid(torch.arange(h, dtype=torch.float64),
                            torch.arange(w, dtype=torch.float64), indexing="ij")
    frames = bg.expand(t, h, w).clone()
    coverage = torch.zeros(t, h, w, dtype=torch.bool)
    boxes, visible, kinds, identities = [], [], [], []

    if scene == "objects":
        n = int(min(6, max(2, round(h / 14))))
        lane = h / n
        for k in range(n):
            check_cancelled()  # a cancelled task stops between drawn objects
            kind = "blob" if k % 2 == 0 else "rect"
            half = float(_uniform(g, 0.25, 0.35)[0]) * lane
            # A blob's visible radius is about 2 sigma; size both kinds alike.
            half_x = half if kind == "blob" else float(_uniform(g, 0.2, 0.35)[0]) * lane
            lo, hi = k * lane + half + 0.5, (k + 1) * lane - half - 1.5
            cy, cx = _track(g, t, (lo, max(lo, hi)), (half_x + 1, w - half_x - 2),
                            MIN_TRAVEL * w)
            t_in = int(torch.randint(0, max(1, t // 3), (1,), generator=g))
            t_out = int(torch.randint(min(t - 1, t_in + t // 2), t, (1,), generator=g))
            vis = (torch.arange(t) >= t_in) & (torch.arange(t) <= t_out)
            level = float(_uniform(g, 0.75, 0.95)[0])
            cyv, cxv = cy[:, None, None], cx[:, None, None]
            if kind == "blob":
                sigma = half / 2
                alpha = torch.exp(-0.5 * ((yy - cyv) ** 2 + (xx - cxv) ** 2) / sigma ** 2)
            else:
                alpha = ((half + 0.5 - (yy - cyv).abs()).clamp(0, 1)
                         * (half_x + 0.5 - (xx - cxv).abs()).clamp(0, 1))
            alpha = alpha * vis[:, None, None]
            frames = frames * (1 - alpha) + level * alpha
            coverage |= alpha > 0.5
            boxes.append(torch.stack((cy - half, cx - half_x, cy + half, cx + half_x), dim=1))
            visible.append(vis)
            kinds.append(kind)
            identities.append(-1)
    else:
        n = int(min(5, max(2, round(h / 20))))
        lane = h / n
        for k in range(n):
            check_cancelled()  # a cancelled task stops between drawn objects
            # Never smaller than the detector's template: it only scans downscaled frames.
            ry = max(TEMPLATE_SIZE[0] / 2, float(_uniform(g, 0.3, 0.4)[0]) * lane)
            rx = ry / 1.2
            identity = int(torch.randint(0, len(IDENTITIES), (1,), generator=g))
            lo, hi = k * lane + ry + 0.5, (k + 1) * lane - ry - 1.5
            cy, cx = _track(g, t, (lo, max(lo, hi)), (rx + 1, w - rx - 2), w / 5)
            alpha, value = render_faces(yy, xx, cy[:, None, None], cx[:, None, None], ry, rx,
                                        IDENTITIES[identity])
            frames = frames * (1 - alpha) + value * alpha
            coverage |= alpha > 0.5
            boxes.append(torch.stack((cy - ry, cx - rx, cy + ry, cx + rx), dim=1))
            visible.append(torch.ones(t, dtype=torch.bool))
            kinds.append("face")
            identities.append(identity)

    frames = frames + SENSOR_NOISE * torch.randn(t, h, w, generator=g, dtype=torch.float64)
    frames = frames.clamp(0.0, 1.0)
    return Scene(frames=frames.to(device=device, dtype=dtype),
                 boxes=torch.stack(boxes, dim=1).to(device=device, dtype=dtype),
                 visible=torch.stack(visible, dim=1).to(device),
                 kinds=tuple(kinds), identities=tuple(identities),
                 coverage=coverage.to(device))


def make_frames(input_size: int, seed: int, device: str | torch.device = "cpu",
                scene: str = "objects", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The (T, H, W) clip of :func:`make_scene`, without the ground truth.

    Example::

        >>> a, b = make_frames(4096, seed=3), make_frames(4096, seed=3)
        >>> bool(torch.equal(a, b)), float(a.min()) >= 0.0, float(a.max()) <= 1.0
        (True, True, True)
    """
    return make_scene(input_size, seed, device=device, scene=scene, dtype=dtype).frames
