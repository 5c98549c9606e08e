"""The Java artifacts streamplace needs, fetched from Maven Central by the project's own pom
(``kafka/pom.xml``): the Kafka broker classpath and the Flink Kafka connector jar."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from streamplace.config import StreamplaceConfig
from streamplace.processes import LaunchError
from streamplace.resources import kafka_assets

__all__ = ["fetch_jars", "kafka_classpath", "flink_connector_jar", "jars_present"]

CONNECTOR_GLOB = "flink-sql-connector-kafka-*.jar"


def jars_present(config: StreamplaceConfig) -> bool:
    kafka_libs = config.jars_dir / "kafka"
    return (any(kafka_libs.glob("kafka_2.13-*.jar"))
            and any(kafka_libs.glob("log4j-slf4j-impl-*.jar"))
            and any((config.jars_dir / "flink").glob(CONNECTOR_GLOB)))


def fetch_jars(config: StreamplaceConfig, force: bool = False, quiet: bool = True) -> Path:
    """Run Maven on the shipped pom; a no-op when the jars are already there."""
    if jars_present(config) and not force:
        return config.jars_dir
    mvn = shutil.which("mvn")
    if not mvn:
        raise LaunchError(
            "Maven (`mvn`) is needed once to fetch the Kafka broker and the Flink Kafka connector "
            "from Maven Central, and it is not on PATH. On Debian/Ubuntu: apt-get install maven")
    pom = kafka_assets() / "pom.xml"
    config.jars_dir.mkdir(parents=True, exist_ok=True)
    cmd = [mvn, "-B", "-f", str(pom), "package", f"-Dstreamplace.build={config.jars_dir}"]
    if quiet:
        cmd.insert(1, "-q")
    # Maven writes target/ next to the pom; keep it out of site-packages / the checkout.
    cmd.append(f"-DbuildDirectory={config.home / 'maven-target'}")
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0 or not jars_present(config):
        raise LaunchError(f"Maven could not fetch the jars (exit {result.returncode}):\n"
                          f"{(result.stdout + result.stderr)[-4000:]}")
    return config.jars_dir


def kafka_classpath(config: StreamplaceConfig) -> str:
    fetch_jars(config)
    return str(config.jars_dir / "kafka" / "*")


def flink_connector_jar(config: StreamplaceConfig) -> Path:
    fetch_jars(config)
    return sorted((config.jars_dir / "flink").glob(CONNECTOR_GLOB))[-1]
