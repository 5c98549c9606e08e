"""The user's own per-record work, as the hook places and the executor runs it.

A job hands the hook its operator in one of these forms (:func:`as_operator` turns each into a
:class:`StagedOperator`):

- a plain Python callable ``fn(record) -> output`` (``async def`` too: awaited on one event
  loop per worker process; a generator function is flat: its items are the record's outputs);
- a PyFlink ``AsyncFunction``: ``async_invoke(record)`` returns the record's list of outputs;
- a PyFlink ``MapFunction`` (``map``) or ``FlatMapFunction`` (``flat_map``): its ``open`` /
  ``close`` run once per executor instance, as in Flink;
- a torch ``nn.Module`` (an instance, or a class / zero-argument factory built once per executor
  instance, as Ray Data's ``map_batches(Cls)``): one batched stage, see :func:`torch_stage`;
- a list of steps, a linear pipeline in one line (:func:`pipeline_stages`):
  ``[tokenize, TextNet, to_label]`` (callables run per record on a CPU core; a torch module
  class or instance is a batched GPU stage);
- a :class:`StagedOperator`: named stages with dependencies, each marked ``cpu``, ``gpu`` or
  ``any`` and taking a *batch* of inputs, so the executor's co-scheduler (IAWP) has stages to
  batch and to co-schedule on the node's CPU cores and GPUs.

A stage's function takes a list of inputs (one per record in the batch) and returns a list of
outputs of the same length. A stage without dependencies gets the records themselves; a stage
with one dependency gets that stage's outputs; a stage with several gets a dict ``{dep: output}``
per record. The operator's output for a record is its one sink stage's output (a flat operator's
sink returns an iterable of outputs per record).

What the placement policy sees of a record is its task type (:attr:`StagedOperator.task_type`;
default: the operator's name) and its size (:attr:`StagedOperator.task_size`; default: the
record's serialized length, :func:`record_size`).

Example::

    >>> op = StagedOperator("enrich", [
    ...     stage("parse", lambda r: r.split(","), device="cpu"),
    ...     stage("count", lambda fields: len(fields), deps=("parse",)),
    ... ])
    >>> op.run_record("a,b,c")
    [3]
    >>> as_operator(str.upper).run_record("hi")
    ['HI']
"""

from __future__ import annotations

import asyncio
import inspect
import json
import numbers
import pickle
import sys
import threading
from dataclasses import dataclass
from collections.abc import Iterable, Mapping, Set
from typing import Any, Callable, Sequence

from workload.limits import default_task_type_problem, finite_real, short_repr
from workload.async_calls import (SomeCallsFailed, collect_async, is_async_callable,
                                  is_generator_callable, run_coroutines, run_each)

__all__ = ["BatchPolicy", "OperatorStage", "StagedOperator", "TaskDescriber", "chain_cpu_stages", "stage", "torch_stage", "each_input",
           "async_function_stage", "ASYNC_BATCHING", "ASYNC_TIMEOUT_S",
           "as_operator", "batch_outputs", "pipeline_stages", "record_size", "record_bytes", "DEVICES", "OperatorError"]

#: Where a stage may run: ``cpu`` (a CPU core), ``gpu`` (a GPU; on a node without one it runs on
#: a CPU core, so the same job runs on a laptop), ``any`` (wherever is free first).
DEVICES = ("cpu", "gpu", "any")


class OperatorError(ValueError):
    """An operator the hook cannot place (bad stages, keyed or stateful functions)."""


@dataclass(frozen=True)
class BatchPolicy:
    """How the executor batches one stage's inputs from different in-flight records (Triton's
    dynamic batcher; ElasticBatch's latency-driven batch size, without MIG).

    preferred_batch_sizes: the sizes the executor forms; it picks, per stage and unit kind, the
        largest whose measured latency meets ``latency_target_ms``.
    max_batch_size: never more inputs in one call (the largest preferred size by default).
    max_queue_delay_us: how long a ready input may wait for others to fill a batch.
    latency_target_ms: the per-batch latency goal; ``None`` = no goal (the largest preferred
        size the queue fills within the delay).

    Every field is checked when the policy is made (a wrong one fails the job's build, not its
    batches): sizes are ints in [1, :attr:`MAX_BATCH_SIZE`], the delay an int of microseconds
    in [0, :attr:`MAX_QUEUE_DELAY_US`], the target a finite number of ms in (0,
    :attr:`MAX_LATENCY_TARGET_MS`].
    """

    #: the most inputs one call may take (a larger number is a unit mistake or garbage)
    MAX_BATCH_SIZE = 1_000_000
    #: the longest a ready input may wait for others (10 s)
    MAX_QUEUE_DELAY_US = 10_000_000
    #: the largest per-batch latency goal (an hour)
    MAX_LATENCY_TARGET_MS = 3_600_000.0

    preferred_batch_sizes: tuple[int, ...] = (1,)
    max_batch_size: int = 0
    max_queue_delay_us: int = 0
    latency_target_ms: float | None = None

    def __post_init__(self) -> None:
        def count(value, low: int, high: int) -> bool:   # an int in [low, high], not a bool
            return (not isinstance(value, bool) and isinstance(value, numbers.Integral)
                    and low <= value <= high)

        given, top = self.preferred_batch_sizes, self.MAX_BATCH_SIZE
        if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
            raise OperatorError(f"preferred_batch_sizes must be a sequence of ints, e.g. "
                                f"(1, 8, 32), got {short_repr(given)}")
        given = tuple(given)
        if not given or not all(count(s, 1, top) for s in given):
            raise OperatorError(f"preferred_batch_sizes must be ints in [1, {top}], got "
                                f"{short_repr(given)}")
        sizes = tuple(sorted(set(int(s) for s in given)))
        object.__setattr__(self, "preferred_batch_sizes", sizes)
        if not count(self.max_batch_size, 0, top):
            raise OperatorError(f"max_batch_size must be an int in [0, {top}] (0: the largest "
                                f"preferred size), got {short_repr(self.max_batch_size)}")
        object.__setattr__(self, "max_batch_size", int(self.max_batch_size) or sizes[-1])
        if self.max_batch_size < sizes[-1]:
            raise OperatorError(f"max_batch_size {self.max_batch_size} is below the largest "
                                f"preferred batch size {sizes[-1]}")
        if not count(self.max_queue_delay_us, 0, self.MAX_QUEUE_DELAY_US):
            raise OperatorError(f"max_queue_delay_us must be an int of microseconds in [0, "
                                f"{self.MAX_QUEUE_DELAY_US}], got "
                                f"{short_repr(self.max_queue_delay_us)}")
        object.__setattr__(self, "max_queue_delay_us", int(self.max_queue_delay_us))
        target = self.latency_target_ms
        if target is not None:
            number = finite_real(target)
            if number is None or not 0 < number <= self.MAX_LATENCY_TARGET_MS:
                raise OperatorError(f"latency_target_ms must be None or a finite number of ms "
                                    f"in (0, {self.MAX_LATENCY_TARGET_MS:g}], got "
                                    f"{short_repr(target)}")

    @classmethod
    def up_to(cls, max_batch_size: int, max_queue_delay_us: int = 2000,
              latency_target_ms: float | None = None) -> BatchPolicy:
        """Powers of two up to ``max_batch_size``: ``BatchPolicy.up_to(32)``."""
        if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, numbers.Integral) \
                or not 1 <= max_batch_size <= cls.MAX_BATCH_SIZE:
            raise OperatorError(f"max_batch_size must be an int in [1, {cls.MAX_BATCH_SIZE}], "
                                f"got {short_repr(max_batch_size)}")
        sizes, s = [], 1
        while s < max_batch_size:
            sizes.append(s)
            s *= 2
        return cls(tuple(sizes) + (int(max_batch_size),), int(max_batch_size),
                   max_queue_delay_us, latency_target_ms)

    @property
    def batching(self) -> bool:
        return self.max_batch_size > 1


NO_BATCHING = BatchPolicy()

#: An ``async def`` stage's or ``AsyncFunction``'s default batch: the coroutines of up to 32
#: in-flight records (the hook's ``executor_capacity``) wait together on one CPU lane, as in
#: PyFlink's async operator, instead of one record per lane at a time.
ASYNC_BATCHING = BatchPolicy.up_to(32, max_queue_delay_us=1000)

#: An ``AsyncFunction`` call's timeout (seconds) under the hook: PyFlink takes it from
#: ``unordered_wait``, which the hook replaces. Below the hook's own executor timeout (300 s),
#: so that the function's ``timeout`` is what a slow call gets, as in the plain job.
ASYNC_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class OperatorStage:
    """One named step of an operator: ``run(inputs, device) -> outputs`` (same length)."""

    name: str
    run: Callable[[list, str], list]
    deps: tuple[str, ...] = ()
    device: str = "cpu"
    batch: BatchPolicy = NO_BATCHING
    open: Callable[[Any], None] | None = None
    close: Callable[[], None] | None = None
    #: the function itself, ``fn(x) -> y``, where ``run`` only calls it on each input (a plain
    #: synchronous per-input function): a caller with one record may call it directly
    per_record: Callable[[Any], Any] | None = None
    #: ``run`` calls a function once per input and, for several inputs, reports which of them
    #: failed (:class:`~workload.async_calls.SomeCallsFailed`) with the others' results: the
    #: executor may hand it the ready inputs of several records in one call without batching
    #: them (a *call group*: nothing is called twice or together that a plain map would not)
    groupable: bool = False

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise OperatorError(f"a stage needs a name, got {self.name!r}")
        if self.device not in DEVICES:
            raise OperatorError(f"stage {self.name!r}: device must be one of {DEVICES}, got "
                                f"{self.device!r}")
        if isinstance(self.deps, (str, bytes)):  # "parse" would be stages p, a, r, s, e
            raise OperatorError(f"stage {self.name!r}: deps must be a sequence of stage "
                                f"names, e.g. deps=({self.deps!r},), not the string "
                                f"{self.deps!r}")
        object.__setattr__(self, "deps", tuple(self.deps))

    @property
    def gpu_capable(self) -> bool:
        return self.device in ("gpu", "any")


def stage(name: str, fn: Callable, deps: Sequence[str] = (), device: str = "cpu",
          batch: BatchPolicy | int | None = None, batched: bool = False) -> OperatorStage:
    """A stage from a function: per input ``fn(x) -> y`` (default), or per batch
    ``fn(xs) -> ys`` with ``batched=True``. ``batch``: a :class:`BatchPolicy`, or an int for
    ``BatchPolicy.up_to(n)``. Functions with a parameter named ``device`` get the unit's device
    (``"cpu"`` or ``"cuda:0"``). An ``async def`` function is awaited, a batch's calls
    concurrently (:mod:`workload.async_calls`; default batch :data:`ASYNC_BATCHING`, so that
    in-flight records wait together, as in PyFlink's async operator), each call within
    :data:`ASYNC_TIMEOUT_S` and failing only its own record; a generator function's items come
    as a list. A batched function returns its outputs in its inputs' order (a list, a tuple, an
    array; not a set or a dict: :func:`batch_outputs`). ``deps``: a sequence of stage names,
    ``("parse",)``; a bare string is refused (``"ab"`` would read as stages ``a`` and ``b``)."""
    asynchronous = is_async_callable(fn)
    policy = ASYNC_BATCHING if asynchronous and batch is None else _batch_policy(batch)
    takes_device = _accepts_keyword(fn, "device")

    if batched:
        def run(inputs: list, device: str) -> list:
            out = fn(inputs, device=device) if takes_device else fn(inputs)
            if asynchronous:
                out = run_coroutines([_drained(out)])[0]
            return batch_outputs(name, out, len(inputs))
    elif asynchronous:  # the batch's coroutines run concurrently (workload.async_calls)
        def run(inputs: list, device: str) -> list:
            if takes_device:
                return _awaited(name, [fn(x, device=device) for x in inputs])
            return _awaited(name, [fn(x) for x in inputs])
    elif is_generator_callable(fn):  # drained here: the work is the stage's (timed, retried)
        def run(inputs: list, device: str) -> list:
            if takes_device:
                return each_input(name, lambda x: list(fn(x, device=device)), inputs)
            return each_input(name, lambda x: list(fn(x)), inputs)
        return OperatorStage(name, run, deps, device, policy, groupable=True)
    else:
        def run(inputs: list, device: str) -> list:
            if takes_device:
                return each_input(name, lambda x: fn(x, device=device), inputs)
            return each_input(name, fn, inputs)
        return OperatorStage(name, run, deps, device, policy,
                             per_record=None if takes_device else fn, groupable=True)
    return OperatorStage(name, run, deps, device, policy)


def each_input(name: str, call: Callable[[Any], Any], inputs: list) -> list:
    """``call`` on each input, in order; a failure fails only its own input (the error of an
    input alone, else :class:`SomeCallsFailed` with the others' results), so that the executor
    never calls it again for an input whose call succeeded."""
    if len(inputs) == 1:
        return [call(inputs[0])]
    results, errors = [], {}
    for i, value in enumerate(inputs):
        try:
            results.append(call(value))
        except Exception as exc:  # noqa: BLE001 - the input's own failure, reported as such
            results.append(None)
            errors[i] = exc
    return _each_or_raise(name, results, errors)


def batch_outputs(stage_name: str, outputs, count: int) -> list:
    """A batch call's ``outputs`` as a list, one per input in the inputs' order. Refused
    (naming the stage): an unordered container, a set or a mapping, whose order (or keys) a
    ``list()`` would silently hand to the wrong records, and a wrong number of outputs."""
    if isinstance(outputs, (Set, Mapping)):
        raise OperatorError(f"stage {stage_name!r} returned a {type(outputs).__name__}: a "
                            f"batch's outputs must come in its inputs' order, one per input "
                            f"(a list, a tuple or an array), not in an unordered container")
    outputs = list(outputs)
    if len(outputs) != count:
        raise OperatorError(f"stage {stage_name!r} returned {len(outputs)} outputs for "
                            f"{count} inputs")
    return outputs


def _drained(value):
    """What to await for ``value``: the coroutine itself, or an async generator's items."""
    return collect_async(value) if inspect.isasyncgen(value) else value


def _awaited(name: str, values: list) -> list:
    """A batch's ``values`` (coroutines or async generators, one per input) run concurrently
    to their results (a list per async generator), each within :data:`ASYNC_TIMEOUT_S` as an
    ``AsyncFunction``'s call is: one hung call must not hold its batch until the executor's
    own timeout fails every record of it."""
    limit = ASYNC_TIMEOUT_S  # looked up per call, so that a job may lower it
    return _each_or_raise(name, *run_each([_within(name, _drained(v), limit) for v in values]))


async def _within(name: str, call, timeout_s: float):
    """``call``'s result, or TimeoutError past ``timeout_s`` (the call is cancelled). The
    user's own TimeoutError passes as it is (``asyncio.wait_for`` would not tell them apart)."""
    task = asyncio.ensure_future(call)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    finally:
        if not task.done():  # timed out, or this record was cancelled
            task.cancel()
    if not done:
        raise TimeoutError(f"stage {name!r}: the call took longer than {timeout_s:g} s "
                           f"(workload.operators.ASYNC_TIMEOUT_S)")
    return task.result()


def _each_or_raise(name: str, results: list, errors: dict[int, BaseException]) -> list:
    """A batch's results when every call gave one; else the error of a batch of one, or
    :class:`SomeCallsFailed`, so that the executor fails (or retries) only the inputs whose
    own call failed and keeps the others' results."""
    if not errors:
        return results
    if len(results) == 1:
        raise errors[0]
    raise SomeCallsFailed(name, results, errors) from errors[min(errors)]


def async_function_stage(name: str, function, timeout_s: float = ASYNC_TIMEOUT_S,
                         batch: BatchPolicy | int | None = None) -> OperatorStage:
    """A PyFlink ``AsyncFunction`` as one CPU stage of a flat operator, with PyFlink's
    semantics: ``async_invoke(record)`` gives the record's list of outputs (not None, an
    iterable); past ``timeout_s`` its call is cancelled and ``function.timeout(record)`` gives
    them instead (PyFlink's default ``timeout`` raises TimeoutError: the record fails). A
    batch's calls run concurrently (default batch :data:`ASYNC_BATCHING`), one per record: a
    call that fails fails its own record only."""
    if not 0 < timeout_s < 1e6:
        raise OperatorError(f"timeout_s must be in (0, 1e6) seconds, got {timeout_s!r}")
    invoke = function.async_invoke
    on_timeout = getattr(function, "timeout", None)

    async def call(record):
        try:
            return await asyncio.wait_for(invoke(record), timeout_s)
        except asyncio.TimeoutError:
            if on_timeout is None:
                raise
            return on_timeout(record)

    def run(inputs: list, device: str) -> list:  # a record whose call fails fails alone
        results, errors = run_each([call(x) for x in inputs])
        for i, result in enumerate(results):
            if i not in errors:
                try:
                    results[i] = _async_function_results(name, result)
                except OperatorError as exc:
                    errors[i] = exc
        return _each_or_raise(name, results, errors)
    return OperatorStage(name, run, batch=ASYNC_BATCHING if batch is None
                         else _batch_policy(batch))


def _async_function_results(name: str, result) -> list:
    if result is None:
        raise OperatorError(f"{name}.async_invoke returned None; an AsyncFunction returns a "
                            f"list of results (PyFlink refuses None too)")
    if not isinstance(result, Iterable):
        raise OperatorError(f"{name}.async_invoke returned {type(result).__name__}; an "
                            f"AsyncFunction returns a list of results")
    return list(result)


def torch_stage(module, name: str = "model", deps: Sequence[str] = (), device: str = "gpu",
                batch: BatchPolicy | int | None = 32, preprocess: Callable | None = None,
                postprocess: Callable | None = None) -> OperatorStage:
    """A torch model as one batched stage, in one line::

        torch_stage(MyNet, batch=32)              # built once per executor instance
        torch_stage(my_net_instance, device="any", postprocess=lambda row: int(row.argmax()))

    Inputs (tensors, arrays or nested lists; ``preprocess(x)`` first when given) are stacked
    into one tensor, run through the module on the unit's device under ``torch.inference_mode``
    in eval mode, and split back per record (``postprocess(row)``; default: ``row.tolist()``).
    Weights are never trained here."""
    policy = _batch_policy(batch)
    state: dict[str, Any] = {}
    # The executor's CPU workers and GPU lanes call run() concurrently; the lock is the module's
    # (a lock in the closure could not be pickled to the Flink workers with the operator).
    lock = _StageLock()

    def build(_runtime_context=None) -> None:
        with lock:
            if "module" not in state:
                import torch
                made = module() if (isinstance(module, type) or not isinstance(
                    module, torch.nn.Module)) else module
                if not isinstance(made, torch.nn.Module):
                    raise OperatorError(f"torch_stage {name!r}: {module!r} did not give an "
                                        f"nn.Module")
                state["module"] = made.eval()
                state["on"] = {}

    def run(inputs: list, device: str) -> list:
        import torch
        build()
        on = state["on"]
        if device not in on:  # one copy of the weights per device
            with lock:
                if device not in on:
                    on[device] = _on_device(state["module"], device)
        xs = [preprocess(x) if preprocess else x for x in inputs]
        batch_tensor = torch.stack([torch.as_tensor(x) for x in xs]).to(device)
        with torch.inference_mode():
            out = on[device](batch_tensor)
        out = _one_row_per_input(name, out, len(inputs), torch).detach().to("cpu")
        return [postprocess(row) if postprocess else row.tolist() for row in out]

    def close() -> None:
        state.clear()
    return OperatorStage(name, run, deps, device, policy, open=build, close=close)


def _one_row_per_input(name: str, out, count: int, torch):
    """The module's output when it is one tensor with a row per input; else an OperatorError
    that names what it returned (a tuple, a dict, a scalar), not a failure further on."""
    if not isinstance(out, torch.Tensor):
        raise OperatorError(f"module {name!r} returned a {type(out).__name__}; a torch stage's "
                            f"module must return one tensor per batch, a row per input (wrap "
                            f"it in a module whose forward returns the tensor to keep, e.g. "
                            f"its logits)")
    if out.dim() == 0 or out.shape[0] != count:
        raise OperatorError(f"module {name!r} returned a tensor of shape {tuple(out.shape)} "
                            f"for a batch of {count} inputs; a torch stage's module must "
                            f"return a row per input")
    return out


_TORCH_STAGE_LOCK = threading.RLock()


class _StageLock:
    """A context manager over the module's lock that pickles as nothing (the Flink client
    pickles operators to the workers; a lock object cannot be pickled)."""

    def __enter__(self):
        _TORCH_STAGE_LOCK.acquire()
        return self

    def __exit__(self, *exc) -> None:
        _TORCH_STAGE_LOCK.release()


def _copy_module(module):
    import copy
    return copy.deepcopy(module)


def _on_device(module, device: str):
    """``module`` (kept for the CPU) or a copy of it on ``device``. A CUDA copy is made on the
    calling lane's stream: it is synchronised before other streams may read the weights."""
    if device == "cpu":
        return module
    import torch
    copied = _copy_module(module).to(device)
    if device.startswith("cuda"):
        torch.cuda.current_stream(device).synchronize()
    return copied


@dataclass(frozen=True)
class TaskDescriber:
    """An operator's name and its ``task_type`` / ``task_size`` functions (``None``: the
    defaults, the operator's name and :func:`record_size`)."""

    name: str
    type_of: Callable[[Any], str] | None = None
    size_of: Callable[[Any], int] | None = None

    def task_type(self, record) -> str:
        return self.name if self.type_of is None else str(self.type_of(record))

    def task_size(self, record) -> int:
        if self.size_of is None:
            return record_size(record)
        size = self.size_of(record)
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise OperatorError(f"task_size must return an int >= 0, got {size!r}")
        return size


class StagedOperator:
    """Named stages forming a DAG with exactly one sink; see the module docstring."""

    def __init__(self, name: str, stages: Sequence[OperatorStage], flat: bool = False,
                 on_open: Callable[[Any], None] | None = None,
                 on_close: Callable[[], None] | None = None,
                 task_type: Callable[[Any], str] | None = None,
                 task_size: Callable[[Any], int] | None = None):
        if not name or not isinstance(name, str):
            raise OperatorError(f"an operator needs a name, got {name!r}")
        self.name = name
        self.stages = tuple(stages)
        self.flat = flat
        self._on_open, self._on_close = on_open, on_close
        self._task_type, self._task_size = task_type, task_size
        self.order = _topological(self.stages)
        self._by_name = {s.name: s for s in self.stages}
        used = {d for s in self.stages for d in s.deps}
        sinks = [s.name for s in self.stages if s.name not in used]
        if len(sinks) != 1:
            raise OperatorError(f"operator {name!r} needs exactly one sink stage (one no other "
                                f"stage depends on); got {sinks}")
        self.sink = sinks[0]
        self.opened = False

    def stage(self, name: str) -> OperatorStage:
        return self._by_name[name]

    @property
    def uses_gpu(self) -> bool:
        return any(s.gpu_capable for s in self.stages)

    def describer(self) -> TaskDescriber:
        """What the router needs of this operator: its task type and size functions, without
        the stages (models, weights) that only the executors need."""
        return TaskDescriber(self.name, self._task_type, self._task_size)

    def task_type(self, record) -> str:
        """The task type the policy sees (default: the operator's name)."""
        return self.describer().task_type(record)

    def task_size(self, record) -> int:
        """The task size the policy sees (default: :func:`record_size`)."""
        return self.describer().task_size(record)

    def with_extractors(self, task_type: Callable | None = None,
                        task_size: Callable | None = None) -> StagedOperator:
        """A copy with other task type / size functions (``None`` keeps the current one)."""
        return StagedOperator(self.name, self.stages, self.flat, self._on_open, self._on_close,
                              task_type or self._task_type, task_size or self._task_size)

    def open(self, runtime_context=None) -> None:
        """Once per executor instance, before the first record. When an ``open`` raises, what
        was opened before it is closed, once, and the error goes on: the caller never got an
        open operator, so it does not close it."""
        if self.opened:
            return
        opened_closes: list[Callable[[], None]] = []
        function_close: list[Callable[[], None]] = []
        try:
            if self._on_open is not None:
                self._on_open(runtime_context)
            function_close = [self._on_close] if self._on_close is not None else []
            for s in self.stages:
                if s.open is not None:
                    s.open(runtime_context)
                if s.close is not None:
                    opened_closes.append(s.close)
        except BaseException:
            _close_each(opened_closes + function_close)  # the order close() keeps
            raise
        self.opened = True

    def close(self) -> None:
        if not self.opened:
            return
        self.opened = False
        for s in self.stages:
            if s.close is not None:
                s.close()
        if self._on_close is not None:
            self._on_close()

    def stage_inputs(self, name: str, record, outputs: dict[str, Any]):
        """What stage ``name`` takes for one record, given the outputs of its dependencies."""
        deps = self._by_name[name].deps
        if not deps:
            return record
        if len(deps) == 1:
            return outputs[deps[0]]
        return {d: outputs[d] for d in deps}

    def results(self, sink_output) -> list:
        """The operator's outputs for one record from its sink stage's output."""
        if not self.flat:
            return [sink_output]
        if sink_output is None:
            return []
        return list(sink_output)

    def run_record(self, record, device: str = "cpu") -> list:
        """The reference path: every stage once, batch of one, in topological order. The
        executor's batched path must give the same outputs."""
        self.open(None)
        outputs: dict[str, Any] = {}
        for name in self.order:
            outputs[name] = self._by_name[name].run(
                [self.stage_inputs(name, record, outputs)], device)[0]
        return self.results(outputs[self.sink])

    def __getstate__(self):
        state = dict(self.__dict__)
        state["opened"] = False  # a copy unpickled in a worker opens there
        return state

    def __repr__(self) -> str:
        return (f"StagedOperator({self.name!r}, stages={list(self.order)}, "
                f"flat={self.flat})")


def _close_each(closes: Sequence[Callable[[], None]]) -> None:
    """Call each of ``closes`` once; one that raises does not keep the others from running
    (the caller is raising the error that made it close, the one to report)."""
    for close in closes:
        try:
            close()
        except Exception:  # noqa: BLE001, S110 - see the docstring
            pass


def chain_cpu_stages(operator: StagedOperator) -> StagedOperator:
    """The same operator with its per-record CPU steps chained into fewer stages, as Flink
    chains operators: every call the executor dispatches costs it scheduling work, which for
    light per-record steps (parsing, tokenizing, labelling) costs more than the step itself.

    A stage that runs on the CPU without batching joins the group of the stage(s) it depends on
    when all its dependencies are in that one group (so a group never waits on a stage outside
    it that waits on the group). Batched, GPU and ``any`` stages stay as they are, so IAWP and the
    batcher see exactly the stages they can do something with. Outputs are unchanged: a group
    runs its members per record in order; consumers get their member's output.

    Example::

        >>> op = as_operator([str.strip, str.split, len])
        >>> chained = chain_cpu_stages(op)
        >>> [s.name for s in chained.stages], chained.run_record(" a b ")
        (['strip+split+len'], [2])
    """
    group_of: dict[str, str] = {}
    members: dict[str, list[str]] = {}
    for name in operator.order:
        s = operator.stage(name)
        groups = {group_of[d] for d in s.deps}
        chainable = s.device == "cpu" and not s.batch.batching
        if chainable and len(groups) == 1 and all(_chainable(operator, m)
                                                   for m in members[next(iter(groups))]):
            group = next(iter(groups))
        else:
            group = name
            members[group] = []
        members[group].append(name)
        group_of[name] = group
    if len(members) == len(operator.stages):
        return operator
    return _ChainedOperator(operator, members, group_of)


def _chainable(operator: StagedOperator, name: str) -> bool:
    s = operator.stage(name)
    return s.device == "cpu" and not s.batch.batching


class _ChainedOperator(StagedOperator):
    """:func:`chain_cpu_stages`' result: each group of several original stages is one stage
    (named ``a+b+c``, made unique: :func:`_group_labels`) whose output is ``{member: output}``;
    every other stage is the original
    one, with its dependencies renamed to the groups they are in."""

    def __init__(self, original: StagedOperator, members: dict[str, list[str]],
                 group_of: dict[str, str]):
        self.original = original
        self._label = _group_labels(original, members)
        self._chained = {self._label[g]: names for g, names in members.items() if len(names) > 1}
        self._home = {name: self._label[g] for name, g in group_of.items()}  # stage -> its stage
        stages = []
        for group, names in members.items():
            label = self._label[group]
            outside = [d for n in names for d in original.stage(n).deps
                       if group_of[d] != group]
            deps = tuple(dict.fromkeys(self._home[d] for d in outside))
            first = original.stage(names[0])
            if len(names) > 1:
                stages.append(OperatorStage(label, self._group_runner(label, names), deps,
                                            first.device, first.batch, groupable=all(
                                                original.stage(n).groupable for n in names)))
            else:
                stages.append(OperatorStage(label, first.run, deps, first.device, first.batch,
                                            groupable=first.groupable))
        super().__init__(original.name, stages, original.flat, original.open, original.close,
                         original._task_type, original._task_size)

    def _value(self, dep: str, outputs: dict[str, Any]):
        """An original stage's output, from the outputs of the (chained) stages."""
        home = self._home[dep]
        return outputs[home][dep] if home in self._chained else outputs[home]

    def _group_runner(self, label: str, names: list[str]):
        original = self.original

        def one(value, device: str) -> dict:
            record, outside = value      # outside: original dep -> its output
            outputs: dict[str, Any] = {}
            for name in names:
                merged = {**outside, **outputs}
                outputs[name] = original.stage(name).run(
                    [original.stage_inputs(name, record, merged)], device)[0]
            return outputs

        def run(inputs: list, device: str) -> list:
            return each_input(label, lambda value: one(value, device), inputs)
        return run

    def stage_inputs(self, name: str, record, outputs: dict[str, Any]):
        if name in self._chained:
            members = self._chained[name]
            outside = {d: self._value(d, outputs) for m in members
                       for d in self.original.stage(m).deps if d not in members}
            return record, outside
        original = {d: self._value(d, outputs) for d in self.original.stage(name).deps}
        return self.original.stage_inputs(name, record, original)

    def results(self, sink_output) -> list:
        sink = self.original.sink
        return self.original.results(sink_output[sink] if self._home[sink] in self._chained
                                     else sink_output)

    def open(self, runtime_context=None) -> None:
        self.original.open(runtime_context)
        self.opened = True

    def close(self) -> None:
        self.original.close()
        self.opened = False


def _group_labels(original: StagedOperator, members: dict[str, list[str]]) -> dict[str, str]:
    """Each group's stage name: a lone stage keeps its own; a chain is ``a+b+c``, or
    ``a+b+c_2`` (and on) where that is already a name: the user's stage may be called
    ``a+b`` itself, and must not be refused as a duplicate of the chain's label."""
    taken = {s.name for s in original.stages}
    labels = {}
    for group, names in members.items():
        label, n = "+".join(names), 1
        while len(names) > 1 and label in taken:
            n += 1
            label = f"{'+'.join(names)}_{n}"
        taken.add(label)
        labels[group] = label
    return labels


def _topological(stages: Sequence[OperatorStage]) -> tuple[str, ...]:
    names = [s.name for s in stages]
    if not names:
        raise OperatorError("an operator needs at least one stage")
    if len(set(names)) != len(names):
        raise OperatorError(f"stage names must be unique, got {names}")
    known = set(names)
    for s in stages:
        missing = [d for d in s.deps if d not in known]
        if missing:
            raise OperatorError(f"stage {s.name!r} depends on unknown stages {missing}")
    order: list[str] = []
    done: set[str] = set()
    pending = list(stages)
    while pending:
        ready = [s for s in pending if all(d in done for d in s.deps)]
        if not ready:
            raise OperatorError(f"stages form a cycle: {[s.name for s in pending]}")
        for s in ready:
            order.append(s.name)
            done.add(s.name)
        pending = [s for s in pending if s.name not in done]
    return tuple(order)


def _batch_policy(batch: BatchPolicy | int | None) -> BatchPolicy:
    if batch is None:
        return NO_BATCHING
    if isinstance(batch, BatchPolicy):
        return batch
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise OperatorError(f"batch must be a BatchPolicy or an int >= 1, got {batch!r}")
    return BatchPolicy.up_to(batch) if batch > 1 else NO_BATCHING


def _accepts_keyword(fn: Callable, keyword: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False
    # Only a parameter of that name: functions taking **kwargs (json.loads) pass them on.
    return keyword in params


#: PyFlink's functions (``pyflink.datastream.functions``) whose per-key state, timers or second
#: input are tied to where Flink sends each record.
STATEFUL_FLINK_FUNCTIONS = ("KeyedProcessFunction", "KeyedCoProcessFunction",
                            "KeyedBroadcastProcessFunction", "BroadcastProcessFunction",
                            "CoProcessFunction", "CoMapFunction", "CoFlatMapFunction")


def _refuse_stateful(fn, what: str) -> None:
    """Refuse, with what it is and why, a function the hook cannot run per record on whichever
    node the policy picks: a keyed, co- or broadcast function or one with timers (its state or
    second input cannot follow the records), and a process function (the hook gives it no
    context). Decided by type: a stateless ``MapFunction`` named ``KeyedLookup`` is fine."""
    cls = fn if isinstance(fn, type) else type(fn)
    kind = cls.__name__
    stateful = _flink_base(cls, STATEFUL_FLINK_FUNCTIONS)
    if stateful is not None or callable(getattr(fn, "on_timer", None)):
        it_is = f"a {stateful}" if stateful else "a function with timers (on_timer)"
        raise OperatorError(
            f"{what} {kind} is {it_is}: per-key state, timers or a second input cannot "
            f"follow records the hook moves between nodes. Hand the hook a stateless "
            f"per-record function (a MapFunction, a FlatMapFunction, a callable or named "
            f"stages) and keep keyed, timed or connected work before or after it in the job.")
    process_function = _flink_base(cls, ("ProcessFunction",)) is not None
    per_record = callable(getattr(fn, "map", None)) or callable(getattr(fn, "flat_map", None))
    if process_function or (callable(getattr(fn, "process_element", None)) and not per_record):
        it_is = ("a ProcessFunction" if process_function
                 else "a process function (process_element)")
        raise OperatorError(
            f"{what} {kind} is {it_is}: the hook runs per-record map and flat-map functions "
            f"and gives no ProcessFunction context, timers or side outputs. Use a MapFunction "
            f"or FlatMapFunction, or a callable, for the per-record work.")


def _flink_base(cls: type, names: Sequence[str]) -> str | None:
    """The first of PyFlink's function classes ``names`` that ``cls`` derives from, or None.
    PyFlink is not imported for this: an object can only be an instance of its classes once
    it is, so without it (stand-ins, tests) nothing derives from them."""
    functions = sys.modules.get("pyflink.datastream.functions")
    if functions is None:
        return None
    for name in names:
        base = getattr(functions, name, None)
        if isinstance(base, type) and issubclass(cls, base):
            return name
    return None


def as_operator(operator, name: str | None = None, task_type: Callable | None = None,
                task_size: Callable | None = None, flat: bool | None = None) -> StagedOperator:
    """Any supported operator form as a :class:`StagedOperator` (see the module docstring).

    ``flat`` is for a plain callable: True when its result per record is an iterable of
    outputs (as ``DataStream.flat_map(fn)``); None (default) reads it from the function (a
    generator function is flat, any other callable a map)."""
    if not isinstance(operator, (StagedOperator, OperatorStage)):
        _refuse_stateful(operator, "the operator")
    if isinstance(operator, type) and _is_flink_function(operator):
        operator = _instance_of(operator)   # a MapFunction class: one instance, as Flink's
    plain_callable = (callable(operator) and not isinstance(operator, (list, tuple))
                      and not _is_torch_module(operator)
                      and not _is_torch_module_class(operator)
                      and not _is_flink_function(operator))
    if flat is not None and not plain_callable:
        raise OperatorError(f"flat= is for a plain callable; {type(operator).__name__} says "
                            f"itself whether it is flat (a FlatMapFunction, an AsyncFunction "
                            f"and a StagedOperator(flat=True) are)")
    if flat is False and is_generator_callable(operator):
        raise OperatorError(f"{getattr(operator, '__name__', operator)!r} is a generator "
                            f"function: each record gives several outputs, so it is flat "
                            f"(as DataStream.flat_map); flat=False would emit the generator")
    if isinstance(operator, StagedOperator):
        op = operator
    elif isinstance(operator, OperatorStage):
        op = StagedOperator(name or operator.name, [operator])
    elif isinstance(operator, (list, tuple)):
        stages = pipeline_stages(operator)
        op = StagedOperator(name or "+".join(s.name for s in stages
                                             if s.name != RECORD_STAGE)[:60], stages)
    elif callable(getattr(operator, "flat_map", None)) or callable(getattr(operator, "map",
                                                                           None)):
        flat = callable(getattr(operator, "flat_map", None)) and not callable(
            getattr(operator, "map", None))
        method = operator.flat_map if flat else operator.map
        label = name or type(operator).__name__
        run = stage(label, method, device="cpu")
        op = StagedOperator(label, [run], flat=flat,
                            on_open=getattr(operator, "open", None),
                            on_close=getattr(operator, "close", None))
    elif callable(getattr(operator, "async_invoke", None)):
        # a PyFlink AsyncFunction: its coroutine per record gives a list of outputs
        label = name or type(operator).__name__
        op = StagedOperator(label, [async_function_stage(label, operator)], flat=True,
                            on_open=getattr(operator, "open", None),
                            on_close=getattr(operator, "close", None))
    elif _is_torch_module(operator) or _is_torch_module_class(operator):
        # A class is built once per executor instance (torch_stage), not called per record.
        label = name or (operator.__name__ if isinstance(operator, type)
                         else type(operator).__name__)
        op = StagedOperator(label, [torch_stage(operator, name=label)])
    elif callable(operator):
        label = name or getattr(operator, "__name__", None) or type(operator).__name__
        if label == "<lambda>":
            label = "lambda"
        op = StagedOperator(label, [stage(label, operator)],
                            flat=is_generator_callable(operator) if flat is None else flat)
    else:
        raise OperatorError(f"cannot place {operator!r}: hand the hook a callable, a "
                            f"MapFunction / FlatMapFunction, a torch nn.Module, or a "
                            f"StagedOperator")
    if task_type is not None or task_size is not None:
        op = op.with_extractors(task_type, task_size)
    if name and op.name != name:
        op = StagedOperator(name, op.stages, op.flat, op._on_open, op._on_close,
                            op._task_type, op._task_size)
    if op._task_type is None:
        # The name is then every record's task type: one that is no valid type (a control
        # character, too long) fails the build here, not every record at run time (the
        # router's same rule: pyflink_jobs.router_function.OperatorRecords.open).
        problem = default_task_type_problem(op.name)
        if problem:
            raise OperatorError(problem)
    return op


def _is_flink_function(operator) -> bool:
    """A PyFlink function (instance or class): a map, flat map or async function."""
    return any(callable(getattr(operator, m, None)) for m in ("map", "flat_map", "async_invoke"))


def _instance_of(cls: type):
    """``cls()``: the hook was handed a function class (``Enrich``) instead of an instance."""
    try:
        return cls()
    except Exception as exc:  # noqa: BLE001 - the user's constructor: say what to do
        raise OperatorError(f"{cls.__name__} is a class and {cls.__name__}() failed ({exc}); "
                            f"hand the hook an instance, e.g. {cls.__name__}(...)") from exc


def pipeline_stages(steps: Sequence) -> list[OperatorStage]:
    """A linear pipeline from a list, in one line: ``[tokenize, TextNet, to_label]``.

    Each step is an :class:`OperatorStage` (kept), a torch ``nn.Module`` instance or class
    (:func:`torch_stage`: device ``gpu``, batches up to 32) or a per-record callable
    (:func:`stage`, CPU); each step takes the output of the one before it. A callable with two
    parameters ``(record, previous)`` also gets the record itself (e.g. to keep its id beside a
    model's output)."""
    if not steps:
        raise OperatorError("a pipeline needs at least one step")
    stages: list[OperatorStage] = []
    for i, step in enumerate(steps):
        wants_record = False
        if isinstance(step, OperatorStage):
            made = step
        elif _is_torch_module(step) or _is_torch_module_class(step):
            label = step.__name__ if isinstance(step, type) else type(step).__name__
            made = torch_stage(step, name=label)
        elif callable(step):
            _refuse_stateful(step, "pipeline step")
            wants_record = i > 0 and _positional_count(step) == 2
            fn = step
            if wants_record and is_async_callable(step):
                async def fn(both, f=step):
                    return await f(both[RECORD_STAGE], both["previous"])
            elif wants_record:
                fn = (lambda both, f=step: f(both[RECORD_STAGE], both["previous"]))
            made = stage(getattr(step, "__name__", type(step).__name__), fn)
        else:
            raise OperatorError(f"pipeline step {i} ({step!r}) is not a stage, a torch module "
                                f"or a callable")
        name = made.name if made.name not in {s.name for s in stages} else f"{made.name}_{i}"
        deps = made.deps or ((stages[-1].name,) if stages else ())
        if wants_record:
            if stages[0].name != RECORD_STAGE:
                stages.insert(0, stage(RECORD_STAGE, _identity))
                stages[1] = OperatorStage(stages[1].name, stages[1].run, (RECORD_STAGE,),
                                          stages[1].device, stages[1].batch, stages[1].open,
                                          stages[1].close, groupable=stages[1].groupable)
            previous = deps[0]
            run = made.run
            made = OperatorStage(name, lambda xs, device, p=previous, r=run: r(
                [{RECORD_STAGE: x[RECORD_STAGE], "previous": x[p]} for x in xs], device),
                (RECORD_STAGE, previous), made.device, made.batch, groupable=made.groupable)
            deps = made.deps
        stages.append(OperatorStage(name, made.run, deps, made.device, made.batch, made.open,
                                    made.close, groupable=made.groupable))
    return stages


#: The implicit first stage of a pipeline whose later steps ask for the record itself.
RECORD_STAGE = "record"


def _identity(x):
    return x


def _positional_count(fn) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 1
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
               for p in params)


def _is_torch_module_class(obj) -> bool:
    return isinstance(obj, type) and _torch_module_type(obj)


def _is_torch_module(obj) -> bool:
    return not isinstance(obj, type) and _torch_module_type(type(obj))


def _torch_module_type(cls: type) -> bool:
    # Only look at torch when the class could be a torch module (torch is heavy to import).
    if not any((c.__module__ or "").startswith("torch") for c in cls.__mro__):
        return False
    import torch
    return issubclass(cls, torch.nn.Module)


def record_bytes(record) -> bytes:
    """A record as bytes (for its size and for a dead letter's ``raw`` field): bytes as they
    are, text as UTF-8, a ``Row`` or anything else as JSON when it can be, else pickled."""
    if isinstance(record, (bytes, bytearray, memoryview)):
        return bytes(record)
    if isinstance(record, str):
        return record.encode("utf-8", errors="replace")
    values = _row_values(record)
    try:
        return json.dumps(values, default=str, separators=(",", ":")).encode()
    except (TypeError, ValueError):
        return pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL)


def record_size(record) -> int:
    """The default task size: the record's serialized length in bytes (:func:`record_bytes`)."""
    if isinstance(record, (bytes, bytearray, memoryview)):
        return len(record)
    if isinstance(record, str):  # an ASCII text's length is its UTF-8 length: no copy
        return len(record) if record.isascii() else len(record.encode("utf-8", errors="replace"))
    return len(record_bytes(record))


def _row_values(record):
    # pyflink.common.Row is a tuple subclass with field names; plain values otherwise.
    as_dict = getattr(record, "as_dict", None)
    if callable(as_dict):
        try:
            return as_dict()
        except Exception:  # noqa: BLE001 - a Row without names: its values
            return list(record)
    if isinstance(record, tuple):
        return list(record)
    return record
