"""Start, watch and stop the long-running JVM processes streamplace launches (broker,
JobManager, TaskManagers): recorded PIDs, readiness by log line, clear failures with log tails."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

MARKER_ENV = "STREAMPLACE_PROCESS"

__all__ = ["LaunchError", "ManagedProcess", "port_in_use", "require_java", "tail"]


class LaunchError(RuntimeError):
    """A process that could not be started or did not become ready; the message says why."""


def require_java() -> str:
    """Path of the ``java`` launcher, or a LaunchError saying how to get one (17+)."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home, "bin", "java") if java_home else None
    java = str(candidate) if candidate and candidate.is_file() else shutil.which("java")
    if not java:
        raise LaunchError(
            "Java 17 or newer is required to run Kafka and Flink, and no `java` was found on PATH "
            "or in $JAVA_HOME. On Debian/Ubuntu: apt-get install openjdk-17-jre-headless")
    return java


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def _port_owner(port: int) -> str:
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
                if conn.pid:
                    proc = psutil.Process(conn.pid)
                    return f" by pid {conn.pid} ({' '.join(proc.cmdline()[:3])[:120]})"
    except (psutil.Error, OSError):
        pass
    return ""


def tail(path: Path, lines: int = 30) -> str:
    if not path.is_file():
        return f"(no log at {path})"
    with path.open("rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - 64 * 1024))
        text = handle.read().decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class ManagedProcess:
    """One background process with a PID file and a log file.

    ``marker`` is a string that must appear in the command line of a live process before we
    treat the PID file as ours (PIDs are reused after reboots).
    """

    name: str
    pid_file: Path
    log_file: Path
    marker: str
    ports: list[tuple[str, int]] = field(default_factory=list)

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            # The marker is in the command line (java ...) or, while a launcher script is still
            # exec-ing into java, in the environment we gave it.
            if (self.marker in " ".join(proc.cmdline())
                    or proc.environ().get(MARKER_ENV) == self.marker):
                return pid
        except psutil.Error:
            pass
        return None

    def is_running(self) -> bool:
        return self.pid() is not None

    def check_ports_free(self) -> None:
        for host, port in self.ports:
            if port_in_use(host, port):
                raise LaunchError(
                    f"cannot start {self.name}: port {host}:{port} is already in use"
                    f"{_port_owner(port)}. Stop that process or choose another port "
                    "(streamplace --set ...port=N, or a config file).")

    def launch(self, cmd: list[str], env: dict[str, str] | None = None,
               cwd: Path | None = None) -> int:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ if env is None else env)
        env[MARKER_ENV] = self.marker
        with self.log_file.open("ab") as out:
            # New session: Ctrl-C in the terminal that ran `streamplace ... start` must not kill
            # the service; `stop` does that by PID.
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                    start_new_session=True)
        self.pid_file.write_text(f"{proc.pid}\n")
        return proc.pid

    def wait_ready(self, ready: "callable", timeout_s: float, log_to_show: Path | None = None,
                   poll_s: float = 0.25) -> None:
        """Wait until ``ready()`` is true; fail early if the process dies."""
        deadline = time.monotonic() + timeout_s
        log = log_to_show or self.log_file
        while time.monotonic() < deadline:
            if ready():
                return
            if not self.is_running():
                raise LaunchError(f"{self.name} exited during start-up. Last log lines "
                                  f"({log}):\n{tail(log)}")
            time.sleep(poll_s)
        raise LaunchError(f"{self.name} did not become ready within {timeout_s:.0f} s. "
                          f"Last log lines ({log}):\n{tail(log)}")

    def stop(self, timeout_s: float = 30.0) -> bool:
        """SIGTERM, then SIGKILL after ``timeout_s``. Returns False if it was not running."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        proc = psutil.Process(pid)
        procs = [proc] + proc.children(recursive=True)
        for p in procs:
            try:
                p.send_signal(signal.SIGTERM)
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(procs, timeout=timeout_s)
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=5)
        self.pid_file.unlink(missing_ok=True)
        return True
