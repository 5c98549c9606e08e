"""What an operator executor does with records whose stage calls fail: which inputs are re-run
(alone, or a whole batch on a core after a GPU ran out of memory), when a record has failed for
good, and how a failed record's inputs still running elsewhere are let go.

Split from :class:`interference.executor.operator_executor.OperatorExecutor` (a mixin of it) so
that the executor's class reads as admission, batching and completion; this is the failure path
those share. The methods run on the executor's dispatcher thread, like the rest of it, and use
its ``settings``, ``learner``, ``_queues`` (StageQueues), ``_ready`` (ReadyBatches) and
``_complete(state)``.
"""

from __future__ import annotations

import logging
import sys

from interference.executor.batching import Batch
from interference.executor.cancel import CANCELLED, StageCancelled
from interference.executor.lanes import is_cuda_oom
from interference.executor.operator_records import RecordState
from interference.executor.results import describe_failure, format_traceback
from workload.model import ComputingUnit

__all__ = ["RecordFailures"]

log = logging.getLogger(__name__)


class RecordFailures:
    """The failure path of :class:`~interference.executor.operator_executor.OperatorExecutor`
    (module docstring)."""

    def _batch_failed(self, batch: Batch, unit: ComputingUnit, exc: BaseException,
                      run) -> None:
        if isinstance(exc, StageCancelled):  # stopped for its cancelled records: no retry
            for state in (item.record for item in batch.items):
                if state.ok and state.cancel.is_set():
                    self._fail(state, CANCELLED)
        oom = unit.kind == "gpu" and is_cuda_oom(exc)
        if oom:
            sys.modules["torch"].cuda.empty_cache()
            self.learner.out_of_memory(batch.stage, unit, run)
        live = [item for item in batch.items if item.record.ok]
        for item in batch.items:
            if not item.record.ok:
                self._drop_input(item.record)
        if not live:
            return
        cpu_only = batch.cpu_only or oom
        if len(batch.items) > 1:  # whose input broke it is unknown: no record is charged
            log.info("executor %s: batch of %d for %r failed on %s (%s); %s",
                     self.settings.node_id, len(batch.items), batch.stage, unit.unit_id, exc,
                     "re-run on a core" if oom else "re-running its records one by one")
            if oom and len(live) > 1:
                self._ready.add(batch.stage, live, cpu_only=True)
            else:
                for item in live:
                    self._ready.add(batch.stage, [item], cpu_only, solo=True)
            return
        self._charge(live[0], batch.stage, cpu_only, unit, exc)

    def _charge(self, item, stage: str, cpu_only: bool, unit: ComputingUnit,
                exc: BaseException) -> None:
        """An input whose own call failed: re-run alone until it has failed ``max_attempts``
        times, then its record fails."""
        state = item.record
        state.solo_failures[stage] += 1
        if state.solo_failures[stage] < self.settings.max_attempts:
            self._ready.add(stage, [item], cpu_only, solo=True)
            return
        state.in_flight -= 1
        self._fail(state, describe_failure(stage, state.solo_failures[stage], unit.unit_id, exc),
                   format_traceback(exc, self.settings.max_traceback_chars))

    def _drop_input(self, state: RecordState) -> None:
        """An input of a failed record came back: the record resolves with its last one."""
        state.in_flight -= 1
        if state.in_flight == 0:
            self._complete(state)

    def _fail(self, state: RecordState, error: str, traceback: str | None = None) -> None:
        if state.ok:
            state.error, state.traceback = error, traceback
        state.cancel.set()  # batches made only of failed or cancelled records stop
        state.waiting.clear()
        mine = lambda item: item.record is state  # noqa: E731
        state.in_flight -= len(self._queues.remove(mine)) + self._ready.drop(mine)
        if state.in_flight == 0:  # else: resolved when its last running input reports back
            self._complete(state)
