"""The placement service on the real broker: it consumes NodeFeedback from a fresh topic, drops
the duplicates, learns, publishes versions that differ from the initial model, commits its
offsets, and closes its consumer on stop. (No Flink needed: /cluster and /plan fall back to the
feedback view and the spec, which the unit tests cover.)"""

from __future__ import annotations

import random
import time
from collections import Counter

import numpy as np
import pytest

from placement.ldwp.modelfile import load_model
from placement.service.app import PlacementService
from placement.service.client import PlacementClient
from placement.service.settings import ServiceSettings
from streamplace.cluster_spec import load_cluster_spec
from workload.catalog import app_ids
from workload.codec import encode

pytestmark = pytest.mark.integration

# 1,280 tasks: one in 16 is held back to judge versions (placement.service.model_gate), 1,200
# are trained on
UNIQUE, RESENT, REPEATED_TASKS = 1_280, 100, 50
NODES = ("tm_a", "tm_b", "tm_c")


def _feedback(seed: int = 11) -> list[dict]:
    """One NodeFeedback per task (1,280), tm_b five times faster than the others: a task's
    service time is the cost model's estimate for its app and size on that node, times 1 on
    tm_b and 5 elsewhere (with noise), as a node's real times scale with the work."""
    from placement.service.learner import to_cluster_spec
    from placement.speed import ObservedSpeed
    estimates = ObservedSpeed(to_cluster_spec(load_cluster_spec("default")))
    rng = random.Random(seed)
    apps, t0 = app_ids(), int(time.time() * 1000) - 3_600_000
    sequence = dict.fromkeys(NODES, 0)
    records = []
    for i in range(UNIQUE):
        node = rng.choice(NODES)
        fast = node == "tm_b"
        app, size = apps[i % len(apps)], int(rng.lognormvariate(10.5, 0.5))
        service_ms = (1000.0 * estimates.estimate_s(node, app, size) * (1.0 if fast else 5.0)
                      * rng.uniform(0.8, 1.2))
        queue_ms = (20.0 if fast else 100.0) * rng.uniform(0.5, 1.5)
        finished = t0 + i * 50 + int(queue_ms + service_ms)
        sequence[node] += 1
        records.append({
            "node_id": node, "emitted_at_ms": finished + 5,
            "cpu_util": 0.4 if fast else 0.9, "gpu_util": 0.0, "host_mem_util": 0.5,
            "gpu_mem_util": 0.0, "uplink_bytes_per_s": 1e5, "downlink_bytes_per_s": 1e6,
            "queue_depth": 0 if fast else rng.randint(3, 8), "in_flight": 1,
            "backpressure": 0.0, "sequence": sequence[node],
            "completed": [{"task_id": f"svc-{i:05d}", "app_id": app, "input_size": size,
                           "queue_ms": queue_ms, "service_ms": service_ms,
                           "finished_at_ms": finished}]})
    return records


def _produce(bootstrap: str, topic: str, records: list[dict]) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, "compression.type": "lz4"})
    errors, delivered = [], []

    def on_delivery(err, msg):
        (errors if err is not None else delivered).append(err or msg.offset())

    for record in records:
        # Keyed by node: one node's reports stay in order within one partition.
        producer.produce(topic, key=record["node_id"].encode(),
                         value=encode("NodeFeedback", record), on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == [] and len(delivered) == len(records)


def _create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=3,
                                                replication_factor=1)]).values():
        future.result(30)



def test_service_learns_from_feedback_on_the_real_broker(stack_config, kafka_broker, tmp_path,
                                                         passing_burst_check):
    bootstrap = stack_config.kafka.bootstrap_servers
    topic = f"svc-feedback-{time.time_ns()}"
    _create_topic(bootstrap, topic)
    records = _feedback()
    rng = random.Random(5)
    resent = rng.sample(records, RESENT)  # the same reports again: dropped by sequence
    repeated = [{**r, "sequence": 10_000 + i, "emitted_at_ms": r["emitted_at_ms"] + 1}
                for i, r in enumerate(rng.sample(records, REPEATED_TASKS))]  # old task ids
    _produce(bootstrap, topic, records + resent + repeated)

    spec = load_cluster_spec("default")
    initial = tmp_path / "initial.spmodel"
    from placement.ldwp.agent import LDWPPolicy
    from placement.service.learner import learning_settings, to_cluster_spec
    LDWPPolicy(to_cluster_spec(spec), settings=learning_settings({"seed": 42})).save(initial)

    group = f"svc-test-{time.time_ns()}"
    settings = ServiceSettings(
        port=0, bootstrap_servers=bootstrap, feedback_topic=topic, group_id=group,
        flink_rest_url="http://127.0.0.1:9", flink_timeout_s=0.5,
        model_dir=tmp_path / "models", initial_model=initial, publish_every=500,
        # no version trial: its windows need routers that decide with them (none here, the
        # feedback is synthetic); tests/unit/test_version_trial.py tries it end to end
        min_records_first_version=200, trial_window_tasks=0)
    service = PlacementService(settings, spec)
    # the burst check holds or refuses versions on these synthetic reports (too few drain
    # rates; tests/unit/test_burst_check.py tests it): here the broker path is tested
    service.learner.burst_check = passing_burst_check
    service.start()
    try:
        client = PlacementClient(service.url, timeout_s=5.0)
        deadline = time.monotonic() + 90
        latest = client.latest()
        while time.monotonic() < deadline:
            latest = client.latest()
            if latest and latest["trained_on_records"] >= 1_000:
                break
            time.sleep(0.5)
        assert latest and latest["trained_on_records"] >= 1_000, client.health()
        assert [v["trained_on_records"] for v in client.models()][:4] == [0, 200, 700, 1200]

        health = client.health()
        assert health["feedback_records"] == UNIQUE
        assert health["duplicates_dropped"] == {"sequence": RESENT, "task_id": REPEATED_TASKS}
        assert health["consumer"]["running"] and health["undecodable_messages"] == 0
        metrics = service.metrics
        assert metrics.value("duplicates_dropped_total", kind="sequence") == RESENT
        assert metrics.value("duplicates_dropped_total", kind="task_id") == REPEATED_TASKS

        weights = client.download(latest["version"])
        assert weights != initial.read_bytes()
        path = tmp_path / "downloaded.spmodel"
        path.write_bytes(weights)
        learned, _ = load_model(path)
        start, _ = load_model(initial)
        assert any(not np.allclose(a[0], b[0]) for a, b in zip(learned, start))

        decisions = client.decide([{"task_id": f"q{i}", "app_id": app, "input_size": 40_000}
                                   for i, app in enumerate(app_ids())])
        # tm_b serves five times faster: most apps go there. Not all: which partition's
        # feedback is read first changes the training order, and with it how close one app's
        # Q-values come (tests/unit/test_service.py checks every probe on a fixed order).
        picked = Counter(d["node"] for d in decisions)
        assert picked["tm_b"] > len(decisions) / 2, decisions
    finally:
        service.stop()
    assert service.consumer.closed and not service.consumer.running
    assert not service.learner.running

    # Offsets were committed after the learner took the records: the group is at the end.
    from confluent_kafka import Consumer, TopicPartition
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                      "enable.auto.commit": False})
    try:
        partitions = [TopicPartition(topic, p) for p in range(3)]
        committed = probe.committed(partitions, timeout=10)
        ends = [probe.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions]
        assert [tp.offset for tp in committed] == ends
    finally:
        probe.close()

