"""Links shared by transfers: a rack's (or switch's) uplink that every node of the group crosses
(OFF unless ``SimulationConfig.shared_links`` is set).

Without this axis (:mod:`simulator.links`) each transfer crosses only its node's own downlink
(input) or uplink (result). With ``SimulationConfig.shared_links = SharedLinksConfig(...)`` every
transfer into a node of a group also crosses the group's link in the downward direction, and
every transfer out of it the upward one (a full-duplex link: each direction has the group's
capacity). A node may belong to several groups (a rack uplink and a pod uplink): its transfers
cross them all. With the default ``None`` the engine never builds this class and every run is
exactly as before.

Sharing. Each link (a node's own, or a group's) is shared fairly, processor sharing, among the
transfers on it at each moment: a transfer's rate is the MINIMUM over the links it crosses of its
fair share there (``capacity / transfers on the link``). This is the simple fair-share rule, not
max-min water-filling: bandwidth a transfer cannot use because another link limits it is not
handed to the others (a conservative model of TCP flows sharing a bottleneck).

Timing. A transfer's ``remaining`` stays in seconds alone on its own node link (as in
:mod:`simulator.links`, so :func:`simulator.runtime.advance` and the utilisation meter work
unchanged); its ``rate`` is its bandwidth over the node link's. Every start or finish re-times
every transfer (they are coupled through the group links) and queues one ``LINK_DONE`` event,
for the transfer that finishes first; a version number on this object voids earlier ones.
O(transfers in flight) per start or finish: fine for the tens of nodes simulated here.

Groups come from a list (:class:`SharedLink`) or from ``rack=<name>`` node labels
(:meth:`SharedLinksConfig.from_labels`, as HiveD and GAI read racks; unlabelled nodes are on no
shared link). Capacities: ``shared_links:`` in ``workload/calibration.yaml`` (10 GbE and 25 GbE
top-of-rack uplinks, cited; the benchmark's oversubscribed 1 GbE uplink, assumed).

Example::

    >>> from workload.model import ClusterSpec, NodeSpec
    >>> cluster = ClusterSpec((NodeSpec("a", 4, 16, labels=("rack=r1",)),
    ...                        NodeSpec("b", 4, 16, labels=("rack=r1",)), NodeSpec("c", 4, 16)))
    >>> config = SharedLinksConfig.from_labels(cluster, capacity_mbps=1000)
    >>> config.links
    (SharedLink(name='rack=r1', nodes=('a', 'b'), capacity_mbps=1000.0),)
    >>> config.links_of("a"), config.links_of("c")
    (('rack=r1',), ())
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workload.estimates import Calibration
from workload.model import ClusterSpec

from simulator.events import LINK_DONE, EventQueue
from simulator.links import LinkTransfers
from simulator.locality import RACK_LABEL
from simulator.runtime import Link, Node, Run, advance
from simulator.utilisation import UtilisationMeter

__all__ = ["SharedLink", "SharedLinksConfig", "SharedLinkTransfers", "fair_rate"]


@dataclass(frozen=True)
class SharedLink:
    """One shared link: the nodes behind it and its capacity in Mbit/s (each direction)."""

    name: str
    nodes: tuple[str, ...]
    capacity_mbps: float

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a shared link needs a non-empty name, got {self.name!r}")
        if not self.nodes or len(set(self.nodes)) != len(self.nodes):
            raise ValueError(f"shared link {self.name!r}: nodes must be a non-empty tuple of "
                             f"distinct node ids, got {self.nodes!r}")
        capacity = self.capacity_mbps
        if isinstance(capacity, bool) or not isinstance(capacity, (int, float)) \
                or not math.isfinite(capacity) or capacity <= 0:
            raise ValueError(f"shared link {self.name!r}: capacity_mbps must be a finite number "
                             f"> 0, got {capacity!r}")
        object.__setattr__(self, "capacity_mbps", float(capacity))

    @property
    def bytes_per_s(self) -> float:
        return self.capacity_mbps * 1e6 / 8


@dataclass(frozen=True)
class SharedLinksConfig:
    """The shared links of a cluster (``SimulationConfig.shared_links``)."""

    links: tuple[SharedLink, ...]

    def __post_init__(self) -> None:
        if not self.links:
            raise ValueError("SharedLinksConfig needs at least one shared link (leave "
                             "SimulationConfig.shared_links as None for none)")
        names = [link.name for link in self.links]
        if len(set(names)) != len(names):
            raise ValueError(f"shared link names must be distinct, got {names}")

    @classmethod
    def from_labels(cls, cluster: ClusterSpec, capacity_mbps: float) -> SharedLinksConfig:
        """One link per ``rack=<name>`` label (named ``rack=<name>``), every node carrying the
        label behind it; nodes without one are on no shared link."""
        racks: dict[str, list[str]] = {}
        for node in cluster.nodes:
            for label in node.labels:
                if label.startswith(RACK_LABEL) and len(label) > len(RACK_LABEL):
                    racks.setdefault(label, []).append(node.node_id)
                    break
        if not racks:
            raise ValueError(f"no node of cluster {cluster.name!r} has a {RACK_LABEL}<name> "
                             f"label: no shared link to build")
        return cls(tuple(SharedLink(name, tuple(ids), capacity_mbps)
                         for name, ids in racks.items()))

    @staticmethod
    def capacity_from_calibration(calibration: Calibration, key: str = "rack_uplink_mbps"
                                  ) -> float:
        """A capacity from ``shared_links:`` in calibration.yaml (``rack_uplink_mbps``: 10 GbE)."""
        section = calibration.raw.get("shared_links") or {}
        if key not in section:
            raise ValueError(f"calibration has no shared_links.{key}; known: {sorted(section)}")
        return float(section[key])

    def links_of(self, node_id: str) -> tuple[str, ...]:
        """Names of the shared links the node's transfers cross (config order)."""
        return tuple(link.name for link in self.links if node_id in link.nodes)

    def check_nodes(self, node_ids) -> None:
        """Refuse a config naming a node the cluster does not have."""
        known = set(node_ids)
        for link in self.links:
            unknown = [n for n in link.nodes if n not in known]
            if unknown:
                raise ValueError(f"shared link {link.name!r} names nodes {unknown} that are not "
                                 f"in the cluster ({sorted(known)})")


def fair_rate(own_bytes_s: float, own_transfers: int,
              shared: list[tuple[float, int]]) -> float:
    """Bytes/s of one transfer: the minimum over the links it crosses of its fair share
    (``capacity / transfers on the link``, the transfer itself counted).

    >>> fair_rate(100.0, 1, [(100.0, 2)])   # alone on its node link, one of two on the rack's
    50.0
    >>> fair_rate(100.0, 1, [(1000.0, 2)])  # the node link limits it; the rack's does not help
    100.0
    """
    rate = own_bytes_s / own_transfers
    for capacity, transfers in shared:
        rate = min(rate, capacity / transfers)
    return rate


class SharedLinkTransfers(LinkTransfers):
    """:class:`simulator.links.LinkTransfers` with shared group links (see the module doc): the
    same ``send_input`` / ``send_result`` / ``finish`` to the engine, one version for all links."""

    def __init__(self, queue: EventQueue, nodes: dict[str, Node], meter: UtilisationMeter,
                 fixed_bytes: float, bytes_per_unit: float, result_fraction: float,
                 config: SharedLinksConfig):
        super().__init__(queue, nodes, meter, fixed_bytes, bytes_per_unit, result_fraction)
        config.check_nodes(nodes)
        self.config = config
        self.version = 0  # one for all links: a start or finish anywhere re-times every transfer
        self._groups = {nid: [link for link in config.links if nid in link.nodes]
                        for nid in nodes}

    def finish(self, node_id: str, key: tuple, version: int) -> bool:
        if version != self.version:
            return False  # a later start or finish re-timed everything
        node = self.nodes[node_id]
        link = node.down if key[0] == "down" else node.up
        self.meter.accumulate(node)  # the node's link was busy until now
        self._advance_all()
        link.runs.remove(next(r for r in link.runs if r.key == key))
        self._reschedule_all()
        return True

    def _start(self, node: Node, link: Link, key: tuple, size_bytes: float) -> None:
        self._advance_all()
        link.runs.append(Run(key, size_bytes / link.bandwidth_bytes_s))
        self._reschedule_all()

    def _links(self):
        """Every (node, direction, own link), in cluster order, downlink before uplink."""
        for node in self.nodes.values():
            yield node, "down", node.down
            yield node, "up", node.up

    def _advance_all(self) -> None:
        now = self.queue.now
        for _, _, link in self._links():
            advance(link.runs, link.last_update_s, now)
            link.last_update_s = now

    def _reschedule_all(self) -> None:
        """New rates for every transfer; one event for the first to finish (ties: link order,
        then start order)."""
        self.version += 1
        on_group = {(g.name, d): 0 for g in self.config.links for d in ("down", "up")}
        for node, direction, link in self._links():
            for group in self._groups[node.spec.node_id]:
                on_group[group.name, direction] += len(link.runs)
        first: tuple[float, str, tuple] | None = None
        for node, direction, link in self._links():
            if not link.runs:
                continue
            shared = [(g.bytes_per_s, on_group[g.name, direction])
                      for g in self._groups[node.spec.node_id]]
            rate = fair_rate(link.bandwidth_bytes_s, len(link.runs), shared) \
                / link.bandwidth_bytes_s
            for run in link.runs:
                run.rate = rate
                finish_s = run.remaining / rate
                if first is None or finish_s < first[0]:
                    first = (finish_s, node.spec.node_id, run.key)
        if first is not None:
            self.queue.push(self.queue.now + first[0], LINK_DONE,
                            (first[1], first[2], self.version))
