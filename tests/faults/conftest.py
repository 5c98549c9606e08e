"""The fault-injection suite's stack: a real Kafka broker and a real 3-TaskManager Flink cluster
of its own (own ports, own runtime folder ``.streamplace/faults``), so it can break them freely
without touching the integration tests' stack or a developer's demo.

Run with ``make faults`` (CI runs it after ``make test``). Each test measures what its fault
costs and adds it to ``fault_report``, which is written to ``benchmarks/results/faults.json`` at
the end of the session (the README's reliability table comes from that file).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from streamplace.config import StreamplaceConfig, load_config
from streamplace.flink_cluster import FlinkCluster
from streamplace.kafka_broker import KafkaBroker
from streamplace.resources import default_home

FAULT_OVERRIDES = [
    "kafka.port=30092", "kafka.controller_port=30093",
    "flink.rest_port=30081", "flink.rpc_port=30123",
    "job.checkpoint_interval_ms=1000",
]
REPORT = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "faults.json"


@pytest.fixture(scope="session")
def fault_config() -> StreamplaceConfig:
    home = Path(os.environ.get("STREAMPLACE_FAULTS_HOME", default_home() / "faults"))
    return load_config(path=None, overrides=FAULT_OVERRIDES + [f"home={home}"])


@pytest.fixture(scope="session")
def fault_broker(fault_config):
    broker = KafkaBroker(fault_config)
    broker.stop()  # left over by an interrupted run
    shutil.rmtree(fault_config.kafka_dir, ignore_errors=True)
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def fault_cluster(fault_config, fault_broker):
    cluster = FlinkCluster(fault_config)
    cluster.stop()
    shutil.rmtree(fault_config.flink_dir, ignore_errors=True)
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def fault_report():
    """scenario -> its figures; written as JSON (and printed) when the session ends."""
    figures: dict[str, dict] = {}
    yield figures
    if not figures:
        return
    previous = json.loads(REPORT.read_text()) if REPORT.is_file() else {}
    scenarios = {**previous.get("scenarios", {}), **figures}
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps({
        "generated_by": "make faults (tests/faults)", "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores", "scenarios": scenarios}, indent=1,
        sort_keys=True) + "\n")
    print("\nfault-injection figures (benchmarks/results/faults.json):")
    for name, row in sorted(figures.items()):
        print(f"  {name}: {row}")


def pytest_collection_modifyitems(items):
    for item in items:
        if "faults" in str(item.fspath):
            item.add_marker(pytest.mark.faults)
