"""The computing units of this node: one per CPU worker thread, one per visible GPU.

:func:`discover_units` turns the executor's settings into the :class:`~workload.model.ComputingUnit`
list a node scheduler sees. CPU units are worker threads (``cpu:0`` ... ``cpu:N-1``); by default
one per CPU this process may run on (``os.sched_getaffinity``, so a TaskManager pinned with
``taskset`` or a container's cpuset gets what it really has, not the host's count). GPU units
(``gpu:0`` ...) are the CUDA devices torch sees (``CUDA_VISIBLE_DEVICES`` applies), each with
room for ``gpu_streams_per_device`` co-running stages.

A GPU unit's ``model`` is a calibration key of ``workload/calibration.yaml`` (``k80``, ``p100``,
``v100``, ``p4``, ``t4``, ``a10``): the schedulers look estimates up by it. :func:`gpu_model_key`
maps the CUDA device name to the closest key; a GPU the calibration does not know (A100, H100,
H200, ...) maps to :data:`UNKNOWN_GPU_KEY`, its fastest model, and says so in the log.

Example::

    >>> from interference.executor import ExecutorSettings
    >>> units = discover_units(ExecutorSettings(cpu_workers=2, use_gpu="never"))
    >>> [(u.unit_id, u.kind) for u in units]
    [('cpu:0', 'cpu'), ('cpu:1', 'cpu')]
"""

from __future__ import annotations

import logging
import os
import re

from workload.model import ComputingUnit

__all__ = ["discover_units", "gpu_model_key", "cpu_count", "cuda_available", "UNKNOWN_GPU_KEY"]

log = logging.getLogger(__name__)

#: Calibration key used for GPUs the calibration has no entry for (its fastest model).
UNKNOWN_GPU_KEY = "a10"

# Device-name patterns -> calibration key. Word boundaries keep "A10" from matching "A100" and
# "P4" from matching "P40".
_GPU_PATTERNS = (
    (re.compile(r"\bK80\b", re.I), "k80"),
    (re.compile(r"\bP100\b", re.I), "p100"),
    (re.compile(r"\bV100", re.I), "v100"),
    (re.compile(r"\bP4\b", re.I), "p4"),
    (re.compile(r"\bT4\b", re.I), "t4"),
    (re.compile(r"\bA10G?\b", re.I), "a10"),
)


def gpu_model_key(device_name: str) -> str:
    """The calibration key for a CUDA device name.

    Example::

        >>> gpu_model_key("Tesla V100-SXM2-16GB"), gpu_model_key("NVIDIA A100-SXM4-80GB")
        ('v100', 'a10')
    """
    return _known_key(device_name) or UNKNOWN_GPU_KEY


def _known_key(device_name: str) -> str | None:
    for pattern, key in _GPU_PATTERNS:
        if pattern.search(device_name):
            return key
    return None


def cpu_count() -> int:
    """CPUs this process may run on (its affinity), falling back to ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def cuda_available() -> bool:
    """Whether torch sees a usable CUDA device (torch is imported here, not at module import)."""
    try:
        import torch
        return bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0
    except Exception:  # noqa: BLE001 - a broken driver is "no GPU", not a crash
        return False


def discover_units(settings) -> list[ComputingUnit]:
    """The node's computing units for ``settings`` (an :class:`ExecutorSettings`).

    CPU: ``settings.cpu_workers`` threads, or one per CPU in the affinity set when it is 0.
    GPU: every CUDA device torch sees when ``use_gpu`` is ``"auto"`` or ``"always"``;
    ``"always"`` without CUDA raises ``RuntimeError``; ``"never"`` gives CPU units only.
    """
    if settings.use_gpu not in ("auto", "never", "always"):
        raise ValueError(f"use_gpu must be 'auto', 'never' or 'always', got {settings.use_gpu!r}")
    workers = settings.cpu_workers or cpu_count()
    if workers < 1:
        raise ValueError(f"cpu_workers must be at least 1 (or 0 for all), got {workers}")
    units = [ComputingUnit(f"cpu:{i}", "cpu") for i in range(workers)]
    if settings.use_gpu == "never":
        return units
    if not cuda_available():
        if settings.use_gpu == "always":
            raise RuntimeError(
                "use_gpu='always' but torch sees no CUDA device (torch.cuda.is_available() is "
                "False): check the driver, CUDA_VISIBLE_DEVICES and that torch is a CUDA build, "
                "or use use_gpu='auto' to run on CPU cores only")
        return units
    if settings.gpu_streams_per_device < 1:
        raise ValueError("gpu_streams_per_device must be at least 1")
    import torch
    for j in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(j)
        key = gpu_model_key(props.name)
        if _known_key(props.name) is None:
            log.info("GPU %d %r is not in calibration.yaml: estimated as %r", j, props.name, key)
        units.append(ComputingUnit(f"gpu:{j}", "gpu", model=key,
                                   capacity=settings.gpu_streams_per_device,
                                   memory_mb=props.total_memory / 2**20))
    return units
