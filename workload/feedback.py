"""One NodeFeedback record -> the :class:`~workload.model.NodeState` it describes.

The router (``pyflink_jobs.router.Router.on_feedback``) and the placement service's learner
(``placement.service.learner.OnlineLearner.take``) both turn the executors' NodeFeedback
records (``workload/schemas/node_feedback.avsc``) into node numbers for LDWP's observation; they
call this one function, so the model the service trains sees exactly the numbers the router
will show it. Feedback crosses a network and may come from a broken or hostile executor, so
every field has a rule that ends in a bounded, finite number:

=====================  ==========================================================================
field                  rule
=====================  ==========================================================================
cpu_util, gpu_util,    a real number (not bool, not a string); clamped to [0, 1]. Missing, None,
host_mem_util,         another type, NaN or +-inf: 0.0, the value of a node that has not
gpu_mem_util           reported (a non-finite reading is no measurement, not "fully busy").
uplink_util,           ``*_bytes_per_s`` / the node's link capacity (``*_mbps`` x 125,000), clamped
downlink_util          to [0, 1] (a rate over capacity reads as a full link); rates that are
                       missing, not finite or negative: 0.0.
queue_depth            ``in_flight + queue_depth`` (tasks executing + waiting), each part floored
                       to an int, non-finite or negative parts 0, the sum at most
                       :data:`MAX_QUEUE_DEPTH`.
age_s                  ``now - emitted_at_ms`` in seconds, within [0, :data:`MAX_AGE_S`] (a report
                       stamped in the future by a skewed clock is fresh, not negative);
                       0 when no ``now_ms`` is given.
emitted_at_ms          a finite number >= 0, as an int at most :data:`MAX_EMITTED_AT_MS`;
                       anything else reads as the epoch (0): such a report sorts before every
                       dated one and is as stale as an age can be.
=====================  ==========================================================================

``backlog_s`` and ``speed_factor`` are not in the record (the router counts the one, measures
the other) and keep NodeState's defaults. Link capacities are configuration, not feedback: one
that is not a finite number > 0 raises ValueError.

Example::

    >>> state = node_state_from_feedback({"node_id": "tm_a", "emitted_at_ms": 1_000,
    ...                                   "cpu_util": 1.7, "gpu_util": float("nan"),
    ...                                   "uplink_bytes_per_s": 250_000_000.0,
    ...                                   "queue_depth": 2, "in_flight": 1}, now_ms=3_000)
    >>> state.cpu_util, state.gpu_util, state.uplink_util, state.queue_depth, state.age_s
    (1.0, 0.0, 1.0, 3, 2.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from workload.limits import finite_real
from workload.model import NodeState

__all__ = ["PER_TASK_ARRAYS", "node_state_from_feedback", "feedback_emitted_at_ms",
           "feedback_age_s", "timing_latency",
           "feedback_fraction", "feedback_count", "DEFAULT_LINK_MBPS", "MAX_QUEUE_DEPTH",
           "MAX_AGE_S", "MAX_EMITTED_AT_MS", "BYTES_PER_S_PER_MBPS"]

#: Link capacity (Mbit/s, each direction) of a node whose spec does not say: 1 Gbit Ethernet,
#: also ``workload.model.NodeSpec``'s default.
DEFAULT_LINK_MBPS = 1000.0
#: Bytes per second in one Mbit/s.
BYTES_PER_S_PER_MBPS = 125_000.0
#: Most tasks one node may report (queued + running); far beyond any real executor, it keeps a
#: broken counter from reaching the network's features (the service's API has the same bound).
MAX_QUEUE_DEPTH = 1_000_000
#: NodeFeedback's top-level arrays with one entry per ``completed`` task, in the same order
#: (top-level so that readers of an older schema still decode the record: docs/avro.md).
#: Whoever drops a timing from ``completed`` drops the same position from each of these.
PER_TASK_ARRAYS = ("routed_queue", "routed_backlog_ms", "routed_speed_factor",
                   "completed_energy_j", "completed_tenant", "completed_deadline_met",
                   "routed_model_version")
#: Stalest age (s) a report may have, about 116 days: older numbers describe no current node
#: (the service's API has the same bound).
MAX_AGE_S = 1e7
#: Latest emission time accepted: the largest Avro ``long`` (the schema's type).
MAX_EMITTED_AT_MS = 2**63 - 1

_UTILISATIONS = ("cpu_util", "gpu_util", "host_mem_util", "gpu_mem_util")


def feedback_fraction(value) -> float:
    """A utilisation-like field in [0, 1]: finite reals clamped, anything else 0.0.

    >>> feedback_fraction(0.25), feedback_fraction(-3), feedback_fraction(float("inf"))
    (0.25, 0.0, 0.0)
    """
    number = finite_real(value)
    return 0.0 if number is None else min(1.0, max(0.0, number))


def feedback_count(value, limit: int = MAX_QUEUE_DEPTH) -> int:
    """A count field as an int in [0, ``limit``]: floored, non-finite or negative 0.

    >>> feedback_count(2.9), feedback_count(-1), feedback_count(10**30, limit=5)
    (2, 0, 5)
    """
    number = finite_real(value)
    if number is None or number <= 0.0:
        return 0
    return int(min(float(limit), math.floor(number)))


def feedback_emitted_at_ms(record: Mapping) -> int:
    """The record's ``emitted_at_ms`` as an int in [0, :data:`MAX_EMITTED_AT_MS`]; 0 (the
    epoch: as stale as ages go) when it is missing, not finite or negative.

    >>> feedback_emitted_at_ms({"emitted_at_ms": 1_700_000_000_000.9}), feedback_emitted_at_ms({})
    (1700000000000, 0)
    """
    value = record.get("emitted_at_ms")
    if isinstance(value, int) and not isinstance(value, bool):
        return min(MAX_EMITTED_AT_MS, max(0, value))  # exact: ms stamps exceed float precision
    number = finite_real(value)
    if number is None or number < 0.0:
        return 0
    return int(min(float(MAX_EMITTED_AT_MS), math.floor(number)))


def feedback_age_s(emitted_at_ms: int, now_ms: float) -> float:
    """Seconds from ``emitted_at_ms`` to ``now_ms``, within [0, :data:`MAX_AGE_S`].

    >>> feedback_age_s(1_000, 3_500), feedback_age_s(5_000, 1_000), feedback_age_s(0, 1e18)
    (2.5, 0.0, 10000000.0)
    """
    now = finite_real(now_ms)
    if now is None:
        return MAX_AGE_S  # no clock to compare with: as stale as ages go
    return min(MAX_AGE_S, max(0.0, (now - float(emitted_at_ms)) / 1000.0))


def timing_latency(timing) -> tuple[str, float, int] | None:
    """(task id, latency ms, finished at ms) of one ``completed`` TaskTiming, or None when they
    are unusable (missing, not finite, negative latency parts). The latency is ``queue_ms +
    service_ms``: for a routed task its waiting counts from the router's decision, so
    ``finished - latency`` is when the decision was made.

    >>> timing_latency({"task_id": "t", "queue_ms": 2.0, "service_ms": 3.0,
    ...                 "finished_at_ms": 1005})
    ('t', 5.0, 1005)
    >>> timing_latency({"task_id": "t", "queue_ms": -1, "service_ms": 3, "finished_at_ms": 9})
    """
    try:
        task_id = timing["task_id"]
        queue_ms, service_ms = float(timing["queue_ms"]), float(timing["service_ms"])
        finished = float(timing["finished_at_ms"])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    if not isinstance(task_id, str) or not all(math.isfinite(v) for v in
                                                (queue_ms, service_ms, finished)) \
            or queue_ms < 0.0 or service_ms < 0.0:
        return None
    return task_id, queue_ms + service_ms, int(finished)


def _link_bytes_per_s(mbps: float, name: str) -> float:
    number = finite_real(mbps)
    if number is None or number <= 0.0:
        raise ValueError(f"{name} must be a finite number of Mbit/s > 0, got {mbps!r}")
    return number * BYTES_PER_S_PER_MBPS


def _link_fraction(rate, capacity_bytes_per_s: float) -> float:
    number = finite_real(rate)
    if number is None or number <= 0.0:
        return 0.0
    return min(1.0, number / capacity_bytes_per_s)


def node_state_from_feedback(record: Mapping, uplink_mbps: float = DEFAULT_LINK_MBPS,
                             downlink_mbps: float = DEFAULT_LINK_MBPS,
                             now_ms: float | None = None) -> NodeState:
    """The :class:`NodeState` a NodeFeedback record describes, by the rules of the module
    docstring: link rates as fractions of ``uplink_mbps`` / ``downlink_mbps``, ``age_s`` as of
    ``now_ms`` (0 when None). ValueError when ``record`` has no string ``node_id`` (callers
    decide which nodes they listen to first) or a link capacity is not a finite number > 0.

    >>> node_state_from_feedback({"node_id": "tm_b", "cpu_util": 0.5}).cpu_util
    0.5
    """
    node_id = record.get("node_id") if isinstance(record, Mapping) else None
    if not isinstance(node_id, str):
        raise ValueError(f"a NodeFeedback record needs a node_id string, got {node_id!r}")
    up = _link_bytes_per_s(uplink_mbps, "uplink_mbps")
    down = _link_bytes_per_s(downlink_mbps, "downlink_mbps")
    utilisations = {name: feedback_fraction(record.get(name)) for name in _UTILISATIONS}
    queue = feedback_count(record.get("in_flight")) + feedback_count(record.get("queue_depth"))
    age = 0.0 if now_ms is None else feedback_age_s(feedback_emitted_at_ms(record), now_ms)
    return NodeState(node_id, **utilisations,
                     uplink_util=_link_fraction(record.get("uplink_bytes_per_s"), up),
                     downlink_util=_link_fraction(record.get("downlink_bytes_per_s"), down),
                     queue_depth=min(MAX_QUEUE_DEPTH, queue), age_s=age)
