"""The simulator's clock: pending events in time order, and the run's event log.

Events at the same time are taken in the order they were pushed (a sequence number that grows
with every push breaks the tie, never object identity or hash order): that is what makes a run
reproducible event for event. An event is ``(kind, data)``; the kinds are the constants below,
and :class:`simulator.engine._Execution`'s loop says what each one does.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

__all__ = ["EventRecord", "EventQueue", "ARRIVAL", "SAMPLE", "STAGE_DONE", "LINK_DONE",
           "OOM_RETRY", "MODEL_READY"]

#: Kinds of pending event: a task arrives, the feedback sample is due, a stage or a link
#: transfer may have finished (stale ones are recognised by a version), a stage refused for
#: out-of-memory is ready again, a task's model has finished loading (``simulator.locality``).
ARRIVAL, SAMPLE, STAGE_DONE, LINK_DONE, OOM_RETRY, MODEL_READY = range(6)


@dataclass(frozen=True)
class EventRecord:
    """One line of a run's event log (``SimulationResult.events``)."""

    time: float
    kind: str
    task_id: str
    stage: str = ""
    node: str = ""
    unit: str = ""


class EventQueue:
    """Simulated time (``now``), the events still to happen, and the log of what happened."""

    def __init__(self, record_events: bool):
        self.now = 0.0
        self.record_events = record_events
        self.records: list[EventRecord] = []
        self._heap: list = []
        self._seq = 0

    def push(self, time: float, kind: int, data) -> None:
        """Queue an event of ``kind`` at ``time`` (after any already queued for that time)."""
        self._seq += 1
        heapq.heappush(self._heap, (time, self._seq, kind, data))

    def pending(self) -> bool:
        return bool(self._heap)

    def peek_time(self) -> float | None:
        """When the next queued event happens (None when nothing is queued)."""
        return self._heap[0][0] if self._heap else None

    def pop(self) -> tuple[int, object]:
        """The next event's ``(kind, data)``; the clock moves to its time."""
        time, _, kind, data = heapq.heappop(self._heap)
        self.now = time
        return kind, data

    def log(self, kind: str, task_id: str, stage: str = "", node: str = "",
            unit: str = "") -> None:
        # Times are rounded to 1e-9 s; simulator.slo treats finer differences as rounding.
        if self.record_events:
            self.records.append(EventRecord(round(self.now, 9), kind, task_id, stage, node,
                                            unit))
