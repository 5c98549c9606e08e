"""The engine benchmarks' CPU accounting (benchmarks/process_cpu.py): a TaskManager process and
its descendants, split into the JVM and the Python workers, per record."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from benchmarks.process_cpu import snapshot, usage

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
