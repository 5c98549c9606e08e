"""SJF-BCO placement: the node whose links are least contended, balanced against its overhead.

Paper: "On Scheduling Ring-All-Reduce Learning Jobs in Multi-Tenant GPU Clusters with
Communication Contention" (Yu, Ji, Rajan & Liu, ACM MobiHoc 2022): SJF-BCO, Smallest Job First
with Balanced Contention and Overhead.

What it decides: the node for each task. For every known node it estimates the task's
*overhead* there (what the node costs even with its links quiet: MCT's compute estimate
``backlog_s / units + task_ms x speed_factor``, ``task_ms`` without its input transfer, plus the
input's transfer alone over the node's own link and its shared links) and the *contention* (the
extra transfer seconds caused by the transfers already in flight on those links, each link
shared fairly as in :mod:`simulator.shared_links`); the lowest ``overhead + contention_weight x
contention`` wins.

Adapted for streaming tasks and stages, and why:

- The paper places a ring-all-reduce job's workers on GPUs: spreading over more servers adds
  communication overhead, packing onto busy servers adds contention on their links (the number
  of jobs sharing a link slows each one), and it balances the two by trying contention caps and
  keeping the placement of least estimated time. A streaming task has no ring; its traffic is the
  input sent to its node (and the small result back), crossing the node's own downlink and, with
  racks, the rack's shared link. So contention = transfers in flight on those links, overhead =
  a slower node or a slower link, and the cap search becomes one weighted sum (``contention_weight
  = 1``: both in estimated seconds, the least estimated completion, which is what the cap search
  keeps).
- What it observes: never the simulator's links. It keeps a ledger of the inputs it sent itself
  (a router knows what it routed): each entry is its node and an estimated end, ``now +`` its
  transfer time estimated at decision time (not re-timed later); an entry leaves the ledger at
  that time, or earlier when the task's completion is reported (``observe_completion``). Shared
  links are public topology (``shared_links=``, the same :class:`~simulator.shared_links.
  SharedLinksConfig` the simulator runs with, e.g. from ``rack=`` labels, as HiveD and GAI read
  racks); without it (the zoo, where the shared-links axis is off) only each node's own link is
  modelled and the decision is MCT plus the input transfer under own-link contention.
- Smallest job first: the paper orders its job queue by size; a router places each task on
  arrival and has no queue, so the ordering is done where stages wait: the node scheduler
  ``sjf_bco_order`` (``interference.schedulers.sjf_bco_order``) starts the ready stages of the
  smallest estimated task first. The zoo pairs the two.

Settings (constructor keywords, each validated):

- ``contention_weight`` (1.0, >= 0, finite): the paper's balance between contention and overhead.
  0 ignores links in flight (MCT plus the transfer alone); above 1 avoids busy links beyond their
  estimated seconds (the paper's fear that contention grows as later jobs arrive).
- ``shared_links`` (None): the public shared-link topology; None models no shared link.
- ``bytes_per_unit`` (1.0), ``fixed_bytes`` (0.0): bytes a task sends, as
  ``SimulationConfig``'s settings of the same names (the paper's frames: a byte a unit).
- ``max_ledger`` (100000): most transfers remembered (oldest dropped first: bounded memory).

Scores: the weighted estimate in seconds per known node (lowest wins; ties: observation order).

Example::

    >>> from simulator.shared_links import SharedLink, SharedLinksConfig
    >>> from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task
    >>> nodes = tuple(NodeSpec(f"n{i}", 4, 16, labels=(f"rack=r{i // 2}",)) for i in range(3))
    >>> racks = SharedLinksConfig((SharedLink("r0", ("n0", "n1"), 1500),))  # 1 GbE nodes
    >>> policy = SjfBcoPolicy(ClusterSpec(nodes), shared_links=racks)
    >>> def task(i):
    ...     return Observation(Task(f"t{i}", "video_synopsis", 125_000_000),
    ...                        tuple(NodeState(f"n{j}") for j in range(3)), 0.0)
    >>> [policy.decide(task(i)).node for i in range(3)]  # n1 shares n0's rack link
    ['n0', 'n2', 'n1']
    >>> estimate, links = policy.decide(task(3)).reason.split("; ")[0].split(" (")
    >>> estimate                                       # every node equally contended now
    'sjf_bco: n0 21.5 s = compute 19.5 s + transfer alone 1 s + 1 x contention 1 s'
    >>> links
    '1 in flight on its link, 2 on r0)'
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from placement.policies.base import EstimatingPolicy, first_and_second
from placement.policies.mct import parallel_units
from simulator.shared_links import SharedLinksConfig, fair_rate
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, Observation, Task

__all__ = ["SjfBcoPolicy", "LinkEstimate"]


@dataclass(frozen=True)
class LinkEstimate:
    """One node's estimate for the task: seconds, and the transfers it would share links with."""

    compute_s: float
    transfer_alone_s: float
    transfer_s: float
    on_own_link: int                 # the policy's transfers in flight to this node
    on_shared: tuple[tuple[str, int], ...]  # (shared link, transfers in flight on it)

    @property
    def overhead_s(self) -> float:
        return self.compute_s + self.transfer_alone_s

    @property
    def contention_s(self) -> float:
        return self.transfer_s - self.transfer_alone_s


def _number(label: str, value, low: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < low:
        raise ValueError(f"{label} must be a finite number >= {low:g}, got {value!r}")
    return float(value)


class SjfBcoPolicy(EstimatingPolicy):
    """Scores: ``overhead + contention_weight x contention`` in seconds (lowest wins)."""

    name = "sjf_bco"

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0, *,
                 contention_weight: float = 1.0, shared_links: SharedLinksConfig | None = None,
                 bytes_per_unit: float = 1.0, fixed_bytes: float = 0.0,
                 max_ledger: int = 100_000) -> None:
        if shared_links is not None and not isinstance(shared_links, SharedLinksConfig):
            raise ValueError(f"shared_links must be a simulator.shared_links.SharedLinksConfig "
                             f"or None, got {type(shared_links).__name__}")
        if isinstance(max_ledger, bool) or not isinstance(max_ledger, int) or max_ledger < 1:
            raise ValueError(f"max_ledger must be an int >= 1, got {max_ledger!r}")
        self.contention_weight = _number("contention_weight", contention_weight, 0.0)
        self.bytes_per_unit = _number("bytes_per_unit", bytes_per_unit, 0.0)
        self.fixed_bytes = _number("fixed_bytes", fixed_bytes, 0.0)
        self.shared_links = shared_links
        self.max_ledger = max_ledger
        # task id -> (node id, estimated end of its input transfer), in decision order; the
        # ends in a heap and the counts per node kept alongside, so a decision costs
        # O(nodes + expired), not O(ledger)
        self._ledger: dict[str, tuple[str, float]] = {}
        self._ends: list[tuple[float, int, str]] = []
        self._counts: dict[str, int] = {}
        self._recorded = 0
        super().__init__(cluster, costs, seed)

    def _cluster_changed(self) -> None:
        super()._cluster_changed()
        self._units = {n.node_id: parallel_units(n) for n in self.cluster.nodes}
        self._down_bytes_s = {n.node_id: n.downlink_mbps * 1e6 / 8 for n in self.cluster.nodes}
        links = self.shared_links.links if self.shared_links is not None else ()
        self._groups = {n.node_id: [g for g in links if n.node_id in g.nodes]
                        for n in self.cluster.nodes}

    # -- the ledger of the policy's own transfers ---------------------------------------------

    def observe_completion(self, task_id: str, latency_s: float, node_id: str) -> None:
        """A completed task's input has certainly arrived: its transfer leaves the ledger
        (only when the node it was sent to reports it: another node's claim retires nothing)."""
        entry = self._ledger.get(task_id)
        if entry is not None and entry[0] == node_id:
            self._forget(task_id)

    def _forget(self, task_id: str) -> None:
        entry = self._ledger.pop(task_id, None)
        if entry is not None:
            self._counts[entry[0]] -= 1  # its heap entry is skipped when it comes up

    def _record(self, task_id: str, node_id: str, end_s: float) -> None:
        self._forget(task_id)  # a task id seen again replaces its earlier entry
        self._ledger[task_id] = (node_id, end_s)
        self._counts[node_id] = self._counts.get(node_id, 0) + 1
        self._recorded += 1
        heapq.heappush(self._ends, (end_s, self._recorded, task_id))
        while len(self._ledger) > self.max_ledger:
            self._forget(next(iter(self._ledger)))  # the oldest decision
        if len(self._ends) > 2 * self.max_ledger:  # drop stale heap entries now and then
            self._ends = [e for e in self._ends if self._ledger.get(e[2], (None, None))[1]
                          == e[0]]
            heapq.heapify(self._ends)

    def in_flight(self, now_s: float) -> dict[str, int]:
        """The policy's input transfers still estimated in flight, per node (expired dropped)."""
        while self._ends and self._ends[0][0] <= now_s:
            end_s, _, task_id = heapq.heappop(self._ends)
            entry = self._ledger.get(task_id)
            if entry is not None and entry[1] == end_s:
                self._forget(task_id)
        return {node_id: n for node_id, n in self._counts.items() if n > 0}

    # -- estimates ----------------------------------------------------------------------------

    def task_bytes(self, task: Task) -> float:
        return self.fixed_bytes + self.bytes_per_unit * float(task.input_size)

    def estimate(self, task: Task, node_id: str, speed_factor: float, backlog_s: float,
                 counts: dict[str, int]) -> LinkEstimate:
        """The task's estimate on the node, sharing links with the transfers in ``counts``."""
        size, own = self.task_bytes(task), self._down_bytes_s[node_id]
        # task_ms_on includes the input over the node's link alone (a byte per unit): taken
        # out here, the transfer is estimated below with its links and their contention
        task_s = max(0.0, self.task_ms(task, node_id) / 1000.0 - task.input_size / own)
        compute_s = backlog_s / self._units[node_id] + task_s * speed_factor
        groups = self._groups[node_id]
        on_shared = tuple((g.name, sum(counts.get(n, 0) for n in g.nodes)) for g in groups)
        alone = fair_rate(own, 1, [(g.bytes_per_s, 1) for g in groups])
        shared = fair_rate(own, counts.get(node_id, 0) + 1,
                           [(g.bytes_per_s, n + 1) for g, (_, n) in zip(groups, on_shared)])
        return LinkEstimate(compute_s, size / alone, size / shared, counts.get(node_id, 0),
                            on_shared)

    def _words(self, node_id: str, est: LinkEstimate, score: float) -> str:
        shared = "".join(f", {n} on {name}" for name, n in est.on_shared)
        return (f"{node_id} {score:.3g} s = compute {est.compute_s:.3g} s + transfer alone "
                f"{est.transfer_alone_s:.3g} s + {self.contention_weight:g} x contention "
                f"{est.contention_s:.3g} s ({est.on_own_link} in flight on its link{shared})")

    # -- decision -----------------------------------------------------------------------------

    def decide(self, observation: Observation) -> Decision:
        ids, left_out = self.known_ids(observation)
        states, task, now = self.states(observation), observation.task, observation.now_s
        counts = self.in_flight(now)
        estimates = {nid: self.estimate(task, nid, states[nid].speed_factor,
                                        states[nid].backlog_s, counts) for nid in ids}
        scores = {nid: e.overhead_s + self.contention_weight * e.contention_s
                  for nid, e in estimates.items()}
        node, second = first_and_second(ids, scores.__getitem__)
        nxt = f"next {self._words(second, estimates[second], scores[second])}" if second \
            else "only node"
        self._record(task.task_id, node, now + estimates[node].transfer_s)
        return Decision(node, f"sjf_bco: {self._words(node, estimates[node], scores[node])}; "
                              f"{nxt}{left_out}", scores)
