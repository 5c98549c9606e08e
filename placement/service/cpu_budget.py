"""A CPU budget for the service's learner thread: at most ``share`` of one core, measured.

Why (2026-12-07, docs/results-engines.md "What the service costs, and deciding late"): the learner
trains on
every completed task, so its CPU grows with the cluster's task rate; on the emulated hosts the
benchmark's service took 0.34-0.67 of the machine's 2 cores during every hooked run, taken
from the TaskManagers it serves. A placement service that shares a machine (a laptop, a head
host) must not compete with the work it places: past its share, the learner sleeps. What it
cannot train on meanwhile waits in its bounded queue (the oldest dropped and counted when
full), so a budget trades how many examples are learned from for the cluster's CPU, never the
service's answers (``/decide``, the model files, the feedback consumer run on other threads).

The rule: over a window of ``window_s`` wall seconds, the thread's CPU time may be at most
``share`` times the wall time since the window began; after each slice of work the loop asks
:meth:`CpuBudget.pause_s` how long to sleep to get back under. Windows restart, so an hour idle
does not bank an hour of full-speed training.

Example::

    budget = CpuBudget(0.25)
    while running:
        train_a_slice()
        time.sleep(budget.pause_s())
"""

from __future__ import annotations

import time

from workload.limits import finite_real

__all__ = ["CpuBudget", "BUDGET_WINDOW_S"]

#: wall seconds over which the share is kept
BUDGET_WINDOW_S = 5.0


class CpuBudget:
    """At most ``share`` (0 < share <= 1) of one core for the calling thread (module
    docstring); ``share`` 1 never pauses."""

    def __init__(self, share: float = 1.0, window_s: float = BUDGET_WINDOW_S,
                 cpu_clock=time.thread_time, wall_clock=time.monotonic):
        checked_share, checked_window = finite_real(share), finite_real(window_s)
        if checked_share is None or not 0.0 < checked_share <= 1.0:
            raise ValueError(f"the learner's CPU share must be in (0, 1], got {share!r}")
        if checked_window is None or checked_window <= 0:
            raise ValueError(f"the budget's window must be a positive number of seconds, got "
                             f"{window_s!r}")
        self.share, self.window_s = checked_share, checked_window
        self.cpu_clock, self.wall_clock = cpu_clock, wall_clock
        self.paused_s = 0.0     # slept in all, for /health
        self._start_cpu: float | None = None
        self._start_wall = 0.0

    def restart(self) -> None:
        """Begin a new window at the next :meth:`pause_s`: call it from a new thread (its CPU
        clock is not the last one's)."""
        self._start_cpu = None

    def pause_s(self) -> float:
        """Seconds to sleep now so that the thread's CPU since the window began stays within
        ``share`` of the wall time (0.0 when within it, or with a share of 1). Call it from
        the thread the budget is for, after each slice of work."""
        if self.share >= 1.0:
            return 0.0
        cpu, wall = self.cpu_clock(), self.wall_clock()
        if self._start_cpu is None or wall - self._start_wall > self.window_s:
            # a new window: what the thread used before it is not carried over (nor banked)
            self._start_cpu, self._start_wall = cpu, wall
            return 0.0
        used, elapsed = cpu - self._start_cpu, wall - self._start_wall
        pause = min(self.window_s, max(0.0, used / self.share - elapsed))
        self.paused_s += pause
        return pause
