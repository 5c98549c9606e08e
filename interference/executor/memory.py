"""A node executor's own memory defence: a per-task budget checked at admission, and an optional
address-space limit for the Python worker.

The router already refuses oversized tasks (``workload.limits``); this is the executor's defence
in depth, for a task that reached it anyway (a job without the router, a router with other
limits, a node smaller than the one the router assumed).

**The budget** (:class:`MemoryBudget`): a task is refused, FAILED before any work, when::

    size * bytes_per_unit > task_memory_fraction * node_memory_bytes

- ``size``: a built-in app's ``input_size`` (pixels), at ``workload.limits.BYTES_PER_PIXEL``
  (100) bytes each; a user record's ``task_size`` (serialized bytes), at
  ``workload.limits.BYTES_PER_RECORD_BYTE`` (16). A size of 0 (a record without a routed size)
  is never refused.
- ``task_memory_fraction``: the settings' field, default ``workload.limits.MEMORY_FRACTION``
  (0.5), the router's own share: one task never takes more than half of the node.
- ``node_memory_bytes``: the settings' field when it is > 0; else what this process can have:
  the smaller of the host's memory (``psutil.virtual_memory().total``) and the memory limit of
  its cgroup (v2 ``memory.max``, v1 ``memory.limit_in_bytes``; a container's or an emulated
  host's limit); ``workload.limits.DEFAULT_NODE_MEMORY_BYTES`` (1.5 GiB) if neither can be read.

On a 16 GiB host that admits up to 85,899,345 pixels (8 GiB / 100 B) and refuses the 10**8-pixel
task of issue 15; the project's largest generated task (1,048,576 pixels, about 100 MB) fits any
node of more than 200 MB.

**The address-space limit** (:func:`limit_address_space`, setting ``limit_address_space``, off by
default): ``RLIMIT_AS`` of the whole Python worker set to what it maps now plus one task budget,
so an allocation beyond it raises ``MemoryError`` in the stage that made it (reported as a FAILED
task) instead of swapping the node. Off by default because (1) the limit is per process, not per
task: every task and thread in the worker shares it, so one large task can make a small one fail;
(2) torch with CUDA reserves tens of GB of virtual address space (the CUDA context, pinned and
unified memory mappings) without using it, and glibc reserves 64 MB of address space per thread
arena, so a limit on virtual memory would fail CUDA initialisation and thread-heavy workers long
before any real memory runs out. It is therefore never applied when the executor has a GPU unit.

Example::

    >>> budget = MemoryBudget(node_bytes=4 << 30, fraction=0.5)
    >>> budget.refusal(1_048_576, 100, "input_size", "pixels") is None
    True
    >>> reason = budget.refusal(10**8, 100, "input_size", "pixels")
    >>> reason.split(" bytes estimated")[0]
    'refused before any work: input_size 100000000 pixels x 100 bytes = 10,000,000,000'
    >>> reason.endswith("budget of 2,147,483,648 bytes (0.5 of 4,294,967,296 bytes)")
    True
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from workload.limits import DEFAULT_NODE_MEMORY_BYTES

__all__ = ["MemoryBudget", "node_memory_bytes", "cgroup_memory_limit", "limit_address_space"]

log = logging.getLogger(__name__)

#: cgroup files holding this process's memory limit (v2, then v1).
CGROUP_LIMIT_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def cgroup_memory_limit(paths=CGROUP_LIMIT_FILES) -> int | None:
    """The memory limit of this process's cgroup in bytes, None when there is none (``max``,
    v1's "unlimited" of about 2**63, or no readable file)."""
    for path in paths:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < (1 << 60):
            return int(text)
        return None
    return None


def node_memory_bytes(configured: int = 0) -> int:
    """``configured`` when > 0; else the smaller of the host's memory and the cgroup limit;
    else :data:`~workload.limits.DEFAULT_NODE_MEMORY_BYTES`."""
    if configured > 0:
        return int(configured)
    candidates = []
    try:
        import psutil
        candidates.append(int(psutil.virtual_memory().total))
    except Exception:  # noqa: BLE001 - no psutil or no /proc: fall back below
        pass
    limit = cgroup_memory_limit()
    if limit is not None:
        candidates.append(limit)
    candidates = [c for c in candidates if c > 0]
    return min(candidates) if candidates else DEFAULT_NODE_MEMORY_BYTES


@dataclass(frozen=True)
class MemoryBudget:
    """The most memory one task may be estimated to need: ``fraction * node_bytes``."""

    node_bytes: int
    fraction: float

    @classmethod
    def for_settings(cls, settings) -> MemoryBudget:
        """From a ``NodeSettings`` (``node_memory_bytes``, ``task_memory_fraction``)."""
        return cls(node_memory_bytes(settings.node_memory_bytes), settings.task_memory_fraction)

    @property
    def limit_bytes(self) -> int:
        return int(self.fraction * self.node_bytes)

    def refusal(self, size: int, bytes_per_unit: float, name: str, unit: str) -> str | None:
        """Why a task of ``size`` units (``name``, e.g. ``input_size``, in ``unit``, e.g.
        pixels) at ``bytes_per_unit`` is refused, or None when its estimate fits."""
        estimate = int(size) * bytes_per_unit
        if estimate <= self.limit_bytes:
            return None
        return (f"refused before any work: {name} {int(size)} {unit} x {bytes_per_unit:g} bytes "
                f"= {int(estimate):,} bytes estimated, above this node's per-task memory budget "
                f"of {self.limit_bytes:,} bytes ({self.fraction:g} of {self.node_bytes:,} bytes)")


_applied: list[int] = []  # the soft limit this process set, once


def limit_address_space(budget: MemoryBudget, has_gpu: bool) -> int | None:
    """Set this process's soft ``RLIMIT_AS`` to its current virtual size plus one task budget
    (see the module doc); the limit set, or None when it was not (a GPU in use, no
    ``resource`` module, already set by another executor of this process, or refused)."""
    if has_gpu:
        log.warning("limit_address_space is ignored: this executor uses a GPU (CUDA reserves "
                    "address space far beyond the memory it uses)")
        return None
    if _applied:
        return _applied[0]
    try:
        import resource

        import psutil
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        target = int(psutil.Process(os.getpid()).memory_info().vms) + budget.limit_bytes
        if hard != resource.RLIM_INFINITY:
            target = min(target, hard)
        if soft != resource.RLIM_INFINITY and soft <= target:
            return None  # already tighter: leave it
        resource.setrlimit(resource.RLIMIT_AS, (target, hard))
    except Exception as exc:  # noqa: BLE001 - a limit we cannot set is logged, not fatal
        log.warning("could not set RLIMIT_AS: %s", exc)
        return None
    _applied.append(target)
    return target
