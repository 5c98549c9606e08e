"""Submitting the streamplace PyFlink jobs to the local cluster with the composed settings."""

from __future__ import annotations

from pathlib import Path

from streamplace.config import StreamplaceConfig
from streamplace.flink_cluster import FlinkCluster
from streamplace.jars import flink_connector_jar

__all__ = ["submit_task_pipeline", "task_pipeline_args"]


def task_pipeline_args(config: StreamplaceConfig, **overrides) -> list[str]:
    import pyflink_jobs.task_pipeline as pipeline
    settings = {
        "bootstrap_servers": config.kafka.bootstrap_servers,
        "connector_jar": str(flink_connector_jar(config)),
        "topic_tasks": config.job.topic_tasks, "topic_results": config.job.topic_results,
        "topic_dead_letter": config.job.topic_dead_letter,
        "checkpoint_interval_ms": config.job.checkpoint_interval_ms,
        "transaction_timeout_ms": config.job.transaction_timeout_ms,
        "executor_capacity": config.job.executor_capacity,
        "executor_timeout_s": config.job.executor_timeout_s,
    }
    settings.update(overrides)
    known = {f for f in pipeline.PipelineSettings.__dataclass_fields__}
    unknown = set(settings) - known
    if unknown:
        raise ValueError(f"unknown task pipeline settings: {sorted(unknown)}")
    args: list[str] = []
    for key, value in settings.items():
        args += ["--" + key.replace("_", "-"), str(value)]
    return args


def submit_task_pipeline(config: StreamplaceConfig, cluster: FlinkCluster, **overrides) -> str:
    """Submit ``pyflink_jobs/task_pipeline.py`` detached; returns the Flink job id."""
    import pyflink_jobs.task_pipeline as pipeline
    return cluster.submit_python_job(Path(pipeline.__file__), task_pipeline_args(config,
                                                                                 **overrides))
