"""A colocated router's keep rule: which records stay on its own node without asking the policy.

With ``routing="colocated"`` (:mod:`pyflink_jobs.inline_executor`) a router runs on a
TaskManager and runs there itself the records it routes to that node. A record whose measured
work on that node is below ``keep_local_below_ms`` (about what a move costs) stays there: the
policy is not asked, nothing is held in flight, the caller runs it at once. Only trusted
measurements count (a (task type, node) fit with enough samples: a new type goes to the policy,
which explores), and never with tenant quotas (they count every task).

The rule runs on every record of a light stream, so each (type, node) fit's line is kept until
the measured costs change (``MeasuredCosts.version``, one more accepted sample); the
:class:`~pyflink_jobs.light_lane.LightLane` keeps the line itself (:meth:`KeepRule.line`).

Example::

    rule = KeepRule(settings, costs, routed={"tm_a": 0, "tm_b": 0})
    rule.kept_ms("upper", 12, "tm_a")   # 0.004 (kept, counted in routed) or None
"""

from __future__ import annotations

__all__ = ["KeepRule", "MAX_KEPT_LINES"]

#: (type, node) lines the rule keeps between two changes of the measured costs; a stream of
#: ever new task types clears them rather than growing without bound
MAX_KEPT_LINES = 4096


class KeepRule:
    """The keep rule of one router (see the module docstring). ``settings``: the router's
    (``nodes``, ``keep_local_below_ms``); ``costs``: its MeasuredCosts; ``routed``: its
    per-node routed counts, where every kept record is counted; ``quotas``: its tenant quotas
    or None."""

    def __init__(self, settings, costs, routed: dict, quotas=None):
        self.limit_ms = settings.keep_local_below_ms
        self.nodes = frozenset(n.node_id for n in settings.nodes)
        self.costs = costs
        self.routed = routed
        self.off = quotas is not None or self.limit_ms <= 0.0
        self._lines: dict[tuple[str, str], tuple[float, float] | None] = {}
        self._lines_version = -1

    def kept_ms(self, task_type: str, size, node: str) -> float | None:
        """The measured milliseconds of a task of ``task_type`` and ``size`` on ``node`` when
        below the limit (kept: counted in ``routed``), else None."""
        if self.off or node not in self.nodes:
            return None
        version = self.costs.version
        if version != self._lines_version:
            self._lines.clear()
            self._lines_version = version
        key = (task_type, node)
        line = self._lines.get(key, False)
        if line is False:
            if len(self._lines) >= MAX_KEPT_LINES:
                self._lines.clear()
            line = self._lines[key] = self.costs.trusted_line(node, task_type)
        if line is None:
            return None
        size = size if isinstance(size, int) and size > 0 else 0
        work_ms = 1000.0 * (line[0] + line[1] * size)
        if not work_ms < self.limit_ms:  # NaN never keeps
            return None
        self.routed[node] += 1
        return work_ms

    def line(self, task_type: str, node: str) -> tuple[tuple[float, float] | None, float]:
        """The rule for one (type, node), for a caller that applies it per record itself:
        (the trusted fit's line, seconds at size 0 and per size unit; the limit in ms): keep
        a record of ``size`` when ``1000 * (line[0] + line[1] * size) < limit``, and count it
        in ``routed``. (None, 0.0) where nothing of the type is kept (quotas, the rule off,
        another node, no trusted fit). Holds while ``costs.version`` is the one read before
        asking."""
        if self.off or node not in self.nodes:
            return None, 0.0
        line = self.costs.trusted_line(node, task_type)
        return (line, self.limit_ms) if line is not None else (None, 0.0)

    def __len__(self) -> int:
        """(type, node) lines kept now."""
        return len(self._lines)
