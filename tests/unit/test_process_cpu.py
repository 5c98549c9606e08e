"""The engine benchmarks' CPU accounting (benchmarks/process_cpu.py): a TaskManager process and
its descendants, split into the JVM and the Python workers, per record."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from benchmarks.process_cpu import (compiler_us_per_record, snapshot, thread_group, thread_snapshot,
                                    thread_usage, usage)

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"


class _Cluster:
    """A FlinkCluster's ``status()`` whose one TaskManager is this test's process."""

    def __init__(self, pid):
        self.pid = pid

    def status(self):
        return SimpleNamespace(taskmanagers=[
            SimpleNamespace(node_id="tm_a", pid=self.pid),
            SimpleNamespace(node_id="tm_b", pid=None)])   # not running: left out


def test_a_python_worker_started_during_the_run_counts_from_zero():
    cluster = _Cluster(os.getpid())
    before = snapshot(cluster)
    assert before[os.getpid()][:2] == ("tm_a", "python")  # pytest runs in Python
    worker = subprocess.Popen(
        [sys.executable, "-c", BURN + "print('burnt', flush=True)\nimport sys\nsys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert worker.stdout.readline() == b"burnt\n"  # its 0.3 s used, still our child
        after = snapshot(cluster)
    finally:
        worker.communicate(b"")
    assert worker.pid not in before and after[worker.pid][:2] == ("tm_a", "python")
    used = usage(before, after, records=1000)
    assert {"node": "tm_a", "cpu_s": round(after[worker.pid][2], 3)} in used["python_workers"]
    assert after[worker.pid][2] >= 0.25
    assert used["python_us_per_record"] == pytest.approx(1e6 * used["python_cpu_s"] / 1000)
    # (the suite's other children, a broker or a cluster, may be JVMs: not counted here)


def test_usage_subtracts_what_each_process_had_used_before():
    before = {1: ("tm_a", "jvm", 10.0), 2: ("tm_a", "python", 4.0)}
    after = {1: ("tm_a", "jvm", 12.5), 2: ("tm_a", "python", 5.0), 3: ("tm_b", "python", 0.5)}
    used = usage(before, after, records=500)
    assert used["jvm_cpu_s"] == pytest.approx(2.5)
    assert used["python_cpu_s"] == pytest.approx(1.5)
    assert used["jvm_us_per_record"] == pytest.approx(5000.0)
    assert [w["cpu_s"] for w in used["python_workers"]] == [1.0, 0.5]  # busiest first
    assert usage({}, {}, records=0)["python_us_per_record"] == 0.0  # no records: no division


@pytest.mark.parametrize("name, group", [
    ("Source: lines (2/3)#0", "Source: lines"),
    ("Map (1/3)#1", "Map"),
    ("grpc-default-executor-12", "grpc-default-executor"),
    ("C2 CompilerThread0", "C2 CompilerThread"),      # the model's digit stays
    ("GC Thread#3", "GC Thread"),
    ("pool-3-thread-7", "pool-thread"),
    ("main", "main"),
    ("42", "42"),                                     # nothing left: the name itself
])
def test_threads_of_one_kind_share_a_group(name, group):
    assert thread_group(name) == group


def test_thread_usage_adds_up_each_kind_busiest_first_and_counts_the_jit():
    before = {(1, 10): ("tm_a", "C2 CompilerThread0", 1.0), (1, 11): ("tm_a", "Map (1/3)#0", 2.0)}
    after = {(1, 10): ("tm_a", "C2 CompilerThread0", 1.5),
             (1, 11): ("tm_a", "Map (1/3)#0", 2.2),
             (2, 20): ("tm_b", "Map (2/3)#0", 0.1),        # started during the run: from 0
             (2, 21): ("tm_b", "C1 CompilerThre", 0.25),       # the kernel's name: cut
             (2, 22): ("tm_b", "idle", 0.0)}               # used nothing: left out
    rows = thread_usage(before, after, records=1000)
    assert [(r["threads"], r["count"]) for r in rows] == [
        ("C2 CompilerThread", 1), ("Map", 2), ("C1 CompilerThre", 1)]
    assert rows[1]["cpu_s"] == pytest.approx(0.3)
    assert rows[0]["us_per_record"] == pytest.approx(500.0)
    assert compiler_us_per_record(rows) == pytest.approx(750.0)
    assert len(thread_usage(before, after, records=1000, top=1)) == 1


def test_thread_snapshot_reads_every_thread_of_each_taskmanager_process():
    import threading
    started, stop = threading.Event(), threading.Event()

    def burn():
        import time
        t = time.thread_time()
        while time.thread_time() - t < 0.2:
            pass
        started.set()
        stop.wait()

    worker = threading.Thread(target=burn, name="burner")
    worker.start()
    try:
        assert started.wait(10)
        seen = thread_snapshot(_Cluster(os.getpid()))
    finally:
        stop.set()
        worker.join()
    assert {key[0] for key in seen} == {os.getpid()}   # tm_b has no pid: left out
    assert worker.native_id in {tid for _, tid in seen}
    node, _, cpu = seen[(os.getpid(), worker.native_id)]
    assert node == "tm_a" and cpu >= 0.15
