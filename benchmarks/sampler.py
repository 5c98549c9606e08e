"""A diagnostic that samples in a thread of its own while a benchmark run goes on: one sample
when the block starts, one every ``interval_s``, and one when it ends.

:class:`benchmarks.host_load.HostLoad` (host CPU from cgroups) and
:class:`benchmarks.vertex_time.VertexTime` (Flink's busy / idle / back-pressured time) share it;
each says what one sample is. A sample must never raise: a diagnosis must not end a run.

Example::

    class Clock(PeriodicSampler):
        def sample(self):
            self.samples.append(time.time())

    with Clock(interval_s=0.5) as clock:
        run_the_job()
"""

from __future__ import annotations

import threading

__all__ = ["PeriodicSampler"]


class PeriodicSampler:
    """Calls :meth:`sample` at the start of a ``with`` block, every ``interval_s`` in a daemon
    thread named ``name``, and at its end (after the thread stopped, at most
    ``join_timeout_s`` later)."""

    def __init__(self, interval_s: float, name: str, join_timeout_s: float = 10.0):
        if not interval_s > 0:  # NaN fails too
            raise ValueError(f"a sampling interval must be above 0 s, got {interval_s!r}")
        self.interval_s = interval_s
        self.join_timeout_s = join_timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=self.join_timeout_s)
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()
