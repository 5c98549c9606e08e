"""The IAWP node executors: real stages on this node's CPU cores and GPUs, under a node
scheduler, with measured co-execution slowdowns and psutil/NVML telemetry.

- :class:`NodeExecutor` / :class:`ExecutorSettings`: the built-in video-analytics apps
  (``submit`` -> Future, ``await run_task``), ``snapshot()`` for the router's feedback,
  ``learned_slowdowns()``.
- :class:`OperatorExecutor` / :class:`OperatorExecutorSettings`: the user's own
  :class:`~workload.operators.StagedOperator`, its stages batched across records (Triton-style
  dynamic batching, batch sizes chosen from measured latency) and placed by the same scheduler.
- :func:`discover_units`: the node's computing units (CPU worker threads, CUDA devices).
- :class:`NodeTelemetry`: per-node CPU/RSS (psutil) and GPU (NVML) utilisation.

Modules: ``settings`` (both settings classes), ``dispatch`` (admission, the dispatcher thread,
scheduler with FCFS fallback), ``lanes`` (CPU worker threads, CUDA stream lanes, timed calls),
``corun`` (co-run tracking, alone baselines, learned slowdowns), ``results`` (outcomes,
digests, answers), ``clips`` (a task's clip: synthetic, or decoded from its payload),
``executor`` (NodeExecutor), ``operator_executor`` (OperatorExecutor),
``operator_records`` (a record in flight), ``batching`` (per-stage queues, formed batches),
``batch_sizer`` (latency-driven batch sizes), ``stage_costs`` (the schedulers' measured
estimates for user stages), ``cancel`` (cancellation that reaches running stages, the calls a
timeout cancels), ``memory`` (the per-task memory budget, the optional ``RLIMIT_AS``),
``devices`` and ``telemetry``.

Example::

    >>> from interference.executor import ExecutorSettings, NodeExecutor
    >>> with NodeExecutor(ExecutorSettings(scheduler="fcfs", use_gpu="never")) as node:
    ...     node.submit("t1", "face_recognition", 4096).result().status
    'OK'
"""

from interference.executor.devices import discover_units, gpu_model_key
from interference.executor.direct import DirectExecutor, operator_executor_for
from interference.executor.executor import NodeExecutor
from interference.executor.operator_executor import OperatorExecutor
from interference.executor.results import RecordOutcome, StageRecord, StageRun, TaskOutcome
from interference.executor.settings import ExecutorSettings, OperatorExecutorSettings
from interference.executor.telemetry import NodeTelemetry

__all__ = ["DirectExecutor", "operator_executor_for", "NodeExecutor", "ExecutorSettings",
           "TaskOutcome", "StageRecord", "discover_units",
           "NodeTelemetry", "gpu_model_key", "OperatorExecutor", "OperatorExecutorSettings",
           "RecordOutcome", "StageRun"]
