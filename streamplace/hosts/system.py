"""The one door to the machine: every command and every cgroup / sysfs file the emulated hosts
touch goes through :class:`HostSystem`, so unit tests script it and nothing else needs root.

Also :func:`available`: whether this machine can emulate hosts at all (root, network
namespaces, ``tc``, ``nsenter``, cgroup v1 cpu/cpuacct/memory). When it cannot, the launcher
keeps today's CPU-set mode (taskset pinning, one shared network) and prints the reason;
:func:`select_mode` returns both.

Example::

    >>> import subprocess
    >>> fake = HostSystem(run=lambda argv: subprocess.CompletedProcess(argv, 0, "", ""),
    ...                   geteuid=lambda: 1000)
    >>> available(fake)
    (False, 'emulated hosts need root (running as uid 1000)')
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

__all__ = ["HostSystem", "CgroupFiles", "run_command", "available", "select_mode",
           "COMMAND_TIMEOUT_S", "CGROUP_CONTROLLERS", "MODE_EMULATED", "MODE_CPU_SET",
           "REQUIRED_TOOLS"]

#: No ip/tc call takes more than a fraction of a second; a hung one (a wedged netlink) must not
#: hang ``cluster stop``.
COMMAND_TIMEOUT_S = 30.0
#: The cgroup v1 controllers a host is limited and measured by.
CGROUP_CONTROLLERS = ("cpu", "cpuacct", "memory")
#: Programs the emulation runs (``ip`` for namespaces and links, ``tc`` for shaping, ``nsenter``
#: to start a process in a namespace without a new mount namespace, ``sh`` to join cgroups).
REQUIRED_TOOLS = ("ip", "tc", "nsenter", "sh")
MODE_EMULATED = "emulated-hosts"
MODE_CPU_SET = "cpu-set"

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess]


def run_command(argv: Sequence[str]) -> subprocess.CompletedProcess:
    """Run ``argv`` (never through a shell), capture its text output, never raise on exit status.

    Example::

        >>> run_command(["true"]).returncode
        0
    """
    try:
        return subprocess.run(list(argv), capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S, check=False)
    except FileNotFoundError as err:
        return subprocess.CompletedProcess(list(argv), 127, "", f"{argv[0]}: not found ({err})")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(argv), 124, "",
                                           f"timed out after {COMMAND_TIMEOUT_S} s")


class CgroupFiles:
    """cgroup v1 through plain files under ``root`` (``/sys/fs/cgroup``).

    ``proc_cgroup`` is the text of ``/proc/self/cgroup``: each host's cgroup is made under the
    launcher's own cgroup, so a launcher inside a container or a systemd slice keeps its hosts
    inside that container's or slice's limits instead of escaping to the root group.

    Example::

        >>> own = "4:memory:/a\\n2:cpu,cpuacct:/\\n"
        >>> files = CgroupFiles(root="/sys/fs/cgroup", proc_cgroup=own)
        >>> files.own_group("memory"), files.own_group("cpuacct")
        ('/a', '/')
    """

    def __init__(self, root: str | Path = "/sys/fs/cgroup", proc_cgroup: str | None = None):
        self.root = Path(root)
        self._proc_cgroup = proc_cgroup

    def mount(self, controller: str) -> Path:
        """The hierarchy holding ``controller``; co-mounted ``cpu,cpuacct`` resolve alike."""
        return Path(os.path.realpath(self.root / controller))

    def own_group(self, controller: str) -> str:
        text = self._proc_cgroup
        if text is None:
            text = Path("/proc/self/cgroup").read_text()
        for line in text.splitlines():
            parts = line.split(":", 2)
            if len(parts) == 3 and controller in parts[1].split(","):
                return parts[2] or "/"
        return "/"  # not listed: the hierarchy's root

    def mkdir(self, path: str) -> None:
        os.mkdir(path)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)

    def write(self, path: str, text: str) -> None:
        with open(path, "w") as handle:  # cgroup files take one write, no temp file + rename
            handle.write(text)

    def read(self, path: str) -> str:
        return Path(path).read_text()

    def exists(self, path: str) -> bool:
        return os.path.exists(path)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class HostSystem:
    """Everything outside Python the emulation uses, each replaceable in tests.

    ``run`` runs a command; ``cgroups`` reads and writes cgroup files; ``net_root`` is sysfs'
    ``/sys/class/net`` (interface counters of the head-host veth ends); ``kill`` signals a pid
    (only pids found inside our own namespaces and cgroups); ``which`` finds a program.
    """

    run: Runner = run_command
    cgroups: CgroupFiles = field(default_factory=CgroupFiles)
    net_root: Path = Path("/sys/class/net")
    kill: Callable[[int, int], None] = os.kill
    alive: Callable[[int], bool] = _process_alive
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    # looked up at call time, so a test's monkeypatch of os.geteuid / shutil.which applies
    which: Callable[[str], str | None] = lambda name: shutil.which(name)
    geteuid: Callable[[], int] = lambda: os.geteuid()

    def terminate(self, pid: int) -> None:
        self._signal(pid, signal.SIGTERM)

    def force_kill(self, pid: int) -> None:
        self._signal(pid, signal.SIGKILL)

    def _signal(self, pid: int, sig: int) -> None:
        try:
            self.kill(pid, sig)
        except ProcessLookupError:
            pass  # exited meanwhile: what we wanted


def available(system: HostSystem | None = None) -> tuple[bool, str]:
    """(True, what is used) when hosts can be emulated here, else (False, the first reason).

    Checks, in order: root; ``ip``, ``tc``, ``nsenter``, ``sh`` on PATH; a network namespace
    can be made (``unshare --net true``: leaves nothing behind); ``ip netns list`` works; cgroup
    v1 ``cpu`` (with cfs quota), ``cpuacct`` and ``memory`` are mounted.
    """
    system = system or HostSystem()
    uid = system.geteuid()
    if uid != 0:
        return False, f"emulated hosts need root (running as uid {uid})"
    for tool in REQUIRED_TOOLS + ("unshare",):
        if system.which(tool) is None:
            return False, f"`{tool}` was not found on PATH (iproute2 / util-linux)"
    probe = system.run(["unshare", "--net", "true"])
    if probe.returncode != 0:
        return False, ("this process may not create network namespaces (`unshare --net true`: "
                       f"{(probe.stderr or probe.stdout).strip() or probe.returncode})")
    listing = system.run(["ip", "netns", "list"])
    if listing.returncode != 0:
        return False, f"`ip netns list` failed: {(listing.stderr or '').strip()}"
    root = system.cgroups.root
    needed = {"cpu": "cpu.cfs_quota_us", "cpuacct": "cpuacct.usage",
              "memory": "memory.limit_in_bytes"}
    for controller, control in needed.items():
        if not system.cgroups.exists(str(root / controller / control)):
            return False, (f"cgroup v1 controller `{controller}` is not mounted at "
                           f"{root / controller} (no {control}); cgroup v2-only hosts use "
                           "CPU-set mode")
    return True, (f"root, network namespaces, tc, nsenter and cgroup v1 cpu/cpuacct/memory at "
                  f"{root}")


def select_mode(want_emulated: bool = True,
                system: HostSystem | None = None) -> tuple[str, str]:
    """(:data:`MODE_EMULATED` or :data:`MODE_CPU_SET`, why) for the launcher to print.

    Example::

        >>> select_mode(want_emulated=False)
        ('cpu-set', 'emulated hosts not requested')
    """
    if not want_emulated:
        return MODE_CPU_SET, "emulated hosts not requested"
    ok, reason = available(system)
    if ok:
        return MODE_EMULATED, reason
    return MODE_CPU_SET, f"emulated hosts unavailable: {reason}"
