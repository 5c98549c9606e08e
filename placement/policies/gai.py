"""GAI as a streaming cluster policy: the cluster as a tree, each task in the smallest subtree
that fits it, high priorities taking units held by lower ones.

Paper: "GAI: a centralized tree-based scheduler" (worked from the brief's summary of the idea;
the paper itself was not at hand).

What it decides, per task of priority ``p`` (``task.priority``, larger = more important):

1. Demand: one computing unit of a kind. A task whose application has a GPU-capable stage asks
   for a ``gpu`` unit first and a ``cpu`` unit (a core) second; with ``gpu_demand=False``, or
   an application without GPU-capable stages, a ``cpu`` unit only.
2. Fit: the tree is cluster -> racks -> nodes -> units. Walking down from the root, it takes the
   child with the *fewest* free units of the kind that still has one (best fit): the rack with
   the least room that fits, then the node with the least room in it, ties by cluster order. A
   partly used rack is filled before a fresh one is opened, keeping whole subtrees free for
   larger demands.
3. Preemption: if no node has a free unit of the kind, a node whose units of that kind are held
   by tasks of lower priority than ``p`` is chosen (the lowest such priority first, then the
   fewest tasks at priority >= p, then cluster order) and the reason names the task it would
   preempt. Streaming tasks are not killed (a killed task loses its records): the new task only
   joins that node, where the node scheduler serves it beside them.
4. Steps 2-3 for the first kind, then for the second; if nothing fits or is preemptible, the
   node with the fewest outstanding tasks per slot (``queue_depth / task_slots``).

Units and what holds them, per node: ``gpu`` units = its GPUs, ``cpu`` units = its cores. Busy
units of a kind = max(ceil(util x units) from the observation's ``gpu_util`` / ``cpu_util``,
the tasks this policy routed there holding that kind). The policy keeps, per node, a record of
the tasks it routed there (task id, priority, kind) in routing order; before each decision it
drops a node's oldest records until no more are left than the node's ``queue_depth`` (tasks
at the node; ASSUMPTION: tasks leave in arrival order). Busy units the records do not explain
(load routed by someone else, or seen only in utilisation) count as priority
``unrecorded_priority``. :meth:`GaiPolicy.outstanding` returns the records.

Settings:

- ``gpu_demand`` (True): a task with GPU-capable stages asks for a GPU unit before a core.
- ``preemption`` (True): False skips step 3 (strict fit, then the fallback).
- ``unrecorded_priority`` (0, ASSUMPTION: the default priority of a task): the priority of
  busy units not explained by this policy's records. An integer in [-100, 100].

Racks come from NodeSpec labels ``rack=<name>``; nodes without one share the rack "default".
Scores: each observed node's position in the decision order (0 = chosen, lowest wins).

Example::

    >>> from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec(tuple(NodeSpec(f"n{i}", 2, 8, gpus=(GpuSpec("p4", 8),),
    ...                                      labels=(f"rack=r{i // 2}",)) for i in range(4)))
    >>> obs = Observation(Task("t1", "face_recognition", 1000),
    ...                   (NodeState("n0", gpu_util=1.0), NodeState("n1"), NodeState("n2"),
    ...                    NodeState("n3")), 0.0)
    >>> for part in GaiPolicy(cluster).decide(obs).reason.split(": ", 2):  # r0: 1 free GPU, r1: 2
    ...     print(part)
    gai
    p0 task t1 -> r0/n1
    smallest subtree with a free gpu unit: rack r0 (1 free), node n1 (1 of 1 free)
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from placement.policies.base import ClusterPolicy
from placement.policies.hived import rack_of, trim_to_depth
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, NodeState, Observation

__all__ = ["GaiPolicy", "Held", "PRIORITY_BOUNDS"]

#: Priorities accepted (as ``workload.task_attributes``: MIN_PRIORITY, MAX_PRIORITY).
PRIORITY_BOUNDS = (-100, 100)


@dataclass(frozen=True)
class Held:
    """One task this policy routed, counted as holding a unit of ``kind`` at its node."""

    task_id: str
    priority: int
    kind: str


def _check_priority(label: str, value) -> int:
    low, high = PRIORITY_BOUNDS
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{label} must be an integer in [{low}, {high}], got {value!r}")
    return value


class GaiPolicy(ClusterPolicy):
    """Scores: each observed node's rank in the decision order (0 = chosen)."""

    name = "gai"

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0, *,
                 gpu_demand: bool = True, preemption: bool = True,
                 unrecorded_priority: int = 0) -> None:
        for label, value in (("gpu_demand", gpu_demand), ("preemption", preemption)):
            if not isinstance(value, bool):
                raise ValueError(f"{label} must be True or False, got {value!r}")
        self.gpu_demand, self.preemption = gpu_demand, preemption
        self.unrecorded_priority = _check_priority("unrecorded_priority", unrecorded_priority)
        self._log: dict[str, deque[Held]] = {}
        super().__init__(cluster, costs, seed)

    def _cluster_changed(self) -> None:
        self._rack = {n.node_id: rack_of(n) for n in self.cluster.nodes}

    def outstanding(self, node_id: str) -> tuple[Held, ...]:
        """The routed tasks counted as still at the node (as of the last decision)."""
        return tuple(self._log.get(node_id, ()))

    def kinds(self, app_id: str) -> tuple[str, ...]:
        """The unit kinds a task of ``app_id`` asks for, in order."""
        app = APPLICATIONS.get(app_id)
        if app is None:
            raise KeyError(f"gai: unknown application {app_id!r}")
        if self.gpu_demand and any(s.gpu_capable for s in app.stages):
            return ("gpu", "cpu")
        return ("cpu",)

    def _units(self, nid: str, state: NodeState, kind: str) -> tuple[int, int, list[int]]:
        """(units of the kind, busy units, priorities holding them, unexplained load
        included)."""
        spec = self._specs[nid]
        count, util = (len(spec.gpus), state.gpu_util) if kind == "gpu" else \
            (spec.cpu_cores, state.cpu_util)
        if not math.isfinite(util) or util < 0:
            raise ValueError(f"node {nid}: {kind}_util must be a finite number >= 0, got {util}")
        held = [h.priority for h in self._log.get(nid, ()) if h.kind == kind]
        by_util = min(count, math.ceil(util * count - 1e-9))
        holders = held + [self.unrecorded_priority] * max(0, by_util - len(held))
        return count, min(count, max(by_util, len(held))), holders

    def decide(self, observation: Observation) -> Decision:
        ids, left_out = self.known_ids(observation)
        states = self.states(observation)
        task = observation.task
        p = _check_priority(f"task {task.task_id}: priority", task.priority)
        for nid in ids:
            if states[nid].queue_depth < 0:
                raise ValueError(f"node {nid}: queue_depth must be >= 0, "
                                 f"got {states[nid].queue_depth}")
        trim_to_depth(self._log, {nid: states[nid] for nid in ids})
        kinds = self.kinds(task.app_id)
        keys: dict[str, tuple] = {}
        why: dict[str, str] = {}
        for k, kind in enumerate(kinds):
            units = {nid: self._units(nid, states[nid], kind) for nid in ids}
            free = {nid: u[0] - u[1] for nid, u in units.items()}
            rack_free: dict[str, int] = {}
            for nid in ids:
                rack_free[self._rack[nid]] = rack_free.get(self._rack[nid], 0) + free[nid]
            for nid in ids:
                rack, rank = self._rack[nid], self.cluster_rank(nid)
                if free[nid] > 0:
                    key = (2 * k, rack_free[rack], free[nid], rank)
                    text = (f"smallest subtree with a free {kind} unit: rack {rack} "
                            f"({rack_free[rack]} free), node {nid} ({free[nid]} of "
                            f"{units[nid][0]} free)")
                else:
                    victims = [q for q in units[nid][2] if q < p]
                    if not (self.preemption and victims):
                        continue
                    rivals = sum(1 for h in self._log.get(nid, ()) if h.priority >= p)
                    key = (2 * k + 1, min(victims), rivals, rank)
                    text = (f"no free {kind} unit in the tree; takes a {kind} unit held by "
                            f"priority-{min(victims)} work: would preempt "
                            f"{self._victim(nid, kind, min(victims))} (streaming tasks are not "
                            f"killed: it runs beside them)")
                if nid not in keys or key < keys[nid]:
                    keys[nid], why[nid] = key, text
        for nid in ids:
            if nid not in keys:
                depth, slots = states[nid].queue_depth, self._specs[nid].task_slots
                keys[nid] = (2 * len(kinds), depth / slots, 0, self.cluster_rank(nid))
                why[nid] = (f"nothing fits and nothing is preemptible: fewest outstanding per "
                            f"slot ({depth}/{slots})")
        node = min(ids, key=keys.__getitem__)
        kind = kinds[min(keys[node][0] // 2, len(kinds) - 1)]
        self._log.setdefault(node, deque()).append(Held(task.task_id, p, kind))
        order = sorted(ids, key=keys.__getitem__)
        scores = {nid: float(i) for i, nid in enumerate(order)}
        return Decision(node, f"gai: p{p} task {task.task_id} -> {self._rack[node]}/{node}: "
                              f"{why[node]}{left_out}", scores)

    def _victim(self, nid: str, kind: str, priority: int) -> str:
        """The newest routed task of that priority and kind at the node (least work lost),
        else "unrecorded load"."""
        for held in reversed(self._log.get(nid, ())):
            if held.kind == kind and held.priority == priority:
                return f"task {held.task_id}"
        return "unrecorded load"
