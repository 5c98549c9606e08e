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

Inside a host with a CPU quota (an emulated host of ``streamplace.hosts``, or a container) the
host's own accounting replaces the process view (:mod:`interference.executor.host_stats`):

- ``cpu_util``: the cgroup's CPU seconds over ``quota x elapsed`` (1.0 = the host's whole share);
- ``host_mem_util``: the memory cgroup's use over its limit (over the machine's memory when it
  has none);
- ``uplink_bytes_per_s`` / ``downlink_bytes_per_s``: bytes the namespace's interfaces sent /
  received over the elapsed time (these two keys appear only in this mode).

``source`` says which view ``cpu_util`` came from ("cgroup" or "process"); a number the host
view cannot read keeps the process view's value for that sample.

Power (:mod:`interference.executor.power`; issue 17): each sample also carries

- ``gpus[i]["power_w"]``: the GPU's ``nvmlDeviceGetPowerUsage`` in W, None when the reading was
  refused (NVMLError, not finite, outside [0, 5000] W); refusals are counted in
  :attr:`NodeTelemetry.power_ignored`, the last reason in :attr:`NodeTelemetry.power_error`;
- ``cpu_power_w``: an ESTIMATE of this node's CPU power, ``cores x (idle_w + (busy_w - idle_w)
  x cpu_util)`` with the calibration's ``power: cpu_core`` watts (cores: the cgroup's quota in
  a host with one, else this process's CPUs); None without a valid calibration;
- ``power_w`` / ``power_source``: the node's power, valid GPU readings + the CPU estimate, and
  "nvml+cpu-estimate" / "cpu-estimate" / "" (-1 W: not reported);
- ``unit_power_w``: watts per unit for energy per task: ``gpu:<i>`` (the i-th visible GPU, as
  the executor names its units) its reading, else its calibration model's ``busy_w``; ``cpu``
  one busy core's ``busy_w``.

GPU utilisation and memory readings fail closed: a reading that is not a real number, not
finite, negative, above 100 % / above the GPU's memory, or that raised anything but
``NVMLError`` (or, for memory, raised at all) reads as a busy / full GPU (1.0), never as an
empty one (IAWP would place work on it); each is counted in
:attr:`NodeTelemetry.readings_refused` per ``"util:<reason>"`` / ``"memory:<reason>"``, the
last in :attr:`NodeTelemetry.reading_error`. An ``NVMLError`` from the utilisation counter
keeps 0.0 as before (a MIG instance has none; IAWP reads only memory) and is counted too.
Any exception from the power reading is a refused power reading.

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
import math
import numbers
import os
import threading
import time
from collections import Counter
from collections.abc import Iterable

import psutil

from interference.executor import power
from interference.executor.devices import cpu_count, gpu_model_key
from interference.executor.host_stats import HostCounters, HostStats

__all__ = ["NodeTelemetry", "feedback_numbers", "visible_gpu_selectors", "host_utilisation",
           "read_gpu_util", "read_gpu_memory",
           "MAX_LINK_BYTES_PER_S", "SOURCE_CGROUP", "SOURCE_PROCESS", "FEEDBACK_KEYS"]

log = logging.getLogger(__name__)

#: Highest link rate believed (400 Gbit/s, the fastest NIC one host has): a larger delta is a
#: counter glitch, and the feedback rule clamps to the node's own link capacity anyway.
MAX_LINK_BYTES_PER_S = 400e9 / 8
SOURCE_CGROUP, SOURCE_PROCESS = "cgroup", "process"
#: ``cpu_power`` default of :class:`NodeTelemetry`: the calibration's ``power: cpu_core``.
_FROM_CALIBRATION = "calibration"


def host_utilisation(earlier: HostCounters, later: HostCounters,
                     total_memory_bytes: float) -> dict:
    """The host's numbers between two :class:`HostCounters` of the same host: ``cpu_util``
    (only with a CPU quota), ``host_mem_util`` (use over the limit, else over
    ``total_memory_bytes``), ``uplink_bytes_per_s`` / ``downlink_bytes_per_s``; each key only
    when it could be measured. Utilisations are clamped to [0, 1], rates to
    [0, :data:`MAX_LINK_BYTES_PER_S`]; a counter that went backwards (reset) reads 0.

    Example::

        >>> from interference.executor.host_stats import NetCounters
        >>> a = HostCounters(10.0, 4.0, 0.5, 1 << 20, 4 << 20, NetCounters(0, 0, ("eth0",)))
        >>> b = HostCounters(12.0, 4.5, 0.5, 2 << 20, 4 << 20, NetCounters(300, 1000, ("eth0",)))
        >>> n = host_utilisation(a, b, 8 << 20)
        >>> n["cpu_util"], n["host_mem_util"], n["uplink_bytes_per_s"], n["downlink_bytes_per_s"]
        (0.5, 0.5, 500.0, 150.0)
    """
    out: dict = {}
    elapsed = later.time_s - earlier.time_s
    timed = math.isfinite(elapsed) and elapsed > 0
    if timed and later.cpu_quota and earlier.cpu_seconds is not None \
            and later.cpu_seconds is not None:
        out["cpu_util"] = _clip((later.cpu_seconds - earlier.cpu_seconds)
                                / (later.cpu_quota * elapsed))
    if later.memory_bytes is not None:
        limit = later.memory_limit_bytes or total_memory_bytes
        if limit and limit > 0:
            out["host_mem_util"] = _clip(later.memory_bytes / limit)
    if timed and earlier.net is not None and later.net is not None:
        for key, before, after in (("uplink_bytes_per_s", earlier.net.tx_bytes,
                                    later.net.tx_bytes),
                                   ("downlink_bytes_per_s", earlier.net.rx_bytes,
                                    later.net.rx_bytes)):
            rate = (after - before) / elapsed
            out[key] = min(MAX_LINK_BYTES_PER_S, max(0.0, rate)) if math.isfinite(rate) else 0.0
    return out


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


def _bad_reading(value, high: float) -> str | None:
    """Why an NVML number is not a reading in [0, ``high``], or None when it is one."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return "non-numeric"
    try:
        number = float(value)
    except OverflowError:  # an int past a float's range
        return "non-finite"
    except (TypeError, ValueError):
        return "non-numeric"
    if not math.isfinite(number):
        return "non-finite"
    if number < 0:
        return "negative"
    return "implausible" if number > high else None


def read_gpu_util(nvml, handle) -> tuple[float, str | None]:
    """``(utilisation in [0, 1], None)``, or ``(value, why)`` for a refused reading: 0.0 for
    an ``NVMLError`` (a MIG instance has no utilisation counter), else 1.0 (fail closed: a
    broken reading reads busy, never idle)."""
    try:
        percent = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
    except nvml.NVMLError as exc:
        return 0.0, f"NVMLError: {exc}"
    except Exception as exc:  # noqa: BLE001 - a broken binding: busy, not idle
        return 1.0, f"{type(exc).__name__}: {exc}"
    why = _bad_reading(percent, 100.0)
    return (1.0, why) if why is not None else (float(percent) / 100.0, None)


def read_gpu_memory(nvml, handle) -> tuple[dict, str | None]:
    """``({"mem_util", "mem_used_mb", "mem_total_mb"}, None)``, or for a refused reading
    (anything raised, a non-number, total <= 0, used outside [0, total]) ``mem_util`` 1.0 and
    used = total (fail closed: a full GPU gets no work) with why."""
    try:
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        used, total = memory.used, memory.total
    except Exception as exc:  # noqa: BLE001 - NVMLError (a lost GPU) or a broken binding
        return {"mem_util": 1.0}, f"{type(exc).__name__}: {exc}"
    why = _bad_reading(total, math.inf) or ("zero-total" if total == 0 else None)
    if why is not None:
        return {"mem_util": 1.0}, why
    total_mb = float(total) / 2**20
    why = _bad_reading(used, float(total))
    if why is not None:
        return {"mem_util": 1.0, "mem_used_mb": total_mb, "mem_total_mb": total_mb}, why
    return {"mem_util": float(used) / float(total), "mem_used_mb": float(used) / 2**20,
            "mem_total_mb": total_mb}, None


def _clip(value: float) -> float:
    value = float(value)
    return min(1.0, max(0.0, value)) if math.isfinite(value) else 0.0


class NodeTelemetry:
    """psutil + NVML sampler for one node's processes and GPUs.

    ``pids``: more processes to count with this one (a process that exits is dropped);
    ``min_interval_s``: how long a sample is reused; ``host_stats``: the reader of this
    process's host (default :class:`HostStats` of ``/``; tests give one over a fake tree);
    ``cpu_power``: the per-core :class:`~simulator.energy.PowerSpec` of the CPU estimate
    (default: the calibration's ``power: cpu_core``; None: no CPU estimate).
    """

    def __init__(self, pids: Iterable[int] | None = None, min_interval_s: float = 0.5,
                 host_stats: HostStats | None = None, cpu_power=_FROM_CALIBRATION) -> None:
        self.min_interval_s = float(min_interval_s)
        if not math.isfinite(self.min_interval_s) or self.min_interval_s < 0:
            raise ValueError(f"min_interval_s must be a finite number >= 0, got {min_interval_s!r}")
        self.host_stats = host_stats or HostStats()
        # Baseline of the host's counters: the first sample's rates cover construction -> then.
        self._host_last = self.host_stats.sample()
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
        self._gpu_models: dict[int, str] = {}  # NVML index -> calibration model key
        self.nvml_error: str | None = None
        self.cpu_power = power.cpu_power_spec() if cpu_power == _FROM_CALIBRATION \
            else cpu_power
        self.power_ignored = 0
        """GPU power readings refused (NVMLError, not finite, out of range) since start."""
        self.power_error: str | None = None
        """Why the last refused GPU power reading was refused."""
        self.readings_refused: Counter[str] = Counter()
        """GPU utilisation / memory readings refused (read as busy / full), per
        ``"util:<reason>"`` / ``"memory:<reason>"``, since start."""
        self.reading_error: str | None = None
        """Why the last refused utilisation / memory reading was refused."""
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
                self._name_models(devices)
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
                self._name_models(self._handles)
        except pynvml.NVMLError as exc:
            self.nvml_error = f"NVML device query failed: {exc}"
            self._handles = []

    def _name_models(self, devices) -> None:
        """Calibration model key per GPU (its busy watts stand in for a refused reading)."""
        for index, _, handle in devices:
            try:
                name = self._nvml.nvmlDeviceGetName(handle)
                name = name.decode() if isinstance(name, bytes) else str(name)
            except self._nvml.NVMLError:
                name = ""
            self._gpu_models[index] = gpu_model_key(name)

    def _gpu_sample(self) -> list[dict]:
        nvml = self._nvml
        out = []
        for index, uuid, handle in self._handles:
            row = {"index": index, "uuid": uuid, "util": 0.0, "mem_util": 0.0,
                   "mem_used_mb": 0.0, "mem_total_mb": 0.0, "power_w": None}
            try:
                row["power_w"], why = power.read_gpu_power_w(nvml, handle)
            except Exception as exc:  # noqa: BLE001 - a broken binding must not stop sampling
                why = f"{type(exc).__name__}: {exc}"
            if why is not None:  # refused: counted, never published
                self.power_ignored += 1
                self.power_error = f"GPU {index}: {why}"
            row["util"], why = read_gpu_util(nvml, handle)
            if why is not None:
                self._refuse(index, "util", why)
            memory, why = read_gpu_memory(nvml, handle)
            if why is not None:
                self._refuse(index, "memory", why)
            row.update(memory)
            out.append(row)
        return out

    def _refuse(self, index: int, what: str, why: str) -> None:
        self.readings_refused[f"{what}:{why.split(':')[0]}"] += 1
        self.reading_error = f"GPU {index} {what}: {why}"

    # ------------------------------------------------------------------ sampling
    def sample(self) -> dict:
        """``{"cpu_util", "host_mem_util", "rss_mb", "gpu_util", "gpu_mem_util", "gpus",
        "sampled_at", "source", "cpu_power_w", "power_w", "power_source", "unit_power_w"}``
        (plus ``uplink_bytes_per_s`` / ``downlink_bytes_per_s`` in a host with a CPU quota);
        utilisations in [0, 1]; reused for ``min_interval_s``."""
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
                "source": SOURCE_PROCESS,
            }
            self._last.update(self._host_sample())
            self._last.update(self._power_sample(self._last))
            self._last_at = now
            return dict(self._last)

    def _host_sample(self) -> dict:
        # Only a host with a CPU quota is a host of its own: without one this process shares
        # the machine (or its root group) and the process view is the right one.
        later = self.host_stats.sample()
        earlier, self._host_last = self._host_last, later
        if not later.cpu_quota:
            return {}
        numbers = host_utilisation(earlier, later, self._total_memory)
        if "cpu_util" in numbers:
            numbers["source"] = SOURCE_CGROUP
        return numbers

    def _power_sample(self, sample: dict) -> dict:
        """The power keys of a sample (see the module doc), from its GPU rows and CPU util."""
        cpu_w = None
        if self.cpu_power is not None:
            quota = self._host_last.cpu_quota if sample.get("source") == SOURCE_CGROUP \
                else None
            cpu_w = power.cpu_power_estimate_w(sample["cpu_util"], quota or self._cpus,
                                               self.cpu_power)
        gpus = sample["gpus"]
        power_w, source = power.node_power((g["power_w"] for g in gpus), cpu_w)
        units: dict[str, float] = {}
        if self.cpu_power is not None:
            units["cpu"] = self.cpu_power.busy_w
        for position, gpu in enumerate(gpus):  # gpu:<i> is the i-th visible device
            watts = gpu["power_w"]
            if watts is None:
                watts = power.gpu_busy_w(self._gpu_models.get(gpu["index"], ""))
            if watts is not None:
                units[f"gpu:{position}"] = watts
        return {"cpu_power_w": cpu_w, "power_w": power_w, "power_source": source,
                "unit_power_w": units}

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


#: the sample's keys a node's feedback carries (link rates only where measured: see sample())
FEEDBACK_KEYS = ("cpu_util", "host_mem_util", "gpu_util", "gpu_mem_util",
                 "uplink_bytes_per_s", "downlink_bytes_per_s", "power_w", "power_source",
                 "unit_power_w")


def feedback_numbers(sample: dict) -> dict:
    """What of a :meth:`NodeTelemetry.sample` goes into the node's feedback snapshot: the four
    utilisations, the interface byte rates when the host measured them (an emulated host
    or a container; elsewhere the feedback publisher counts the records' own bytes), and the
    power keys (node power, its source, watts per unit for energy per task).

    Example::

        >>> numbers = feedback_numbers({"cpu_util": 0.2, "sampled_at": 5.0, "power_w": 30.0,
        ...                             "power_source": "cpu-estimate",
        ...                             "unit_power_w": {"cpu": 14.0}})
        >>> sorted(numbers), numbers["unit_power_w"]
        (['cpu_util', 'power_source', 'power_w', 'unit_power_w'], {'cpu': 14.0})
    """
    return {k: (dict(sample[k]) if k == "unit_power_w" else sample[k])
            for k in FEEDBACK_KEYS if k in sample}
