"""Per-node utilisation, as the router and the placement service should see it.

:class:`NodeTelemetry` samples, for ONE node (a Flink TaskManager, not the whole host):

- ``cpu_util``: CPU time of this process (the executor's Python worker) plus any given ``pids``
  (e.g. the TaskManager JVM) over the last interval, divided by the CPUs in this process's
  affinity set, so a pinned TaskManager reads 1.0 when it uses all of its own CPUs;
- ``host_mem_util``: resident memory (RSS) of the same processes over the host's memory, so
  several TaskManagers on one host each report their own share, not the host's total;
- ``gpu_util`` / ``gpu_mem_util``: NVML utilisation and used-memory fraction, averaged over this
  node's GPUs (those in ``CUDA_VISIBLE_DEVICES``, by index or UUID; all when unset). NVML's
  numbers are per device: TaskManagers sharing a GPU all see its whole load.

Without a GPU or NVML library the GPU numbers are 0.0 and ``gpus`` is empty (``nvmlInit``
raises ``NVMLError_LibraryNotFound``, a subclass of ``pynvml.NVMLError``, which is caught).
Samples are cached for ``min_interval_s`` (0.5 s), so calling :meth:`NodeTelemetry.sample` on
every scheduling step costs a dictionary copy. torch is not imported here.

Example::

    >>> telemetry = NodeTelemetry()
    >>> sample = telemetry.sample()
    >>> 0.0 <= sample["cpu_util"] <= 1.0 and 0.0 <= sample["host_mem_util"] <= 1.0
    True
    >>> telemetry.close()
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable

import psutil

from interference.executor.devices import cpu_count

__all__ = ["NodeTelemetry", "visible_gpu_selectors"]

log = logging.getLogger(__name__)


def visible_gpu_selectors(environ=None) -> list[str] | None:
    """The entries of ``CUDA_VISIBLE_DEVICES`` (indices or UUID prefixes), None when unset.

    CUDA stops at the first invalid entry and reads ``-1`` as "no GPU"; so do we.

    Example::

        >>> visible_gpu_selectors({"CUDA_VISIBLE_DEVICES": "1,0"}), visible_gpu_selectors({})
        (['1', '0'], None)
    """
    value = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    selectors = []
    for entry in (e.strip() for e in value.split(",")):
        if not entry or entry.startswith("-"):
            break
        selectors.append(entry)
    return selectors


def _clip(value: float) -> float:
    return min(1.0, max(0.0, float(value)))


class NodeTelemetry:
    """psutil + NVML sampler for one node's processes and GPUs.

    ``pids``: more processes to count with this one (a process that exits is dropped);
    ``min_interval_s``: how long a sample is reused.
    """

    def __init__(self, pids: Iterable[int] | None = None, min_interval_s: float = 0.5) -> None:
        self.min_interval_s = float(min_interval_s)
        self._cpus = cpu_count()
        self._total_memory = psutil.virtual_memory().total
        self._processes: list[psutil.Process] = [psutil.Process()]
        for pid in pids or ():
            try:
                if pid != os.getpid():
                    self._processes.append(psutil.Process(pid))
            except psutil.Error as exc:
                log.warning("telemetry: cannot watch pid %s (%s)", pid, exc)
        for process in self._processes:  # the first cpu_percent() call only starts the clock
            try:
                process.cpu_percent(None)
            except psutil.Error:
                pass
        self._lock = threading.Lock()
        self._last: dict | None = None
        self._last_at = 0.0
        self._nvml = None          # the pynvml module once initialised
        self._handles: list = []   # (index, uuid, handle) of this node's GPUs
        self.nvml_error: str | None = None
        self._init_nvml()

    # ------------------------------------------------------------------ NVML
    def _init_nvml(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            self.nvml_error = f"nvidia-ml-py not installed ({exc})"
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:  # no driver / no GPU: the CPU-only path
            self.nvml_error = f"NVML unavailable: {exc}"
            return
        self._nvml = pynvml
        try:
            devices = []
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                uuid = pynvml.nvmlDeviceGetUUID(handle)
                devices.append((index, uuid.decode() if isinstance(uuid, bytes) else uuid, handle))
            selectors = visible_gpu_selectors()
            if selectors is None:
                self._handles = devices
            else:
                for sel in selectors:
                    if sel.isdigit():
                        match = [d for d in devices if d[0] == int(sel)]
                    else:  # a UUID or a unique prefix of one, with or without "GPU-"
                        match = [d for d in devices if d[1].startswith(sel)
                                 or d[1].startswith("GPU-" + sel)]
                    if len(match) != 1:
                        break  # CUDA ignores everything from the first bad entry on
                    self._handles.append(match[0])
        except pynvml.NVMLError as exc:
            self.nvml_error = f"NVML device query failed: {exc}"
            self._handles = []

    def _gpu_sample(self) -> list[dict]:
        nvml = self._nvml
        out = []
        for index, uuid, handle in self._handles:
            row = {"index": index, "uuid": uuid, "util": 0.0, "mem_util": 0.0,
                   "mem_used_mb": 0.0, "mem_total_mb": 0.0}
            try:
                row["util"] = _clip(nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0)
            except nvml.NVMLError:  # e.g. a MIG instance has no utilisation counter
                pass
            try:
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                row["mem_used_mb"] = memory.used / 2**20
                row["mem_total_mb"] = memory.total / 2**20
                row["mem_util"] = _clip(memory.used / memory.total) if memory.total else 0.0
            except nvml.NVMLError:
                pass
            out.append(row)
        return out

    # ------------------------------------------------------------------ sampling
    def sample(self) -> dict:
        """``{"cpu_util", "host_mem_util", "rss_mb", "gpu_util", "gpu_mem_util", "gpus",
        "sampled_at"}``; utilisations in [0, 1]; reused for ``min_interval_s``."""
        now = time.monotonic()
        with self._lock:
            if self._last is not None and now - self._last_at < self.min_interval_s:
                return dict(self._last)
            cpu_percent, rss = 0.0, 0
            alive = []
            for process in self._processes:
                try:
                    with process.oneshot():
                        cpu_percent += process.cpu_percent(None)
                        rss += process.memory_info().rss
                    alive.append(process)
                except psutil.Error:  # exited: stop watching it
                    pass
            self._processes = alive or [psutil.Process()]
            gpus = self._gpu_sample()
            self._last = {
                "cpu_util": _clip(cpu_percent / (100.0 * self._cpus)),
                "host_mem_util": _clip(rss / self._total_memory),
                "rss_mb": rss / 2**20,
                "gpu_util": sum(g["util"] for g in gpus) / len(gpus) if gpus else 0.0,
                "gpu_mem_util": sum(g["mem_util"] for g in gpus) / len(gpus) if gpus else 0.0,
                "gpus": gpus,
                "sampled_at": time.time(),
            }
            self._last_at = now
            return dict(self._last)

    def close(self) -> None:
        """Release NVML (reference-counted by the library, so other users keep theirs)."""
        with self._lock:
            if self._nvml is not None:
                try:
                    self._nvml.nvmlShutdown()
                except self._nvml.NVMLError:
                    pass
                self._nvml, self._handles = None, []

    def __enter__(self) -> NodeTelemetry:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
