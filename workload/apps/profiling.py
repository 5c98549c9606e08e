"""Per-stage profiles of the operators: wall time, peak memory and, on CUDA, GPU utilisation.

These are the measured numbers behind a stage's row of the STDM (the paper's SubTask
Description Matrix) and the simulator's calibration. A profile runs the stage's upstream stages
once (untimed) to get its real inputs, runs the stage once to warm up (lazy weights, kernel
selection), then ``repeats`` timed runs, then untimed runs under memory tracing.

- Wall time: ``time.perf_counter`` around the call, with ``torch.cuda.synchronize`` on CUDA.
- Peak memory on CPU: torch's CPU allocator does not keep statistics and tracemalloc cannot see
  it, so tensor memory comes from the allocation events of ``torch.profiler``
  (``profile_memory=True``): the highest running total of bytes allocated minus freed during
  the call. Python objects (the CPU-only stages build lists) come from tracemalloc. The two
  peaks are reported separately and their sum as ``peak_memory_bytes`` (an upper bound: they
  may not coincide). On CUDA: ``torch.cuda.max_memory_allocated`` above the level at the start.
- GPU utilisation (CUDA only): NVML (``pynvml`` from the nvidia-ml-py package, imported only
  here and only on CUDA) sampled every ``sample_interval_s`` by a thread while the stage runs
  back to back for ``util_window_s``. NVML reports the share of its last sample period (1/6 s
  to 1 s) in which a kernel ran, so a window shorter than that reads low.

Command line (writes the table as JSON; the CPU run of this repository is
``workload/apps/measured_cpu_profile.json``)::

    python -m workload.apps.profiling --out profile.json [--input-sizes 36864 147456]
        [--devices cpu cuda] [--repeats 5] [--threads 1]

Example::

    >>> p = profile_stage("frame_difference", 4096, repeats=2)
    >>> p.device, p.wall_ms_median > 0, p.gpu_util_mean is None
    ('cpu', True, True)
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
import shlex
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from workload.catalog import APPLICATIONS, STAGE_TYPES

from .frames import DEFAULT_INPUT_SIZE, frame_shape
from .registry import run_stage, stage_order, task_frames

__all__ = ["StageProfile", "profile_stage", "profile_all", "machine_description", "main"]


@dataclass
class StageProfile:
    """One stage type measured at one input size on one device.

    wall_ms: every timed run; wall_ms_median: their median. peak_tensor_bytes: tensor memory
    (CPU: profiler allocation events; CUDA: max_memory_allocated). peak_python_bytes:
    tracemalloc peak (CPU runs only). peak_memory_bytes: their sum. gpu_util_mean/max and
    gpu_memory_util_mean: NVML percentages while the stage ran (None on CPU, or when NVML is
    unavailable); gpu_util_samples: how many samples they average.
    """

    stage_type: str
    app_id: str
    device: str
    gpu_capable: bool
    input_size: int
    frame_shape: tuple[int, int, int]
    repeats: int
    wall_ms_median: float
    wall_ms: list[float]
    peak_memory_bytes: int | None
    peak_tensor_bytes: int | None
    peak_python_bytes: int | None
    gpu_util_mean: float | None = None
    gpu_util_max: float | None = None
    gpu_memory_util_mean: float | None = None
    gpu_util_samples: int | None = None
    torch_threads: int = 1

    def as_row(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists, times rounded to microseconds)."""
        row = dataclasses.asdict(self)
        row["frame_shape"] = list(self.frame_shape)
        row["wall_ms_median"] = round(self.wall_ms_median, 3)
        row["wall_ms"] = [round(x, 3) for x in self.wall_ms]
        return row


def _app_for(stage_type: str, app_id: str | None) -> str:
    if app_id is not None:
        APPLICATIONS[app_id].stage(stage_type)  # raises KeyError if absent
        return app_id
    for aid, app in APPLICATIONS.items():
        if any(s.name == stage_type for s in app.stages):
            return aid
    raise KeyError(f"unknown stage type {stage_type!r}; known: {list(STAGE_TYPES)}")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _tensor_peak_cpu(fn) -> int | None:
    """Peak bytes of CPU tensor memory held during ``fn()`` beyond what was held before."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    try:  # the raw allocation events; the public event list folds them into operators
        events = [(e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                  if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    except AttributeError:
        return None
    total = peak = 0
    for _, nbytes in sorted(events):
        total += nbytes
        peak = max(peak, total)
    return int(peak)


class _NvmlSampler:
    """Samples NVML utilisation of one GPU on a background thread."""

    def __init__(self, device: torch.device, interval_s: float):
        import pynvml  # nvidia-ml-py; only ever imported for CUDA runs
        self._nvml = pynvml
        pynvml.nvmlInit()
        self._handle = self._handle_for(device)
        self._interval = interval_s
        self._stop = threading.Event()
        self.gpu: list[float] = []
        self.memory: list[float] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _handle_for(self, device: torch.device):
        index = device.index if device.index is not None else torch.cuda.current_device()
        try:  # torch's index counts only CUDA_VISIBLE_DEVICES; NVML sees every GPU: match UUIDs
            uuid = str(torch.cuda.get_device_properties(index).uuid)
            return self._nvml.nvmlDeviceGetHandleByUUID(
                uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        except Exception:
            return self._nvml.nvmlDeviceGetHandleByIndex(index)

    def _run(self) -> None:
        while not self._stop.is_set():
            rates = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
            self.gpu.append(float(rates.gpu))
            self.memory.append(float(rates.memory))
            self._stop.wait(self._interval)

    def __enter__(self) -> "_NvmlSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass


def profile_stage(stage_type: str, input_size: int = DEFAULT_INPUT_SIZE, device: str = "cpu",
                  repeats: int = 3, seed: int = 0, *, app_id: str | None = None,
                  measure_memory: bool = True, util_window_s: float = 0.5,
                  sample_interval_s: float = 0.01) -> StageProfile:
    """Profile one stage type at ``input_size`` on ``device`` (see the module docstring).

    The stage's inputs come from its first application in the catalog (or ``app_id``).

    Example::

        >>> p = profile_stage("gmm_background", 4096, repeats=2)
        >>> len(p.wall_ms), p.peak_tensor_bytes > 0
        (2, True)
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    app_id = _app_for(stage_type, app_id)
    app = APPLICATIONS[app_id]
    dev = torch.device(device)
    frames = task_frames(app_id, input_size, seed, dev)
    outputs: dict[str, Any] = {}
    for name in stage_order(app):  # upstream stages, untimed
        if name == stage_type:
            break
        outputs[name] = run_stage(name, frames, {d: outputs[d] for d in app.stage(name).deps})
    inputs = {d: outputs[d] for d in app.stage(stage_type).deps}

    def call():
        return run_stage(stage_type, frames, inputs)

    call()  # warm-up
    _sync(dev)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        _sync(dev)
        times.append((time.perf_counter() - start) * 1e3)

    tensor_peak = python_peak = None
    if measure_memory:
        if dev.type == "cuda":
            _sync(dev)
            torch.cuda.reset_peak_memory_stats(dev)
            base = torch.cuda.memory_allocated(dev)
            call()
            _sync(dev)
            tensor_peak = int(torch.cuda.max_memory_allocated(dev) - base)
        else:
            tensor_peak = _tensor_peak_cpu(call)
            # A separate run: under the profiler, tracemalloc would count the profiler's own
            # Python objects.
            tracemalloc.start()
            try:
                call()
                python_peak = int(tracemalloc.get_traced_memory()[1])
            finally:
                tracemalloc.stop()
    peak = None if tensor_peak is None else tensor_peak + (python_peak or 0)

    util = dict(gpu_util_mean=None, gpu_util_max=None, gpu_memory_util_mean=None,
                gpu_util_samples=None)
    if dev.type == "cuda" and util_window_s > 0:
        try:
            sampler = _NvmlSampler(dev, sample_interval_s)
        except Exception as exc:  # no NVML library or no permission: leave the fields empty
            print(f"NVML unavailable ({type(exc).__name__}: {exc}); GPU utilisation not "
                  "sampled", file=sys.stderr)
        else:
            with sampler:
                deadline = time.perf_counter() + util_window_s
                while time.perf_counter() < deadline:
                    call()
                _sync(dev)
            if sampler.gpu:
                util = dict(gpu_util_mean=statistics.fmean(sampler.gpu),
                            gpu_util_max=max(sampler.gpu),
                            gpu_memory_util_mean=statistics.fmean(sampler.memory),
                            gpu_util_samples=len(sampler.gpu))

    return StageProfile(stage_type=stage_type, app_id=app_id, device=str(dev),
                        gpu_capable=app.stage(stage_type).gpu_capable, input_size=int(input_size),
                        frame_shape=frame_shape(input_size), repeats=repeats,
                        wall_ms_median=statistics.median(times), wall_ms=times,
                        peak_memory_bytes=peak, peak_tensor_bytes=tensor_peak,
                        peak_python_bytes=python_peak, torch_threads=torch.get_num_threads(),
                        **util)


def profile_all(input_sizes=(DEFAULT_INPUT_SIZE,), devices: list[str] | None = None,
                repeats: int = 3, seed: int = 0, cpu_only_on_gpu: bool = False,
                stage_types=STAGE_TYPES, **options) -> list[StageProfile]:
    """Profile every stage type (or those of ``stage_types``) at every input size on every
    device (default: the CPU, plus ``cuda`` when available). CPU-only stages are skipped on
    GPUs unless ``cpu_only_on_gpu`` (they would move their inputs to the CPU and measure that).

    Example::

        >>> rows = profile_all([4096], devices=["cpu"], repeats=1, measure_memory=False)
        >>> len(rows) == len(STAGE_TYPES)
        True
    """
    if devices is None:
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    rows = []
    for device in devices:
        for size in input_sizes:
            for stage_type in stage_types:
                app_id = _app_for(stage_type, None)
                if (torch.device(device).type != "cpu" and not cpu_only_on_gpu
                        and not APPLICATIONS[app_id].stage(stage_type).gpu_capable):
                    continue
                rows.append(profile_stage(stage_type, size, device, repeats, seed, **options))
    return rows


def machine_description() -> dict[str, Any]:
    """Where a profile was measured: CPU, core count, torch and its threads, GPU if any."""
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os
    desc = {"cpu": cpu, "logical_cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        desc["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return desc


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m workload.apps.profiling``: write the profile table as JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m workload.apps.profiling",
        description="Profile every stage operator (wall time, peak memory, GPU utilisation) "
                    "and write the table as JSON.")
    parser.add_argument("--out", required=True, type=Path, help="JSON file to write")
    parser.add_argument("--input-sizes", type=int, nargs="+", default=[DEFAULT_INPUT_SIZE],
                        help="task sizes in pixels (default: %(default)s)")
    parser.add_argument("--devices", nargs="+", default=None,
                        help="devices to profile (default: cpu, plus cuda when available)")
    parser.add_argument("--stages", nargs="+", default=list(STAGE_TYPES), choices=STAGE_TYPES,
                        metavar="STAGE", help="stage types to profile (default: all)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads; 1 = one CPU core, the paper's CPU unit")
    parser.add_argument("--util-window", type=float, default=0.5,
                        help="seconds each stage runs back to back while NVML is sampled")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    argv_used = sys.argv[1:] if argv is None else argv
    rows = profile_all(args.input_sizes, args.devices, args.repeats, args.seed,
                       stage_types=args.stages, util_window_s=args.util_window)
    doc = {
        "command": "python -m workload.apps.profiling " + shlex.join(argv_used),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "machine": machine_description(),
        "notes": "wall_ms: perf_counter per call after one warm-up, CUDA synchronised; "
                 "peak_tensor_bytes on CPU: torch.profiler allocation events, on CUDA: "
                 "max_memory_allocated; peak_python_bytes: tracemalloc; gpu_util_*: NVML "
                 "percent, CUDA only. input_size = pixels of the clip, frame_shape = (T, H, W).",
        "rows": [r.as_row() for r in rows],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    width = max(len(s) for s in STAGE_TYPES)
    for r in rows:
        mem = "-" if r.peak_memory_bytes is None else f"{r.peak_memory_bytes / 1024:.0f} KiB"
        print(f"{r.device:6} {r.input_size:>8} {r.stage_type:{width}} "
              f"{r.wall_ms_median:8.2f} ms  {mem}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
