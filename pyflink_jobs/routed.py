"""The one typed record that travels from the router to an executor, beside the user's record.

The user's record is never changed: what the hook needs for itself (the task's id, type and size,
the chosen node, what the decision saw there) rides in :class:`RoutedRecord`, and the executor
hands only ``record`` to the user's operator. The same type carries the streamplace-native
TaskEvents (``record`` is then the decoded TaskEvent dict).

Tenant quotas (:mod:`pyflink_jobs.tenant_quotas`) travel inside ``record``, not here: a demoted
TaskEvent is forwarded as a copy whose ``priority`` attribute is the effective one, and the
executor reads the priority from that event only, so it never runs a task at a priority above
what the router set (one place for the priority, no envelope field to keep in step with it).

Example::

    >>> routed = RoutedRecord("r-1", "enrich", 12, "tm_a", 1_000, DecisionContext(2, 150.0, 1.5),
    ...                       '{"user": 1}', raw_bytes=12)
    >>> routed.record, routed.context.queue
    ('{"user": 1}', 2)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DecisionContext", "RoutedRecord"]


@dataclass(frozen=True)
class DecisionContext:
    """What the router's decision saw on the chosen node; the executor reports it back in the
    feedback, so the service learns latency against the numbers the router decided with.

    queue: the router's in-flight count there; backlog_ms: estimated work it held (ms, at
    measured speed); speed: the node's measured speed factor; model_version: the service's
    model version that decided (-1: none, the prior or a fallback rule), which the service's
    version trial needs to tell its arms apart (placement.service.version_trial)."""

    queue: int = -1
    backlog_ms: float = -1.0
    speed: float = -1.0
    model_version: int = -1


@dataclass(frozen=True)
class RoutedRecord:
    """A record on its way to the executor of ``node``."""

    task_id: str            # unique per routed record (feedback de-duplicates by it)
    task_type: str          # the paper's TID, as the policy saw it
    task_size: int          # the paper's TSize
    node: str               # where the router sent it
    routed_at_ms: int       # when (epoch ms): waiting counts from here
    context: DecisionContext
    record: Any             # the user's record, untouched (or a decoded TaskEvent dict)
    raw_bytes: int = 0      # bytes the record had on the way in (link-use telemetry)
    source: tuple[str, int, int] = ("", -1, -1)   # (topic, partition, offset) where known
