"""The burst check: a model version whose correction would drain a burst slower than its own
prior is not published.

Why (measured 2026-12-03 on the emulated hosts, ``benchmarks/replay_decisions.py``): routers
run ahead of their executors and decide whole bursts before feedback returns, so a small bias
in the learned correction moves hundreds of tasks. Of 20 versions one service published in a
single run, the correction drained a replayed 2,000-task burst faster than the prior alone in 7
(4.2 s against 5.0 s at best) and slower in the rest, drifting to 7.8 s as training went on;
in the job, LDWP + IAWP made 152 records/s against MCT's 281. The publish gate's held-back
error cannot see this: the later versions predicted latencies better, and decided worse.

The check decides what matters to a router. Before a version is published it splits a burst
of the most recent task types and sizes (``burst`` of them) over the nodes as a router would
(each decision counts the task's estimated work against its node, nothing completes in
between), once with the learned correction and once with the prior alone
(``set_correction_scale(0)``: MCT's completion estimate with the learned costs). A node's
**drain rate** is measured, not estimated: tasks finished per second over the gaps between
two consecutive NodeFeedback reports that both show work queued or in flight (the newest
``window`` gaps per node). A split takes ``max(count / rate)`` over the nodes to drain. The
version passes when its split drains within ``tolerance`` of the prior's, or when there is
not enough to judge (fewer than ``min_tasks`` recent tasks, or a node without a rate): the
verdict says which. Why 2,000 tasks: a router holds at most ``executor_capacity`` tasks per
executor before it treats every node as full, so in a short burst the first decisions weigh
most; at 300 tasks the verdicts on the recorded versions flipped with the first few choices,
at 2,000 they agreed with the routers' replayed splits. A version that fails is refused like any other (the learner rolls back to
the last good weights), so the published correction never does worse than its prior on the
latest measured rates; where it does better, it is published.

Example::

    rates = DrainRates()
    rates.add(feedback_record, done=3)           # its timings the learner accepted
    check = BurstCheck(burst=2000)
    check.observe_task(task)                     # per example
    verdict = check.check(layers, metadata, cluster, costs, node_states, rates.rates())
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, deque
from collections.abc import Mapping

from workload.limits import require_count
from workload.model import NodeState, Observation, Task, offered_nodes

__all__ = ["BurstCheck", "BurstVerdict", "DrainRates", "burst_split", "drain_s"]


class DrainRates:
    """Per node, tasks finished per second while it had work (see the module docstring)."""

    def __init__(self, window: int = 240, max_nodes: int = 256, max_gap_s: float = 60.0):
        self.window, self.max_nodes, self.max_gap_s = window, max_nodes, max_gap_s
        self._last: dict[str, tuple[int, bool]] = {}       # node -> (emitted at ms, busy)
        self._gaps: dict[str, deque] = {}                   # node -> (seconds, tasks done)

    def add(self, record: Mapping, done: int) -> None:
        """One NodeFeedback record and how many of its timings were learned from (a broken
        one counts for no rate either); records must come in emission order per node."""
        node, at = record.get("node_id"), record.get("emitted_at_ms")
        if not isinstance(node, str) or isinstance(at, bool) or not isinstance(at, int):
            return
        if node not in self._last and len(self._last) >= self.max_nodes:
            return   # bounded: hostile feedback cannot grow it without end
        busy = any(isinstance(v, int) and not isinstance(v, bool) and v > 0
                   for v in (record.get("queue_depth"), record.get("in_flight")))
        previous = self._last.get(node)
        if previous is not None and at <= previous[0]:
            return   # a replay or an out-of-order report says nothing new
        self._last[node] = (at, busy)
        gap = (at - previous[0]) / 1000.0 if previous is not None else 0.0
        if previous is not None and busy and previous[1] and gap <= self.max_gap_s:
            self._gaps.setdefault(node, deque(maxlen=self.window)).append((gap, max(0, done)))

    def rates(self) -> dict[str, float]:
        """node -> tasks/s over its kept busy gaps (nodes that finished nothing left out)."""
        out = {}
        for node, gaps in self._gaps.items():
            seconds, done = sum(g for g, _ in gaps), sum(d for _, d in gaps)
            if seconds > 0 and done > 0:
                out[node] = done / seconds
        return out


def burst_split(policy, states: list[NodeState], costs, tasks: list[Task],
                capacity: Mapping[str, int] | None = None) -> dict[str, int]:
    """How a router deciding ``tasks`` back to back would split them: each decision sees the
    nodes' ``states`` with the burst's own in-flight counts and estimated backlog so far, and
    (with ``capacity``, in-flight tasks per node) only the nodes with room, as the router
    does (:func:`workload.model.offered_nodes`)."""
    ids = [s.node_id for s in states]
    base = {s.node_id: s for s in states}
    queue, backlog, split = Counter(), dict.fromkeys(ids, 0.0), dict.fromkeys(ids, 0)
    for task in tasks:
        offered, _ = offered_nodes(ids, queue, capacity)
        nodes = tuple(dataclasses.replace(base[n], queue_depth=queue[n], backlog_s=backlog[n])
                      for n in offered)
        node = policy.decide(Observation(task, nodes, 0.0)).node
        work = costs.estimates_s([node], task.app_id, task.input_size, explore=False)[node]
        queue[node] += 1
        backlog[node] += work * base[node].speed_factor
        split[node] += 1
    return split


def drain_s(split: Mapping[str, int], rates: Mapping[str, float]) -> float | None:
    """Seconds the busiest node needs for its share at its measured rate; None when a node
    that got tasks has no rate."""
    busy = {n: count for n, count in split.items() if count}
    if not busy or any(n not in rates for n in busy):
        return None
    return max(count / rates[n] for n, count in busy.items())


@dataclasses.dataclass(frozen=True)
class BurstVerdict:
    ok: bool
    reason: str
    trained_drain_s: float | None = None
    prior_drain_s: float | None = None


class BurstCheck:
    """Recent tasks and the node states they were decided in, and the check of a candidate
    version against its prior."""

    def __init__(self, burst: int = 2000, tolerance: float = 0.05, min_tasks: int = 1000,
                 capacity_per_node: int | None = None, snapshots: int = 4):
        # tolerance: how much slower than its prior a version may drain (inf: never refuse);
        # capacity_per_node: in-flight tasks the routers hold per node before they skip it as
        # full (RouterSettings.capacity_share); None when unknown: no node is ever full;
        # snapshots: earlier node states (those recent tasks were decided in) judged besides
        # the newest, evenly spread over the recent tasks (0: the newest states alone)
        if burst < 1 or min_tasks < 1 or not tolerance >= 0:   # NaN fails too
            raise ValueError("need burst >= 1, min_tasks >= 1 and a tolerance >= 0")
        if capacity_per_node is not None:
            require_count("capacity_per_node", capacity_per_node, 1)
        require_count("snapshots", snapshots, 0)
        self.burst, self.tolerance, self.min_tasks = burst, tolerance, min_tasks
        self.capacity_per_node, self.snapshots = capacity_per_node, snapshots
        self._tasks: deque[Task] = deque(maxlen=burst)
        self._states: deque[tuple[NodeState, ...]] = deque(maxlen=burst)

    def observe_task(self, task: Task, states: tuple[NodeState, ...] | None = None) -> None:
        """A task the learner trained on (or held back), with the node states it was decided
        in when known: the newest ``burst`` tasks are judged, under those states too."""
        self._tasks.append(task)
        if states is not None:
            self._states.append(tuple(states))

    def _state_sets(self, states: list[NodeState], nodes: set[str]) -> list[list[NodeState]]:
        """The newest ``states``, then ``snapshots`` recorded ones evenly spread over the
        recent tasks; each restricted to ``nodes`` and used only when it has every one."""
        history = list(self._states)
        picks = ([history[(len(history) - 1) * k // max(1, self.snapshots - 1)]
                  for k in range(self.snapshots)] if history and self.snapshots else [])
        sets = []
        for candidate in [list(states)] + [list(p) for p in picks]:
            known = [s for s in candidate if s.node_id in nodes]
            if len({s.node_id for s in known}) == len(nodes) == len(known):
                sets.append(known)
        return sets

    def check(self, layers, metadata: dict, cluster, costs, states: list[NodeState],
              rates: Mapping[str, float]) -> BurstVerdict:
        """The verdict on a candidate (its exported layers and metadata) given the nodes'
        newest ``states`` and measured drain ``rates`` (:class:`DrainRates`): the mean drain
        time over the newest and the recorded node states (see ``snapshots``) with the
        correction against the same without it."""
        from placement.ldwp.inference import NumpyLDWPPolicy
        tasks = list(self._tasks)
        nodes = {n.node_id for n in cluster.nodes} & {s.node_id for s in states}
        state_sets = self._state_sets(states, nodes)
        if len(tasks) < self.min_tasks or len(nodes) < 2 or not state_sets:
            return BurstVerdict(True, f"not judged: {len(tasks)} recent tasks, "
                                      f"{len(nodes)} nodes")
        policy = NumpyLDWPPolicy(layers, metadata, cluster, costs)
        if policy.q_prior != "completion":
            return BurstVerdict(True, "not judged: the model has no prior to compare with")
        capacity = (None if self.capacity_per_node is None else
                    dict.fromkeys(nodes, self.capacity_per_node))
        drains = {}
        for kind, scale in (("trained", 1.0), ("prior", 0.0)):
            policy.set_correction_scale(scale)
            drains[kind] = [drain_s(burst_split(policy, known, costs, tasks, capacity), rates)
                            for known in state_sets]
        if any(d is None for ds in drains.values() for d in ds):
            return BurstVerdict(True, "not judged: a node the burst reaches has no measured "
                                      "drain rate yet")
        trained = sum(drains["trained"]) / len(state_sets)
        prior = sum(drains["prior"]) / len(state_sets)
        over = f"over {len(state_sets)} node state{'s' if len(state_sets) > 1 else ''}"
        if trained > prior * (1.0 + self.tolerance):
            return BurstVerdict(False, f"its decisions drain a {len(tasks)}-task burst in "
                                       f"{trained:.3g} s at the measured rates, its prior's in "
                                       f"{prior:.3g} s ({over}; tolerance "
                                       f"{self.tolerance:.0%})", trained, prior)
        return BurstVerdict(True, f"burst drains in {trained:.3g} s (prior {prior:.3g} s, "
                                  f"{over})", trained, prior)
