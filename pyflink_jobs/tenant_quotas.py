"""Tenant quotas and fair share, enforced by the router (issue 17, part 3); off by default.

A TaskEvent names its tenant in ``attributes["tenant"]`` (:mod:`workload.task_attributes`). With
quotas configured (``tenant_shares``, e.g. ``"a=3,b=1"``), the router counts each tenant's tasks
**in flight** (routed, not yet seen completed in the NodeFeedback, nor expired) and, for every
new task, checks its tenant's **fair share** of everything in flight:

- ``fair = weight / sum of the weights of the active tenants``; a tenant is *active* while it has
  tasks in flight or routed one within the last ``window_s`` seconds (so a tenant that sends a
  task now and then still holds its share between its tasks, and a flood routed while it was
  between two tasks is already demoted when its next task arrives);
- the task is **over quota** when, counting it, ``n > fair x N x (1 + slack) + grace``
  (``n``: the tenant's tasks in flight, ``N``: all tasks in flight). ``slack`` (default 10 %)
  and ``grace`` (default 1 task) keep rounding from demoting tenants that alternate evenly.

An over-quota task is routed as usual (the node is the policy's choice; no work is refused) but
**demoted**: its priority drops by ``demotion_step`` (default 100, floored at
``workload.task_attributes.MIN_PRIORITY``), so a node's executor, which admits and orders by
deadline, then priority, then arrival (``interference/executor/deadlines.py``), serves the
in-quota tenants' waiting tasks first under contention. A deadline still ranks above any
priority: demotion reorders tasks of equal deadlines (or none), it does not break deadlines.
The decision's reason says so (:attr:`QuotaVerdict.reason`).

How the demotion reaches the executor: the router forwards a copy of the TaskEvent whose
``priority`` attribute is the effective one (:func:`forwarded_event`); the executor reads the
priority only from the event it receives, so it never runs a task at a priority above what the
router set. Without quotas, or for a task not demoted, the event is forwarded untouched (the
same object). A task without a tenant counts as the tenant ``""`` (the shared tenant of
``workload.model.Task``) with the default weight, so leaving the attribute out does not escape
the quota; a task whose attributes are invalid is counted there too and forwarded untouched (the
executor refuses it with the reason, as without quotas). User-operator records (not TaskEvents)
carry no attributes: they all count as tenant ``""``, never demoted among themselves.

Tenants not in the shares get ``default_weight`` (``"*=0.5"`` in the text sets it). The table is
bounded by ``max_tenants``: when it is full a new tenant evicts the least recently routed
tenant that is not configured and has nothing in flight (LRU; its counters are dropped from
:meth:`TenantQuotas.stats`); when every tenant has work in flight, the newcomer is counted under
:data:`OVERFLOW` (not a valid tenant name, so it cannot collide with one) with the default weight.

Example::

    >>> quotas = TenantQuotas({"a": 1, "b": 1}, window_s=10.0)
    >>> [quotas.admit(t, 0, now_s=0.0).demoted for t in ("b", "a", "a", "a", "a")]
    [False, False, False, False, True]
    >>> verdict = quotas.admit("a", 5, now_s=0.0)
    >>> verdict.priority, verdict.reason
    (-95, "tenant 'a' over its fair share: 5 of 6 in flight > 50% + slack; priority 5 -> -95")
    >>> quotas.release("a", latency_s=0.2); quotas.stats()["a"]["in_flight"]
    4
    >>> parse_tenant_shares("a=3, b=1, *=0.5")
    {'a': 3.0, 'b': 1.0, '*': 0.5}
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from workload.task_attributes import (MIN_PRIORITY, PRIORITY_KEY, task_slo_from_attributes,
                                      TaskSLO)

__all__ = ["DEFAULT_KEY", "OVERFLOW", "UNTENANTED", "DEFAULT_WINDOW_S", "DEFAULT_SLACK",
           "DEFAULT_GRACE", "DEFAULT_DEMOTION_STEP", "DEFAULT_MAX_TENANTS", "MAX_WEIGHT",
           "QuotaSettings", "QuotaVerdict", "TenantQuotas", "parse_tenant_shares",
           "event_tenant_and_priority", "forwarded_event"]

#: In ``tenant_shares`` text, the key that sets the weight of tenants not listed.
DEFAULT_KEY = "*"
#: Accounting key of new tenants while the table is full of tenants with work in flight.
OVERFLOW = "*overflow*"
#: Accounting key of tasks without a tenant (``workload.model.Task``'s shared tenant).
UNTENANTED = ""
#: ASSUMED (our choice): a tenant keeps its share for 10 s after its last routed task, about a
#: few feedback intervals and well under the router's 300 s in-flight timeout.
DEFAULT_WINDOW_S = 10.0
#: ASSUMED: 10 % over the fair share is tolerated before demoting (rounding, bursts).
DEFAULT_SLACK = 0.1
#: ASSUMED: one task over the allowance is tolerated (two tenants alternating evenly are off by
#: half a task whoever goes first; see the module docstring).
DEFAULT_GRACE = 1
#: ASSUMED: half the priority range [-100, 100]: a demoted task of priority p ranks below every
#: in-quota task of priority above p - 100 (all default-priority tasks unless p = 100).
DEFAULT_DEMOTION_STEP = 100
#: Most tenants tracked at once (a bound on memory and on the per-decision work).
DEFAULT_MAX_TENANTS = 1024
#: Largest weight accepted (a bound on a setting: a typo such as 1e300 must not zero the rest).
MAX_WEIGHT = 1e6


def _check_weight(name: str, weight) -> float:
    if (isinstance(weight, bool) or not isinstance(weight, (int, float))
            or not math.isfinite(weight) or not 0 < weight <= MAX_WEIGHT):
        raise ValueError(f"weight of tenant {name!r} must be a number in (0, {MAX_WEIGHT:g}], "
                         f"got {weight!r}")
    return float(weight)


def _check_tenant_name(name) -> None:
    # The rules of workload.task_attributes (1-64 characters of [A-Za-z0-9_.-]), reused
    # through TaskSLO so the two can never disagree.
    if not isinstance(name, str) or not name:
        raise ValueError(f"tenant name must be a non-empty string, got {name!r}")
    TaskSLO(tenant=name)


def parse_tenant_shares(text: str) -> dict[str, float]:
    """``"a=3,b=1"`` -> ``{"a": 3.0, "b": 1.0}``; ``"*=w"`` sets the default weight; ``""``:
    no quotas. Raises ValueError (naming the entry) for anything else.

    >>> parse_tenant_shares("")
    {}
    >>> parse_tenant_shares("a=0")
    Traceback (most recent call last):
    ...
    ValueError: weight of tenant 'a' must be a number in (0, 1e+06], got 0.0
    """
    if not isinstance(text, str):
        raise ValueError(f"tenant_shares must be text such as 'a=3,b=1', got {text!r}")
    shares: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = (x.strip() for x in part.partition("="))
        if not sep:
            raise ValueError(f"bad tenant_shares entry {part!r}: expected tenant=weight, "
                             f"e.g. a=3")
        if name in shares:
            raise ValueError(f"tenant {name!r} appears twice in tenant_shares")
        if name != DEFAULT_KEY:
            _check_tenant_name(name)
        try:
            weight = float(value)
        except ValueError:
            raise ValueError(f"bad tenant_shares entry {part!r}: the weight must be a "
                             f"number") from None
        shares[name] = _check_weight(name, weight)
    return shares


@dataclass(frozen=True)
class QuotaSettings:
    """Quota settings as the router's settings carry them (picklable, checked on creation).

    ``shares`` may hold :data:`DEFAULT_KEY`, which then overrides ``default_weight``.

    >>> QuotaSettings.from_text("a=3,b=1,*=2").default_weight
    2.0
    >>> QuotaSettings.from_text("") is None  # no shares: no quotas
    True
    """

    shares: Mapping[str, float] = field(default_factory=dict)
    default_weight: float = 1.0
    window_s: float = DEFAULT_WINDOW_S
    slack: float = DEFAULT_SLACK
    grace: int = DEFAULT_GRACE
    demotion_step: int = DEFAULT_DEMOTION_STEP
    max_tenants: int = DEFAULT_MAX_TENANTS

    def __post_init__(self) -> None:
        shares = dict(self.shares)
        default = shares.pop(DEFAULT_KEY, self.default_weight)
        for name, weight in shares.items():
            _check_tenant_name(name)
            shares[name] = _check_weight(name, weight)
        object.__setattr__(self, "shares", shares)
        object.__setattr__(self, "default_weight", _check_weight(DEFAULT_KEY, default))
        for name, value, low, high in (("window_s", self.window_s, 0.0, 86_400.0),
                                       ("slack", self.slack, 0.0, 100.0)):
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not math.isfinite(value) or not low <= value <= high):
                raise ValueError(f"{name} must be a number in [{low:g}, {high:g}], "
                                 f"got {value!r}")
        for name, value, low, high in (("grace", self.grace, 0, 1_000_000),
                                       ("demotion_step", self.demotion_step, 1, 200),
                                       ("max_tenants", self.max_tenants, 1, 1_000_000)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
        if len(shares) > self.max_tenants:
            raise ValueError(f"{len(shares)} tenants in the shares, more than max_tenants="
                             f"{self.max_tenants}")

    @classmethod
    def from_text(cls, text: str, **settings) -> QuotaSettings | None:
        """Settings from ``tenant_shares`` text; None when it names no tenant (quotas off)."""
        shares = parse_tenant_shares(text)
        return cls(shares, **settings) if shares else None


@dataclass(frozen=True)
class QuotaVerdict:
    """What the quota made of one task: its accounting key, the priority to forward, why."""

    tenant: str          # accounting key (the tenant, UNTENANTED or OVERFLOW)
    requested: int       # the priority the producer asked for
    priority: int        # the effective priority (requested unless demoted)
    demoted: bool
    reason: str = ""     # "" unless demoted


@dataclass
class _Account:
    weight: float
    configured: bool
    in_flight: int = 0
    routed: int = 0
    demoted: int = 0
    completed: int = 0
    latency_s: float = 0.0        # summed routed-to-reported time of the completed tasks
    last_routed_s: float = -math.inf


class TenantQuotas:
    """Per-tenant in-flight counts and the fair-share verdict (see the module docstring).

    Not thread-safe on its own: the router calls it under its lock."""

    def __init__(self, shares: Mapping[str, float], window_s: float = DEFAULT_WINDOW_S,
                 default_weight: float = 1.0, slack: float = DEFAULT_SLACK,
                 grace: int = DEFAULT_GRACE, demotion_step: int = DEFAULT_DEMOTION_STEP,
                 max_tenants: int = DEFAULT_MAX_TENANTS):
        self.settings = QuotaSettings(shares, default_weight, window_s, slack, grace,
                                      demotion_step, max_tenants)
        s = self.settings
        # LRU order of the last routed task: evictions take the oldest idle tenant first.
        self._accounts: OrderedDict[str, _Account] = OrderedDict(
            (name, _Account(weight, True)) for name, weight in s.shares.items())
        self.total_in_flight = 0
        self.demoted_total = 0
        self.evicted = 0

    @classmethod
    def from_settings(cls, settings: QuotaSettings) -> TenantQuotas:
        s = settings
        return cls(s.shares, s.window_s, s.default_weight, s.slack, s.grace, s.demotion_step,
                   s.max_tenants)

    def _account(self, tenant: str) -> tuple[str, _Account]:
        account = self._accounts.get(tenant)
        if account is not None:
            return tenant, account
        if len(self._accounts) - (OVERFLOW in self._accounts) >= self.settings.max_tenants:
            idle = next((name for name, a in self._accounts.items()
                         if not a.configured and a.in_flight == 0 and name != OVERFLOW), None)
            if idle is None:  # everyone has work in flight: refuse to track one more
                tenant = OVERFLOW
                account = self._accounts.get(OVERFLOW)
                if account is not None:
                    return tenant, account
            else:
                del self._accounts[idle]
                self.evicted += 1
        account = self._accounts[tenant] = _Account(self.settings.default_weight, False)
        return tenant, account

    def _active_weight(self, now_s: float) -> float:
        # O(tenants tracked), bounded by max_tenants; a handful in practice.
        horizon = now_s - self.settings.window_s
        return sum(a.weight for a in self._accounts.values()
                   if a.in_flight > 0 or a.last_routed_s >= horizon)

    def admit(self, tenant: str, priority: int, now_s: float) -> QuotaVerdict:
        """Count one task of ``tenant`` in flight and say whether it is demoted."""
        key, account = self._account(tenant or UNTENANTED)
        account.in_flight += 1
        account.routed += 1
        account.last_routed_s = now_s
        self._accounts.move_to_end(key)
        self.total_in_flight += 1
        s = self.settings
        fair = account.weight / self._active_weight(now_s)
        n, total = account.in_flight, self.total_in_flight
        if n <= fair * total * (1.0 + s.slack) + s.grace:
            return QuotaVerdict(key, priority, priority, False)
        account.demoted += 1
        self.demoted_total += 1
        lowered = max(MIN_PRIORITY, priority - s.demotion_step)
        return QuotaVerdict(key, priority, lowered, True,
                            f"tenant {key!r} over its fair share: {n} of {total} in flight > "
                            f"{fair:.0%} + slack; priority {priority} -> {lowered}")

    def release(self, tenant: str, latency_s: float | None = None) -> None:
        """One task of accounting key ``tenant`` left flight: completed (``latency_s``: routed
        to reported) or expired/replayed (None). Unknown keys are ignored."""
        account = self._accounts.get(tenant)
        if account is None or account.in_flight <= 0:
            return
        account.in_flight -= 1
        self.total_in_flight -= 1
        if latency_s is not None:
            account.completed += 1
            account.latency_s += max(0.0, latency_s)

    def in_flight(self, tenant: str) -> int:
        account = self._accounts.get(tenant)
        return account.in_flight if account else 0

    def counter(self, tenant: str, name: str) -> int:
        """One counter of ``tenant`` (``in_flight``, ``routed``, ``demoted``, ``completed``);
        0 for a tenant not tracked (e.g. evicted). For gauges."""
        account = self._accounts.get(tenant)
        return int(getattr(account, name)) if account else 0

    def stats(self) -> dict[str, dict]:
        """Per tracked tenant: weight, in_flight, routed, demoted, completed and the mean
        routed-to-reported latency (ms; includes up to one feedback interval; 0 before any)."""
        return {name: {"weight": a.weight, "in_flight": a.in_flight, "routed": a.routed,
                       "demoted": a.demoted, "completed": a.completed,
                       "mean_latency_ms": 1000.0 * a.latency_s / a.completed
                       if a.completed else 0.0}
                for name, a in self._accounts.items()}


def event_tenant_and_priority(event: Mapping) -> tuple[str, int, bool]:
    """(tenant, priority, valid) from a decoded TaskEvent's attributes; invalid attributes give
    ``("", 0, False)`` (the executor refuses the task with the reason, as without quotas).

    >>> event_tenant_and_priority({"attributes": {"tenant": "a", "priority": "3"}})
    ('a', 3, True)
    >>> event_tenant_and_priority({"attributes": {"priority": "1e9"}})
    ('', 0, False)
    """
    try:
        slo = task_slo_from_attributes(event.get("attributes"))
    except ValueError:
        return UNTENANTED, 0, False
    return slo.tenant, slo.priority, True


def forwarded_event(event: dict, verdict: QuotaVerdict | None) -> dict:
    """The TaskEvent to forward: ``event`` itself unless ``verdict`` demoted it, else a copy
    whose ``priority`` attribute is the effective priority (the input is not changed).

    >>> v = QuotaVerdict("a", 0, -100, True, "over")
    >>> forwarded_event({"task_id": "t", "attributes": {"tenant": "a"}}, v)["attributes"]
    {'tenant': 'a', 'priority': '-100'}
    """
    if verdict is None or not verdict.demoted:
        return event
    attributes = dict(event.get("attributes") or {})
    attributes[PRIORITY_KEY] = str(verdict.priority)
    return {**event, "attributes": attributes}
