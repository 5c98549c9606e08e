"""A user's asynchronous and flat operators: ``async def`` functions, PyFlink ``AsyncFunction``s,
generator functions and ``flat=True`` callables give the outputs PyFlink's own operators give."""

from __future__ import annotations

import asyncio
import functools
import threading
import time

import cloudpickle
import pytest
from pyflink.datastream import AsyncFunction, MapFunction

from interference.executor.direct import (DirectExecutor, direct_operator,
                                          operator_executor_for)
from interference.executor.settings import OperatorExecutorSettings
from workload.async_calls import run_coroutines
from workload.cancel import StageCancelled, cancel_scope
from workload.operators import (ASYNC_BATCHING, OperatorError, as_operator,
                                async_function_stage, stage)


async def double(x):
    await asyncio.sleep(0)
    return 2 * x


def words(line):
    yield from line.split()


async def async_words(line):
    for word in line.split():
        await asyncio.sleep(0)
        yield word


class Scaled(AsyncFunction):
    """A model-inference UDF as PyFlink's documentation writes one."""

    def __init__(self):
        self.opened = self.closed = 0

    def open(self, runtime_context):
        self.opened += 1
        self.factor = 10

    def close(self):
        self.closed += 1

    async def async_invoke(self, value):
        await asyncio.sleep(0)
        return [value * self.factor, -value]


class ReturnsNone(AsyncFunction):
    async def async_invoke(self, value):
        return None


class ReturnsNumber(AsyncFunction):
    async def async_invoke(self, value):
        return 7


class Upper(MapFunction):
    def map(self, value):
        return value.upper()


@pytest.mark.parametrize("operator, record, outputs", [
    (double, 3, [6]),
    (functools.partial(double), 4, [8]),
    (words, "a b c", ["a", "b", "c"]),
    (async_words, "x y", ["x", "y"]),
    (Scaled(), 2, [20, -2]),
])
def test_outputs_are_what_pyflinks_own_operator_gives(operator, record, outputs):
    assert as_operator(operator).run_record(record) == outputs


def test_generator_functions_are_flat_and_plain_callables_are_maps_unless_told():
    assert as_operator(words).flat and as_operator(async_words).flat
    assert not as_operator(str.split).flat
    assert as_operator(str.split).run_record("a b") == [["a", "b"]]          # a map
    assert as_operator(str.split, flat=True).run_record("a b") == ["a", "b"]  # flat_map(fn)
    assert as_operator(str.split, flat=True).run_record("") == []


@pytest.mark.parametrize("operator, flat, message", [
    (words, False, "generator function"),
    (Upper(), True, "flat= is for a plain callable"),
    (Scaled(), False, "flat= is for a plain callable"),
    ([str.upper, str.lower], True, "flat= is for a plain callable"),
])
def test_flat_that_contradicts_the_operator_is_refused(operator, flat, message):
    with pytest.raises(OperatorError, match=message):
        as_operator(operator, flat=flat)


@pytest.mark.parametrize("function, message", [
    (ReturnsNone(), "returned None"),
    (ReturnsNumber(), "returned int"),
])
def test_an_async_function_held_to_pyflinks_result_rule(function, message):
    with pytest.raises(OperatorError, match=message):
        as_operator(function).run_record(1)


def test_an_async_functions_open_and_close_run_once_per_executor_and_survive_pickling():
    op = cloudpickle.loads(cloudpickle.dumps(as_operator(Scaled())))
    with operator_executor_for(op, OperatorExecutorSettings(cpu_workers=2,
                                                            use_gpu="never")) as ex:
        outcomes = [f.result(timeout=60) for f in [ex.submit(f"r{i}", i) for i in range(5)]]
    assert [o.outputs for o in outcomes] == [[10 * i, -i] for i in range(5)]
    instance = op._on_open.__self__  # the unpickled instance behind the stage
    assert (instance.opened, instance.closed) == (1, 1)


def test_a_batchs_coroutines_run_concurrently():
    # Every call waits until all of the batch have started: one at a time would never finish.
    started, size = [], 4

    async def meet(x):
        started.append(x)
        while len(started) < size:
            await asyncio.sleep(0.001)
        return x

    run = stage("meet", meet, batched=False).run
    result = []
    worker = threading.Thread(target=lambda: result.append(run(list(range(size)), "cpu")),
                              daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert result == [list(range(size))]


def test_calls_share_one_event_loop_as_in_pyflinks_async_operator():
    async def loop_id(_):
        return id(asyncio.get_running_loop())

    op = as_operator(loop_id)
    ids = {op.run_record(i)[0] for i in range(3)}
    ids |= set(run_coroutines([loop_id(None)]))
    assert len(ids) == 1


def test_a_raising_coroutine_fails_its_record_with_the_error_and_the_rest_go_on():
    async def picky(x):
        if x == 2:
            raise ValueError(f"bad record {x}")
        return x

    with operator_executor_for(picky, OperatorExecutorSettings(
            cpu_workers=1, max_attempts=1, use_gpu="never")) as ex:
        outcomes = [f.result(timeout=60) for f in [ex.submit(f"r{i}", i) for i in range(4)]]
    assert [o.status for o in outcomes] == ["OK", "OK", "FAILED", "OK"]
    assert "bad record 2" in outcomes[2].error and "ValueError" in outcomes[2].traceback
    assert [o.outputs for o in outcomes if o.status == "OK"] == [[0], [1], [3]]


def test_a_cancelled_record_stops_its_coroutine():
    stopped = threading.Event()

    async def forever():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            stopped.set()
            raise

    flag = threading.Event()
    threading.Timer(0.1, flag.set).start()
    began = time.monotonic()
    with cancel_scope(flag), pytest.raises(StageCancelled):
        run_coroutines([forever()])
    assert time.monotonic() - began < 30
    assert stopped.wait(timeout=10)


def test_calling_from_the_loop_itself_is_refused_not_a_deadlock():
    async def nested():
        return run_coroutines([double(1)])

    with pytest.raises(RuntimeError, match="from the coroutine loop itself"):
        run_coroutines([nested()])


def test_the_hook_refuses_flat_without_an_operator():
    from pyflink_jobs.hook import StreamplaceHook
    hook = StreamplaceHook.create("127.0.0.1:9092")
    with pytest.raises(ValueError, match="flat need an operator"):
        hook.apply(object(), object(), flat=True)


def test_a_batched_async_stage_in_the_co_scheduling_executor_matches_the_reference():
    from interference.executor import OperatorExecutor
    from workload.operators import BatchPolicy, StagedOperator

    async def lookup(key):  # an I/O-bound step, as a call to a feature store
        await asyncio.sleep(0.001)
        return len(key)

    op = StagedOperator("features", [
        stage("lookup", lookup, batch=BatchPolicy.up_to(8, max_queue_delay_us=20_000)),
        stage("scale", lambda n: n * 100, deps=("lookup",)),
    ])
    records = ["a", "bb", "ccc", "", "dddd"] * 4
    expected = [op.run_record(r) for r in records]
    with OperatorExecutor(op, OperatorExecutorSettings(cpu_workers=2, use_gpu="never")) as ex:
        outcomes = [f.result(timeout=60)
                    for f in [ex.submit(f"r{i}", r) for i, r in enumerate(records)]]
    assert [o.outputs for o in outcomes] == expected == [[100 * len(r)] for r in records]


def test_a_direct_record_cancelled_mid_call_stops_with_the_cancelled_outcome():
    from interference.executor.cancel import CANCELLED
    stopped = threading.Event()

    async def slow(x):
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            stopped.set()
            raise

    cancel = threading.Event()
    one_at_a_time = as_operator(stage("slow", slow, batch=1))
    with DirectExecutor(direct_operator(one_at_a_time),
                        OperatorExecutorSettings(cpu_workers=1)) as ex:
        future = ex.submit("r0", 1, cancel=cancel)
        time.sleep(0.1)
        cancel.set()
        outcome = future.result(timeout=30)
    assert outcome.status == "FAILED" and outcome.error == CANCELLED
    assert stopped.wait(timeout=10)


def test_async_operators_batch_in_flight_records_instead_of_running_one_per_lane():
    for op in (as_operator(double), as_operator(Scaled())):
        assert op.stages[0].batch == ASYNC_BATCHING and direct_operator(op) is None
    assert direct_operator(as_operator(stage("one", double, batch=1))) is not None


class Slow(AsyncFunction):
    async def async_invoke(self, value):
        await asyncio.sleep(3600)
        return [value]


class SlowWithDefault(Slow):
    def timeout(self, value):
        return [f"default for {value}"]


def test_a_slow_async_call_gets_the_functions_own_timeout_answer():
    run = async_function_stage("slow", SlowWithDefault(), timeout_s=0.05).run
    assert run([1, 2], "cpu") == [["default for 1"], ["default for 2"]]
    with pytest.raises(TimeoutError):  # PyFlink's default timeout(): the record fails
        async_function_stage("slow", Slow(), timeout_s=0.05).run([1], "cpu")
    with pytest.raises(OperatorError, match="timeout_s"):
        async_function_stage("slow", Slow(), timeout_s=float("nan"))


class Shout(MapFunction):
    def open(self, runtime_context):
        self.suffix = "!"

    def map(self, value):
        return value.upper() + self.suffix


class NeedsArgs(MapFunction):
    def __init__(self, suffix):
        self.suffix = suffix

    def map(self, value):
        return value + self.suffix


def test_a_function_class_is_built_once_and_a_class_that_needs_arguments_is_refused():
    assert as_operator(Shout).run_record("hi") == ["HI!"]
    with pytest.raises(OperatorError, match=r"hand the hook an instance, e.g. NeedsArgs\(\.\.\.\)"):
        as_operator(NeedsArgs)
