"""What a node scheduler may know of a task beyond its stage: tenant, absolute deadline, priority.

A node scheduler sees only ``Stage(task_id, app_id, stage, input_size, gpu_capable,
ready_at_s)``. Schedulers that need per-task attributes (EDF-DVFS: deadlines; the virtual
multi-channel GPU fair scheduler: tenants) look them up here by ``task_id``. The directory is
filled from :class:`workload.model.Task` objects (the simulator's benchmark passes its workload as
the scheduler setting ``tasks=``; a live node adds each task as it is routed to it) and answers
:data:`UNKNOWN` (no tenant ``""``, no deadline, priority 0) for a task it does not hold, so a
stage of an unknown task is still scheduled, by the defaults.

Bound (``max_entries``, default :data:`DEFAULT_MAX_ENTRIES`, an ASSUMPTION: about 20 MB of
entries, ~10x the largest shipped workload). Over it, ``on_full`` decides:

- ``"lru"`` (default): :meth:`TaskDirectory.add` evicts the least recently used entry (added or
  looked up longest ago); a finished task is never looked up again, so it is what goes first.
  ``evicted`` counts them; an evicted task that comes back reads as unknown (defaults).
- ``"refuse"``: :meth:`TaskDirectory.add` raises ``ValueError`` and nothing is dropped.

Either way the *initial* list must fit: a workload larger than the bound is refused at
construction (with ``"lru"`` its first tasks would be evicted before they even arrived).

Example::

    >>> from workload.model import Task
    >>> d = TaskDirectory([Task("t1", "face_recognition", 10, 2.0, tenant="a", deadline_s=3.0)])
    >>> d.get("t1")
    TaskInfo(tenant='a', deadline_at_s=5.0, priority=0)
    >>> d.get("nobody") == UNKNOWN, len(d)
    (True, 1)
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from workload.model import Task
from workload.task_attributes import slo_of_task

__all__ = ["TaskInfo", "UNKNOWN", "TaskDirectory", "DEFAULT_MAX_ENTRIES", "ON_FULL"]

#: ASSUMPTION (a memory bound, not a measurement): entries kept at most by default.
DEFAULT_MAX_ENTRIES = 100_000
#: What ``add`` does when the directory is full.
ON_FULL = ("lru", "refuse")


@dataclass(frozen=True)
class TaskInfo:
    """A task's tenant, absolute deadline (arrival + deadline_s; None: none) and priority."""

    tenant: str = ""
    deadline_at_s: float | None = None
    priority: int = 0


#: What an unknown task reads as: no tenant, no deadline, priority 0.
UNKNOWN = TaskInfo()


class TaskDirectory:
    """task_id -> :class:`TaskInfo`, bounded; see the module docstring for the bound."""

    def __init__(self, tasks: Iterable[Task] = (), max_entries: int = DEFAULT_MAX_ENTRIES,
                 on_full: str = "lru") -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be an integer >= 1, got {max_entries!r}")
        if on_full not in ON_FULL:
            raise ValueError(f"on_full must be one of {ON_FULL}, got {on_full!r}")
        self.max_entries = max_entries
        self.on_full = on_full
        self.evicted = 0
        self._entries: OrderedDict[str, TaskInfo] = OrderedDict()
        if isinstance(tasks, (str, bytes, Task)) or not isinstance(tasks, Iterable):
            raise ValueError(f"tasks must be a list of Task, got {type(tasks).__name__}")
        for task in tasks:
            if len(self._entries) >= max_entries and getattr(task, "task_id", None) \
                    not in self._entries:
                raise ValueError(f"the task list holds more than max_entries={max_entries} "
                                 f"tasks; raise max_entries to the workload's size")
            self.add(task)

    @classmethod
    def coerce(cls, tasks, max_entries: int = DEFAULT_MAX_ENTRIES) -> TaskDirectory:
        """A scheduler's ``tasks=`` setting: None (empty), a TaskDirectory (used as is, shared)
        or an iterable of Task (a new directory bounded by ``max_entries``)."""
        if tasks is None:
            return cls(max_entries=max_entries)
        if isinstance(tasks, TaskDirectory):
            return tasks
        return cls(tasks, max_entries=max_entries)

    @staticmethod
    def info_of(task: Task) -> TaskInfo:
        """The task's entry, checked (bad tenant / deadline / priority / arrival: ValueError)."""
        if not isinstance(task, Task):
            raise ValueError(f"tasks must be workload.model.Task objects, got {task!r:.80}")
        slo = slo_of_task(task)
        arrival = task.arrival_s
        if isinstance(arrival, bool) or not isinstance(arrival, (int, float)) \
                or not math.isfinite(arrival) or arrival < 0:
            raise ValueError(f"task {task.task_id!r}: arrival_s must be a finite number >= 0, "
                             f"got {arrival!r}")
        deadline = None if slo.deadline_s is None else float(arrival) + float(slo.deadline_s)
        return TaskInfo(slo.tenant, deadline, slo.priority)

    def add(self, task: Task) -> TaskInfo:
        """Hold ``task``'s attributes (the same task again: its entry is refreshed). A task id
        already held with *different* attributes is refused: ids must be unique."""
        info = self.info_of(task)
        old = self._entries.get(task.task_id)
        if old is not None:
            if old != info:
                raise ValueError(f"task {task.task_id!r} is already held with {old}; task ids "
                                 f"must be unique (got {info})")
            self._entries.move_to_end(task.task_id)
            return info
        if len(self._entries) >= self.max_entries:
            if self.on_full == "refuse":
                raise ValueError(f"task directory is full (max_entries={self.max_entries}); "
                                 f"remove finished tasks or raise max_entries")
            self._entries.popitem(last=False)
            self.evicted += 1
        self._entries[task.task_id] = info
        return info

    def get(self, task_id: str) -> TaskInfo:
        """The task's attributes, or :data:`UNKNOWN` when it is not held (a hit counts as use)."""
        info = self._entries.get(task_id)
        if info is None:
            return UNKNOWN
        self._entries.move_to_end(task_id)
        return info

    def remove(self, task_id: str) -> None:
        """Forget a finished task (absent: nothing happens)."""
        self._entries.pop(task_id, None)

    def tenants(self) -> list[str]:
        """Every tenant held, sorted (the empty tenant included when some task has none)."""
        return sorted({info.tenant for info in self._entries.values()})

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return (f"TaskDirectory({len(self)} tasks, max_entries={self.max_entries}, "
                f"on_full={self.on_full!r})")
