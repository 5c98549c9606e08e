"""The operator executor's bookkeeping of one record in flight.

:class:`RecordState` follows a record through its operator's DAG (stages waiting for their
dependencies, outputs so far, calls it took part in, its share of unit time) and turns into its
:class:`~interference.executor.results.RecordOutcome`.

Example::

    >>> import concurrent.futures
    >>> state = RecordState("r1", "a,b", 3, concurrent.futures.Future(), 0.0, {"parse"})
    >>> state.ok, state.in_flight
    (True, 0)
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

from interference.executor.batching import PendingInput
from interference.executor.results import RecordOutcome, StageRun

__all__ = ["RecordState"]


@dataclass
class RecordState:
    """One record in flight (dispatcher thread only).

    waiting: stages whose dependencies are not all done; outputs: stage -> this record's
    output; runs: stage -> how it ran; calls: stage -> calls its input took part in;
    solo_failures: stage -> failed calls of its input alone (what ``max_attempts`` counts);
    in_flight: its inputs waiting in a queue, formed into a batch, or running; cancel: set
    when it was cancelled or failed (lanes skip or stop batches made only of such records).
    """

    record_id: str
    record: Any
    task_size: int
    future: concurrent.futures.Future
    accepted_s: float
    waiting: set[str]
    outputs: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, StageRun] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    solo_failures: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    in_flight: int = 0
    work_ms: float = 0.0
    started_s: float | None = None
    error: str | None = None
    traceback: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event)  # set: stop its work

    @property
    def ok(self) -> bool:
        return self.error is None

    def release(self, operator, now: float) -> list[PendingInput]:
        """The inputs of the stages (of ``operator``, a ``StagedOperator``) whose dependencies
        are now done; they count as in flight from here."""
        items = []
        for name in operator.order:
            if name in self.waiting and all(d in self.outputs for d in operator.stage(name).deps):
                self.waiting.discard(name)
                items.append(PendingInput(self, name,
                                          operator.stage_inputs(name, self.record, self.outputs),
                                          now))
        self.in_flight += len(items)
        return items

    def outcome(self, results: Callable[[Any], list], sink: str, end_s: float,
                now_ms: Callable[[float], int]) -> RecordOutcome:
        """The finished record's outcome; ``results(sink output)`` gives its outputs (an error
        there fails the record too)."""
        outputs: list = []
        if self.ok:
            try:
                outputs = results(self.outputs[sink])
            except Exception as exc:  # noqa: BLE001 - e.g. a flat sink that is not iterable
                self.error = f"operator results from stage {sink!r} failed: " \
                             f"{type(exc).__name__}: {exc}"
        started = self.started_s if self.started_s is not None else self.accepted_s
        self.outputs.clear()  # free the stage outputs now, not when the caller drops it
        return RecordOutcome(
            self.record_id, "OK" if self.ok else "FAILED", outputs, self.error,
            self.traceback, now_ms(started), now_ms(end_s),
            (started - self.accepted_s) * 1000.0, (end_s - started) * 1000.0, self.work_ms,
            sorted(self.runs.values(), key=lambda r: (r.started_at_ms, r.stage)))
