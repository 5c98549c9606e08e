"""Running a record inside the router that routed it (the hook's ``routing="colocated"``).

With pinned routing every record crosses two Python operators: the router, then the executor of
the chosen TaskManager, with PyFlink's serialization at each crossing. For a light operator
that second crossing is most of what the hook costs (``benchmarks/hook_profile.py``: the
router's own work is ~22 µs a record, the job's extra CPU ~260 µs). A colocated router runs
on a TaskManager itself, one instance per TaskManager where Flink spreads them (as it spreads a
plain job's ``map``), and runs on that node, inline, every record it routes there: such a record
crosses once, as in the plain job. Records routed elsewhere go to that node's pinned executor
as before. The router keeps a record whose measured work on its own node is below the cost of
a move (``RouterSettings.keep_local_below_ms``) without asking the policy.

:class:`InlineExecutor` is the executor part: the same :class:`DirectRun` the pinned executor
of a one-step CPU operator uses (same outputs, dead letters, feedback for its node), opened
only where the TaskManager says which node it is (``STREAMPLACE_NODE_ID``, set by streamplace's
cluster launcher) and that node is one of the job's; elsewhere the router only routes.

Example (the hook builds this for you)::

    inline = InlineExecutor(operator, executor_settings, inline_output_tag(Types.STRING()))
    routed = stream.connect(feedback).process(RouterFunction(settings, reader, inline=inline))
    ran_here = side_output(routed, inline.output_tag)
"""

from __future__ import annotations

import logging
import os

from interference.executor.results import RecordOutcome
from pyflink_jobs.executor_function import ExecutorFunctionSettings
from pyflink_jobs.operator_function import (DirectRun, ExecutedRecord, bytes_out,
                                            report_outcome)
from pyflink_jobs.routed import DecisionContext, RoutedRecord

__all__ = ["InlineExecutor", "inline_output_tag", "KEPT_TIMING_EVERY",
           "KEPT_TIMING_MIN_INTERVAL_S"]

log = logging.getLogger(__name__)

#: A record kept on the router's node by the light rule has its timing reported one time in
#: this many (its bytes always). Every timing in the feedback is decoded and learned by every
#: router instance: at the rates light records reach, that cost more than the records' work,
#: and what a kept record tells (the type is still light here) needs only a sample. Records
#: the policy placed are all reported (the service learns placement from them).
KEPT_TIMING_EVERY = 16

#: ... and a light record's at most once in this many seconds per router (the light lane's: at
#: 25,000 records a second, 1 in 16 was 1,500 timings a second that every router learned).
KEPT_TIMING_MIN_INTERVAL_S = 0.05


def inline_output_tag(output_type):
    """The router's side output that carries the outputs of the records it ran itself, typed
    as the job asked (``output_type``)."""
    from pyflink.datastream import OutputTag
    return OutputTag("streamplace-ran-in-router", output_type)


class InlineExecutor(DirectRun):
    """A one-step CPU operator run by the router on its own node (module docstring)."""

    feedback_instance_base = 500  # beside the node's executor instances (0, 1, ...)
    report_every = KEPT_TIMING_EVERY  # a kept record's timing is reported 1 time in this many
    report_min_interval_s = KEPT_TIMING_MIN_INTERVAL_S  # ... and at most once in this long

    def __init__(self, operator, settings: ExecutorFunctionSettings | None = None,
                 output_tag=None):
        DirectRun.__init__(self, "", operator, settings)
        self.output_tag = output_tag

    def open_on(self, runtime_context, node_ids) -> str | None:
        """Open on this TaskManager's node when it is one of ``node_ids``; returns that node,
        or None (no known node here: the router then sends every record away)."""
        node = os.environ.get("STREAMPLACE_NODE_ID", "")
        if node not in node_ids:
            log.warning("streamplace colocated router: this TaskManager's node %r is none of "
                        "%s; every record is sent to a pinned executor", node, list(node_ids))
            return None
        self.planned_node = node
        self._open_direct(runtime_context)
        self._kept = 0
        return node

    def reports_next_kept(self) -> bool:
        """Whether the next kept record is one whose timing is reported (the 1st, then 1 in
        :data:`KEPT_TIMING_EVERY`): run it with :meth:`run_routed`, else :meth:`run_quick`."""
        self._kept += 1
        return (self._kept - 1) % KEPT_TIMING_EVERY == 0

    def light_calls(self) -> tuple:
        """(``call(record) -> list of outputs``, ``map_call(record) -> output`` or None): the
        operator's first attempt as plain calls (once opened on a node), for the router's
        :class:`~pyflink_jobs.light_lane.LightLane`. A record whose call raised goes on
        through :meth:`run_quick` with ``failed_first`` (an output the job's type cannot carry
        raises :class:`~pyflink_jobs.output_fit.OutputMisfit` there)."""
        call, map_call = self.executor.light_call(), self.executor.light_map()
        fit = self.settings.output_fit
        if fit is None:
            return call, map_call
        return (fit.checking(call, flat=True),
                None if map_call is None else fit.checking(map_call, flat=False))

    @property
    def gauge_values(self) -> dict:
        """This executor's gauge values by name (``streamplace_tasks_ok``, ...): the light lane
        counts each record it runs there at once."""
        return self._counts.values

    def add_light(self, done: int, in_bytes: int, out_bytes: int) -> None:
        """Records run by the light lane in one attempt each (already in ``tasks_ok``), with
        their bytes, to the executor's counts and the node's feedback (the lane hands them on
        before each record it reports and at close)."""
        self.executor.count_light(done)
        self.feedback.count_bytes(in_bytes, out_bytes)

    def run_quick(self, task_id: str, record, raw_bytes: int, source,
                  failed_first: BaseException | None = None) -> ExecutedRecord:
        """A kept record whose timing is not reported: its outputs, computed here with only
        the counts and bytes kept (a failed one still gets its dead letter, error and
        traceback, as :meth:`run_routed` gives it)."""
        result = self.executor.run_quick(task_id, record, failed_first)
        if isinstance(result, RecordOutcome):
            routed = RoutedRecord(task_id, self.operator.name, 0, self.node_id, 0,
                                  DecisionContext(), record, raw_bytes, source)
            return report_outcome(self, routed, record, task_id, 0, result, timing=False)
        self._count(True)
        executed = ExecutedRecord(tuple(result))
        self.feedback.count_bytes(raw_bytes, bytes_out(executed))
        return executed
