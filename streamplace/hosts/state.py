"""The emulated hosts' state file (``<state_dir>/hosts.json``): what we made, written down
before we make it.

Every namespace, link and cgroup is recorded (``created: false``) *before* the command that
makes it runs, and marked ``created: true`` after. A crash at any point therefore leaves a file
that lists everything that may exist, so ``destroy()`` from a fresh process removes exactly
that. Before recording a name, the creator checks that nothing of that name exists yet, so a
pending entry that exists later was made by us. The file is also the only list ``destroy()``
acts on: a loaded file naming anything a prefix could not have produced (``eth0``, a path
outside the cgroup mounts) is refused, so a damaged file cannot make us remove what is not ours.

Example::

    >>> import tempfile, pathlib
    >>> from streamplace.hosts.spec import HostNames
    >>> state = HostsState(pathlib.Path(tempfile.mkdtemp()) / "hosts.json", HostNames("sp"),
    ...                    cgroup_root="/sys/fs/cgroup", subnet="10.213.0.0/24")
    >>> state.record("bridge", "spbr0"); state.mark_created("bridge", "spbr0")
    >>> state.resources()
    [{'kind': 'bridge', 'name': 'spbr0', 'created': True}]
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import ValidationError

from streamplace.hosts.spec import CGROUP_GROUP, HostHandle, HostNames, HostsError, HostSpec

__all__ = ["HostsState", "STATE_VERSION", "RESOURCE_KINDS"]

#: Bumped when the file's layout changes; an unknown version is refused, never guessed at.
STATE_VERSION = 1
#: What a record may name, in the order ``create`` makes them (``destroy`` goes backwards).
RESOURCE_KINDS = ("bridge", "cgroup_group", "cgroup", "netns", "veth")


class HostsState:
    """Load, validate and atomically rewrite the state file of one prefix's hosts."""

    def __init__(self, path: Path, names: HostNames, cgroup_root: str | Path, subnet: str):
        self.path = Path(path)
        self.names = names
        self.cgroup_root = Path(os.path.realpath(cgroup_root))
        self.subnet = subnet

    # -- reading -------------------------------------------------------------------------
    def load(self) -> dict[str, Any]:
        """The validated file, or an empty state when there is none."""
        empty = {"version": STATE_VERSION, "prefix": self.names.prefix, "subnet": self.subnet,
                 "hosts": [], "resources": []}
        if not self.path.exists():
            return empty
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as err:
            raise HostsError(f"cannot read the hosts state file {self.path}: {err}; remove what "
                             "it listed by hand (ip netns list / ip link / cgroups) and delete "
                             "it") from err
        self._validate(data)
        return data

    def resources(self) -> list[dict[str, Any]]:
        return list(self.load()["resources"])

    def handles(self) -> dict[str, HostHandle]:
        """Every fully created host, by node id."""
        out = {}
        for entry in self.load()["hosts"]:
            spec = HostSpec(**entry["spec"])
            out[spec.node_id] = HostHandle(spec=spec, namespace=entry["namespace"],
                                           address=entry["address"],
                                           host_veth=entry["host_veth"],
                                           node_veth=entry["node_veth"],
                                           cgroups=dict(entry["cgroups"]))
        return out

    # -- writing -------------------------------------------------------------------------
    def record(self, kind: str, name: str) -> None:
        """Write ``name`` down as possibly existing; call before making it."""
        self._check_resource({"kind": kind, "name": name, "created": False})
        with self._changing() as data:
            data["resources"].append({"kind": kind, "name": name, "created": False})

    def mark_created(self, kind: str, name: str) -> None:
        with self._changing() as data:
            for entry in data["resources"]:
                if entry["kind"] == kind and entry["name"] == name:
                    entry["created"] = True

    def forget(self, kind: str, name: str) -> None:
        """Drop a record: it was removed, or its creation failed (so it is not ours)."""
        with self._changing() as data:
            data["resources"] = [e for e in data["resources"]
                                 if not (e["kind"] == kind and e["name"] == name)]

    def add_host(self, handle: HostHandle) -> None:
        with self._changing() as data:
            data["hosts"].append({"spec": handle.spec.model_dump(),
                                  "namespace": handle.namespace, "address": handle.address,
                                  "host_veth": handle.host_veth, "node_veth": handle.node_veth,
                                  "cgroups": handle.cgroups})

    @contextmanager
    def _changing(self):
        """The state to change in place, saved on exit; an exclusive lock on a file beside
        it is held from load to save, so two processes changing the same prefix's hosts (a
        ``cluster stop`` while a benchmark still tears down) never lose each other's
        changes."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self.load()
            yield data
            self._save(data)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
        self._lock_path.unlink(missing_ok=True)

    @property
    def _lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    def _save(self, data: dict[str, Any]) -> None:
        # temp file + fsync + rename: a crash leaves the old or the new file, never half of one
        # (a temp name of its own: two writers sharing one name could expose an empty file)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=self.path.parent, prefix=self.path.name,
                                         suffix=".tmp", delete=False) as handle:
            json.dump(data, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, self.path)

    # -- validation ------------------------------------------------------------------------
    def _validate(self, data: Any) -> None:
        where = f"hosts state file {self.path}"
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise HostsError(f"{where}: not a version-{STATE_VERSION} state file")
        if data.get("prefix") != self.names.prefix:
            raise HostsError(f"{where} belongs to prefix {data.get('prefix')!r}, not "
                             f"{self.names.prefix!r}; use that prefix to remove its hosts")
        if not isinstance(data.get("resources"), list) or not isinstance(data.get("hosts"), list):
            raise HostsError(f"{where}: 'resources' and 'hosts' must be lists")
        for entry in data["resources"]:
            self._check_resource(entry)
        for host in data["hosts"]:
            try:
                HostSpec(**host["spec"])
                for key in ("namespace", "address", "host_veth", "node_veth"):
                    if not isinstance(host[key], str):
                        raise TypeError(f"{key} is not a string")
                for path in host["cgroups"].values():
                    self._check_cgroup_path(str(path), "cgroup")
            except (KeyError, TypeError, AttributeError, ValidationError) as err:
                raise HostsError(f"{where}: a host entry is damaged ({err})") from err

    def _check_resource(self, entry: Any) -> None:
        where = f"hosts state file {self.path}"
        if (not isinstance(entry, dict) or entry.get("kind") not in RESOURCE_KINDS
                or not isinstance(entry.get("name"), str)
                or not isinstance(entry.get("created"), bool)):
            raise HostsError(f"{where}: damaged resource entry {entry!r}")
        kind, name = entry["kind"], entry["name"]
        if kind in ("bridge", "veth") and not self.names.owns_interface(name):
            raise HostsError(f"{where} names interface {name!r}, which prefix "
                             f"{self.names.prefix!r} never makes; refusing to touch it")
        if kind == "netns" and not self.names.owns_namespace(name):
            raise HostsError(f"{where} names namespace {name!r}, which prefix "
                             f"{self.names.prefix!r} never makes; refusing to touch it")
        if kind in ("cgroup", "cgroup_group"):
            self._check_cgroup_path(name, kind)

    def _check_cgroup_path(self, path: str, kind: str) -> None:
        pure = PurePosixPath(path)
        inside = (pure.is_absolute() and ".." not in pure.parts
                  and PurePosixPath(self.cgroup_root) in pure.parents)
        if kind == "cgroup_group":
            ours = pure.name == CGROUP_GROUP
        else:
            ours = pure.parent.name == CGROUP_GROUP and self.names.owns_namespace(pure.name)
        if not (inside and ours):
            raise HostsError(f"hosts state file {self.path} names cgroup {path!r}, which is not "
                             f"one prefix {self.names.prefix!r} makes under {self.cgroup_root}; "
                             "refusing to touch it")
