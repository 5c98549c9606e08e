"""Shared benchmark bookkeeping: every result file records how it was made."""

from __future__ import annotations

import fcntl
import json
import os
import platform
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    import psutil
    return {"python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "processor": platform.processor() or platform.machine()}


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=RESULTS.parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_result(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    document = {"benchmark": name, "command": " ".join([Path(sys.executable).name] + sys.argv),
                "git_commit": git_commit(), "machine": machine(), **payload}
    path = RESULTS / f"{name}.json"
    # numpy scalars (scipy intervals, comparisons of them) are written as plain numbers
    path.write_text(json.dumps(document, indent=2,
                               default=lambda o: o.item() if hasattr(o, "item") else str(o))
                    + "\n")
    return path


def description(doc: str | None) -> str:
    r"""A module docstring's first paragraph on one line: what ``--help`` says a benchmark does
    (its first line alone was cut mid-sentence where the sentence wraps).

    >>> description("Avro codec speed: fastavro versus\n``avro``, per record.\n\n    usage")
    'Avro codec speed: fastavro versus ``avro``, per record.'
    """
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def percent_with_ci(gain: dict) -> str:
    """A relative gain ``{"mean": m, "ci95": [low, high]}`` (fractions) as the summaries
    print it.

    >>> percent_with_ci({"mean": 0.251, "ci95": [0.231, 0.272]})
    '+25.1% [+23.1, +27.2]'
    """
    low, high = gain["ci95"]
    return f"{100 * gain['mean']:+.1f}% [{100 * low:+.1f}, {100 * high:+.1f}]"


def bar_with_ci(ax, labels, means, ci95s, colours=None, horizontal=False):
    """One bar per label at its mean, with its 95% interval as the error bar.

    ``ci95s`` is one ``(low, high)`` per bar. The error bar's arms are ``mean - low`` and
    ``high - mean``, floored at 0: matplotlib refuses negative arms, and a mean outside its own
    interval (rounding, a one-seed "interval") is drawn with no arm on that side rather than
    failing the whole plot. ``horizontal`` draws ``barh`` with ``xerr`` (long label lists).
    Returns matplotlib's ``BarContainer``.

    Example::

        >>> import matplotlib; matplotlib.use("Agg")
        >>> import matplotlib.pyplot as plt
        >>> bars = bar_with_ci(plt.figure().gca(), ["MCT", "LDWP"], [10.0, 12.0],
        ...                    [(9.0, 11.0), (11.5, 13.0)], colours=["tab:blue", "tab:red"])
        >>> [float(b.get_height()) for b in bars]
        [10.0, 12.0]
    """
    def arm(value: float) -> float:
        return 0.0 if value < 0 else value  # NaN (no interval) stays NaN: no arm drawn

    errors = [[arm(m - low) for m, (low, _) in zip(means, ci95s)],
              [arm(high - m) for m, (_, high) in zip(means, ci95s)]]
    if horizontal:
        return ax.barh(labels, means, xerr=errors, color=colours)
    return ax.bar(labels, means, yerr=errors, color=colours)


@contextmanager
def exclusive_home(home: Path):
    """Hold ``home`` (a benchmark's broker and cluster home) for this process: a second
    benchmark on the same home would stop the first one's broker and cluster when it starts its
    own. The lock is ``flock`` on ``home/benchmark.lock``, so a crashed benchmark leaves none.
    Exits with a message naming the holder when another process holds it."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "benchmark.lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()[:200] or "another process"
            raise SystemExit(f"{home} is in use by a running benchmark ({holder}); wait for it "
                             "to end: two benchmarks on one home stop each other's broker and "
                             "cluster") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}: {' '.join(sys.argv)[:160]}\n")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
