"""Where stage calls run: one worker lane per CPU unit, one per CUDA stream of each GPU.

:class:`UnitLanes` owns the worker threads of a node's units, shared by both executors:

- a CPU unit is one single-thread pool. Its thread runs torch with ``torch.set_num_threads(1)``
  (one unit is one core: intra-op threads would make units fight over the same cores; torch
  kernels release the GIL, so units really run in parallel). torch is configured only once it
  is imported, so a pure-Python operator never loads it;
- a GPU unit has ``capacity`` lanes, each a single-thread pool with its own
  ``torch.cuda.Stream``: the stages IAWP packs onto one GPU co-run on different streams.

The dispatcher books a lane (:meth:`UnitLanes.acquire`), hands it work (:meth:`submit`), and
frees it when the work reports back (:meth:`release`); :meth:`views` is the scheduler's picture
of the units (what runs where, until when). In the worker thread, :meth:`call` times one stage
call between the co-run tracker's ``begin`` / ``end``, under the lane's stream, synchronised
before the clock stops (GPU work is asynchronous).

Example::

    >>> from workload.model import ComputingUnit
    >>> from interference.executor.corun import CoRunTracker
    >>> lanes = UnitLanes([ComputingUnit("cpu:0", "cpu")], "doc", CoRunTracker())
    >>> lane = lanes.acquire("cpu:0", "square", expected_end_s=0.1)
    >>> done = lanes.submit("cpu:0", lane, lambda stream: lanes.call(
    ...     "cpu:0", stream, "square", prepare=lambda: 7, work=lambda x: x * x))
    >>> done.result().output, lanes.device("cpu:0")
    (49, 'cpu')
    >>> lanes.release("cpu:0", lane, "square"); lanes.shutdown()
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from interference.executor.corun import CoRun, CoRunTracker
from workload.cancel import cancel_scope, check_cancelled
from workload.model import ComputingUnit

__all__ = ["UnitLanes", "LaneCall", "is_cuda_oom", "use_one_torch_thread"]

_configured = threading.local()


def use_one_torch_thread() -> None:
    """In a CPU worker: one torch intra-op thread, once torch is imported (cheap after that)."""
    if getattr(_configured, "done", False):
        return
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
        _configured.done = True


def is_cuda_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is CUDA running out of device memory."""
    torch = sys.modules.get("torch")
    if torch is None:  # nothing imported torch: no CUDA call could have failed
        return False
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)  # torch >= 1.13
    return (oom_type is not None and isinstance(exc, oom_type)) or \
        "CUDA out of memory" in str(exc)


@dataclass
class LaneCall:
    """One timed stage call: its output (of the last repeat) or its error, its start and end
    (perf_counter s; 0 when it never started) and whom it co-ran with (None then)."""

    output: Any = None
    error: BaseException | None = None
    start: float = 0.0
    end: float = 0.0
    run: CoRun | None = None


class UnitLanes:
    """Worker lanes of one node's ``units`` (see the module doc). ``node_id`` names the
    threads; ``tracker`` is the co-run tracker every call reports to."""

    def __init__(self, units: Sequence[ComputingUnit], node_id: str,
                 tracker: CoRunTracker) -> None:
        self.units = list(units)
        self.tracker = tracker
        self._pools: dict[str, list[tuple[concurrent.futures.ThreadPoolExecutor, Any]]] = {}
        for unit in self.units:
            name = f"{node_id}-{unit.unit_id.replace(':', '')}"
            if unit.kind == "cpu":
                pool = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix=name, initializer=use_one_torch_thread)
                self._pools[unit.unit_id] = [(pool, None)]
            else:
                import torch
                index = self._index(unit.unit_id)
                self._pools[unit.unit_id] = [
                    (concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"{name}s{k}"),
                     torch.cuda.Stream(device=index)) for k in range(unit.capacity)]
        self._busy = {uid: [False] * len(pools) for uid, pools in self._pools.items()}
        # unit -> (stage type, expected end s) of what runs there: the scheduler's view
        self._running: dict[str, list[tuple[str, float]]] = {u.unit_id: [] for u in self.units}

    @staticmethod
    def _index(unit_id: str) -> int:
        return int(unit_id.split(":")[1])

    def device(self, unit_id: str) -> str:
        """The torch device of a unit: ``"cpu"`` or ``"cuda:<i>"``."""
        return "cpu" if unit_id.startswith("cpu") else f"cuda:{self._index(unit_id)}"

    # ------------------------------------------------------------------ dispatcher side
    def acquire(self, unit_id: str, stage_type: str, expected_end_s: float) -> int:
        """Book a free lane of ``unit_id`` for a call of ``stage_type``; its index."""
        lane = self._busy[unit_id].index(False)
        self._busy[unit_id][lane] = True
        self._running[unit_id].append((stage_type, expected_end_s))
        return lane

    def release(self, unit_id: str, lane: int, stage_type: str) -> None:
        self._busy[unit_id][lane] = False
        running = self._running[unit_id]
        for i, (running_type, _) in enumerate(running):
            if running_type == stage_type:
                del running[i]
                break

    def submit(self, unit_id: str, lane: int, fn: Callable, *args) -> concurrent.futures.Future:
        """Run ``fn(stream, *args)`` on the lane's worker thread (stream None on a CPU)."""
        pool, stream = self._pools[unit_id][lane]
        return pool.submit(fn, stream, *args)

    def views(self, now_s: float, gpu_rows: Sequence[dict] = ()) -> list[ComputingUnit]:
        """The units as the scheduler sees them now: what runs there, when it should be free,
        utilisation (NVML's ``gpu_rows``, in CUDA's order, for GPUs; busy or not for cores)."""
        views = []
        for unit in self.units:
            running = self._running[unit.unit_id]
            changes: dict[str, Any] = {"running": tuple(s for s, _ in running),
                                       "free_at_s": max([now_s] + [e for _, e in running])}
            if unit.kind == "gpu":
                index = self._index(unit.unit_id)
                row = gpu_rows[index] if index < len(gpu_rows) else {}
                changes["utilisation"] = row.get("util", 1.0 if running else 0.0)
                changes["memory_util"] = row.get("mem_util", 0.0)
            else:
                changes["utilisation"] = 1.0 if running else 0.0
            views.append(dataclasses.replace(unit, **changes))
        return views

    def shutdown(self) -> None:
        for pools in self._pools.values():
            for pool, _ in pools:
                pool.shutdown(wait=True)

    # ------------------------------------------------------------------ worker side
    def call(self, unit_id: str, stream, stage_type: str, prepare: Callable[[], Any],
             work: Callable[[Any], Any], repeats: int = 1, cancel=None) -> LaneCall:
        """In a lane's worker: ``prepare()`` (untimed: inputs to the device), then
        ``work(prepared)`` ``repeats`` times, timed and tracked as ``stage_type``. Never
        raises: the error is in the result.

        ``cancel``: the work's cancel flag (``is_set()``). Once it is set, the call does not
        start (``run`` stays None), stops between repeats, and code in ``prepare`` / ``work``
        that calls :func:`~workload.cancel.check_cancelled` stops there; the error is
        then a :class:`~workload.cancel.StageCancelled`."""
        result = LaneCall()
        run_id = None
        if stream is None:
            use_one_torch_thread()
        try:
            with (sys.modules["torch"].cuda.stream(stream) if stream is not None
                  else contextlib.nullcontext()), cancel_scope(cancel):
                check_cancelled()  # a cancelled task's stage never starts
                prepared = prepare()
                check_cancelled()
                run_id, result.start = self.tracker.begin(stage_type, unit_id)
                for repeat in range(repeats):
                    if repeat:
                        check_cancelled()
                    result.output = work(prepared)
                if stream is not None:
                    stream.synchronize()  # GPU work is asynchronous: time it to its end
        except Exception as exc:  # reported, retried or failed by the dispatcher
            result.error = exc
        finally:
            if run_id is not None:
                result.end, result.run = self.tracker.end(run_id)
        return result
