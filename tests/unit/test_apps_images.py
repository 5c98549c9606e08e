"""Real frames for the apps: sample images, task clips, the clip container and its bounds, the
apps run on decoded clips and their JSON summaries."""

from __future__ import annotations

import doctest
import io
import json
import struct
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageFile

import workload.apps.images as images
import workload.apps.registry as registry
from workload.apps import run_task
from workload.apps.frames import frame_shape
from workload.apps.images import (DEFAULT_LIMITS, MAGIC, SAMPLE_IMAGES, PayloadError,
                                  PayloadLimits, clip_for_task, decode_clip, encode_frames,
                                  inspect_clip, sample_images)
from workload.apps.registry import (MAX_LISTED, SCENE_FOR_APP, summarise_output,
                                    task_frames, task_frames_from_payload, task_payload)
from workload.catalog import APPLICATIONS

torch.set_num_threads(1)


# --- the sample images ---------------------------------------------------------------------------

def test_sample_images_are_the_real_files_matplotlib_ships():
    import matplotlib
    folder = Path(matplotlib.get_data_path()) / "sample_data"
    for name in ("grace_hopper.jpg", "jacksboro_fault_dem.npz", "s1045.ima.gz"):
        assert (folder / name).is_file(), name
    found = sample_images()
    assert tuple(found) == SAMPLE_IMAGES
    assert found["grace_hopper"].shape == (600, 512)
    assert found["jacksboro_dem"].shape == (344, 403)
    assert found["mri_s1045"].shape == (256, 256)
    for name, array in found.items():
        assert array.dtype == np.uint8 and not array.flags.writeable, name
        assert array.min() < 30 and array.max() > 220, name  # full range: real contrast
        assert array.std() > 20, name
    assert sample_images() is found  # read once


# --- a task's clip -------------------------------------------------------------------------------

@pytest.mark.parametrize("input_size", [4096, 36_864, 60_000, 200_000])
@pytest.mark.parametrize("scene", ["objects", "faces"])
def test_clip_has_the_pixel_count_of_the_task(input_size, scene):
    clip = clip_for_task(3, input_size, scene=scene)
    assert clip.shape == frame_shape(input_size) and clip.dtype == np.uint8
    assert 0.7 * input_size <= clip.size <= 2.6 * input_size  # frame_shape rounds to 8-px sides


def test_clip_is_deterministic_per_seed():
    for seed in (0, 7, "task-0000042", -5):
        assert np.array_equal(clip_for_task(seed, 36_864), clip_for_task(seed, 36_864))
    clips = [clip_for_task(seed, 36_864) for seed in (0, 1, "a", "b")]
    assert all(not np.array_equal(a, b) for i, a in enumerate(clips) for b in clips[i + 1:])
    assert not np.array_equal(clip_for_task(0, 36_864, scene="faces"), clips[0])


def test_clip_moves_locally_over_a_still_background():
    """A fixed camera: most pixels only change by sensor noise, objects move (so background
    models, frame differencing and tracking have something to see)."""
    clip = clip_for_task(11, 147_456).astype(np.float64)
    diff = np.abs(np.diff(clip, axis=0))
    moving = diff > 25
    assert moving.any(axis=(1, 2)).sum() >= clip.shape[0] // 2  # motion in most frame pairs
    assert moving.mean() < 0.2  # ... but not everywhere
    assert np.median(diff) <= 4  # the rest is noise


def test_bad_scene_is_refused():
    with pytest.raises(ValueError, match="scene must be"):
        clip_for_task(0, 4096, scene="cats")


# --- the container -------------------------------------------------------------------------------

def test_jpeg_round_trip_is_near_equal_and_png_is_exact():
    clip = clip_for_task(5, 36_864)
    frames = decode_clip(encode_frames(clip, quality=80))
    assert tuple(frames.shape) == clip.shape and frames.dtype == torch.float32
    assert 0.0 <= float(frames.min()) and float(frames.max()) <= 1.0
    error = np.abs(frames.numpy() * 255 - clip)
    assert error.mean() < 6 and np.percentile(error, 99) < 30
    assert np.array_equal(decode_clip(encode_frames(clip, format="PNG")).mul(255).round().byte()
                          .numpy(), clip)
    # Higher quality, more bytes, closer pixels.
    hi = encode_frames(clip, quality=95)
    assert len(hi) > len(encode_frames(clip, quality=80))
    assert np.abs(decode_clip(hi).numpy() * 255 - clip).mean() < error.mean()


def test_decode_gives_the_layout_of_synthetic_frames():
    synthetic = task_frames("video_synopsis", 36_864, seed=0)
    real = task_frames_from_payload("video_synopsis", task_payload("video_synopsis", 36_864, 0))
    assert real.shape == synthetic.shape and real.dtype == synthetic.dtype
    assert real.device == synthetic.device


def test_encode_accepts_floats_tensors_colour_and_pil_images():
    grey = np.linspace(0, 1, 4 * 16 * 16).reshape(4, 16, 16)
    as_png = dict(format="PNG")
    want = decode_clip(encode_frames((grey * 255).round().astype(np.uint8), **as_png))
    assert torch.equal(decode_clip(encode_frames(grey, **as_png)), want)
    assert torch.equal(decode_clip(encode_frames(torch.tensor(grey), **as_png)), want)
    pil = [Image.fromarray(f, "L") for f in (grey * 255).round().astype(np.uint8)]
    assert torch.equal(decode_clip(encode_frames(pil, **as_png)), want)
    colour = np.repeat((grey * 255).round().astype(np.uint8)[..., None], 3, axis=3)
    assert torch.equal(decode_clip(encode_frames(colour, **as_png)), want)
    with pytest.raises(ValueError, match="frames must be"):
        encode_frames(np.zeros((16, 16), np.uint8))
    with pytest.raises(ValueError, match="format must be"):
        encode_frames(grey, format="GIF")


def test_colour_frames_from_other_producers_are_read_as_grey():
    """A producer may send colour JPEGs: the stages get their luma."""
    rgb = np.zeros((12, 16, 3), np.uint8)
    rgb[..., 0] = 200
    blob = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(blob, "PNG")
    frames = decode_clip(_container([blob.getvalue()] * 2))
    assert tuple(frames.shape) == (2, 12, 16)
    assert abs(float(frames.mean()) - 200 * 0.299 / 255) < 0.01


def test_inspect_reads_headers():
    payload = encode_frames(clip_for_task(0, 147_456))
    info = inspect_clip(payload)
    assert (info.frames, info.height, info.width) == frame_shape(147_456)
    assert info.format == "JPEG" and info.bytes == len(payload)
    assert payload[:4] == MAGIC == b"SPCL"


@pytest.mark.parametrize("input_size,most_kb", [(4096, 8), (36_864, 25), (200_000, 90),
                                                (1 << 20, 400)])
def test_payload_sizes_stay_reasonable(input_size, most_kb):
    """Grey JPEG at quality 80: about 0.4 bytes per pixel (the docs quote these sizes)."""
    sizes = [len(task_payload(app, input_size, seed)) for app in APPLICATIONS
             for seed in range(2)]
    assert max(sizes) < most_kb * 1000
    assert max(sizes) < DEFAULT_LIMITS.max_bytes


def test_encoder_refuses_what_the_decoder_would():
    with pytest.raises(PayloadError, match="65 frames, over the limit of 64"):
        encode_frames(np.zeros((65, 16, 16), np.uint8))
    with pytest.raises(PayloadError, match="no frames"):
        encode_frames(np.zeros((0, 16, 16), np.uint8))
    with pytest.raises(PayloadError, match="byte limit"):
        encode_frames(clip_for_task(0, 36_864), limits=PayloadLimits(max_bytes=2000))
    with pytest.raises(PayloadError, match="same size"):
        encode_frames([Image.new("L", (16, 16)), Image.new("L", (16, 24))])


# --- hostile payloads ----------------------------------------------------------------------------

def _container(blobs: list[bytes], count: int | None = None, version: int = 1) -> bytes:
    count = len(blobs) if count is None else count
    return (struct.pack(">4sBH", MAGIC, version, count)
            + b"".join(struct.pack(">I", len(b)) for b in blobs) + b"".join(blobs))


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png_header_only(width: int, height: int, bit_depth: int = 8, colour: int = 0) -> bytes:
    """A valid PNG header claiming width x height, with a few bytes of pixel data: a bomb's
    shape (a small file that would decode to a huge image)."""
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, colour, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr)
            + _png_chunk(b"IDAT", zlib.compress(bytes(1000), 9)) + _png_chunk(b"IEND", b""))


def _jpeg_claiming(width: int, height: int) -> bytes:
    """A real small JPEG whose SOF0 header is patched to claim width x height."""
    blob = io.BytesIO()
    Image.new("L", (16, 16), 128).save(blob, "JPEG")
    data = bytearray(blob.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def _one_frame(width=16, height=16, format="JPEG") -> bytes:
    blob = io.BytesIO()
    Image.new("L", (width, height), 100).save(blob, format)
    return blob.getvalue()


def _truncated_jpeg() -> bytes:
    """A textured 64 x 64 JPEG cut inside its entropy-coded data (headers intact)."""
    blob = io.BytesIO()
    noise = np.random.default_rng(0).integers(0, 256, (64, 64), dtype=np.uint8)
    Image.fromarray(noise, "L").save(blob, "JPEG")
    return blob.getvalue()[:len(blob.getvalue()) * 2 // 3]


def _progressive_jpeg() -> bytes:
    blob = io.BytesIO()
    Image.new("L", (16, 16), 90).save(blob, "JPEG", progressive=True)
    return blob.getvalue()


def _hostile() -> dict[str, tuple[object, str]]:
    good = encode_frames(clip_for_task(1, 4096))
    frame = _one_frame()
    rng = np.random.default_rng(3)
    gif = io.BytesIO()
    Image.new("L", (16, 16)).save(gif, "GIF")
    return {
        "empty": (b"", "empty"),
        "not bytes": ("SPCL", "must be bytes"),
        "garbage": (rng.bytes(200), "does not start with b'SPCL'"),
        "a bare jpeg": (frame, "does not start with b'SPCL'"),
        "magic only": (MAGIC, "does not start with"),
        "unknown version": (_container([frame], version=9), "version 9 is not supported"),
        "no frames": (_container([]), "no frames"),
        "too many frames": (_container([frame], count=65_535), "65535 frames, over the limit"),
        "truncated table": (_container([frame] * 4)[:12], "shorter than its header"),
        "truncated": (good[:-100], "does not match its header"),
        "padded": (good + b"\x00" * 7, "does not match its header"),
        "empty frame": (_container([b"", frame]), "has an empty frame"),
        "garbage frame": (_container([rng.bytes(500)]), "frame 0 is not a JPEG or PNG image"),
        "gif frame": (_container([gif.getvalue()]), "frame 0 is not a JPEG or PNG image"),
        "truncated jpeg frame": (_container([_truncated_jpeg()]), "does not decode"),
        "huge png header": (_container([_png_header_only(60_000, 60_000)]),
                            "not a readable JPEG or PNG"),  # Pillow's own bomb check
        "big png header": (_container([_png_header_only(4000, 4000)]),
                           "over the limit of 2,073,600 pixels per frame"),
        "huge jpeg header": (_container([_jpeg_claiming(65_000, 65_000)]),
                             "not a readable JPEG or PNG"),
        "big jpeg header": (_container([_jpeg_claiming(3000, 3000)]),
                            "over the limit of 2,073,600 pixels per frame"),
        "many big frames": (_container([_png_header_only(1920, 1080)] * 5),
                            "over the limit of 8,388,608 pixels per clip"),
        "tiny frames": (_container([_one_frame(4, 4)]), "under the minimum side of 8"),
        "mixed sizes": (_container([frame, _one_frame(24, 16)]), "same size"),
        "16-bit png": (_container([_png_header_only(16, 16, bit_depth=16)]), "image mode 'I;16'"),
        "over the byte limit": (_container([frame + bytes(1 << 20)]), "byte limit"),
        "progressive jpeg": (_container([_progressive_jpeg()]), "is a progressive JPEG"),
    }


@pytest.mark.parametrize("kind", list(_hostile()))
def test_hostile_payloads_raise_a_clear_error_quickly_without_decoding(kind, monkeypatch):
    payload, phrase = _hostile()[kind]
    loads = []
    real_load = ImageFile.ImageFile.load

    def counting_load(self):
        loads.append(self.size)
        return real_load(self)

    monkeypatch.setattr(ImageFile.ImageFile, "load", counting_load)
    start = time.perf_counter()
    with pytest.raises(PayloadError) as info:
        decode_clip(payload)
    assert time.perf_counter() - start < 1.0
    assert phrase in str(info.value)
    assert isinstance(info.value, ValueError)
    # Only a frame whose header passed every bound is ever decoded (the truncated JPEG).
    assert all(w * h <= DEFAULT_LIMITS.max_frame_pixels for w, h in loads)
    if kind != "truncated jpeg frame":
        assert loads == []


def test_limits_are_settings():
    payload = encode_frames(clip_for_task(0, 36_864))
    t, h, w = frame_shape(36_864)
    decode_clip(payload, limits=PayloadLimits(max_frames=t, max_total_pixels=t * h * w))
    with pytest.raises(PayloadError, match=f"{t} frames, over the limit of {t - 1}"):
        decode_clip(payload, limits=PayloadLimits(max_frames=t - 1))
    with pytest.raises(PayloadError, match="pixels per clip"):
        decode_clip(payload, limits=PayloadLimits(max_total_pixels=t * h * w - 1))
    with pytest.raises(PayloadError, match="pixels per frame"):
        decode_clip(payload, limits=PayloadLimits(max_frame_pixels=h * w - 1))
    with pytest.raises(PayloadError, match="byte limit"):
        decode_clip(payload, limits=PayloadLimits(max_bytes=len(payload) - 1))
    progressive = _container([_progressive_jpeg()] * 2)
    assert decode_clip(progressive, limits=PayloadLimits(allow_progressive=True)).shape == (
        2, 16, 16)


def test_every_truncation_and_mutation_raises_only_payload_error():
    payload = encode_frames(clip_for_task(2, 4096), format="PNG")
    for cut in range(0, len(payload), 7):
        with pytest.raises(PayloadError):
            decode_clip(payload[:cut])
    rng = np.random.default_rng(0)
    outcomes = {"decoded": 0, "refused": 0}
    for _ in range(300):
        data = bytearray(payload)
        for i in rng.integers(0, len(data), 3):
            data[i] = int(rng.integers(256))
        try:
            frames = decode_clip(bytes(data))
            assert frames.shape[0] >= 1
            outcomes["decoded"] += 1
        except PayloadError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0


# --- the apps on real clips ----------------------------------------------------------------------

@pytest.mark.parametrize("app_id", list(APPLICATIONS))
def test_each_app_runs_on_a_real_clip_and_summarises_it(app_id):
    t, h, w = frame_shape(36_864)
    summaries = []
    for seed in range(3):
        frames = task_frames_from_payload(app_id, task_payload(app_id, 36_864, f"t-{seed}"))
        summary = summarise_output(app_id, run_task(app_id, 36_864, seed, frames=frames))
        text = json.dumps(summary)
        assert json.loads(text) == summary and len(text) < 2048
        assert summary["app_id"] == app_id
        summaries.append(summary)
        if app_id == "intrusion_detection":
            assert 0 <= summary["intrusions"] <= summary["tracks"] <= summary["detections"]
            assert summary["keypoints"] > 0  # real texture has scale-space extrema
            for track in summary["tracked"]:
                assert 0 <= track["first_frame"] <= track["last_frame"] < t
                y0, x0, y1, x1 = track["box"]
                assert 0 <= y0 < y1 <= h and 0 <= x0 < x1 <= w
        elif app_id == "video_synopsis":
            assert summary["clip_frames"] == t
            assert 0 <= summary["synopsis_frames"] <= t and summary["overlap"] == 0
            assert len(summary["tube_boxes"]) == min(summary["tubes"], MAX_LISTED)
        else:
            assert 0 <= summary["identified"] <= summary["faces"]
            assert summary["frames_with_faces"] <= t
            for face in summary["detected"]:
                assert 0 <= face["frame"] < t and -1 <= face["score"] <= 1
    # Moving objects cut from the photographs are found: tracks and tubes on every clip.
    if app_id == "intrusion_detection":
        assert all(s["tracks"] >= 1 for s in summaries)
    if app_id == "video_synopsis":
        assert all(s["tubes"] >= 1 for s in summaries)
    if app_id == "face_recognition":
        assert sum(s["faces"] for s in summaries) >= 1  # Grace Hopper's face, now and then


@pytest.mark.parametrize("shape", [(1, 8, 8), (2, 8, 64), (64, 8, 8)])
def test_the_smallest_clips_the_limits_allow_run_through_every_app(shape):
    """Whatever passes the bounds must not crash a stage: one frame, 8-pixel sides, 64 frames."""
    noise = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    payload = encode_frames(noise)
    for app_id in APPLICATIONS:
        frames = task_frames_from_payload(app_id, payload)
        summary = summarise_output(app_id, run_task(app_id, 0, 0, frames=frames))
        assert json.loads(json.dumps(summary))["app_id"] == app_id


def test_summaries_of_synthetic_tasks_match_the_stage_outputs():
    out = run_task("video_synopsis", 36_864, seed=1)
    s = summarise_output("video_synopsis", out)
    assert s["tubes"] == out["tube_extraction"].count == 3
    assert s["synopsis_frames"] == out["tube_stitching"].length
    out = run_task("intrusion_detection", 36_864, seed=1)
    s = summarise_output("intrusion_detection", out)
    assert s["tracks"] == 3 and s["intruder_ids"] == [0, 1, 2]
    out = run_task("face_recognition", 36_864, seed=1)
    s = summarise_output("face_recognition", out)
    assert s["faces"] == 34 and s["identified"] == sum(s["identities"].values())
    assert len(s["detected"]) == MAX_LISTED


def test_summary_and_payload_errors():
    with pytest.raises(KeyError, match="lack the stage output"):
        summarise_output("video_synopsis", {"tube_stitching": None})
    with pytest.raises(KeyError, match="unknown application"):
        summarise_output("ocr", {})
    with pytest.raises(KeyError, match="unknown application"):
        task_frames_from_payload("ocr", b"")
    with pytest.raises(PayloadError, match="empty"):
        task_frames_from_payload("face_recognition", b"")


def test_task_payload_uses_the_apps_scene_and_is_deterministic():
    for app_id in APPLICATIONS:
        payload = task_payload(app_id, 4096, "task-9")
        assert payload == task_payload(app_id, 4096, "task-9")
        expected = encode_frames(clip_for_task("task-9", 4096, scene=SCENE_FOR_APP[app_id]))
        assert payload == expected


@pytest.mark.parametrize("module", [images, registry])
def test_docstring_examples_run(module):
    assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0
