"""HiveD as a streaming cluster policy: tenants' quotas as virtual clusters (VCs) of cells,
buddy cell allocation, guaranteed and opportunistic placements.

Paper: "HiveD: Sharing a GPU Cluster for Deep Learning with Guarantees" (Zhao et al., OSDI
2020; worked from the paper's idea, the text was not at hand).

What it decides:

1. At construction (and on :meth:`set_cluster`), each tenant's quota of cells becomes a VC: a
   fixed set of physical cells chosen by buddy allocation over the cell hierarchy (cluster ->
   rack -> node [-> GPU]): tenants in order of quota (largest first, then name), each taking
   the *smallest* subtree whose free cells hold its quota, and when none does, whole subtrees,
   largest first, so higher-level cells stay whole for later tenants (HiveD's buddy cell
   allocation, done once: a streaming cluster's quotas change rarely).
2. For each task of tenant ``T`` (``observation.task.tenant``, "" = the default tenant): a
   *guaranteed* placement on a cell of T's VC that has a free slot for T's guaranteed tasks,
   preferring cells with no lower-priority (opportunistic or unknown) load on them, then packing
   (the cell already holding most of T's tasks: fills cells before opening new ones), then
   cluster order.
3. If T's VC has no such cell (T is at its quota, or T has no VC), an *opportunistic*
   placement on a free cell: one without guaranteed load whose slots are not all taken; cells
   in no VC first, then idle cells of other VCs; least loaded first, then cluster order.
4. If no cell is free either: opportunistic on the least loaded cell (load / slots).

Adaptation to streaming tasks and stages. HiveD's jobs hold GPU cells until they finish and
lower-priority (opportunistic) jobs are preempted when a guaranteed job needs their cells. A
streaming task is short and routed once; it cannot be preempted (killing a task loses its
records). So a cell is not held by one task: it has ``cell_slots`` slots, a tenant "uses" a cell
while at least one of its tasks is outstanding there, and T is over its quota when every cell of
its VC has all slots taken by T's guaranteed tasks. Opportunistic load never blocks a guaranteed
task (the cell's slots count guaranteed tasks only); when a guaranteed task must share a cell
with opportunistic work, the reason says so (it would preempt them in HiveD; here it only
competes with them at the node scheduler). The Decision reason carries ``guaranteed`` or
``opportunistic``; :meth:`HiveDPolicy.outstanding` lists the records.

Outstanding tasks: the observation has each node's ``queue_depth`` (tasks at the node) but not
whose they are, so the policy records every task it routes (task id, tenant, cell, guaranteed)
per node, and before each decision drops a node's oldest records until no more are left than
the node's ``queue_depth`` (ASSUMPTION: tasks leave a node roughly in arrival order). Load the
records do not explain (``queue_depth`` beyond them: tasks routed by someone else) counts as
lower-priority load on every cell of that node.

Settings:

- ``quotas`` (None: the default tenant "" owns every cell): ``{tenant: number of cells}``,
  non-negative integers whose sum the cluster must hold; refused otherwise (ValueError).
- ``cell_level`` ("node", ASSUMPTION: a router picks nodes; HiveD's leaf cell is one GPU):
  ``"node"`` (a cell is a node) or ``"gpu"`` (a cell is a GPU; a node without GPUs is one
  CPU cell, ASSUMPTION).
- ``cell_slots`` (None, ASSUMPTION): tasks one cell holds at once; None: the node's
  ``task_slots`` (a node cell), split evenly over its cells (at least 1) at the GPU level.
- ``unknown_tenants`` ("opportunistic"): what a task of a tenant without a quota gets:
  ``"opportunistic"`` (it runs on free cells only, like an over-quota tenant) or ``"refuse"``
  (``decide`` raises KeyError; for clusters where every tenant must be declared).

Racks come from NodeSpec labels ``rack=<name>``; nodes without one share the rack "default".
Scores: each observed node's position in the decision order (0 = chosen, lowest wins).

Example::

    >>> from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec(tuple(NodeSpec(f"n{i}", 2, 8, slots=1, labels=(f"rack=r{i // 2}",))
    ...                             for i in range(4)))
    >>> policy = HiveDPolicy(cluster, quotas={"a": 2, "b": 1})
    >>> policy.vc_cells("a"), policy.vc_cells("b")
    (('r0/n0', 'r0/n1'), ('r1/n2',))
    >>> obs = Observation(Task("t1", "face_recognition", 1000, tenant="a"),
    ...                   tuple(NodeState(f"n{i}") for i in range(4)), 0.0)
    >>> policy.decide(obs).reason
    'hived: tenant a: guaranteed cell r0/n0 (VC a 1 of 2 cells used; cell 1 of 1 slots)'
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from placement.policies.base import ClusterPolicy
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, NodeSpec, NodeState, Observation

__all__ = ["HiveDPolicy", "Routed", "rack_of", "buddy_allocate", "trim_to_depth", "DEFAULT_RACK"]

#: The rack of nodes without a ``rack=<name>`` label (one shared rack: the brief's default).
DEFAULT_RACK = "default"
_RACK_PREFIX = "rack="


def rack_of(spec: NodeSpec) -> str:
    """The node's first ``rack=<name>`` label, else :data:`DEFAULT_RACK` (unlike
    ``simulator.locality.rack_of``, where an unlabelled node is a rack of its own).

    >>> rack_of(NodeSpec("n", 1, 1, labels=("gpu", "rack=r7"))), rack_of(NodeSpec("m", 1, 1))
    ('r7', 'default')
    """
    for label in spec.labels:
        if label.startswith(_RACK_PREFIX) and len(label) > len(_RACK_PREFIX):
            return label[len(_RACK_PREFIX):]
    return DEFAULT_RACK


@dataclass(frozen=True)
class Routed:
    """One task this policy routed, still counted as outstanding at its node."""

    task_id: str
    tenant: str
    cell: str
    guaranteed: bool


def trim_to_depth(log: dict[str, deque], states: Mapping[str, NodeState]) -> None:
    """Drop each observed node's oldest records until it has no more than its ``queue_depth``
    (the tasks that left the node: assumed the oldest). Unobserved nodes keep theirs."""
    for node_id, state in states.items():
        records = log.get(node_id)
        while records and len(records) > state.queue_depth:
            records.popleft()


def _free(tree, free: set[str]) -> int:
    return (tree in free) if isinstance(tree, str) else sum(_free(c, free) for c in tree)


def _take(tree, count: int, free: set[str]) -> list[str]:
    """``count`` free leaves of ``tree`` (nested lists of cell ids): the smallest child that
    holds them all, else the fullest children whole, first in order on ties."""
    if isinstance(tree, str):
        free.discard(tree)
        return [tree]
    taken: list[str] = []
    while count > 0:
        sizes = [(child, _free(child, free)) for child in tree]
        fitting = [(n, i) for i, (_, n) in enumerate(sizes) if n >= count]
        if fitting:
            n, i = min(fitting)
            return taken + _take(tree[i], count, free)
        n, i = min((-n, i) for i, (_, n) in enumerate(sizes))
        taken += _take(tree[i], -n, free)
        count += n
    return taken


def buddy_allocate(quotas: Mapping[str, int], tree: list) -> dict[str, tuple[str, ...]]:
    """Each tenant's cells, tenants by quota (largest first) then name.

    >>> buddy_allocate({"a": 1, "b": 2}, [["x1", "x2"], ["y1", "y2", "y3"]])
    {'b': ('x1', 'x2'), 'a': ('y1',)}
    """
    free = set(_leaves(tree))
    if sum(quotas.values()) > len(free):
        raise ValueError(f"quotas ask for {sum(quotas.values())} cells, the cluster has "
                         f"{len(free)}")
    order = sorted(quotas, key=lambda t: (-quotas[t], t))
    return {t: tuple(_take(tree, quotas[t], free)) for t in order}


def _leaves(tree) -> list[str]:
    return [tree] if isinstance(tree, str) else [x for c in tree for x in _leaves(c)]


def _check_quotas(quotas: Mapping[str, int] | None) -> dict[str, int] | None:
    if quotas is None:
        return None
    if not isinstance(quotas, Mapping):
        raise ValueError(f"quotas must be a mapping tenant -> number of cells, got {quotas!r}")
    checked = {}
    for tenant, cells in quotas.items():
        if not isinstance(tenant, str):
            raise ValueError(f"quota tenant names must be strings, got {tenant!r}")
        if isinstance(cells, bool) or not isinstance(cells, int) or cells < 0:
            raise ValueError(f"quota of tenant {tenant!r} must be a whole number of cells >= 0, "
                             f"got {cells!r}")
        checked[tenant] = cells
    return checked


class HiveDPolicy(ClusterPolicy):
    """Scores: each observed node's rank in the decision order (0 = chosen)."""

    name = "hived"

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0, *,
                 quotas: Mapping[str, int] | None = None, cell_level: str = "node",
                 cell_slots: int | None = None, unknown_tenants: str = "opportunistic") -> None:
        if cell_level not in ("node", "gpu"):
            raise ValueError(f"cell_level must be 'node' or 'gpu', got {cell_level!r}")
        if cell_slots is not None and (isinstance(cell_slots, bool)
                                       or not isinstance(cell_slots, int) or cell_slots < 1):
            raise ValueError(f"cell_slots must be None or a whole number >= 1, "
                             f"got {cell_slots!r}")
        if unknown_tenants not in ("opportunistic", "refuse"):
            raise ValueError(f"unknown_tenants must be 'opportunistic' or 'refuse', "
                             f"got {unknown_tenants!r}")
        self.quotas = _check_quotas(quotas)
        self.cell_level, self.cell_slots = cell_level, cell_slots
        self.unknown_tenants = unknown_tenants
        self._log: dict[str, deque[Routed]] = {}
        super().__init__(cluster, costs, seed)

    def _cluster_changed(self) -> None:
        """Cells, their slots and the VCs of this cluster (quotas checked against it)."""
        racks: dict[str, list[list[str]]] = {}
        self._cells_of: dict[str, list[str]] = {}
        self._node_of: dict[str, str] = {}
        self._slots: dict[str, int] = {}
        for spec in self.cluster.nodes:
            prefix = f"{rack_of(spec)}/{spec.node_id}"
            if self.cell_level == "node":
                cells = [prefix]
            else:
                cells = [f"{prefix}/gpu{i}" for i in range(len(spec.gpus))] or [f"{prefix}/cpu"]
            slots = self.cell_slots or max(1, spec.task_slots // len(cells))
            for cell in cells:
                self._node_of[cell], self._slots[cell] = spec.node_id, slots
            self._cells_of[spec.node_id] = cells
            racks.setdefault(rack_of(spec), []).append(cells)
        tree = list(racks.values())
        quotas = self.quotas if self.quotas is not None else {"": len(self._node_of)}
        total = len(self._node_of)
        if sum(quotas.values()) > total:
            raise ValueError(f"quotas {quotas} ask for {sum(quotas.values())} {self.cell_level} "
                             f"cells; this cluster has {total}")
        self._vcs = buddy_allocate(quotas, tree)
        self._owner = {cell: t for t, cells in self._vcs.items() for cell in cells}

    def vc_cells(self, tenant: str) -> tuple[str, ...]:
        """The cells of the tenant's VC (empty for a tenant without a quota)."""
        return self._vcs.get(tenant, ())

    def outstanding(self, node_id: str) -> tuple[Routed, ...]:
        """The routed tasks counted as still at the node (as of the last decision)."""
        return tuple(self._log.get(node_id, ()))

    def decide(self, observation: Observation) -> Decision:
        ids, left_out = self.known_ids(observation)
        states = self.states(observation)
        task = observation.task
        tenant = task.tenant
        if not isinstance(tenant, str):
            raise ValueError(f"task {task.task_id}: tenant must be a string, got {tenant!r}")
        if tenant not in self._vcs and self.unknown_tenants == "refuse":
            raise KeyError(f"hived: tenant {tenant!r} of task {task.task_id} has no quota "
                           f"(known: {sorted(self._vcs)}); unknown_tenants='refuse'")
        for nid in ids:
            if states[nid].queue_depth < 0:
                raise ValueError(f"node {nid}: queue_depth must be >= 0, "
                                 f"got {states[nid].queue_depth}")
        trim_to_depth(self._log, {nid: states[nid] for nid in ids})
        keys, notes = self._cell_keys(tenant, ids, states)
        cell = min(keys, key=keys.__getitem__)
        node = self._node_of[cell]
        tier = keys[cell][0]
        guaranteed = tier < 2
        self._log.setdefault(node, deque()).append(Routed(task.task_id, tenant, cell,
                                                          guaranteed))
        best = {}
        for c, key in keys.items():
            n = self._node_of[c]
            best[n] = min(best.get(n, key), key)
        order = sorted(best, key=best.__getitem__)
        scores = {nid: float(order.index(nid)) for nid in ids}
        return Decision(node, self._reason(tenant, cell, guaranteed, notes[cell]) + left_out,
                        scores)

    def _cell_keys(self, tenant, ids, states):
        """Sort key per observed cell, (tier, ...) lowest wins; and a note on each.
        Tiers: 0 VC cell with room, no lower-priority load; 1 VC cell with room next to
        lower-priority load; 2 free cell in no VC; 3 idle cell of another VC; 4 anything."""
        mine = set(self._vcs.get(tenant, ()))
        keys, notes = {}, {}
        for nid in ids:
            records = self._log.get(nid, ())
            unrecorded = max(0, states[nid].queue_depth - len(records))
            rank = self.cluster_rank(nid)
            for i, cell in enumerate(self._cells_of[nid]):
                on_cell = [r for r in records if r.cell == cell]
                held = sum(r.guaranteed for r in on_cell)
                lower = len(on_cell) - held + unrecorded
                slots, load = self._slots[cell], len(on_cell) + unrecorded
                if cell in mine and held < slots:
                    keys[cell] = (1 if lower else 0, -held, rank, i)
                    notes[cell] = (f"; ahead of {lower} lower-priority task(s) there: HiveD would "
                                   f"preempt them, a streaming task is not killed") if lower else ""
                elif held == 0 and load < slots and cell not in mine:
                    owner = self._owner.get(cell)
                    keys[cell] = (2 if owner is None else 3, load, rank, i)
                    notes[cell] = "; free cell in no VC" if owner is None else \
                        f"; idle cell of VC {owner}"
                else:
                    keys[cell] = (4, load / slots, rank, i)
                    notes[cell] = f"; no free cell anywhere: queued ({load} of {slots} slots)"
        return keys, notes

    def _reason(self, tenant: str, cell: str, guaranteed: bool, note: str) -> str:
        vc = self._vcs.get(tenant)
        name = tenant if tenant else '"" (default)'
        used = {r.cell for rs in self._log.values() for r in rs
                if r.guaranteed and r.tenant == tenant}
        if vc is None:
            status = f"no VC: tenant {name} has no quota"
        else:
            status = f"VC {name} {len(used & set(vc))} of {len(vc)} cells used"
        if guaranteed:
            held = sum(1 for r in self._log[self._node_of[cell]]
                       if r.cell == cell and r.guaranteed)
            return (f"hived: tenant {name}: guaranteed cell {cell} ({status}; cell {held} of "
                    f"{self._slots[cell]} slots){note}")
        if vc is not None:
            status += ", none with room"
        return f"hived: tenant {name}: opportunistic cell {cell} ({status}){note}"
