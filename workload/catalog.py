"""The paper's three video-analytics applications as stage DAGs: plain data, no torch.

Zhang, Geng & Ma (TPDS 2021) evaluate intrusion detection, video synopsis and face recognition,
each a DAG of subtask types (our "stages"; see ARCHITECTURE.md's glossary). Stage *types* are
global: the GMM background model and frame differencing are the same operators in intrusion
detection and video synopsis, so an interference or speed-up profile learned for one applies to
the other (the paper's STDM has one row per subtask type).

The DAG shapes below are our reading of the paper (open point: it lists the stages, not the
edges): stages that only need the frames start in parallel, later stages wait for their inputs.
``gpu_capable=False`` marks the stages the paper runs on CPU only.

The executable operators live in ``workload.apps`` (torch, CPU or CUDA); this module is what the
simulator, the policies and the Avro contract need, and imports nothing heavy.

Example::

    >>> from workload.catalog import APPLICATIONS
    >>> [s.name for s in APPLICATIONS["face_recognition"].stages][:2]
    ['face_detection', 'face_landmarks']
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StageDef", "AppDef", "APPLICATIONS", "STAGE_TYPES", "app_ids"]


@dataclass(frozen=True)
class StageDef:
    """One stage of an application DAG.

    name: global stage-type id (shared across applications that run the same operator).
    deps: names of the stages of the same application whose outputs this stage needs.
    gpu_capable: False for the stages the paper runs on CPU only.
    """

    name: str
    deps: tuple[str, ...] = ()
    gpu_capable: bool = True


@dataclass(frozen=True)
class AppDef:
    """An application (the paper's task type, TID): a DAG of stages in topological order."""

    app_id: str
    stages: tuple[StageDef, ...]

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for stage in self.stages:
            missing = [d for d in stage.deps if d not in seen]
            if missing:
                raise ValueError(
                    f"{self.app_id}: stage {stage.name!r} depends on {missing}, "
                    "which do not come before it (stages must be in topological order)")
            if stage.name in seen:
                raise ValueError(f"{self.app_id}: stage {stage.name!r} appears twice")
            seen.add(stage.name)

    def stage(self, name: str) -> StageDef:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"{self.app_id} has no stage {name!r}")


APPLICATIONS: dict[str, AppDef] = {
    app.app_id: app
    for app in (
        AppDef("intrusion_detection", (
            StageDef("gmm_background"),
            StageDef("frame_difference"),
            StageDef("gaussian_pyramid"),
            StageDef("dog_pyramid", ("gaussian_pyramid",)),
            StageDef("scale_space_extrema", ("dog_pyramid",)),
            StageDef("tracking", ("gmm_background", "frame_difference", "scale_space_extrema"),
                     gpu_capable=False),
        )),
        AppDef("video_synopsis", (
            StageDef("gmm_background"),
            StageDef("frame_difference"),
            StageDef("tube_extraction", ("gmm_background", "frame_difference")),
            StageDef("tube_stitching", ("tube_extraction",), gpu_capable=False),
        )),
        AppDef("face_recognition", (
            StageDef("face_detection"),
            StageDef("face_landmarks", ("face_detection",)),
            StageDef("face_encoding", ("face_landmarks",)),
            StageDef("face_distance", ("face_encoding",)),
            StageDef("face_compare", ("face_distance",)),
        )),
    )
}

#: Every stage type, in first-seen order (the STDM's rows).
STAGE_TYPES: tuple[str, ...] = tuple(dict.fromkeys(
    s.name for app in APPLICATIONS.values() for s in app.stages))


def app_ids() -> tuple[str, ...]:
    """The application ids (task types), in a fixed order: index = the paper's TID."""
    return tuple(APPLICATIONS)
