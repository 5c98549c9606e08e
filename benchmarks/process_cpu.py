"""CPU seconds the TaskManagers' JVMs and their Python workers used during a measured run.

Throughput on this 2-core machine moves by tens of percent between rounds of the same job; the
CPU a job spends per record moves far less, and says where the time goes. :func:`snapshot`
reads the CPU time (user + system) of every TaskManager process and of all its descendants
(PyFlink's Python workers, ``beam_boot`` and what it starts); :func:`usage` gives, between two
snapshots, the JVMs' and the Python workers' CPU per record and each worker's share, the
busiest first (with the hook: the routers, then the executors).

Example::

    >>> before = snapshot(cluster)                         # doctest: +SKIP
    >>> run_the_job()                                      # doctest: +SKIP
    >>> usage(before, snapshot(cluster), records=100_000)  # doctest: +SKIP
    {'jvm_cpu_s': 5.4, 'python_cpu_s': 5.1, 'jvm_us_per_record': 54.0, ...}
"""

from __future__ import annotations

__all__ = ["snapshot", "usage"]


def snapshot(cluster) -> dict[int, tuple[str, str, float]]:
    """pid -> (node, "jvm" or "python", CPU seconds) for every TaskManager process of
    ``cluster`` (a FlinkCluster) and its descendants; processes that vanish while read are
    left out."""
    import psutil
    seen: dict[int, tuple[str, str, float]] = {}
    for tm in cluster.status().taskmanagers:
        if not tm.pid:
            continue
        try:
            root = psutil.Process(tm.pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for process in processes:
            try:
                times = process.cpu_times()
                kind = "python" if "python" in process.name().lower() else "jvm"
            except psutil.Error:
                continue
            seen[process.pid] = (tm.node_id, kind, times.user + times.system)
    return seen


def usage(before: dict, after: dict, records: int) -> dict:
    """What the processes of ``after`` used since ``before`` (a process started in between
    counts from 0), per kind and per record (µs), and each Python worker's CPU seconds."""
    used = {pid: (node, kind, cpu - (before[pid][2] if pid in before else 0.0))
            for pid, (node, kind, cpu) in after.items()}
    per_kind = {kind: sum(cpu for _, k, cpu in used.values() if k == kind)
                for kind in ("jvm", "python")}
    records = max(1, int(records))
    return {"jvm_cpu_s": per_kind["jvm"], "python_cpu_s": per_kind["python"],
            "jvm_us_per_record": 1e6 * per_kind["jvm"] / records,
            "python_us_per_record": 1e6 * per_kind["python"] / records,
            "python_workers": sorted(
                ({"node": node, "cpu_s": round(cpu, 3)} for node, kind, cpu in used.values()
                 if kind == "python" and cpu > 0.0), key=lambda w: -w["cpu_s"])}
