"""Emulated hosts: each TaskManager in its own network namespace, address, shaped link, CPU
quota and memory limit, on one machine (:class:`EmulatedHosts`).

Layout (prefix ``sp``, subnet ``10.213.0.0/24``)::

    head host (JobManager, broker, placement service) -- spbr0 10.213.0.1
        |-- spv2h ==veth== spv2n 10.213.0.2  in netns sp-tm_a
        |-- spv3h ==veth== spv3n 10.213.0.3  in netns sp-tm_b

A node's uplink is the egress of its namespace-side veth (``tbf`` at ``uplink_mbps``), its
downlink the egress of the head-side veth (``tbf`` at ``downlink_mbps``); node-to-node traffic
crosses both, as through a switch. Its cgroups (``cpu``, ``cpuacct``, ``memory``) are
``<own cgroup>/streamplace/<prefix>-<node>`` in each hierarchy.

Example (as root; see ``docs/hosts.md``)::

    hosts = EmulatedHosts(prefix="sp", state_dir=home / "hosts")
    hosts.create([HostSpec(node_id="tm_a", address_index=2, uplink_mbps=40,
                           downlink_mbps=120, cpu_quota=0.5, memory_mb=256)])
    subprocess.Popen(hosts.wrap_command("tm_a", ["java", ...]))
    hosts.destroy()   # also from a fresh process after a crash
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Iterable, Sequence

from workload.cluster_spec import default_home

from streamplace.hosts.cleanup import DESTROY_GRACE_S, HostsCleanup
from streamplace.hosts.cleanup import command_text as _text
from streamplace.hosts.spec import (CGROUP_GROUP, CPU_PERIOD_US, HostHandle, HostNames,
                                    HostsError, HostSpec, head_address_of, host_address,
                                    tbf_arguments)
from streamplace.hosts.state import HostsState
from streamplace.hosts.system import CGROUP_CONTROLLERS, HostSystem

__all__ = ["EmulatedHosts", "NETNS_RUN_DIR", "ENTER_SCRIPT"]

#: Where ``ip netns add`` keeps its namespace handles (iproute2's NETNS_RUN_DIR).
NETNS_RUN_DIR = "/run/netns"
#: Joins the cgroups given before ``--`` (writes its own pid to each cgroup.procs), then execs
#: the rest: the pid the launcher sees is the program's pid, inside all limits from its first
#: instruction. Run before ``nsenter`` so /sys/fs/cgroup is the head host's.
ENTER_SCRIPT = ('while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; '
                'shift; exec "$@"')


class EmulatedHosts:
    """Create, enter and remove the emulated hosts of one prefix; the state file remembers them.

    ``system`` is the one door to commands and files (scripted in unit tests). Several objects
    may point at the same ``state_dir``: the file, not the object, is the truth.
    """

    def __init__(self, prefix: str = "sp", subnet: str = "10.213.0.0/24",
                 state_dir: str | Path | None = None, system: HostSystem | None = None,
                 destroy_grace_s: float = DESTROY_GRACE_S):
        self.names = HostNames(prefix)
        try:
            self.subnet = ipaddress.IPv4Network(subnet, strict=True)
        except ValueError as err:
            raise HostsError(f"subnet {subnet!r} is not an IPv4 network ({err})") from err
        if not self.subnet.is_private or self.subnet.prefixlen > 29:
            raise HostsError(f"subnet {subnet} must be a private range (RFC 1918) with room "
                             "for hosts (/29 or larger): only addresses of our own namespaces "
                             "are used")
        self.system = system or HostSystem()
        self.destroy_grace_s = float(destroy_grace_s)
        self.state_dir = Path(state_dir) if state_dir is not None else default_home() / "hosts"
        self.state = HostsState(self.state_dir / "hosts.json", self.names,
                                self.system.cgroups.root, str(self.subnet))

    # -- looking up ----------------------------------------------------------------------
    @property
    def head_address(self) -> str:
        """The bridge's address: what the JobManager, broker and service bind to."""
        return str(head_address_of(self.subnet))

    def handles(self) -> dict[str, HostHandle]:
        """The hosts the state file lists as created, by node id."""
        return self.state.handles()

    def handle(self, node_id: str) -> HostHandle:
        handles = self.handles()
        if node_id not in handles:
            raise HostsError(f"no emulated host for node {node_id!r} (created: "
                             f"{sorted(handles)})")
        return handles[node_id]

    def address(self, node_id: str) -> str:
        return self.handle(node_id).address

    def wrap_command(self, node_id: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``node_id``'s cgroups and network namespace, same pid.

        ``nsenter --net`` rather than ``ip netns exec``: the latter also makes a mount namespace
        with a fresh /sys, which hides /sys/fs/cgroup from the program (a JVM then cannot see
        its CPU quota and sizes its thread pools for the whole machine).
        """
        if not argv:
            raise HostsError("wrap_command needs a command to run")
        handle = self.handle(node_id)
        procs = [f"{path}/cgroup.procs" for path in dict.fromkeys(handle.cgroups.values())]
        return ["sh", "-c", ENTER_SCRIPT, "streamplace-host", *procs, "--",
                "nsenter", f"--net={NETNS_RUN_DIR}/{handle.namespace}", "--", *argv]

    # -- creating ------------------------------------------------------------------------
    def create(self, specs: Iterable[HostSpec]) -> dict[str, HostHandle]:
        """Make every host in ``specs``; on any failure remove what was made and raise."""
        specs = self._checked(list(specs))
        if self.state.resources():
            raise HostsError(f"{self.state.path} still lists hosts of prefix "
                             f"{self.names.prefix!r}; call destroy() (streamplace cluster stop) "
                             "first")
        self._preflight(specs)
        try:
            self._create_bridge()
            for spec in specs:
                self.state.add_host(self._create_host(spec))
        except Exception as err:
            try:
                self.destroy()
            except HostsError as cleanup:
                raise HostsError(f"creating hosts failed ({err}); cleaning up also failed "
                                 f"({cleanup})") from err
            if isinstance(err, HostsError):
                raise
            raise HostsError(f"creating hosts failed: {err}") from err
        return self.handles()

    def _checked(self, specs: list[HostSpec]) -> list[HostSpec]:
        if not specs:
            raise HostsError("no hosts to create")
        for field in ("node_id", "address_index"):
            values = [getattr(s, field) for s in specs]
            if len(set(values)) != len(values):
                raise HostsError(f"every host needs its own {field}, got {values}")
        for spec in specs:
            host_address(self.subnet, spec.address_index)  # fits the subnet
            self.names.host_veth(spec.address_index)  # names fit IFNAMSIZ
            self.names.node_veth(spec.address_index)
        return specs

    def _preflight(self, specs: list[HostSpec]) -> None:
        """Refuse before making anything: the subnet in use here, or any name already taken."""
        addrs = self._must(["ip", "-o", "-4", "addr", "show"], "list addresses").stdout
        for line in addrs.splitlines():
            words = line.split()
            if "inet" in words:
                existing = ipaddress.ip_interface(words[words.index("inet") + 1])
                if existing.network.overlaps(self.subnet):
                    raise HostsError(f"subnet {self.subnet} overlaps {existing} on {words[1]}; "
                                     "choose another subnet")
        links = self._must(["ip", "-o", "link", "show"], "list links").stdout
        taken = {line.split(": ")[1].split("@")[0] for line in links.splitlines()
                 if ": " in line}
        spaces = self._must(["ip", "netns", "list"], "list namespaces").stdout
        taken |= {line.split()[0] for line in spaces.splitlines() if line.strip()}
        wanted = [self.names.bridge]
        for spec in specs:
            wanted += [self.names.host_veth(spec.address_index),
                       self.names.node_veth(spec.address_index),
                       self.names.namespace(spec.node_id)]
        clash = [name for name in wanted if name in taken]
        if clash:
            raise HostsError(f"{clash} already exist and are not in {self.state.path}: another "
                             "cluster uses this prefix, or they were made by hand; refusing to "
                             "touch them")
        for spec in specs:
            for path in self._cgroup_dirs(spec.node_id).values():
                if self.system.cgroups.exists(path):
                    raise HostsError(f"cgroup {path} already exists and is not ours")

    def _create_bridge(self) -> None:
        bridge = self.names.bridge
        self._make("bridge", bridge, ["ip", "link", "add", bridge, "type", "bridge"])
        self._must(["ip", "addr", "add", f"{self.head_address}/{self.subnet.prefixlen}",
                    "dev", bridge], "address the bridge")
        self._must(["ip", "link", "set", bridge, "up"], "bring the bridge up")

    def _create_host(self, spec: HostSpec) -> HostHandle:
        ns = self.names.namespace(spec.node_id)
        h_if = self.names.host_veth(spec.address_index)
        n_if = self.names.node_veth(spec.address_index)
        address = str(host_address(self.subnet, spec.address_index))
        cgroups = self._create_cgroups(spec)
        self._make("netns", ns, ["ip", "netns", "add", ns])
        self._make("veth", h_if, ["ip", "link", "add", h_if, "type", "veth", "peer", "name",
                                  n_if])
        steps = [
            ["ip", "link", "set", n_if, "netns", ns],
            ["ip", "link", "set", h_if, "master", self.names.bridge],
            ["ip", "link", "set", h_if, "up"],
            ["ip", "-n", ns, "link", "set", "lo", "up"],
            ["ip", "-n", ns, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", n_if],
            ["ip", "-n", ns, "link", "set", n_if, "up"],
            # the head host's other addresses (a service bound to 0.0.0.0) are reachable too
            ["ip", "-n", ns, "route", "add", "default", "via", self.head_address],
            ["tc", "-n", ns, "qdisc", "replace", "dev", n_if, "root",
             *tbf_arguments(spec.uplink_mbps)],
            ["tc", "qdisc", "replace", "dev", h_if, "root", *tbf_arguments(spec.downlink_mbps)],
        ]
        for argv in steps:
            self._must(argv, f"set up host {spec.node_id}")
        return HostHandle(spec=spec, namespace=ns, address=address, host_veth=h_if,
                          node_veth=n_if, cgroups=cgroups)

    def _cgroup_dirs(self, node_id: str) -> dict[str, str]:
        files = self.system.cgroups
        out = {}
        for controller in CGROUP_CONTROLLERS:
            own = files.own_group(controller).strip("/")
            group = files.mount(controller) / own / CGROUP_GROUP
            out[controller] = str(group / self.names.namespace(node_id))
        return out

    def _create_cgroups(self, spec: HostSpec) -> dict[str, str]:
        files = self.system.cgroups
        dirs = self._cgroup_dirs(spec.node_id)
        for path in dict.fromkeys(dirs.values()):  # co-mounted cpu,cpuacct: one folder
            group = str(Path(path).parent)
            if not files.exists(group):
                self.state.record("cgroup_group", group)
                self._mkdir("cgroup_group", group)
            self.state.record("cgroup", path)
            self._mkdir("cgroup", path)
        files.write(f"{dirs['cpu']}/cpu.cfs_period_us", str(CPU_PERIOD_US))
        files.write(f"{dirs['cpu']}/cpu.cfs_quota_us", str(spec.cpu_quota_us))
        files.write(f"{dirs['memory']}/memory.limit_in_bytes", str(spec.memory_bytes))
        memsw = f"{dirs['memory']}/memory.memsw.limit_in_bytes"
        if files.exists(memsw):  # swap accounting on: swap must not lift the limit either
            files.write(memsw, str(spec.memory_bytes))
        return dirs

    def _mkdir(self, kind: str, path: str) -> None:
        try:
            self.system.cgroups.mkdir(path)
        except FileExistsError as err:  # made by someone else since the check: not ours
            self.state.forget(kind, path)
            raise HostsError(f"cgroup {path} appeared meanwhile and is not ours") from err
        except OSError as err:
            self.state.forget(kind, path)
            raise HostsError(f"cannot create cgroup {path}: {err}") from err
        self.state.mark_created(kind, path)

    def _make(self, kind: str, name: str, argv: list[str]) -> None:
        """Record ``name``, run the command that makes it, mark it made (or drop the record)."""
        self.state.record(kind, name)
        done = self.system.run(argv)
        if done.returncode != 0:
            self.state.forget(kind, name)  # the command failed: nothing of ours to remove
            raise HostsError(f"`{' '.join(argv)}` failed: {_text(done)}")
        self.state.mark_created(kind, name)

    def _must(self, argv: list[str], what: str):
        done = self.system.run(argv)
        if done.returncode != 0:
            raise HostsError(f"{what}: `{' '.join(argv)}` failed: {_text(done)}")
        return done

    # -- removing ------------------------------------------------------------------------
    def destroy(self) -> None:
        """Remove everything the state file lists, newest first; idempotent, crash-safe (see
        :meth:`HostsCleanup.destroy`)."""
        HostsCleanup(self.state, self.system, self.destroy_grace_s).destroy()
