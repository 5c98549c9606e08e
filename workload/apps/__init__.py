"""The paper's video-analytics applications as real stage operators (torch, CPU or CUDA).

``workload.catalog`` says which stages an application has and how they depend on one another;
this package runs them. It is the only part of ``workload`` that imports torch.

- :mod:`.frames`: deterministic synthetic clips (``input_size`` = pixels, see ``frame_shape``).
- :mod:`.background`, :mod:`.pyramid`, :mod:`.tracking`, :mod:`.synopsis`, :mod:`.faces`: the
  operators, one per stage type; :mod:`.filters` and :mod:`.components` are their shared
  primitives.
- :mod:`.registry`: ``OPERATORS``, ``run_stage``, ``run_task`` (a sequential reference runner).
- :mod:`.profiling`: per-stage wall time, peak memory and (on CUDA) GPU utilisation;
  ``python -m workload.apps.profiling --out FILE.json``.

Example::

    >>> from workload.apps import run_task
    >>> out = run_task("intrusion_detection", input_size=36_864, seed=1)
    >>> sorted(out) == sorted(OPERATORS_BY_APP["intrusion_detection"])
    True
"""

from __future__ import annotations

from workload.catalog import APPLICATIONS

from .frames import DEFAULT_INPUT_SIZE, Scene, frame_shape, make_frames, make_scene
from .registry import OPERATORS, SCENE_FOR_APP, run_stage, run_task, stage_order, task_frames

__all__ = ["DEFAULT_INPUT_SIZE", "Scene", "frame_shape", "make_frames", "make_scene",
           "OPERATORS", "OPERATORS_BY_APP", "SCENE_FOR_APP", "run_stage", "run_task",
           "stage_order", "task_frames", "StageProfile", "profile_stage", "profile_all"]

#: The stage types of each application, in catalog order.
OPERATORS_BY_APP: dict[str, tuple[str, ...]] = {
    app_id: tuple(s.name for s in app.stages) for app_id, app in APPLICATIONS.items()}


def __getattr__(name: str):
    # Profiling pulls in tracemalloc and the profiler; load it only when asked for.
    if name in ("StageProfile", "profile_stage", "profile_all"):
        from . import profiling
        return getattr(profiling, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
