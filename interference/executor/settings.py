"""What a node's executor runs on and how: one settings class per executor, one shared base.

:class:`NodeSettings` holds what both executors share (the node, its scheduler, its units, retries,
admission, the work multiplier) and reads the TaskManager's environment (:meth:`from_env`);
:class:`ExecutorSettings` (the built-in video-analytics apps, :class:`NodeExecutor`) and
:class:`OperatorExecutorSettings` (the user's own operator, :class:`OperatorExecutor`) add their
own fields.

Example::

    >>> ExecutorSettings(cpu_workers=2, use_gpu="never").repeats
    1
    >>> OperatorExecutorSettings(batching=False, work_multiplier=2.4).repeats
    2
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from workload.limits import MEMORY_FRACTION

__all__ = ["NodeSettings", "ExecutorSettings", "OperatorExecutorSettings", "ENV_NODE_ID",
           "ENV_WORK_MULTIPLIER", "ENV_TASK_TYPE_MULTIPLIERS", "parse_task_type_multipliers"]

#: Environment variables read by :meth:`NodeSettings.from_env` (a TaskManager exports them
#: before it starts, and its Python workers inherit them).
ENV_NODE_ID = "STREAMPLACE_NODE_ID"
ENV_WORK_MULTIPLIER = "STREAMPLACE_WORK_MULTIPLIER"
#: JSON object {task type: factor}: the cluster spec's ``task_type_multipliers`` of this node
ENV_TASK_TYPE_MULTIPLIERS = "STREAMPLACE_TASK_TYPE_MULTIPLIERS"
#: bounds on what that variable may hold (the spec's own bounds; the variable is re-checked
#: because anything may have set it)
MAX_TASK_TYPES = 64
MAX_FACTOR = 100.0
MAX_ENV_CHARS = 16_384


def parse_task_type_multipliers(text: str) -> dict[str, float]:
    """``{task type: factor}`` from :data:`ENV_TASK_TYPE_MULTIPLIERS`'s JSON, bounded: at most
    MAX_TASK_TYPES entries, each factor finite in [1, MAX_FACTOR]; anything else is a
    ValueError that names the problem.

    >>> parse_task_type_multipliers('{"text_inference": 3}')
    {'text_inference': 3.0}
    >>> parse_task_type_multipliers('{"a": "NaN"}')
    Traceback (most recent call last):
    ...
    ValueError: STREAMPLACE_TASK_TYPE_MULTIPLIERS: 'a' -> 'NaN' is not a number in [1, 100]
    """
    if len(text) > MAX_ENV_CHARS:
        raise ValueError(f"{ENV_TASK_TYPE_MULTIPLIERS}: {len(text)} characters, at most "
                         f"{MAX_ENV_CHARS}")
    try:
        data = json.loads(text)
    except ValueError:
        raise ValueError(f"{ENV_TASK_TYPE_MULTIPLIERS} is not JSON: {text[:80]!r}") from None
    if not isinstance(data, dict) or len(data) > MAX_TASK_TYPES:
        raise ValueError(f"{ENV_TASK_TYPE_MULTIPLIERS} must be an object of at most "
                         f"{MAX_TASK_TYPES} task types")
    factors = {}
    for task_type, factor in data.items():
        ok = (isinstance(factor, (int, float)) and not isinstance(factor, bool)
              and math.isfinite(factor) and 1.0 <= factor <= MAX_FACTOR)
        if not ok:
            raise ValueError(f"{ENV_TASK_TYPE_MULTIPLIERS}: {task_type[:40]!r} -> "
                             f"{str(factor)[:40]!r} is not a number in [1, {MAX_FACTOR:g}]")
        factors[task_type] = float(factor)
    return factors


@dataclass
class NodeSettings:
    """Settings every node executor has.

    node_id: the node (TaskManager resource id) reported in outcomes and snapshots.
    scheduler: a name of the ``interference.schedulers`` registry (fcfs, mct, pats, heft,
        mystic, iawp).
    cpu_workers: CPU units (worker threads); 0 = one per CPU in ``os.sched_getaffinity(0)``.
    use_gpu: "auto" (the CUDA devices torch sees, if any), "never", or "always" (error without).
    gpu_streams_per_device: stages that may co-run on one GPU (one CUDA stream each).
    work_multiplier: each stage call runs ``max(1, round(m))`` times: a slower node made real on
        one host (the work is done, never slept).
    task_type_multipliers: {task type: factor}: that type's stage calls run
        ``max(1, round(work_multiplier x factor))`` times (a node slow for one application
        only; the cluster spec's emulation field, never read by a policy).
    max_attempts: tries per stage (exception, CUDA OOM) before its task fails.
    max_in_flight: tasks accepted at once; further submits wait for a slot.
    node_memory_bytes: the node's memory for the per-task budget; 0 = what this process can
        have (the smaller of the host's memory and its cgroup's limit, see
        :mod:`interference.executor.memory`).
    task_memory_fraction: a task whose estimated memory (size x bytes per unit) exceeds this
        share of ``node_memory_bytes`` is refused at admission, FAILED before any work.
    limit_address_space: also cap the Python worker's ``RLIMIT_AS`` (off by default: the limit
        is per process, not per task, and CUDA reserves far more address space than it uses;
        never applied with a GPU unit). See :mod:`interference.executor.memory`.
    """

    node_id: str = "local"
    scheduler: str = "iawp"
    cpu_workers: int = 0
    use_gpu: str = "auto"
    gpu_streams_per_device: int = 2
    work_multiplier: float = 1.0
    task_type_multipliers: dict = field(default_factory=dict)
    max_attempts: int = 2
    max_in_flight: int = 64
    node_memory_bytes: int = 0
    task_memory_fraction: float = MEMORY_FRACTION
    limit_address_space: bool = False

    def __post_init__(self) -> None:
        if self.use_gpu not in ("auto", "never", "always"):
            raise ValueError(f"use_gpu must be 'auto', 'never' or 'always', got {self.use_gpu!r}")
        if self.cpu_workers < 0:
            raise ValueError(f"cpu_workers must be >= 0 (0: all CPUs), got {self.cpu_workers}")
        if self.gpu_streams_per_device < 1:
            raise ValueError("gpu_streams_per_device must be at least 1")
        if not self.work_multiplier > 0:
            raise ValueError(f"work_multiplier must be positive, got {self.work_multiplier}")
        self.task_type_multipliers = parse_task_type_multipliers(
            json.dumps(dict(self.task_type_multipliers)))
        if self.max_attempts < 1 or self.max_in_flight < 1:
            raise ValueError("max_attempts and max_in_flight must be at least 1")
        if self.node_memory_bytes < 0:
            raise ValueError(f"node_memory_bytes must be >= 0 (0: detect), got "
                             f"{self.node_memory_bytes}")
        if not 0 < self.task_memory_fraction <= 1:
            raise ValueError(f"task_memory_fraction must be in (0, 1], got "
                             f"{self.task_memory_fraction}")

    @property
    def repeats(self) -> int:
        """How many times each stage call really runs."""
        return max(1, round(self.work_multiplier))

    def repeats_for(self, task_type) -> int:
        """How many times each stage call of a ``task_type`` task really runs.

        >>> NodeSettings(task_type_multipliers={"ocr": 3}).repeats_for("ocr")
        3
        >>> NodeSettings(task_type_multipliers={"ocr": 3}).repeats_for("other")
        1
        """
        factor = self.task_type_multipliers.get(task_type, 1.0) if isinstance(task_type, str) \
            else 1.0
        return max(1, round(self.work_multiplier * factor))

    @classmethod
    def from_env(cls, **overrides):
        """Defaults, then ``STREAMPLACE_NODE_ID`` / ``STREAMPLACE_WORK_MULTIPLIER`` /
        ``STREAMPLACE_TASK_TYPE_MULTIPLIERS`` from the
        environment (a TaskManager's Python worker inherits them), then ``overrides``."""
        values: dict[str, Any] = {}
        if os.environ.get(ENV_NODE_ID):
            values["node_id"] = os.environ[ENV_NODE_ID]
        if os.environ.get(ENV_WORK_MULTIPLIER):
            try:
                values["work_multiplier"] = float(os.environ[ENV_WORK_MULTIPLIER])
            except ValueError:
                raise ValueError(f"{ENV_WORK_MULTIPLIER} must be a number, got "
                                 f"{os.environ[ENV_WORK_MULTIPLIER]!r}") from None
        if os.environ.get(ENV_TASK_TYPE_MULTIPLIERS):
            values["task_type_multipliers"] = parse_task_type_multipliers(
                os.environ[ENV_TASK_TYPE_MULTIPLIERS])
        values.update(overrides)
        return cls(**values)


@dataclass
class ExecutorSettings(NodeSettings):
    """:class:`NodeSettings` for :class:`~interference.executor.NodeExecutor` (the built-in
    video-analytics apps), plus:

    seed_from_task_id: frames seeded by a stable hash of the task id (else seed 0 for all).
    """

    seed_from_task_id: bool = True


@dataclass
class OperatorExecutorSettings(NodeSettings):
    """:class:`NodeSettings` for :class:`~interference.executor.OperatorExecutor` (the user's
    own :class:`~workload.operators.StagedOperator`), plus:

    batching: form batches from the ready inputs of different records (each stage's
        :class:`~workload.operators.BatchPolicy`); False = every stage call gets one input
        (the "batching off" ablation).
    interference: IAWP's GPU co-run rule when ``scheduler`` is "iawp": "slowdown" (default:
        the slowdown model learned online from this node's measured co-runs, fed through
        ``observe_corun``) or "cosine" (the paper's profile similarity; user stages have no
        profiled GPU metrics, so the cosine rule treats every pair as non-interfering).
    default_stage_ms: the estimated time of a stage call before anything was measured (the
        schedulers' neutral prior; replaced by this node's measurements as they come in).
    gpu_speedup_prior: the assumed GPU-over-CPU speedup of a ``device="gpu"`` stage until it
        was measured on both kinds of unit (``"any"`` stages assume 1: no preference).
    max_traceback_chars: a failed record's traceback is cut to its last this many characters.
    chain_cpu_stages: run consecutive per-record CPU steps as one stage
        (``workload.operators.chain_cpu_stages``), as Flink chains operators: each dispatched
        call costs scheduling work that light steps do not repay.
    call_groups: a per-record stage without a batch policy takes the inputs of several records
        ready at once in one call, the function still called once per input
        (:mod:`interference.executor.batching`); False = one input per call (with batching
        off there are none either).
    """

    batching: bool = True
    call_groups: bool = True
    interference: str = "slowdown"
    default_stage_ms: float = 1.0
    gpu_speedup_prior: float = 8.0
    max_traceback_chars: int = 4000
    chain_cpu_stages: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.interference not in ("slowdown", "cosine"):
            raise ValueError(f"interference must be 'slowdown' or 'cosine', got "
                             f"{self.interference!r}")
        if not self.default_stage_ms > 0 or not self.gpu_speedup_prior > 0:
            raise ValueError("default_stage_ms and gpu_speedup_prior must be positive")
        if self.max_traceback_chars < 100:
            raise ValueError("max_traceback_chars must be at least 100")
