"""Public cost estimates: how long a stage or a task should take on a unit or a node.

Everything here comes from ``workload/calibration.yaml`` (measured, cited or assumed, each entry
says which) and, for the GPU speeds of K80 / P100 / V100, from Gavel's measured isolated
throughputs. Policies and node schedulers may use these estimates; the simulator's hidden truth
adds per-task noise and measured co-location interference on top, which policies never see.

GPU speed: a GPU is a model (its per-stage speed profile) and a spec speed (``GpuSpec.speed``,
relative to the reference GPU). A GPU of a calibrated model ``m`` whose spec says ``speed = s``
runs every stage ``s / calibrated_speed(m)`` times as fast as the calibrated ``m`` does, so a spec
carrying exactly the calibrated speed (the shipped scenarios) changes nothing. A model the
calibration does not know (say an ``h200``) has no per-stage profile of its own: it takes the
reference GPU's per-stage profile scaled by its spec speed (its memory is the spec's
``memory_gb``; its co-location behaviour the reference model's, ``simulator.ground_truth``).
Asked by model name alone (``speed=None``), a known model runs at its calibrated speed and an
unknown one raises ``KeyError``: without a spec there is nothing to scale.

Example::

    >>> costs = CostModel()
    >>> round(costs.cpu_ms("gmm_background", 36_864), 1) > 0
    True
    >>> v100 = costs.gpu_ms("face_encoding", 10_000, "v100")   # at its calibrated speed, 3.7
    >>> round(v100 / costs.gpu_ms("face_encoding", 10_000, "v100", speed=3 * 3.7), 6)
    3.0
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

from workload.catalog import APPLICATIONS, STAGE_TYPES
from workload.limits import short_repr
from workload.model import ComputingUnit, GpuSpec, NodeSpec, Task, parse_gpu_model

__all__ = ["StageCost", "Calibration", "load_calibration", "gpu_spec_speed", "CostModel",
           "calibrated_gpu_models", "check_gpu_model"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageCost:
    stage: str
    fixed_ms: float            # CPU ms at zero input (fit intercept, >= 0)
    per_pixel_ms: float        # CPU ms per input pixel (fit slope)
    gpu_speedup: float | None  # on the reference GPU; None = CPU only
    gavel_job: str | None      # measured job type standing in for its co-location behaviour
    gpu_profile: tuple[float, ...] | None


@dataclass(frozen=True)
class Calibration:
    raw: dict
    stages: dict[str, StageCost]
    source: str

    @property
    def gpu_models(self) -> dict[str, dict]:
        return self.raw["gpu_models"]

    @property
    def simulation(self) -> dict:
        return self.raw["simulation"]

    @property
    def paper_setting(self) -> dict:
        return self.raw["paper_setting"]


def _affine_fit(points: dict[int, float]) -> tuple[float, float]:
    (s1, m1), (s2, m2) = sorted(points.items())[:1] + sorted(points.items())[-1:]
    slope = max(0.0, (m2 - m1) / (s2 - s1)) if s2 != s1 else m1 / s1
    return max(0.0, m1 - slope * s1), slope


def _validate_gpu_models(raw: dict, source: str) -> None:
    """Every calibrated GPU model needs a finite positive speed and memory: a zero or NaN speed
    would turn into infinite or NaN stage times far from where it was written."""
    models = raw.get("gpu_models")
    if not isinstance(models, dict) or not models:
        raise ValueError(f"calibration {source}: gpu_models must be a non-empty mapping")
    for name, entry in models.items():
        for field_name in ("speed", "memory_gb"):
            value = entry.get(field_name) if isinstance(entry, dict) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value <= 0:
                raise ValueError(f"calibration {source}: gpu_models.{name}.{field_name} must be a "
                                 f"finite positive number, got {value!r}")
    reference = raw.get("stage_gpu_speedup", {}).get("reference_gpu")
    if reference not in models:
        raise ValueError(f"calibration {source}: stage_gpu_speedup.reference_gpu {reference!r} "
                         f"is not among gpu_models {sorted(models)}")


def load_calibration(path: str | Path | None = None) -> Calibration:
    """Read the calibration YAML (default: the shipped ``workload/calibration.yaml``)."""
    text = Path(path).read_text() if path else \
        (resources.files("workload") / "calibration.yaml").read_text()
    raw = yaml.safe_load(text)
    _validate_gpu_models(raw, str(path or "workload/calibration.yaml"))
    profile_rel = raw["stage_cpu_times"]["profile_file"]
    profile_path = Path(path).parent / profile_rel if path else \
        resources.files("workload") / profile_rel
    profile = json.loads(profile_path.read_text())
    points: dict[str, dict[int, float]] = {}
    for row in profile["rows"]:
        if row.get("device", "cpu") == "cpu":
            points.setdefault(row["stage_type"], {})[int(row["input_size"])] = \
                float(row["wall_ms_median"])
    stages = {}
    gpu_capable = {s.name: s.gpu_capable for app in APPLICATIONS.values() for s in app.stages}
    for stage in STAGE_TYPES:
        if stage not in points or len(points[stage]) < 2:
            raise ValueError(f"calibration: {profile_path} lacks two CPU sizes for {stage!r}")
        fixed, slope = _affine_fit(points[stage])
        speedup = raw["stage_gpu_speedup"].get(stage) if gpu_capable[stage] else None
        if gpu_capable[stage] and speedup is None:
            raise ValueError(f"calibration: no stage_gpu_speedup for GPU-capable stage {stage!r}")
        profile_vec = raw["stage_gpu_profile"].get(stage)
        stages[stage] = StageCost(stage, fixed, slope, speedup,
                                  raw["stage_to_gavel_job"].get(stage),
                                  tuple(profile_vec) if profile_vec else None)
    return Calibration(raw, stages, str(path or "workload/calibration.yaml"))


@lru_cache(maxsize=1)
def _shipped_gpu_speeds() -> dict[str, float]:
    return {name: float(entry["speed"]) for name, entry in load_calibration().gpu_models.items()}


def calibrated_gpu_models() -> tuple[str, ...]:
    """The GPU models the shipped calibration knows (a GpuSpec of one needs no speed)."""
    return tuple(sorted(_shipped_gpu_speeds()))


def check_gpu_model(name) -> str:
    """``name`` when it is a GPU model the shipped calibration knows, or any model with its
    speed (``"h100:9.5"``, :func:`workload.model.parse_gpu_model`): the one check of a
    ``gpu_model`` setting (the hook's, the service's, a router node's), so each prices a GPU
    the same way.

    >>> check_gpu_model("t4"), check_gpu_model("h100:9.5")
    ('t4', 'h100:9.5')
    """
    try:
        model, speed = parse_gpu_model(name)
    except ValueError as exc:
        model, speed, problem = None, None, f" ({exc})"
    else:
        problem = ""
    if model is None or (speed is None and model not in _shipped_gpu_speeds()):
        raise ValueError(f"gpu_model must be one of the calibration's GPU models "
                         f"{list(calibrated_gpu_models())}, or any model with its speed "
                         f"relative to the reference GPU as '<model>:<speed>' (e.g. "
                         f"'h100:9.5'; the calibration's v100 is 3.7), got "
                         f"{short_repr(name)}{problem}")
    return name


def gpu_spec_speed(gpu: GpuSpec, calibration: Calibration | None = None) -> float:
    """The speed ``gpu`` runs at (relative to the reference GPU): its spec speed, or its model's
    calibrated speed when the spec leaves it out. A model the calibration does not know needs a
    spec speed (ValueError naming it otherwise).

    >>> gpu_spec_speed(GpuSpec("v100", 16)), gpu_spec_speed(GpuSpec("h200", 141, 8.0))
    (3.7, 8.0)
    """
    if gpu.speed is not None:
        return float(gpu.speed)
    speeds = _shipped_gpu_speeds() if calibration is None else \
        {name: float(entry["speed"]) for name, entry in calibration.gpu_models.items()}
    if gpu.model not in speeds:
        raise ValueError(f"GPU model {gpu.model!r} is not in the calibration "
                         f"({', '.join(sorted(speeds))}): give its speed relative to the "
                         f"reference GPU, e.g. GpuSpec({gpu.model!r}, {gpu.memory_gb:g}, 8.0)")
    return speeds[gpu.model]


@lru_cache(maxsize=4)
def _default_colocation():
    try:
        from workload.traces.gavel import load_gavel
        return load_gavel()
    except Exception as exc:  # noqa: BLE001 - data is optional; say so and fall back
        log.info("Gavel data unavailable (%s): GPU speeds from calibration.yaml only", exc)
        return None


#: Most unit times a CostModel remembers (cleared whole when full: bounded memory on a long
#: stream of distinct input sizes).
UNIT_MS_CACHE_ENTRIES = 200_000
_MISSING = object()


class CostModel:
    """Estimated stage and task times from the calibration.

    ``colocation`` is a Gavel ``ColocationTable`` used only for isolated GPU speed factors
    (``None``: the calibration's fallback speeds).
    """

    def __init__(self, calibration: Calibration | None = None, colocation="default",
                 work_scale: float = 1.0):
        # work_scale multiplies every stage's compute time: the paper's scenario uses it to stand
        # for the heavier per-pixel work of the paper's implementations (calibration.yaml).
        if work_scale <= 0:
            raise ValueError(f"work_scale must be positive, got {work_scale}")
        self.work_scale = float(work_scale)
        self.calibration = calibration or load_calibration()
        self.colocation = _default_colocation() if colocation == "default" else colocation
        self._speed_cache: dict[tuple[str, str, float | None], float] = {}
        self._coefficient_cache: dict[tuple, dict[str, tuple[float, float]]] = {}
        self._unit_ms_cache: dict[tuple, float | None] = {}
        self._memory = self.calibration.raw["stage_gpu_memory_mb_per_mpixel"]

    def stage(self, stage: str) -> StageCost:
        try:
            return self.calibration.stages[stage]
        except KeyError:
            raise KeyError(f"no calibration for stage {stage!r}") from None

    @property
    def reference_gpu(self) -> str:
        """The calibration's reference GPU model (speed 1): what unknown models are scaled from."""
        return self.calibration.raw["stage_gpu_speedup"]["reference_gpu"]

    def calibrated_gpu_speed(self, gpu_model: str) -> float | None:
        """The model's calibrated overall speed (``gpu_models.<model>.speed``), None if unknown.

        >>> costs = CostModel(colocation=None)
        >>> costs.calibrated_gpu_speed("v100"), costs.calibrated_gpu_speed("h200")
        (3.7, None)
        """
        entry = self.calibration.gpu_models.get(gpu_model)
        return None if entry is None else float(entry["speed"])

    def _calibrated_stage_speed(self, stage: str, gpu_model: str) -> float:
        """Per-stage speed of a calibrated model at its calibrated speed (Gavel where measured)."""
        models = self.calibration.gpu_models
        if gpu_model not in models:  # a ValueError, as gpu_spec_speed's for the same mistake
            raise ValueError(f"unknown GPU model {gpu_model!r}; calibration knows "
                           f"{sorted(models)} (give the GPU's spec speed to simulate it)")
        speed = float(models[gpu_model]["speed"])
        job = self.stage(stage).gavel_job
        table = self.colocation
        if table is not None and job and gpu_model in table.gpu_types \
                and "k80" in table.gpu_types:
            try:
                speed = table.speed_factor(job, gpu_model, reference="k80")
            except (KeyError, ValueError, ZeroDivisionError):
                pass
        return speed

    def gpu_speed(self, stage: str, gpu_model: str, speed: float | None = None) -> float:
        """Speed of a GPU relative to the reference GPU for this stage.

        ``speed`` is the GPU's spec speed (``GpuSpec.speed``); None means the model's calibrated
        speed. See the module docstring for how the two combine and for unknown models.

        >>> costs = CostModel(colocation=None)
        >>> costs.gpu_speed("face_encoding", "v100"), costs.gpu_speed("face_encoding", "h200", 8.0)
        (3.7, 8.0)
        """
        key = (stage, gpu_model, speed)
        if key not in self._speed_cache:
            if speed is not None and (isinstance(speed, bool) or not math.isfinite(speed)
                                      or speed <= 0):
                raise ValueError(f"GPU speed of {gpu_model!r} must be finite and positive, "
                                 f"got {speed!r}")
            calibrated = self.calibrated_gpu_speed(gpu_model)
            if speed is None:
                value = self._calibrated_stage_speed(stage, gpu_model)
            elif calibrated is None:
                # Unknown model: the reference GPU's per-stage profile, scaled by the spec speed.
                reference = self.reference_gpu
                value = self._calibrated_stage_speed(stage, reference) * (
                    speed / self.calibrated_gpu_speed(reference))
            else:
                # The ratio first: a spec at exactly the calibrated speed gives a factor of
                # exactly 1.0, so the shipped scenarios keep bit-identical times.
                value = self._calibrated_stage_speed(stage, gpu_model) * (speed / calibrated)
            self._speed_cache[key] = value
        return self._speed_cache[key]

    def cpu_ms(self, stage: str, input_size: int, cpu_speed: float = 1.0) -> float:
        cost = self.stage(stage)
        return self.work_scale * (cost.fixed_ms + cost.per_pixel_ms * input_size) / cpu_speed

    def gpu_ms(self, stage: str, input_size: int, gpu_model: str,
               speed: float | None = None) -> float | None:
        """Stage time on a GPU of ``gpu_model`` with spec speed ``speed`` (None: the model's
        calibrated speed); None for CPU-only stages."""
        cost = self.stage(stage)
        if cost.gpu_speedup is None:
            return None
        return (self.cpu_ms(stage, input_size) / cost.gpu_speedup
                / self.gpu_speed(stage, gpu_model, speed))

    def unit_ms(self, stage: str, input_size: int, unit: ComputingUnit) -> float | None:
        """Stage time on one unit: a core at its ``speed``, a GPU of its ``model`` at its
        ``speed`` (the spec speed, relative to the reference GPU)."""
        # Node schedulers ask this for every (waiting stage, unit) pair at every decision: a
        # saturated node asks the same few thousand questions millions of times.
        key = (stage, input_size, unit.kind, unit.model, unit.speed)
        cached = self._unit_ms_cache.get(key, _MISSING)
        if cached is not _MISSING:
            return cached
        if len(self._unit_ms_cache) >= UNIT_MS_CACHE_ENTRIES:
            self._unit_ms_cache.clear()
        value = (self.cpu_ms(stage, input_size, unit.speed) if unit.kind == "cpu"
                 else self.gpu_ms(stage, input_size, unit.model, unit.speed))
        self._unit_ms_cache[key] = value
        return value

    def gpu_memory_mb(self, stage: str, input_size: int) -> float:
        rate = self._memory.get(stage, self._memory["default"])
        return self._memory["context_mb"] + rate * input_size / 1e6

    def stage_best_ms(self, stage: str, input_size: int, node: NodeSpec) -> float:
        """The faster of one of the node's cores and its fastest GPU, for this stage alone."""
        best = self.cpu_ms(stage, input_size, node.cpu_speed)
        # Each distinct (model, spec speed): two GPUs of one model may differ in speed.
        for model, speed in dict.fromkeys((g.model, g.speed) for g in node.gpus):
            gpu_time = self.gpu_ms(stage, input_size, model, speed)
            if gpu_time is not None:
                best = min(best, gpu_time)
        return best

    def transfer_s(self, task: Task, node: NodeSpec) -> float:
        """Input bytes (one byte per pixel) over the node's downlink."""
        return task.input_size / (node.downlink_mbps * 1e6 / 8)

    def task_ms_on(self, task: Task, node: NodeSpec) -> float:
        """Estimated makespan of the task alone on an idle node: its DAG's critical path with
        every stage on its best unit, plus the input transfer."""
        finish: dict[str, float] = {}
        for stage in APPLICATIONS[task.app_id].stages:
            start = max((finish[d] for d in stage.deps), default=0.0)
            finish[stage.name] = start + self.stage_best_ms(stage.name, task.input_size, node)
        return max(finish.values()) + 1000.0 * self.transfer_s(task, node)

    def task_time_coefficients(self, node: NodeSpec) -> dict[str, tuple[float, float]]:
        """Per application: (fixed_s, per_pixel_s) such that ``task_ms_on / 1000`` is about
        ``fixed_s + per_pixel_s * input_size`` on this node. Fitted through two sizes (the
        estimate is affine in the input size along a fixed critical path), cached per distinct
        node shape, so hot paths (the router, the fast simulator) never walk a DAG per task."""
        # GPU spec speeds are in the key: two nodes of the same models at different speeds
        # have different tables.
        key = (node.cpu_cores, node.cpu_speed, tuple((g.model, g.speed) for g in node.gpus),
               node.downlink_mbps)
        cache = self._coefficient_cache
        if key not in cache:
            small, large = 1_000_000, 100_000_000
            per_app = {}
            for app in APPLICATIONS:
                t_small = self.task_ms_on(Task("x", app, small), node) / 1000.0
                t_large = self.task_ms_on(Task("x", app, large), node) / 1000.0
                slope = (t_large - t_small) / (large - small)
                per_app[app] = (max(0.0, t_small - slope * small), slope)
            cache[key] = per_app
        return cache[key]

    def task_work_ms(self, task: Task, node: NodeSpec) -> float:
        """Sum of the task's stage times on their best units: the unit-time it occupies."""
        return sum(self.stage_best_ms(s.name, task.input_size, node)
                   for s in APPLICATIONS[task.app_id].stages)
