"""``streamplace kafka stop`` then ``kafka start`` at once, three times, on the real broker
(issue 15: a start right after a stop used to fail with "exited during start-up").

Each stop and start is its own ``streamplace`` command, as a person at a terminal runs them, on
a broker of its own: free ports and a temporary home, so neither the session broker of the other
integration tests (29092) nor a developer's broker is touched. After every start one message is
produced and read back with confluent-kafka, together with those of the earlier rounds (the
data survives the restarts).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from streamplace.config import load_config
from streamplace.jars import jars_present
from streamplace.kafka_broker import KafkaBroker
from streamplace.processes import lock_holder, port_in_use
from streamplace.resources import default_home

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOPIC = "restart-check"
ROUNDS = 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def restart_overrides(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # Reuse jars already fetched (the developer's or the test session's) instead of Maven.
    for candidate in (default_home(), default_home() / "test"):
        if jars_present(load_config(None, [f"home={candidate}"])):
            (home / "jars").symlink_to(candidate / "jars", target_is_directory=True)
            break
    kafka_port, controller_port = _free_port(), _free_port()
    while controller_port == kafka_port:
        controller_port = _free_port()
    return [f"home={home}", f"kafka.port={kafka_port}", f"kafka.controller_port={controller_port}",
            "kafka.heap_mb=256"]


def _cli(overrides: list[str], *args: str) -> subprocess.CompletedProcess:
    sets = [item for o in overrides for item in ("--set", o)]
    return subprocess.run([sys.executable, "-m", "streamplace.cli", *sets, *args],
                          capture_output=True, text=True, timeout=240)


def _produce(bootstrap: str, value: str) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    errors = []
    producer.produce(TOPIC, value=value.encode(), on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(30) == 0, "message not delivered within 30 s"
    assert errors == [None]


def _read_all(bootstrap: str, expected: int, timeout_s: float = 30.0) -> list[str]:
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "restart-check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values: list[str] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < expected and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error():
                values.append(msg.value().decode())
    finally:
        consumer.close()
    return values


def test_kafka_start_right_after_stop_three_times(restart_overrides):
    config = load_config(None, restart_overrides)
    broker = KafkaBroker(config)
    host, ports = config.kafka.host, (config.kafka.port, config.kafka.controller_port)
    bootstrap = config.kafka.bootstrap_servers
    timings = []
    began = time.monotonic()
    first = _cli(restart_overrides, "kafka", "start", "--no-topics")
    assert first.returncode == 0, first.stderr
    try:
        from streamplace.topics import create_topics
        create_topics(config, [TOPIC], partitions=1)
        _produce(bootstrap, "before")
        for round_no in range(ROUNDS):
            t0 = time.monotonic()
            stop = _cli(restart_overrides, "kafka", "stop")
            t1 = time.monotonic()
            assert stop.returncode == 0 and "kafka: stopped" in stop.stdout, stop.stderr
            # stop returned: the JVM is gone and has let go of its ports and its data dir
            assert not any(port_in_use(host, port) for port in ports)
            assert lock_holder(broker.lock_file) is None
            start = _cli(restart_overrides, "kafka", "start", "--no-topics")  # at once
            t2 = time.monotonic()
            assert start.returncode == 0, f"round {round_no}: {start.stderr}"
            assert "exited during start-up" not in start.stderr, start.stderr  # no retry needed
            assert broker.status().running
            _produce(bootstrap, f"round-{round_no}")
            expected = ["before"] + [f"round-{i}" for i in range(round_no + 1)]
            assert _read_all(bootstrap, len(expected)) == expected
            timings.append((round(t1 - t0, 1), round(t2 - t1, 1)))
    finally:
        _cli(restart_overrides, "kafka", "stop")
    assert not broker.status().running
    print(f"(stop s, start s) per round: {timings}; {time.monotonic() - began:.0f} s in all")
