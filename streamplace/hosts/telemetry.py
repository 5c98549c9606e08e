"""What an emulated host uses, measured the way a real host's agent would (issue 13, item 2):
CPU time from its ``cpuacct`` cgroup, memory from its ``memory`` cgroup, bytes sent and received
from its link's interface counters; :func:`rates` turns two samples into utilisations over the
host's own capacity (its CPU quota, memory limit and shaped bandwidth).

The counters are read on the head host's end of the node's veth pair, so no command has to
enter the namespace: what the head end receives is what the node sent (its uplink), what it
transmits is what the node received (its downlink). Bytes the node's own link dropped were
never delivered, so they do not count. The same numbers, read from inside the host by the
executor itself, come from :mod:`interference.executor.host_stats`, whose file names and counter
parser this module shares (one rule for what a count is, on both sides).

Example::

    >>> a = HostSample("tm_a", time_s=10.0, cpu_seconds=1.0, memory_bytes=64 << 20,
    ...                memory_limit_bytes=256 << 20, tx_bytes=0, rx_bytes=0,
    ...                cpu_quota=0.5, uplink_mbps=40, downlink_mbps=120)
    >>> b = HostSample("tm_a", time_s=12.0, cpu_seconds=1.5, memory_bytes=128 << 20,
    ...                memory_limit_bytes=256 << 20, tx_bytes=5_000_000, rx_bytes=0,
    ...                cpu_quota=0.5, uplink_mbps=40, downlink_mbps=120)
    >>> r = rates(a, b)
    >>> r.cpu_util, r.mem_util, r.uplink_util, r.downlink_util
    (0.5, 0.5, 0.5, 0.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from streamplace.hosts.emulated import EmulatedHosts
from streamplace.hosts.spec import HostHandle, HostsError

__all__ = ["HostSample", "HostRates", "HostTelemetry", "rates"]


@dataclass(frozen=True)
class HostSample:
    """Cumulative counters of one host at one moment (``time_s`` on a monotonic clock), with
    the capacities they are measured against."""

    node_id: str
    time_s: float
    cpu_seconds: float
    memory_bytes: int
    memory_limit_bytes: int
    tx_bytes: int
    rx_bytes: int
    cpu_quota: float
    uplink_mbps: float
    downlink_mbps: float


@dataclass(frozen=True)
class HostRates:
    """Utilisations in [0, 1] over ``elapsed_s``: CPU over the quota, memory over the limit (at
    the later sample), uplink / downlink over the shaped bandwidth."""

    node_id: str
    elapsed_s: float
    cpu_util: float
    mem_util: float
    uplink_util: float
    downlink_util: float


def _clamp(value: float) -> float:
    # A counter reset (host recreated) gives a negative delta; a burst above the token rate or a
    # quota period boundary a little over 1: neither is a utilisation, both are clamped.
    if not math.isfinite(value):
        return 0.0
    return min(1.0, max(0.0, value))


def rates(earlier: HostSample, later: HostSample) -> HostRates:
    """Utilisations between two samples of the same host; all zero when no time passed.

    ValueError when the samples are of different hosts or out of order.
    """
    if earlier.node_id != later.node_id:
        raise ValueError(f"samples of different hosts: {earlier.node_id!r}, {later.node_id!r}")
    elapsed = later.time_s - earlier.time_s
    if not math.isfinite(elapsed) or elapsed < 0:
        raise ValueError(f"samples out of order: {earlier.time_s} then {later.time_s}")
    mem = later.memory_bytes / later.memory_limit_bytes if later.memory_limit_bytes > 0 else 0.0
    if elapsed == 0:
        return HostRates(later.node_id, 0.0, 0.0, _clamp(mem), 0.0, 0.0)
    cpu = (later.cpu_seconds - earlier.cpu_seconds) / (elapsed * later.cpu_quota)
    up = (later.tx_bytes - earlier.tx_bytes) * 8 / (elapsed * later.uplink_mbps * 1e6)
    down = (later.rx_bytes - earlier.rx_bytes) * 8 / (elapsed * later.downlink_mbps * 1e6)
    return HostRates(later.node_id, elapsed, _clamp(cpu), _clamp(mem), _clamp(up), _clamp(down))


class HostTelemetry:
    """Samples the hosts of one :class:`EmulatedHosts` (whose state file names them).

    Example (as root, hosts created)::

        telemetry = HostTelemetry(hosts)
        first = telemetry.sample("tm_a"); time.sleep(1)
        print(rates(first, telemetry.sample("tm_a")).cpu_util)
    """

    def __init__(self, hosts: EmulatedHosts):
        self.hosts = hosts
        self.system = hosts.system
        self._handles: dict[str, HostHandle] = {}

    def _handle(self, node_id: str) -> HostHandle:
        if node_id not in self._handles:  # read the state file once per host, not per sample
            self._handles[node_id] = self.hosts.handle(node_id)
        return self._handles[node_id]

    def sample(self, node_id: str) -> HostSample:
        """The host's counters now; HostsError when one cannot be read or is not a count."""
        # Imported here: importing any module of interference.executor runs that package's
        # __init__ (the executors, ~0.2 s), which `cluster start` / `stop` never need.
        from interference.executor.host_stats import (CPUACCT_USAGE, MEMORY_LIMIT,
                                                      MEMORY_USAGE, NS_PER_S)
        handle = self._handle(node_id)
        time_s = self.system.clock()
        cpu_ns = self._count(f"{handle.cgroups['cpuacct']}/{CPUACCT_USAGE}")
        memory = self._count(f"{handle.cgroups['memory']}/{MEMORY_USAGE}")
        limit = self._count(f"{handle.cgroups['memory']}/{MEMORY_LIMIT}")
        stats = self.system.net_root / handle.host_veth / "statistics"
        spec = handle.spec
        return HostSample(node_id=node_id, time_s=time_s, cpu_seconds=cpu_ns / NS_PER_S,
                          memory_bytes=memory, memory_limit_bytes=limit,
                          tx_bytes=self._count(str(stats / "rx_bytes")),
                          rx_bytes=self._count(str(stats / "tx_bytes")),
                          cpu_quota=spec.cpu_quota, uplink_mbps=spec.uplink_mbps,
                          downlink_mbps=spec.downlink_mbps)

    def throttled_s(self, node_id: str) -> float:
        """Seconds the host's ``cpu`` cgroup was throttled so far (its quota used up; cgroup v1
        ``cpu.stat`` ``throttled_time``); HostsError when it cannot be read."""
        from interference.executor.host_stats import parse_count
        path = f"{self._handle(node_id).cgroups['cpu']}/cpu.stat"
        for line in self._read(path).splitlines():
            name, _, value = line.partition(" ")
            count = parse_count(value) if name == "throttled_time" else None
            if count is not None:
                return count / 1e9
        raise HostsError(f"{path} has no throttled_time count")

    def sample_all(self) -> dict[str, HostSample]:
        self._handles = self.hosts.handles()
        return {node_id: self.sample(node_id) for node_id in sorted(self._handles)}

    def _count(self, path: str) -> int:
        from interference.executor.host_stats import parse_count
        text = self._read(path).strip()
        count = parse_count(text)
        if count is None:
            raise HostsError(f"{path} holds {text[:40]!r}, not a byte / nanosecond count")
        return count

    def _read(self, path: str) -> str:
        try:
            return self.system.cgroups.read(path)
        except OSError as err:
            raise HostsError(f"cannot read {path}: {err} (was the host removed?)") from err
