"""One real Kafka broker and one real 3-TaskManager Flink cluster for the whole test session.

They run on their own ports with their own runtime folder (``.streamplace/test``), so a demo or
a cluster a developer left running is never touched. Everything started here is stopped at the
end of the session, and the log tails are printed when start-up fails.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from streamplace.cluster_health import heal_cluster
from streamplace.config import StreamplaceConfig, load_config
from streamplace.flink_cluster import FlinkCluster
from streamplace.kafka_broker import KafkaBroker
from streamplace.resources import default_home

TEST_OVERRIDES = [
    "kafka.port=29092", "kafka.controller_port=29093",
    "flink.rest_port=28081", "flink.rpc_port=26123",
    "job.checkpoint_interval_ms=1000",
]


def _test_config(**extra: str) -> StreamplaceConfig:
    home = Path(os.environ.get("STREAMPLACE_TEST_HOME", default_home() / "test"))
    overrides = TEST_OVERRIDES + [f"home={home}"] + [f"{k}={v}" for k, v in extra.items()]
    return load_config(path=None, overrides=overrides)


@pytest.fixture(scope="session")
def stack_config() -> StreamplaceConfig:
    return _test_config()


@pytest.fixture(scope="session")
def kafka_broker(stack_config):
    broker = KafkaBroker(stack_config)
    broker.stop()  # a broker left over by an interrupted run
    shutil.rmtree(stack_config.kafka_dir, ignore_errors=True)
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def _session_flink_cluster(stack_config, kafka_broker):
    cluster = FlinkCluster(stack_config)
    cluster.stop()
    shutil.rmtree(stack_config.flink_dir, ignore_errors=True)
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def flink_cluster(_session_flink_cluster):
    """The session's cluster, whole again for each test module. Why: PyFlink 2.2.1 sometimes
    kills a TaskManager seconds after the previous module cancelled its job; the next module's
    job would then wait for slots that never come (NoResourceAvailableException)."""
    heal_cluster(_session_flink_cluster)
    return _session_flink_cluster


def pytest_collection_modifyitems(items):
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
