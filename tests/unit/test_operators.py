"""The user's operator model (workload.operators) and how the router describes records."""

from __future__ import annotations

import json

import pytest
import torch

from pyflink_jobs.router_function import (MAX_TASK_SIZE, OperatorRecords, Refused,
                                          TaskEventRecords)
from workload.operators import (BatchPolicy, OperatorError, StagedOperator, as_operator,
                                record_size, stage, torch_stage)
from flink_fakes import FakeContext


class Doubler:  # a MapFunction-shaped object, without importing pyflink
    opened = closed = 0

    def open(self, runtime_context):
        Doubler.opened += 1
        self.k = 2

    def map(self, value):
        return value * self.k

    def close(self):
        Doubler.closed += 1


class Splitter:
    def flat_map(self, value):
        yield from value.split()


class KeyedThing:
    def process_element(self, value, ctx):
        yield value


@pytest.mark.parametrize("operator,record,expected", [
    (str.upper, "hi", ["HI"]),
    (lambda x: x + 1, 1, [2]),
    (Splitter(), "a b c", ["a", "b", "c"]),
    ([str.strip, str.upper, len], "  ab ", [2]),
    ([json.loads, lambda rec, obj: f"{rec}->{obj['n'] * 2}"], '{"n": 4}', ['{"n": 4}->8']),
], ids=["builtin", "lambda", "flat_map", "pipeline", "pipeline_with_record"])
def test_every_operator_form_gives_the_functions_outputs(operator, record, expected):
    assert as_operator(operator).run_record(record) == expected


def test_map_function_open_and_close_run_once_per_instance():
    Doubler.opened = Doubler.closed = 0
    op = as_operator(Doubler())
    assert op.run_record(3) == [6] and op.run_record(4) == [8]
    op.close()
    op.close()
    assert (Doubler.opened, Doubler.closed) == (1, 1)


def test_a_diamond_of_named_stages_runs_in_dependency_order():
    op = StagedOperator("diamond", [
        stage("join", lambda both: both["left"] + both["right"], deps=("left", "right")),
        stage("left", lambda x: x * 10, deps=("parse",)),
        stage("right", lambda x: -x, deps=("parse",)),
        stage("parse", int),
    ])
    assert op.order.index("parse") == 0 and op.order[-1] == "join"
    assert op.run_record("3") == [27]


@pytest.mark.parametrize("stages,message", [
    ([], "at least one stage"),
    ([stage("a", str), stage("a", str)], "unique"),
    ([stage("a", str, deps=("b",))], "unknown stages"),
    ([stage("a", str, deps=("b",)), stage("b", str, deps=("a",))], "cycle"),
    ([stage("a", str), stage("b", str)], "exactly one sink"),
])
def test_bad_stage_graphs_are_refused_with_the_reason(stages, message):
    with pytest.raises(OperatorError, match=message):
        StagedOperator("op", stages)


def test_keyed_or_stateful_operators_are_refused_with_why():
    with pytest.raises(OperatorError, match="no ProcessFunction context"):
        as_operator(KeyedThing())
    with pytest.raises(OperatorError, match="cannot place"):
        as_operator(42)
    with pytest.raises(OperatorError, match="device"):
        stage("s", str, device="tpu")


def test_batch_policy_up_to_and_bounds():
    policy = BatchPolicy.up_to(32, max_queue_delay_us=500)
    assert policy.preferred_batch_sizes == (1, 2, 4, 8, 16, 32) and policy.max_batch_size == 32
    with pytest.raises(OperatorError):
        BatchPolicy((0, 4))
    with pytest.raises(OperatorError):
        BatchPolicy((4, 8), max_batch_size=4)


def test_a_torch_module_is_one_batched_stage_equal_to_running_it_per_record():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    model = torch_stage(net, batch=16, postprocess=lambda row: int(row.argmax()))
    assert model.batch.max_batch_size == 16 and model.gpu_capable
    op = StagedOperator("net", [model])
    op.open(None)
    inputs = [torch.randn(8).tolist() for _ in range(10)]
    batched = model.run(inputs, "cpu")
    assert batched == [op.run_record(x)[0] for x in inputs]
    with torch.inference_mode():
        assert batched == [int(net(torch.tensor(x)).argmax()) for x in inputs]


def test_a_batched_stage_must_return_one_output_per_input():
    broken = stage("b", lambda xs: xs[:-1], batched=True)
    with pytest.raises(OperatorError, match="2 outputs for 3 inputs"):
        broken.run([1, 2, 3], "cpu")


def test_default_task_type_and_size_and_user_extractors():
    op = as_operator(str.upper, name="shout")
    assert op.task_type("abc") == "shout" and op.task_size("héllo") == 6
    sized = as_operator(str.upper, task_type=lambda r: r[:1], task_size=len)
    assert (sized.task_type("xyz"), sized.task_size("xyz")) == ("x", 3)
    assert record_size(b"\x00\x01") == 2 and record_size({"a": 1}) == len('{"a":1}')
    assert (record_size("abc"), record_size("héllo"), record_size("\ud800")) == (3, 6, 1)
    with pytest.raises(OperatorError, match="int >= 0"):
        as_operator(str, task_size=lambda r: -1).task_size("x")


# -- how the router describes records ---------------------------------------------------------

def _reader(operator, **extractors):
    reader = OperatorRecords(as_operator(operator, **extractors))
    reader.open(None)
    return reader


def test_any_record_becomes_a_task_with_a_unique_id_and_the_record_untouched():
    reader = _reader(str.upper)
    first = reader.read('{"k": 1}')
    second = reader.read('{"k": 1}')
    assert first[0].task_id != second[0].task_id
    assert first[0].app_id == "upper" and first[0].input_size == len('{"k": 1}')
    assert first[1] == '{"k": 1}'


@pytest.mark.parametrize("extractors,kind", [
    ({"task_type": lambda r: 1 / 0}, "task_type"),
    ({"task_type": lambda r: ""}, "task_type"),
    ({"task_type": lambda r: "x" * 500}, "task_type"),
    ({"task_size": lambda r: -5}, "task_size"),
    ({"task_size": lambda r: MAX_TASK_SIZE + 1}, "task_size"),
    ({"task_size": lambda r: float("nan")}, "task_size"),
    ({"task_size": lambda r: r["missing"]}, "task_size"),
])
def test_records_the_users_extractors_fail_on_get_the_defaults_not_refused(extractors, kind):
    # the defaults: the operator's name ("str"), the record's serialized length
    reader = _reader(str, **extractors)
    task = reader.read({"value": 1})[0]
    assert (task.app_id, task.input_size) == ("str", record_size({"value": 1}))
    assert reader.descriptor_fallbacks == {"task_type": 0, "task_size": 0, kind: 1}


@pytest.mark.parametrize("value,stage_name", [
    (b"\x00garbage", "decode"),
    (("only", "two"), "shape"),
    (42, "shape"),
])
def test_task_event_reader_refuses_bad_bytes_and_unexpected_shapes(value, stage_name):
    reader = TaskEventRecords()
    reader.open(None)
    with pytest.raises(Refused) as refused:
        reader.read(value)
    assert refused.value.stage == stage_name




def test_a_one_step_operator_runs_inline_with_outputs_and_dead_letters_from_one_operator():
    from pyflink_jobs.executor_function import ExecutorFunctionSettings
    from pyflink_jobs.operator_function import DirectOperatorFunction
    from pyflink_jobs.routed import DecisionContext, RoutedRecord
    from workload.codec import decode

    def halve(text):
        return int(text) // 2

    function = DirectOperatorFunction("tm_a", as_operator(halve), ExecutorFunctionSettings(
        bootstrap_servers="127.0.0.1:1", feedback_interval_s=60.0))
    function.open(FakeContext())
    try:
        routed = [RoutedRecord(f"t{i}", "halve", 2, "tm_a", 0, DecisionContext(), text)
                  for i, text in enumerate(["8", "x", "6"])]
        emitted = [list(function.process_element(r, None)) for r in routed]
        record = function.feedback.build_record()
    finally:
        function.feedback.producer = None  # nothing to flush to an absent broker
        function.close()
    assert emitted[0] == [4] and emitted[2] == [3]
    (tag, dead), = emitted[1]
    letter = decode("DeadLetter", dead)
    assert letter["raw"] == b"x" and "ValueError" in letter["reason"]
    assert letter["stage"] == "operator:halve" and "Traceback" in letter["reason"]
    assert sorted(t["task_id"] for t in record["completed"]) == ["t0", "t1", "t2"]


def test_the_async_executor_function_reports_outputs_dead_letters_and_timings():
    import asyncio

    from pyflink_jobs.executor_function import ExecutorFunctionSettings
    from pyflink_jobs.operator_function import OperatorExecutorFunction
    from pyflink_jobs.routed import DecisionContext, RoutedRecord
    from workload.codec import decode

    op = StagedOperator("scale", [stage("parse", int),
                                  stage("scale", lambda xs: [10 * x for x in xs],
                                        deps=("parse",), batched=True, batch=8)])
    function = OperatorExecutorFunction("tm_a", op, ExecutorFunctionSettings(
        bootstrap_servers="127.0.0.1:1", feedback_interval_s=60.0, cpu_workers=1))
    function.open(FakeContext())
    try:
        routed = [RoutedRecord(f"t{i}", "scale", 1, "tm_a", 0, DecisionContext(), text)
                  for i, text in enumerate(["3", "y", "5"])]

        async def run_all():
            return await asyncio.gather(*[function.async_invoke(r) for r in routed])
        executed = [batch[0] for batch in asyncio.run(run_all())]
        record = function.feedback.build_record()
    finally:
        function.feedback.producer = None
        function.close()
    assert executed[0].outputs == (30,) and executed[2].outputs == (50,)
    assert decode("DeadLetter", executed[1].dead_letter)["raw"] == b"y"
    assert sorted(t["task_id"] for t in record["completed"]) == ["t0", "t1", "t2"]
    assert [r["stage"] for r in record["stage_batches"]] == ["parse", "scale"]


def test_a_dead_letter_keeps_at_most_the_capped_head_of_a_huge_record():
    from pyflink_jobs.flink_ops import (MAX_DEAD_LETTER_RAW_BYTES, dead_letter_raw,
                                        make_dead_letter)
    from workload.codec import decode

    huge = "y" * (3 * MAX_DEAD_LETTER_RAW_BYTES)
    raw = dead_letter_raw(huge)
    assert raw == b"y" * MAX_DEAD_LETTER_RAW_BYTES

    class Unshowable:
        def __str__(self):
            raise RuntimeError("no text form")

        def __repr__(self):
            return "<unshowable>"

    assert dead_letter_raw(Unshowable()) == b"<unshowable>"
    # make_dead_letter caps raw bytes handed to it directly, too
    letter = decode("DeadLetter", make_dead_letter(b"z" * (2 * MAX_DEAD_LETTER_RAW_BYTES),
                                                   "in", 0, 7, "boom", "operator:x"))
    assert len(letter["raw"]) == MAX_DEAD_LETTER_RAW_BYTES and letter["offset"] == 7


def test_the_inline_function_runs_chained_cpu_steps_and_refuses_an_operator_with_batches():
    from pyflink_jobs.executor_function import ExecutorFunctionSettings
    from pyflink_jobs.operator_function import DirectOperatorFunction
    from pyflink_jobs.routed import DecisionContext, RoutedRecord

    settings = ExecutorFunctionSettings(bootstrap_servers="127.0.0.1:1", feedback_interval_s=60.0)
    function = DirectOperatorFunction("tm_a", as_operator([str.strip, int]), settings)
    function.open(FakeContext())
    try:
        routed = RoutedRecord("t0", "strip", 3, "tm_a", 0, DecisionContext(), " 42 ")
        assert list(function.process_element(routed, None)) == [42]
    finally:
        function.feedback.producer = None
        function.close()
    batched = StagedOperator("scale", [stage("scale", lambda xs: xs, batched=True, batch=8)])
    with pytest.raises(ValueError, match="not one per-record CPU step"):
        DirectOperatorFunction("tm_a", batched, settings).open(FakeContext())
