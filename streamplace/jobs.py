"""Submitting the streamplace PyFlink jobs to the local cluster with the composed settings."""

from __future__ import annotations

from pathlib import Path

from streamplace.config import StreamplaceConfig
from streamplace.flink_cluster import FlinkCluster
from streamplace.jars import flink_connector_jar

__all__ = ["submit_task_pipeline", "task_pipeline_args"]


def _cluster_spec_arg(name_or_path: str) -> str:
    # The job's client may run elsewhere than this shell's folder: a relative spec path that
    # exists here travels as an absolute one; shipped names travel as they are.
    path = Path(name_or_path)
    if path.suffix and not path.is_absolute() and path.is_file():
        return str(path.resolve())
    return name_or_path


def task_pipeline_args(config: StreamplaceConfig, **overrides) -> list[str]:
    """The task pipeline's command-line arguments: the config's settings, then ``overrides``.

    The cluster spec travels too, so a hooked job's router builds its nodes (and their link
    capacities: the shaped bandwidths of ``isolation: host``) from the spec the cluster runs.

    Example::

        >>> from streamplace.config import StreamplaceConfig
        >>> args = task_pipeline_args(StreamplaceConfig(), cluster_spec="hosts")
        >>> args[args.index("--cluster-spec") + 1]
        'hosts'
    """
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
        "cluster_spec": _cluster_spec_arg(config.flink.cluster_spec),
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
