"""Removing emulated hosts (:class:`HostsCleanup`): exactly what the state file lists, newest
first, tolerant of what is already gone, from any process (also after a crash).

Example::

    >>> import tempfile, pathlib
    >>> from streamplace.hosts.spec import HostNames
    >>> from streamplace.hosts.state import HostsState
    >>> state = HostsState(pathlib.Path(tempfile.mkdtemp()) / "hosts.json", HostNames("sp"),
    ...                    cgroup_root="/sys/fs/cgroup", subnet="10.213.0.0/24")
    >>> HostsCleanup(state).destroy()   # nothing listed: nothing done, no error
"""

from __future__ import annotations

import errno
import os
import subprocess

from streamplace.hosts.spec import HostsError
from streamplace.hosts.state import HostsState
from streamplace.hosts.system import HostSystem

__all__ = ["HostsCleanup", "DESTROY_GRACE_S", "KILL_WAIT_S", "POLL_S", "GONE_MESSAGES",
           "command_text"]

#: How long ``destroy`` waits after SIGTERM for processes left in a host before SIGKILL (a
#: TaskManager shuts down in about a second; a crash leaves it running with nobody to stop it).
DESTROY_GRACE_S = 5.0
#: How long to wait for SIGKILLed processes to leave their cgroups (they cannot refuse; exiting
#: a large JVM still takes a moment to free its memory).
KILL_WAIT_S = 2.0
#: How often membership is re-read while waiting.
POLL_S = 0.1
#: What `ip` prints when the thing to delete is already gone (a half-made or removed host).
GONE_MESSAGES = ("cannot find device", "does not exist", "no such file", "no such device")


def command_text(done: subprocess.CompletedProcess) -> str:
    """A failed command's message, for an error: stderr + stdout, or the exit status."""
    return ((done.stderr or "") + (done.stdout or "")).strip() or f"exit {done.returncode}"


class HostsCleanup:
    """Stop what runs in our hosts, then delete their links, namespaces and cgroups."""

    def __init__(self, state: HostsState, system: HostSystem | None = None,
                 grace_s: float = DESTROY_GRACE_S):
        self.state = state
        self.system = system or HostSystem()
        self.grace_s = float(grace_s)

    def destroy(self) -> None:
        """Remove everything the state file lists, newest first; idempotent.

        Processes still inside our namespaces or cgroups (a TaskManager a crashed launcher left)
        get SIGTERM, then SIGKILL after ``grace_s``. What cannot be removed stays in the state
        file for the next call, and a HostsError lists it; the file goes once it is empty.
        """
        resources = self.state.resources()
        self._stop_members(resources)
        errors = []
        for entry in reversed(resources):
            try:
                self._remove(entry["kind"], entry["name"])
            except HostsError as err:
                errors.append(str(err))
                continue
            self.state.forget(entry["kind"], entry["name"])
        if errors:
            raise HostsError(f"could not remove everything of prefix "
                             f"{self.state.names.prefix!r} ({self.state.path} keeps it; run "
                             "destroy again): " + "; ".join(errors))
        self.state.clear()

    def _remove(self, kind: str, name: str) -> None:
        if kind in ("bridge", "veth", "netns"):
            # deleting one veth end deletes its peer; deleting a namespace deletes the end in it
            argv = (["ip", "netns", "del", name] if kind == "netns"
                    else ["ip", "link", "del", name])
            done = self.system.run(argv)
            text = command_text(done)
            if done.returncode != 0 and not any(g in text.lower() for g in GONE_MESSAGES):
                raise HostsError(f"`{' '.join(argv)}` failed: {text}")
            return
        try:
            self.system.cgroups.rmdir(name)
        except FileNotFoundError:
            pass
        except OSError as err:
            if kind == "cgroup_group" and err.errno in (errno.EBUSY, errno.ENOTEMPTY):
                return  # another prefix's hosts live in it: theirs to leave, not ours to take
            raise HostsError(f"cannot remove cgroup {name}: {err}") from err

    def _members(self, resources: list[dict]) -> set[int]:
        """Pids inside our namespaces and host cgroups (never this process)."""
        pids: set[int] = set()
        for entry in resources:
            if entry["kind"] == "netns":
                done = self.system.run(["ip", "netns", "pids", entry["name"]])
                if done.returncode == 0:
                    pids |= {int(w) for w in done.stdout.split() if w.isdigit()}
            elif entry["kind"] == "cgroup":
                procs = f"{entry['name']}/cgroup.procs"
                if self.system.cgroups.exists(procs):
                    try:
                        text = self.system.cgroups.read(procs)
                    except OSError:
                        continue  # removed meanwhile
                    pids |= {int(w) for w in text.split() if w.isdigit()}
        pids.discard(os.getpid())
        return pids

    def _stop_members(self, resources: list[dict]) -> None:
        pids = self._members(resources)
        if not pids:
            return
        for pid in pids:
            self.system.terminate(pid)
        deadline = self.system.clock() + self.grace_s
        while pids and self.system.clock() < deadline:
            self.system.sleep(POLL_S)
            pids = self._members(resources)
        for pid in pids:
            self.system.force_kill(pid)
        deadline = self.system.clock() + KILL_WAIT_S
        while self._members(resources) and self.system.clock() < deadline:
            self.system.sleep(POLL_S / 2)
