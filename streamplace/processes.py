"""Start, watch and stop the long-running JVM processes streamplace launches (broker,
JobManager, TaskManagers): recorded PIDs, readiness by log line, clear failures with log tails.

Only processes this module started (a PID file it wrote, whose process still carries the marker)
are ever signalled. ``stop`` returns once they have exited and their ports are free again, so a
``start`` right after a ``stop`` does not race the old process.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

MARKER_ENV = "STREAMPLACE_PROCESS"

__all__ = ["ExitedDuringStartup", "LaunchError", "ManagedProcess", "exit_text", "lock_holder",
           "notice", "port_in_use", "require_java", "tail"]


class LaunchError(RuntimeError):
    """A process that could not be started or did not become ready; the message says why."""


class ExitedDuringStartup(LaunchError):
    """The process exited before it was ready (``exit_code`` when it was our own child)."""

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        self.exit_code = exit_code


def notice(message: str) -> None:
    """A line for the person at the terminal (stderr), e.g. a retry or a SIGKILL."""
    print(f"streamplace: {message}", file=sys.stderr, flush=True)


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


def _listener_pid(port: int) -> int | None:
    """PID of the process listening on ``port``, when the system tells (None otherwise)."""
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
                if conn.pid:
                    return conn.pid
    except (psutil.Error, OSError):
        pass
    return None


def _describe(pid: int | None) -> str:
    if pid is None:
        return ""
    try:
        command = " ".join(psutil.Process(pid).cmdline()[:3])[:120]
    except psutil.Error:
        command = ""
    return f" by pid {pid} ({command})" if command else f" by pid {pid}"


def lock_holder(path: Path) -> int | None:
    """PID holding a POSIX/flock lock on ``path`` (a Kafka log dir's ``.lock``), -1 when it is
    locked by a process we cannot name, None when it is not locked. Reads ``/proc/locks`` and
    takes no lock itself; elsewhere probes with a non-blocking ``lockf`` released at once."""
    try:
        st = path.stat()
    except OSError:
        return None
    locks = Path("/proc/locks")
    if locks.is_file():
        dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        for line in locks.read_text().splitlines():
            fields = line.split()
            # "1: POSIX  ADVISORY  WRITE 1234 08:01:5678 0 EOF" ("->" marks a blocked waiter)
            if "->" in fields or len(fields) < 6 or fields[5] != dev:
                continue
            try:
                pid = int(fields[4])
            except ValueError:
                return -1
            return pid if pid > 0 else -1
        return None
    import fcntl
    try:
        with path.open("rb+") as handle:
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.lockf(handle, fcntl.LOCK_UN)
    except OSError:
        return -1
    return None


def _has_command_line(pid: int) -> bool:
    """False for a process that is exiting (or still exec-ing): the kernel shows no command line
    then, although it may still hold its sockets and locks for a moment."""
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and bool(proc.cmdline())
    except psutil.Error:
        return False


def _gone(proc: psutil.Process) -> bool:
    """Exited (a zombie nobody reaped yet counts: it holds no ports, files or locks)."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def tail(path: Path, lines: int = 30, since: int = 0) -> str:
    """The last ``lines`` lines of ``path`` (of what was written after byte ``since``, when the
    file has not been rotated or truncated since)."""
    if not path.is_file():
        return f"(no log at {path})"
    with path.open("rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        start = max(0, size - 64 * 1024)
        if since <= size:
            start = max(start, since)
        handle.seek(start)
        text = handle.read().decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def exit_text(code: int | None) -> str:
    """`` (exit code 1)``, `` (killed by SIGKILL)`` or nothing when the code is unknown."""
    if code is None:
        return ""
    if code < 0:
        try:
            return f" (killed by {signal.Signals(-code).name})"
        except ValueError:
            return f" (killed by signal {-code})"
    return f" (exit code {code})"


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
    #: The last process this object launched: our own child, known to be ours and its exit code
    #: known, even before the kernel shows its new command line (see ``launch``).
    _child: subprocess.Popen | None = field(default=None, init=False, repr=False, compare=False)

    def _recorded_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _looks_like_ours(self, pid: int) -> bool:
        """A live process that carries this marker: the one we recorded, or one of its kind."""
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return False
            # The marker is in the command line (java ...) or, while a launcher script is still
            # exec-ing into java, in the environment we gave it.
            return (self.marker in " ".join(proc.cmdline())
                    or proc.environ().get(MARKER_ENV) == self.marker)
        except psutil.Error:
            return False

    def pid(self) -> int | None:
        pid = self._recorded_pid()
        if pid is None:
            return None
        child = self._child
        if child is not None and child.pid == pid and child.poll() is None:
            return pid
        return pid if self._looks_like_ours(pid) else None

    def is_running(self) -> bool:
        return self.pid() is not None

    def _exited(self) -> tuple[bool, int | None]:
        """Whether the recorded process has exited, and its exit code when it was our child."""
        child = self._child
        if child is not None and child.pid == self._recorded_pid():
            code = child.poll()
            return code is not None, code
        return not self.is_running(), None

    def check_ports_free(self) -> None:
        self.wait_ports_free(timeout_s=0)

    def wait_ports_free(self, timeout_s: float = 30.0, poll_s: float = 0.25) -> None:
        """Return once every port in ``ports`` can be bound. A port held by a process of our kind
        (this marker: e.g. the previous instance, still exiting), by one that is exiting (no
        command line any more) or by a socket whose owner the system does not name is waited
        for, up to ``timeout_s``; a port held by any other live process fails at once."""
        deadline = time.monotonic() + timeout_s
        announced = False
        while True:
            busy = [(host, port) for host, port in self.ports if port_in_use(host, port)]
            if not busy:
                return
            host, port = busy[0]
            owner = _listener_pid(port)
            ours = owner is not None and self._looks_like_ours(owner)
            foreign = owner is not None and not ours and _has_command_line(owner)
            if foreign or time.monotonic() >= deadline:
                waited = f", still after {timeout_s:.0f} s" if timeout_s > 0 and not foreign else ""
                hint = "Stop that process or choose another port"
                if ours and owner != self.pid():
                    hint = (f"It looks like a {self.name} that streamplace does not track (no PID "
                            f"file for it): if it is yours, stop it (kill {owner}), or choose "
                            "another port")
                raise LaunchError(
                    f"cannot start {self.name}: port {host}:{port} is already in use"
                    f"{_describe(owner)}{waited}. {hint} "
                    "(streamplace --set ...port=N, or a config file).")
            if not announced:
                notice(f"waiting up to {timeout_s:.0f} s for port {host}:{port} to be "
                       f"released{_describe(owner)}")
                announced = True
            time.sleep(poll_s)

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
        self._child = proc
        self.pid_file.write_text(f"{proc.pid}\n")
        self._wait_until_recognisable(proc)
        return proc.pid

    def _wait_until_recognisable(self, proc: subprocess.Popen, timeout_s: float = 5.0) -> None:
        """Popen returns once the child's exec is under way, but until the kernel has set up the
        new program its /proc cmdline and environ read empty, so another command (``status``,
        ``stop``) would not recognise it as ours. That lasts microseconds, or much longer on a
        loaded machine; wait for it (or for the process to exit) before returning."""
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None and time.monotonic() < deadline:
            if self._looks_like_ours(proc.pid):
                return
            time.sleep(0.005)

    def wait_ready(self, ready: "callable", timeout_s: float, log_to_show: Path | None = None,
                   poll_s: float = 0.25) -> None:
        """Wait until ``ready()`` is true; fail early (ExitedDuringStartup) if the process dies."""
        deadline = time.monotonic() + timeout_s
        log = log_to_show or self.log_file
        while time.monotonic() < deadline:
            if ready():
                return
            exited, code = self._exited()
            if exited:
                raise ExitedDuringStartup(
                    f"{self.name} exited during start-up{exit_text(code)}. Last log lines "
                    f"({log}):\n{tail(log)}", code)
            time.sleep(poll_s)
        raise LaunchError(f"{self.name} did not become ready within {timeout_s:.0f} s. "
                          f"Last log lines ({log}):\n{tail(log)}")

    def stop(self, timeout_s: float = 30.0, ports_timeout_s: float = 10.0) -> bool:
        """SIGTERM to the recorded process and its children, SIGKILL to whatever is left after
        ``timeout_s`` (0: at once, as a crash would). Returns once they have exited and, up to
        ``ports_timeout_s`` more, once ``ports`` are free again. False if it was not running.
        Only the process of our PID file (and its children) is ever signalled."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        try:
            proc = psutil.Process(pid)
            procs = [proc] + proc.children(recursive=True)
        except psutil.NoSuchProcess:
            procs = []
        for p in procs:
            try:
                p.send_signal(signal.SIGTERM)
            except psutil.Error:
                pass
        alive = self._wait_gone(procs, timeout_s)
        if alive:
            if timeout_s > 0:
                notice(f"{self.name} (pid {pid}) did not exit within {timeout_s:.0f} s of "
                       f"SIGTERM; sending SIGKILL to pid(s) {sorted(p.pid for p in alive)}")
            for p in alive:
                try:
                    p.kill()
                except psutil.Error:
                    pass
            alive = self._wait_gone(alive, 10.0)
            if alive:
                notice(f"{self.name}: pid(s) {sorted(p.pid for p in alive)} still there 10 s "
                       "after SIGKILL")
        self.pid_file.unlink(missing_ok=True)
        self._wait_ports_released({p.pid for p in procs}, ports_timeout_s)
        return True

    def _wait_gone(self, procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
        """Wait until ``procs`` exited (an unreaped zombie counts as exited); the ones left."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self._child is not None:
                self._child.poll()  # reap our own child, so it does not linger as a zombie
            alive = [p for p in procs if not _gone(p)]
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(0.05)

    def _wait_ports_released(self, stopped: set[int], timeout_s: float) -> None:
        """After a stop: wait until ``ports`` can be bound again, unless another process (not one
        we just stopped) now holds one: that is not ours to wait for."""
        deadline = time.monotonic() + timeout_s
        while True:
            busy = [(host, port) for host, port in self.ports if port_in_use(host, port)]
            if not busy:
                return
            owners = {_listener_pid(port) for _, port in busy}
            if any(owner is not None and owner not in stopped for owner in owners):
                return
            if time.monotonic() >= deadline:
                notice(f"{self.name} stopped, but port(s) {busy} are still not free after "
                       f"{timeout_s:.0f} s")
                return
            time.sleep(0.1)
