"""Tenants, deadlines and priorities of tasks: how they travel in Kafka, how workloads get them.

A TaskEvent (``workload/schemas/task_event.avsc``) has an ``attributes`` map of strings; this
module owns three of its keys:

- ``tenant``: who submitted the task, 1-64 characters of ``[A-Za-z0-9_.-]``;
- ``deadline_ms``: a relative latency target, the task should complete within this many ms of its
  arrival; a finite decimal number in (0, 86_400_000] (at most one day);
- ``priority``: an integer in [-100, 100], larger is more important.

:func:`task_slo_from_attributes` reads and checks them (absent keys give the defaults, unknown
keys are ignored, anything else raises a ``ValueError`` naming the key, so the caller can send
the record to dead letters); :func:`attributes_from_slo` is its inverse. For simulated workloads,
:func:`with_tenants_and_deadlines` assigns tenants (weighted, seeded) and deadlines of
``deadline_factor`` x the task's alone time on a reference node (:func:`reference_alone_s`).

Example::

    >>> slo = task_slo_from_attributes({"tenant": "team-a", "deadline_ms": "1500", "x": "?"})
    >>> slo
    TaskSLO(tenant='team-a', deadline_s=1.5, priority=0)
    >>> attributes_from_slo(slo)
    {'tenant': 'team-a', 'deadline_ms': '1500.0'}
    >>> task_slo_from_attributes({"deadline_ms": "1e999"})
    Traceback (most recent call last):
    ...
    ValueError: attribute 'deadline_ms' must be a finite number of ms in (0, 86400000], got '1e999'
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from workload.estimates import CostModel
from workload.model import GpuSpec, NodeSpec, Task

__all__ = ["TENANT_KEY", "DEADLINE_MS_KEY", "PRIORITY_KEY", "MAX_TENANT_CHARS",
           "MAX_DEADLINE_MS", "MIN_PRIORITY", "MAX_PRIORITY", "DEFAULT_TENANTS",
           "DEFAULT_DEADLINE_FACTOR", "MAX_DEADLINE_FACTOR", "MAX_TENANTS",
           "REFERENCE_HOST_MEMORY_GB", "TaskSLO", "task_slo_from_attributes",
           "attributes_from_slo", "slo_of_task", "task_with_slo", "reference_node",
           "reference_alone_s", "with_tenants_and_deadlines", "is_tenant_name"]

#: The attribute keys this module owns (all other keys of the map are left to others).
TENANT_KEY, DEADLINE_MS_KEY, PRIORITY_KEY = "tenant", "deadline_ms", "priority"

#: A tenant name: short and safe to put in metric labels, file names and log lines.
MAX_TENANT_CHARS = 64
_TENANT_RE = re.compile(r"[A-Za-z0-9_.-]{1,%d}" % MAX_TENANT_CHARS)

#: Longest deadline accepted: one day. A streaming task with a longer target has no deadline
#: in any useful sense, and a bound keeps a typo ("9e99") from reading as "never late".
MAX_DEADLINE_MS = 86_400_000

#: Priority bounds: a small symmetric range, so a hostile producer cannot claim "1e18".
MIN_PRIORITY, MAX_PRIORITY = -100, 100

# Plain decimal numbers only, ASCII digits: Python's float() would also take "nan", "inf",
# "1_000", surrounding blanks and non-ASCII digits, none of which a producer should send.
_DECIMAL_RE = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
_INTEGER_RE = re.compile(r"[+-]?[0-9]{1,4}")
#: Longest numeric attribute text looked at (longer is refused before any parsing).
_MAX_NUMBER_CHARS = 32

#: ASSUMED workload defaults (no measurement or source; change them here). Two tenants of equal
#: demand: the smallest case in which fairness can be seen at all.
DEFAULT_TENANTS: Mapping[str, float] = {"tenant-a": 1.0, "tenant-b": 1.0}
#: ASSUMED (our choice, no source): deadline = 3 x the task's estimated alone time on the
#: reference node, the usual "slack factor x standalone run time" form of soft deadlines. With 3,
#: a task alone on a node at least as fast as the reference node has 3x slack over its estimate,
#: so misses come from queueing and co-location rather than from estimate noise, and a task
#: that waits behind about two others of its size on the reference node misses.
DEFAULT_DEADLINE_FACTOR = 3.0
#: Largest accepted factor (a bound on a setting, not a physical limit).
MAX_DEADLINE_FACTOR = 1000.0
#: Most tenants one workload may have (a bound on a setting).
MAX_TENANTS = 10_000
#: Host memory of the reference node (GB): not used by the time estimate, any value would do.
REFERENCE_HOST_MEMORY_GB = 16.0


@dataclass(frozen=True)
class TaskSLO:
    """A task's tenant, relative deadline (s, None: none) and priority, checked on creation.

    >>> TaskSLO("team-a", 2.0, 5).deadline_s
    2.0
    """

    tenant: str = ""
    deadline_s: float | None = None
    priority: int = 0

    def __post_init__(self) -> None:
        _check_tenant(self.tenant, allow_empty=True)
        if self.deadline_s is not None:
            _check_deadline_s(self.deadline_s, "deadline_s")
        _check_priority(self.priority, "priority")


def is_tenant_name(value) -> bool:
    """True for a name a TaskEvent's ``tenant`` attribute may hold (1-64 of [A-Za-z0-9_.-])."""
    return isinstance(value, str) and _TENANT_RE.fullmatch(value) is not None


def _check_tenant(tenant, allow_empty: bool, what: str = TENANT_KEY) -> None:
    if isinstance(tenant, str) and (tenant == "" and allow_empty or _TENANT_RE.fullmatch(tenant)):
        return
    raise ValueError(f"{what!r} must be 1-{MAX_TENANT_CHARS} characters of [A-Za-z0-9_.-], "
                     f"got {_short(tenant)}")


def _check_deadline_s(deadline_s, what: str) -> None:
    if (isinstance(deadline_s, bool) or not isinstance(deadline_s, (int, float))
            or not math.isfinite(deadline_s) or not 0 < deadline_s * 1000.0 <= MAX_DEADLINE_MS):
        raise ValueError(f"{what!r} must be a finite number of seconds in "
                         f"(0, {MAX_DEADLINE_MS // 1000}], got {_short(deadline_s)}")


def _check_priority(priority, what: str) -> None:
    if (isinstance(priority, bool) or not isinstance(priority, int)
            or not MIN_PRIORITY <= priority <= MAX_PRIORITY):
        raise ValueError(f"{what!r} must be an integer in [{MIN_PRIORITY}, {MAX_PRIORITY}], "
                         f"got {_short(priority)}")


def _short(value) -> str:
    """repr of a value, cut so a hostile megabyte string does not end up in a log line."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} chars)"


def task_slo_from_attributes(attributes: Mapping[str, str] | None) -> TaskSLO:
    """Read and check the tenant, deadline and priority keys of a TaskEvent's attributes.

    ``attributes`` is the Avro map (None: the record had none). Values must be strings, as the
    schema says. Raises ``ValueError`` naming the key for anything out of bounds.

    >>> task_slo_from_attributes({"priority": "-3"})
    TaskSLO(tenant='', deadline_s=None, priority=-3)
    """
    if attributes is None:
        return TaskSLO()
    if not isinstance(attributes, Mapping):
        raise ValueError(f"attributes must be a map of strings, got {type(attributes).__name__}")
    tenant, deadline_s, priority = "", None, 0
    if TENANT_KEY in attributes:
        tenant = attributes[TENANT_KEY]
        _check_tenant(tenant, allow_empty=False, what=f"attribute {TENANT_KEY!r}")
    if DEADLINE_MS_KEY in attributes:
        text = attributes[DEADLINE_MS_KEY]
        bad = ValueError(f"attribute {DEADLINE_MS_KEY!r} must be a finite number of ms in "
                         f"(0, {MAX_DEADLINE_MS}], got {_short(text)}")
        if (not isinstance(text, str) or len(text) > _MAX_NUMBER_CHARS
                or not _DECIMAL_RE.fullmatch(text)):
            raise bad
        deadline_ms = float(text)
        if not (math.isfinite(deadline_ms) and 0 < deadline_ms <= MAX_DEADLINE_MS):
            raise bad
        deadline_s = deadline_ms / 1000.0
        if deadline_s <= 0:  # "1e-400" parses to 0.0 ms; a tiny positive one underflows here
            raise bad
    if PRIORITY_KEY in attributes:
        text = attributes[PRIORITY_KEY]
        if not isinstance(text, str) or not _INTEGER_RE.fullmatch(text):
            raise ValueError(f"attribute {PRIORITY_KEY!r} must be an integer in "
                             f"[{MIN_PRIORITY}, {MAX_PRIORITY}], got {_short(text)}")
        priority = int(text)
        _check_priority(priority, f"attribute {PRIORITY_KEY!r}")
    return TaskSLO(tenant, deadline_s, priority)


def attributes_from_slo(slo: TaskSLO) -> dict[str, str]:
    """The attribute entries for ``slo``: only what differs from the defaults (absent keys read
    back as the defaults). The deadline comes back within a rounding error (s -> ms -> s).

    >>> attributes_from_slo(TaskSLO(priority=7))
    {'priority': '7'}
    """
    out: dict[str, str] = {}
    if slo.tenant:
        out[TENANT_KEY] = slo.tenant
    if slo.deadline_s is not None:
        out[DEADLINE_MS_KEY] = repr(float(slo.deadline_s) * 1000.0)  # repr: shortest exact text
    if slo.priority:
        out[PRIORITY_KEY] = str(slo.priority)
    return out


def slo_of_task(task: Task) -> TaskSLO:
    """The task's tenant, deadline and priority, checked (a bad Task field raises ValueError)."""
    return TaskSLO(task.tenant, task.deadline_s, task.priority)


def task_with_slo(task: Task, slo: TaskSLO) -> Task:
    """A copy of ``task`` carrying ``slo`` (e.g. after reading a TaskEvent's attributes)."""
    return dataclasses.replace(task, tenant=slo.tenant, deadline_s=slo.deadline_s,
                               priority=slo.priority)


def reference_node(costs: CostModel | None = None) -> NodeSpec:
    """One reference CPU core (speed 1) and one reference GPU (the calibration's, K80) at its
    calibrated speed, default links: the unit that deadlines and slowdowns are measured on."""
    costs = costs or CostModel()
    model = costs.reference_gpu
    memory = float(costs.calibration.gpu_models[model]["memory_gb"])
    return NodeSpec("reference", 1, REFERENCE_HOST_MEMORY_GB, (GpuSpec(model, memory),))


def reference_alone_s(task: Task, costs: CostModel | None = None,
                      node: NodeSpec | None = None) -> float:
    """The task's estimated alone time (s) on ``node`` (None: :func:`reference_node`): its DAG's
    critical path with every stage on its best unit, plus the input transfer
    (``CostModel.task_ms_on``, the public estimate the simulator's policies see)."""
    costs = costs or CostModel()
    return costs.task_ms_on(task, node or reference_node(costs)) / 1000.0


def _checked_tenants(tenants: Mapping[str, float]) -> tuple[list[str], list[float]]:
    if not isinstance(tenants, Mapping) or not 1 <= len(tenants) <= MAX_TENANTS:
        raise ValueError(f"tenants must be a map of 1-{MAX_TENANTS} tenant names to weights")
    names, weights = list(tenants), []
    for name in names:
        _check_tenant(name, allow_empty=False, what="tenant name")
        weight = tenants[name]
        if (isinstance(weight, bool) or not isinstance(weight, (int, float))
                or not math.isfinite(weight) or weight <= 0):
            raise ValueError(f"weight of tenant {name!r} must be a finite positive number, "
                             f"got {_short(weight)}")
        weights.append(float(weight))
    return names, weights


def with_tenants_and_deadlines(tasks: Iterable[Task],
                               tenants: Mapping[str, float] = DEFAULT_TENANTS,
                               deadline_factor: float | None = DEFAULT_DEADLINE_FACTOR,
                               seed: int = 0, costs: CostModel | None = None,
                               priorities: Mapping[str, int] | None = None,
                               node: NodeSpec | None = None) -> list[Task]:
    """New Tasks (same order, ids, arrivals) with tenants and deadlines; the input is unchanged.

    - ``tenants``: tenant name -> weight; each task's tenant is drawn independently with
      probability weight / sum (``random.Random(f"tenants/{seed}")``, so a seed fixes it).
    - ``deadline_factor``: deadline_s = factor x :func:`reference_alone_s` (None: no deadlines).
    - ``costs``: the cost model of the run (e.g. ``simulator.scenarios.paper_costs()`` for the
      paper's workloads, whose work scale makes tasks 5x heavier); None: ``CostModel()``.
    - ``priorities``: tenant -> priority (absent tenants get 0); ``node``: the reference node.

    Example::

        tasks = with_tenants_and_deadlines(paper_workload(50, tasks=30), {"a": 3, "b": 1},
                                           deadline_factor=2.0, seed=1, costs=paper_costs())
    """
    names, weights = _checked_tenants(tenants)
    priorities = dict(priorities or {})
    for name, value in priorities.items():
        if name not in tenants:
            raise ValueError(f"priority given for {name!r}, which is not one of the tenants")
        _check_priority(value, f"priority of tenant {name!r}")
    if deadline_factor is not None and (
            isinstance(deadline_factor, bool) or not isinstance(deadline_factor, (int, float))
            or not math.isfinite(deadline_factor)
            or not 0 < deadline_factor <= MAX_DEADLINE_FACTOR):
        raise ValueError(f"deadline_factor must be a finite number in (0, {MAX_DEADLINE_FACTOR}]"
                         f" or None, got {_short(deadline_factor)}")
    if deadline_factor is not None:
        costs = costs or CostModel()
        node = node or reference_node(costs)
    rng = random.Random(f"tenants/{seed}")
    out = []
    for task in tasks:
        tenant = rng.choices(names, weights)[0]
        deadline_s = None
        if deadline_factor is not None:
            deadline_s = deadline_factor * reference_alone_s(task, costs, node)
            _check_deadline_s(deadline_s, f"deadline of task {task.task_id}")
        out.append(dataclasses.replace(task, tenant=tenant, deadline_s=deadline_s,
                                       priority=priorities.get(tenant, 0)))
    return out
