"""Per-task deadlines and priorities in a node executor's queues: who is admitted, who goes first.

A task may come with a :class:`~workload.task_attributes.TaskSLO` (tenant, relative deadline,
priority; from a TaskEvent's ``attributes``). The executor turns it into an :class:`Urgency`
when the task arrives: its **absolute deadline** is the arrival time on this node (the
executor's clock, ``time.perf_counter()``) plus the relative deadline. The node cannot trust a
producer's clock, so the deadline counts from the arrival here, not from ``submitted_at_ms``.

**The rule** (both queues below use it): earlier absolute deadline first (a task without a
deadline has an infinitely late one), then higher priority, then arrival order, and remaining
ties as without SLOs. A task whose SLO has neither a deadline nor a priority has no urgency
(``urgency_of`` returns None): when no task has one, both queues behave exactly as before
(first come, first served), and the node scheduler is asked exactly as before.

- **Admission** (``max_in_flight``): :class:`AdmissionGate` hands free slots to waiting
  submitters in the rule's order (:func:`admission_key`); without SLOs that is arrival order.
- **Ready stages**: the dispatcher asks the node scheduler about the ready stages in
  *windows* (:func:`assign_in_windows`): the stages in the rule's order (:func:`urgency_order`),
  as many per window as the units have free slots. A window's stages therefore get the first
  claim on the free units whatever the scheduler's own order (IAWP sorts by speed-up, SJF by
  size, ...); the scheduler still decides *where* each one runs, and may keep one waiting (e.g.
  for a GPU), in which case the next window's stages may use the units it left free (work
  conserving). Units that receive a stage show it as running to the next window.

Example::

    >>> from workload.model import ComputingUnit, Stage
    >>> from workload.task_attributes import TaskSLO
    >>> urgency = {"late": urgency_of(TaskSLO(deadline_s=10.0), 0.0),
    ...            "soon": urgency_of(TaskSLO(deadline_s=1.0), 0.0)}
    >>> ready = [Stage(t, "face_recognition", "face_detection", 10)
    ...          for t in ("plain", "late", "soon")]
    >>> [s.task_id for s in urgency_order(ready, urgency)]
    ['soon', 'late', 'plain']
    >>> urgency_of(TaskSLO(tenant="team-a"), 0.0) is None  # a tenant alone: no urgency
    True
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from interference.schedulers._checks import free_slots, ready_order
from workload.model import Assignment, ComputingUnit, Stage
from workload.task_attributes import TaskSLO

__all__ = ["Urgency", "urgency_of", "admission_key", "urgency_order", "assign_in_windows",
           "AdmissionGate", "MAX_WINDOWS", "SLOT_POLL_S"]

#: Most scheduler calls per dispatcher pass when tasks have urgencies: after this many windows
#: the rest of the ready stages go to the scheduler in one last call, so a pass stays bounded
#: (a window only holds as many stages as there are free slots, often one) and still fills
#: every unit it can. A bound on work, not a tuned value.
MAX_WINDOWS = 16

#: How often a submitter waiting for a slot looks whether it gave up or the executor closed (s).
SLOT_POLL_S = 0.05


@dataclass(frozen=True)
class Urgency:
    """A task's place in line: absolute deadline (executor clock, s; None: none) and priority.

    >>> Urgency(5.0, 2).rank < Urgency(None, 100).rank  # any deadline beats none
    True
    """

    deadline_at_s: float | None = None
    priority: int = 0

    @property
    def rank(self) -> tuple[float, int]:
        """Sort key: earlier deadline, then higher priority (smaller is more urgent)."""
        return (math.inf if self.deadline_at_s is None else self.deadline_at_s, -self.priority)


#: The rank of a task without urgency: after every deadline, at priority 0.
_NO_RANK = Urgency().rank


def urgency_of(slo: TaskSLO | None, arrived_s: float) -> Urgency | None:
    """The task's :class:`Urgency` from its SLO and arrival time (None: no SLO, or one with
    neither a deadline nor a priority; such tasks are served first come, first served).
    ``arrived_s`` must be finite (the executor passes ``time.perf_counter()``)."""
    if slo is None:
        return None
    if not isinstance(slo, TaskSLO):
        raise TypeError(f"slo must be a TaskSLO or None, got {type(slo).__name__}")
    if slo.deadline_s is None and slo.priority == 0:
        return None
    if not math.isfinite(arrived_s):
        raise ValueError(f"arrived_s must be finite, got {arrived_s!r}")
    deadline_at = None if slo.deadline_s is None else arrived_s + float(slo.deadline_s)
    return Urgency(deadline_at, int(slo.priority))


def admission_key(urgency: Urgency | None, arrived_s: float) -> tuple[float, int, float]:
    """The admission order of a waiting task: its rank, then arrival (FCFS without urgency).

    >>> admission_key(None, 2.0) < admission_key(None, 3.0)
    True
    """
    return (*(urgency.rank if urgency is not None else _NO_RANK), float(arrived_s))


def urgency_order(ready: Sequence[Stage], urgency: Mapping[str, Urgency]) -> list[Stage]:
    """``ready`` by the rule: their tasks' rank, then today's arrival order
    (:func:`~interference.schedulers._checks.ready_order`; the sort is stable). Tasks missing
    from ``urgency`` have none."""
    def rank(stage: Stage) -> tuple[float, int]:
        found = urgency.get(stage.task_id)
        return _NO_RANK if found is None else found.rank
    return sorted(ready_order(ready), key=rank)


def _occupied(units: list[ComputingUnit], placed: Sequence[Assignment]) -> list[ComputingUnit]:
    """The unit views after ``placed``: each unit shows the stages it just received as running
    (so the next window sees less room, and the co-runners a GPU now has)."""
    added: dict[str, list[str]] = {}
    for a in placed:
        added.setdefault(a.unit_id, []).append(a.stage.stage)
    return [dataclasses.replace(u, running=u.running + tuple(added[u.unit_id]))
            if u.unit_id in added else u for u in units]


def assign_in_windows(ordered: Sequence[Stage], units: Sequence[ComputingUnit], now_s: float,
                      assign: Callable[[list[Stage], list[ComputingUnit], float],
                                       list[Assignment]],
                      max_windows: int = MAX_WINDOWS) -> list[Assignment]:
    """Ask ``assign`` (the checked scheduler call) about ``ordered`` a window at a time: each
    window is the next stages in order, as many as the units have free slots; the units given
    to the next window show what earlier windows placed. After ``max_windows`` windows the rest
    go in one call. Returns every assignment made (each stage at most once, within the room).
    """
    out: list[Assignment] = []
    views = list(units)
    start = 0
    for window_no in itertools.count(1):
        room = sum(free_slots(u) for u in views)
        if room == 0 or start >= len(ordered):
            break
        end = len(ordered) if window_no >= max_windows else start + room
        placed = assign(list(ordered[start:end]), views, now_s)
        start = end
        if placed:
            out.extend(placed)
            views = _occupied(views, placed)
    return out


class AdmissionGate:
    """``slots`` admission slots handed out in :func:`admission_key` order.

    :meth:`try_take` takes a free slot at once unless a more urgent submitter waits;
    :meth:`take` waits in line (the most urgent key first; equal keys in the order they came)
    until a slot is free for it, ``gave_up`` is set or ``stop()`` says so (False: no slot
    taken). :meth:`release` frees one (more releases than takes raise ``ValueError``, like a
    ``BoundedSemaphore``).

    >>> gate = AdmissionGate(1)
    >>> gate.try_take(admission_key(None, 0.0)), gate.try_take(admission_key(None, 1.0))
    (True, False)
    >>> gate.release(); gate.try_take(admission_key(None, 2.0))
    True
    """

    def __init__(self, slots: int, poll_s: float = SLOT_POLL_S) -> None:
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be an integer >= 1, got {slots!r}")
        self.slots = slots
        self._free = slots
        self._poll_s = poll_s
        self._cond = threading.Condition()
        self._line: list[tuple[tuple, int]] = []  # (key, arrival number), kept sorted
        self._numbers = itertools.count()

    @property
    def waiting(self) -> int:
        """Submitters waiting in line now."""
        with self._cond:
            return len(self._line)

    def try_take(self, key: tuple) -> bool:
        """A slot now, if one is free and nobody more urgent waits."""
        with self._cond:
            if self._free > 0 and (not self._line or key < self._line[0][0]):
                self._free -= 1
                return True
            return False

    def take(self, key: tuple, gave_up: threading.Event | None = None,
             stop: Callable[[], bool] = lambda: False) -> bool:
        """Wait in line for a slot (see the class doc)."""
        with self._cond:
            if self._free > 0 and (not self._line or key < self._line[0][0]):
                self._free -= 1
                return True
            entry = (key, next(self._numbers))
            bisect.insort(self._line, entry)
            try:
                while True:
                    if (gave_up is not None and gave_up.is_set()) or stop():
                        return False
                    if self._free > 0 and self._line[0] is entry:
                        self._free -= 1
                        return True
                    self._cond.wait(self._poll_s)
            finally:
                self._line.remove(entry)
                self._cond.notify_all()  # the next in line may go now

    def release(self) -> None:
        """Free one slot; the most urgent waiter gets it."""
        with self._cond:
            if self._free >= self.slots:
                raise ValueError("AdmissionGate released more often than taken")
            self._free += 1
            self._cond.notify_all()
