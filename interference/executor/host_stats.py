"""The numbers of the host THIS process runs on, read the way a host agent reads them (issue 13,
item 2): CPU seconds and CPU quota from its cgroup v1 ``cpuacct`` / ``cpu`` groups, memory use and
limit from its ``memory`` group, bytes sent and received by its network namespace's interfaces.

Inside an emulated host (``streamplace.hosts``: a TaskManager started through ``wrap_command``
sits in its host's cgroups and network namespace) these are that host's numbers; inside a
container they are the container's. Which group is "ours" comes from ``/proc/self/cgroup``; where
each hierarchy is mounted from ``/proc/self/mountinfo`` (the standard ``/sys/fs/cgroup/<ctrl>``
when it says nothing). Interface counters come from ``/proc/self/net/dev``, which shows the
namespace of the reading process (``/sys/class/net`` shows the namespace sysfs was mounted in,
the head host's, when only the network namespace was entered).

Every reader is bounded and tolerant: a missing, unreadable or garbled file gives ``None``, never
an exception and never a non-finite number; ``root`` re-roots every path, for tests with a fake
``/proc`` and cgroup tree. torch and psutil are not imported here.

Example::

    >>> stats = HostStats(root="/nonexistent")   # nothing readable: every number is None
    >>> stats.cpu_quota(), stats.memory_limit_bytes(), stats.net_bytes()
    (None, None, None)
    >>> parse_count("1500000000\\n"), parse_count("nan"), parse_count("-1")
    (1500000000, None, None)
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

__all__ = ["HostStats", "HostCounters", "NetCounters", "parse_count", "parse_proc_cgroup",
           "parse_cgroup_mounts", "parse_net_dev", "read_limited", "CGROUP_ROOT",
           "CPU_CONTROLLER", "CPUACCT_CONTROLLER", "MEMORY_CONTROLLER", "CPUACCT_USAGE",
           "CFS_QUOTA_US", "CFS_PERIOD_US", "MEMORY_USAGE", "MEMORY_LIMIT", "MAX_COUNT",
           "NO_MEMORY_LIMIT_BYTES", "MAX_READ_BYTES", "IGNORED_INTERFACES",
           "IGNORED_INTERFACE_PREFIXES", "NS_PER_S"]

#: Where cgroup v1 hierarchies are mounted when ``/proc/self/mountinfo`` does not say.
CGROUP_ROOT = "/sys/fs/cgroup"
CPU_CONTROLLER, CPUACCT_CONTROLLER, MEMORY_CONTROLLER = "cpu", "cpuacct", "memory"
#: cgroup v1 files read (the same names the head-side ``streamplace.hosts.telemetry`` reads).
CPUACCT_USAGE = "cpuacct.usage"            # CPU time of the group, ns
CFS_QUOTA_US = "cpu.cfs_quota_us"          # -1: no quota
CFS_PERIOD_US = "cpu.cfs_period_us"
MEMORY_USAGE = "memory.usage_in_bytes"
MEMORY_LIMIT = "memory.limit_in_bytes"
#: Largest counter value believed: the kernel's counters are u64, but anything past a signed
#: 64-bit value is a garbled file, not 292 years of CPU or 8 EiB of traffic.
MAX_COUNT = 2**63 - 1
#: A memory limit at or above this (1 EiB) means "no limit": cgroup v1 writes the page counter's
#: maximum (9223372036854771712 on 4 KiB pages), not -1.
NO_MEMORY_LIMIT_BYTES = 2**60
#: Most bytes read from one file: ``mountinfo`` of a busy machine is tens of KiB; a file larger
#: than this is not one we understand, and the reader must not be made to swallow it whole.
MAX_READ_BYTES = 1 << 20
#: Interfaces whose bytes are not the host's traffic: loopback never leaves the host.
IGNORED_INTERFACES = ("lo",)
#: Name prefixes of interfaces that re-count traffic another interface already counted (ifb:
#: the Intermediate Functional Block devices that ingress shaping redirects packets through).
IGNORED_INTERFACE_PREFIXES = ("ifb",)
NS_PER_S = 1e9

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def parse_count(text: str | None) -> int | None:
    """A non-negative kernel counter (digits only, at most :data:`MAX_COUNT`), else None.

    >>> parse_count(" 42\\n"), parse_count("4.2"), parse_count(str(2**64))
    (42, None, None)
    """
    if text is None:
        return None
    text = text.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        return None
    value = int(text)
    return value if value <= MAX_COUNT else None


def read_limited(path: str | Path, limit: int = MAX_READ_BYTES) -> str | None:
    """The text of ``path`` (at most ``limit`` bytes), None when it cannot be read or decoded.

    >>> read_limited("/nonexistent/file") is None
    True
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except (OSError, ValueError):
        return None
    if len(data) > limit:
        return None  # truncated text would parse as something it is not
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """``/proc/<pid>/cgroup`` -> {cgroup v1 controller: group path}; v2's ``0::`` line and
    named hierarchies (``name=systemd``) are skipped, garbled lines ignored.

    >>> parse_proc_cgroup("4:memory:/a\\n2:cpu,cpuacct:/b\\n0::/c\\nbad\\n")
    {'memory': '/a', 'cpu': '/b', 'cpuacct': '/b'}
    """
    groups: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[1] or not parts[2].startswith("/"):
            continue
        for controller in parts[1].split(","):
            if controller and not controller.startswith("name="):
                groups.setdefault(controller, parts[2])
    return groups


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash in paths as octal escapes (\040 ...)
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_cgroup_mounts(text: str) -> dict[str, list[tuple[str, str]]]:
    """``/proc/<pid>/mountinfo`` -> {cgroup v1 controller: [(mount root, mount point), ...]}.

    A line is ``id parent dev root mountpoint opts [optional...] - fstype source superopts``;
    cgroup v1 mounts have fstype ``cgroup`` and their controllers among the super options.

    >>> line = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct"
    >>> parse_cgroup_mounts(line)["cpuacct"]
    [('/', '/sys/fs/cgroup/cpu,cpuacct')]
    """
    mounts: dict[str, list[tuple[str, str]]] = {}
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if dash < 5 or len(fields) < dash + 4 or fields[dash + 1] != "cgroup":
            continue
        root, point = _unescape(fields[3]), _unescape(fields[4])
        for option in fields[dash + 3].split(","):
            if option in ("rw", "ro") or "=" in option:
                continue
            mounts.setdefault(option, []).append((root, point))
    return mounts


@dataclass(frozen=True)
class NetCounters:
    """Bytes received / transmitted by the namespace's counted interfaces since they appeared."""

    rx_bytes: int
    tx_bytes: int
    interfaces: tuple[str, ...]


def _counted(name: str) -> bool:
    return name not in IGNORED_INTERFACES and not name.startswith(IGNORED_INTERFACE_PREFIXES)


def parse_net_dev(text: str) -> NetCounters:
    """``/proc/net/dev`` -> receive and transmit bytes summed over the counted interfaces (not
    loopback, not ifb); lines that are not ``name: 16 counters`` are skipped.

    >>> text = ("Inter-|...\\n face |...\\n    lo: 9 1 0 0 0 0 0 0 9 1 0 0 0 0 0 0\\n"
    ...         "  eth0: 100 2 0 0 0 0 0 0 40 1 0 0 0 0 0 0\\n")
    >>> parse_net_dev(text)
    NetCounters(rx_bytes=100, tx_bytes=40, interfaces=('eth0',))
    """
    rx = tx = 0
    names = []
    for line in text.splitlines():
        name, sep, counters = line.partition(":")
        name = name.strip()
        fields = counters.split()
        if not sep or not name or len(fields) != 16 or not _counted(name):
            continue
        received, sent = parse_count(fields[0]), parse_count(fields[8])
        if received is None or sent is None:
            continue
        rx, tx = min(MAX_COUNT, rx + received), min(MAX_COUNT, tx + sent)
        names.append(name)
    return NetCounters(rx, tx, tuple(names))


@dataclass(frozen=True)
class HostCounters:
    """Everything :class:`HostStats` reads, at one moment (``time_s``, monotonic); each None
    where it could not be read. ``cpu_quota`` in cores (None: no quota)."""

    time_s: float
    cpu_seconds: float | None
    cpu_quota: float | None
    memory_bytes: int | None
    memory_limit_bytes: int | None
    net: NetCounters | None


class HostStats:
    """Reader of the current process's own host: cgroup v1 CPU and memory, netns byte counters.

    ``root``: prefix of every path read (``/`` on a real machine; a ``tmp_path`` in tests);
    ``clock``: the monotonic clock stamped on :meth:`sample`. Group folders are resolved on
    first use and again whenever a read fails (the process may have been moved).

    Example::

        >>> HostStats(root="/nonexistent").sample(clock=lambda: 3.0).time_s
        3.0
    """

    def __init__(self, root: str | Path = "/", clock: Callable[[], float] = time.monotonic):
        self.root = Path(root)
        self.clock = clock
        self._dirs: dict[str, Path | None] | None = None

    def _path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    # ------------------------------------------------------------------ cgroup folders
    def _resolve(self) -> dict[str, Path | None]:
        groups = parse_proc_cgroup(read_limited(self._path("/proc/self/cgroup")) or "")
        mounts = parse_cgroup_mounts(read_limited(self._path("/proc/self/mountinfo")) or "")
        dirs: dict[str, Path | None] = {}
        for controller in (CPU_CONTROLLER, CPUACCT_CONTROLLER, MEMORY_CONTROLLER):
            group = groups.get(controller)
            dirs[controller] = None if group is None else self._group_dir(
                controller, group, mounts.get(controller, []))
        return dirs

    def _group_dir(self, controller: str, group: str,
                   mounts: list[tuple[str, str]]) -> Path | None:
        # A mount shows the hierarchy from its root on: a container's /sys/fs/cgroup/cpu often
        # mounts /docker/<id>, and /proc/self/cgroup then names /docker/<id>/... in full.
        best = None
        for mount_root, point in mounts:
            prefix = mount_root.rstrip("/")
            if group == mount_root or group.startswith(prefix + "/"):
                if best is None or len(mount_root) > len(best[0]):
                    best = (mount_root, point, group[len(prefix):])
        if best is None and not mounts:  # no mountinfo: the standard layout
            best = ("/", f"{CGROUP_ROOT}/{controller}", group)
        if best is None:
            return None  # our group is outside every mount of it: not visible here
        return self._path(best[1]) / best[2].lstrip("/")

    def group_dir(self, controller: str) -> Path | None:
        """The folder of this process's group in ``controller``'s hierarchy, None if unknown."""
        if self._dirs is None:
            self._dirs = self._resolve()
        return self._dirs.get(controller)

    def _read_count(self, controller: str, name: str) -> int | None:
        folder = self.group_dir(controller)
        value = None if folder is None else parse_count(read_limited(folder / name))
        if value is None and self._dirs is not None:
            self._dirs = None  # moved to another group? resolve again on the next read
        return value

    # ------------------------------------------------------------------ numbers
    def cpu_seconds(self) -> float | None:
        """CPU time the group used, in seconds (``cpuacct.usage``)."""
        ns = self._read_count(CPUACCT_CONTROLLER, CPUACCT_USAGE)
        return None if ns is None else ns / NS_PER_S

    def cpu_quota(self) -> float | None:
        """Cores the group may use (``cfs_quota_us / cfs_period_us``); None for no quota (-1)
        or unreadable files."""
        folder = self.group_dir(CPU_CONTROLLER)
        if folder is None:
            return None
        text = read_limited(folder / CFS_QUOTA_US)
        if text is None or text.strip() == "-1":
            return None
        quota, period = parse_count(text), parse_count(read_limited(folder / CFS_PERIOD_US))
        if not quota or not period:
            return None
        cores = quota / period
        return cores if math.isfinite(cores) and cores > 0 else None

    def memory_bytes(self) -> int | None:
        """Memory the group uses (``memory.usage_in_bytes``, page cache included)."""
        return self._read_count(MEMORY_CONTROLLER, MEMORY_USAGE)

    def memory_limit_bytes(self) -> int | None:
        """The group's memory limit; None when there is none (a huge value) or it is
        unreadable."""
        limit = self._read_count(MEMORY_CONTROLLER, MEMORY_LIMIT)
        return None if limit is None or limit == 0 or limit >= NO_MEMORY_LIMIT_BYTES else limit

    def net_bytes(self) -> NetCounters | None:
        """Bytes of this network namespace's counted interfaces; None when unreadable."""
        text = read_limited(self._path("/proc/self/net/dev"))
        return None if text is None else parse_net_dev(text)

    def sample(self, clock: Callable[[], float] | None = None) -> HostCounters:
        """Every number at once, stamped with ``clock`` (default: this reader's)."""
        time_s = (clock or self.clock)()
        return HostCounters(time_s=float(time_s), cpu_seconds=self.cpu_seconds(),
                            cpu_quota=self.cpu_quota(), memory_bytes=self.memory_bytes(),
                            memory_limit_bytes=self.memory_limit_bytes(), net=self.net_bytes())
