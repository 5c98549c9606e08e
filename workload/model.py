"""What the scheduler reasons about: tasks, nodes, observations, decisions, and the two small
interfaces every policy implements.

- A :class:`Policy` (cluster level, the paper's LDWP stage) picks a node for the task at the head
  of the queue: ``decide(observation) -> Decision(node, reason, scores)``; learned policies also
  ``learn(transition)``. The same object runs in the simulator, the Flink router and the service.
- A :class:`NodeScheduler` (node level, the paper's IAWP stage) picks which ready stage runs on
  which free computing unit of one node.

The observation follows the paper: x_t = (TID, TSize, S_1, ..., S_M) with
S_i = (cpu util, gpu util, host-memory util, gpu-memory util, uplink rate, downlink rate). We add
each node's queue depth (in-flight tasks), which the router knows exactly; policies that want the
paper's observation only use :meth:`Observation.paper_vector`.

Example::

    >>> obs = Observation(Task("t1", "face_recognition", 4096), (NodeState("tm_a"),), now_s=0.0)
    >>> len(obs.paper_vector())   # 2 + 6 * M
    8
"""

from __future__ import annotations

import math
import numbers
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from workload.catalog import app_ids

__all__ = ["Task", "GpuSpec", "NodeSpec", "ClusterSpec", "NodeState", "Observation", "Decision",
           "Transition", "Policy", "Stage", "ComputingUnit", "Assignment", "NodeScheduler",
           "NODE_STATE_FIELDS", "offered_nodes", "taskmanager_node", "taskmanager_memory_gb",
           "parse_gpu_model", "MAX_SETTING_GPU_SPEED",
           "heap_and_managed_gb",
           "DEFAULT_GPU_MODEL", "SPEC_GPU_MEMORY_GB"]


@dataclass(frozen=True)
class Task:
    """One streaming task: the paper's (TID, TSize), plus when it arrived.

    The three trailing fields are the multi-tenant / deadline axis (issue 17), all off by
    default so every existing caller and result is unchanged; ``workload.task_attributes``
    reads and checks them from a TaskEvent's ``attributes`` and ``simulator.slo`` scores them.
    """

    task_id: str
    app_id: str
    input_size: int
    arrival_s: float = 0.0
    expected_work_ms: float | None = None
    tenant: str = ""                 # who submitted it; "" = no tenant (one shared tenant)
    deadline_s: float | None = None  # relative latency target: complete by arrival + this
    priority: int = 0                # larger = more important; 0 = none (nothing uses it yet)

    @property
    def type_index(self) -> int:
        """TID as a number (index in :func:`workload.catalog.app_ids`); -1 for unknown apps."""
        ids = app_ids()
        return ids.index(self.app_id) if self.app_id in ids else -1


def _finite_positive(value) -> bool:
    """A real number (not a bool) above 0 and below infinity (NaN fails)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and \
        0 < value < float("inf")


@dataclass(frozen=True)
class GpuSpec:
    """One GPU of a node: its model, device memory (GB) and speed.

    ``speed`` is relative to the calibration's reference GPU (a K80 die) and is what the GPU
    really runs at: a GPU of a calibrated model ``m`` runs every stage ``speed /
    calibrated_speed(m)`` times as fast as ``m`` at its calibrated speed (``workload.estimates``).
    Left out (None), it is the model's calibrated speed (``calibration.yaml`` gpu_models), so
    ``GpuSpec("v100", 16)`` is a stock V100. A model the calibration does not know needs a speed:
    it runs the reference GPU's per-stage profile scaled by ``speed``, with ``memory_gb`` of
    memory and the reference GPU's co-location behaviour
    (:func:`workload.estimates.gpu_spec_speed` resolves and checks it).

    Example::

        GpuSpec("v100", 16)         # a stock V100: exactly the calibrated times (speed 3.7)
        GpuSpec("v100", 16, 11.1)   # three times as fast on every stage
        GpuSpec("h200", 141, 8.0)   # unknown to the calibration: K80 profile x 8
    """

    model: str
    memory_gb: float
    speed: float | None = None  # relative to the reference GPU; None: the model's calibrated

    def __post_init__(self) -> None:
        if not _finite_positive(self.memory_gb):
            raise ValueError(f"GPU {self.model!r}: memory_gb must be a finite positive number, "
                             f"got {self.memory_gb!r}")
        if self.speed is not None and not _finite_positive(self.speed):
            raise ValueError(f"GPU {self.model!r}: speed must be a finite positive number or "
                             f"None (the calibrated speed), got {self.speed!r}")


@dataclass(frozen=True)
class NodeSpec:
    """A worker node (a Flink TaskManager): its computing units and capacities."""

    node_id: str
    cpu_cores: int
    host_memory_gb: float
    gpus: tuple[GpuSpec, ...] = ()
    cpu_speed: float = 1.0
    uplink_mbps: float = 1000.0
    downlink_mbps: float = 1000.0
    labels: tuple[str, ...] = ()
    slots: int = 0  # most tasks in flight at once; 0 means cpu_cores + number of GPUs

    @property
    def task_slots(self) -> int:
        return self.slots or self.cpu_cores + len(self.gpus)

    def __post_init__(self) -> None:
        if not isinstance(self.node_id, str):
            raise ValueError(f"a node id must be a string, got {self.node_id!r}")
        # a whole number of cores (2.5, NaN, inf and True failed deep in the simulator), slots
        # likewise (-1 made least-outstanding send everything there)
        for name, least in (("cpu_cores", 1), ("slots", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
                    or value < least:
                raise ValueError(f"{self.node_id}: {name} must be a whole number >= {least}, "
                                 f"got {value!r}")
        if not isinstance(self.gpus, (tuple, list)) or not all(isinstance(g, GpuSpec)
                                                               for g in self.gpus):
            raise ValueError(f"{self.node_id}: gpus must be a tuple of GpuSpec, got "
                             f"{self.gpus!r}")
        object.__setattr__(self, "gpus", tuple(self.gpus))  # a list too, kept hashable
        # NaN and inf passed a `<= 0` check: the simulator then hung (inf) or reported 0
        # throughput (NaN); a 0 link divided by zero in every transfer estimate
        for name in ("cpu_speed", "uplink_mbps", "downlink_mbps"):
            if not _finite_positive(getattr(self, name)):
                raise ValueError(f"{self.node_id}: {name} must be a finite positive number, "
                                 f"got {getattr(self, name)!r}")
        if not (_finite_positive(self.host_memory_gb) or self.host_memory_gb == 0):
            raise ValueError(f"{self.node_id}: host_memory_gb must be a finite number >= 0, "
                             f"got {self.host_memory_gb!r}")


@dataclass(frozen=True)
class ClusterSpec:
    nodes: tuple[NodeSpec, ...]
    name: str = "cluster"

    def __post_init__(self) -> None:
        ids = [n.node_id for n in self.nodes]
        if not ids:
            raise ValueError("a cluster needs at least one node")
        if len(set(ids)) != len(ids):
            raise ValueError(f"node ids must be unique, got {ids}")

    @property
    def node_ids(self) -> tuple[str, ...]:
        return tuple(n.node_id for n in self.nodes)


#: The GPU model the cost model assumes for a cluster spec's GPUs: a spec's ``gpu_ids`` say how
#: many GPUs a TaskManager has, not which (the service's ``gpu_model`` and the hook's say).
DEFAULT_GPU_MODEL = "t4"
#: Device memory assumed for each of those GPUs.
SPEC_GPU_MEMORY_GB = 16.0
#: Most GPUs one TaskManager may have (a cluster spec's bound on ``gpu_ids``).
MAX_NODE_GPUS = 1024
#: Fastest GPU a ``gpu_model`` setting may claim, relative to the reference GPU (a K80 die = 1;
#: the calibration's V100 is 3.7): far past any GPU made, so only nonsense is refused
MAX_SETTING_GPU_SPEED = 1000.0
#: A GPU model's name in a ``gpu_model`` setting
GPU_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")


def parse_gpu_model(setting: str) -> tuple[str, float | None]:
    """(model, speed) of a ``gpu_model`` setting: a model alone (``"v100"``: its calibrated
    speed, None) or ``"<model>:<speed>"`` (``"h100:9.5"``: that speed relative to the reference
    GPU, for a model the calibration does not know, or a known one that runs faster). Which
    models are calibrated is :func:`workload.estimates.check_gpu_model`'s to say; ValueError
    for a setting that is neither shape.

    >>> parse_gpu_model("t4"), parse_gpu_model("h100:9.5")
    (('t4', None), ('h100', 9.5))
    """
    if not isinstance(setting, str):
        raise ValueError(f"a GPU model is a name, got {type(setting).__name__}")
    name, colon, speed_text = setting.partition(":")
    if not GPU_MODEL_NAME.fullmatch(name):
        raise ValueError(f"a GPU model's name is 1-40 letters, digits, '_', '.' or '-', got "
                         f"{setting[:60]!r}")
    if not colon:
        return name, None
    try:
        speed = float(speed_text)
    except ValueError:
        speed = math.nan
    if not (math.isfinite(speed) and 0.0 < speed <= MAX_SETTING_GPU_SPEED):
        raise ValueError(f"the speed after {name!r}: must be a number in (0, "
                         f"{MAX_SETTING_GPU_SPEED:g}] (relative to the reference GPU), got "
                         f"{speed_text[:30]!r}")
    return name, speed


def heap_and_managed_gb(task_heap_mb: float, managed_mb: float) -> float:
    """The host memory the cost model gives a TaskManager: its task heap and managed memory
    (its Python workers draw on managed memory), in GB. The one rule for a cluster spec's node
    and for a TaskManager REST describes.

    >>> heap_and_managed_gb(384, 640)
    1.0
    """
    return (task_heap_mb + managed_mb) / 1024


def taskmanager_memory_gb(taskmanager) -> float:
    """:func:`heap_and_managed_gb` of a cluster spec's TaskManager (its fields default to the
    spec's ``DEFAULT_TASK_HEAP_MB`` / ``DEFAULT_MANAGED_MB``, 256 MB each)."""
    return heap_and_managed_gb(getattr(taskmanager, "task_heap_mb", 256),
                               getattr(taskmanager, "managed_mb", 256))


def taskmanager_node(node_id: str, cpu_cores: float, *, gpus: int = 0, memory_gb: float = 16.0,
                     work_multiplier: float = 1.0, slots: int = 0,
                     gpu_model: str = DEFAULT_GPU_MODEL, uplink_mbps: float = 1000.0,
                     downlink_mbps: float = 1000.0) -> NodeSpec:
    """The cost model's NodeSpec of one Flink TaskManager of a cluster spec: one rule for the
    placement service's cluster and the hook's routers, so that a model trained on the one
    reads the same node features, parallel units (cores + GPUs) and GPU stage times on the
    other. ``work_multiplier`` (the spec's emulated slowness, >= 1) becomes
    ``cpu_speed = 1 / work_multiplier``; the links are the emulated host's shaped ones
    (``isolation: host``), else the default: feedback byte rates are read as fractions of
    them on both sides (``workload.feedback.node_state_from_feedback``).

    Example::

        >>> node = taskmanager_node("tm_gpu1", 4, gpus=1, memory_gb=2.25)
        >>> node.cpu_cores + len(node.gpus), node.gpus[0].model
        (5, 't4')
    """
    if isinstance(gpus, bool) or not isinstance(gpus, numbers.Integral) or \
            not 0 <= gpus <= MAX_NODE_GPUS:
        raise ValueError(f"{node_id}: gpus must be a whole number in [0, {MAX_NODE_GPUS}], "
                         f"got {gpus!r}")
    if not _finite_positive(work_multiplier):   # max(1.0, NaN) is 1.0: a NaN passed as "1"
        raise ValueError(f"{node_id}: work_multiplier must be a finite positive number, got "
                         f"{work_multiplier!r}")
    model, speed = parse_gpu_model(gpu_model) if gpus else (gpu_model, None)
    return NodeSpec(node_id, max(1, round(float(cpu_cores))), memory_gb,
                    gpus=tuple(GpuSpec(model, SPEC_GPU_MEMORY_GB, speed) for _ in range(gpus)),
                    cpu_speed=1.0 / max(1.0, float(work_multiplier)), slots=max(0, int(slots)),
                    uplink_mbps=uplink_mbps, downlink_mbps=downlink_mbps)


#: The paper's six per-node numbers, in order.
NODE_STATE_FIELDS = ("cpu_util", "gpu_util", "host_mem_util", "gpu_mem_util",
                     "uplink_util", "downlink_util")


@dataclass(frozen=True)
class NodeState:
    """What a policy may see of one node (possibly stale by ``age_s``). Rates are fractions of
    the node's link capacity so observations compare across nodes."""

    node_id: str
    cpu_util: float = 0.0
    gpu_util: float = 0.0
    host_mem_util: float = 0.0
    gpu_mem_util: float = 0.0
    uplink_util: float = 0.0
    downlink_util: float = 0.0
    queue_depth: int = 0      # tasks at the node (queued + running), as the router counts them
    backlog_s: float = 0.0    # summed estimated work (s) of the stages not yet finished at the
                              # node, from public cost estimates (not time-to-clear)
    age_s: float = 0.0        # how stale the utilisation numbers are
    speed_factor: float = 1.0  # measured task time over the public estimate on this node
                               # (placement.speed.ObservedSpeed; 1 = as the spec says)

    @property
    def load(self) -> float:
        """The paper's Load_i: mean of CPU, host-memory, GPU and GPU-memory utilisation."""
        return (self.cpu_util + self.host_mem_util + self.gpu_util + self.gpu_mem_util) / 4.0

    def paper_features(self) -> tuple[float, ...]:
        return tuple(float(getattr(self, name)) for name in NODE_STATE_FIELDS)


@dataclass(frozen=True)
class Observation:
    task: Task
    nodes: tuple[NodeState, ...]
    now_s: float

    @property
    def node_ids(self) -> tuple[str, ...]:
        return tuple(n.node_id for n in self.nodes)

    def paper_vector(self) -> list[float]:
        """x_t = (TID, TSize, S_1, ..., S_M): 2 + 6M numbers (TSize as given; policies scale)."""
        vector = [float(self.task.type_index), float(self.task.input_size)]
        for node in self.nodes:
            vector.extend(node.paper_features())
        return vector


def offered_nodes(node_ids: Sequence[str], in_flight: Mapping[str, int],
                  capacity: Mapping[str, int] | None) -> tuple[list[str], int]:
    """The nodes a router offers its policy for the next task, and how many it skipped.

    A node whose in-flight count reached its ``capacity`` is skipped; when every node is full,
    all are offered (Flink's backpressure then waits for the router). ``capacity`` None: no
    node is ever full. The router and the service's burst check both decide this way.

    >>> offered_nodes(["a", "b"], {"a": 2, "b": 0}, {"a": 2, "b": 2})
    (['b'], 1)
    >>> offered_nodes(["a", "b"], {"a": 2, "b": 2}, {"a": 2, "b": 2})
    (['a', 'b'], 2)
    """
    if capacity is None:
        return list(node_ids), 0
    room = [n for n in node_ids if in_flight.get(n, 0) < capacity.get(n, 0)]
    skipped = len(node_ids) - len(room)
    return (room or list(node_ids)), skipped


@dataclass(frozen=True)
class Decision:
    """Where the task goes, and why, in words a person can check.

    ``stage_nodes`` (the cross-node stage placement axis, off by default) lets a policy split
    the task: a node per stage name of the task's application (every stage named). The task's
    input goes to ``node``, which must host the application's first stage; the simulator moves
    each stage's output to the nodes of its consumers (``simulator.stage_split``). None (the
    default), or every stage on ``node``, is the whole task on ``node``, exactly as before.
    """

    node: str
    reason: str
    scores: dict[str, float] = field(default_factory=dict)
    stage_nodes: dict[str, str] | None = None


@dataclass(frozen=True)
class Transition:
    observation: Observation
    decision: Decision
    reward: float
    next_observation: Observation | None
    done: bool = False


class Policy(ABC):
    """A cluster-level placement policy. Fixed rules keep the no-op :meth:`learn`."""

    name: str = "policy"

    @abstractmethod
    def decide(self, observation: Observation) -> Decision:
        """Pick one of ``observation.node_ids`` for ``observation.task``."""

    def learn(self, transition: Transition) -> None:
        """Learn from the outcome of an earlier decision (no-op for fixed rules)."""
        return None


@dataclass(frozen=True)
class Stage:
    """A ready stage instance of one task (the paper's subtask)."""

    task_id: str
    app_id: str
    stage: str
    input_size: int
    gpu_capable: bool = True
    ready_at_s: float = 0.0


@dataclass(frozen=True)
class ComputingUnit:
    """A CPU core (or worker thread) or a GPU of one node."""

    unit_id: str            # e.g. "cpu:0", "gpu:1"
    kind: str               # "cpu" or "gpu"
    speed: float | None = None  # CPU: relative core speed (None: 1); GPU: its spec speed
    #                             relative to the reference GPU (None: its model's calibrated)
    model: str = ""         # GPU model (calibration key), "" for CPU cores
    running: tuple[str, ...] = ()   # stage types running there now (GPUs may co-run)
    capacity: int = 1       # most stages at once (1 for a core, max co-runners for a GPU)
    free_at_s: float = 0.0  # estimated time this unit finishes what it runs now
    utilisation: float = 0.0
    memory_util: float = 0.0
    memory_mb: float = 0.0  # device memory of a GPU (0 for CPU cores: host memory not modelled)
    mig_profile: str = ""   # a MIG slice of a GPU: its profile (e.g. "3g.20gb"); "" otherwise

    @property
    def has_room(self) -> bool:
        return len(self.running) < self.capacity

    def __post_init__(self) -> None:
        if self.kind not in ("cpu", "gpu"):
            raise ValueError(f"unit kind must be 'cpu' or 'gpu', got {self.kind!r}")
        if self.speed is None and self.kind == "cpu":
            object.__setattr__(self, "speed", 1.0)  # frozen; a core's speed is always a number


@dataclass(frozen=True)
class Assignment:
    stage: Stage
    unit_id: str
    reason: str = ""


class NodeScheduler(ABC):
    """A node-level scheduler: which ready stage runs on which computing unit next."""

    name: str = "node-scheduler"

    @abstractmethod
    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        """Assignments for this instant: each stage at most once, each unit at most
        ``capacity - len(running)`` new stages. A CPU-only stage (``gpu_capable=False``) is
        never put on a GPU."""

    def observe_corun(self, stage: str, partner: str, gpu_model: str,
                      measured_rate: float) -> None:
        """A stage that shared a GPU with one partner type finished: its estimated alone time
        over its elapsed time (< 1 means it was slowed down). No-op unless a scheduler learns."""
        return None
