"""Cluster spec files: the TaskManagers of a Flink cluster and what makes them unequal.

The one home of the cluster-spec contract (model, loader, shipped files). It sits at the bottom
of the dependency chain because everything above reads it: the placement service (node
capacities for its plan and cost model), the hook in ``pyflink_jobs`` (router nodes, task
limits, executor memory) and ``streamplace`` (the local launcher, ``streamplace cluster``).
``streamplace.cluster_spec`` re-exports this module for old imports.

Shipped specs (``default``, ``gpu-host``) live in ``workload/specs/`` and are read with
importlib.resources, so an installed wheel finds them outside a checkout (hatch ships every file
of the ``workload`` package, as it does ``calibration.yaml`` and the Avro schemas).

Also here, because the service's settings need it and may not import ``streamplace``: where the
runtime state of a streamplace installation lives (:func:`default_home`).

Example::

    >>> spec = load_cluster_spec("default")
    >>> [tm.id for tm in spec.taskmanagers]
    ['tm_a', 'tm_b', 'tm_c']
    >>> spec.node("tm_a").process_memory_mb == 384 + 384 + JVM_FIXED_OVERHEAD_MB
    True
"""

from __future__ import annotations

import math
import os
import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

__all__ = ["TaskManagerSpec", "LocalClusterSpec", "load_cluster_spec", "SpecError",
           "JVM_METASPACE_MB", "JVM_FIXED_OVERHEAD_MB", "SHIPPED_SPEC_NAME",
           "cluster_spec_dir", "shipped_spec_names", "checkout_root", "default_home",
           "ISOLATION_MODES", "MEMORY_LIMIT_MARGIN_MB", "MAX_LINK_MBPS", "MAX_CPU_QUOTA",
           "MAX_TASK_TYPE_MULTIPLIERS", "MAX_TASK_TYPE_MULTIPLIER",
           "MIN_CPU_QUOTA", "DEFAULT_LINK_MBPS", "MAX_CPU_CORES", "MAX_CPU_ID", "MAX_GPUS",
           "MAX_SLOTS", "MAX_THREADS", "MIN_MEMORY_MB", "MAX_MEMORY_MB",
           "DEFAULT_TASK_HEAP_MB", "DEFAULT_MANAGED_MB", "MAX_WORK_MULTIPLIER",
           "MAX_TASKMANAGERS", "MAX_SPEC_BYTES", "PlainYamlLoader", "PlainYamlError",
           "parse_plain_yaml", "read_plain_yaml", "NODE_ID_PATTERN"]

#: JVM parts we size explicitly and add to task heap + managed memory: framework heap 128,
#: framework off-heap 128, network 64, metaspace 512, JVM overhead 192 (MB). Metaspace: every
#: job a TaskManager runs loads the Kafka connector's classes again; 256 MB ran out
#: (OutOfMemoryError: Metaspace) after about 25 Python jobs in one test session.
JVM_METASPACE_MB = 512
JVM_FIXED_OVERHEAD_MB = 128 + 128 + 64 + JVM_METASPACE_MB + 192

#: What a node (TaskManager) id may look like: it becomes part of Flink option keys
#: (``external-resource.<id>.amount``) and of the hook's operator names.
NODE_ID_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]*")

#: What a shipped spec's name may look like: a file stem, never a path (``../x`` must not
#: reach outside ``workload/specs``).
SHIPPED_SPEC_NAME = r"[A-Za-z0-9][A-Za-z0-9_-]*"

#: How a TaskManager is kept apart from the others: ``cpuset`` pins it with taskset on the one
#: shared network (today's launcher); ``host`` gives it an emulated host of its own (network
#: namespace, address, shaped link, CPU quota, memory limit; ``streamplace.hosts``).
ISOLATION_MODES = ("cpuset", "host")
#: Memory a host gets above the TaskManager's JVM process size when ``memory_limit_mb`` is
#: unset: its Python workers (process mode) live in the same cgroup and are not part of the JVM
#: size; one worker with numpy and the executor takes about 300-500 MiB.
MEMORY_LIMIT_MARGIN_MB = 1536
#: Link rate of a host whose spec gives none: 10 Gbit/s, i.e. no bottleneck the policy could see.
DEFAULT_LINK_MBPS = 10_000.0
#: 100 Gbit/s: the fastest link a spec may ask for (a bigger figure is a unit mistake, e.g.
#: bit/s for Mbit/s). Same bound as ``streamplace.hosts.spec.MAX_LINK_MBPS``.
MAX_LINK_MBPS = 100_000.0
#: CPU quota bounds, cores: below 0.01 the kernel refuses the cfs quota (1 ms of 100 ms); above
#: 4096 it is a typo.
MIN_CPU_QUOTA = 0.01
MAX_CPU_QUOTA = 4096.0
#: Bounds of ``task_type_multipliers``: how many types one node lists, and the largest factor.
MAX_TASK_TYPE_MULTIPLIERS = 64
MAX_TASK_TYPE_MULTIPLIER = 100.0
#: Plausibility bounds of a TaskManager (far beyond any real host; a bigger figure is a typo or
#: a hostile file: ``cpu_cores: 1e300`` became a 300-digit core count, ``slots: 10**30`` a
#: planner that never ends, ``task_heap_mb: 10**30`` a JVM option Flink was given).
MAX_CPU_CORES = 65_536          # hardware threads of one host (the largest have a few thousand)
MAX_CPU_ID = MAX_CPU_CORES - 1  # cpu_affinity entries are CPU ids 0 .. MAX_CPU_ID
MAX_GPUS = 1024                 # gpu_ids entries per node, each an index 0 .. MAX_GPUS - 1
MAX_SLOTS = 4096
MAX_THREADS = 4096
MIN_MEMORY_MB = 64                # task_heap_mb / managed_mb: the least a TaskManager starts with
DEFAULT_TASK_HEAP_MB = DEFAULT_MANAGED_MB = 256   # what a spec that leaves them out gets
MAX_MEMORY_MB = 16 * 1024 * 1024  # task_heap_mb / managed_mb: 16 TiB in MiB
MAX_WORK_MULTIPLIER = 1000.0    # emulated slowness (the shipped specs use 1 and 2)
MAX_TASKMANAGERS = 1024
#: The largest spec file read (the shipped ones are under 2 KB).
MAX_SPEC_BYTES = 1 << 20

_PACKAGE_DIR = Path(__file__).resolve().parent


class SpecError(ValueError):
    """A cluster spec that cannot be used, with the reason."""


class PlainYamlLoader(yaml.SafeLoader):
    """yaml's SafeLoader refusing anchors and aliases: a spec (or a configuration file) never
    needs them, and nine aliases nested nine deep (a 1 KB "billion laughs" file) expand to 387
    million values, which took over a minute of CPU to refuse."""

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None, None, "YAML anchors and aliases (&name, *name) are not allowed here: "
                "write each value out", event.start_mark)
        return super().compose_node(parent, index)


class PlainYamlError(ValueError):
    """A YAML file or text that :func:`read_plain_yaml` / :func:`parse_plain_yaml` refuse, with
    the reason (callers re-raise it as their own error: SpecError, ConfigError)."""


def parse_plain_yaml(text: str, what: str):
    """``text`` (named ``what`` in errors) parsed by :class:`PlainYamlLoader`; PlainYamlError
    for anything that is not plain YAML: invalid, anchors or aliases, nested past the recursion
    limit (yaml's composer recurses per level), an int of more than 4300 digits."""
    try:
        return yaml.load(text, Loader=PlainYamlLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        raise PlainYamlError(f"{what} is not valid YAML: {exc}") from None
    except RecursionError:
        raise PlainYamlError(f"{what} is nested too deeply") from None
    except ValueError as exc:  # an int of more than 4300 digits (Python's conversion limit)
        raise PlainYamlError(f"{what}: {str(exc)[:200]}") from None


def read_plain_yaml(path: Path, max_bytes: int, what: str):
    """The YAML document in the file ``path`` (``what`` names it in errors): at most
    ``max_bytes``, UTF-8, parsed by :func:`parse_plain_yaml`; PlainYamlError with the reason."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise PlainYamlError(f"{what} is {size:,} bytes, over the {max_bytes:,}-byte limit")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlainYamlError(f"{what} cannot be read: {exc}") from None
    return parse_plain_yaml(text, what)


class TaskManagerSpec(BaseModel):
    """One Flink TaskManager = one streamplace node."""

    # Non-finite numbers (``.inf`` in YAML) would pass gt/ge bounds and reach Flink's options
    # and the cost model.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    id: str = Field(description="taskmanager.resource-id, node id and external resource name")
    cpu_cores: float = Field(gt=0, le=MAX_CPU_CORES,
                             description="taskmanager.cpu.cores (what Flink is told)")
    cpu_affinity: list[Annotated[int, Field(ge=0, le=MAX_CPU_ID)]] = Field(
        default_factory=list, max_length=MAX_CPU_CORES,
        description="CPU ids the process is pinned to (taskset)")
    gpu_ids: list[Annotated[int, Field(ge=0, lt=MAX_GPUS)]] = Field(
        default_factory=list, max_length=MAX_GPUS,
        description="GPU indices this node owns (CUDA_VISIBLE_DEVICES)")
    work_multiplier: float = Field(1.0, ge=1.0, le=MAX_WORK_MULTIPLIER,
                                   description="repeat each unit of work this many "
                                   "times, to emulate a slower device")
    slots: int = Field(2, ge=1, le=MAX_SLOTS,
                       description="amount of the node's external resource")
    task_heap_mb: int = Field(DEFAULT_TASK_HEAP_MB, ge=MIN_MEMORY_MB, le=MAX_MEMORY_MB)
    managed_mb: int = Field(DEFAULT_MANAGED_MB, ge=MIN_MEMORY_MB, le=MAX_MEMORY_MB)
    threads: int = Field(1, ge=1, le=MAX_THREADS,
                         description="OMP/MKL/torch threads of its Python workers")
    labels: list[str] = Field(default_factory=list)
    # Emulated host (``isolation: host`` only; ignored in cpuset mode). They say what the host
    # *is*, never which task suits it: a policy has to measure that.
    uplink_mbps: float | None = Field(None, gt=0, le=MAX_LINK_MBPS, description="node -> "
                                      "network bandwidth, Mbit/s (default DEFAULT_LINK_MBPS)")
    downlink_mbps: float | None = Field(None, gt=0, le=MAX_LINK_MBPS, description="network -> "
                                        "node bandwidth, Mbit/s (default DEFAULT_LINK_MBPS)")
    cpu_quota: float | None = Field(None, ge=MIN_CPU_QUOTA, le=MAX_CPU_QUOTA,
                                    description="cores the host may use (cfs quota; default "
                                    "cpu_cores)")
    memory_limit_mb: int | None = Field(None, description="memory limit of the host's cgroup "
                                        "(default process memory + MEMORY_LIMIT_MARGIN_MB)")
    # Emulation only, like the quota: a node slow for some task types and not others (an
    # accelerator one application cannot use, a library built without one instruction set).
    # The executor repeats these types' work; nothing that places work reads it.
    task_type_multipliers: dict[str, float] = Field(
        default_factory=dict, description="task type -> extra repeats of its work on this node "
        "(on top of work_multiplier); emulation ground truth, never read by a policy")

    @field_validator("id")
    @classmethod
    def _id_is_a_config_key(cls, value: str) -> str:
        # It becomes part of Flink option keys (external-resource.<id>.amount).
        if not NODE_ID_PATTERN.fullmatch(value):
            raise ValueError(f"node id {value!r} must start with a letter and contain only "
                             "letters, digits and underscores")
        return value

    @field_validator("task_type_multipliers")
    @classmethod
    def _bounded_multipliers(cls, value: dict[str, float]) -> dict[str, float]:
        if len(value) > MAX_TASK_TYPE_MULTIPLIERS:
            raise ValueError(f"at most {MAX_TASK_TYPE_MULTIPLIERS} task_type_multipliers, got "
                             f"{len(value)}")
        for task_type, factor in value.items():
            if not 0 < len(task_type) <= 128:
                raise ValueError(f"task type {task_type[:40]!r}: 1 to 128 characters")
            if not (math.isfinite(factor) and 1.0 <= factor <= MAX_TASK_TYPE_MULTIPLIER):
                raise ValueError(f"task type {task_type!r}: multiplier {factor!r} must be in "
                                 f"[1, {MAX_TASK_TYPE_MULTIPLIER:g}]")
        return value

    @model_validator(mode="after")
    def _memory_limit_holds_the_jvm(self) -> "TaskManagerSpec":
        # A limit below the JVM's own size gets the TaskManager OOM-killed at start-up.
        limit = self.memory_limit_mb
        if limit is not None and not self.process_memory_mb <= limit <= 1_048_576:
            raise ValueError(f"{self.id}: memory_limit_mb {limit} must be at least the "
                             f"TaskManager's process memory ({self.process_memory_mb} MiB) and "
                             "at most 1 TiB")
        return self

    @property
    def process_memory_mb(self) -> int:
        """Task heap + managed memory + the JVM's fixed parts (:data:`JVM_FIXED_OVERHEAD_MB`)."""
        return self.task_heap_mb + self.managed_mb + JVM_FIXED_OVERHEAD_MB

    def cost_model_links(self, isolation: str) -> dict[str, float]:
        """``uplink_mbps`` / ``downlink_mbps`` the cost model and the node features take for
        this node: its emulated host's shaped links under ``isolation: host``, else none (the
        default, unshaped). One rule for the hook's routers and the placement service."""
        if isolation != "host":
            return {}
        limits = self.host_limits()
        return {"uplink_mbps": float(limits["uplink_mbps"]),
                "downlink_mbps": float(limits["downlink_mbps"])}

    def host_limits(self) -> dict[str, float | int]:
        """The emulated host of this node with every default filled in.

        Example::

            >>> tm = TaskManagerSpec(id="tm_x", cpu_cores=1, uplink_mbps=8)
            >>> tm.host_limits()["uplink_mbps"], tm.host_limits()["cpu_quota"]
            (8.0, 1.0)
        """
        limits = {
            "uplink_mbps": self.uplink_mbps if self.uplink_mbps is not None else DEFAULT_LINK_MBPS,
            "downlink_mbps": (self.downlink_mbps if self.downlink_mbps is not None
                              else DEFAULT_LINK_MBPS),
            "cpu_quota": self.cpu_quota if self.cpu_quota is not None else float(self.cpu_cores),
            "memory_mb": (self.memory_limit_mb if self.memory_limit_mb is not None
                          else self.process_memory_mb + MEMORY_LIMIT_MARGIN_MB),
        }
        for key, value in limits.items():  # cpu_cores has no upper bound of its own
            if not math.isfinite(value) or value <= 0:
                raise SpecError(f"{self.id}: {key} {value!r} is not a finite positive number")
        if not MIN_CPU_QUOTA <= limits["cpu_quota"] <= MAX_CPU_QUOTA:
            raise SpecError(f"{self.id}: cpu_quota {limits['cpu_quota']} (from cpu_cores) is not "
                            f"in [{MIN_CPU_QUOTA}, {MAX_CPU_QUOTA}]; set cpu_quota")
        return limits


class LocalClusterSpec(BaseModel):
    """The TaskManagers `streamplace cluster start` launches (not the simulator's cluster model,
    which lives in ``workload.model``)."""

    model_config = ConfigDict(extra="forbid")

    isolation: Literal["cpuset", "host"] = Field(
        "cpuset", description="cpuset: taskset pinning on one shared network; host: an "
        "emulated host per TaskManager (falls back to cpuset where it cannot run)")
    taskmanagers: list[TaskManagerSpec] = Field(min_length=1, max_length=MAX_TASKMANAGERS)
    source: str = ""

    @model_validator(mode="after")
    def _unique_ids(self) -> "LocalClusterSpec":
        ids = [tm.id for tm in self.taskmanagers]
        if len(set(ids)) != len(ids):
            raise ValueError(f"TaskManager ids must be unique, got {ids}")
        return self

    def node(self, node_id: str) -> TaskManagerSpec:
        """The TaskManager ``node_id``; KeyError naming the known ids."""
        for tm in self.taskmanagers:
            if tm.id == node_id:
                return tm
        raise KeyError(f"no TaskManager {node_id!r} in the cluster spec "
                       f"(known: {[tm.id for tm in self.taskmanagers]})")

    def check_fits_machine(self) -> None:
        """SpecError when a ``cpu_affinity`` names a CPU this machine does not have."""
        cpus = os.cpu_count() or 1
        for tm in self.taskmanagers:
            bad = [c for c in tm.cpu_affinity if c >= cpus]
            if bad:
                raise SpecError(f"{tm.id}: cpu_affinity {bad} does not exist on this machine "
                                f"({cpus} CPUs)")


def cluster_spec_dir() -> Path:
    """Folder of the shipped cluster spec files (``default.yaml`` and examples)."""
    return Path(str(resources.files("workload") / "specs"))


def shipped_spec_names() -> list[str]:
    """Names :func:`load_cluster_spec` accepts without a path, sorted."""
    return sorted(p.stem for p in cluster_spec_dir().glob("*.yaml"))


def load_cluster_spec(name_or_path: str | os.PathLike) -> LocalClusterSpec:
    """A shipped spec by name (``default``, ``gpu-host``) or a YAML file path; SpecError with
    the reason for anything else (unknown name, missing or unreadable file, invalid YAML or
    fields)."""
    path = Path(name_or_path)
    if not path.suffix:
        name = str(name_or_path)
        shipped = cluster_spec_dir() / f"{name}.yaml"
        if not re.fullmatch(SHIPPED_SPEC_NAME, name) or not shipped.is_file():
            raise SpecError(f"no shipped cluster spec named {name!r}; choose one of "
                            f"{shipped_spec_names()} or give a YAML path")
        path = shipped
    if not path.is_file():
        raise SpecError(f"cluster spec {path} does not exist")
    try:
        spec = LocalClusterSpec.model_validate(
            read_plain_yaml(path, MAX_SPEC_BYTES, f"cluster spec {path}"))
    except PlainYamlError as exc:
        raise SpecError(str(exc)) from None
    except ValidationError as exc:
        raise SpecError(f"invalid cluster spec {path}:\n{exc}") from exc
    spec.source = str(path)
    return spec


def checkout_root() -> Path | None:
    """The source checkout these packages run from, or None for an installed wheel (every
    streamplace package is top level, so this folder's parent is the checkout's root)."""
    root = _PACKAGE_DIR.parent
    if (root / "pyproject.toml").is_file() and (root / "kafka" / "pom.xml").is_file():
        return root
    return None


def default_home() -> Path:
    """Runtime folder: ``$STREAMPLACE_HOME``, else ``<checkout>/.streamplace`` (git-ignored),
    else ``~/.streamplace`` for an installed wheel."""
    env = os.environ.get("STREAMPLACE_HOME")
    if env:
        try:
            return Path(env).expanduser().resolve()
        except RuntimeError:   # ~nosuchuser: as given, refused where it is checked
            return Path(env)
    root = checkout_root()
    if root is not None:
        return root / ".streamplace"
    return Path.home() / ".streamplace"
