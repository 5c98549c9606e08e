"""What the hook refuses before it adds anything to a job, by type and with the reason:
functions it cannot run per record on any node (workload/operators.py, ``_refuse_stateful``),
and streams that are not a plain DataStream (pyflink_jobs/job_shape.py). Real PyFlink objects:
an environment and its streams are built, never executed."""

from __future__ import annotations

import pytest
from pyflink.common import Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import (BroadcastProcessFunction, CoFlatMapFunction,
                                          CoMapFunction, CoProcessFunction, FlatMapFunction,
                                          KeyedBroadcastProcessFunction, KeyedCoProcessFunction,
                                          KeyedProcessFunction, MapFunction, ProcessFunction)
from pyflink.datastream.state import MapStateDescriptor
from pyflink.datastream.window import CountTumblingWindowAssigner

from pyflink_jobs.job_shape import JobShape
from workload.operators import OperatorError, as_operator

# -- functions --------------------------------------------------------------------------------


class KeyedLookup(MapFunction):  # stateless, whatever its name says
    def map(self, value):
        return value.upper()


class KeyedSplit(FlatMapFunction):
    def flat_map(self, value):
        yield from value.split()


class Enrich(ProcessFunction):
    def process_element(self, value, ctx):
        yield value


class CountPerKey(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value


class Join(CoMapFunction):
    def map1(self, value):
        return value

    def map2(self, value):
        return value


class Timed:  # no PyFlink base: a timer is enough
    def map(self, value):
        return value

    def on_timer(self, timestamp, ctx):
        pass


class ProcessShaped:  # no PyFlink base, no map: a process function by its shape
    def process_element(self, value, ctx):
        yield value


def _subclass(base):
    """A concrete subclass of one of PyFlink's abstract function classes."""
    methods = {name: (lambda self, *args: None) for name in base.__abstractmethods__}
    return type(f"My{base.__name__}", (base,), methods)


STATE = "per-key state, timers or a second input cannot follow records"
CONTEXT = "gives no ProcessFunction context, timers or side outputs"

# (what, the operator, None when accepted else a phrase of the reason)
FUNCTION_CASES = [
    ("a MapFunction named KeyedLookup", KeyedLookup(), None),
    ("a FlatMapFunction named KeyedSplit", KeyedSplit(), None),
    ("a MapFunction class named KeyedLookup", KeyedLookup, None),
    ("a ProcessFunction", Enrich(), CONTEXT),
    ("a ProcessFunction class", Enrich, CONTEXT),
    ("an object with process_element and no map", ProcessShaped(), CONTEXT),
    ("a KeyedProcessFunction", CountPerKey(), STATE),
    ("a CoMapFunction", Join(), STATE),
    ("an object with on_timer", Timed(), STATE),
    *[(f"a {base.__name__}", _subclass(base)(), STATE)
      for base in (KeyedCoProcessFunction, CoFlatMapFunction, CoProcessFunction,
                   KeyedBroadcastProcessFunction, BroadcastProcessFunction)],
]


@pytest.mark.parametrize("operator,reason", [c[1:] for c in FUNCTION_CASES],
                         ids=[c[0] for c in FUNCTION_CASES])
def test_functions_are_refused_by_what_they_are_with_why(operator, reason):
    if reason is None:
        assert as_operator(operator).run_record("a b") in (["A B"], ["a", "b"])
        return
    with pytest.raises(OperatorError, match=reason) as refused:
        as_operator(operator)
    kind = operator.__name__ if isinstance(operator, type) else type(operator).__name__
    assert kind in str(refused.value)
    assert isinstance(refused.value, ValueError)


def test_a_pipeline_step_with_a_timer_is_refused_as_a_step():
    class TimedStep:
        def __call__(self, value):
            return value

        def on_timer(self, timestamp, ctx):
            pass

    with pytest.raises(OperatorError, match="pipeline step TimedStep is a function with timers"):
        as_operator([str.strip, TimedStep()])


# -- streams ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def streams():
    env = StreamExecutionEnvironment.get_execution_environment()
    lines = env.from_collection(["a", "b"], type_info=Types.STRING())
    other = env.from_collection(["c"], type_info=Types.STRING())
    rules = MapStateDescriptor("rules", Types.STRING(), Types.STRING())
    return env, {
        "DataStream": lines.map(str.upper, output_type=Types.STRING()),
        "KeyedStream": lines.key_by(lambda s: s),
        "WindowedStream": lines.key_by(lambda s: s).count_window(2),
        "AllWindowedStream": lines.window_all(CountTumblingWindowAssigner.of(2)),
        "ConnectedStreams": lines.connect(other),
        "BroadcastStream": other.broadcast(rules),
        "BroadcastConnectedStream": lines.connect(other.broadcast(rules)),
        "DataStreamSink": lines.print(),
    }


# (the stream kind, a phrase of the reason; None: accepted)
STREAM_CASES = [
    ("DataStream", None),
    ("KeyedStream", "Apply the hook to the stream before key_by"),
    ("WindowedStream", "a window or a second input groups records"),
    ("AllWindowedStream", "a window or a second input groups records"),
    ("ConnectedStreams", "Apply the hook to the DataStream before connect"),
    ("BroadcastStream", "a broadcast stream is only a second input"),
    ("BroadcastConnectedStream", "a window or a second input groups records"),
    ("DataStreamSink", "a sink has no records to go on"),
]


@pytest.mark.parametrize("kind,reason", STREAM_CASES, ids=[c[0] for c in STREAM_CASES])
def test_only_a_plain_datastream_is_taken(streams, kind, reason):
    env, by_kind = streams
    stream = by_kind[kind]
    assert type(stream).__name__ == kind
    if reason is None:
        assert JobShape.read(env, stream).apply_index >= 1
        return
    with pytest.raises(ValueError, match=reason) as refused:
        JobShape.read(env, stream)
    assert f"this is a {kind}" in str(refused.value) or f"this is an {kind}" in str(
        refused.value)
    assert "per record" in str(refused.value)


def test_a_stand_in_stream_still_passes():
    class StandInEnvironment:
        pass

    shape = JobShape.read(StandInEnvironment(), object())
    assert (shape.local, shape.bounded, shape.apply_index) == (False, False, 1)
