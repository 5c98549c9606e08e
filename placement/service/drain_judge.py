"""Drain-time judging of the service's training examples (the ``judge`` of
:class:`placement.service.examples.FeedbackExamples`).

Why not each task's own latency (measured 2026-12-06, ``python -m benchmarks.online_loop``,
hosts spec, payload records): the executors' node scheduler (IAWP) batches and reorders, so a
task's own latency also says how well it batched with the tasks that came *after* it. A
version trained on latencies learns that sending more of one type to one host makes that type
fast there (its tasks batch together), and pins types to hosts: 5 seeds x rounds 1-5, -8.6%
against MCT where its prior alone is -1.1%. Judged by drain time instead, the correction hurt
less (-5.3%), and with unjudged versions held (``placement.service.burst_check``) it was level
with its prior (-1.1%). On today's loop, 10 seeds: -1.0% [-1.5, -0.4] against the prior, where
learning from latencies under the same rules is -6.2% [-8.6, -3.7] (docs/results-engines.md, "On
three
emulated hosts"; on the real engines it did not close the gap to MCT).

**Drain time** (the simulator's ``drain_time`` reward, :mod:`placement.ldwp.outcomes`, from the
feedback alone): when a router sends task *i* to node *n* at time *d*, *n* holds ``backlog``
seconds of estimated work (the router's own number, ``routed_backlog_ms``) and *i* adds
``work`` more. Task *i*'s decision is judged by the time from *d* until *n* has completed, in
estimated work, everything it had then plus *i*:
``level = completed(n, d) + backlog + work``, reached at the first completion on *n* whose
running total of estimated work is at least ``level``. The order the node runs its work in
does not change it; only how fast the node works off what it was given does.

Bounds and fall-backs: a timing without the router's backlog is judged by its own latency; a
node whose report says it holds nothing (idle) settles every decision still waiting on it, at
the node's newest completion; at most ``max_waiting`` decisions wait per node (beyond, the
nearest to its level is settled by its own latency and counted); drain times are cut at
``max_ms``. The running totals keep ``history`` completions per node.

Example::

    judge = DrainJudge()
    judged = judge.add(example, finished_ms=1_400, work_s=0.2, backlog_s=0.0)
    judged[0].latency_ms            # 400.0: nothing before it, its own work done at 1.4 s
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import itertools
import math

__all__ = ["DrainJudge", "JUDGES", "MAX_WAITING_PER_NODE", "COMPLETIONS_KEPT"]

#: how a training example's outcome is judged: "latency" (the task's own) or "drain"
JUDGES = ("latency", "drain")
#: decisions waiting for their level per node at most
MAX_WAITING_PER_NODE = 10_000
#: completions kept per node for "how much was done by time t"
COMPLETIONS_KEPT = 10_000


class DrainJudge:
    """Per node: the running total of completed estimated work, and the decisions waiting for
    it to reach their level. Not thread-safe (FeedbackExamples holds its lock)."""

    def __init__(self, max_waiting: int = MAX_WAITING_PER_NODE,
                 history: int = COMPLETIONS_KEPT, max_ms: float = 3_600_000.0):
        self.max_waiting, self.history, self.max_ms = max_waiting, history, max_ms
        self._finished: dict[str, list] = {}    # node -> finish times (ms), non-decreasing
        self._total: dict[str, list] = {}       # node -> completed work (s) after each
        self._trimmed: dict[str, float] = {}    # node -> total before the first one kept
        self._waiting: dict[str, list] = {}     # node -> heap of (level, seq, example)
        self._seq = itertools.count()
        self.settled_by_latency = 0             # decisions judged by their own latency

    def waiting(self) -> int:
        """Decisions still waiting for their level, over all nodes."""
        return sum(len(h) for h in self._waiting.values())

    def completed_by(self, node: str, at_ms: float) -> float:
        """Estimated work ``node`` had completed by ``at_ms`` (0 before anything is known)."""
        times = self._finished.get(node)
        if not times:
            return 0.0
        i = bisect.bisect_right(times, at_ms) - 1
        return self._total[node][i] if i >= 0 else self._trimmed.get(node, 0.0)

    def add(self, example, finished_ms: float, work_s: float | None,
            backlog_s: float | None) -> list:
        """One completed timing (``example`` decided at ``example.decided_at_ms`` on
        ``example.node``): its decision waits for its level, its completion counts toward the
        node's total; returns the examples settled now, their ``latency_ms`` the drain time.
        Without its work or the router's backlog (None) it is settled by its own latency."""
        node = example.node
        settled, level = [], None
        if work_s is None or backlog_s is None or not math.isfinite(work_s + backlog_s):
            work_s = work_s if work_s is not None and math.isfinite(work_s) else 0.0
            self.settled_by_latency += 1
            settled.append(example)
        else:
            level = self.completed_by(node, example.decided_at_ms) + backlog_s + work_s
        times = self._finished.setdefault(node, [])
        totals = self._total.setdefault(node, [])
        at = max(finished_ms, times[-1]) if times else finished_ms  # kept non-decreasing
        totals.append((totals[-1] if totals else 0.0) + work_s)
        times.append(at)
        if len(times) > 2 * self.history:   # trimmed in halves: amortised O(1)
            self._trimmed[node] = totals[self.history - 1]
            del times[:self.history], totals[:self.history]
        waiting = self._waiting.setdefault(node, [])
        if level is not None:
            heapq.heappush(waiting, (level, next(self._seq), example))
        while waiting and waiting[0][0] <= totals[-1] + 1e-9:
            # settled at the first completion whose total reached the level: it may be before
            # this one (the node ran later work first), never before the decision
            reached_level, _, settled_example = heapq.heappop(waiting)
            i = bisect.bisect_left(totals, reached_level - 1e-9)
            reached = max(times[min(i, len(times) - 1)], settled_example.decided_at_ms)
            settled.append(self._judged(settled_example, reached))
        if len(waiting) > self.max_waiting:   # the nearest to its level, by its own latency
            settled.append(heapq.heappop(waiting)[2])
            self.settled_by_latency += 1
        return settled

    def idle(self, node: str) -> list:
        """``node`` reports nothing left: every decision waiting on it is settled at its
        newest completion."""
        waiting = self._waiting.pop(node, [])
        times = self._finished.get(node)
        if not waiting or not times:
            self.settled_by_latency += len(waiting)
            return [entry[2] for entry in waiting]
        return [self._judged(entry[2], times[-1]) for entry in sorted(waiting)]

    def _judged(self, example, at_ms: float):
        drain_ms = min(self.max_ms, max(0.0, at_ms - example.decided_at_ms))
        return dataclasses.replace(example, latency_ms=drain_ms)
