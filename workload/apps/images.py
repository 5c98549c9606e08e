"""Real frames for the video-analytics apps: sample images, clips cut from them, and a bounded
clip container carried in a TaskEvent's ``payload``.

**Where the pixels come from.** matplotlib (a runtime dependency) ships sample data in
``mpl-data/sample_data/``; three of its files are real images, read with Pillow (installed with
matplotlib) and numpy:

- ``grace_hopper``: ``grace_hopper.jpg``, the US Navy portrait of Commodore Grace Hopper (a
  photograph, 600 x 512, used in grey);
- ``jacksboro_dem``: ``jacksboro_fault_dem.npz``, a measured digital elevation model of the land
  around the Jacksboro fault (344 x 403) mapped linearly to grey: real data that looks like an
  aerial view, not a photograph;
- ``mri_s1045``: ``s1045.ima.gz``, a real 256 x 256 sagittal MRI scan of a head (16-bit,
  scaled to 8 bits).

No generated image is used anywhere: the folder's drawn images (the matplotlib logo, a clip-art
gift box) and its non-image data are left alone.

**A task's clip** (:func:`clip_for_task`): a fixed camera over a background cut from a real image
(random crop, scale and mirror), with a few objects cut from real images (Grace Hopper's face,
her cap, the MRI head, the flag's stars) moving across it at constant velocity and blended in
with a soft elliptical mask, plus a little sensor noise. ``scene="faces"`` moves copies of
Grace Hopper's face instead (for face recognition). The clip has the (T, H, W) of
:func:`~workload.apps.frames.frame_shape`, so its pixel count follows the task's
``input_size`` exactly as the synthetic clips do; everything is drawn from a numpy generator
seeded by the task (an int, or a task id hashed with SHA-256), so a task always gets the same
clip.

**The container** (:func:`encode_frames` / :func:`decode_clip`): a short clip as a
length-prefixed sequence of standard still images (motion-JPEG style)::

    b"SPCL" | version (1 byte) | frame count (2 bytes, big-endian)
            | one 4-byte big-endian length per frame | the frames' JPEG or PNG files, in order

Why not a multi-frame image format Pillow reads (animated GIF/PNG/WebP, multi-page TIFF): GIF
and APNG are lossless only (2-3x larger than JPEG on these clips), animated WebP and JPEG-in-TIFF
depend on optional codecs in the Pillow build, and all of them hand the whole parse to one big
decoder. Here the structure (magic, count, lengths adding up to the size) and then every
frame's own header (format, size) are checked before a single pixel is decoded, and each frame
is a plain JPEG/PNG that any language can read (what IP cameras stream as MJPEG).

**Size.** Grey JPEG at quality 80 (:data:`DEFAULT_QUALITY`), per TaskEvent record (payload
plus the other fields; mean and range over the three apps' scenes and four seeds each):

============  ===============  ===================  ==================
input_size    (T, H, W)        record bytes (mean)  range
============  ===============  ===================  ==================
4,096         (8, 32, 40)      5.3 KB               4.8-5.8 KB
36,864        (17, 40, 56)     15 KB                14-17 KB
60,000        (20, 48, 64)     23 KB                21-26 KB
200,000       (29, 72, 96)     57 KB                53-66 KB
1,048,576     (51, 128, 168)   240 KB               223-277 KB
============  ===============  ===================  ==================

About 0.3-0.5 bytes per pixel (each frame's JPEG headers weigh most on small frames); lossless
PNG is 2-3x larger. Making and encoding a clip takes about 5-8 ms of CPU at 60,000 pixels.

**Bounds.** :class:`PayloadLimits` caps the payload's bytes, the frame count, each frame's
pixels (checked on the image header, before decoding: a decompression bomb is refused without
allocating) and the clip's total pixels; anything wrong raises :class:`PayloadError` (a
``ValueError``) saying what, which the executor turns into a FAILED result or a dead letter.

Example::

    >>> clip = clip_for_task(7, 36_864)
    >>> clip.shape, clip.dtype.name
    ((17, 40, 56), 'uint8')
    >>> payload = encode_frames(clip, quality=80)
    >>> frames = decode_clip(payload)
    >>> tuple(frames.shape), frames.dtype, 0.0 <= float(frames.min()) <= float(frames.max()) <= 1.0
    ((17, 40, 56), torch.float32, True)
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from workload.cancel import check_cancelled
from .frames import MAX_FRAMES, frame_shape

__all__ = ["PayloadError", "PayloadLimits", "DEFAULT_LIMITS", "ClipInfo", "SAMPLE_IMAGES",
           "FACE_BOX", "DEFAULT_QUALITY", "MAGIC", "sample_images", "clip_for_task",
           "encode_frames", "inspect_clip", "decode_clip"]

MAGIC = b"SPCL"
VERSION = 1
_HEAD = struct.Struct(">4sBH")  # magic, version, frame count
_LENGTH = struct.Struct(">I")

#: JPEG quality producers use: about 0.8 KB per 40 x 56 grey frame (the table above), and
#: without the block artefacts of low qualities, which the stages would take for texture.
DEFAULT_QUALITY = 80
FORMATS = ("JPEG", "PNG")
#: Modes a frame may arrive in; all are converted to 8-bit grey ("L"), what the stages see.
ALLOWED_MODES = ("1", "L", "LA", "P", "RGB", "RGBA", "CMYK", "YCbCr")


class PayloadError(ValueError):
    """A clip payload that is malformed or over a :class:`PayloadLimits` bound."""


@dataclass(frozen=True)
class PayloadLimits:
    """Bounds on a clip payload, checked before decoding anything big.

    max_bytes: the whole payload; the default is Kafka's default message size (a bigger one
        could not have come through a default topic anyway).
    max_frames: frames per clip; as many as the longest synthetic clip (frames.MAX_FRAMES).
    max_frame_pixels: one frame's width x height, read from its header before decoding
        (a 1080p frame fits; a decompression bomb does not).
    max_total_pixels: the decoded clip, frames x height x width (32 MB as float32 tensors).
    min_side: the smallest frame side the stages handle (an image pyramid needs a few pixels).
    allow_progressive: progressive JPEG frames are refused by default: one can hold thousands
        of tiny scans, each a pass over the whole frame (a "scan bomb": minutes of CPU from a
        small file). Cameras and :func:`encode_frames` write baseline JPEG.
    """

    max_bytes: int = 1 << 20
    max_frames: int = MAX_FRAMES
    max_frame_pixels: int = 1920 * 1080
    max_total_pixels: int = 1 << 23
    min_side: int = 8
    allow_progressive: bool = False


DEFAULT_LIMITS = PayloadLimits()


@dataclass(frozen=True)
class ClipInfo:
    """What a payload's headers say (:func:`inspect_clip`): frames, height, width, the frames'
    format ("JPEG" or "PNG", the first frame's) and the payload's size in bytes."""

    frames: int
    height: int
    width: int
    format: str
    bytes: int

    @property
    def pixels(self) -> int:
        return self.frames * self.height * self.width


# ---------------------------------------------------------------------------------------------
# Sample images

#: The real images used, by name (see the module docstring for what each is).
SAMPLE_IMAGES = ("grace_hopper", "jacksboro_dem", "mri_s1045")
#: Grace Hopper's face in grace_hopper.jpg, (y0, x0, y1, x1) pixels: brow to chin, so her eyes
#: and mouth sit where the face detector's template has them (rows 0.38 and 0.76 of the box).
FACE_BOX = (120, 170, 330, 355)
# Objects cut from the images for the "objects" scene: (image, (y0, x0, y1, x1)).
_OBJECTS = (("grace_hopper", FACE_BOX), ("grace_hopper", (20, 170, 135, 360)),  # face, cap
            ("mri_s1045", (20, 15, 245, 215)), ("grace_hopper", (40, 0, 200, 140)))  # head, stars


def _sample_dir() -> Path:
    import matplotlib  # only here: reading the data folder, not plotting
    return Path(matplotlib.get_data_path()) / "sample_data"


@functools.lru_cache(maxsize=1)
def sample_images() -> dict[str, np.ndarray]:
    """The real sample images as read-only (H, W) uint8 grey arrays, read once per process.

    Example::

        >>> {k: v.shape for k, v in sample_images().items()}["grace_hopper"]
        (600, 512)
    """
    folder = _sample_dir()
    with Image.open(folder / "grace_hopper.jpg") as im:
        hopper = np.asarray(im.convert("L"))
    with np.load(folder / "jacksboro_fault_dem.npz") as dem_file:
        dem = dem_file["elevation"].astype(np.float64)
    dem = np.round(255 * (dem - dem.min()) / (dem.max() - dem.min()))
    with gzip.open(folder / "s1045.ima.gz", "rb") as f:  # raw little-endian 16-bit, 256 x 256
        mri = np.frombuffer(f.read(), dtype="<u2").reshape(256, 256).astype(np.float64)
    mri = np.round(255 * mri / mri.max())
    images = {"grace_hopper": hopper, "jacksboro_dem": dem.astype(np.uint8),
              "mri_s1045": mri.astype(np.uint8)}
    for array in images.values():
        array.setflags(write=False)
    return images


# ---------------------------------------------------------------------------------------------
# A task's clip

def _generator(seed: int | str) -> np.random.Generator:
    """A numpy generator for a task: ints as they are, task ids hashed (stable across runs,
    unlike ``hash()``)."""
    if isinstance(seed, str):
        seed = int.from_bytes(hashlib.sha256(seed.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng(int(seed) % (1 << 64))


def _resized(name: str, box, height: int, width: int) -> np.ndarray:
    """``box`` (y0, x0, y1, x1, floats allowed) of sample image ``name`` resized to
    (height, width), float64 in [0, 255]. Pillow's resize filters over the whole source area,
    so a big reduction does not alias."""
    y0, x0, y1, x1 = box
    image = Image.fromarray(sample_images()[name])
    out = image.resize((width, height), Image.Resampling.BILINEAR, box=(x0, y0, x1, y1))
    return np.asarray(out, dtype=np.float64)


def _ellipse_alpha(height: int, width: int) -> np.ndarray:
    """A soft (about one pixel) elliptical mask filling a height x width box."""
    yy = (np.arange(height) + 0.5) / height * 2 - 1
    xx = (np.arange(width) + 0.5) / width * 2 - 1
    radius = np.sqrt(yy[:, None] ** 2 + xx[None, :] ** 2)
    return np.clip((1.0 - radius) * min(height, width) / 2 + 0.5, 0.0, 1.0)


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    name = ("jacksboro_dem", "grace_hopper")[int(rng.integers(2))]
    src_h, src_w = sample_images()[name].shape
    aspect = w / h
    ch = rng.uniform(0.4, 0.9) * min(src_h, src_w / aspect)
    cw = ch * aspect
    y0, x0 = rng.uniform(0, src_h - ch), rng.uniform(0, src_w - cw)
    bg = _resized(name, (y0, x0, y0 + ch, x0 + cw), h, w)
    return bg[:, ::-1].copy() if rng.random() < 0.5 else bg


def _paste(frame: np.ndarray, sprite: np.ndarray, alpha: np.ndarray, top: int,
           left: int) -> None:
    """Blend ``sprite`` into ``frame`` at (top, left), clipped to the frame."""
    h, w = frame.shape
    sh, sw = sprite.shape
    y0, x0, y1, x1 = max(top, 0), max(left, 0), min(top + sh, h), min(left + sw, w)
    if y0 >= y1 or x0 >= x1:
        return
    s = (slice(y0 - top, y1 - top), slice(x0 - left, x1 - left))
    a = alpha[s]
    frame[y0:y1, x0:x1] = frame[y0:y1, x0:x1] * (1 - a) + sprite[s] * a


def clip_for_task(seed: int | str, input_size: int, scene: str = "objects",
                  noise: float = 2.0) -> np.ndarray:
    """A task's (T, H, W) uint8 grey clip cut from the real sample images (module docstring):
    (T, H, W) = ``frame_shape(input_size)``; ``seed`` an int or a task id; ``scene``
    "objects" (intrusion detection, video synopsis) or "faces" (face recognition); ``noise``
    the sensor noise std in grey levels.

    Example::

        >>> a, b = clip_for_task("task-1", 4096), clip_for_task("task-1", 4096)
        >>> a.shape, bool((a == b).all()), bool((a != clip_for_task("task-2", 4096)).any())
        ((8, 32, 40), True, True)
    """
    if scene not in ("objects", "faces"):
        raise ValueError(f"scene must be 'objects' or 'faces', got {scene!r}")
    t, h, w = frame_shape(input_size)
    rng = _generator(seed)
    background = _background(rng, h, w)
    frames = np.repeat(background[None], t, axis=0)
    steps = np.linspace(0.0, 1.0, t)
    if scene == "objects":
        # Fewer and larger than the synthetic scene's blobs: a real object needs some pixels
        # to look like one.
        n = int(min(4, max(2, round(h / 24))))
        min_travel = 0.5 * w  # objects cross at least half the frame: every pixel is seen bare
    else:
        n = int(min(5, max(2, round(h / 20))))
        min_travel = 0.2 * w
    lane = h / n
    for k in range(n):
        if scene == "objects":
            name, box = _OBJECTS[int(rng.integers(len(_OBJECTS)))]
            sh = max(4, round(rng.uniform(0.55, 0.75) * lane))
            sw = max(4, round(sh * (box[3] - box[1]) / (box[2] - box[0])))
            t_in = int(rng.integers(0, max(1, t // 3)))
            t_out = int(rng.integers(min(t - 1, t_in + t // 2), t))
        else:  # a face at least as big as the detector's 12 x 10 template, 1.2 : 1 like it
            name, box = "grace_hopper", FACE_BOX
            sh = max(12, round(rng.uniform(0.6, 0.8) * lane))
            sw = max(10, round(sh / 1.2))
            t_in, t_out = 0, t - 1
        sw = min(sw, w - 2)
        sprite = _resized(name, box, sh, sw) * rng.uniform(0.85, 1.15)  # lighting
        alpha = _ellipse_alpha(sh, sw)
        top0 = k * lane + (lane - sh) / 2
        tops = top0 + rng.uniform(-0.15, 0.15) * lane * steps  # a slight vertical drift
        x_a, x_b = rng.uniform(0, w - sw, 2)
        if abs(x_b - x_a) < min_travel:  # make sure it really moves: go to the farther end
            x_b = 0.0 if x_a > (w - sw) / 2 else float(w - sw)
        lefts = x_a + (x_b - x_a) * steps
        for i in range(t_in, t_out + 1):
            _paste(frames[i], sprite, alpha, int(round(tops[i])), int(round(lefts[i])))
    frames += rng.normal(0.0, noise, frames.shape)
    return np.clip(np.round(frames), 0, 255).astype(np.uint8)


# ---------------------------------------------------------------------------------------------
# The container

def _as_uint8_frames(frames) -> list[Image.Image]:
    """Frames (PIL images, or a (T, H, W[, 3]) uint8 array / [0, 1] float array or tensor) as
    grey PIL images."""
    if isinstance(frames, (list, tuple)) and frames and isinstance(frames[0], Image.Image):
        return [f if f.mode == "L" else f.convert("L") for f in frames]
    if isinstance(frames, torch.Tensor):
        frames = frames.detach().cpu().numpy()
    array = np.asarray(frames)
    if array.dtype != np.uint8:  # floats are [0, 1] intensities, as the stages use them
        array = np.clip(np.round(array.astype(np.float64) * 255), 0, 255).astype(np.uint8)
    if array.ndim == 4 and array.shape[-1] == 3:
        return [Image.fromarray(f, "RGB").convert("L") for f in array]
    if array.ndim != 3:
        raise ValueError(f"frames must be (T, H, W) or (T, H, W, 3), got shape {array.shape}")
    return [Image.fromarray(f, "L") for f in array]


def encode_frames(frames, format: str = "JPEG", quality: int = DEFAULT_QUALITY,
                  limits: PayloadLimits = DEFAULT_LIMITS) -> bytes:
    """A clip as a payload (the container of the module docstring), grey, each frame a JPEG
    (``quality`` 1-95) or a lossless PNG. Refuses with :class:`PayloadError` what
    :func:`decode_clip` would refuse under the same ``limits``, so a producer never sends a
    payload the executors reject.

    Example::

        >>> import numpy as np
        >>> data = encode_frames(np.zeros((3, 16, 16), np.uint8), format="PNG")
        >>> data[:4], inspect_clip(data).frames
        (b'SPCL', 3)
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    images = _as_uint8_frames(frames)
    _check_shape(len(images), *(images[0].size[::-1] if images else (0, 0)), limits)
    if any(im.size != images[0].size for im in images):
        raise PayloadError("all frames of a clip must have the same size")
    options = ({"quality": int(quality), "optimize": True} if format == "JPEG"
               else {"compress_level": 6})
    blobs = []
    for im in images:
        buffer = io.BytesIO()
        im.save(buffer, format=format, **options)
        blobs.append(buffer.getvalue())
    payload = b"".join([_HEAD.pack(MAGIC, VERSION, len(blobs)),
                        *(_LENGTH.pack(len(b)) for b in blobs), *blobs])
    if len(payload) > limits.max_bytes:
        raise PayloadError(f"clip payload of {len(payload):,} bytes is over the "
                           f"{limits.max_bytes:,}-byte limit (fewer or smaller frames, or a "
                           f"lower JPEG quality)")
    return payload


def _check_shape(count: int, height: int, width: int, limits: PayloadLimits) -> None:
    if count < 1:
        raise PayloadError("clip payload has no frames")
    if count > limits.max_frames:
        raise PayloadError(f"clip payload has {count} frames, over the limit of "
                           f"{limits.max_frames}")
    if height * width > limits.max_frame_pixels:
        raise PayloadError(f"clip frame of {width} x {height} pixels is over the limit of "
                           f"{limits.max_frame_pixels:,} pixels per frame")
    if min(height, width) < limits.min_side:
        raise PayloadError(f"clip frame of {width} x {height} pixels is under the minimum "
                           f"side of {limits.min_side}")
    if count * height * width > limits.max_total_pixels:
        raise PayloadError(f"clip of {count} frames of {width} x {height} pixels is over the "
                           f"limit of {limits.max_total_pixels:,} pixels per clip")


def _split(payload, limits: PayloadLimits) -> list[memoryview]:
    """The frames' files, after checking the container's structure (no image is parsed)."""
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise PayloadError(f"clip payload must be bytes, got {type(payload).__name__}")
    data = memoryview(payload).cast("B")
    if len(data) == 0:
        raise PayloadError("clip payload is empty")
    if len(data) > limits.max_bytes:
        raise PayloadError(f"clip payload of {len(data):,} bytes is over the "
                           f"{limits.max_bytes:,}-byte limit")
    if len(data) < _HEAD.size or bytes(data[:4]) != MAGIC:
        raise PayloadError(f"not a clip payload: it does not start with {MAGIC!r} "
                           f"(first bytes 0x{bytes(data[:4]).hex()})")
    _, version, count = _HEAD.unpack_from(data)
    if version != VERSION:
        raise PayloadError(f"clip payload version {version} is not supported (only {VERSION})")
    if count < 1:
        raise PayloadError("clip payload has no frames")
    if count > limits.max_frames:
        raise PayloadError(f"clip payload has {count} frames, over the limit of "
                           f"{limits.max_frames}")
    table_end = _HEAD.size + count * _LENGTH.size
    if len(data) < table_end:
        raise PayloadError(f"truncated clip payload: {len(data)} bytes, shorter than its "
                           f"header of {count} frame lengths")
    lengths = [_LENGTH.unpack_from(data, _HEAD.size + i * _LENGTH.size)[0] for i in range(count)]
    if table_end + sum(lengths) != len(data):
        raise PayloadError(f"clip payload of {len(data)} bytes does not match its header "
                           f"({table_end} header bytes + {sum(lengths)} frame bytes): "
                           "truncated or padded")
    if 0 in lengths:
        raise PayloadError("clip payload has an empty frame")
    offsets = np.cumsum([table_end, *lengths]).tolist()
    return [data[a:b] for a, b in zip(offsets[:-1], offsets[1:])]


def _open(blob: memoryview, index: int) -> Image.Image:
    """Frame ``index``'s header only (Pillow parses lazily): format and size, no pixels."""
    try:
        # formats=: never let Pillow guess among its dozens of other parsers.
        image = Image.open(io.BytesIO(blob), formats=FORMATS)
    except UnidentifiedImageError:
        raise PayloadError(f"clip frame {index} is not a JPEG or PNG image (first bytes "
                           f"0x{bytes(blob[:8]).hex()})") from None
    except Exception as exc:  # noqa: BLE001 - hostile bytes: any parser error is a bad payload
        raise PayloadError(f"clip frame {index} is not a readable JPEG or PNG image: "
                           f"{type(exc).__name__}: {exc}") from None
    if image.mode not in ALLOWED_MODES:
        raise PayloadError(f"clip frame {index} has image mode {image.mode!r}; expected one of "
                           f"{ALLOWED_MODES}")
    return image


def inspect_clip(payload, limits: PayloadLimits = DEFAULT_LIMITS) -> ClipInfo:
    """Check a payload's container and every frame's header against ``limits`` without
    decoding pixels; raises :class:`PayloadError`.

    Example::

        >>> info = inspect_clip(encode_frames(clip_for_task(0, 4096)))
        >>> (info.frames, info.height, info.width, info.format), info.pixels
        ((8, 32, 40, 'JPEG'), 10240)
    """
    blobs = _split(payload, limits)
    size = None
    fmt = ""
    for i, blob in enumerate(blobs):
        with _open(blob, i) as image:
            if image.info.get("progressive") and not limits.allow_progressive:
                raise PayloadError(f"clip frame {i} is a progressive JPEG; only baseline JPEG "
                                   "is accepted (PayloadLimits.allow_progressive)")
            if size is None:
                size, fmt = image.size, image.format
                _check_shape(len(blobs), size[1], size[0], limits)
            elif image.size != size:
                raise PayloadError(f"clip frame {i} is {image.size[0]} x {image.size[1]} "
                                   f"pixels, frame 0 is {size[0]} x {size[1]}: all frames of a "
                                   "clip must have the same size")
    return ClipInfo(frames=len(blobs), height=size[1], width=size[0], format=fmt,
                    bytes=len(memoryview(payload).cast("B")))


def decode_clip(payload, device: str | torch.device = "cpu",
                limits: PayloadLimits = DEFAULT_LIMITS) -> torch.Tensor:
    """A payload's clip in the stages' layout: a (T, H, W) float32 tensor of grey intensities in
    [0, 1] on ``device`` (what ``task_frames`` gives). Colour frames are converted to grey.
    Raises :class:`PayloadError` for anything malformed or over ``limits``; every header is
    checked (:func:`inspect_clip`) before the first pixel is decoded.

    Example::

        >>> import numpy as np
        >>> clip = np.full((2, 8, 8), 255, np.uint8)
        >>> decode_clip(encode_frames(clip, format="PNG")).flatten().unique().tolist()
        [1.0]
    """
    info = inspect_clip(payload, limits)
    out = np.empty((info.frames, info.height, info.width), dtype=np.uint8)
    for i, blob in enumerate(_split(payload, limits)):
        check_cancelled()  # a cancelled task stops between decoded frames
        try:
            with _open(blob, i) as image:
                image.load()  # a truncated or corrupt body fails here
                grey = image if image.mode == "L" else image.convert("L")
                out[i] = np.asarray(grey)
        except PayloadError:
            raise
        except Exception as exc:  # noqa: BLE001 - hostile bytes: any decoder error is bad input
            raise PayloadError(f"clip frame {i} does not decode: {type(exc).__name__}: "
                               f"{exc}") from None
    return torch.from_numpy(out).to(device=device, dtype=torch.float32).div_(255.0)
