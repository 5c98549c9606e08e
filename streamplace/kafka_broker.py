"""``streamplace kafka start|stop|status``: a real Apache Kafka 4.1 single-node KRaft broker.

The jars come from Maven Central through ``kafka/pom.xml``; data and logs live under
``<home>/kafka`` (git-ignored); storage is formatted on first start; the broker binds to
127.0.0.1 only. Start is idempotent, stop uses the recorded PID.
"""

from __future__ import annotations

import re
import string
import subprocess
from dataclasses import dataclass

from streamplace.config import StreamplaceConfig
from streamplace.jars import kafka_classpath
from streamplace.processes import LaunchError, ManagedProcess, require_java, tail
from streamplace.resources import kafka_assets

__all__ = ["KafkaBroker", "BrokerStatus"]

READY_LINE = "Kafka Server started"


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

    def start(self) -> BrokerStatus:
        """Start the broker and wait for it; returns at once if it already runs."""
        if self.process.is_running():
            return self.status()
        java = require_java()
        self.process.check_ports_free()
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        properties = self._render_properties()
        self._format_storage(java, properties)
        # Readiness is judged on this start's log only.
        offset = self.server_log.stat().st_size if self.server_log.exists() else 0

        def ready() -> bool:
            if not self.server_log.exists():
                return False
            with self.server_log.open("rb") as handle:
                handle.seek(offset if self.server_log.stat().st_size >= offset else 0)
                return READY_LINE.encode() in handle.read()

        self.process.launch(self._java_cmd(java, "kafka.Kafka", str(properties)), cwd=self.dir)
        try:
            self.process.wait_ready(ready, self.config.kafka.start_timeout_s,
                                    log_to_show=self.server_log)
        except LaunchError as exc:
            self.process.stop(timeout_s=10)
            raise LaunchError(f"{exc}\nJVM output ({self.process.log_file}):\n"
                              f"{tail(self.process.log_file, 10)}") from None
        return self.status()

    def stop(self) -> bool:
        return self.process.stop(timeout_s=30)
