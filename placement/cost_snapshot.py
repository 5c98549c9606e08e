"""Measured work times as a bounded, validated snapshot: a new router starts from what the
placement service has already measured.

Why: every Flink job starts a new router, and its :class:`placement.measured_costs.MeasuredCosts`
knows nothing. On a cluster whose nodes have the same spec (the emulated hosts: equal
``cpu_cores``, different CPU quotas) every node then has the same estimate, and a router that
decides a 2,000-record burst in a few seconds, before the first feedback arrives, splits it
into exact thirds whatever the policy (measured 2026-12-03: 665 / 682 / 683 for LDWP + IAWP,
while the same router fed the earlier jobs' feedback first split it 1,012 / 315 / 673, by the
nodes' measured speeds). The service's learner has measured every (task type, node) pair the
earlier jobs ran, by the same rule (:func:`placement.speed.timing_sample`), so it hands its
trusted fits to each new router (``GET /costs``), for every policy alike: MCT and LDWP then
start from the same knowledge.

The snapshot is JSON::

    {"fits": [{"task_type": "resize", "node": "tm_a", "fixed_s": 0.002, "per_unit_s": 1e-06,
               "mean_size": 4096.0, "samples": 120}, ...]}

A router adopts a fit (:func:`seed_costs`) only for a pair it has no sample of its own for and
only for its own nodes; the fit enters its cost model as ``min_samples`` points on the fitted
line around the mean size, so the pair is trusted at once and the router's own timings, which
decay the old weights, take over within a few tens of tasks. Everything crossing the boundary
is checked: at most :data:`MAX_FITS` entries, names of at most :data:`MAX_NAME_CHARS`
characters, finite non-negative coefficients, a size within the cost model's bound and an
estimate at the mean size within ``(0, max_work_s]``; a malformed entry is refused with a reason
and the rest are still adopted.

Example::

    >>> from workload.model import ClusterSpec, NodeSpec
    >>> from placement.measured_costs import MeasuredCosts
    >>> cluster = ClusterSpec((NodeSpec("a", 1, 8.0), NodeSpec("b", 1, 8.0)))
    >>> service = MeasuredCosts(cluster, min_samples=3)
    >>> for size in (100, 200, 300):
    ...     _ = service.observe("b", "my_op", size, 0.5 + 0.01 * size)
    >>> router = MeasuredCosts(cluster, min_samples=3)
    >>> seed_costs(router, cost_snapshot(service), ["a", "b"])
    (1, [])
    >>> round(router.estimate_s("b", "my_op", 200), 3)
    2.5
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from workload.limits import finite_real

__all__ = ["cost_snapshot", "seed_costs", "MAX_FITS", "MAX_NAME_CHARS"]

#: most fits a snapshot carries (and a router accepts): the newest types' when there are more
MAX_FITS = 512
#: longest task type or node name accepted (MeasuredCosts folds longer ones into a digest)
MAX_NAME_CHARS = 256
#: most refusal reasons kept (a hostile snapshot must not flood a log)
MAX_REASONS = 10
#: the pseudo-samples' sizes, as fractions of the mean size: spread enough that the slope is
#: kept (MeasuredCosts' min_spread is 5%), symmetric so their mean is the mean size
_SPREAD = (0.5, 1.5)


def cost_snapshot(costs, limit: int = MAX_FITS) -> dict:
    """The trusted fits of ``costs`` (a MeasuredCosts) as JSON-ready data, at most ``limit``
    (the most recently observed types kept)."""
    fits = costs.trusted_fits()[-limit:] if limit > 0 else []
    return {"fits": [{"task_type": task_type, "node": node, "fixed_s": fixed,
                      "per_unit_s": slope, "mean_size": mean_size, "samples": samples}
                     for task_type, node, fixed, slope, mean_size, samples in fits]}


def seed_costs(costs, snapshot, nodes: Iterable[str]) -> tuple[int, list[str]]:
    """Adopt the snapshot's fits into ``costs`` for ``nodes`` (see the module docstring);
    returns (fits adopted, up to :data:`MAX_REASONS` reasons for those refused)."""
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("fits"), list):
        return 0, ["the snapshot is not an object with a 'fits' list"]
    fits = snapshot["fits"]
    if len(fits) > MAX_FITS:
        return 0, [f"the snapshot holds {len(fits)} fits, more than {MAX_FITS}"]
    allowed = set(nodes)
    adopted, reasons = 0, []
    for index, entry in enumerate(fits):
        reason, values = _refusal(entry, allowed, costs)
        if reason is None and costs.samples(entry["node"], entry["task_type"]) > 0:
            reason = "the router has measured this pair itself"   # its own numbers win
        if reason is not None:
            if len(reasons) < MAX_REASONS:
                reasons.append(f"fit {index}: {reason}")
            continue
        fixed, slope, mean_size = values   # as checked (an int past a float's range is out)
        # at least 3: a fit uses its slope once two samples came off its mean size
        # (placement.measured_costs.AffineFit.MIN_OFF_MEAN), and the first never is
        points = max(3, int(getattr(costs, "min_samples", 3)))
        for i in range(points):
            size = mean_size * _SPREAD[i % 2]
            seconds = max(costs.min_estimate_s, fixed + slope * size)
            costs.observe(entry["node"], entry["task_type"], size, seconds)
        adopted += 1
    return adopted, reasons


def _refusal(entry, nodes: set, costs) -> tuple[str | None, tuple]:
    """(why ``entry`` cannot be adopted or None, its (fixed_s, per_unit_s, mean_size))."""
    if not isinstance(entry, dict):
        return "not an object", ()
    task_type, node = entry.get("task_type"), entry.get("node")
    if not isinstance(task_type, str) or not 0 < len(task_type) <= MAX_NAME_CHARS:
        return f"task_type must be a name of 1-{MAX_NAME_CHARS} characters", ()
    if not isinstance(node, str) or node not in nodes:
        return "node is not one of the router's nodes", ()
    values = tuple(finite_real(entry.get(k)) for k in ("fixed_s", "per_unit_s", "mean_size"))
    # finite_real reads an int past a float's range as the largest float: refused here
    if any(v is None or not 0.0 <= v < sys.float_info.max for v in values):
        return "fixed_s, per_unit_s and mean_size must be finite numbers >= 0", ()
    fixed, slope, mean_size = values
    if mean_size * _SPREAD[1] > costs.max_size:
        return f"mean_size beyond the cost model's bound {costs.max_size}", ()
    if not 0.0 < fixed + slope * mean_size * _SPREAD[1] <= costs.max_work_s:
        return f"the fitted time must be in (0, {costs.max_work_s}] s", ()
    samples = entry.get("samples")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        return "samples must be an integer >= 1", ()
    return None, values
