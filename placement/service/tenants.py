"""Per-tenant figures of a shared streaming cluster, from the executors' feedback.

The routers enforce tenant quotas (:mod:`pyflink_jobs.tenant_quotas`); this is the other half:
what each tenant got. Every completed task in a NodeFeedback carries its tenant
(``completed_tenant``) and whether it met its deadline (``completed_deadline_met``), beside its
timing (``completed``: queue + service = its latency from the router's decision). A
:class:`TenantReport` keeps, per tenant: completed tasks, their latencies (the newest
:data:`LATENCIES_KEPT`, for the mean and p99), deadlines known and missed; and over the tenants,
Jain's fairness index of the mean latencies (1: every tenant waits alike; 1/n: one tenant gets
all the slow service), the figure the simulator's zoo reports (of slowdown there).

Feedback may come from a broken or hostile executor, so: a tenant name must pass the same check
as a TaskEvent's ``tenant`` attribute (else it counts as ``"(invalid)"``); a latency must be a
finite number in [0, :data:`MAX_LATENCY_MS`] (else the task counts, its latency does not); at
most :data:`MAX_TENANTS` tenants are kept, later ones are pooled under ``"(other)"``, so neither
memory nor the Prometheus label set can be grown without bound. Tasks without a tenant are
reported under ``"(none)"``.

Example::

    >>> report = TenantReport()
    >>> report.take([{"completed": [{"queue_ms": 5.0, "service_ms": 15.0}],
    ...               "completed_tenant": ["team-a"], "completed_deadline_met": [1]}])
    1
    >>> report.summary()["tenants"]["team-a"]["mean_latency_ms"]
    20.0
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable, Mapping

from workload.task_attributes import is_tenant_name

__all__ = ["TenantReport", "MAX_TENANTS", "LATENCIES_KEPT", "MAX_LATENCY_MS", "NO_TENANT",
           "OTHER_TENANTS", "INVALID_TENANT", "jain_index"]

#: Tenants reported one by one; the rest are pooled (bounded memory and metric labels).
MAX_TENANTS = 256
#: Newest latencies kept per tenant for the mean and p99.
LATENCIES_KEPT = 2_000
#: A latency above a day is a broken clock, not a task.
MAX_LATENCY_MS = 86_400_000.0
NO_TENANT = "(none)"
OTHER_TENANTS = "(other)"
INVALID_TENANT = "(invalid)"


def jain_index(values: list[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2) of non-negative values; None without any
    (or when all are 0: nobody waited, nothing to be unfair about)."""
    if not values:
        return None
    squares = sum(v * v for v in values)
    if squares <= 0.0:
        return None
    return sum(values) ** 2 / (len(values) * squares)


class _Tenant:
    """One tenant's running figures."""

    __slots__ = ("completed", "latencies", "deadlines_known", "deadlines_missed")

    def __init__(self) -> None:
        self.completed = 0
        self.latencies: deque[float] = deque(maxlen=LATENCIES_KEPT)
        self.deadlines_known = 0
        self.deadlines_missed = 0

    def summary(self) -> dict:
        latencies = sorted(self.latencies)
        mean = sum(latencies) / len(latencies) if latencies else None
        p99 = latencies[min(len(latencies) - 1, math.ceil(0.99 * len(latencies)) - 1)] \
            if latencies else None
        return {"completed": self.completed, "mean_latency_ms": mean, "p99_latency_ms": p99,
                "deadlines_known": self.deadlines_known,
                "deadlines_missed": self.deadlines_missed,
                "deadline_miss_rate": (self.deadlines_missed / self.deadlines_known
                                       if self.deadlines_known else None)}


def _tenant_name(value) -> str:
    if value == "" or value is None:
        return NO_TENANT
    if is_tenant_name(value):
        return value
    return INVALID_TENANT


def _latency_ms(timing) -> float | None:
    if not isinstance(timing, Mapping):
        return None
    try:
        latency = float(timing.get("queue_ms")) + float(timing.get("service_ms"))
    except (TypeError, ValueError):
        return None
    return latency if 0.0 <= latency <= MAX_LATENCY_MS else None  # NaN fails both


class TenantReport:
    """Per-tenant completions, latencies and deadline misses (see the module docstring);
    thread-safe (the feedback consumer writes, HTTP requests read)."""

    def __init__(self, max_tenants: int = MAX_TENANTS):
        if isinstance(max_tenants, bool) or not isinstance(max_tenants, int) or max_tenants < 1:
            raise ValueError(f"max_tenants must be an int >= 1, got {max_tenants!r}")
        self.max_tenants = max_tenants
        self._tenants: dict[str, _Tenant] = {}
        self._lock = threading.Lock()

    def _slot(self, name: str) -> _Tenant:
        tenant = self._tenants.get(name)
        if tenant is None:
            named = sum(1 for n in self._tenants if n not in (OTHER_TENANTS, INVALID_TENANT,
                                                               NO_TENANT))
            if named >= self.max_tenants and name not in (NO_TENANT, INVALID_TENANT):
                name = OTHER_TENANTS
            tenant = self._tenants.setdefault(name, _Tenant())
        return tenant

    def take(self, records: Iterable[Mapping]) -> int:
        """Count the completed tasks of these (de-duplicated) NodeFeedback records; returns how
        many were counted. A record whose tenant array does not match its timings one to one
        counts its tasks under ``"(invalid)"``: they cannot be told apart."""
        counted = 0
        with self._lock:
            for record in records:
                completed = record.get("completed") or ()
                tenants = record.get("completed_tenant") or ()
                met = record.get("completed_deadline_met") or ()
                aligned = len(tenants) == len(completed)
                for i, timing in enumerate(completed):
                    tenant = self._slot(_tenant_name(tenants[i]) if aligned else
                                        (INVALID_TENANT if tenants else NO_TENANT))
                    tenant.completed += 1
                    counted += 1
                    latency = _latency_ms(timing)
                    if latency is not None:
                        tenant.latencies.append(latency)
                    flag = met[i] if len(met) == len(completed) else -1
                    if flag in (0, 1) and not isinstance(flag, bool):
                        tenant.deadlines_known += 1
                        tenant.deadlines_missed += int(flag == 0)
        return counted

    def summary(self) -> dict:
        """``{"tenants": {name: figures}, "jain_mean_latency": index or None}`` (named tenants
        only in the index: the pools are not tenants)."""
        with self._lock:
            tenants = {name: t.summary() for name, t in sorted(self._tenants.items())}
        means = [t["mean_latency_ms"] for name, t in tenants.items()
                 if name not in (NO_TENANT, OTHER_TENANTS, INVALID_TENANT)
                 and t["mean_latency_ms"] is not None]
        return {"tenants": tenants, "jain_mean_latency": jain_index(means),
                "max_tenants": self.max_tenants}
