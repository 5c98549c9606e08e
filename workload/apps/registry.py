"""The stage-type -> operator registry and a simple reference runner for whole tasks.

Every operator has the signature ``op(frames, inputs, **options) -> output``: ``frames`` is the
task's (T, H, W) clip (the stages of a task share it, as in the paper) and ``inputs`` maps each
dependency's stage name to its output. This runner executes one task's DAG sequentially in
dependency order; the co-scheduling executor (IAWP) runs the same operators concurrently.

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
from .pyramid import dog_pyramid, gaussian_pyramid, scale_space_extrema
from .synopsis import tube_extraction, tube_stitching
from .tracking import tracking

__all__ = ["Operator", "OPERATORS", "SCENE_FOR_APP", "run_stage", "stage_order", "run_task",
           "task_frames"]

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


def run_task(app_id: str, input_size: int, seed: int, device: str | torch.device = "cpu",
             frames: torch.Tensor | None = None) -> dict[str, Any]:
    """Run a whole task: every stage of ``app_id`` in dependency order on one device.

    Returns {stage name: output}, in execution order. ``frames`` overrides the generated clip.

    Example::

        >>> out = run_task("face_recognition", 4096, seed=0)
        >>> type(out["face_compare"]).__name__
        'FaceMatches'
    """
    if app_id not in APPLICATIONS:
        raise KeyError(f"unknown application {app_id!r}; known: {sorted(APPLICATIONS)}")
    app = APPLICATIONS[app_id]
    if frames is None:
        frames = task_frames(app_id, input_size, seed, device)
    outputs: dict[str, Any] = {}
    for name in stage_order(app):
        stage = app.stage(name)
        outputs[name] = run_stage(name, frames, {d: outputs[d] for d in stage.deps})
    return outputs
