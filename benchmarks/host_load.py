"""How busy each emulated host (and the benchmark's own process) was during a measured run.

A run's throughput says how fast the job was, not why. :class:`HostLoad` samples, every
``interval_s`` in a background thread, each emulated host's CPU time (its ``cpuacct`` cgroup,
:class:`streamplace.hosts.telemetry.HostTelemetry`), the time its ``cpu`` cgroup was throttled
(``cpu.stat``: the host used up its quota and waited for the next period) and this process's
CPU time (the placement service and the output reader run in it). :meth:`HostLoad.window`
gives, between two moments, each host's CPU use over its quota and its throttled share of the
time: a host near 1.0 was the bottleneck; hosts far below 1.0 while the job was slow waited
for something else (another host, a checkpoint, the router). It also samples the whole
machine's CPU (``/proc/stat``): the emulated hosts share one machine with the broker, the
JobManager and this process, and a machine busy near 1.0 bounds every placement alike, however
idle one host's quota looks.

Example::

    >>> load = HostLoad(FakeTelemetry(), interval_s=0.1)   # doctest: +SKIP
    >>> with load:
    ...     run_the_job()                                    # doctest: +SKIP
    >>> load.window(sent_at, last_output_at)["tm_a"]["cpu_over_quota"]   # doctest: +SKIP
    0.97
"""

from __future__ import annotations

import bisect
import time

from benchmarks.sampler import PeriodicSampler

__all__ = ["HostLoad", "machine_cpu_seconds"]

#: /proc/stat's aggregate CPU line fields that are busy time (user includes guest time)
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)     # user, nice, system, irq, softirq, steal
_IDLE_FIELDS = (3, 4)                 # idle, iowait


def machine_cpu_seconds(stat_path: str = "/proc/stat") -> tuple[float, float] | None:
    """(busy, total) CPU time of the whole machine, all CPUs together, in clock ticks (only
    their ratio over a window is used); None where ``/proc/stat`` cannot be read (not Linux)."""
    try:
        with open(stat_path, encoding="ascii") as f:
            fields = f.readline().split()
        if fields[0] != "cpu":
            return None
        ticks = [float(x) for x in fields[1:9]]
        busy = sum(ticks[i] for i in _BUSY_FIELDS)
        return busy, busy + sum(ticks[i] for i in _IDLE_FIELDS)
    except (OSError, ValueError, IndexError):
        return None


class HostLoad(PeriodicSampler):
    """Samples every host's CPU and throttled seconds, and this process's CPU, in a thread
    (``with load: ...``, :class:`benchmarks.sampler.PeriodicSampler`); ``telemetry``: a HostTelemetry (or anything with ``sample_all()`` of
    HostSamples and ``throttled_s(node_id)``)."""

    def __init__(self, telemetry, interval_s: float = 0.5, clock=time.time,
                 machine=machine_cpu_seconds):
        super().__init__(interval_s, "host-load", join_timeout_s=5.0)
        self.telemetry = telemetry
        self.machine = machine          # () -> (busy, total) CPU time of the machine, or None
        self.machine_cpu: list[tuple[float, float] | None] = []
        self.clock = clock
        self.times: list[float] = []
        self.samples: list[dict] = []   # per time: {node: (cpu_s, throttled_s, quota)}
        self.own_cpu_s: list[float] = []
        self.error = ""

    def sample(self) -> None:
        try:
            hosts = {node: (s.cpu_seconds, self.telemetry.throttled_s(node), s.cpu_quota)
                     for node, s in self.telemetry.sample_all().items()}
        except Exception as exc:  # noqa: BLE001 - a diagnostic must not end a benchmark run
            self.error = f"{type(exc).__name__}: {exc}"
            return
        self.times.append(self.clock())
        self.samples.append(hosts)
        self.own_cpu_s.append(time.process_time())
        self.machine_cpu.append(self.machine())

    def _at(self, moment: float) -> int:
        """The index of the last sample at or before ``moment`` (the first one if none is)."""
        return max(0, bisect.bisect_right(self.times, moment) - 1)

    def window(self, start: float, end: float) -> dict:
        """Per host between the samples nearest ``start`` and ``end``: ``cpu_over_quota``
        (CPU seconds / (quota x seconds)), ``throttled_share`` (throttled seconds / seconds);
        ``benchmark_process_cores`` (this process's CPU seconds / seconds);
        ``machine_busy_share`` (the whole machine's busy CPU time over all its CPU time;
        absent where it cannot be read). Empty with fewer than two samples in the window."""
        if len(self.times) < 2:
            return {}
        first, last = self._at(start), self._at(end)
        if last <= first:
            last = min(len(self.times) - 1, first + 1)
        seconds = self.times[last] - self.times[first]
        if seconds <= 0:
            return {}
        out: dict = {"seconds": round(seconds, 3)}
        for node, (cpu_s, throttled_s, quota) in sorted(self.samples[last].items()):
            before = self.samples[first].get(node)
            if before is None:
                continue
            out[node] = {
                "cpu_over_quota": round((cpu_s - before[0]) / (max(quota, 1e-9) * seconds), 3),
                "throttled_share": round((throttled_s - before[1]) / seconds, 3)}
        out["benchmark_process_cores"] = round(
            (self.own_cpu_s[last] - self.own_cpu_s[first]) / seconds, 3)
        before, after = self.machine_cpu[first], self.machine_cpu[last]
        if before is not None and after is not None and after[1] > before[1]:
            out["machine_busy_share"] = round((after[0] - before[0]) / (after[1] - before[1]), 3)
        return out
