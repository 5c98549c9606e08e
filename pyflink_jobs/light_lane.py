"""The colocated router's light lane: the records it keeps on its own node, with the least code.

A colocated router (:mod:`pyflink_jobs.inline_executor`) keeps on its own node every record whose
measured work there is below the cost of a move, and runs it itself. With a light operator
(a plain ``map`` of a text) and records of the operator's default type and size, that is almost
every record, and what the hook costs is how much Python each record runs beside the user's
function: in a TaskManager each record's code runs between PyFlink's coders and Beam's
bookkeeping, out of the CPU's caches, about three to five times slower than in a loop
(``benchmarks/hook_profile.py``). :class:`LightLane` is that record's whole path in one call:

1. a text or bytes record, its size (its UTF-8 length; no copy for ASCII) within the limits;
2. the router's keep rule (:mod:`pyflink_jobs.keep_rule`), with the fit's line kept until the
   measured costs change (``MeasuredCosts.version``);
3. one call of the user's function (``map_call``: the function itself when it makes one output
   per record; else ``call``, a list of outputs);
4. the outputs on the router's inline output, tagged, as PyFlink takes them from a process
   function (a list, no generator).

It counts each record it keeps (routed to its node) and runs (the executor's ``tasks_ok``) in
the job's gauges at once, and hands the executor's own counts and the bytes in and out to the
inline executor before every record whose timing is reported and at close. A kept record's
timing is reported one time in ``report_every`` (run in full by ``report``), and at most once
every ``min_report_interval_s``: every router decodes and learns every timing in the feedback,
and at tens of thousands of light records a second that learning cost the routers more than
the records (profiled with py-spy in a TaskManager), while what a kept record's timing tells
(the type is still light here) needs only a sample. A record whose first call raised goes
on through the executor's attempts to its dead letter (``failed``).
Anything else (another type or size, a record the rule does not keep) is None: the caller takes
its full path, which reads, checks and routes every record.

Example (the router function builds this for you)::

    lane = LightLane(router, "tm_a", ("upper", 1 << 20), inline.output_tag, call=None,
                     map_call=str.upper, counts=counts.values, routed_key="streamplace_routed_tm_a",
                     report=report, failed=failed, hand_on=inline.add_light,
                     ran_counts=inline.gauge_values, report_every=16)
    lane("hi")          # [(tag, "HI")]
"""

from __future__ import annotations

import time

from pyflink_jobs.operator_function import outputs_bytes
from workload.operators import record_size

__all__ = ["LightLane"]


class LightLane:
    """One call per light record kept on the router's node (see the module docstring)."""

    def __init__(self, router, node: str, gate: tuple[str, int], output_tag, call, map_call,
                 counts: dict, routed_key: str, report, failed, hand_on, ran_counts: dict,
                 report_every: int, min_report_interval_s: float = 0.0, clock=time.monotonic):
        """``gate``: (the task type, the largest size) of light records; ``call(record)`` ->
        list of outputs, or ``map_call(record)`` -> the one output (preferred when given);
        ``report(record, kept_ms)`` / ``failed(record, size, error)``: the emitted list of a
        record run in full / of one whose first call raised; ``hand_on(done, bytes_in,
        bytes_out)``: the counts, to the inline executor; ``counts``: the router's gauge
        values, ``routed_key`` counted there per kept record; ``ran_counts``: the inline
        executor's, ``streamplace_tasks_ok`` counted there per record run."""
        self.router, self.node = router, node
        self.task_type, self.max_size = gate
        self.tag = output_tag
        self.call, self.map_call = call, map_call
        self.counts, self.routed_key = counts, routed_key
        self.report, self.failed, self.hand_on = report, failed, hand_on
        self.ran_counts = ran_counts
        self.report_every = max(1, int(report_every))
        self.min_report_interval_s = float(min_report_interval_s)
        self.clock = clock
        self._reported_at = float("-inf")
        self.costs = router.costs
        self.routed = router.routed
        self._version = None   # of the measured costs the line below was read at
        self._line = None
        self._limit_ms = 0.0
        self._until_report = 1  # the first kept record is reported
        self.done = self.bytes_in = self.bytes_out = 0

    def __call__(self, value) -> list | None:
        """The emitted list of ``value`` run here, or None (the full path's record)."""
        # Sizes in bytes as record_size measures them, written out here for the two kinds
        # the lane takes (an ASCII text's UTF-8 length is its length): this runs for every
        # kept record, and a call costs more than the test in a TaskManager.
        kind = type(value)
        if kind is str:
            size = len(value) if value.isascii() else record_size(value)
        elif kind is bytes:
            size = len(value)
        else:
            return None
        if size > self.max_size:
            return None
        if self.costs.version != self._version:
            self._read_line()
        line = self._line
        if line is None:
            return None
        kept_ms = 1000.0 * (line[0] + line[1] * size)  # as KeepRule.kept_ms computes it
        if not kept_ms < self._limit_ms:  # NaN never keeps
            return None
        self.routed[self.node] += 1
        self.counts[self.routed_key] += 1
        self._until_report -= 1
        if self._until_report <= 0:
            self._until_report = self.report_every
            now = self.clock()
            if now - self._reported_at >= self.min_report_interval_s:
                self._reported_at = now
                self.flush()
                return self.report(value, kept_ms)
        map_call = self.map_call
        try:
            if map_call is not None:
                output = map_call(value)
            else:
                outputs = self.call(value)
        except Exception as exc:  # noqa: BLE001 - the user's code: its attempts go on
            return self.failed(value, size, exc)
        self.ran_counts["streamplace_tasks_ok"] += 1
        self.done += 1
        self.bytes_in += size
        if map_call is not None:
            kind = type(output)
            self.bytes_out += (len(output) if kind is bytes or kind is str and output.isascii()
                               else outputs_bytes((output,)))
            return [(self.tag, output)]
        self.bytes_out += outputs_bytes(outputs)
        tag = self.tag
        return [(tag, output) for output in outputs]

    def _read_line(self) -> None:
        # the keep rule for this (type, node) (KeepRule.line), until the costs change
        self._version = self.costs.version
        self._line, self._limit_ms = self.router.keeping.line(self.task_type, self.node)

    def flush(self) -> None:
        """Hand the counts of the records run so far to the inline executor."""
        if self.done:
            self.hand_on(self.done, self.bytes_in, self.bytes_out)
            self.done = self.bytes_in = self.bytes_out = 0
