"""What one emulated host is (:class:`HostSpec`), what it is called on this machine
(:class:`HostNames`), and the settings that turn a spec into kernel objects.

A host is a TaskManager's own little machine: a Linux network namespace with one address on a
bridge, a link shaped to the spec's uplink and downlink bandwidth, a CPU quota and a memory
limit. Every name is derived from the cluster's ``prefix`` so two clusters (a developer's ``sp``
and a test run's ``spt``) never share an interface, namespace or cgroup.

Example::

    >>> spec = HostSpec(node_id="tm_a", address_index=2, uplink_mbps=40, downlink_mbps=120,
    ...                 cpu_quota=0.5, memory_mb=256)
    >>> names = HostNames("sp")
    >>> names.namespace("tm_a"), names.host_veth(2), names.node_veth(2), names.bridge
    ('sp-tm_a', 'spv2h', 'spv2n', 'spbr0')
    >>> spec.cpu_quota_us
    50000
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["HostsError", "HostSpec", "HostNames", "HostHandle", "IFNAMSIZ_MAX",
           "CPU_PERIOD_US", "MIN_CPU_QUOTA_US", "TBF_BURST_SECONDS", "TBF_MIN_BURST_BYTES",
           "TBF_LATENCY_MS", "MIN_MEMORY_MB", "MAX_LINK_MBPS", "CGROUP_GROUP",
           "NODE_ID_PATTERN", "PREFIX_PATTERN", "tbf_arguments", "host_address",
           "head_address_of"]

#: Linux interface names hold at most 15 characters (IFNAMSIZ 16 with the terminating NUL);
#: a longer name is refused by the kernel, so it is refused here first, with the name.
IFNAMSIZ_MAX = 15

#: cpu.cfs_period_us of every host: 100 ms, the kernel's default. The quota is
#: ``cpu_quota * period``; a shorter period throttles more smoothly but costs scheduler work.
CPU_PERIOD_US = 100_000
#: The kernel refuses a cfs quota below 1 ms.
MIN_CPU_QUOTA_US = 1_000

#: Token-bucket depth as time at the shaped rate. It must hold at least ``rate / HZ`` bytes
#: (tokens are refilled per timer tick; 10 ms covers HZ >= 100) but no more: a deeper bucket lets
#: a short transfer run at line rate (1 MB at 40 Mbit/s is 200 ms the spec does not have).
TBF_BURST_SECONDS = 0.010
#: ... and never less than ten full Ethernet frames, so a slow link still passes whole packets.
TBF_MIN_BURST_BYTES = 10 * 1514
#: Longest time a packet may wait in the host's link queue before it is dropped. 20 ms keeps the
#: queue deep enough for TCP to fill the link (the veth round trip is microseconds) while a
#: saturated link adds at most 20 ms to every other flow's latency, as a short real switch
#: buffer would.
TBF_LATENCY_MS = 20

#: Below this a JVM or a Python worker does not start; a smaller limit is a typo.
MIN_MEMORY_MB = 16
#: 100 Gbit/s: the fastest link a spec may ask for (a bigger figure is a unit mistake).
MAX_LINK_MBPS = 100_000.0

#: The folder under the launcher's own cgroup (per controller) that holds every host's cgroup.
CGROUP_GROUP = "streamplace"

#: Node ids as the cluster spec allows them (they become Flink option keys there).
NODE_ID_PATTERN = r"[A-Za-z][A-Za-z0-9_]*"
#: Prefixes: short, lower-case, so every derived name stays a valid interface name.
PREFIX_PATTERN = r"[a-z][a-z0-9]*"


class HostsError(RuntimeError):
    """Emulated hosts could not be created, used or removed; the message says what and why."""


class HostSpec(BaseModel):
    """One emulated host: the node it carries and the machine it pretends to be.

    Example::

        >>> HostSpec(node_id="tm_b", address_index=3, uplink_mbps=10, downlink_mbps=10,
        ...          cpu_quota=1.5, memory_mb=512).memory_bytes
        536870912
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    node_id: str = Field(description="the TaskManager / streamplace node id")
    address_index: int = Field(ge=2, le=65_534, description="host part of the node's address "
                               "in the subnet (1 is the head host); also names its veth pair")
    uplink_mbps: float = Field(gt=0, le=MAX_LINK_MBPS, description="node -> network, Mbit/s")
    downlink_mbps: float = Field(gt=0, le=MAX_LINK_MBPS, description="network -> node, Mbit/s")
    cpu_quota: float = Field(gt=0, le=4096, description="CPU cores the node may use (cfs quota)")
    memory_mb: int = Field(ge=MIN_MEMORY_MB, description="memory limit of the node's cgroup, MiB")

    @field_validator("node_id")
    @classmethod
    def _node_id_is_a_name(cls, value: str) -> str:
        if not re.fullmatch(NODE_ID_PATTERN, value) or len(value) > 64:
            raise ValueError(f"node id {value!r} must start with a letter, hold only letters, "
                             "digits and underscores, and be at most 64 characters")
        return value

    @field_validator("cpu_quota")
    @classmethod
    def _quota_is_enforceable(cls, value: float) -> float:
        if value * CPU_PERIOD_US < MIN_CPU_QUOTA_US:
            raise ValueError(f"cpu_quota {value} is below the kernel's smallest quota "
                             f"({MIN_CPU_QUOTA_US / CPU_PERIOD_US} cores)")
        return value

    @property
    def cpu_quota_us(self) -> int:
        """cpu.cfs_quota_us for this host (per :data:`CPU_PERIOD_US`)."""
        return int(round(self.cpu_quota * CPU_PERIOD_US))

    @property
    def memory_bytes(self) -> int:
        """memory.limit_in_bytes for this host."""
        return self.memory_mb * 1024 * 1024


def tbf_arguments(mbps: float) -> list[str]:
    """The ``tbf`` qdisc arguments shaping a link to ``mbps`` Mbit/s (rate in bits: unambiguous,
    tc's ``mbit`` suffix has meant both 10^6 and 2^20 across versions).

    Example::

        >>> tbf_arguments(40)
        ['tbf', 'rate', '40000000bit', 'burst', '50000b', 'latency', '20ms']
    """
    if not (math.isfinite(mbps) and 0 < mbps <= MAX_LINK_MBPS):
        raise HostsError(f"link rate {mbps!r} Mbit/s is not in (0, {MAX_LINK_MBPS}]")
    bits = int(round(mbps * 1e6))
    burst = max(TBF_MIN_BURST_BYTES, int(round(bits / 8 * TBF_BURST_SECONDS)))
    return ["tbf", "rate", f"{bits}bit", "burst", f"{burst}b", "latency", f"{TBF_LATENCY_MS}ms"]


def head_address_of(subnet: ipaddress.IPv4Network) -> ipaddress.IPv4Address:
    """The head host's (bridge's) address: the subnet's first host address."""
    return subnet.network_address + 1


def host_address(subnet: ipaddress.IPv4Network, index: int) -> ipaddress.IPv4Address:
    """The address of host ``index`` in ``subnet``; HostsError when it does not fit."""
    if not 2 <= index < subnet.num_addresses - 1:
        raise HostsError(f"address index {index} does not fit subnet {subnet} (usable: 2 .. "
                         f"{subnet.num_addresses - 2}; 1 is the head host)")
    return subnet.network_address + index


class HostNames:
    """Every kernel name derived from a cluster prefix; refuses names the kernel would refuse.

    Example::

        >>> HostNames("abcdefghijkl").bridge  # 15 characters: the longest allowed
        'abcdefghijklbr0'
        >>> try:
        ...     HostNames("abcdefghijklm")
        ... except HostsError as err:
        ...     print(str(err).split(";")[0])
        interface name 'abcdefghijklmbr0' is 16 characters
    """

    def __init__(self, prefix: str):
        if not re.fullmatch(PREFIX_PATTERN, prefix or ""):
            raise HostsError(f"prefix {prefix!r} must be lower-case letters and digits, "
                             "starting with a letter")
        self.prefix = prefix
        self.check_interface(self.bridge)

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br0"

    def namespace(self, node_id: str) -> str:
        """Network namespace of ``node_id``, also its cgroup's name: ``<prefix>-<node>``."""
        return f"{self.prefix}-{node_id}"

    def host_veth(self, index: int) -> str:
        """The head-host end of host ``index``'s link (its egress is the node's downlink)."""
        return self.check_interface(f"{self.prefix}v{index}h")

    def node_veth(self, index: int) -> str:
        """The namespace end of host ``index``'s link (its egress is the node's uplink)."""
        return self.check_interface(f"{self.prefix}v{index}n")

    def check_interface(self, name: str) -> str:
        if len(name) > IFNAMSIZ_MAX:
            raise HostsError(f"interface name {name!r} is {len(name)} characters; Linux allows "
                             f"at most {IFNAMSIZ_MAX} (shorten the prefix {self.prefix!r})")
        return name

    def owns_interface(self, name: str) -> bool:
        """Whether ``name`` is one this prefix could have made (a guard on the state file)."""
        pattern = rf"{re.escape(self.prefix)}(br0|v\d+[hn])"
        return bool(re.fullmatch(pattern, name)) and len(name) <= IFNAMSIZ_MAX

    def owns_namespace(self, name: str) -> bool:
        return bool(re.fullmatch(rf"{re.escape(self.prefix)}-{NODE_ID_PATTERN}", name))


@dataclass(frozen=True)
class HostHandle:
    """One created host: where it lives and what it is limited to.

    ``cgroups`` maps each controller (``cpu``, ``cpuacct``, ``memory``) to the host's cgroup
    folder; with co-mounted ``cpu,cpuacct`` both keys name the same folder.
    """

    spec: HostSpec
    namespace: str
    address: str
    host_veth: str
    node_veth: str
    cgroups: dict[str, str]

    @property
    def node_id(self) -> str:
        return self.spec.node_id
