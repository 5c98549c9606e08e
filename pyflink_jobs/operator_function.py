"""The user's own operator inside Flink: run where the router sent it, batched, exactly once.

:class:`OperatorExecutorFunction` is the async executor of one pinned instance: it opens the
user's operator once (``open(runtime_context)``), runs each routed record's stages on the node's
CPU cores and GPUs through :class:`interference.executor.OperatorExecutor` (which batches
same-stage inputs of different in-flight records and lets IAWP place the batches), reports the
timing in the node's feedback, and emits one :class:`ExecutedRecord`.

:class:`SplitOutcomes` (chained behind it) turns that into the operator's own outputs, typed as
the job asked (``output_type``), and sends the records whose operator raised to the dead-letter
output with the error and traceback. The user's record and outputs are never changed.

On the async timeout, ``timeout`` returns the record's dead letter and cancels its work in the
executor (PyFlink itself does not cancel ``async_invoke``; see
:mod:`pyflink_jobs.executor_function`): the record's stages not started are skipped. The user's
own code cannot be interrupted mid-call from a thread: a stage call that is running runs to its
end (or to a ``workload.cancel.check_cancelled()`` of its own).

Example (the hook builds this for you)::

    executed = AsyncDataStream.unordered_wait(
        node_stream, OperatorExecutorFunction("tm_a", operator, settings), Time.seconds(300),
        capacity=16, output_type=Types.PICKLED_BYTE_ARRAY())
    outputs = executed.process(SplitOutcomes(), output_type=Types.STRING())
    dead = side_output(outputs, dead_letter_tag())
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pyflink_jobs.executor_function import (ExecutorFeedback, ExecutorFunctionBase,
                                            ExecutorFunctionSettings, unwrap)
from pyflink_jobs.feedback import FinishedTask, stage_batches
from pyflink_jobs.flink_ops import dead_letter_raw, dead_letter_tag, make_dead_letter
from pyflink_jobs.output_fit import NoneOutput, OutputFit, OutputMisfit

__all__ = ["ExecutedRecord", "OperatorExecutorFunction", "SplitOutcomes", "DirectRun",
           "DirectOperatorFunction", "report_outcome", "bytes_out", "NoneOutput",
           "OutputMisfit"]

try:  # The module must import without pyflink too (docs, unit tests of the helpers).
    from pyflink.datastream import ProcessFunction
except ImportError:  # pragma: no cover
    ProcessFunction = object  # type: ignore[misc,assignment]


@dataclass(frozen=True)
class ExecutedRecord:
    """What one record's execution gave: the operator's outputs (OK) or a dead letter."""

    outputs: tuple = ()
    dead_letter: bytes | None = None


def executed_from_outcome(routed, record, outcome, operator_name: str,
                          fit: OutputFit | None = None) -> ExecutedRecord:
    """An :class:`ExecutedRecord` from the executor's ``RecordOutcome``; with ``fit``, an
    output that does not fit the job's output type makes the record a dead letter with the
    reason (:mod:`pyflink_jobs.output_fit`)."""
    if outcome.status == "OK":
        outputs = tuple(outcome.outputs)
        if fit is not None:
            for output in outputs:
                reason = fit.problem(output)
                if reason is not None:
                    return ExecutedRecord(dead_letter=_dead_letter(
                        routed, record, reason, f"operator:{operator_name}"))
        return ExecutedRecord(outputs)
    return ExecutedRecord(dead_letter=_dead_letter(
        routed, record, f"{outcome.error}\n{outcome.traceback or ''}".strip(),
        f"operator:{operator_name}"))


def _dead_letter(routed, record, reason: str, stage: str) -> bytes:
    raw = dead_letter_raw(record)
    topic, partition, offset = routed.source if routed is not None else ("", -1, -1)
    return make_dead_letter(raw, topic, partition, offset, reason, stage)


def bytes_out(executed: ExecutedRecord) -> int:
    # Link-use telemetry: outputs measured as a sink would see them, cheaply for text/bytes.
    if executed.dead_letter is not None:
        return len(executed.dead_letter)
    return outputs_bytes(executed.outputs)


def outputs_bytes(outputs) -> int:
    """The serialized length of a record's outputs (:func:`bytes_out`'s; 0 when one cannot be
    measured: telemetry never fails a record)."""
    from workload.operators import record_size
    try:
        return sum(record_size(o) for o in outputs)
    except Exception:  # noqa: BLE001 - telemetry never fails a record
        return 0


def _describe(function, value):
    """(routed record or None, the user's record, task id, task size) of what reached an
    executor function, counting a record routed to another node."""
    routed, record = unwrap(value)
    function._check_routed(routed)
    task_id = routed.task_id if routed is not None else f"local-{id(value)}-{time.time()}"
    return routed, record, task_id, routed.task_size if routed is not None else 0


def _call_task_id(value) -> str:
    """The task id part of a record's call key, the same in ``async_invoke`` and ``timeout``
    (a record without routing has none: its object id tells it apart)."""
    routed, _ = unwrap(value)
    return routed.task_id if routed is not None else ""


def report_outcome(function, routed, record, task_id: str, size: int, outcome,
                   timing: bool = True) -> ExecutedRecord:
    """Count the outcome, report its timing in the node's feedback (``timing``; its bytes
    always), and make the :class:`ExecutedRecord` (outputs, or a dead letter)."""
    executed = executed_from_outcome(routed, record, outcome, function.operator.name,
                                     function.settings.output_fit)
    function._count(executed.dead_letter is None)
    if routed is not None and not timing:
        function.feedback.count_bytes(routed.raw_bytes, bytes_out(executed))
    elif routed is not None:
        function.feedback.task_finished(FinishedTask(
            task_id, routed.task_type, size, float(outcome.queue_ms), float(outcome.service_ms),
            float(outcome.work_ms), int(outcome.finished_at_ms)),
            routed, bytes_in=routed.raw_bytes, bytes_out=bytes_out(executed))
    return executed


class OperatorExecutorFunction(ExecutorFunctionBase):
    """RoutedRecord -> [ExecutedRecord]: the user's operator on this node (module docstring)."""

    def __init__(self, planned_node: str, operator, settings: ExecutorFunctionSettings | None
                 = None):
        super().__init__(planned_node, settings)
        self.operator = operator

    def open(self, runtime_context):
        import os

        from interference.executor import OperatorExecutorSettings, operator_executor_for
        node = os.environ.get("STREAMPLACE_NODE_ID") or self.planned_node or "unknown"
        s = self.settings
        # a one-step CPU operator runs on a thread pool; anything with stages to batch or
        # co-schedule through the IAWP operator executor
        self.executor = operator_executor_for(self.operator, OperatorExecutorSettings.from_env(
            node_id=node, scheduler=s.scheduler, cpu_workers=s.workers(),
            batching=s.batching, call_groups=s.call_groups, max_attempts=s.max_attempts,
            **s.limits()),
            runtime_context=s.user_context(runtime_context))
        self.in_flight()
        self._open_feedback(runtime_context, self._snapshot)

    def _snapshot(self) -> dict:
        # the node's numbers plus how its stages batch (NodeFeedback.stage_batches)
        snap = dict(self.executor.snapshot())
        snap["stage_batches"] = stage_batches(self.executor.batch_report())
        return snap

    async def async_invoke(self, value):
        routed, record, task_id, size = _describe(self, value)
        outcome = await self.in_flight().run(self.call_key(value, _call_task_id(value)),
                                             self.executor.run(task_id, record, size))
        return [report_outcome(self, routed, record, task_id, size, outcome)]

    def timeout(self, value):
        routed, record = unwrap(value)
        # Stop its work here: PyFlink does not cancel async_invoke (executor_function's doc).
        self.cancel_call(value, _call_task_id(value))
        self._count(False)
        # Reported, never dropped: the dead letter says the record ran out of time here.
        return [ExecutedRecord(dead_letter=_dead_letter(
            routed, record, f"timed out in the executor on {self.node_id} (async timeout)",
            f"operator:{self.operator.name}"))]


class SplitOutcomes(ProcessFunction):
    """ExecutedRecord -> the operator's outputs (main output, the job's ``output_type``);
    dead letters on the :func:`~pyflink_jobs.flink_ops.dead_letter_tag` side output."""

    def open(self, runtime_context):
        self._tag = dead_letter_tag()

    def process_element(self, value, ctx):
        if value.dead_letter is not None:
            yield self._tag, value.dead_letter
            return
        yield from value.outputs


class DirectRun(ExecutorFeedback):
    """What runs a one-step CPU operator (``interference.executor.direct.direct_operator``)
    inline, in the calling operator's own Python function: the executor, its feedback and the
    record's report. :class:`DirectOperatorFunction` is it as a pinned executor operator;
    ``pyflink_jobs.inline_executor.InlineExecutor`` is it inside a colocated router."""

    def __init__(self, planned_node: str, operator, settings: ExecutorFunctionSettings | None
                 = None):
        ExecutorFeedback.__init__(self, planned_node, settings)
        self.operator = operator

    def _open_direct(self, runtime_context) -> None:
        import os

        from interference.executor import DirectExecutor, OperatorExecutorSettings
        from interference.executor.direct import direct_operator
        node = os.environ.get("STREAMPLACE_NODE_ID") or self.planned_node or "unknown"
        # the same answer the hook chose this path by, whatever the executor settings say
        direct = direct_operator(self.operator)
        if direct is None:
            raise ValueError(f"{self.operator!r} is not one per-record CPU step; it needs "
                             "OperatorExecutorFunction")
        self.executor = DirectExecutor(direct, OperatorExecutorSettings.from_env(
            node_id=node, cpu_workers=1, max_attempts=self.settings.max_attempts,
            **self.settings.limits()),
            runtime_context=self.settings.user_context(runtime_context))
        self._open_feedback(runtime_context, self._snapshot)

    def _snapshot(self) -> dict:
        snap = dict(self.executor.snapshot())
        snap["stage_batches"] = stage_batches(self.executor.batch_report())
        return snap

    def run_routed(self, value, timing: bool = True) -> ExecutedRecord:
        """Run one record (a RoutedRecord, or a record with no routing) to its end, here;
        ``timing``: report its timing in the feedback (its bytes are counted either way)."""
        routed, record, task_id, size = _describe(self, value)
        outcome = self.executor.run_now(task_id, record, size)
        return report_outcome(self, routed, record, task_id, size, outcome, timing)


class DirectOperatorFunction(DirectRun, ProcessFunction):
    """RoutedRecord -> the operator's outputs, computed inline: for an operator that is one
    per-record CPU step (``interference.executor.direct.direct_operator``), the async operator,
    its thread hops and the split behind it cost more than the step (a trivial operator ran at
    about 1,500 records/s through them on this machine). Dead letters leave on the
    :func:`~pyflink_jobs.flink_ops.dead_letter_tag` side output. A record's call blocks this
    instance while it runs, as a plain ``map`` does."""

    def open(self, runtime_context):
        self._open_direct(runtime_context)
        self._tag = dead_letter_tag()

    def process_element(self, value, ctx):
        executed = self.run_routed(value)
        if executed.dead_letter is not None:
            yield self._tag, executed.dead_letter
        else:
            yield from executed.outputs
