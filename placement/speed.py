"""How fast each node really works, measured from the tasks it finished.

The cost model (``workload.estimates``) says how long a task *should* take on a node from the
node's spec. A real node differs: a neighbour shares its cores, its CPU is older than the spec
says. :class:`ObservedSpeed` keeps, per node, an exponential moving average of
``log(work time / estimate)`` over the tasks the node finished (:func:`timing_work_s`: the time
the task's stages really ran, not counting its waits for units other tasks held),
and turns it into a factor: how many times longer than the estimate this node's tasks take now
(1.0 = as the spec says, and until ``min_samples`` tasks were seen).

The router (``pyflink_jobs.router``) and the placement service's learner
(``placement.service.learner``) both run one, fed from the same NodeFeedback timings, so the
``speed_factor`` a model is trained with is the one the router infers with. LDWP's node rows
scale the task estimate by it (``placement.ldwp.features.node_rows``), so the residual model's
prior is "MCT with measured speeds" and the network learns the rest.

With a learned cost model (:class:`placement.measured_costs.MeasuredCosts`, any task type) the
factor's job is subsumed: that model's estimate of a (type, node) pair is fitted to the node's
own measured times, so it already holds the node's speed, and multiplying by a factor measured
against it would count the speed twice (and a factor relative to a calibration exists only for
the built-in apps). ``ObservedSpeed(cluster, measured)`` therefore *delegates*: ``observe``
feeds the MeasuredCosts, ``estimate_s`` is its estimate without exploration (the work the router
counts as sent), and ``factor`` is 1.0 for every node. Callers keep one code path
(``estimate_s(...) * factor(...)``) for both kinds of cost model.

:func:`timing_sample` is the one rule (router and service) for turning a reported timing into a
sample: (task type, size, work seconds), or None for a record that cannot be learned from.

Example::

    >>> from workload.model import ClusterSpec, NodeSpec
    >>> speeds = ObservedSpeed(ClusterSpec((NodeSpec("a", 1, 8.0), NodeSpec("b", 1, 8.0))),
    ...                        min_samples=1)
    >>> estimate = speeds.estimate_s("b", "video_synopsis", 36_864)
    >>> speeds.observe("b", "video_synopsis", 36_864, 3.0 * estimate)
    >>> round(speeds.factor("b"), 2), speeds.factor("a")
    (3.0, 1.0)
    >>> from placement.measured_costs import MeasuredCosts
    >>> cluster = ClusterSpec((NodeSpec("a", 1, 8.0),))
    >>> speeds = ObservedSpeed(cluster, MeasuredCosts(cluster, min_samples=1))
    >>> speeds.observe("a", "my_op", 1000, 0.25)
    >>> speeds.estimate_s("a", "my_op", 1000), speeds.factor("a")
    (0.25, 1.0)
"""

from __future__ import annotations

import math
import numbers

from workload.estimates import CostModel
from workload.model import ClusterSpec

__all__ = ["ObservedSpeed", "SPEED_FACTOR_LIMITS", "timing_work_s", "timing_sample"]


def timing_work_s(timing) -> float:
    """Seconds a finished task (a NodeFeedback ``TaskTiming``) really occupied the node's units:
    its ``work_ms`` (sum of its stages' run times) when reported, else its ``service_ms``.

    Why not ``service_ms``: an executor keeps several tasks in flight, so a task's service time
    also counts the waits between its stages while other tasks held the units; it grows with
    the number in flight, not with how fast the node is."""
    work = timing.get("work_ms")
    if work is not None and float(work) > 0.0:
        return float(work) / 1000.0
    return float(timing["service_ms"]) / 1000.0


def timing_sample(timing) -> tuple[str, int, float] | None:
    """(task type, size, work seconds) of a finished task's ``TaskTiming``, or None when the
    record cannot be learned from: a missing or non-string type, a size that is not a finite
    number >= 0, a work time that is not a finite number > 0. Bounds on size and time (and
    everything else hostile input may hold) are the cost model's to check
    (``MeasuredCosts.observe``); this only makes the fields safe to convert."""
    try:
        task_type, size, work_s = timing["app_id"], timing["input_size"], timing_work_s(timing)
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    if not isinstance(task_type, str) or isinstance(size, bool) or \
            not isinstance(size, numbers.Real):  # "512" parses, but is a broken record
        return None
    try:
        size_f = float(size)
    except (TypeError, ValueError, OverflowError):
        return None
    if not (math.isfinite(size_f) and size_f >= 0.0 and math.isfinite(work_s) and work_s > 0.0):
        return None
    return task_type, size if isinstance(size, int) else int(size_f), work_s


def _is_live(costs) -> bool:
    """A cost model that learns from timings (MeasuredCosts or anything shaped like it)."""
    return callable(getattr(costs, "observe", None)) and \
        callable(getattr(costs, "estimates_s", None))


#: the range a measured speed factor is clipped into by default: a node with a broken clock or
#: one odd task must not look 1000x slower (what a router can report as its speed factor)
SPEED_FACTOR_LIMITS = (0.05, 50.0)


class ObservedSpeed:
    """Per node: measured service time over estimated time (see the module docstring).

    ``smoothing``: weight of a new sample in the moving average of the log ratio (0.1: about
    the last 10-20 tasks count); ``min_samples``: tasks seen before the factor departs from 1;
    ``limits``: the factor is clipped into this range (a node with a broken clock or one odd
    task must not look 1000x slower). ``costs``: a ``CostModel`` (default: the calibration's,
    the factor is measured against it) or a ``MeasuredCosts`` (delegation: see the module
    docstring; the other settings then do not apply)."""

    def __init__(self, cluster: ClusterSpec, costs=None,
                 smoothing: float = 0.1, min_samples: int = 5,
                 limits: tuple[float, float] = SPEED_FACTOR_LIMITS):
        if not 0.0 < smoothing <= 1.0:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        if min_samples < 1:
            raise ValueError(f"min_samples must be at least 1, got {min_samples}")
        self.smoothing = smoothing
        self.min_samples = min_samples
        self._low, self._high = math.log(limits[0]), math.log(limits[1])
        self.live = costs if _is_live(costs) else None
        costs = costs or CostModel(colocation=None)
        # node -> {app: (fixed_s, per_pixel_s)}: the estimate without walking a DAG per task
        # (not needed when delegating: the learned model estimates every type itself)
        self._coefficients = {spec.node_id: {} if self.live is not None
                              else costs.task_time_coefficients(spec) for spec in cluster.nodes}
        self._log_ratio: dict[str, float] = {}
        self._samples: dict[str, int] = {}

    def estimate_s(self, node: str, app_id: str, input_size: int) -> float:
        """The cost model's time of the task alone on ``node`` (0 for an unknown node/app;
        delegating: the learned estimate, never lowered for exploration)."""
        if self.live is not None:
            return self.live.estimate_s(node, app_id, input_size, explore=False)
        fixed, slope = self._coefficients.get(node, {}).get(app_id, (0.0, 0.0))
        return fixed + slope * max(0, int(input_size))

    def observe(self, node: str, app_id: str, input_size: int, service_s: float) -> None:
        """One finished task of ``node`` that took ``service_s`` seconds to execute."""
        if self.live is not None:
            if self.live.observe(node, app_id, input_size, service_s) and \
                    node in self._coefficients:  # count the cluster's nodes only (bounded)
                self._samples[node] = self._samples.get(node, 0) + 1
            return
        estimate = self.estimate_s(node, app_id, input_size)
        if estimate <= 0.0 or not service_s > 0.0:
            return  # nothing to compare with (unknown node or app, or a zero timing)
        ratio = min(self._high, max(self._low, math.log(service_s / estimate)))
        count = self._samples.get(node, 0)
        previous = self._log_ratio.get(node)
        # The first samples are averaged plainly, so one early outlier does not linger.
        weight = max(self.smoothing, 1.0 / (count + 1))
        self._log_ratio[node] = ratio if previous is None else (
            previous + weight * (ratio - previous))
        self._samples[node] = count + 1

    def factor(self, node: str) -> float:
        """How many times longer than estimated ``node``'s tasks take (1.0 when unmeasured,
        and always when delegating: the learned estimate holds the node's speed)."""
        if self.live is not None or self._samples.get(node, 0) < self.min_samples:
            return 1.0
        return math.exp(self._log_ratio[node])

    def factors(self) -> dict[str, float]:
        return {node: self.factor(node) for node in self._coefficients}

    def reported_factor(self, node: str) -> float:
        """The node's slowness for people to read (metrics, stats): :meth:`factor` against the
        calibration; when delegating (where ``factor`` is always 1) how many times longer
        ``node`` takes than the other nodes, the geometric mean of the learned model's
        ``relative_speed`` over the nodes it shares trusted task types with (1.0 when none)."""
        if self.live is None:
            return self.factor(node)
        logs = [math.log(ratio) for other in self._coefficients if other != node
                if (ratio := self.live.relative_speed(node, other)) is not None and ratio > 0]
        if not logs:
            return 1.0
        return math.exp(min(self._high, max(self._low, sum(logs) / len(logs))))

    def reported_factors(self) -> dict[str, float]:
        return {node: self.reported_factor(node) for node in self._coefficients}

    def samples(self, node: str) -> int:
        return self._samples.get(node, 0)
