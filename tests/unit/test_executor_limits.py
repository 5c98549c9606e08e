"""The executors' own resource limits (issue 15, item 3): cancellation that stops running work,
timeouts that release the record's slot, and the per-task memory budget at admission."""

from __future__ import annotations

import asyncio
import concurrent.futures
import doctest
import subprocess
import sys
import threading
import time

import pytest

from interference.executor import (ExecutorSettings, NodeExecutor, OperatorExecutor,
                                   OperatorExecutorSettings)
from interference.executor import cancel as cancel_module
from interference.executor import memory as memory_module
from interference.executor.cancel import InFlightCalls
from interference.executor.direct import DirectExecutor
from interference.executor.memory import MemoryBudget, node_memory_bytes
from interference.executor.results import output_digest
from workload import cancel as workload_cancel_module
from workload.apps.registry import OPERATORS, run_stage, run_task, stage_order, task_frames
from workload.cancel import StageCancelled, cancel_scope, check_cancelled
from workload.catalog import APPLICATIONS
from workload.limits import BYTES_PER_PIXEL, BYTES_PER_RECORD_BYTE
from workload.operators import StagedOperator, as_operator, stage
from flink_fakes import FakeContext

SIZE = 4096
#: How long a cancelled stage may take to stop (a test stage checks every 5 ms; a real one
#: between EM iterations, about 0.15 s at a million pixels on one core). Generous: the
#: machine is shared.
STOP_BOUND_S = 1.5


def node_settings(**overrides) -> ExecutorSettings:
    return ExecutorSettings(**{"cpu_workers": 1, "use_gpu": "never", "scheduler": "fcfs",
                               **overrides})


def looping_stage(started: threading.Event, stopped: list, max_s: float = 30.0):
    """A stage that works until it is cancelled (checking every ~5 ms, "one frame"); records
    when its thread left it and whether the check stopped it."""

    def stage_fn(frames, inputs, **options):
        started.set()
        end = time.perf_counter() + max_s  # never hang the suite if cancellation broke
        try:
            while time.perf_counter() < end:
                check_cancelled()
                time.sleep(0.005)
            raise AssertionError("the stage was never cancelled")
        except StageCancelled:
            stopped.append(("cancelled", time.perf_counter()))
            raise
    return stage_fn


# ------------------------------------------------------------------ PyFlink's own behaviour


class _QueueEntry:
    """Stands in for PyFlink's queue entry: what the result handler completes."""

    def __init__(self):
        self.results: list = []
        self.done = threading.Event()

    def complete(self, result):
        self.results.append(result)
        self.done.set()


@pytest.fixture()
def pyflink_runner():
    """PyFlink's own event-loop thread for async functions (no JVM needed)."""
    from pyflink.fn_execution.datastream.process.async_function.operation import \
        AsyncFunctionRunner
    runner = AsyncFunctionRunner()
    runner.daemon = True
    runner.start()
    runner.wait_ready()
    yield runner
    runner.stop()


def invoke_with_timeout(runner, function, value, timeout_s: float):
    """What PyFlink's AsyncOperation.process_element does for one record."""
    from pyflink.fn_execution.datastream.process.async_function.operation import ResultHandler
    entry, errors = _QueueEntry(), []
    handler = ResultHandler(type(function).__name__, function.timeout, errors.append, value,
                            entry)
    handler.register_timeout(timeout_s)
    runner.run_async(function.async_invoke, value, handler)
    return entry, errors


def test_pyflink_itself_does_not_cancel_async_invoke_on_timeout(pyflink_runner):
    """Why the executor functions cancel: PyFlink's timer calls ``timeout`` and emits its
    result, and the coroutine runs on (its late result is ignored)."""
    state = {"finished": threading.Event(), "cancelled": False}

    class Plain:
        async def async_invoke(self, value):
            try:
                await asyncio.sleep(0.4)
            except asyncio.CancelledError:
                state["cancelled"] = True
                raise
            state["finished"].set()
            return ["late"]

        def timeout(self, value):
            return ["timed out"]

    entry, errors = invoke_with_timeout(pyflink_runner, Plain(), "v", 0.05)
    assert entry.done.wait(5) and entry.results == [["timed out"]]
    assert state["finished"].wait(5) and not state["cancelled"]  # it ran to its end anyway
    time.sleep(0.05)
    assert entry.results == [["timed out"]] and errors == []


# ------------------------------------------------------------------ timeout -> cancel
def test_timeout_cancels_the_running_task_and_releases_its_slot(pyflink_runner, monkeypatch):
    from pyflink_jobs.executor_function import ExecutorFunctionSettings, NodeExecutorFunction
    from workload.codec import decode

    started, stopped = threading.Event(), []
    monkeypatch.setitem(OPERATORS, "face_detection", looping_stage(started, stopped))
    function = NodeExecutorFunction("tm_a", ExecutorFunctionSettings(
        bootstrap_servers="127.0.0.1:1", feedback_interval_s=60.0, cpu_workers=1,
        scheduler="fcfs"))
    function.open(FakeContext())
    try:
        event = {"task_id": "slow-1", "app_id": "face_recognition", "input_size": SIZE,
                 "submitted_at_ms": 1}
        entry, errors = invoke_with_timeout(pyflink_runner, function, event, 0.5)
        assert started.wait(30)
        assert entry.done.wait(10)
        timed_out = time.perf_counter()
        (encoded,), = entry.results
        result = decode("TaskResult", encoded)
        assert result["status"] == "FAILED" and "timed out" in result["error"]
        # The stage thread left the stage at its next check, the lane and the slot are free.
        deadline = time.perf_counter() + 10
        while not stopped and time.perf_counter() < deadline:
            time.sleep(0.005)
        assert stopped and stopped[0][0] == "cancelled"
        stop_latency = stopped[0][1] - timed_out
        assert stop_latency < STOP_BOUND_S, stop_latency
        for _ in range(500):
            snap = function.executor.snapshot()
            if snap["failed"] == 1 and snap["in_flight"] == 0:
                break
            time.sleep(0.01)
        assert (snap["failed"], snap["in_flight"], snap["queue_depth"]) == (1, 0, 0)
        assert len(function.in_flight()) == 0 and errors == []
        assert snap["stages_run"] == 0  # the stopped stage is not a completed one
        # The next task runs at once on the freed lane.
        monkeypatch.undo()
        follow = {"task_id": "next-1", "app_id": "video_synopsis", "input_size": SIZE}
        began = time.perf_counter()
        entry2, errors2 = invoke_with_timeout(pyflink_runner, function, follow, 30.0)
        assert entry2.done.wait(30) and errors2 == []
        assert decode("TaskResult", entry2.results[0][0])["status"] == "OK"
        assert time.perf_counter() - began < 10
        assert len(function.in_flight()) == 0
        learned = {stage for stage, _, _ in function.executor.learned_slowdowns()}
        assert "face_detection" not in learned  # no co-run learning from the stopped call
    finally:
        function.feedback.producer = None
        function.close()


def test_operator_timeout_skips_the_records_remaining_stages(pyflink_runner):
    """A user stage cannot be interrupted mid-call; its record's later stages never run."""
    from pyflink_jobs.executor_function import ExecutorFunctionSettings
    from pyflink_jobs.operator_function import OperatorExecutorFunction
    from pyflink_jobs.routed import DecisionContext, RoutedRecord
    from workload.codec import decode

    gate, after_calls = threading.Event(), []
    # a batched second stage: not chained into the first, so the operator executor runs it
    op = StagedOperator("gated", [
        stage("wait", lambda x: gate.wait(30) and x),
        stage("after", lambda xs: [after_calls.append(x) or x + 1 for x in xs],
              deps=("wait",), batched=True, batch=4)])
    function = OperatorExecutorFunction("tm_a", op, ExecutorFunctionSettings(
        bootstrap_servers="127.0.0.1:1", feedback_interval_s=60.0, cpu_workers=1))
    function.open(FakeContext())
    try:
        routed = RoutedRecord("r-1", "gated", 1, "tm_a", 0, DecisionContext(), 1)
        entry, errors = invoke_with_timeout(pyflink_runner, function, routed, 0.2)
        assert entry.done.wait(10)
        (executed,), = entry.results
        assert "timed out" in decode("DeadLetter", executed.dead_letter)["reason"]
        gate.set()  # the user's call in progress ends on its own
        for _ in range(500):
            snap = function.executor.snapshot()
            if snap["failed"] == 1 and snap["in_flight"] == 0:
                break
            time.sleep(0.01)
        assert (snap["failed"], snap["in_flight"], snap["completed"]) == (1, 0, 0)
        assert after_calls == [] and len(function.in_flight()) == 0 and errors == []
    finally:
        function.feedback.producer = None
        function.close()


# ------------------------------------------------------------------ cancellation in the executor
def test_a_real_builtin_stage_cancelled_mid_stage_stops_and_the_lane_is_free_again():
    """gmm_background on a million-pixel clip (about 1 s alone on a core) stops between EM
    iterations; the next task starts on the same single core at once."""
    real, seen = OPERATORS["gmm_background"], {}
    began = threading.Event()

    def watched(frames, inputs, **options):
        seen["start"] = time.perf_counter()
        began.set()
        try:
            return real(frames, inputs, **options)
        except BaseException as exc:
            seen["error"] = exc
            raise
        finally:
            seen["end"] = time.perf_counter()

    OPERATORS["gmm_background"] = watched
    try:
        with NodeExecutor(node_settings()) as node:
            future = node.submit("big-1", "video_synopsis", 1_000_000)
            assert began.wait(60)
            time.sleep(0.1)  # inside the EM loop
            cancelled_at = time.perf_counter()
            assert future.cancel()
            follow = node.submit("after-1", "face_recognition", SIZE)
            outcome = follow.result(timeout=60)
            assert outcome.status == "OK"
            assert isinstance(seen["error"], StageCancelled)  # stopped by the check, mid-stage
            stop_latency = seen["end"] - cancelled_at
            assert stop_latency < STOP_BOUND_S, stop_latency
            snap = node.snapshot()
            assert (snap["failed"], snap["completed"], snap["in_flight"]) == (1, 1, 0)
            assert snap["stages_run"] == len(outcome.stages)  # nothing counted for big-1
            assert not any(s == "gmm_background" for s, _, _ in node.learned_slowdowns())
            assert outcome.started_at_ms >= 0
    finally:
        OPERATORS["gmm_background"] = real
    print(f"stop latency of a cancelled gmm_background at 1e6 pixels: {stop_latency * 1e3:.0f} ms")


def test_a_failed_task_stops_its_other_running_stage(monkeypatch):
    started, stopped = threading.Event(), []
    monkeypatch.setitem(OPERATORS, "gmm_background", looping_stage(started, stopped))

    def boom(frames, inputs, **options):
        started.wait(30)
        raise RuntimeError("boom")
    monkeypatch.setitem(OPERATORS, "frame_difference", boom)
    with NodeExecutor(node_settings(cpu_workers=2, max_attempts=1)) as node:
        outcome = node.submit("fail-1", "video_synopsis", SIZE).result(timeout=30)
    assert outcome.status == "FAILED" and "boom" in outcome.error
    assert stopped and stopped[0][0] == "cancelled"


def test_a_caller_that_gives_up_waiting_for_a_slot_takes_none(monkeypatch):
    started, stopped = threading.Event(), []
    monkeypatch.setitem(OPERATORS, "face_detection", looping_stage(started, stopped))

    async def main(node):
        first = asyncio.ensure_future(node.run_task("hold-1", "face_recognition", SIZE))
        while not started.is_set():
            await asyncio.sleep(0.01)
        waiting = asyncio.ensure_future(node.run_task("wait-1", "video_synopsis", SIZE))
        await asyncio.sleep(0.2)  # blocked: the only slot is held
        waiting.cancel()
        first.cancel()
        for task in (waiting, first):
            with pytest.raises(asyncio.CancelledError):
                await task
        await asyncio.sleep(0.3)  # a leaked wait would take the slot and run wait-1 now

    with NodeExecutor(node_settings(max_in_flight=1)) as node:
        asyncio.run(main(node))
        snap = node.snapshot()
    assert (snap["failed"], snap["completed"], snap["in_flight"], snap["queue_depth"]) == \
        (1, 0, 0, 0)
    assert stopped and stopped[0][0] == "cancelled"


def test_a_user_stage_may_stop_itself_and_a_cancelled_batch_is_not_learned():
    started, stopped = threading.Event(), []
    loop = looping_stage(started, stopped)
    op = StagedOperator("coop", [stage("spin", lambda x: loop(None, {}), device="cpu")])

    async def main(executor):
        task = asyncio.ensure_future(executor.run("c-1", 1))
        while not started.is_set():
            await asyncio.sleep(0.01)
        cancelled_at = time.perf_counter()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return cancelled_at

    settings = OperatorExecutorSettings(cpu_workers=1, use_gpu="never", chain_cpu_stages=False)
    with OperatorExecutor(op, settings) as executor:
        cancelled_at = asyncio.run(main(executor))
        for _ in range(500):
            if executor.snapshot()["failed"] == 1:
                break
            time.sleep(0.01)
        snap = executor.snapshot()
        assert executor.batch_report() == {}  # the stopped call was not measured
    assert stopped and stopped[0][1] - cancelled_at < STOP_BOUND_S
    assert (snap["failed"], snap["in_flight"], snap["stages_run"]) == (1, 0, 0)


# ------------------------------------------------------------------ the built-in apps' checks
class _CountingFlag:
    """A flag that counts the checks and reads as set from the ``set_after``-th one on."""

    def __init__(self, set_after: int | None = None):
        self.checks, self.set_after = 0, set_after

    def is_set(self) -> bool:
        self.checks += 1
        return self.set_after is not None and self.checks >= self.set_after


#: Stages whose work is one or a few whole-clip tensor operations, without a loop to check in.
_NO_LOOP = {"dog_pyramid", "face_encoding", "face_distance", "face_compare"}


@pytest.mark.parametrize("app_id", list(APPLICATIONS))
def test_the_builtin_stages_check_between_steps_and_keep_their_outputs(app_id):
    frames = task_frames(app_id, SIZE, seed=3)
    reference = run_task(app_id, SIZE, seed=3)
    outputs = {}
    for name in stage_order(app_id):
        inputs = {d: outputs[d] for d in APPLICATIONS[app_id].stage(name).deps}
        counting = _CountingFlag()
        with cancel_scope(counting):  # checked, never set: the same output
            outputs[name] = run_stage(name, frames, inputs)
        assert output_digest(outputs[name]) == output_digest(reference[name]), name
        if name in _NO_LOOP:
            continue
        assert counting.checks >= 1, (name, counting.checks)
        # Set at the last check it made: the stage stops there instead of finishing.
        with cancel_scope(_CountingFlag(set_after=counting.checks)), \
                pytest.raises(StageCancelled):
            run_stage(name, frames, inputs)


def test_making_the_clip_stops_too():
    with cancel_scope(_CountingFlag(set_after=1)), pytest.raises(StageCancelled):
        task_frames("video_synopsis", SIZE, seed=0)


# ------------------------------------------------------------------ the in-flight map
def test_the_in_flight_map_does_not_grow_whatever_way_calls_end():
    calls = InFlightCalls(limit=64, early_limit=8)

    async def ok(i):
        await asyncio.sleep(0)
        return i

    async def fails():
        raise ValueError("boom")

    async def forever(release: asyncio.Event):
        await release.wait()

    async def main():
        assert await asyncio.gather(*[calls.run(("ok", i), ok(i)) for i in range(300)]) == \
            list(range(300))
        for i in range(50):
            with pytest.raises(ValueError):
                await calls.run(("bad", i), fails())
        release = asyncio.Event()
        running = [asyncio.ensure_future(calls.run(("slow", i), forever(release)))
                   for i in range(40)]
        await asyncio.sleep(0.01)
        assert len(calls) == 40
        # timeouts come from another thread, as PyFlink's timer does
        cancelled = await asyncio.to_thread(lambda: [calls.cancel(("slow", i))
                                                     for i in range(40)])
        assert all(cancelled)
        for task in running:
            with pytest.raises(asyncio.CancelledError):
                await task
        # timeouts for calls that never started, or already ended: remembered, bounded
        for i in range(100):
            assert not calls.cancel(("gone", i))
        assert calls.pending_timeouts() == 8
        with pytest.raises(asyncio.CancelledError):  # a timeout that came first
            await calls.run(("gone", 99), ok(0))
        # beyond the limit a call runs, untracked
        many = [asyncio.ensure_future(calls.run(("many", i), forever(release)))
                for i in range(70)]
        await asyncio.sleep(0.01)
        assert len(calls) == 64
        release.set()
        await asyncio.gather(*many)

    asyncio.run(main())
    assert len(calls) == 0 and calls.pending_timeouts() == 7


def test_an_executor_function_timed_out_many_times_keeps_no_entries(pyflink_runner,
                                                                    monkeypatch):
    from pyflink_jobs.executor_function import ExecutorFunctionSettings, NodeExecutorFunction

    started, stopped = threading.Event(), []
    monkeypatch.setitem(OPERATORS, "face_detection", looping_stage(started, stopped))
    function = NodeExecutorFunction("tm_a", ExecutorFunctionSettings(
        bootstrap_servers="127.0.0.1:1", feedback_interval_s=60.0, cpu_workers=1,
        scheduler="fcfs"))
    function.open(FakeContext())
    try:
        entries = [invoke_with_timeout(pyflink_runner, function, {
            "task_id": f"t-{i}", "app_id": "face_recognition", "input_size": SIZE}, 0.2)
            for i in range(12)]
        assert all(entry.done.wait(10) for entry, _ in entries)
        for _ in range(1000):
            snap = function.executor.snapshot()
            if snap["failed"] == 12:
                break
            time.sleep(0.01)
        assert (snap["failed"], snap["in_flight"], snap["queue_depth"]) == (12, 0, 0)
        assert len(function.in_flight()) == 0
        assert function.in_flight().pending_timeouts() <= 12
    finally:
        function.feedback.producer = None
        function.close()


# ------------------------------------------------------------------ the memory budget
def test_the_admission_budget_refuses_an_oversized_task_before_any_work(monkeypatch):
    ran = []
    real = OPERATORS["face_detection"]
    monkeypatch.setitem(OPERATORS, "face_detection",
                        lambda *a, **k: ran.append(1) or real(*a, **k))
    with NodeExecutor(node_settings(node_memory_bytes=4 << 30)) as node:
        assert node.memory.limit_bytes == 2 << 30
        refused = node.submit("huge-1", "face_recognition", 10**8).result(timeout=5)
        assert refused.status == "FAILED" and refused.stages == [] and ran == []
        assert "per-task memory budget of 2,147,483,648 bytes" in refused.error
        assert "input_size 100000000 pixels x 100 bytes" in refused.error
        assert node.snapshot()["failed"] == 1 and node.snapshot()["in_flight"] == 0
        assert node.submit("ok-1", "face_recognition", SIZE).result(timeout=60).status == "OK"
        # the largest task the project generates fits even a 512 MiB node
    for node_bytes in (512 << 20, 4 << 30, 0):
        budget = MemoryBudget.for_settings(node_settings(node_memory_bytes=node_bytes))
        assert budget.refusal(1_048_576, BYTES_PER_PIXEL, "input_size", "pixels") is None
    assert BYTES_PER_PIXEL * 1_048_576 < (512 << 20) // 2


def test_the_default_node_memory_is_what_the_process_can_have(tmp_path):
    import psutil
    assert node_memory_bytes(123) == 123
    assert 0 < node_memory_bytes() <= psutil.virtual_memory().total
    limit = tmp_path / "memory.max"
    limit.write_text("1073741824\n")
    assert memory_module.cgroup_memory_limit((str(limit),)) == 1 << 30
    limit.write_text("max\n")
    assert memory_module.cgroup_memory_limit((str(limit),)) is None
    assert memory_module.cgroup_memory_limit((str(tmp_path / "none"),)) is None
    with pytest.raises(ValueError, match="task_memory_fraction"):
        node_settings(task_memory_fraction=0)
    with pytest.raises(ValueError, match="node_memory_bytes"):
        node_settings(node_memory_bytes=-1)


def test_operator_records_over_the_budget_are_refused_with_the_reason():
    settings = OperatorExecutorSettings(cpu_workers=1, use_gpu="never",
                                        node_memory_bytes=1 << 30)
    limit = (1 << 29) // BYTES_PER_RECORD_BYTE  # 33,554,432 record bytes
    op = StagedOperator("two", [stage("a", str.upper), stage("b", len, deps=("a",))])
    with OperatorExecutor(op, settings) as executor:
        refused = executor.submit("big", "x", task_size=limit + 1).result(timeout=5)
        fine = executor.submit("small", "xy", task_size=limit).result(timeout=30)
    assert refused.status == "FAILED" and "per-task memory budget" in refused.error
    assert "task_size 33554433 record bytes x 16 bytes" in refused.error
    assert fine.status == "OK" and fine.outputs == [2]
    with DirectExecutor(as_operator(str.upper), settings) as direct:
        assert direct.run_now("big", "x", task_size=limit + 1).status == "FAILED"
        assert direct.submit("big", "x", limit + 1).result(timeout=5).error == refused.error
        assert direct.run_now("small", "x", task_size=limit).outputs == ["X"]
        assert direct.snapshot()["failed"] == 2


def test_a_memory_error_fails_the_task_at_once(monkeypatch):
    calls = []

    def greedy(frames, inputs, **options):
        calls.append(1)
        raise MemoryError()
    monkeypatch.setitem(OPERATORS, "face_detection", greedy)
    with NodeExecutor(node_settings(max_attempts=3)) as node:
        outcome = node.submit("greedy-1", "face_recognition", SIZE).result(timeout=30)
    assert outcome.status == "FAILED" and "MemoryError" in outcome.error and calls == [1]


def test_the_optional_address_space_limit_turns_a_huge_allocation_into_a_failed_record():
    # In a child process: the limit is per process, and it must not bind the test runner.
    code = (
        "from interference.executor import OperatorExecutor, OperatorExecutorSettings\n"
        "import resource\n"
        "s = OperatorExecutorSettings(cpu_workers=1, use_gpu='never', node_memory_bytes=2 << 30,"
        " limit_address_space=True)\n"
        "with OperatorExecutor(lambda n: len(bytearray(n)), s) as ex:\n"
        "    assert resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY\n"
        "    big = ex.submit('big', 16 << 30).result(timeout=60)\n"
        "    small = ex.submit('small', 1 << 20).result(timeout=60)\n"
        "print(big.status, 'MemoryError' in big.error, small.status, small.outputs)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["FAILED", "True", "OK", str([1 << 20])]


def test_the_address_space_limit_is_never_set_with_a_gpu(monkeypatch):
    import resource
    before = resource.getrlimit(resource.RLIMIT_AS)
    assert memory_module.limit_address_space(MemoryBudget(1 << 30, 0.5), has_gpu=True) is None
    assert resource.getrlimit(resource.RLIMIT_AS) == before


@pytest.mark.parametrize("module", [cancel_module, memory_module, workload_cancel_module])
def test_docstring_examples(module):
    assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0


def test_cancel_on_future_ignores_a_normal_result():
    future, flag, woken = concurrent.futures.Future(), threading.Event(), []
    cancel_module.cancel_on_future(future, flag, woken.append, "item")
    future.set_result(1)
    assert not flag.is_set() and woken == []
