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

from pathlib import Path

import re
import shutil
import subprocess

__all__ = ["snapshot", "usage", "thread_snapshot", "thread_usage", "thread_group",
           "compiler_us_per_record", "python_thread_snapshot", "record_thread_usage"]

#: A JVM thread name's instance part: "(2/3)#0", a trailing number, a pool's "-7-thread-3"
_INSTANCE = re.compile(r"\s*\(\d+/\d+\)(#\d+)?|[-#\s]\d+(?=\W|$)|(?<=[A-Za-z])\d+$")
#: jstack's thread line: "name" #12 ... nid=0x1a2b ...
_JSTACK_LINE = re.compile(r'^"(?P<name>.*)" .*\bnid=(?P<nid>0x[0-9a-f]+|\d+)\b')


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


def thread_group(name: str) -> str:
    """A JVM thread's name without its instance part, so that the threads of one kind add
    up: "Source: in (2/3)#0" and "Source: in (1/3)#0" are both "Source: in";
    "grpc-default-executor-12" is "grpc-default-executor"."""
    return _INSTANCE.sub("", name).strip() or name


def _jstack_names(pid: int) -> dict[int, str]:
    """tid -> the thread's full name from ``jstack`` (the kernel's name is cut at 15
    characters); {} without jstack or when it fails."""
    jstack = shutil.which("jstack")
    if jstack is None:
        return {}
    try:
        text = subprocess.run([jstack, str(pid)], capture_output=True, text=True,
                              timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    names = {}
    for line in text.splitlines():
        match = _JSTACK_LINE.match(line)
        if match:
            names[int(match["nid"], 0)] = match["name"]
    return names


def thread_snapshot(cluster, full_names: bool = False) -> dict[tuple[int, int], tuple]:
    """(pid, tid) -> (node, thread name, CPU seconds) for every thread of every TaskManager
    JVM of ``cluster``. Names are the kernel's (15 characters), or with ``full_names`` the
    JVM's own from jstack (a second or so per JVM: take it at the end of a run)."""
    import psutil
    seen: dict[tuple[int, int], tuple] = {}
    for tm in cluster.status().taskmanagers:
        if not tm.pid:
            continue
        try:
            threads = psutil.Process(tm.pid).threads()
        except psutil.Error:
            continue
        names = _jstack_names(tm.pid) if full_names else {}
        for thread in threads:
            name = names.get(thread.id)
            if name is None:
                try:
                    name = Path(f"/proc/{tm.pid}/task/{thread.id}/comm").read_text().strip()
                except OSError:
                    name = "?"
            seen[(tm.pid, thread.id)] = (tm.node_id, name,
                                         thread.user_time + thread.system_time)
    return seen


def thread_usage(before: dict, after: dict, records: int, top: int | None = None) -> list[dict]:
    """The JVM threads' CPU since ``before``, added up per :func:`thread_group` over all
    TaskManagers, in µs per record, the busiest first (the ``top`` busiest, or all). Names
    come from ``after`` (take it with full names)."""
    groups: dict[str, list] = {}
    for key, (_, name, cpu) in after.items():
        used = cpu - (before[key][2] if key in before else 0.0)
        if used > 0.0:
            group = groups.setdefault(thread_group(name), [0.0, 0])
            group[0] += used
            group[1] += 1
    records = max(1, int(records))
    rows = sorted(groups.items(), key=lambda item: -item[1][0])[:top]
    return [{"threads": name, "count": count, "cpu_s": round(cpu, 3),
             "us_per_record": round(1e6 * cpu / records, 2)} for name, (cpu, count) in rows]


def compiler_us_per_record(threads: list[dict]) -> float:
    """Of :func:`thread_usage`'s rows, the JIT compilers' µs per record (HotSpot's "C1/C2
    CompilerThread", with full names or the kernel's): a JVM that is still compiling the job's code is warming up, and that
    CPU is not the job's steady cost."""
    # "CompilerThre": the kernel's name of the thread is cut at 15 characters
    return round(sum(t["us_per_record"] for t in threads if "CompilerThre" in t["threads"]),
                 2)


def python_thread_snapshot(cluster) -> dict[tuple[int, int], tuple[str, int, float]]:
    """(pid, tid) -> (node, pid, CPU seconds) for every thread of every Python worker of
    ``cluster``'s TaskManagers (the processes :func:`snapshot` calls "python")."""
    import psutil
    seen: dict[tuple[int, int], tuple[str, int, float]] = {}
    for pid, (node, kind, _) in snapshot(cluster).items():
        if kind != "python":
            continue
        try:
            threads = psutil.Process(pid).threads()
        except psutil.Error:
            continue
        for thread in threads:
            seen[(pid, thread.id)] = (node, pid, thread.user_time + thread.system_time)
    return seen


def record_thread_usage(before: dict, after: dict, records: int) -> dict:
    """Of the Python workers' CPU since ``before`` (both :func:`python_thread_snapshot`), the
    part on each worker's busiest thread, in µs per record, and the rest.

    PyFlink hands a worker's bundles to one thread of Beam's pool at a time, and that thread
    runs every record's coders, PyFlink's wrappers and the operator: its CPU is the per-record
    Python path, without the worker's other threads (gRPC, Kafka clients, the hook's feedback)
    and without the workers that got no records. Counted per record it moves far less between
    runs than throughput on this machine, so it is what a change to the per-record path is
    judged by."""
    busiest: dict[int, float] = {}
    total = 0.0
    for key, (_, pid, cpu) in after.items():
        used = cpu - (before[key][2] if key in before else 0.0)
        if used <= 0.0:
            continue
        total += used
        busiest[pid] = max(busiest.get(pid, 0.0), used)
    records = max(1, int(records))
    on_records = sum(busiest.values())
    return {"record_thread_us_per_record": round(1e6 * on_records / records, 2),
            "other_threads_us_per_record": round(1e6 * (total - on_records) / records, 2),
            "record_threads_cpu_s": sorted((round(cpu, 3) for cpu in busiest.values()),
                                           reverse=True)}
