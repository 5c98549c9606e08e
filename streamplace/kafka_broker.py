"""``streamplace kafka start|stop|status``: a real Apache Kafka 4.1 single-node KRaft broker.

The jars come from Maven Central through ``kafka/pom.xml``; data and logs live under
``<home>/kafka`` (git-ignored); storage is formatted on first start; the broker binds and
advertises ``kafka.host`` only (127.0.0.1 by default; with an ``isolation: host`` cluster spec
the head address of the emulated hosts, which it creates first if the cluster has not, so the
TaskManagers' namespaces reach it too). Start is idempotent, stop uses the recorded PID.

Restarting the broker (``kafka stop`` then ``kafka start`` at once) is safe:

* ``stop`` returns only once the JVM has exited (SIGTERM; SIGKILL after 30 s, with a message)
  and its ports can be bound again.
* ``start`` first waits, up to 30 s, for the ports and for the data dir's ``.lock`` to be let go
  by a broker that is still exiting (e.g. one being stopped from another shell); a port held by
  an unrelated process fails at once.
* A JVM that exits during start-up is started again, up to 3 attempts in all, with a line on
  stderr for each retry. The final error shows what that attempt wrote: the new lines of
  ``logs/server.log`` and the JVM's own stdout/stderr (``logs/broker.out``), and its exit code.

Root cause of the failure this replaces (issue 15): ``Popen`` returns while the child's exec is
still in progress, when ``/proc/<pid>/cmdline`` reads empty; the start-up watch took that for
"not our process any more" and reported "exited during start-up" within 1-2 s while the JVM was
actually starting (and could be left running without a PID file). Our own child is now judged by
its ``Popen`` handle, and ``launch`` returns only once the new process is recognisable.
"""

from __future__ import annotations

import re
import string
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from streamplace.config import StreamplaceConfig
from streamplace.flink_hosts import HostLauncher, plan_isolation
from streamplace.jars import kafka_classpath
from streamplace.processes import (ExitedDuringStartup, LaunchError, ManagedProcess, exit_text,
                                   lock_holder, notice, require_java, tail)
from streamplace.resources import kafka_assets

__all__ = ["KafkaBroker", "BrokerStatus"]

READY_LINE = "Kafka Server started"
#: Launches of the JVM when it exits during start-up.
START_ATTEMPTS = 3
#: Seconds ``start`` waits for a previous broker to let go of the ports and the data dir lock.
RELEASE_WAIT_S = 30.0
#: Pause before a retry, times the attempt number.
RETRY_DELAY_S = 2.0


@dataclass
class BrokerStatus:
    running: bool
    pid: int | None
    bootstrap_servers: str
    log_file: str

    def __str__(self) -> str:
        if not self.running:
            return f"kafka: stopped (log: {self.log_file})"
        return f"kafka: running, pid {self.pid}, bootstrap {self.bootstrap_servers} " \
               f"(log: {self.log_file})"


class KafkaBroker:
    """The local broker described by ``config.kafka``.

    Example::

        broker = KafkaBroker(load_config())
        broker.start()          # formats storage on first start, waits until ready
        print(broker.status())
        broker.stop()
    """

    def __init__(self, config: StreamplaceConfig):
        self.config = config
        self.hosts_note: str | None = None   # what stop() did with emulated hosts, for the CLI
        self.dir = config.kafka_dir
        self.data_dir = self.dir / "data"
        self.logs_dir = self.dir / "logs"
        self.process = ManagedProcess(
            name="Kafka broker", pid_file=self.dir / "broker.pid",
            log_file=self.logs_dir / "broker.out", marker="kafka.Kafka",
            ports=[(config.kafka.host, config.kafka.port),
                   (config.kafka.host, config.kafka.controller_port)])

    @property
    def server_log(self):
        return self.logs_dir / "server.log"

    def status(self) -> BrokerStatus:
        return BrokerStatus(self.process.is_running(), self.process.pid(),
                            self.config.kafka.bootstrap_servers, str(self.server_log))

    def _render_properties(self):
        settings = self.config.kafka
        template = string.Template((kafka_assets() / "server.properties.template").read_text())
        text = template.substitute(
            host=settings.host, port=settings.port, controller_port=settings.controller_port,
            data_dir=self.data_dir, partitions=settings.topic_partitions,
            transaction_max_timeout_ms=settings.transaction_max_timeout_ms)
        path = self.dir / "server.properties"
        path.write_text(text)
        return path

    def _java_cmd(self, java: str, main_class: str, *args: str) -> list[str]:
        heap = self.config.kafka.heap_mb
        return [java, f"-Xmx{heap}m", f"-Xms{heap}m", "-XX:+UseG1GC",
                "-Djava.awt.headless=true",
                f"-Dkafka.logs.dir={self.logs_dir}",
                f"-Dlog4j2.configurationFile={kafka_assets() / 'log4j2.properties'}",
                "-cp", kafka_classpath(self.config), main_class, *args]

    def _format_storage(self, java: str, properties) -> None:
        if (self.data_dir / "meta.properties").is_file():
            return
        uuid = subprocess.run(self._java_cmd(java, "kafka.tools.StorageTool", "random-uuid"),
                              capture_output=True, text=True, check=False)
        cluster_id = uuid.stdout.strip().splitlines()[-1] if uuid.stdout.strip() else ""
        if uuid.returncode != 0 or not re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id):
            raise LaunchError(f"kafka-storage random-uuid failed:\n{uuid.stdout}{uuid.stderr}")
        fmt = subprocess.run(
            self._java_cmd(java, "kafka.tools.StorageTool", "format", "-t", cluster_id,
                           "-c", str(properties)),
            capture_output=True, text=True, check=False)
        if fmt.returncode != 0:
            raise LaunchError(f"formatting Kafka storage failed:\n{fmt.stdout}{fmt.stderr}")

    @property
    def lock_file(self) -> Path:
        return self.data_dir / ".lock"

    def untracked_lock_holder(self) -> int | None:
        """PID of a process holding the data dir lock that is not the broker we recorded (a
        broker started outside streamplace, or whose PID file is gone); None if there is none."""
        holder = lock_holder(self.lock_file)
        if holder is None or holder < 0 or holder == self.process.pid():
            return None
        return holder

    def _wait_lock_released(self, timeout_s: float, poll_s: float = 0.25) -> None:
        """Kafka locks ``data/.lock`` for its whole life and the kernel lets go of it only when
        the JVM is gone: a broker still exiting would make the new one fail at once."""
        deadline = time.monotonic() + timeout_s
        announced = False
        while True:
            holder = lock_holder(self.lock_file)
            if holder is None:
                return
            who = f"pid {holder}" if holder > 0 else "another process"
            if time.monotonic() >= deadline:
                hint = (f" If streamplace did not start it (no PID file), stop it yourself "
                        f"(kill {holder})." if holder > 0 else "")
                raise LaunchError(
                    f"cannot start Kafka broker: its data dir {self.data_dir} is still locked by "
                    f"{who} after {timeout_s:.0f} s: another Kafka broker uses it.{hint}")
            if not announced:
                notice(f"waiting up to {timeout_s:.0f} s for {who} to release "
                       f"{self.lock_file} (a broker still exiting?)")
                announced = True
            time.sleep(poll_s)

    def _wait_released(self, timeout_s: float) -> None:
        began = time.monotonic()
        self.process.wait_ports_free(timeout_s)
        self._wait_lock_released(max(0.0, timeout_s - (time.monotonic() - began)))

    def _attempt_output(self, server_offset: int, out_offset: int) -> str:
        """What one start attempt wrote: new server.log lines and the JVM's stdout/stderr."""
        parts = []
        for path, offset, label, lines in (
                (self.server_log, server_offset, "broker log", 30),
                (self.process.log_file, out_offset, "JVM output (stdout/stderr)", 15)):
            size = path.stat().st_size if path.is_file() else 0
            text = tail(path, lines, since=offset) if size != offset else ""
            parts.append(f"{label} of this attempt ({path}):\n"
                         + (text if text.strip() else "(nothing written)"))
        return "\n".join(parts)

    @staticmethod
    def _first_error(text: str) -> str:
        hits = [line.strip() for line in text.splitlines()
                if re.search(r"\b(ERROR|FATAL)\b|Exception|Error:", line)]
        return " | ".join(hits[:2])[:400]

    def _launch_once(self, java: str, properties: Path) -> None:
        server_offset = self.server_log.stat().st_size if self.server_log.exists() else 0
        out_file = self.process.log_file
        out_offset = out_file.stat().st_size if out_file.exists() else 0

        def ready() -> bool:
            # Readiness is judged on this attempt's log only.
            if not self.server_log.exists():
                return False
            with self.server_log.open("rb") as handle:
                if self.server_log.stat().st_size >= server_offset:
                    handle.seek(server_offset)
                return READY_LINE.encode() in handle.read()

        self.process.launch(self._java_cmd(java, "kafka.Kafka", str(properties)), cwd=self.dir)
        try:
            self.process.wait_ready(ready, self.config.kafka.start_timeout_s,
                                    log_to_show=self.server_log)
        except LaunchError as exc:
            self.process.stop(timeout_s=10)
            output = self._attempt_output(server_offset, out_offset)
            if isinstance(exc, ExitedDuringStartup):
                raise ExitedDuringStartup(
                    f"Kafka broker exited during start-up{exit_text(exc.exit_code)}.\n{output}",
                    exc.exit_code) from None
            raise LaunchError(f"Kafka broker did not become ready within "
                              f"{self.config.kafka.start_timeout_s:.0f} s.\n{output}") from None

    def start(self, attempts: int = START_ATTEMPTS,
              release_wait_s: float = RELEASE_WAIT_S) -> BrokerStatus:
        """Start the broker and wait for it; returns at once if it already runs. Waits up to
        ``release_wait_s`` for a broker still exiting to free the ports and the data dir, and
        launches the JVM up to ``attempts`` times if it exits during start-up."""
        if self.process.is_running():
            return self.status()
        java = require_java()
        self._ensure_head_address()
        attempts = max(1, attempts)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        properties = self._render_properties()
        for attempt in range(1, attempts + 1):
            self._wait_released(release_wait_s)
            self._format_storage(java, properties)
            try:
                self._launch_once(java, properties)
                return self.status()
            except ExitedDuringStartup as exc:
                if attempt >= attempts:
                    raise LaunchError(f"{exc}\n(gave up after {attempts} attempts; the logs "
                                      f"are in {self.logs_dir})") from None
                delay = RETRY_DELAY_S * attempt
                reason = self._first_error(str(exc)) or "it wrote no error"
                notice(f"Kafka broker exited during start-up{exit_text(exc.exit_code)}, attempt "
                       f"{attempt} of {attempts}: {reason}. Retrying in {delay:.0f} s.")
                time.sleep(delay)
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def _ensure_head_address(self) -> None:
        """With an ``isolation: host`` spec in use the listener is the bridge's address: make
        the hosts (bridge included) now if ``cluster start`` has not yet."""
        from workload.cluster_spec import SpecError, load_cluster_spec
        try:
            spec = load_cluster_spec(self.config.flink.cluster_spec)
        except SpecError:
            return  # the cluster reports a bad spec; the broker does not need one
        if spec.isolation != "host" or not plan_isolation(self.config, spec).emulated:
            return
        from streamplace.flink_cluster import FlinkCluster  # imports this module lazily too
        cluster = FlinkCluster(self.config, spec)
        cluster.hosts.ensure(busy=cluster.processes_running())

    def stop(self) -> bool:
        """Stop the recorded broker; returns once the JVM has exited and its ports are free.
        Removes the emulated hosts too when no cluster process of this home needs them."""
        stopped = self.process.stop(timeout_s=30)
        self.hosts_note = HostLauncher(self.config).release(still_needed=self._cluster_running)
        return stopped

    def _cluster_running(self) -> bool:
        from streamplace.flink_cluster import FlinkCluster
        try:
            return FlinkCluster(self.config).processes_running()
        except Exception:  # noqa: BLE001 - an unreadable spec: judge by the JobManager alone
            from streamplace.processes import ManagedProcess
            jm = self.config.flink_dir / "jobmanager"
            return ManagedProcess(name="Flink JobManager", pid_file=jm / "process.pid",
                                  log_file=jm / "log" / "console.out",
                                  marker=str(jm / "conf")).is_running()
