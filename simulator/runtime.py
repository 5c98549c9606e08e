"""The mutable state of one simulation run: nodes, their units and links, the tasks on them.

Internal to the simulator (``simulator.engine`` and its parts: ``links``, ``node_runtime``,
``utilisation``). Policies never see these objects, only the ``NodeState`` samples built from
them; the simulator's own oracle is the one exception (it reads ``Node`` directly).

Work in progress, a stage on a unit or a transfer on a link, is a :class:`Run` whose
``remaining`` is measured in alone-seconds: it shrinks by ``rate`` per simulated second, where
``rate`` is the share of the unit or link it gets (1 alone, less when shared).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workload.estimates import CostModel, gpu_spec_speed
from workload.model import ComputingUnit, NodeSpec, NodeState, Stage, Task

from simulator.mig import slice_units

__all__ = ["Run", "Unit", "TaskState", "Link", "Node", "build_node", "advance"]


@dataclass
class Run:
    """A stage (or a link transfer) in progress: ``remaining`` is in alone-seconds."""

    key: tuple
    remaining: float
    rate: float = 1.0
    version: int = 0
    started_s: float = 0.0
    work_s: float = 0.0            # true alone-time of the whole piece of work
    reference_gpu_s: float = 0.0   # its size in reference-GPU seconds (useful-work metric)
    memory_mb: float = 0.0
    stage: str = ""
    estimate_s: float = 0.0        # public estimate of its alone time on this unit
    partners: set = field(default_factory=set)  # stage types it shared the GPU with
    # Its share of the elapsed time, 1/k over each stretch with k runs on the unit: what
    # simulator.energy charges a stage of a shared unit's dynamic power (read at its finish).
    busy_share_s: float = 0.0


@dataclass
class Unit:
    """A CPU core or a GPU of a node, with the stages running on it."""

    view: ComputingUnit
    memory_mb: float = 0.0
    runs: list[Run] = field(default_factory=list)
    last_update_s: float = 0.0
    compute_fraction: float = 1  # a MIG slice's share of its GPU (simulator.mig); 1 otherwise

    @property
    def is_gpu(self) -> bool:
        return self.view.kind == "gpu"


@dataclass
class TaskState:
    """A task placed on a node: which of its stages are done and which still wait for deps."""

    task: Task
    node: str
    waiting_deps: dict[str, int]
    done: set = field(default_factory=set)
    first_start_s: float | None = None
    # (stage, unit_id, busy_share_s) of every finished stage: what an executor reports of the
    # task at its completion (policies with observe_stage_runs get it; energy-aware rewards)
    stage_runs: list = field(default_factory=list)
    estimate_left_s: float = 0.0
    true_left_s: float = 0.0       # hidden truth, only the oracle reads it
    # Only for a task split over nodes (simulator.stage_split): the node of every stage. This
    # state is then the part of the task on ``node``: ``waiting_deps`` holds its stages only.
    stage_nodes: dict[str, str] | None = None


@dataclass
class Link:
    """One direction of a node's network link, shared equally by the transfers on it."""

    bandwidth_bytes_s: float
    runs: list[Run] = field(default_factory=list)
    last_update_s: float = 0.0
    version: int = 0


@dataclass
class Node:
    """A worker: its units, its down- and uplink, its tasks and its utilisation integrals."""

    spec: NodeSpec
    units: list[Unit]
    down: Link
    up: Link
    tasks: dict[str, TaskState] = field(default_factory=dict)
    ready: list[Stage] = field(default_factory=list)
    # Time integrals for utilisation: cpu busy cores, busy gpus, gpu memory, host memory, links.
    integrals: list[float] = field(default_factory=lambda: [0.0] * 6)
    last_integral_s: float = 0.0
    sample_integrals: list[float] = field(default_factory=lambda: [0.0] * 6)
    sample_state: NodeState | None = None
    completed: int = 0
    true_left_s: float = 0.0       # sum over its tasks (hidden truth, for the oracle)
    host_bytes: float = 0.0        # inputs of the tasks at the node (host-memory use)


def build_node(spec: NodeSpec, costs: CostModel, gpu_max_corun: int) -> Node:
    """An idle node: one unit per CPU core (``cpu:<i>``), one per GPU (``gpu:<i>``), or with a
    ``mig=`` label one per MIG slice of each GPU (``gpu:<i>/mig<j>:<profile>``, simulator.mig)."""
    units = [Unit(ComputingUnit(f"cpu:{i}", "cpu", speed=spec.cpu_speed))
             for i in range(spec.cpu_cores)]
    slices = slice_units(spec, costs, gpu_max_corun)
    if slices is not None:  # a `mig=` label: one unit per MIG slice (simulator.mig)
        units.extend(Unit(view, memory_mb=memory, compute_fraction=fraction)
                     for view, memory, fraction in slices)
        return Node(spec, units, Link(spec.downlink_mbps * 1e6 / 8),
                    Link(spec.uplink_mbps * 1e6 / 8))
    for i, gpu in enumerate(spec.gpus):
        # The unit carries its spec speed: CostModel.unit_ms scales the model's calibrated
        # per-stage times by it (workload.estimates), so GpuSpec.speed changes true times.
        units.append(Unit(ComputingUnit(f"gpu:{i}", "gpu",
                                        speed=gpu_spec_speed(gpu, costs.calibration),
                                        model=gpu.model,
                                        capacity=gpu_max_corun),
                          memory_mb=gpu.memory_gb * 1024))
    return Node(spec, units, Link(spec.downlink_mbps * 1e6 / 8),
                Link(spec.uplink_mbps * 1e6 / 8))


def advance(runs: list[Run], since: float, now: float) -> None:
    """Progress every run from ``since`` to ``now`` at its current rate; each run gains
    ``dt / len(runs)`` of ``busy_share_s`` (the runs share the unit's time equally)."""
    dt = now - since
    if dt > 0:
        share = dt / len(runs) if runs else 0.0
        for run in runs:
            run.remaining = max(0.0, run.remaining - run.rate * dt)
            run.busy_share_s += share
