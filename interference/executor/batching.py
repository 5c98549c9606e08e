"""Triton-style dynamic batching: ready inputs of one stage, from different records, wait
together until a batch is due; formed batches wait for a unit.

:class:`StageQueues` holds, per stage, the inputs whose dependencies are done (oldest first).
A queue yields a batch (:meth:`StageQueues.form`) when it holds the chosen batch size, or when
its oldest input has waited the stage's ``max_queue_delay_us``; a batch never holds more than
the chosen size (itself at most ``max_batch_size``). The caller also says how many batches it
can use now (``budget``: free units that could run the stage, less the batches already formed
for it), so a batch is formed when a unit can take it, and inputs that arrive meanwhile still
join it (Triton's batcher likewise forms a batch when a model instance is free).

With batching off (the executor's setting, or a stage without a batching
:class:`~workload.operators.BatchPolicy`) every input is due at once as a batch of one, except
that a stage whose function is called once per input (``OperatorStage.groupable``: a plain
per-record function, which reports which of its inputs failed) takes every input ready now,
shared out over the free units, as one **call group**: the function is still called once per
input, nothing waits for inputs to come, and the dispatcher schedules, times and hands over one
call instead of one per record (measured on example (b)'s executor, 2026-12-06: the dispatcher
spent 340 µs of CPU a review on its tokenize and label steps' batches of one). How many inputs
a group may take follows its calls' measured time (:meth:`StageQueues.timed`,
:func:`call_group_size`: as many as fit in :data:`CALL_GROUP_MS`, at most
:data:`MAX_CALL_GROUP`; one until measured), so
that a heavy per-record step still spreads over the free units instead of queueing on one.

:class:`ReadyBatches` holds the formed :class:`Batch` es until the scheduler places them, knows
where each may run (``"cpu"`` stages and retries after a GPU ran out of memory: cores; ``"gpu"``
stages: GPUs when the node has one; ``"any"``: both), and forms new ones only as far as free
units could take them (:meth:`ReadyBatches.form`).

Example::

    >>> from workload.operators import BatchPolicy
    >>> queues = StageQueues({"model": BatchPolicy.up_to(4, max_queue_delay_us=10_000)})
    >>> for i in range(5):
    ...     queues.put("model", PendingInput(None, "model", i, since=0.0))
    >>> [[p.value for p in batch] for batch in queues.form("model", 4, budget=2, now=0.001)]
    [[0, 1, 2, 3]]
    >>> queues.form("model", 4, budget=2, now=0.005), queues.next_due(now=0.005)
    ([], 0.01)
    >>> [[p.value for p in b] for b in queues.form("model", 4, budget=2, now=0.011)]
    [[4]]
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, Sequence

from workload.model import ComputingUnit, Stage

__all__ = ["PendingInput", "StageQueues", "Batch", "ReadyBatches", "MAX_CALL_GROUP",
           "CALL_GROUP_MS", "call_group_size"]

#: the most inputs one call group takes (a plain per-record stage's ready inputs, run in one
#: call of the stage; see the module doc)
MAX_CALL_GROUP = 32
#: the measured work a call group may hold (ms): a group runs on one unit, in order, so a
#: longer one would keep other free units idle and delay its last record by the others' work;
#: past a few dispatcher passes (0.1-0.3 ms of CPU each, measured) grouping repays nothing
CALL_GROUP_MS = 2.0
#: a grouped stage's recent calls whose per-input time (median) sizes its groups
CALL_TIMES_KEPT = 15


def call_group_size(per_input_ms: float | None) -> int:
    """Inputs a call group may take when one input's call measures ``per_input_ms`` (None:
    not measured yet, one input, which measures it).

    >>> call_group_size(None), call_group_size(0.03), call_group_size(0.5), call_group_size(40.0)
    (1, 32, 4, 1)
    """
    if per_input_ms is None or not per_input_ms > 0:
        return 1
    return max(1, min(MAX_CALL_GROUP, int(CALL_GROUP_MS / per_input_ms)))


@dataclass
class PendingInput:
    """One record's input to one stage: the record's state (the executor's), the stage, the
    value the stage's function gets, and since when it is ready (perf_counter s)."""

    record: Any
    stage: str
    value: Any
    since: float


class StageQueues:
    """Per-stage queues of ready inputs (see the module doc). ``policies``: stage name -> its
    :class:`~workload.operators.BatchPolicy`; ``batching``: False = batches of one, at once;
    ``grouped``: the stages that take call groups (with batching on). Used on the dispatcher
    thread only."""

    def __init__(self, policies: Mapping, batching: bool = True,
                 grouped: Collection[str] = ()) -> None:
        self.batching = batching
        self._grouped = frozenset(grouped) if batching else frozenset()
        # grouped stage -> one input's call (ms) in its last calls: a median, so that one
        # slow call (a first call's warm-up) does not keep the groups small for long
        self._input_ms: dict[str, deque[float]] = {}
        self._delay_s = {name: (p.max_queue_delay_us / 1e6 if batching and p.batching else 0.0)
                         for name, p in policies.items()}
        self._queues: dict[str, deque[PendingInput]] = {name: deque() for name in policies}

    def grouped(self, stage: str) -> bool:
        """Whether ``stage`` takes call groups (see the module doc)."""
        return stage in self._grouped

    def timed(self, stage: str, inputs: int, ms: float) -> None:
        """A call of ``stage`` with ``inputs`` inputs took ``ms`` (what sizes its call groups;
        other stages' calls and implausible times are ignored)."""
        if stage in self._grouped and inputs >= 1 and 0 < ms < 3_600_000:   # NaN fails too
            self._input_ms.setdefault(stage, deque(maxlen=CALL_TIMES_KEPT)).append(ms / inputs)

    def _per_input_ms(self, stage: str) -> float | None:
        times = self._input_ms.get(stage)
        return None if not times else sorted(times)[len(times) // 2]

    def put(self, stage: str, item: PendingInput) -> None:
        self._queues[stage].append(item)

    def waiting(self) -> list[str]:
        """Stages with inputs waiting, the one with the oldest input first."""
        names = [name for name, q in self._queues.items() if q]
        return sorted(names, key=lambda name: self._queues[name][0].since)

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def form(self, stage: str, size: int, budget: int, now: float) -> list[list[PendingInput]]:
        """Up to ``budget`` batches of ``stage`` that are due at ``now``, each at most ``size``
        inputs (``size`` 1 when batching is off)."""
        queue = self._queues[stage]
        if stage in self._grouped:   # a call group: what is ready, shared over the units
            size = min(call_group_size(self._per_input_ms(stage)),
                       -(-len(queue) // max(1, budget)))
        size = max(1, size if self.batching else 1)
        batches = []
        while budget > 0 and queue:
            if len(queue) < size and now - queue[0].since < self._delay_s[stage]:
                break  # neither full nor waited long enough: more inputs may come
            batches.append([queue.popleft() for _ in range(min(size, len(queue)))])
            budget -= 1
        return batches

    def next_due(self, now: float) -> float | None:
        """The earliest future time (perf_counter s) an oldest input's delay runs out; None
        when no queue is waiting on a delay (due queues wait for a free unit, not a timer)."""
        due = [q[0].since + self._delay_s[name] for name, q in self._queues.items() if q]
        future = [t for t in due if t > now]
        return min(future) if future else None

    def remove(self, predicate: Callable[[PendingInput], bool]) -> list[PendingInput]:
        """Take out (and return) the waiting inputs ``predicate`` selects (e.g. a failed
        record's)."""
        removed = []
        for name, queue in self._queues.items():
            keep = deque()
            for item in queue:
                (removed if predicate(item) else keep).append(item)
            self._queues[name] = keep
        return removed


@dataclass
class Batch:
    """Inputs of one stage from one or more records, placed as one scheduler stage.

    ready_at_s: its oldest input's ready time (s since the executor started: its place in
    line); cpu_only: a retry after the GPU ran out of memory; solo: a retry of one record's
    input alone (after its batch failed, or its own call did), whose failure counts against it.
    """

    batch_id: str
    stage: str
    items: list[PendingInput]
    ready_at_s: float
    cpu_only: bool = False
    solo: bool = False

    @property
    def input_size(self) -> int:
        """The records' summed task sizes (what the scheduler sees as the stage's size)."""
        return sum(item.record.task_size for item in self.items)


class ReadyBatches:
    """Formed batches waiting for a unit (see the module doc); dispatcher thread only.

    ``app_id``: the operator's name (the scheduler stages' app); ``devices``: stage -> "cpu",
    "gpu" or "any"; ``has_gpu``: whether the node has a GPU; ``costs``: told of every batch
    (``register`` / ``forget``: the schedulers' estimates look batch sizes up there);
    ``t0``: the executor's perf_counter origin.
    """

    def __init__(self, app_id: str, devices: Mapping[str, str], has_gpu: bool, costs,
                 t0: float) -> None:
        self.app_id = app_id
        self.devices = dict(devices)
        self.has_gpu = has_gpu
        self.costs = costs
        self.t0 = t0
        self._batches: dict[str, Batch] = {}
        self._count = 0

    def __bool__(self) -> bool:
        return bool(self._batches)

    def __getitem__(self, batch_id: str) -> Batch:
        return self._batches[batch_id]

    def kinds(self, stage: str, cpu_only: bool = False) -> frozenset[str]:
        """Unit kinds ``stage`` may run on here."""
        device = self.devices[stage]
        if cpu_only or device == "cpu" or not self.has_gpu:
            return frozenset({"cpu"})
        return frozenset({"gpu"}) if device == "gpu" else frozenset({"cpu", "gpu"})

    def may_run(self, batch: Batch, unit: ComputingUnit) -> bool:
        return unit.kind in self.kinds(batch.stage, batch.cpu_only)

    def waiting(self, cores_too: bool = True) -> list[Batch]:
        """The batches waiting; ``cores_too=False``: only those a CPU core may run."""
        return [b for b in self._batches.values()
                if cores_too or "cpu" in self.kinds(b.stage, b.cpu_only)]

    def add(self, stage: str, items: list[PendingInput], cpu_only: bool = False,
            solo: bool = False) -> Batch:
        self._count += 1
        batch = Batch(f"b{self._count:08d}", stage, items,
                      min(item.since for item in items) - self.t0, cpu_only, solo)
        self._batches[batch.batch_id] = batch
        self.costs.register(batch.batch_id, stage, batch.input_size, len(items))
        return batch

    def pop(self, batch_id: str) -> Batch:
        """A batch handed to a unit (the costs keep it until :meth:`finished`)."""
        return self._batches.pop(batch_id)

    def finished(self, batch: Batch) -> None:
        self.costs.forget(batch.batch_id)

    def drop(self, predicate: Callable[[PendingInput], bool]) -> int:
        """Take the waiting inputs ``predicate`` selects out of their batches; how many."""
        dropped = 0
        for batch_id, batch in list(self._batches.items()):
            keep = [item for item in batch.items if not predicate(item)]
            if len(keep) == len(batch.items):
                continue
            dropped += len(batch.items) - len(keep)
            self.costs.forget(batch_id)
            if keep:
                batch.items = keep
                self.costs.register(batch_id, batch.stage, batch.input_size, len(keep))
            else:
                del self._batches[batch_id]
        return dropped

    def as_stage(self, batch: Batch) -> Stage:
        """The batch as the scheduler sees it: one stage of the operator."""
        return Stage(batch.batch_id, self.app_id, batch.stage, batch.input_size,
                     not batch.cpu_only and self.devices[batch.stage] != "cpu", batch.ready_at_s)

    def form(self, queues: StageQueues, choose: Callable[[str, str], int],
             units: Sequence[ComputingUnit], now: float) -> None:
        """Form the batches that are due and that free units could take: per stage, free slots
        on the kinds it may run on, less the batches already waiting for those kinds. The size
        is ``choose(stage, kind)`` for the kind it will most likely run on."""
        free = {"cpu": 0, "gpu": 0}
        for unit in units:
            free[unit.kind] += max(0, unit.capacity - len(unit.running))
        for name in queues.waiting():
            kinds = self.kinds(name)
            budget = sum(free[k] for k in kinds) - sum(
                1 for b in self._batches.values() if kinds & self.kinds(b.stage, b.cpu_only))
            if budget <= 0:
                continue
            likely = "gpu" if "gpu" in kinds and (kinds == {"gpu"} or free["gpu"]) else "cpu"
            for items in queues.form(name, choose(name, likely), budget, now):
                self.add(name, items)
