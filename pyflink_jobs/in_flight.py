"""What each node still holds from one router: its tasks in flight, their count and backlog.

A router counts every task it sends until the node's feedback reports it complete (or, for a
router that ran it itself, until it ran), and decides on those counts: a node's queue depth
and estimated backlog in what a decision sees are this router's own, not the last report's
(which is older by its interval). A task never reported complete (its feedback lost, its node
gone) is forgotten after ``timeout_s``, the oldest first, so the counts cannot grow without
bound. With tenant quotas each entry also holds its tenant's key, and retiring it releases the
tenant's share.

Example::

    >>> ledger = InFlightLedger(("tm_a", "tm_b"), timeout_s=300.0)
    >>> ledger.add("t1", "tm_a", now=10.0, work_s=0.5)
    DecisionContext(queue=0, backlog_ms=0.0, speed=1.0, model_version=-1)
    >>> ledger.count["tm_a"], ledger.backlog_s["tm_a"]
    (1, 0.5)
    >>> ledger.complete("t1", now=10.2)
    ('tm_a', 10.0, 0.5)
    >>> ledger.count["tm_a"]
    0
    >>> ledger.add("t2", "tm_b", now=11.0, work_s=0.5).queue
    0
    >>> ledger.report("t2", now=11.5, node="tm_a")   # tm_a cannot retire tm_b's task
    (False, None)
    >>> ledger.report("t2", now=11.6, node="tm_b")
    (True, ('tm_b', 11.0, 0.5))
"""

from __future__ import annotations

from collections import OrderedDict

from pyflink_jobs.routed import DecisionContext

__all__ = ["InFlightLedger"]


class InFlightLedger:
    """Task id -> (node, sent at, estimated work s[, tenant key]), oldest first, with each
    node's count and backlog (see the module docstring). Not thread-safe: the router holds
    its lock around every call."""

    def __init__(self, node_ids, timeout_s: float, quotas=None):
        self.entries: OrderedDict[str, tuple] = OrderedDict()
        self.count = {n: 0 for n in node_ids}
        self.backlog_s = {n: 0.0 for n in node_ids}
        self.timeout_s = timeout_s
        self.quotas = quotas

    def context(self, node: str, speed: float) -> DecisionContext:
        """What a decision for ``node`` saw there now: its count and backlog (ms), ``speed``."""
        return DecisionContext(self.count[node], self.backlog_s[node] * 1000.0, speed)

    def add(self, task_id: str, node: str, now: float, work_s: float, tenant=None,
            speed: float = 1.0) -> DecisionContext:
        """Count ``task_id`` in flight on ``node`` (sent at ``now``, ``work_s`` of estimated
        work; ``tenant``: its quota key, with quotas). A task id already in flight (a replayed
        record) is retired first, so it counts once. Returns :meth:`context` as it was before."""
        self.forget(task_id)
        context = self.context(node, speed)
        self.entries[task_id] = (node, now, work_s) if tenant is None else \
            (node, now, work_s, tenant)
        self.count[node] += 1
        self.backlog_s[node] += work_s
        return context

    def complete(self, task_id: str, now: float) -> tuple | None:
        """``task_id`` finished (run by the router itself; a node's report goes through
        :meth:`report`): no longer in flight. Returns its entry, or None when it was not in
        flight (a task forgotten after the timeout)."""
        entry = self.entries.pop(task_id, None)
        if entry is not None:
            self._retire(entry, completed_after_s=now - entry[1])
        return entry

    def report(self, task_id: str, now: float, node: str) -> tuple[bool, tuple | None]:
        """``node`` reports ``task_id`` done: (whether its timing is a sample of ``node``, the
        retired entry or None). A task in flight on another node stays counted there and its
        timing is no sample of ``node`` (a forged or confused report); one not in flight here
        (a duplicate, another router's task) retires nothing and its timing may be learned."""
        entry = self.entries.get(task_id)
        if entry is None:
            return True, None
        if entry[0] != node:
            return False, None
        return True, self.complete(task_id, now)

    def forget(self, task_id: str) -> None:
        """Retire ``task_id`` without it having completed (a replayed record about to be
        counted again); nothing when it is not in flight."""
        entry = self.entries.pop(task_id, None)
        if entry is not None:
            self._retire(entry)

    def expire(self, now: float) -> None:
        """Forget the tasks sent more than ``timeout_s`` before ``now``, oldest first."""
        limit = now - self.timeout_s
        while self.entries:
            entry = next(iter(self.entries.values()))
            if entry[1] >= limit:
                break
            self.entries.popitem(last=False)
            self._retire(entry)

    def _retire(self, entry: tuple, completed_after_s: float | None = None) -> None:
        node, work_s = entry[0], entry[2]
        self.count[node] -= 1
        self.backlog_s[node] = max(0.0, self.backlog_s[node] - work_s)
        if len(entry) > 3 and self.quotas is not None:  # the tenant key, with quotas only
            self.quotas.release(entry[3], completed_after_s)
