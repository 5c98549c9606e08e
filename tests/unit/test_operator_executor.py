"""The executor for users' own operators on this machine's CPU cores: outputs equal the
unbatched reference, batches really form (and never exceed their limit), the queue delay holds,
bad records fail alone, every scheduler places user stages with measured estimates, and the
executor's lifecycle (asyncio, close, snapshot, report) works."""

from __future__ import annotations

import asyncio
import doctest
import json
import logging
import subprocess
import sys
import threading
import time

import pytest

from interference.executor import (OperatorExecutor, OperatorExecutorSettings, RecordOutcome,
                                   StageRun)
from interference.executor import batching as batching_module
from interference.executor import corun as corun_module
from interference.executor import dispatch as dispatch_module
from interference.executor import lanes as lanes_module
from interference.executor import stage_costs as stage_costs_module
from interference.executor import operator_executor as operator_executor_module
from interference.executor import operator_records as operator_records_module
from interference.executor import results as results_module
from interference.executor import settings as settings_module
from interference.executor.batching import MAX_CALL_GROUP
from interference.executor.stage_costs import MeasuredStageCosts
from interference.schedulers import NODE_SCHEDULERS, make_node_scheduler, validate_assignments
from workload.model import ComputingUnit, Stage
from workload.operators import (BatchPolicy, OperatorStage, StagedOperator, as_operator, stage,
                                torch_stage)

TIMEOUT = 60


def settings(**overrides) -> OperatorExecutorSettings:
    return OperatorExecutorSettings(**{"cpu_workers": 2, "use_gpu": "never", **overrides})


def run_all(executor: OperatorExecutor, records, prefix: str = "r") -> list[RecordOutcome]:
    futures = [executor.submit(f"{prefix}{i}", r) for i, r in enumerate(records)]
    return [f.result(timeout=TIMEOUT) for f in futures]


def diamond(calls: list[int] | None = None, policy=None) -> StagedOperator:
    """parse -> (left batched, right any) -> join(dict of both)."""
    def left(xs):
        if calls is not None:
            calls.append(len(xs))
        return [x * 3 + 1 for x in xs]

    return StagedOperator("diamond", [
        stage("parse", lambda s: int(s), device="cpu"),
        stage("left", left, deps=("parse",), batched=True,
              batch=policy or BatchPolicy.up_to(8, max_queue_delay_us=20_000)),
        stage("right", lambda x: -x, deps=("parse",), device="any", batch=4),
        stage("join", lambda d: (d["left"], d["right"]), deps=("left", "right")),
    ])


# ---------------------------------------------------------------------------------- outputs
def test_a_diamond_dag_gives_the_reference_outputs_in_dependency_order():
    records = [str(i) for i in range(30)]
    expected = [diamond().run_record(r) for r in records]
    with OperatorExecutor(diamond(), settings()) as executor:
        outcomes = run_all(executor, records)
    assert [o.outputs for o in outcomes] == expected
    assert [o.record_id for o in outcomes] == [f"r{i}" for i in range(30)]
    for outcome in outcomes:
        assert outcome.status == "OK" and outcome.error is None and outcome.traceback is None
        runs = {r.stage: r for r in outcome.stages}
        assert sorted(runs) == ["join", "left", "parse", "right"]  # each stage once
        for name, deps in (("left", ["parse"]), ("right", ["parse"]),
                           ("join", ["left", "right"])):
            for dep in deps:
                assert runs[name].started_at_ms >= runs[dep].finished_at_ms, (name, dep)
        for run in outcome.stages:
            assert isinstance(run, StageRun) and run.unit in ("cpu:0", "cpu:1")
            # the per-record stages run in call groups of what is ready (MAX_CALL_GROUP);
            # the batched ones at most their policies' sizes
            most = {"left": 8, "right": 4}.get(run.stage, MAX_CALL_GROUP)
            assert run.attempts == 1 and 1 <= run.batch_size <= most
            assert outcome.started_at_ms <= run.started_at_ms <= run.finished_at_ms \
                <= outcome.finished_at_ms
        assert outcome.queue_ms >= 0 and outcome.service_ms > 0 and outcome.work_ms > 0


def test_a_flat_operator_gives_each_records_outputs():
    class Words:  # a FlatMapFunction as a user writes it
        def flat_map(self, value):
            for word in value.split():
                yield word.upper()

    records = ["a bb", "", "c d e", "x"]
    expected = [as_operator(Words()).run_record(r) for r in records]
    assert expected[1] == [] and expected[2] == ["C", "D", "E"]
    with OperatorExecutor(Words(), settings()) as executor:
        assert [o.outputs for o in run_all(executor, records)] == expected


@pytest.fixture(scope="module")
def linear():
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))
    generator = torch.Generator().manual_seed(1)
    return model, [torch.randn(16, generator=generator) for _ in range(48)]


def test_a_torch_stage_batched_on_cpu_matches_the_unbatched_outputs(linear):
    model, records = linear
    policy = BatchPolicy.up_to(16, max_queue_delay_us=20_000)
    raw = StagedOperator("mlp", [torch_stage(model, device="gpu", batch=policy)])
    argmax = StagedOperator("mlp-argmax", [torch_stage(
        model, device="any", batch=policy, postprocess=lambda row: int(row.argmax()))])
    expected_raw = [raw.run_record(r)[0] for r in records]
    expected_argmax = [argmax.run_record(r) for r in records]
    raw.close(), argmax.close()
    with OperatorExecutor(raw, settings()) as executor:
        outcomes = run_all(executor, records)
        assert executor.batch_report()["model"]["cpu"]["mean_inputs"] > 1  # it did batch
    for outcome, want in zip(outcomes, expected_raw):
        assert outcome.status == "OK", outcome.error
        assert outcome.outputs[0] == pytest.approx(want, rel=1e-5, abs=1e-6)
    with OperatorExecutor(argmax, settings()) as executor:
        assert [o.outputs for o in run_all(executor, records)] == expected_argmax


# ---------------------------------------------------------------------------------- batching
def test_ready_inputs_of_different_records_are_batched_up_to_the_limit():
    calls: list[int] = []
    with OperatorExecutor(diamond(calls), settings()) as executor:
        outcomes = run_all(executor, [str(i) for i in range(40)])
        report = executor.batch_report()
    assert all(o.status == "OK" for o in outcomes)
    assert sum(calls) == 40 and max(calls) > 1 and max(calls) <= 8, calls
    left = report["left"]["cpu"]
    assert left["batches"] == len(calls) and left["mean_inputs"] == pytest.approx(40 / len(calls))
    assert left["batch_size"] == 8  # no latency target: the largest preferred size
    assert 0 < left["p50_ms"] <= left["p99_ms"]
    # no batch policy: one call per input, in call groups of the inputs ready at once
    assert 1.0 <= report["parse"]["cpu"]["mean_inputs"] <= MAX_CALL_GROUP
    json.dumps(report)
    assert max(r.batch_size for o in outcomes for r in o.stages if r.stage == "left") == max(calls)


def test_batching_off_gives_every_call_one_input():
    calls: list[int] = []
    with OperatorExecutor(diamond(calls), settings(batching=False)) as executor:
        outcomes = run_all(executor, [str(i) for i in range(40)])
        assert executor.batch_report()["left"]["cpu"]["batch_size"] == 1
    assert all(o.status == "OK" for o in outcomes) and calls == [1] * 40


def test_a_lone_record_waits_about_the_queue_delay_and_no_longer():
    delay_s = 0.05
    op = StagedOperator("wait", [stage("x", lambda xs: xs, batched=True, batch=BatchPolicy.up_to(
        64, max_queue_delay_us=int(delay_s * 1e6)))])
    with OperatorExecutor(op, settings()) as executor:
        executor.submit("warm", 0).result(timeout=TIMEOUT)
        start = time.perf_counter()
        outcome = executor.submit("alone", 1).result(timeout=TIMEOUT)
        elapsed = time.perf_counter() - start
    assert outcome.status == "OK" and outcome.outputs == [1]
    assert delay_s * 0.9 <= elapsed <= delay_s + 0.5, elapsed
    assert outcome.stages[0].batch_size == 1


def test_a_latency_target_starts_small_and_grows():
    op = StagedOperator("grow", [stage("x", lambda xs: xs, batched=True, batch=BatchPolicy.up_to(
        8, max_queue_delay_us=5000, latency_target_ms=1000.0))])
    with OperatorExecutor(op, settings()) as executor:
        first = executor.sizer.choose("x", "cpu")
        for wave in range(6):
            run_all(executor, list(range(16)), prefix=f"w{wave}-")
        assert first == 1 and executor.sizer.choose("x", "cpu") == 8


# ---------------------------------------------------------------------------------- failures
def test_records_that_raise_fail_alone_and_the_rest_of_their_batch_succeeds():
    calls: list[int] = []

    def check(xs):
        calls.append(len(xs))
        for x in xs:
            if x < 0:
                raise ValueError(f"negative value {x}")
        return [x * 2 for x in xs]

    op = StagedOperator("check", [stage("check", check, batched=True,
                                        batch=BatchPolicy.up_to(8, max_queue_delay_us=20_000))])
    values = [(-1) ** i * i for i in range(1, 25)]  # every other one negative
    with OperatorExecutor(op, settings(max_attempts=2)) as executor:
        outcomes = run_all(executor, values)
        snap = executor.snapshot()
    assert max(calls) > 1  # failing batches held good records too
    for value, outcome in zip(values, outcomes):
        if value < 0:
            assert outcome.status == "FAILED" and outcome.outputs == []
            assert outcome.error.startswith("stage 'check' failed after 2 attempt(s), last "
                                            "on cpu:"), outcome.error
            assert outcome.error.endswith(f"ValueError: negative value {value}")
            assert outcome.traceback.startswith("Traceback") and "ValueError" in \
                outcome.traceback and len(outcome.traceback) <= 4000
        else:
            assert outcome.status == "OK" and outcome.outputs == [value * 2], outcome.error
    assert snap["failed"] == 12 and snap["completed"] == 12 and snap["in_flight"] == 0


@pytest.mark.parametrize("checked_by", ["executor", "stage"])
def test_a_wrong_output_count_fails_the_records_instead_of_hanging(checked_by):
    if checked_by == "executor":  # a raw stage function: the executor counts
        bad = OperatorStage("bad", lambda inputs, device: list(inputs) + [None],
                            batch=BatchPolicy.up_to(4, max_queue_delay_us=5000))
    else:  # stage(batched=True) checks itself
        bad = stage("bad", lambda xs: xs[:1] + xs, batched=True, batch=4)
    with OperatorExecutor(StagedOperator("bad", [bad]), settings()) as executor:
        outcomes = run_all(executor, list(range(6)))
    for outcome in outcomes:
        assert outcome.status == "FAILED" and "outputs for" in outcome.error, outcome.error


def test_a_transient_failure_is_retried_and_counted():
    seen = []

    def flaky(x):
        seen.append(x)
        if len(seen) == 1:
            raise RuntimeError("transient")
        return x + 1

    with OperatorExecutor(StagedOperator("flaky", [stage("f", flaky)]), settings()) as executor:
        outcome = executor.submit("r", 1).result(timeout=TIMEOUT)
    assert outcome.status == "OK" and outcome.outputs == [2] and outcome.stages[0].attempts == 2


def test_bad_requests_and_duplicate_ids_fail_with_a_reason():
    gate = threading.Event()
    op = StagedOperator("slow", [stage("s", lambda x: gate.wait(30) and x)])
    with OperatorExecutor(op, settings()) as executor:
        for size in (-1, 2.5, "3", True):
            outcome = executor.submit("bad", "x", size).result(timeout=5)
            assert outcome.status == "FAILED" and "task_size" in outcome.error, size
        first = executor.submit("dup", 1)
        second = executor.submit("dup", 2).result(timeout=TIMEOUT)
        gate.set()
        assert second.status == "FAILED" and "already in flight" in second.error
        assert first.result(timeout=TIMEOUT).outputs == [1]


# ---------------------------------------------------------------------------------- schedulers
@pytest.mark.parametrize("name", sorted(NODE_SCHEDULERS))
def test_every_scheduler_places_user_stages_on_measured_estimates(name, caplog):
    records = [str(i) for i in range(24)]
    expected = [diamond().run_record(r) for r in records]
    with caplog.at_level(logging.WARNING, logger="interference.executor.dispatch"):
        with OperatorExecutor(diamond(), settings(scheduler=name)) as executor:
            outcomes = run_all(executor, records)
    assert [o.outputs for o in outcomes] == expected
    assert not [r for r in caplog.records if "FCFS this round" in r.getMessage()]  # no fallback


@pytest.mark.parametrize("name", sorted(NODE_SCHEDULERS))
def test_schedulers_read_measured_costs_for_stage_names_they_do_not_know(name):
    costs = MeasuredStageCosts({"embed": "gpu", "tokenize": "cpu", "score": "any"})
    scheduler = make_node_scheduler(name, costs)
    units = [ComputingUnit("cpu:0", "cpu"), ComputingUnit("cpu:1", "cpu"),
             ComputingUnit("gpu:0", "gpu", model="t4", capacity=2, memory_mb=16_000)]
    ready = [Stage(f"b{i}", "user_op", s, 100, gpu_capable=s != "tokenize", ready_at_s=i)
             for i, s in enumerate(["embed", "tokenize", "score", "embed"])]
    for i, stage_ in enumerate(ready):
        costs.register(stage_.task_id, stage_.stage, stage_.input_size, i + 1)
    assignments = scheduler.assign(ready, units, now_s=0.0)
    validate_assignments(assignments, ready, units)
    assert assignments
    costs.add_run("embed", "gpu", 2, 4.0)
    costs.add_run("embed", "cpu", 2, 40.0)
    assert costs.stage("embed").gpu_speedup == pytest.approx(10.0)


def test_a_given_scheduler_gets_the_measured_costs():
    scheduler = make_node_scheduler("mct")
    with OperatorExecutor(diamond(), settings(), scheduler=scheduler) as executor:
        assert isinstance(scheduler.costs, MeasuredStageCosts)
        assert run_all(executor, ["1", "2"])[1].outputs == [(7, -2)]


# ---------------------------------------------------------------------------------- GPU rules
class _FakeStream:
    """Stands in for a torch.cuda.Stream on this CPU-only machine."""

    def __init__(self, device=None):
        self.device = device

    def synchronize(self):
        return None


@pytest.fixture
def fake_gpu(monkeypatch):
    """The executor sees two cores and one GPU (two stream lanes); stages get "cuda:0" there."""
    import contextlib

    import torch
    monkeypatch.setattr(torch.cuda, "Stream", _FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    units = [ComputingUnit("cpu:0", "cpu"), ComputingUnit("cpu:1", "cpu"),
             ComputingUnit("gpu:0", "gpu", model="t4", capacity=2, memory_mb=16_000)]
    monkeypatch.setattr(operator_executor_module, "discover_units", lambda s: list(units))
    return units


def _where(log: list, name: str):
    def run(x, device):
        log.append((name, device))
        return x + 1
    return run


@pytest.mark.parametrize("name", ["iawp", "pats", "fcfs", "mct"])
def test_gpu_stages_run_on_the_gpu_cpu_stages_on_cores(fake_gpu, name):
    log: list = []
    op = StagedOperator("devices", [
        stage("prep", _where(log, "prep"), device="cpu"),
        stage("embed", _where(log, "embed"), deps=("prep",), device="gpu",
              batch=BatchPolicy.up_to(4, max_queue_delay_us=2000)),
        stage("post", _where(log, "post"), deps=("embed",), device="any", batch=4),
    ])
    with OperatorExecutor(op, settings(scheduler=name, interference="cosine")) as executor:
        assert [u.unit_id for u in executor.units] == ["cpu:0", "cpu:1", "gpu:0"]
        outcomes = run_all(executor, list(range(40)))
    assert [o.outputs for o in outcomes] == [[i + 3] for i in range(40)]
    devices = {}
    for stage_name, device in log:
        devices.setdefault(stage_name, set()).add(device)
    assert devices["prep"] == {"cpu"} and devices["embed"] == {"cuda:0"}
    assert devices["post"] <= {"cpu", "cuda:0"}
    for outcome in outcomes:
        units = {r.stage: r.unit for r in outcome.stages}
        assert units["prep"].startswith("cpu:") and units["embed"] == "gpu:0"


def test_a_gpu_out_of_memory_reruns_the_batch_on_a_core(fake_gpu):
    import torch
    calls: list = []

    def model(xs, device):
        calls.append((len(xs), device))
        if device.startswith("cuda"):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        return [x * 10 for x in xs]

    op = StagedOperator("oom", [stage("model", model, device="gpu", batched=True,
                                      batch=BatchPolicy.up_to(4, max_queue_delay_us=20_000))])
    with OperatorExecutor(op, settings(scheduler="fcfs", max_attempts=2)) as executor:
        outcomes = run_all(executor, list(range(8)))
    assert [o.outputs for o in outcomes] == [[i * 10] for i in range(8)]
    assert all(o.stages[0].unit.startswith("cpu:") for o in outcomes)
    assert {d for _, d in calls} == {"cpu", "cuda:0"}
    assert max(n for n, d in calls if d == "cpu") > 1  # a batch stays a batch on the core


def test_measured_gpu_co_runs_feed_the_schedulers_interference_model(fake_gpu):
    from interference.schedulers.fcfs import FcfsScheduler

    class Spy(FcfsScheduler):
        def __init__(self):
            super().__init__()
            self.observed: list = []

        def observe_corun(self, stage, partner, gpu_model, measured_rate):
            self.observed.append((stage, partner, gpu_model, measured_rate))

    def nap(x):
        time.sleep(0.02)  # sleeps release the GIL: two GPU lanes really overlap
        return x

    spy = Spy()
    op = StagedOperator("naps", [stage("nap", nap, device="gpu")])
    with OperatorExecutor(op, settings(), scheduler=spy) as executor:
        for i in range(3):  # alone on the GPU: the baseline (the first call is skipped)
            executor.submit(f"alone{i}", i).result(timeout=TIMEOUT)
        run_all(executor, list(range(8)), prefix="pair")
        learned = executor.learned_slowdowns()
    assert spy.observed, "no GPU co-run reached the scheduler"
    for stage_name, partner, gpu_model, rate in spy.observed:
        assert (stage_name, partner, gpu_model) == ("nap", "nap", "t4") and 0.0 <= rate <= 1.0
    assert learned[("nap", ("nap",), "gpu")]["count"] >= 1


# ---------------------------------------------------------------------------------- lifecycle
def test_run_works_in_asyncio_with_few_slots_and_snapshot_has_the_router_keys():
    async def main(executor):
        return await asyncio.gather(*(executor.run(f"a{i}", str(i), task_size=10)
                                      for i in range(10)))

    with OperatorExecutor(diamond(), settings(max_in_flight=2)) as executor:
        outcomes = asyncio.run(main(executor))
        snap = executor.snapshot()
    assert [o.outputs for o in outcomes] == [[(3 * i + 1, -i)] for i in range(10)]
    assert {"node_id", "in_flight", "queue_depth", "completed", "failed", "cpu_util",
            "host_mem_util", "gpu_util", "gpu_mem_util"} <= set(snap)
    assert snap["completed"] == 10 and snap["in_flight"] == snap["queue_depth"] == 0
    for key in ("cpu_util", "host_mem_util", "gpu_util", "gpu_mem_util"):
        assert 0.0 <= snap[key] <= 1.0, key


def test_a_torch_module_class_is_built_once_per_executor():
    import torch
    built = []

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            built.append(1)
            torch.manual_seed(0)
            self.linear = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.linear(x)

    with OperatorExecutor(Net, settings()) as executor:
        outcomes = run_all(executor, [[float(i)] * 4 for i in range(12)])
    assert all(o.status == "OK" and len(o.outputs[0]) == 2 for o in outcomes)
    assert built == [1]


def test_a_cancelled_record_is_dropped_and_the_executor_keeps_running():
    gate = threading.Event()
    op = StagedOperator("gated", [stage("wait", lambda x: gate.wait(30) and x),
                                  stage("after", lambda x: x + 1, deps=("wait",))])

    async def main(executor):
        task = asyncio.ensure_future(executor.run("gone", 1))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gate.set()
        return await executor.run("kept", 2)

    # cancellation is seen between stages: keep the two steps two stages (no chaining)
    with OperatorExecutor(op, settings(chain_cpu_stages=False)) as executor:
        assert asyncio.run(main(executor)).outputs == [3]
        for _ in range(100):
            if executor.snapshot()["failed"] == 1:
                break
            time.sleep(0.02)
        snap = executor.snapshot()
    assert snap["failed"] == 1 and snap["completed"] == 1 and snap["in_flight"] == 0


def test_open_and_close_run_once_and_close_is_idempotent():
    opened, closed = [], []
    op = StagedOperator("life", [stage("s", lambda x: x)], on_open=opened.append,
                        on_close=lambda: closed.append(1))
    executor = OperatorExecutor(op, settings(), runtime_context="ctx")
    futures = [executor.submit(f"c{i}", i) for i in range(5)]
    executor.close()
    assert all(f.done() and f.result().status == "OK" for f in futures)
    executor.close()
    assert opened == ["ctx"] and closed == [1]
    with pytest.raises(RuntimeError, match="closed"):
        executor.submit("late", 1)


def test_the_work_multiplier_repeats_every_call(monkeypatch):
    counts: list[int] = []
    monkeypatch.setenv("STREAMPLACE_WORK_MULTIPLIER", "3")
    monkeypatch.setenv("STREAMPLACE_NODE_ID", "tm_slow")
    config = OperatorExecutorSettings.from_env(cpu_workers=1, use_gpu="never")
    assert (config.repeats, config.node_id) == (3, "tm_slow")
    op = StagedOperator("rep", [stage("s", lambda x: counts.append(x) or x)])
    with OperatorExecutor(op, config) as executor:
        assert executor.submit("r", 7).result(timeout=TIMEOUT).outputs == [7]
        assert executor.snapshot()["node_id"] == "tm_slow"
    assert counts == [7, 7, 7]


def test_settings_are_validated():
    with pytest.raises(ValueError, match="interference"):
        OperatorExecutorSettings(interference="psychic")
    with pytest.raises(ValueError, match="max_attempts"):
        OperatorExecutorSettings(max_attempts=0)


def test_a_pure_python_operator_never_imports_torch():
    code = ("import sys\n"
            "from interference.executor import OperatorExecutor, OperatorExecutorSettings\n"
            "with OperatorExecutor(str.upper, OperatorExecutorSettings(cpu_workers=1)) as ex:\n"
            "    assert ex.submit('r', 'hi').result(timeout=60).outputs == ['HI']\n"
            "print('torch' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize("module", [operator_executor_module, batching_module, corun_module,
                                    lanes_module, stage_costs_module, results_module,
                                    operator_records_module, settings_module, dispatch_module])
def test_docstring_examples(module):
    assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0


def test_per_record_cpu_steps_are_chained_into_one_call_with_the_same_outputs():
    calls = []
    op = StagedOperator("chain", [
        stage("parse", lambda x: calls.append("parse") or int(x)),
        stage("double", lambda x: calls.append("double") or 2 * x, deps=("parse",)),
        stage("model", lambda xs: [x + 1 for x in xs], deps=("double",), batched=True,
              batch=BatchPolicy.up_to(8, max_queue_delay_us=20_000)),
        stage("label", lambda both: f"{both['parse']}->{both['model']}",
              deps=("parse", "model")),
    ])
    records = [str(i) for i in range(20)]
    with OperatorExecutor(op, settings()) as executor:
        outcomes = run_all(executor, records)
        report = executor.batch_report()
    assert [o.outputs for o in outcomes] == [op.run_record(r) for r in records]
    # parse and double ran as one stage; the batched model and the label kept theirs
    assert set(report) == {"parse+double", "model", "label"}
    assert calls.count("parse") == calls.count("double") == 40  # 20 here + 20 references


def test_a_one_step_cpu_operator_takes_the_direct_path_with_the_same_outcomes():
    from interference.executor import DirectExecutor, operator_executor_for
    attempts = []

    def parse(text):
        attempts.append(text)
        if text.startswith("-"):
            raise ValueError(f"negative: {text}")
        return int(text) * 2

    records = ["1", "-2", "3", "4"]
    with operator_executor_for([str.strip, parse], settings()) as executor:
        assert isinstance(executor, DirectExecutor)  # two CPU steps chain into one
        outcomes = [executor.submit(f"r{i}", r).result(10) for i, r in enumerate(records)]
        snap = executor.snapshot()
        report = executor.batch_report()
    assert [o.outputs for o in outcomes] == [[2], [], [6], [8]]
    bad = outcomes[1]
    assert bad.status == "FAILED" and "ValueError: negative: -2" in bad.error
    assert "Traceback" in bad.traceback and bad.stages[0].attempts == 2
    assert attempts.count("-2") == 2  # retried up to max_attempts, then failed
    assert (snap["completed"], snap["failed"], snap["in_flight"]) == (3, 1, 0)
    assert report["strip+parse"]["cpu"]["batches"] == 5


@pytest.mark.parametrize("operator,direct", [
    (str.upper, True),
    ([str.strip, str.upper], True),
    (StagedOperator("b", [stage("b", lambda xs: xs, batched=True, batch=4)]), False),
    (StagedOperator("g", [stage("g", str.upper, device="gpu")]), False),
])
def test_which_operators_run_directly(operator, direct):
    from interference.executor import DirectExecutor, operator_executor_for
    with operator_executor_for(operator, settings()) as executor:
        assert isinstance(executor, DirectExecutor) is direct
        assert executor.submit("r", "ab").result(10).status == "OK"
