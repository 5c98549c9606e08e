"""The stage-type -> operator registry and a simple reference runner for whole tasks.

Every operator has the signature ``op(frames, inputs, **options) -> output``: ``frames`` is the
task's (T, H, W) clip (the stages of a task share it, as in the paper) and ``inputs`` maps each
dependency's stage name to its output. This runner executes one task's DAG sequentially in
dependency order; the co-scheduling executor (IAWP) runs the same operators concurrently.

A task's clip is either synthetic (:func:`task_frames`, from ``input_size`` and a seed) or real,
carried in the TaskEvent's ``payload`` (:func:`task_payload` makes one from the sample
photographs, :func:`task_frames_from_payload` decodes and bounds it); :func:`summarise_output`
turns a task's stage outputs into the small JSON-able answer a TaskResult carries.

Example::

    >>> out = run_task("video_synopsis", 4096, seed=0)
    >>> list(out)
    ['gmm_background', 'frame_difference', 'tube_extraction', 'tube_stitching']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from workload.catalog import APPLICATIONS, STAGE_TYPES, AppDef

from .background import frame_difference, gmm_background
from .faces import face_compare, face_detection, face_distance, face_encoding, face_landmarks
from .frames import make_frames
from .images import (DEFAULT_LIMITS, DEFAULT_QUALITY, PayloadLimits, clip_for_task, decode_clip,
                     encode_frames)
from .pyramid import dog_pyramid, gaussian_pyramid, scale_space_extrema
from .synopsis import tube_extraction, tube_stitching
from .tracking import tracking

__all__ = ["Operator", "OPERATORS", "SCENE_FOR_APP", "run_stage", "stage_order", "run_task",
           "task_frames", "task_payload", "task_frames_from_payload", "summarise_output",
           "MAX_LISTED"]

Operator = Callable[[torch.Tensor, dict], Any]

#: One operator per stage type of ``workload.catalog.STAGE_TYPES``.
OPERATORS: dict[str, Operator] = {
    "gmm_background": gmm_background,
    "frame_difference": frame_difference,
    "gaussian_pyramid": gaussian_pyramid,
    "dog_pyramid": dog_pyramid,
    "scale_space_extrema": scale_space_extrema,
    "tracking": tracking,
    "tube_extraction": tube_extraction,
    "tube_stitching": tube_stitching,
    "face_detection": face_detection,
    "face_landmarks": face_landmarks,
    "face_encoding": face_encoding,
    "face_distance": face_distance,
    "face_compare": face_compare,
}
assert set(OPERATORS) == set(STAGE_TYPES), "every catalog stage type needs an operator"

#: Which synthetic scene an application's tasks see.
SCENE_FOR_APP = {"intrusion_detection": "objects", "video_synopsis": "objects",
                 "face_recognition": "faces"}


def run_stage(stage_type: str, frames: torch.Tensor, inputs: dict[str, Any] | None = None,
              **options) -> Any:
    """Run one stage's operator on ``frames`` with its dependencies' outputs ``inputs``.

    Example::

        >>> from workload.apps import make_frames
        >>> run_stage("frame_difference", make_frames(4096, seed=0)).motion.dtype
        torch.bool
    """
    try:
        op = OPERATORS[stage_type]
    except KeyError:
        raise KeyError(f"unknown stage type {stage_type!r}; known: {sorted(OPERATORS)}") from None
    return op(frames, {} if inputs is None else inputs, **options)


def stage_order(app: AppDef | str) -> list[str]:
    """The stage names of an application in a dependency-respecting order (Kahn's algorithm;
    among ready stages the one listed first in the catalog goes first).

    Example::

        >>> stage_order("intrusion_detection")[-1]
        'tracking'
    """
    app = APPLICATIONS[app] if isinstance(app, str) else app
    names = [s.name for s in app.stages]
    deps = {s.name: set(s.deps) for s in app.stages}
    unknown = {d for ds in deps.values() for d in ds} - set(names)
    if unknown:
        raise ValueError(f"{app.app_id}: unknown dependencies {sorted(unknown)}")
    done: list[str] = []
    while len(done) < len(names):
        ready = [n for n in names if n not in done and deps[n] <= set(done)]
        if not ready:
            raise ValueError(f"{app.app_id}: dependency cycle among "
                             f"{sorted(set(names) - set(done))}")
        done.append(ready[0])
    return done


def task_frames(app_id: str, input_size: int, seed: int,
                device: str | torch.device = "cpu") -> torch.Tensor:
    """The clip a task of ``app_id`` works on (its application's scene).

    Example::

        >>> tuple(task_frames("face_recognition", 4096, seed=0).shape)
        (8, 32, 40)
    """
    return make_frames(input_size, seed, device=device, scene=SCENE_FOR_APP[app_id])


def _check_app(app_id: str) -> None:
    if app_id not in APPLICATIONS:
        raise KeyError(f"unknown application {app_id!r}; known: {sorted(APPLICATIONS)}")


def task_payload(app_id: str, input_size: int, seed: int | str, quality: int = DEFAULT_QUALITY,
                 format: str = "JPEG") -> bytes:
    """A real clip for a task of ``app_id``, encoded for a TaskEvent's ``payload``: cut from the
    sample photographs with the application's scene, ``frame_shape(input_size)`` pixels,
    deterministic per ``seed`` (an int or the task id). See :mod:`workload.apps.images`.

    Example::

        >>> from workload.apps.images import inspect_clip
        >>> inspect_clip(task_payload("face_recognition", 4096, "t-1")).pixels
        10240
    """
    _check_app(app_id)
    return encode_frames(clip_for_task(seed, input_size, scene=SCENE_FOR_APP[app_id]),
                         format=format, quality=quality)


def task_frames_from_payload(app_id: str, payload: bytes, device: str | torch.device = "cpu",
                             limits: PayloadLimits = DEFAULT_LIMITS) -> torch.Tensor:
    """The clip a task of ``app_id`` carries in its ``payload``, in the layout of
    :func:`task_frames` ((T, H, W) float32 in [0, 1] on ``device``). Raises
    :class:`~workload.apps.images.PayloadError` (a ValueError) for a malformed payload or one
    over ``limits``, and KeyError for an unknown application.

    Example::

        >>> payload = task_payload("video_synopsis", 4096, seed=0)
        >>> tuple(task_frames_from_payload("video_synopsis", payload).shape)
        (8, 32, 40)
    """
    _check_app(app_id)
    return decode_clip(payload, device=device, limits=limits)


def run_task(app_id: str, input_size: int, seed: int, device: str | torch.device = "cpu",
             frames: torch.Tensor | None = None) -> dict[str, Any]:
    """Run a whole task: every stage of ``app_id`` in dependency order on one device.

    Returns {stage name: output}, in execution order. ``frames`` overrides the generated clip.

    Example::

        >>> out = run_task("face_recognition", 4096, seed=0)
        >>> type(out["face_compare"]).__name__
        'FaceMatches'
    """
    _check_app(app_id)
    app = APPLICATIONS[app_id]
    if frames is None:
        frames = task_frames(app_id, input_size, seed, device)
    outputs: dict[str, Any] = {}
    for name in stage_order(app):
        stage = app.stage(name)
        outputs[name] = run_stage(name, frames, {d: outputs[d] for d in stage.deps})
    return outputs


# ---------------------------------------------------------------------------------------------
# A task's answer

#: At most this many boxes / tracks / tubes are listed in a summary (counts cover all): the
#: summary rides in every TaskResult, so it stays under about 2 KB of JSON.
MAX_LISTED = 16


def _r(x: float) -> float:
    return round(float(x), 2)


def _intrusion_summary(outputs: dict[str, Any]) -> dict:
    result = outputs["tracking"]
    tracks = [{"id": tr.track_id, "first_frame": tr.frames[0], "last_frame": tr.frames[-1],
               "length": len(tr.frames), "box": [int(v) for v in tr.boxes[-1]],
               "intrusion": tr.track_id in result.intrusions}
              for tr in result.tracks[:MAX_LISTED]]
    keypoints = outputs.get("scale_space_extrema")
    return {"tracks": len(result.tracks), "intrusions": len(result.intrusions),
            "intruder_ids": result.intrusions[:MAX_LISTED], "detections": result.detections,
            "keypoints": keypoints.count if keypoints is not None else None,
            "zone": [_r(v) for v in result.zone], "tracked": tracks}


def _synopsis_summary(outputs: dict[str, Any]) -> dict:
    tubes, synopsis = outputs["tube_extraction"], outputs["tube_stitching"]
    clip_frames = int(tubes.labels.shape[0])
    boxes = [[int(v) for v in lo] + [int(v) for v in hi]
             for lo, hi in zip(tubes.lo[:MAX_LISTED].tolist(), tubes.hi[:MAX_LISTED].tolist())]
    return {"tubes": tubes.count, "clip_frames": clip_frames,
            "synopsis_frames": synopsis.length,
            "compression": _r(synopsis.length / clip_frames) if clip_frames else 0.0,
            "overlap": synopsis.overlap, "starts": synopsis.start[:MAX_LISTED].tolist(),
            "tube_boxes": boxes}


def _faces_summary(outputs: dict[str, Any]) -> dict:
    detections, matches = outputs["face_detection"], outputs["face_compare"]
    identity = matches.identity.cpu().tolist()
    known = [i for i in identity if i >= 0]
    frames = detections.frame.cpu().tolist()
    boxes = detections.boxes.cpu().tolist()
    scores = detections.scores.cpu().tolist()
    listed = [{"frame": f, "box": [_r(v) for v in b], "score": _r(s), "identity": i}
              for f, b, s, i in list(zip(frames, boxes, scores, identity))[:MAX_LISTED]]
    return {"faces": detections.count, "frames_with_faces": len(set(frames)),
            "identified": len(known),
            "identities": {str(i): known.count(i) for i in sorted(set(known))},
            "detected": listed}


# application -> (the stages its summary reads, the summary)
_SUMMARIES = {"intrusion_detection": (("tracking",), _intrusion_summary),
              "video_synopsis": (("tube_extraction", "tube_stitching"), _synopsis_summary),
              "face_recognition": (("face_detection", "face_compare"), _faces_summary)}
assert set(_SUMMARIES) == set(APPLICATIONS), "every application needs a summary"


def summarise_output(app_id: str, outputs: dict[str, Any]) -> dict:
    """The real answer of a task of ``app_id`` from its stage outputs ({stage name: output},
    as :func:`run_task` returns), as a small JSON-able dict (plain ints, floats, lists;
    at most :data:`MAX_LISTED` entries per list):

    - intrusion_detection: ``tracks``, ``intrusions`` (tracks entering the zone),
      ``intruder_ids``, ``detections`` (blobs), ``keypoints``, ``zone`` (y0, x0, y1, x1 px) and
      ``tracked`` (per track: id, first/last frame, length, last box, whether it intruded);
    - video_synopsis: ``tubes``, ``clip_frames``, ``synopsis_frames``, ``compression``
      (synopsis / clip length), ``overlap`` (voxels), ``starts`` and ``tube_boxes``
      (t0, y0, x0, t1, y1, x1);
    - face_recognition: ``faces``, ``frames_with_faces``, ``identified`` (matched the gallery),
      ``identities`` ({gallery identity: faces}), ``detected`` (frame, box, score, identity).

    Every summary also names its ``app_id``. Raises KeyError for an unknown application or a
    missing stage output the summary needs.

    Example::

        >>> import json
        >>> out = run_task("video_synopsis", 36_864, seed=1)
        >>> s = summarise_output("video_synopsis", out)
        >>> s["tubes"], s["clip_frames"], len(json.dumps(s)) < 2048
        (3, 17, True)
    """
    _check_app(app_id)
    needs, summary = _SUMMARIES[app_id]
    missing = [name for name in needs if name not in outputs]
    if missing:
        raise KeyError(f"{app_id}: the outputs lack the stage output(s) {missing} its summary "
                       "reads")
    return {"app_id": app_id, **summary(outputs)}
