"""The launcher's host mode: ``isolation: host`` in the cluster spec runs every TaskManager in
an emulated host of its own (``streamplace.hosts``), while the JobManager, the broker and the
placement service stay on the head host and bind the head (bridge) address.

What is decided here, and nowhere else:

* which mode is in use and why (:func:`plan_isolation`): ``host`` only when the spec asks for it
  and this machine can emulate hosts; otherwise today's CPU-set mode, with the reason;
* the addresses every client uses (:func:`with_host_addresses`): in host mode the broker and
  the JobManager are at the head address, reachable from the head host (it owns the bridge) and
  from every namespace (one hop over the bridge); loopback would reach neither from a host;
* each TaskManager's address and Flink options (:func:`taskmanager_address`,
  :func:`taskmanager_host_options`) and its host's limits (:func:`host_specs`);
* creating the hosts before the first process binds the head address, and removing them when
  neither the cluster nor the broker needs them any more (:class:`HostLauncher`).

In CPU-set mode nothing here changes a configuration or a command.

Example::

    >>> from streamplace.config import StreamplaceConfig
    >>> from workload.cluster_spec import load_cluster_spec
    >>> plan = plan_isolation(StreamplaceConfig(), load_cluster_spec("default"))
    >>> plan.mode, plan.reason
    ('cpu-set', 'the cluster spec asks for isolation: cpuset')
    >>> plan = plan_isolation(StreamplaceConfig(), load_cluster_spec("hosts"),
    ...                       probe=lambda: (True, "root"))
    >>> plan.mode, plan.head_address, taskmanager_address(plan, load_cluster_spec("hosts"), "tm_b")
    ('emulated-hosts', '10.213.0.1', '10.213.0.3')
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from streamplace.hosts.spec import HostSpec, head_address_of, host_address
from streamplace.hosts.system import MODE_CPU_SET, MODE_EMULATED, available
from workload.cluster_spec import LocalClusterSpec, SpecError, load_cluster_spec

if TYPE_CHECKING:  # streamplace.config imports this module
    from streamplace.config import StreamplaceConfig
    from streamplace.hosts.emulated import EmulatedHosts

__all__ = ["IsolationPlan", "plan_isolation", "with_host_addresses", "host_specs",
           "taskmanager_address", "taskmanager_host_options", "HostLauncher",
           "FIRST_ADDRESS_INDEX", "HOSTS_STATE_DIR", "is_loopback"]

#: Host part of the first TaskManager's address (1 is the head host); the i-th TaskManager of
#: the spec gets ``FIRST_ADDRESS_INDEX + i``, so an address never depends on start order.
FIRST_ADDRESS_INDEX = 2
#: Folder under the runtime home with the hosts' state file (what ``cluster stop`` removes,
#: also from a fresh process after a crash).
HOSTS_STATE_DIR = "hosts"

Probe = Callable[[], "tuple[bool, str]"]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IPs: addresses a process in a host cannot reach.

    Example::

        >>> is_loopback("127.0.0.1"), is_loopback("10.213.0.1")
        (True, False)
    """
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip()).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class IsolationPlan:
    """The mode in use (``MODE_EMULATED`` or ``MODE_CPU_SET``), why, and the head address
    (host mode only)."""

    mode: str
    reason: str
    head_address: str | None = None
    subnet: str | None = None

    @property
    def emulated(self) -> bool:
        return self.mode == MODE_EMULATED

    def describe(self) -> str:
        """The line ``cluster start``/``status`` print."""
        where = f", head address {self.head_address}" if self.emulated else ""
        return f"isolation: {self.mode}{where} ({self.reason})"


def _subnet(config: "StreamplaceConfig") -> ipaddress.IPv4Network:
    try:
        return ipaddress.IPv4Network(config.flink.hosts_subnet, strict=True)
    except ValueError as err:
        raise SpecError(f"flink.hosts_subnet {config.flink.hosts_subnet!r} is not an IPv4 "
                        f"network ({err})") from err


def plan_isolation(config: "StreamplaceConfig", spec: LocalClusterSpec,
                   probe: Probe = available) -> IsolationPlan:
    """Host mode when ``spec.isolation`` is ``host`` and ``probe()`` (root, namespaces, tc,
    cgroup v1: :func:`streamplace.hosts.available`) allows it; CPU-set mode otherwise."""
    if spec.isolation != "host":
        return IsolationPlan(MODE_CPU_SET, f"the cluster spec asks for isolation: "
                                           f"{spec.isolation}")
    ok, why = probe()
    if not ok:
        return IsolationPlan(MODE_CPU_SET, f"isolation: host falls back to CPU-set mode: "
                                           f"emulated hosts unavailable: {why}")
    subnet = _subnet(config)
    return IsolationPlan(MODE_EMULATED, why, str(head_address_of(subnet)), str(subnet))


def with_host_addresses(config: "StreamplaceConfig", spec: LocalClusterSpec | None = None,
                        probe: Probe = available) -> "StreamplaceConfig":
    """``config`` with the broker's and the JobManager's loopback addresses replaced by the head
    address when host mode is in use; ``config`` itself otherwise (CPU-set mode, an address set
    explicitly, or a spec that cannot be read: the launcher reports that one).

    Every client that takes its addresses from the configuration (job submission, the task
    pipeline's Kafka clients, the hook, the executor's feedback producer, the placement
    service) then reaches them from the head host and from inside the hosts.
    """
    if spec is None:
        try:
            spec = load_cluster_spec(config.flink.cluster_spec)
        except SpecError:
            return config
    if spec.isolation != "host":
        return config
    plan = plan_isolation(config, spec, probe)
    if not plan.emulated:
        return config
    moved = config.model_copy(deep=True)
    if is_loopback(moved.kafka.host):
        moved.kafka.host = plan.head_address
    if is_loopback(moved.flink.host):
        moved.flink.host = plan.head_address
    return moved


def taskmanager_address(plan: IsolationPlan, spec: LocalClusterSpec, node_id: str) -> str:
    """The address of ``node_id``'s host: ``subnet + FIRST_ADDRESS_INDEX + its position``."""
    if not plan.emulated:
        raise SpecError("TaskManagers have addresses of their own only in host mode")
    ids = [tm.id for tm in spec.taskmanagers]
    if node_id not in ids:
        raise SpecError(f"no TaskManager {node_id!r} in the cluster spec (known: {ids})")
    subnet = ipaddress.IPv4Network(plan.subnet)
    return str(host_address(subnet, FIRST_ADDRESS_INDEX + ids.index(node_id)))


def host_specs(spec: LocalClusterSpec) -> list[HostSpec]:
    """One :class:`HostSpec` per TaskManager, defaults filled in (``host_limits``)."""
    out = []
    for index, tm in enumerate(spec.taskmanagers):
        out.append(HostSpec(node_id=tm.id, address_index=FIRST_ADDRESS_INDEX + index,
                            **tm.host_limits()))
    return out


def taskmanager_host_options(address: str) -> dict[str, object]:
    """Flink options that put a TaskManager on its own address: it binds there and tells the
    JobManager (and the other TaskManagers, for data exchange) to reach it there."""
    return {"taskmanager.host": address, "taskmanager.bind-host": address}


class HostLauncher:
    """The emulated hosts of one runtime home: made before the first process, removed last.

    Example (as root)::

        launcher = HostLauncher(config, spec)
        launcher.ensure(busy=False)              # destroys stale hosts, then creates them
        argv = launcher.wrap("tm_a", ["taskmanager.sh", "start-foreground"])
        launcher.release(still_needed=lambda: False)
    """

    def __init__(self, config: "StreamplaceConfig", spec: LocalClusterSpec | None = None,
                 hosts: "EmulatedHosts | None" = None):
        self.config = config
        self.spec = spec
        self._hosts = hosts

    @property
    def state_dir(self) -> Path:
        return self.config.home / HOSTS_STATE_DIR

    @property
    def hosts(self) -> "EmulatedHosts":
        if self._hosts is None:
            from streamplace.hosts.emulated import EmulatedHosts
            self._hosts = EmulatedHosts(prefix=self.config.flink.hosts_prefix,
                                        subnet=self.config.flink.hosts_subnet,
                                        state_dir=self.state_dir)
        return self._hosts

    def listed(self) -> bool:
        """Whether the state file lists anything of ours (no root needed to ask)."""
        if self._hosts is None and not (self.state_dir / "hosts.json").is_file():
            return False
        return bool(self.hosts.state.resources())

    def _intact(self, wanted: list[HostSpec]) -> bool:
        handles = self.hosts.handles()
        if sorted(h.spec.model_dump_json() for h in handles.values()) != \
                sorted(s.model_dump_json() for s in wanted):
            return False
        run = self.hosts.system.run
        if run(["ip", "link", "show", "dev", self.hosts.names.bridge]).returncode != 0:
            return False  # e.g. a reboot: the state file outlived the kernel objects
        spaces = run(["ip", "netns", "list"]).stdout or ""
        present = {line.split()[0] for line in spaces.splitlines() if line.strip()}
        return all(h.namespace in present for h in handles.values())

    def ensure(self, busy: bool) -> str:
        """Create the spec's hosts; reuse them when the state file lists exactly these and they
        still exist; else remove what is listed first (a crash's leftovers, a changed spec).
        ``busy``: some TaskManager of ours still runs, so its host must not be pulled away.
        Returns ``"created"`` or ``"reused"``."""
        if self.spec is None:
            raise SpecError("HostLauncher.ensure needs the cluster spec")
        wanted = host_specs(self.spec)
        if self.listed():
            if self._intact(wanted):
                return "reused"
            if busy:
                from streamplace.processes import LaunchError
                raise LaunchError(f"the emulated hosts in {self.state_dir} differ from the "
                                  "cluster spec while TaskManagers still run in them; run "
                                  "`streamplace cluster stop` first")
            self.hosts.destroy()
        self.hosts.create(wanted)
        return "created"

    def wrap(self, node_id: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``node_id``'s host (its cgroups and network namespace)."""
        return self.hosts.wrap_command(node_id, argv)

    def release(self, still_needed: Callable[[], bool]) -> str | None:
        """Remove every host the state file lists unless ``still_needed()`` (the broker or the
        cluster still runs on the head address). Returns what happened, for the CLI."""
        if not self.listed():
            return None
        if still_needed():
            return (f"emulated hosts kept ({self.state_dir}): still in use on the head address; "
                    "they are removed when the last of cluster and broker stops")
        self.hosts.destroy()
        return f"emulated hosts removed (prefix {self.config.flink.hosts_prefix})"
