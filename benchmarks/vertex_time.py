"""Where each operator's time went during a measured run: busy, idle or back-pressured.

A host with CPU to spare while another host is throttled (docs/results-engines.md, example (b))
has two
readings: the router gives it too little work, or the router cannot hand it more because it is
blocked. A router has one thread that emits to every executor's channel, so one executor's full
channel stalls its emits to all of them (head-of-line blocking). Flink measures this per subtask:
``busyTimeMsPerSecond``, ``idleTimeMsPerSecond`` and ``backPressuredTimeMsPerSecond`` (the time
waiting for an output buffer). :class:`VertexTime` samples them for every vertex of a job,
averaged over its subtasks (Flink REST ``/jobs/<job>/vertices/<vertex>/subtasks/metrics``),
in a background thread; :meth:`VertexTime.window` gives each vertex's mean shares of the time
between two moments. Flink's web server refreshes metrics every
``metrics.fetcher.update-interval`` (10 s by default): for runs of seconds, set it lower
(``--flink-conf metrics.fetcher.update-interval=1000``).

Example::

    >>> sampler = VertexTime(rest, job_id, {"v1": "streamplace-router"})   # doctest: +SKIP
    >>> with sampler:
    ...     run_the_job()                                                   # doctest: +SKIP
    >>> sampler.window(sent_at, last_output_at)["streamplace-router"]       # doctest: +SKIP
    {'busy': 0.41, 'idle': 0.07, 'back_pressured': 0.52, 'samples': 12}
"""

from __future__ import annotations

import math
import time

from benchmarks.sampler import PeriodicSampler

__all__ = ["VertexTime", "METRICS"]

#: Flink's per-subtask time metrics (ms per second) and the share each becomes
METRICS = {"busyTimeMsPerSecond": "busy", "idleTimeMsPerSecond": "idle",
           "backPressuredTimeMsPerSecond": "back_pressured"}


class VertexTime(PeriodicSampler):
    """Samples every vertex's busy / idle / back-pressured time in a thread (``with ...:``,
    :class:`benchmarks.sampler.PeriodicSampler`).
    ``rest``: anything with ``get(path)`` returning decoded JSON (the project's
    FlinkRestClient); ``vertices``: vertex id -> name (``benchmarks.flink_e2e.vertex_names``)."""

    def __init__(self, rest, job_id: str, vertices: dict[str, str], interval_s: float = 1.0,
                 clock=time.time):
        super().__init__(interval_s, "vertex-time")
        self.rest = rest
        self.job_id = job_id
        self.vertices = dict(vertices)
        self.clock = clock
        self.samples: list[tuple[float, dict[str, dict[str, float]]]] = []
        self.error = ""

    def sample(self) -> None:
        """One sample of every vertex; a failure is kept in ``error``, never raised (a
        diagnosis must not end a benchmark run)."""
        at, shares = self.clock(), {}
        names = ",".join(METRICS)
        try:
            for vertex, name in self.vertices.items():
                body = self.rest.get(f"/jobs/{self.job_id}/vertices/{vertex}/subtasks/metrics"
                                     f"?get={names}&agg=avg")
                shares[name] = _shares(body)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            self.error = f"{type(exc).__name__}: {exc}"[:300]
            return
        self.samples.append((at, shares))

    def window(self, start: float, end: float) -> dict[str, dict]:
        """Per vertex name: the mean share of the time it was busy, idle and back-pressured
        over the samples taken between ``start`` and ``end``, and how many there were (a
        vertex with no sample in the window is left out)."""
        inside = [shares for at, shares in self.samples if start <= at <= end]
        out: dict[str, dict] = {}
        for name in self.vertices.values():
            rows = [s[name] for s in inside if s.get(name)]
            if not rows:
                continue
            out[name] = {share: round(sum(r.get(share, 0.0) for r in rows) / len(rows), 3)
                         for share in METRICS.values()}
            out[name]["samples"] = len(rows)
        return out


def _shares(body) -> dict[str, float]:
    """``{busy, idle, back_pressured}`` as shares of a second from one aggregated-metrics
    answer (``[{"id": ..., "avg": ms}, ...]``); missing, non-numeric or non-finite values are
    left out, and a share is bounded to [0, 1]."""
    out = {}
    for entry in body if isinstance(body, list) else []:
        if not isinstance(entry, dict) or entry.get("id") not in METRICS:
            continue
        try:
            value = float(entry.get("avg"))
        except (TypeError, ValueError):
            continue
        if math.isfinite(value):
            out[METRICS[entry["id"]]] = min(1.0, max(0.0, value / 1000.0))
    return out
