"""A user operator's calls as the executor makes them: one call per record and attempt (a batch
whose one call raised does not call the others again), a hung or cancelled async call held to
its own record, and a user's mistakes (an unordered batch output, a torch module's tuple, a
string of deps, a stage named like a chain, an ``open`` that raises) named, not mis-run."""

from __future__ import annotations

import asyncio
import collections
import threading

import pytest
from pyflink.datastream import AsyncFunction

from interference.executor import OperatorExecutor
from interference.executor.cancel import CANCELLED
from interference.executor.settings import OperatorExecutorSettings
from workload.operators import (BatchPolicy, OperatorError, OperatorStage, StagedOperator,
                                async_function_stage, chain_cpu_stages, stage, torch_stage)

#: in-flight records wait long enough for one batch of all of them
TOGETHER = BatchPolicy.up_to(8, max_queue_delay_us=50_000)


def _settings(max_attempts: int = 1) -> OperatorExecutorSettings:
    return OperatorExecutorSettings(cpu_workers=2, use_gpu="never", max_attempts=max_attempts)


def _outcomes(op: StagedOperator, records: list, max_attempts: int = 1, timeout: float = 10):
    with OperatorExecutor(op, _settings(max_attempts)) as ex:
        futures = [ex.submit(f"r{i}", r) for i, r in enumerate(records)]
        try:
            return [f.result(timeout=timeout) for f in futures]
        finally:  # a record still running (a failure) must not hold the executor's close
            for f in futures:
                f.cancel()


# ---------------------------------------------------------------- one call per record


def _posting_operator(kind: str, calls: collections.Counter) -> StagedOperator:
    """An operator whose call per record is a side effect (an HTTP POST): record 3's fails."""
    async def post(x):
        calls[x] += 1
        await asyncio.sleep(0.005)
        if x == 3:
            raise ValueError("HTTP 500 for 3")
        return x

    class Post(AsyncFunction):
        async def async_invoke(self, x):
            return [await post(x)]

    made = stage("post", post, batch=TOGETHER) if kind == "async def" \
        else async_function_stage("post", Post(), batch=TOGETHER)
    return StagedOperator("poster", [made])


@pytest.mark.parametrize("kind", ["async def", "AsyncFunction"])
@pytest.mark.parametrize("max_attempts", [1, 2])
def test_a_raising_call_fails_its_record_alone_and_the_others_are_called_once(kind,
                                                                              max_attempts):
    calls = collections.Counter()
    outcomes = _outcomes(_posting_operator(kind, calls), list(range(8)), max_attempts)
    assert [o.status for o in outcomes] == ["OK"] * 3 + ["FAILED"] + ["OK"] * 4
    assert "HTTP 500 for 3" in outcomes[3].error
    assert calls == {x: (max_attempts if x == 3 else 1) for x in range(8)}


# ---------------------------------------------------------------- hung and cancelled calls


def test_cancelling_one_record_stops_its_hung_call_and_the_batch_completes():
    started, stopped = threading.Event(), threading.Event()

    async def lookup(x):
        if x == 0:
            started.set()
            try:
                await asyncio.sleep(3600)  # a call that never answers
            except asyncio.CancelledError:
                stopped.set()
                raise
        await asyncio.sleep(0.01)
        return x

    op = StagedOperator("lookup", [stage("lookup", lookup, batch=TOGETHER)])
    with OperatorExecutor(op, _settings()) as ex:
        futures = [ex.submit(f"r{i}", i) for i in range(4)]
        assert started.wait(timeout=5)
        futures[0].cancel()  # what Flink's async timeout does to the record's call
        try:
            healthy = [f.result(timeout=3) for f in futures[1:]]
        finally:
            for f in futures:
                f.cancel()
    assert [(o.status, o.outputs) for o in healthy] == [("OK", [i]) for i in (1, 2, 3)]
    assert stopped.wait(timeout=3)


def test_a_hung_async_def_call_times_out_alone(monkeypatch):
    monkeypatch.setattr("workload.operators.ASYNC_TIMEOUT_S", 0.2)

    async def lookup(x):
        if x == 0:
            await asyncio.sleep(3600)
        if x == 1:
            raise TimeoutError("the upstream's own timeout")  # the user's, passed as it is
        return x

    op = StagedOperator("lookup", [stage("lookup", lookup, batch=TOGETHER)])
    outcomes = _outcomes(op, [0, 1, 2, 3], timeout=5)
    assert [o.status for o in outcomes] == ["FAILED", "FAILED", "OK", "OK"]
    assert "took longer than 0.2 s" in outcomes[0].error
    assert "the upstream's own timeout" in outcomes[1].error
    assert CANCELLED not in outcomes[0].error


# ---------------------------------------------------------------- the user's mistakes named


def test_a_stage_named_like_a_chain_of_two_others_keeps_working():
    op = StagedOperator("op", [
        stage("a", str.split), stage("b", len, deps=("a",)),
        stage("a+b", lambda xs: [2 * x for x in xs], batched=True, batch=TOGETHER,
              deps=("b",)),
    ])
    chained = chain_cpu_stages(op)
    names = [s.name for s in chained.stages]
    assert len(set(names)) == len(names) == 2 and "a+b" in names
    assert chained.run_record("x y z") == op.run_record("x y z") == [6]
    assert [o.outputs for o in _outcomes(op, ["x y z", "w"])] == [[6], [2]]


@pytest.mark.parametrize("outputs, kind", [
    (lambda xs: {2 * x for x in xs}, "set"),
    (lambda xs: frozenset(2 * x for x in xs), "frozenset"),
    (lambda xs: {x: 2 * x for x in xs}, "dict"),
])
def test_a_batch_returned_in_an_unordered_container_is_refused_naming_the_stage(outputs,
                                                                                 kind):
    with pytest.raises(OperatorError, match=f"stage 'double' returned a {kind}: .* order"):
        stage("double", outputs, batched=True, batch=4).run([3, 1, 2], "cpu")


def test_an_unordered_batch_from_a_stages_own_run_fails_each_record_naming_the_stage():
    op = StagedOperator("op", [OperatorStage("double", lambda xs, device: {2 * x for x in xs},
                                             batch=TOGETHER)])
    outcomes = _outcomes(op, [3, 1, 2])
    assert [o.status for o in outcomes] == ["FAILED"] * 3
    assert all("stage 'double' returned a set" in o.error for o in outcomes)


@pytest.mark.parametrize("forward, said", [
    (lambda layer, x: (layer(x), x), "returned a tuple"),
    (lambda layer, x: {"logits": layer(x)}, "returned a dict"),
    (lambda layer, x: layer(x).sum(), r"returned a tensor of shape \(\)"),
])
def test_a_torch_module_that_does_not_return_one_tensor_row_per_input_is_named(forward, said):
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)

        def forward(self, x):
            return forward(self.layer, x.float())

    with pytest.raises(OperatorError, match=f"module 'net' {said}.* must return"):
        torch_stage(Net(), name="net", device="cpu").run([[1, 2], [3, 4]], "cpu")


@pytest.mark.parametrize("make", [
    lambda: stage("count", len, deps="parse"),
    lambda: torch_stage(object, name="count", deps="parse"),
    lambda: OperatorStage("count", lambda xs, device: xs, deps="ab"),
])
def test_deps_given_as_one_string_is_refused_not_split_into_letters(make):
    with pytest.raises(OperatorError, match="deps must be a sequence of stage names"):
        make()


@pytest.mark.parametrize("fails, closed", [
    ("function", []),
    ("first", ["function"]),
    ("second", ["first", "function"]),
])
def test_what_was_opened_before_an_open_raised_is_closed_once(fails, closed):
    log: list[str] = []

    def opener(name):
        def open_(_context):
            if name == fails:
                raise RuntimeError(f"{name} cannot open")
        return open_

    def closer(name):
        return lambda: log.append(name)

    op = StagedOperator("op", [
        OperatorStage("first", lambda xs, d: xs, open=opener("first"), close=closer("first")),
        OperatorStage("second", lambda xs, d: xs, deps=("first",), open=opener("second"),
                      close=closer("second")),
    ], on_open=opener("function"), on_close=closer("function"))
    with pytest.raises(RuntimeError, match=f"{fails} cannot open"):
        OperatorExecutor(op, _settings())
    op.close()  # not opened: closes nothing more
    assert log == closed
