"""Deciding late: a router that holds the next record (in Kafka) while every node already holds
enough of its work, instead of deciding it minutes ahead.

Why (the paper's system model, and measured in the simulator): the paper's cluster manager
keeps a task waiting queue and decides the longest-waiting task when a node has room. A router
that decides each record the moment it reads it commits a backlog to nodes on estimates made
before any of that work ran: under a burst of 6,000 records the routers decided all of them in
seconds (docs/results-engines.md, "Is it the service or its learned versions?"), and the run then
ended when the
node whose estimate was most wrong finished. In the simulator, deciding late lifted every
estimating rule by 11-27% (``python -m benchmarks.manager_queue``: MCT+HEFT 76.6 -> 95.7
tasks/min), because each task goes where work is running out, on node state seconds old.

The rule: with ``hold_in_flight`` = *k*, a node has room while this router holds fewer than *k*
times its capacity share of records in flight there (the router's own in-flight count,
:mod:`pyflink_jobs.in_flight`: sent and not yet reported complete). While no node has room the
router does not decide: it waits for a completion report, and Flink's back-pressure keeps the
next records in Kafka. *k* must cover the reports' lag: a node's completions are reported every
feedback interval, so its count includes up to one interval of finished work.

Bounds: one wait lasts at most ``max_wait_s``; a wait that ends without a completion means the
feedback has gone quiet (no reports: a dead tail, a broker away), and holding stops until the
next completion is reported, so the stream never runs at one record per ``max_wait_s``. The
waiting needs completions reported on another thread than the records' own
(``router_feedback="topic"``): a router fed by its broadcast input could not read them while it
waits (the hook refuses that combination).

Example::

    hold = DecisionHold({"tm_a": 64, "tm_b": 32}, max_wait_s=1.0)
    with condition:                       # the router's lock, a threading.Condition
        held_s = hold.wait(condition, in_flight_counts)
    ...
    with condition:                       # on a completion report, under the same lock
        hold.completed(condition)
"""

from __future__ import annotations

import math
import threading
import time

from workload.limits import finite_real

__all__ = ["DecisionHold", "hold_limits", "checked_hold_in_flight", "held_router_bundle",
           "MAX_HOLD_IN_FLIGHT", "MAX_HOLD_WAIT_S", "HELD_ROUTER_BUNDLE_MS",
           "HELD_ROUTER_BUNDLE_SHARE"]

#: ``hold_in_flight`` above this holds nothing in practice (and is a unit mistake)
MAX_HOLD_IN_FLIGHT = 1000.0
#: the longest one wait may last, seconds: a record must not wait on feedback for longer
MAX_HOLD_WAIT_S = 60.0
#: A holding router's PyFlink bundle is at most this share of its hold's whole depth (the sum
#: of its nodes' limits): a bundle's outputs stay in the router's Python worker until the
#: bundle closes, and records still there count as in flight while no executor has them. With
#: PyFlink's 1,000-record bundles and a depth of 288 (3 hosts x 32 x 3) the router filled every
#: node's limit with records it had not sent and waited its longest wait for completions that
#: could not come (2026-12-07). (With bundles of its own it still loses to deciding on
#: arrival, for another reason: docs/hook.md, "Deciding late".)
HELD_ROUTER_BUNDLE_SHARE = 0.25
#: ... and at most this long, ms (PyFlink's default: 1,000): a bundle that fills slowly (a
#: thin stream) still reaches the executors soon
HELD_ROUTER_BUNDLE_MS = 50


def held_router_bundle(limits: dict[str, int]) -> int:
    """The bundle size, records, for a router holding to ``limits`` (:func:`hold_limits`):
    ``HELD_ROUTER_BUNDLE_SHARE`` of their sum, in [1, 1000].

    >>> held_router_bundle({"tm_a": 96, "tm_b": 96, "tm_c": 96})
    72
    """
    depth = sum(limits.values())
    if depth < 1:
        raise ValueError(f"a hold's limits must sum to at least 1, got {limits!r}")
    return max(1, min(1000, int(depth * HELD_ROUTER_BUNDLE_SHARE)))


def checked_hold_in_flight(value) -> float:
    """``value`` as a hold's depth, a finite number in [0, MAX_HOLD_IN_FLIGHT] (0: no hold);
    else a ValueError naming the setting (bools and strings refused)."""
    depth = finite_real(value)
    if depth is None or not 0.0 <= depth <= MAX_HOLD_IN_FLIGHT:
        raise ValueError(f"hold_in_flight must be a number in [0, {MAX_HOLD_IN_FLIGHT:g}], "
                         f"got {value!r}")
    return depth


def hold_limits(capacity_shares: dict[str, int], hold_in_flight: float) -> dict[str, int]:
    """Per node: the in-flight count at which it has no room, ``hold_in_flight`` (above 0)
    times its capacity share rounded up (at least 1).

    >>> hold_limits({"tm_a": 32, "tm_b": 16}, 2.5)
    {'tm_a': 80, 'tm_b': 40}
    """
    depth = checked_hold_in_flight(hold_in_flight)
    if depth == 0.0:
        raise ValueError("hold_in_flight 0 holds nothing: a hold needs a depth above 0")
    return {node: max(1, math.ceil(share * depth)) for node, share in capacity_shares.items()}


class DecisionHold:
    """When to wait before deciding (module docstring). Not thread-safe on its own: every call
    is made under the router's lock, the ``condition`` passed in."""

    def __init__(self, limits: dict[str, int], max_wait_s: float = 1.0, clock=time.monotonic):
        if not limits:
            raise ValueError("a hold needs at least one node")
        if not 0.0 < max_wait_s <= MAX_HOLD_WAIT_S:  # NaN fails too
            raise ValueError(f"the hold's longest wait must be in (0, {MAX_HOLD_WAIT_S:g}] s, "
                             f"got {max_wait_s!r}")
        self.limits = dict(limits)
        self.max_wait_s = float(max_wait_s)
        self.clock = clock
        self.quiet = False        # a wait timed out: no holding until the next completion
        self.holds = 0            # records that waited
        self.held_s = 0.0         # their waits, in all
        self.timeouts = 0         # waits that ended without room

    def has_room(self, in_flight: dict[str, int]) -> bool:
        """Whether some node holds fewer than its limit."""
        return any(in_flight.get(node, 0) < limit for node, limit in self.limits.items())

    def wait(self, condition: threading.Condition, in_flight: dict[str, int]) -> float:
        """Wait (``condition`` held) until some node has room, at most ``max_wait_s``; the
        seconds waited (0.0 when there was room, or the feedback is quiet)."""
        if self.quiet or self.has_room(in_flight):
            return 0.0
        started = self.clock()
        room = condition.wait_for(lambda: self.has_room(in_flight), timeout=self.max_wait_s)
        held = max(0.0, self.clock() - started)
        self.holds += 1
        self.held_s += held
        if not room:
            self.timeouts += 1
            self.quiet = True
        return held

    def completed(self, condition: threading.Condition) -> None:
        """A report retired some of this router's tasks (``condition`` held): holding may
        resume, and a waiting record may find room."""
        self.quiet = False
        condition.notify_all()

    def stats(self) -> dict:
        return {"limits": dict(self.limits), "holds": self.holds,
                "held_s": round(self.held_s, 3), "timeouts": self.timeouts,
                "quiet": self.quiet}
