"""Create the streamplace topics from ``kafka/topics.yaml`` with the confluent-kafka AdminClient."""

from __future__ import annotations

import yaml

from streamplace.config import StreamplaceConfig
from streamplace.resources import kafka_assets

__all__ = ["topic_definitions", "ensure_topics", "create_topics", "ALLOWED_COMPRESSION"]

#: Flink's bundled Kafka client lacks zstd (and we avoid snappy/gzip for CPU cost).
ALLOWED_COMPRESSION = {"uncompressed", "lz4", "producer"}


def topic_definitions(config: StreamplaceConfig) -> dict[str, dict]:
    """Topic name -> {partitions, config, description}, names taken from ``config.job``."""
    raw = yaml.safe_load((kafka_assets() / "topics.yaml").read_text())["topics"]
    names = {"tasks": config.job.topic_tasks, "results": config.job.topic_results,
             "feedback": config.job.topic_feedback, "dead-letter": config.job.topic_dead_letter}
    definitions = {}
    for role, spec in raw.items():
        partitions = spec.get("partitions", "default")
        if partitions == "default":
            partitions = config.kafka.topic_partitions
        topic_config = {k: str(v) for k, v in (spec.get("config") or {}).items()}
        compression = topic_config.get("compression.type", "producer")
        if compression not in ALLOWED_COMPRESSION:
            raise ValueError(f"topic {role}: compression.type {compression!r} is not readable by "
                             f"Flink's Kafka client; use one of {sorted(ALLOWED_COMPRESSION)}")
        definitions[names[role]] = {"partitions": int(partitions), "config": topic_config,
                                    "description": spec.get("description", ""), "role": role}
    return definitions


def ensure_topics(config: StreamplaceConfig, timeout_s: float = 30.0) -> list[str]:
    """Create the missing topics; returns the names created (existing ones are left as they are)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": config.kafka.bootstrap_servers})
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    wanted = topic_definitions(config)
    new = [NewTopic(name, num_partitions=spec["partitions"], replication_factor=1,
                    config=spec["config"])
           for name, spec in wanted.items() if name not in existing]
    created = []
    if new:
        for name, future in admin.create_topics(new, operation_timeout=timeout_s).items():
            future.result()  # raises KafkaException with the broker's reason
            created.append(name)
    return created


def create_topics(config: StreamplaceConfig, names, partitions: int = 2,
                  timeout_s: float = 30.0, topic_config: dict[str, str] | None = None) -> list[str]:
    """Create plain topics ``names`` (duplicates and existing ones skipped) for jobs of one's
    own (examples, benchmarks); returns the names created. The broker's reason is raised.
    ``topic_config``: topic settings for every one of them (e.g.
    ``{"message.timestamp.type": "LogAppendTime"}``)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": config.kafka.bootstrap_servers})
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    # one request per name, never a name twice: the broker refuses a request that repeats one
    new = [NewTopic(n, num_partitions=partitions, replication_factor=1,
                    config=dict(topic_config or {}))
           for n in sorted(set(names)) if n not in existing]
    created = []
    if new:
        for name, future in admin.create_topics(new, operation_timeout=timeout_s).items():
            future.result()
            created.append(name)
    return created
