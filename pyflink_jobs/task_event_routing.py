"""The router's TaskEvent entry points (streamplace-native records of the built-in apps).

A user's records reach :meth:`~pyflink_jobs.router.Router.route` as a :class:`Task` the reader
made; a decoded TaskEvent (a dict, as the Avro codec gives it) also carries its tenant and
priority attributes, which tenant quotas read and may demote. These methods read the event
into a Task, route it, and give back the event to forward. Kept apart from ``Router`` (its
in-flight view, feedback and decision), which they only call.

Example::

    >>> from pyflink_jobs.router import Router, RouterNode, RouterSettings
    >>> router = Router(RouterSettings(nodes=[RouterNode("tm_a")], policy="round_robin"))
    >>> router.decide_event({"task_id": "t1", "app_id": "video_synopsis",
    ...                      "input_size": 4096}).node
    'tm_a'
"""

from __future__ import annotations

import dataclasses

from pyflink_jobs.routed import DecisionContext
from pyflink_jobs.tenant_quotas import event_tenant_and_priority, forwarded_event
from workload.model import Decision, Task

__all__ = ["TaskEventRouting"]


class TaskEventRouting:
    """:meth:`route` for decoded TaskEvents; mixed into ``Router``, which provides
    ``route``, ``_route`` and ``quotas``."""

    def decide_event(self, event: dict) -> Decision:
        """:meth:`decide` for a decoded TaskEvent."""
        return self.route_event(event)[0]

    def route_event(self, event: dict) -> tuple[Decision, DecisionContext]:
        """:meth:`route` for a decoded TaskEvent."""
        task = Task(event["task_id"], event["app_id"], int(event["input_size"]),
                    expected_work_ms=event.get("expected_work_ms"))
        return self.route_task_event(task, event)[:2]

    def route_task_event(self, task: Task, event: dict) -> tuple[Decision, DecisionContext, dict]:
        """:meth:`route` for the TaskEvent ``event`` read as ``task``; also returns the event to
        forward: ``event`` itself without quotas or when not demoted, else a copy carrying the
        demoted ``priority`` attribute (the executor reads the priority from it alone)."""
        if self.quotas is None:  # today's path: the task as read, the event untouched
            return (*self.route(task), event)
        tenant, priority, _ = event_tenant_and_priority(event)
        decision, context, verdict = self._route(
            dataclasses.replace(task, tenant=tenant, priority=priority))
        return decision, context, forwarded_event(event, verdict)
