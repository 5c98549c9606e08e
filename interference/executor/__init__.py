"""The IAWP node executor: real stages on this node's CPU cores and GPUs, under a node
scheduler, with measured co-execution slowdowns and psutil/NVML telemetry.

- :class:`NodeExecutor` / :class:`ExecutorSettings`: run tasks (``submit`` -> Future,
  ``await run_task``), ``snapshot()`` for the router's feedback, ``learned_slowdowns()``.
- :func:`discover_units`: the node's computing units (CPU worker threads, CUDA devices).
- :class:`NodeTelemetry`: per-node CPU/RSS (psutil) and GPU (NVML) utilisation.

Example::

    >>> from interference.executor import ExecutorSettings, NodeExecutor
    >>> with NodeExecutor(ExecutorSettings(scheduler="fcfs", use_gpu="never")) as node:
    ...     node.submit("t1", "face_recognition", 4096).result().status
    'OK'
"""

from interference.executor.devices import discover_units, gpu_model_key
from interference.executor.executor import (ExecutorSettings, NodeExecutor, StageRecord,
                                            TaskOutcome)
from interference.executor.telemetry import NodeTelemetry

__all__ = ["NodeExecutor", "ExecutorSettings", "TaskOutcome", "StageRecord", "discover_units",
           "NodeTelemetry", "gpu_model_key"]
