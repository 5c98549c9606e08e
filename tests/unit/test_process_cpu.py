"""The engine benchmarks' CPU accounting (benchmarks/process_cpu.py): a TaskManager process and
its descendants, split into the JVM and the Python workers, per record."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from benchmarks.process_cpu import (compiler_us_per_record, python_thread_snapshot,
                                    record_thread_usage, snapshot, thread_group, thread_snapshot,
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


def test_record_thread_usage_takes_each_workers_busiest_thread_as_its_records():
    # two workers: 101's records on thread 2 (its thread 1 gRPC), 202's on thread 5 (a thread
    # that started during the run counts from zero); 303 got no records: nothing counts
    before = {(101, 1): ("tm_a", 101, 1.0), (101, 2): ("tm_a", 101, 5.0),
              (202, 4): ("tm_b", 202, 2.0), (303, 7): ("tm_c", 303, 0.5)}
    after = {(101, 1): ("tm_a", 101, 1.2), (101, 2): ("tm_a", 101, 6.5),
             (202, 4): ("tm_b", 202, 2.1), (202, 5): ("tm_b", 202, 0.8),
             (303, 7): ("tm_c", 303, 0.5)}
    used = record_thread_usage(before, after, records=100_000)
    assert used["record_thread_us_per_record"] == pytest.approx(1e6 * (1.5 + 0.8) / 100_000)
    assert used["other_threads_us_per_record"] == pytest.approx(1e6 * (0.2 + 0.1) / 100_000)
    assert used["record_threads_cpu_s"] == [1.5, 0.8]
    assert record_thread_usage(after, after, records=0)["record_thread_us_per_record"] == 0.0


def test_python_thread_snapshot_reads_the_threads_of_python_workers_only():
    cluster = _Cluster(os.getpid())
    # this test's process is a "python" worker of tm_a here: its threads are all read
    seen = python_thread_snapshot(cluster)
    assert {pid for pid, _ in seen} >= {os.getpid()}
    assert {seen[key][:2] for key in seen if key[0] == os.getpid()} == {("tm_a", os.getpid())}
    worker = subprocess.Popen(
        [sys.executable, "-c", BURN + "print('burnt', flush=True)\nimport sys\nsys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert worker.stdout.readline() == b"burnt\n"
        after = python_thread_snapshot(cluster)
    finally:
        worker.communicate(b"")
    used = record_thread_usage(seen, after, records=1)
    assert max(cpu for (pid, _), (_, _, cpu) in after.items() if pid == worker.pid) >= 0.25
    assert used["record_threads_cpu_s"][0] >= 0.25  # the child's one busy thread
