"""What a user's operator sees and gets under the hook, as a plain ``map`` would give it (found
by running outside users' jobs against the hook, 2026-12-05):

- its runtime context numbers its instances over the whole job, not "0 of 1" per node
  (``pyflink_jobs.operator_context``), and refuses keyed state with the reason;
- ``close()`` runs before the hook's own feedback waits on a broker;
- it is called once per record by default (``HookSettings.max_attempts``);
- a None output that the output type cannot carry is a dead letter, not a failed job;
- a local (mini cluster) job reads feedback from the topic, needing no Kafka source."""

from __future__ import annotations

import pytest

from pyflink_jobs.executor_function import ExecutorFunctionSettings
from pyflink_jobs.operator_context import OperatorInstanceContext, StateNotAvailable, \
    operator_context
from pyflink_jobs.router import RouterNode
from workload.operators import as_operator

from flink_fakes import FakeContext

NODES = [RouterNode("tm_a", cpu_cores=2, instances=2), RouterNode("tm_b", cpu_cores=2),
         RouterNode("tm_c", cpu_cores=2, instances=3)]


class SubtaskContext(FakeContext):
    """Subtask ``index`` of ``count`` of one Flink operator."""

    def __init__(self, index: int, count: int):
        self.index, self.count = index, count

    def get_index_of_this_subtask(self):
        return self.index

    def get_number_of_parallel_subtasks(self):
        return self.count

    def get_task_name(self):
        return "streamplace-executor-tm_c"


# (first instance, own subtask of its operator, total) -> what the user's open() reads
NUMBERING = [
    ("no count known: Flink's own context", 0, (1, 2), 0, None),
    ("the first node's second instance", 0, (1, 2), 6, (1, 6)),
    ("a later node's instance", 3, (2, 3), 6, (5, 6)),
    ("a colocated router's", 0, (2, 3), 9, (2, 9)),
]


@pytest.mark.parametrize("why,first,own,total,expected", NUMBERING,
                         ids=[row[0] for row in NUMBERING])
def test_the_users_context_numbers_instances_over_the_whole_job(why, first, own, total,
                                                                  expected):
    inner = SubtaskContext(*own)
    context = operator_context(inner, first, total)
    if expected is None:
        assert context is inner, why
        return
    assert (context.get_index_of_this_subtask(),
            context.get_number_of_parallel_subtasks()) == expected, why
    assert context.get_metrics_group() is not None          # the rest is the inner context's
    assert context.get_task_name_with_subtasks() == \
        f"streamplace-executor-tm_c ({expected[0] + 1}/{expected[1]})"
    assert context.get_max_number_of_parallel_subtasks() == expected[1]


@pytest.mark.parametrize("getter", ["get_state", "get_list_state", "get_map_state",
                                    "get_reducing_state", "get_aggregating_state"])
def test_keyed_state_is_refused_with_the_reason(getter):
    context = OperatorInstanceContext(SubtaskContext(0, 1), 0, 3)
    with pytest.raises(StateNotAvailable, match="moves records between TaskManagers"):
        getattr(context, getter)(object())


def test_the_hook_counts_every_instance_of_the_operator_and_numbers_each_executor():
    from pyflink_jobs.hook import HookSettings, StreamplaceHook
    for routing, routers in (("pinned", 0), ("colocated", 3)):
        hook = StreamplaceHook(HookSettings(routing=routing, nodes=NODES,
                                            retired={"tm_d": "tm_a"}))
        hook.nodes = hook.settings.resolved_nodes()
        total = hook.settings.operator_instances(hook.nodes)
        assert total == routers + 2 + 1 + 3 + 1, routing    # + tm_d's operator on tm_a
        hook._operator_instances = total
        settings = hook.executor_settings(3, "tm_c", first_instance=routers + 3)
        opened = settings.user_context(SubtaskContext(2, 3))
        assert opened.get_index_of_this_subtask() == total - 2   # tm_c's last, then tm_d
        assert opened.get_number_of_parallel_subtasks() == total


class Numbered:
    """A MapFunction-like operator that numbers its outputs as PyFlink examples do."""

    def __init__(self, log):
        self.log = log

    def open(self, runtime_context):
        self.index = runtime_context.get_index_of_this_subtask()
        self.count = runtime_context.get_number_of_parallel_subtasks()
        self.seen = 0
        self.log.append(("open", self.index, self.count))

    def map(self, value):
        self.seen += 1
        return f"{value}:{self.seen * self.count + self.index}"

    def close(self):
        self.log.append(("close", self.index))


def _direct(operator, **settings):
    from pyflink_jobs.operator_function import DirectOperatorFunction
    return DirectOperatorFunction("tm_a", as_operator(operator), ExecutorFunctionSettings(
        bootstrap_servers="127.0.0.1:1", feedback_interval_s=60.0, **settings))


def _routed(*texts):
    from pyflink_jobs.routed import DecisionContext, RoutedRecord
    return [RoutedRecord(f"t{i}", "op", 2, "tm_a", 0, DecisionContext(), text)
            for i, text in enumerate(texts)]


def test_two_executor_instances_give_the_user_distinct_numbers_and_both_close():
    log = []
    functions = [_direct(Numbered(log), first_instance=first, operator_instances=2)
                 for first in (0, 1)]       # two nodes' executors, one instance each
    outputs = []
    for function in functions:
        function.open(SubtaskContext(0, 1))   # each alone in its Flink operator
        outputs += [out for r in _routed("a", "b") for out in function.process_element(r, None)]
    for function in functions:
        function.feedback.producer = None   # nothing to flush to an absent broker
        function.close()
    assert sorted(outputs) == ["a:2", "a:3", "b:4", "b:5"]   # no id twice
    assert ("open", 0, 2) in log and ("open", 1, 2) in log
    assert ("close", 0) in log and ("close", 1) in log


def test_the_users_close_runs_before_the_feedback_closes():
    order = []

    class Closing:
        def map(self, value):
            return value

        def close(self):
            order.append("user")

    function = _direct(Closing())
    function.open(FakeContext())
    function.feedback.producer = None
    real_close = function.feedback.close
    function.feedback.close = lambda: (order.append("feedback"), real_close())
    function.close()
    assert order == ["user", "feedback"]


@pytest.mark.parametrize("attempts,outputs,calls", [(1, [], 1), (2, ["ok"], 2)])
def test_a_raising_operator_is_called_max_attempts_times(attempts, outputs, calls):
    from workload.codec import decode
    seen = []

    def flaky(text):
        seen.append(text)
        if len(seen) == 1:
            raise ValueError("first call fails")
        return "ok"

    function = _direct(flaky, max_attempts=attempts)
    function.open(FakeContext())
    try:
        emitted = list(function.process_element(_routed("x")[0], None))
    finally:
        function.feedback.producer = None
        function.close()
    assert len(seen) == calls
    if outputs:
        assert emitted == outputs
    else:
        [(_, dead)] = emitted
        assert "first call fails" in decode("DeadLetter", dead)["reason"]


def test_the_hook_calls_a_users_operator_once_unless_told_otherwise():
    from pyflink_jobs.hook import HookSettings
    assert HookSettings().max_attempts == 1
    assert HookSettings.from_env({"STREAMPLACE_HOOK_MAX_ATTEMPTS": "3"}).max_attempts == 3
    for bad in (0, 11, True, 1.5):
        with pytest.raises(ValueError, match="max_attempts"):
            HookSettings(max_attempts=bad)


@pytest.mark.parametrize("checked", [False, True])
def test_a_none_output_is_a_dead_letter_where_the_type_cannot_carry_it(checked):
    from pyflink.common import Types

    from pyflink_jobs.output_fit import OutputFit
    from workload.codec import decode

    def maybe(text):
        return None if text == "none" else text.upper()

    fit = OutputFit.for_output_type(Types.PICKLED_BYTE_ARRAY()) if checked else None
    function = _direct(maybe, output_fit=fit)
    function.open(FakeContext())
    try:
        emitted = [list(function.process_element(r, None)) for r in _routed("a", "none")]
    finally:
        function.feedback.producer = None
        function.close()
    assert emitted[0] == ["A"]
    if not checked:
        assert emitted[1] == [None]
    else:
        [(_, dead)] = emitted[1]
        letter = decode("DeadLetter", dead)
        assert letter["raw"] == b"none" and "returned None" in letter["reason"]
        assert function._counts.values["streamplace_tasks_failed"] == 1


def test_an_output_of_the_wrong_type_is_a_dead_letter_and_the_others_come_out_unchanged():
    """A plain map with Types.LONG() fails the job on a str output (PyFlink's coder): the
    hook sends that record to the dead letters with the reason instead."""
    from pyflink.common import Types

    from pyflink_jobs.output_fit import OutputFit
    from workload.codec import decode

    def count_or_word(text):
        return "many" if text == "long" else len(text)

    function = _direct(count_or_word, output_fit=OutputFit.for_output_type(Types.LONG()))
    function.open(FakeContext())
    try:
        emitted = [list(function.process_element(r, None))
                   for r in _routed("ab", "long", "abcd")]
    finally:
        function.feedback.producer = None
        function.close()
    assert emitted[0] == [2] and emitted[2] == [4]
    [(_, dead)] = emitted[1]
    letter = decode("DeadLetter", dead)
    assert letter["raw"] == b"long" and letter["stage"].startswith("operator:")
    assert "(str: 'many') does not fit the job's output_type" in letter["reason"], letter


def test_which_output_types_carry_none():
    from pyflink.common import Types

    from pyflink_jobs.flink_ops import carries_none
    assert carries_none(Types.STRING())
    for other in (None, Types.INT(), Types.PICKLED_BYTE_ARRAY(), Types.ROW([Types.INT()])):
        assert not carries_none(other)


def test_checking_looks_at_one_output_or_every_one_by_identity():
    import numpy as np
    from pyflink.common import Types

    from pyflink_jobs.output_fit import NoneOutput, OutputFit, OutputMisfit
    fit = OutputFit.for_output_type(Types.PICKLED_BYTE_ARRAY())
    assert fit.checking(lambda r: r, flat=False)(0) == 0
    with pytest.raises(NoneOutput):
        fit.checking(lambda r: None, flat=False)(1)
    arrays = [np.zeros(3), np.ones(2)]                 # `==` on these would be ambiguous
    assert fit.checking(lambda r: arrays, flat=True)(1) is arrays
    with pytest.raises(NoneOutput):
        fit.checking(lambda r: [1, None], flat=True)(1)
    longs = OutputFit.for_output_type(Types.LONG())
    with pytest.raises(OutputMisfit, match="does not fit"):
        longs.checking(lambda r: [1, "2"], flat=True)(1)
    text = OutputFit.for_output_type(Types.STRING())
    call = lambda r: r   # noqa: E731
    assert text.checking(call, flat=False) is not call  # STRING: None passes, text is checked
    assert OutputFit(None, carries_none=True).checking(call, flat=False) is call


@pytest.mark.parametrize("routing,setting,local,expected", [
    ("pinned", "auto", False, False),
    ("pinned", "auto", True, True),          # a mini cluster: no Kafka source needed
    ("colocated", "auto", False, True),
    ("pinned", "broadcast", True, False),    # said explicitly: kept
    ("pinned", "topic", False, True),
])
def test_where_routers_read_feedback(routing, setting, local, expected):
    from pyflink_jobs.hook import HookSettings
    settings = HookSettings(routing=routing, router_feedback=setting, nodes=NODES)
    assert settings.feedback_from_topic(local) is expected


class RecordingProducer:
    """A producer that keeps what close asks of it."""

    def __init__(self):
        self.flushes, self.produced = [], 0

    def produce(self, *args, **kwargs):
        self.produced += 1

    def poll(self, timeout):
        return 0

    def flush(self, timeout):
        self.flushes.append(timeout)
        return 0


class FakeError:
    def __init__(self, code):
        self._code = code

    def code(self):
        return self._code


def test_the_final_feedback_flush_is_cut_short_when_no_broker_answers():
    from confluent_kafka import KafkaError

    from pyflink_jobs.feedback import UNREACHABLE_FLUSH_S, FeedbackPublisher

    def publisher():
        producer = RecordingProducer()
        return FeedbackPublisher("tm_a", lambda: {}, producer, interval_s=60.0), producer

    up, up_producer = publisher()
    up.client_error(FakeError(KafkaError._MSG_TIMED_OUT))    # not about reaching a broker
    up.close(timeout_s=5.0)
    assert up_producer.flushes == [5.0] and up_producer.produced == 1
    down, down_producer = publisher()
    down.client_error(FakeError(KafkaError._ALL_BROKERS_DOWN))
    assert down.broker_unreachable
    down.close(timeout_s=5.0)
    assert down_producer.flushes == [UNREACHABLE_FLUSH_S]
    back, back_producer = publisher()
    back.client_error(FakeError(KafkaError._TRANSPORT))
    back._delivered(None, object())                          # a report got through since
    back.close(timeout_s=5.0)
    assert back_producer.flushes == [5.0]


def test_the_new_modules_examples_run():
    import doctest

    from pyflink_jobs import operator_context, task_event_routing
    for module in (operator_context, task_event_routing):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


def test_thread_mode_gets_no_python_gauges():
    """PyFlink 2.2's thread mode calls a Python gauge from the JVM after a cancelled task's
    interpreter is gone (a TaskManager died with SIGSEGV): the hook registers none there."""
    from pyflink_jobs.flink_ops import NoMetrics, hook_metrics

    from flink_fakes import MetricsContext
    process = MetricsContext()
    assert hook_metrics(process) is process.metrics
    embedded = type("StreamingRuntimeContext", (MetricsContext,), {
        "__module__": "pyflink.fn_execution.datastream.embedded.runtime_context"})()
    group = hook_metrics(embedded)
    assert isinstance(group, NoMetrics)
    group.gauge("streamplace_x", lambda: 1)      # accepted, kept nowhere
    assert embedded.metrics.gauges == {}


def test_a_thread_mode_router_and_executor_register_no_gauges_and_still_count(monkeypatch):
    from pyflink_jobs.router_function import OperatorRecords, RouterFunction
    from pyflink_jobs.router import RouterSettings

    from flink_fakes import MetricsContext
    embedded_type = type("StreamingRuntimeContext", (MetricsContext,), {
        "__module__": "pyflink.fn_execution.datastream.embedded.runtime_context"})
    op = as_operator(str.upper)
    function = RouterFunction(RouterSettings(nodes=NODES[:2], policy="round_robin"),
                              OperatorRecords(op, None), single_output=False)
    context = embedded_type()
    function.open(context)
    function.close()
    assert context.metrics.gauges == {}
    process_context = MetricsContext()              # process mode: the router's gauges
    function = RouterFunction(RouterSettings(nodes=NODES[:2], policy="round_robin"),
                              OperatorRecords(op, None), single_output=False)
    function.open(process_context)
    function.close()
    assert "streamplace_decision_p99_us" in process_context.metrics.gauges
    direct = _direct(str.upper)
    executor_context = embedded_type()
    direct.open(executor_context)
    try:
        assert list(direct.process_element(_routed("a")[0], None)) == ["A"]
        assert direct._counts.values["streamplace_tasks_ok"] == 1
    finally:
        direct.feedback.producer = None
        direct.close()
    assert executor_context.metrics.gauges == {}
