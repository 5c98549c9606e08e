"""The simulator's cluster model from a local cluster spec (``workload/specs/*.yaml``).

The real engines run a :class:`workload.cluster_spec.LocalClusterSpec`; the simulator runs a
:class:`workload.model.ClusterSpec`. :func:`cluster_from_spec` turns the one into the other, so
the simulator and the real engines can be compared on the same cluster:

- **cores and speed.** In host mode a TaskManager may use ``cpu_quota`` cores (cfs quota),
  whatever Flink is told; the simulator's nodes have whole cores (``NodeSpec.cpu_cores`` is an
  int >= 1), so a quota becomes ``max(1, round(quota))`` cores, each at ``quota / cores`` of a
  full core (0.35 core -> one core at speed 0.35). In CPU-set mode it is the pinned CPUs
  (``cpu_affinity``; else ``cpu_cores``) at ``cpu_cores / cores``. ``work_multiplier`` (each unit
  of work done that many times) divides the speed: a slower cpu_speed.
- **links.** Host mode: the shaped uplink / downlink (Mbit/s). CPU-set mode shapes nothing:
  :data:`workload.cluster_spec.DEFAULT_LINK_MBPS` both ways.
- **memory.** Host mode: the host's memory limit; CPU-set mode: the TaskManager's process size.
- **slow for one task type.** ``task_type_multipliers`` is hidden truth, not a node property a
  policy sees: :func:`hidden_task_type_factors` gives the triples for
  ``SimulationConfig.hidden_task_type_factors``.
- **GPUs.** One ``gpu_model`` GPU (default :data:`DEFAULT_GPU_MODEL`, as the placement service
  assumes) per ``gpu_ids`` entry, at the model's calibrated speed and memory.

``view="told"`` gives instead what Flink and every prior that reads the spec are told
(``cpu_cores``, ``work_multiplier``, no quota, unshaped links): the hosts spec tells every node
the same on purpose, so a rule that reads the spec (capacity-weighted round-robin) is handed this
view while the simulator runs the ``"truth"`` view.

Example::

    >>> from workload.cluster_spec import load_cluster_spec
    >>> spec = load_cluster_spec("hosts")
    >>> truth = cluster_from_spec(spec)
    >>> [(n.node_id, n.cpu_cores, n.cpu_speed, n.uplink_mbps) for n in truth.nodes]
    [('tm_a', 1, 0.9, 8.0), ('tm_b', 1, 0.35, 1000.0), ('tm_c', 1, 0.5, 40.0)]
    >>> {n.cpu_speed for n in cluster_from_spec(spec, view="told").nodes}
    {1.0}
"""

from __future__ import annotations

import math
from typing import Literal

from workload.cluster_spec import (DEFAULT_LINK_MBPS, ISOLATION_MODES, LocalClusterSpec,
                                   TaskManagerSpec)
from workload.estimates import Calibration, load_calibration
from workload.model import SPEC_GPU_MEMORY_GB, ClusterSpec, GpuSpec, NodeSpec, parse_gpu_model

__all__ = ["cluster_from_spec", "node_from_taskmanager", "hidden_task_type_factors",
           "DEFAULT_GPU_MODEL", "VIEWS"]

#: GPU model assumed for a spec's ``gpu_ids`` (local specs list device ids, not models); the
#: placement service's ``ServiceSettings.gpu_model`` default, so both price GPUs alike.
DEFAULT_GPU_MODEL = "t4"
#: ``truth``: what the node really is (quota, shaped links); ``told``: what the spec tells Flink.
VIEWS = ("truth", "told")


def _cores_and_speed(tm: TaskManagerSpec, isolation: str, view: str) -> tuple[int, float]:
    if view == "told":
        capacity, cores = float(tm.cpu_cores), max(1, round(tm.cpu_cores))
    elif isolation == "host":
        capacity = float(tm.host_limits()["cpu_quota"])
        cores = max(1, round(capacity))
    else:  # cpuset: the pinned CPUs are the cores, when the spec pins
        capacity = float(tm.cpu_cores)
        cores = len(tm.cpu_affinity) or max(1, round(capacity))
    speed = capacity / cores / tm.work_multiplier
    if not math.isfinite(speed) or speed <= 0:
        raise ValueError(f"{tm.id}: cpu speed {speed!r} is not a finite positive number")
    return cores, speed


def node_from_taskmanager(tm: TaskManagerSpec, isolation: str = "host", view: str = "truth",
                          gpu_model: str = DEFAULT_GPU_MODEL,
                          calibration: Calibration | None = None) -> NodeSpec:
    """One simulator node for one TaskManager (see the module docstring for the mapping).

    Example::

        >>> tm = TaskManagerSpec(id="tm_x", cpu_cores=1, cpu_quota=2.5, work_multiplier=2.0)
        >>> node = node_from_taskmanager(tm)
        >>> node.cpu_cores, node.cpu_speed
        (2, 0.625)
    """
    if isolation not in ISOLATION_MODES:
        raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {isolation!r}")
    if view not in VIEWS:
        raise ValueError(f"view must be one of {VIEWS}, got {view!r}")
    cores, speed = _cores_and_speed(tm, isolation, view)
    shaped = isolation == "host" and view == "truth"
    limits = tm.host_limits()  # validates every default-filled limit (finite, positive)
    up = float(limits["uplink_mbps"]) if shaped else DEFAULT_LINK_MBPS
    down = float(limits["downlink_mbps"]) if shaped else DEFAULT_LINK_MBPS
    memory_mb = limits["memory_mb"] if shaped else tm.process_memory_mb
    gpus: tuple[GpuSpec, ...] = ()
    if tm.gpu_ids:
        models = (calibration or load_calibration()).gpu_models
        try:
            model, gpu_speed = parse_gpu_model(gpu_model)
        except ValueError as exc:
            raise ValueError(f"{tm.id}: {exc}") from None
        if model not in models and gpu_speed is None:
            raise ValueError(f"{tm.id}: GPU model {gpu_model!r} is not in the calibration "
                             f"(known: {sorted(models)}); give its speed as "
                             f"'{model}:<speed>'")
        memory_gb = float(models[model]["memory_gb"]) if model in models else SPEC_GPU_MEMORY_GB
        gpus = tuple(GpuSpec(model, memory_gb, gpu_speed) for _ in tm.gpu_ids)
    return NodeSpec(tm.id, cores, memory_mb / 1024.0, gpus, cpu_speed=speed, uplink_mbps=up,
                    downlink_mbps=down, labels=tuple(tm.labels))


def cluster_from_spec(spec: LocalClusterSpec, isolation: str | None = None,
                      view: Literal["truth", "told"] = "truth",
                      gpu_model: str = DEFAULT_GPU_MODEL,
                      calibration: Calibration | None = None) -> ClusterSpec:
    """The simulator's :class:`ClusterSpec` of ``spec``.

    ``isolation`` is the mode actually in use (``host``, or ``cpuset`` where host mode fell
    back); None takes the spec's own. The cluster is named after the spec file, the mode and the
    view, e.g. ``hosts/host/truth``.
    """
    if not isinstance(spec, LocalClusterSpec):
        raise TypeError(f"expected a LocalClusterSpec, got {type(spec).__name__}")
    mode = isolation or spec.isolation
    nodes = tuple(node_from_taskmanager(tm, mode, view, gpu_model, calibration)
                  for tm in spec.taskmanagers)
    stem = spec.source.rsplit("/", 1)[-1].removesuffix(".yaml") if spec.source else "spec"
    return ClusterSpec(nodes, name=f"{stem}/{mode}/{view}")


def hidden_task_type_factors(spec: LocalClusterSpec) -> tuple[tuple[str, str, float], ...]:
    """``(node id, task type, factor)`` for every TaskManager's ``task_type_multipliers``, in
    spec order: the simulator's hidden per-type slowdowns (never part of a NodeSpec).

    Example::

        >>> spec = LocalClusterSpec.model_validate({"taskmanagers": [
        ...     {"id": "tm_x", "cpu_cores": 1, "task_type_multipliers": {"ocr": 3}}]})
        >>> hidden_task_type_factors(spec)
        (('tm_x', 'ocr', 3.0),)
    """
    return tuple((tm.id, task_type, float(factor)) for tm in spec.taskmanagers
                 for task_type, factor in sorted(tm.task_type_multipliers.items()))
