"""Cluster spec files: the TaskManagers of a local Flink cluster and what makes them unequal.

Example::

    >>> spec = load_cluster_spec("default")
    >>> [tm.id for tm in spec.taskmanagers]
    ['tm_a', 'tm_b', 'tm_c']
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from streamplace.resources import cluster_spec_dir

__all__ = ["TaskManagerSpec", "LocalClusterSpec", "load_cluster_spec", "SpecError",
           "JVM_FIXED_OVERHEAD_MB"]

#: JVM parts we size explicitly and add to task heap + managed memory: framework heap 128,
#: framework off-heap 128, network 64, metaspace 512, JVM overhead 192 (MB). Metaspace: every
#: job a TaskManager runs loads the Kafka connector's classes again; 256 MB ran out
#: (OutOfMemoryError: Metaspace) after about 25 Python jobs in one test session.
JVM_METASPACE_MB = 512
JVM_FIXED_OVERHEAD_MB = 128 + 128 + 64 + JVM_METASPACE_MB + 192


class SpecError(ValueError):
    """A cluster spec that cannot be used, with the reason."""


class TaskManagerSpec(BaseModel):
    """One Flink TaskManager = one streamplace node."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="taskmanager.resource-id, node id and external resource name")
    cpu_cores: float = Field(gt=0, description="taskmanager.cpu.cores (what Flink is told)")
    cpu_affinity: list[int] = Field(default_factory=list,
                                    description="CPU ids the process is pinned to (taskset)")
    gpu_ids: list[int] = Field(default_factory=list,
                               description="GPU indices this node owns (CUDA_VISIBLE_DEVICES)")
    work_multiplier: float = Field(1.0, ge=1.0, description="repeat each unit of work this many "
                                   "times, to emulate a slower device")
    slots: int = Field(2, ge=1, description="amount of the node's external resource")
    task_heap_mb: int = Field(256, ge=64)
    managed_mb: int = Field(256, ge=64)
    threads: int = Field(1, ge=1, description="OMP/MKL/torch threads of its Python workers")
    labels: list[str] = Field(default_factory=list)

    @field_validator("id")
    @classmethod
    def _id_is_a_config_key(cls, value: str) -> str:
        # It becomes part of Flink option keys (external-resource.<id>.amount).
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", value):
            raise ValueError(f"node id {value!r} must start with a letter and contain only "
                             "letters, digits and underscores")
        return value

    @property
    def process_memory_mb(self) -> int:
        return self.task_heap_mb + self.managed_mb + JVM_FIXED_OVERHEAD_MB


class LocalClusterSpec(BaseModel):
    """The TaskManagers `streamplace cluster start` launches (not the simulator's cluster model,
    which lives in ``workload.model``)."""

    model_config = ConfigDict(extra="forbid")

    taskmanagers: list[TaskManagerSpec] = Field(min_length=1)
    source: str = ""

    @model_validator(mode="after")
    def _unique_ids(self) -> "LocalClusterSpec":
        ids = [tm.id for tm in self.taskmanagers]
        if len(set(ids)) != len(ids):
            raise ValueError(f"TaskManager ids must be unique, got {ids}")
        return self

    def node(self, node_id: str) -> TaskManagerSpec:
        for tm in self.taskmanagers:
            if tm.id == node_id:
                return tm
        raise KeyError(f"no TaskManager {node_id!r} in the cluster spec "
                       f"(known: {[tm.id for tm in self.taskmanagers]})")

    def check_fits_machine(self) -> None:
        cpus = os.cpu_count() or 1
        for tm in self.taskmanagers:
            bad = [c for c in tm.cpu_affinity if c >= cpus]
            if bad:
                raise SpecError(f"{tm.id}: cpu_affinity {bad} does not exist on this machine "
                                f"({cpus} CPUs)")


def load_cluster_spec(name_or_path: str | os.PathLike) -> LocalClusterSpec:
    """A shipped spec by name (``default``, ``gpu-host``) or a YAML file path."""
    path = Path(name_or_path)
    if not path.suffix:
        shipped = cluster_spec_dir() / f"{name_or_path}.yaml"
        if not shipped.is_file():
            names = sorted(p.stem for p in cluster_spec_dir().glob("*.yaml"))
            raise SpecError(f"no shipped cluster spec named {name_or_path!r}; choose one of "
                            f"{names} or give a YAML path")
        path = shipped
    if not path.is_file():
        raise SpecError(f"cluster spec {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
        spec = LocalClusterSpec.model_validate(data)
    except (yaml.YAMLError, ValidationError) as exc:
        raise SpecError(f"invalid cluster spec {path}:\n{exc}") from exc
    spec.source = str(path)
    return spec
