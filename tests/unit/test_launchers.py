"""Launcher failures a user meets first, checked without starting a JVM: no Java, a taken port,
a process that dies during start-up (its log tail is shown)."""

from __future__ import annotations

import socket
import sys

import pytest

from streamplace.config import load_config
from streamplace.flink_cluster import FlinkCluster
from streamplace.kafka_broker import KafkaBroker
from streamplace.processes import LaunchError, ManagedProcess, require_java


def test_missing_java_says_how_to_get_it(monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(LaunchError, match="Java 17 or newer is required"):
        require_java()


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def test_kafka_refuses_a_taken_port(tmp_path, taken_port):
    cfg = load_config(None, [f"home={tmp_path}", f"kafka.port={taken_port}"])
    with pytest.raises(LaunchError, match=f"port 127.0.0.1:{taken_port} is already in use"):
        KafkaBroker(cfg).start()


def test_flink_refuses_a_taken_rest_port(tmp_path, taken_port):
    cfg = load_config(None, [f"home={tmp_path}", f"flink.rest_port={taken_port}"])
    with pytest.raises(LaunchError, match="already in use"):
        FlinkCluster(cfg).start()


def test_a_process_that_dies_during_start_up_shows_its_log(tmp_path):
    proc = ManagedProcess("toy service", tmp_path / "toy.pid", tmp_path / "toy.log",
                          marker="toy-marker")
    proc.launch([sys.executable, "-c", "print('binding failed: toy error'); raise SystemExit(3)"])
    with pytest.raises(LaunchError, match="(?s)exited during start-up.*toy error"):
        proc.wait_ready(lambda: False, timeout_s=20)


def test_stop_uses_the_recorded_pid_and_is_idempotent(tmp_path):
    proc = ManagedProcess("sleeper", tmp_path / "s.pid", tmp_path / "s.log", marker="sleeper-x")
    proc.launch([sys.executable, "-c", "import time; time.sleep(60)"])
    assert proc.is_running()
    assert proc.stop(timeout_s=10) is True
    assert not proc.is_running() and not (tmp_path / "s.pid").exists()
    assert proc.stop() is False


def test_a_reused_pid_is_not_mistaken_for_ours(tmp_path):
    import os
    proc = ManagedProcess("svc", tmp_path / "p.pid", tmp_path / "p.log", marker="not-this-one")
    (tmp_path / "p.pid").write_text(str(os.getpid()))  # a live process that is not ours
    assert proc.pid() is None
