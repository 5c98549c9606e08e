"""Where a routing decision's time goes: wall time per phase, and the thread's CPU time.

The router (:class:`pyflink_jobs.router.Router`) times every decision as four phases:

==============  =====================================================================
``lock``        waiting for the router's lock (the model refresher swaps under it)
``observation`` expiring lost tasks and building the paper's observation
``policy``      the policy's ``decide`` (LDWP: encoding and the network)
``bookkeeping`` in-flight counts, backlog, the decision's context
==============  =====================================================================

and, on every ``cpu_every``-th decision, the CPU time its thread spent on the whole decision
(``time.thread_time``, a system call, hence sampled). Why both: a decision whose wall time is
far above its CPU time was *waiting* (for the GIL held by another thread of the same Python
worker, or for a core the operating system gave to another process), not computing; one whose
CPU time is high is slow code. Percentiles are over the newest ``size`` samples of each.

Example::

    >>> timer = DecisionTimer(size=100)
    >>> timer.add(0.0, (1e-6, 3e-6, 10e-6, 12e-6), cpu_s=11e-6)
    >>> round(timer.percentile_us("policy", 99)), round(timer.percentile_us("total", 50))
    (7, 12)
"""

from __future__ import annotations

__all__ = ["LatencyRing", "DecisionTimer", "PHASES"]

#: the phases of one decision, in order (see the module docstring)
PHASES = ("lock", "observation", "policy", "bookkeeping")


class LatencyRing:
    """The newest ``size`` latencies in microseconds, and their percentiles."""

    __slots__ = ("size", "samples", "_next", "_sorted")

    def __init__(self, size: int = 20_000):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"a latency ring needs a size >= 1, got {size!r}")
        self.size = size
        self.samples: list[float] = []
        self._next = 0
        # the samples sorted, kept until the next add: PyFlink reads every gauge (p50, p99 and
        # each phase's p99) at the end of every bundle, and a sort of 20,000 samples is ms
        self._sorted: list[float] | None = None

    def add(self, micros: float) -> None:
        self._sorted = None
        if len(self.samples) < self.size:
            self.samples.append(micros)
        else:  # a ring: the newest samples
            self.samples[self._next] = micros
            self._next = (self._next + 1) % self.size

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile (nearest rank below), 0.0 with no samples."""
        if not self.samples:
            return 0.0
        ordered = self._sorted
        if ordered is None:
            ordered = self._sorted = sorted(self.samples)
        return ordered[min(len(ordered) - 1, int(q / 100.0 * len(ordered)))]

    def __len__(self) -> int:
        return len(self.samples)


class DecisionTimer:
    """Per-phase wall times, the total, and sampled thread CPU time of the router's decisions.

    ``add(started, ends, cpu_s)``: ``started`` and the four phases' end times ``ends`` from
    ``time.perf_counter`` (seconds), ``cpu_s`` the decision's thread CPU seconds or None when
    this decision was not sampled (:meth:`samples_cpu` says which are)."""

    def __init__(self, size: int = 20_000, cpu_every: int = 8):
        if isinstance(cpu_every, bool) or not isinstance(cpu_every, int) or cpu_every < 1:
            raise ValueError(f"cpu_every must be an int >= 1, got {cpu_every!r}")
        self.rings = {name: LatencyRing(size) for name in (*PHASES, "total", "cpu")}
        self.cpu_every = cpu_every
        self._count = 0

    def samples_cpu(self) -> bool:
        """Whether the next decision should measure its thread CPU time (every cpu_every-th)."""
        self._count += 1
        return self._count % self.cpu_every == 0

    def add(self, started: float, ends: tuple[float, float, float, float],
            cpu_s: float | None = None) -> None:
        previous = started
        for name, end in zip(PHASES, ends):
            self.rings[name].add((end - previous) * 1e6)
            previous = end
        self.rings["total"].add((ends[-1] - started) * 1e6)
        if cpu_s is not None:
            self.rings["cpu"].add(cpu_s * 1e6)

    def percentile_us(self, name: str, q: float) -> float:
        """Percentile ``q`` of ``name``: a phase, "total" or "cpu"."""
        return self.rings[name].percentile(q)

    def summary(self, percentiles=(50, 99)) -> dict[str, dict[str, float]]:
        """``{name: {"p50": µs, "p99": µs}}`` for every phase, the total and the CPU time."""
        return {name: {f"p{q}": ring.percentile(q) for q in percentiles}
                for name, ring in self.rings.items()}
