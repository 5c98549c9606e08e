"""Launcher failures a user meets first, checked without starting a JVM: no Java, a taken port,
a process that dies during start-up (its log tail is shown); and restarts (stop waits for the
process and its ports, start waits for what a dying broker still holds and retries)."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import streamplace.kafka_broker as kafka_broker_module
from streamplace.config import load_config
from streamplace.flink_cluster import FlinkCluster
from streamplace.kafka_broker import KafkaBroker
from streamplace.processes import (ExitedDuringStartup, LaunchError, ManagedProcess, lock_holder,
                                   port_in_use, require_java)


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


# -- restart: stop waits for exit and ports, start waits for what a dying broker holds, retries --
# (issue 15: `kafka start` right after `kafka stop`; no JVM here, small Python stand-ins)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_our_own_child_is_ours_while_the_kernel_still_shows_no_command_line(tmp_path,
                                                                            monkeypatch):
    # Right after Popen, /proc/<pid>/cmdline can read empty for a while (exec still under way,
    # for long on a loaded machine): start-up used to call that "exited during start-up".
    proc = ManagedProcess("toy", tmp_path / "t.pid", tmp_path / "t.log", marker="toy-exec")
    proc.launch([sys.executable, "-c", "import time; time.sleep(30)", "toy-exec"])
    monkeypatch.setattr(ManagedProcess, "_looks_like_ours", lambda self, pid: False)
    assert proc.pid() is not None  # judged by the Popen handle, not by /proc
    calls = []
    proc.wait_ready(lambda: calls.append(1) or len(calls) > 2, timeout_s=10, poll_s=0.01)
    monkeypatch.undo()
    assert proc.stop(timeout_s=10) is True


def test_launch_returns_once_other_commands_recognise_the_process(tmp_path):
    proc = ManagedProcess("toy", tmp_path / "t.pid", tmp_path / "t.log", marker="toy-seen")
    for _ in range(20):
        proc.launch([sys.executable, "-c", "import time; time.sleep(30)", "toy-seen"])
        # a fresh object, as `streamplace kafka status` in another shell would build
        fresh = ManagedProcess("toy", tmp_path / "t.pid", tmp_path / "t.log", marker="toy-seen")
        assert fresh.pid() == proc.pid()
        proc.stop(timeout_s=0)


def test_exit_during_start_up_names_the_exit_code(tmp_path):
    proc = ManagedProcess("toy", tmp_path / "t.pid", tmp_path / "t.log", marker="toy-code")
    proc.launch([sys.executable, "-c", "raise SystemExit(7)", "toy-code"])
    with pytest.raises(ExitedDuringStartup, match=r"exited during start-up \(exit code 7\)") as e:
        proc.wait_ready(lambda: False, timeout_s=20)
    assert e.value.exit_code == 7


def test_stop_sends_sigkill_with_a_message_when_sigterm_is_ignored(tmp_path, capsys):
    proc = ManagedProcess("stubborn", tmp_path / "s.pid", tmp_path / "s.log", marker="stubborn-x")
    code = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)")
    proc.launch([sys.executable, "-c", code, "stubborn-x"])
    proc.wait_ready(lambda: "ready" in (tmp_path / "s.log").read_text(), timeout_s=20, poll_s=0.05)
    began = time.monotonic()
    assert proc.stop(timeout_s=1) is True
    assert time.monotonic() - began < 8
    assert not proc.is_running() and not (tmp_path / "s.pid").exists()
    assert "did not exit within 1 s of SIGTERM; sending SIGKILL" in capsys.readouterr().err


def test_stop_returns_only_when_the_process_is_gone_and_its_port_free(tmp_path):
    port = _free_port()
    proc = ManagedProcess("slow", tmp_path / "s.pid", tmp_path / "s.log", marker="slow-exit",
                          ports=[("127.0.0.1", port)])
    # Takes 1.5 s to shut down after SIGTERM, holding its listening port meanwhile.
    code = textwrap.dedent(f"""
        import signal, socket, sys, time
        srv = socket.socket(); srv.bind(("127.0.0.1", {port})); srv.listen(1)
        def bye(*_):
            time.sleep(1.5); srv.close(); sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        print("ready", flush=True)
        while True: time.sleep(0.1)
    """)
    proc.launch([sys.executable, "-c", code, "slow-exit"])
    proc.wait_ready(lambda: "ready" in (tmp_path / "s.log").read_text(), timeout_s=20, poll_s=0.05)
    assert port_in_use("127.0.0.1", port)
    began = time.monotonic()
    assert proc.stop(timeout_s=20) is True
    assert time.monotonic() - began >= 1.4
    assert not port_in_use("127.0.0.1", port)


def test_start_waits_for_a_port_a_process_of_its_kind_is_releasing(tmp_path, capsys):
    port = _free_port()
    release = tmp_path / "release"
    code = textwrap.dedent(f"""
        import os, socket, time
        srv = socket.socket(); srv.bind(("127.0.0.1", {port})); srv.listen(1)
        print("ready", flush=True)
        while not os.path.exists({str(release)!r}): time.sleep(0.02)
    """)
    previous = ManagedProcess("old", tmp_path / "old.pid", tmp_path / "old.log", marker="kind-k")
    previous.launch([sys.executable, "-c", code, "kind-k"])
    previous.wait_ready(lambda: "ready" in (tmp_path / "old.log").read_text(), timeout_s=20,
                        poll_s=0.05)
    new = ManagedProcess("new", tmp_path / "new.pid", tmp_path / "new.log", marker="kind-k",
                         ports=[("127.0.0.1", port)])
    threading.Timer(1.0, release.touch).start()  # the old one exits a second from now
    began = time.monotonic()
    new.wait_ports_free(timeout_s=20, poll_s=0.05)
    assert 0.9 < time.monotonic() - began < 15
    assert f"waiting up to 20 s for port 127.0.0.1:{port}" in capsys.readouterr().err


def test_start_does_not_wait_for_a_port_held_by_an_unrelated_process(tmp_path, taken_port):
    proc = ManagedProcess("svc", tmp_path / "p.pid", tmp_path / "p.log", marker="svc-x",
                          ports=[("127.0.0.1", taken_port)])
    began = time.monotonic()
    with pytest.raises(LaunchError, match="already in use by pid"):
        proc.wait_ports_free(timeout_s=30)
    assert time.monotonic() - began < 5


def _hold_lock(path, release):
    """A child that locks ``path`` as Kafka does (POSIX lock) until ``release`` exists."""
    code = (f"import fcntl, os, time; h = open({str(path)!r}, 'rb+'); "
            f"fcntl.lockf(h, fcntl.LOCK_EX); print('locked', flush=True)\n"
            f"while not os.path.exists({str(release)!r}): time.sleep(0.02)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "locked"
    return child


def test_start_waits_for_the_data_dir_lock_of_a_broker_still_exiting(tmp_path, capsys):
    broker = KafkaBroker(load_config(None, [f"home={tmp_path}"]))
    broker.data_dir.mkdir(parents=True)
    broker.lock_file.touch()
    release = tmp_path / "release"
    child = _hold_lock(broker.lock_file, release)
    try:
        assert lock_holder(broker.lock_file) == child.pid
        threading.Timer(1.0, release.touch).start()  # the old broker exits a second from now
        began = time.monotonic()
        broker._wait_lock_released(timeout_s=20, poll_s=0.05)
        assert 0.9 < time.monotonic() - began < 15
        assert lock_holder(broker.lock_file) is None
        assert f"for pid {child.pid} to release" in capsys.readouterr().err
    finally:
        child.kill()
        child.wait()


def test_a_data_dir_locked_for_good_fails_with_the_holder(tmp_path):
    broker = KafkaBroker(load_config(None, [f"home={tmp_path}"]))
    broker.data_dir.mkdir(parents=True)
    broker.lock_file.touch()
    child = _hold_lock(broker.lock_file, tmp_path / "never")
    try:
        with pytest.raises(LaunchError, match=f"still locked by pid {child.pid} after 0 s"):
            broker._wait_lock_released(timeout_s=0.3, poll_s=0.05)
        assert broker.untracked_lock_holder() == child.pid
    finally:
        child.kill()
        child.wait()


def _fake_broker(tmp_path, monkeypatch, script: str) -> KafkaBroker:
    """A KafkaBroker whose "JVM" is ``script`` (Python), run with the real launch/wait code."""
    broker = KafkaBroker(load_config(None, [f"home={tmp_path}", f"kafka.port={_free_port()}",
                                            f"kafka.controller_port={_free_port()}"]))
    monkeypatch.setattr(kafka_broker_module, "require_java", lambda: sys.executable)
    monkeypatch.setattr(kafka_broker_module, "RETRY_DELAY_S", 0.0)
    monkeypatch.setattr(KafkaBroker, "_format_storage", lambda self, java, props: None)
    monkeypatch.setattr(KafkaBroker, "_java_cmd",
                        lambda self, java, main, *args: [java, "-c", script, main, *args])
    return broker


def test_a_broker_exiting_during_start_up_is_retried_and_then_starts(tmp_path, monkeypatch,
                                                                     capsys):
    # First launch: exits at once, as the broker does when the old one still holds its lock.
    # Second launch: logs the ready line and stays up.
    script = textwrap.dedent("""
        import pathlib, sys, time
        logs = pathlib.Path(sys.argv[-1]).parent / "logs"
        flag = logs / "tried-once"
        with open(logs / "server.log", "a") as log:
            if not flag.exists():
                flag.touch()
                log.write("ERROR Exiting Kafka due to fatal exception during startup.\\n")
                sys.exit(1)
            log.write("INFO [KafkaRaftServer nodeId=1] Kafka Server started\\n")
        time.sleep(60)
    """)
    broker = _fake_broker(tmp_path, monkeypatch, script)
    status = broker.start()
    try:
        assert status.running and broker.process.is_running()
        err = capsys.readouterr().err
        assert "exited during start-up (exit code 1), attempt 1 of 3" in err
        assert "ERROR Exiting Kafka due to fatal exception" in err and "Retrying" in err
    finally:
        assert broker.stop() is True


def test_a_broker_that_keeps_exiting_fails_with_what_each_attempt_wrote(tmp_path, monkeypatch,
                                                                        capsys):
    script = ("import sys; print('Error: Could not reserve enough space for object heap'); "
              "sys.exit(1)")
    broker = _fake_broker(tmp_path, monkeypatch, script)
    broker.logs_dir.mkdir(parents=True)
    broker.server_log.write_text("INFO an old line from the previous run\n")
    began = time.monotonic()
    with pytest.raises(LaunchError) as failure:
        broker.start(attempts=2)
    message = str(failure.value)
    assert time.monotonic() - began < 20
    assert "exited during start-up (exit code 1)" in message
    assert "gave up after 2 attempts" in message
    assert "Could not reserve enough space" in message  # the JVM's own stdout/stderr
    assert "an old line from the previous run" not in message  # only this attempt's lines
    assert "(nothing written)" in message  # ... and here the broker log got none
    assert "attempt 1 of 2" in capsys.readouterr().err
    assert not broker.process.is_running()


def test_stop_removes_each_stopped_taskmanagers_working_directory(tmp_path):
    # Flink keeps <io.tmp.dirs>/tm_<resource-id> (every job's blobs) across restarts; a new
    # TaskManager reads it all at start, so a stopped cluster leaves none behind.
    cluster = FlinkCluster(load_config(None, [f"home={tmp_path}"]))
    dirs = [cluster.files.working_dir(tm.id) for tm in cluster.spec.taskmanagers]
    for d in dirs:
        (d / "blobStorage" / "job_1").mkdir(parents=True)
        (d / "blobStorage" / "job_1" / "blob_p-1").write_bytes(b"x" * 64)
    assert dirs[0] == tmp_path / "flink" / cluster.spec.taskmanagers[0].id / "tmp" / \
        f"tm_{cluster.spec.taskmanagers[0].id}"
    cluster.stop()
    assert not any(d.exists() for d in dirs)
    assert all(d.parent.is_dir() for d in dirs)   # io.tmp.dirs itself stays


class _StoppedJobManager:
    def stop(self, timeout_s=0):
        return True


@pytest.mark.parametrize("failures,recovers", [(0, True), (1, True), (2, False)])
def test_a_taskmanager_that_stops_during_a_jobmanager_restart_is_started_again(
        tmp_path, monkeypatch, capsys, failures, recovers):
    cluster = FlinkCluster(load_config(None, [f"home={tmp_path}"]))
    cluster.jobmanager = _StoppedJobManager()
    calls = []

    def start():
        calls.append(1)
        if len(calls) <= failures:
            raise LaunchError("TaskManager tm_a exited during start-up")
    monkeypatch.setattr(cluster, "start", start)
    if recovers:
        assert cluster.restart_jobmanager(hard=True) >= 0.0
        assert len(calls) == failures + 1
        assert ("starting what is not running again" in capsys.readouterr().err) == \
            (failures == 1)
    else:
        with pytest.raises(LaunchError, match="exited during start-up"):
            cluster.restart_jobmanager(hard=True)
        assert len(calls) == 2   # one retry, no loop
