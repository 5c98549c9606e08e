"""heal_cluster: start what is gone, and do not return while a TaskManager is still dying."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from streamplace.cluster_health import heal_cluster
from streamplace.processes import LaunchError


@dataclass
class _TM:
    node_id: str
    running: bool = True
    registered: bool = True


@dataclass
class _Status:
    taskmanagers: list


class _ScriptedCluster:
    """status() calls pop scripted deaths: ``dies_at[n] = node`` kills ``node`` at the n-th
    status() call; start() revives every node (or raises while ``start_fails`` > 0)."""

    def __init__(self, nodes, dies_at=None, start_fails=0):
        self.tms = {n: _TM(n) for n in nodes}
        self.dies_at = dict(dies_at or {})
        self.start_fails = start_fails
        self.status_calls = 0
        self.starts = 0

    def start(self):
        self.starts += 1
        if self.start_fails:
            self.start_fails -= 1
            raise LaunchError("TaskManager tm_b exited during start-up")
        for tm in self.tms.values():
            tm.running = tm.registered = True

    def status(self):
        self.status_calls += 1
        node = self.dies_at.pop(self.status_calls, None)
        if node:
            self.tms[node].running = self.tms[node].registered = False
        return _Status(list(self.tms.values()))


@pytest.mark.parametrize("case, cluster, starts", [
    ("whole from the start", _ScriptedCluster(["tm_a", "tm_b"]), 1),
    ("tm_b dies while settling: restarted", _ScriptedCluster(["tm_a", "tm_b"], {1: "tm_b"}), 2),
    ("tm_b dies twice", _ScriptedCluster(["tm_a", "tm_b"], {1: "tm_b", 3: "tm_b"}), 3),
    ("start fails once (still dying)", _ScriptedCluster(["tm_a"], start_fails=1), 2),
])
def test_heal_returns_only_on_a_cluster_that_stayed_whole(case, cluster, starts):
    heal_cluster(cluster, settle_s=0.6, attempts=4)
    assert cluster.starts == starts, case
    assert all(tm.running and tm.registered for tm in cluster.tms.values())


def test_a_cluster_that_keeps_dying_is_a_clear_error():
    cluster = _ScriptedCluster(["tm_a", "tm_b"], {i: "tm_b" for i in range(1, 50)})
    with pytest.raises(LaunchError, match="did not stay whole"):
        heal_cluster(cluster, settle_s=0.6, attempts=3)
    assert cluster.starts == 3


def test_start_failing_every_time_raises_its_own_error():
    cluster = _ScriptedCluster(["tm_a"], start_fails=5)
    with pytest.raises(LaunchError, match="exited during start-up"):
        heal_cluster(cluster, settle_s=0.01, attempts=2)
