"""A bad hook setting is refused when the job is built, with a one-line reason naming the
setting and the value, never accepted to hang or spin at run time (found by an outside probe,
2026-12):

- ``StreamplaceHook.create`` keywords, ``STREAMPLACE_HOOK_*`` variables and the builder: a
  feedback or refresh interval of 0 / NaN spun a thread (~40,000 NodeFeedback a second), a
  capacity of 0 hung PyFlink's async queue, a timeout under 1 ms set none, ``batching="false"``
  kept batching on, a plan count of 2.7 became 2, an unknown node scheduler failed only when an
  executor opened;
- ``ModelRefresher`` itself refuses an interval its ``Event.wait`` would not wait;
- ``BatchPolicy``: NaN sizes turned batching off, ``"16"`` became sizes (1, 6), floats and
  huge numbers passed, wrong types raised raw TypeErrors;
- a ``task_size`` of numpy's int64 (``np.prod(shape)``) is a size, not a fallback;
- an operator name that is no valid task type fails ``as_operator``, not every record later.
"""

from __future__ import annotations

import pytest

from pyflink_jobs.hook import HookSettings, StreamplaceHook
from pyflink_jobs.router import ModelRefresher, RouterNode
from pyflink_jobs.router_function import OperatorRecords
from workload.operators import BatchPolicy, OperatorError, as_operator

from flink_fakes import FakeContext

NODES = [RouterNode("tm_a", cpu_cores=2)]
NAN, INF = float("nan"), float("inf")


def _refused(error, words) -> None:
    """The reason is one line and holds every one of ``words``."""
    text = str(error.value)
    assert "\n" not in text, text
    missing = [w for w in words if w not in text]
    assert not missing, f"{missing} not in {text!r}"


# (setting, bad value, words of the reason)
SETTING_CASES = [
    ("feedback_interval_s", 0, ("feedback_interval_s", "0")),
    ("feedback_interval_s", -1, ("feedback_interval_s", "-1")),
    ("feedback_interval_s", NAN, ("feedback_interval_s", "nan")),
    ("feedback_interval_s", 1e9, ("feedback_interval_s", "3600")),
    ("refresh_interval_s", 0, ("refresh_interval_s", "0")),
    ("refresh_interval_s", NAN, ("refresh_interval_s", "nan")),
    ("refresh_interval_s", INF, ("refresh_interval_s", "inf")),
    ("executor_capacity", 0, ("executor_capacity", "0")),
    ("executor_capacity", -1, ("executor_capacity", "-1")),
    ("executor_capacity", 2.5, ("executor_capacity", "2.5")),
    ("executor_capacity", NAN, ("executor_capacity", "nan")),
    ("executor_capacity", True, ("executor_capacity", "True")),
    ("executor_capacity", "8", ("executor_capacity", "'8'")),
    ("executor_capacity", 10**9, ("executor_capacity", "1000000000")),
    ("executor_timeout_s", 0, ("executor_timeout_s", "0.001")),
    ("executor_timeout_s", -5, ("executor_timeout_s", "-5")),
    ("executor_timeout_s", 1e-6, ("executor_timeout_s", "1e-06")),
    ("executor_timeout_s", NAN, ("executor_timeout_s", "nan")),
    ("executor_timeout_s", INF, ("executor_timeout_s", "inf")),
    ("scheduler", "bogus", ("scheduler", "'bogus'", "iawp")),
    ("scheduler", None, ("scheduler", "None")),
    ("batching", "false", ("batching", "'false'")),
    ("batching", 1, ("batching", "1")),
    ("call_groups", "false", ("call_groups", "'false'")),
    ("call_groups", None, ("call_groups", "None")),
    ("plan", {"tm_a": 2.7}, ("plan['tm_a']", "2.7")),
    ("plan", {"tm_a": "2"}, ("plan['tm_a']", "'2'")),
    ("plan", {"tm_a": True}, ("plan['tm_a']", "True")),
    ("transaction_timeout_ms", -1, ("transaction_timeout_ms", "-1")),
    ("transaction_timeout_ms", 0, ("transaction_timeout_ms", "0")),
    ("transaction_timeout_ms", 1.5, ("transaction_timeout_ms", "1.5")),
    ("limits", 5, ("limits", "TaskLimits", "5")),
    ("keep_local_below_ms", NAN, ("keep_local_below_ms", "nan")),
    ("fallback", "bogus", ("fallback", "'bogus'")),
]


@pytest.mark.parametrize("setting,value,words", SETTING_CASES,
                         ids=[f"{c[0]}={c[1]!r}" for c in SETTING_CASES])
def test_create_refuses_a_bad_setting(setting, value, words):
    with pytest.raises(ValueError) as error:
        StreamplaceHook.create("127.0.0.1:9092", nodes=NODES, **{setting: value})
    _refused(error, words)


# (environment variable, its text, words of the reason): parsed, then the same checks
ENV_CASES = [
    ("FEEDBACK_INTERVAL_S", "0", ("feedback_interval_s", "0")),
    ("FEEDBACK_INTERVAL_S", "nan", ("feedback_interval_s", "nan")),
    ("REFRESH_INTERVAL_S", "-2", ("refresh_interval_s", "-2")),
    ("EXECUTOR_CAPACITY", "0", ("executor_capacity", "0")),
    ("EXECUTOR_TIMEOUT_S", "0.0001", ("executor_timeout_s", "0.0001")),
    ("SCHEDULER", "bogus", ("scheduler", "'bogus'")),
    ("TRANSACTION_TIMEOUT_MS", "-1", ("transaction_timeout_ms", "-1")),
]


@pytest.mark.parametrize("variable,text,words", ENV_CASES,
                         ids=[f"{c[0]}={c[1]}" for c in ENV_CASES])
def test_environment_variables_pass_the_same_checks(variable, text, words):
    with pytest.raises(ValueError) as error:
        HookSettings.from_env({f"STREAMPLACE_HOOK_{variable}": text})
    _refused(error, words)


# (builder method, its argument, words of the reason)
BUILDER_CASES = [
    ("executor_capacity", NAN, ("executor_capacity", "nan")),
    ("executor_capacity", "8", ("executor_capacity", "'8'")),
    ("node_scheduler", "x", ("scheduler", "'x'")),
    ("plan", {"tm_a": 2.7}, ("plan['tm_a']", "2.7")),
    ("plan", {"tm_a": NAN}, ("plan['tm_a']", "nan")),
    ("batching", "false", ("batching", "'false'")),
    ("limits", 5, ("limits", "5")),
]


@pytest.mark.parametrize("method,value,words", BUILDER_CASES,
                         ids=[f"{c[0]}({c[1]!r})" for c in BUILDER_CASES])
def test_the_builder_refuses_a_bad_setting_when_it_is_set(method, value, words):
    builder = StreamplaceHook.builder().nodes(NODES)
    with pytest.raises(ValueError) as error:
        getattr(builder, method)(value)
    _refused(error, words)


def test_the_builder_checks_every_setting_when_it_builds():
    builder = StreamplaceHook.builder().nodes(NODES)
    builder._settings.feedback_interval_s = 0   # set behind the builder's back
    with pytest.raises(ValueError, match="feedback_interval_s"):
        builder.build()


def test_valid_settings_still_build_as_before():
    hook = StreamplaceHook.create("127.0.0.1:9092", nodes=NODES, feedback_interval_s=1,
                                  executor_capacity=8, executor_timeout_s=0.001,
                                  scheduler=" IAWP ", plan="tm_a=2", batching=False)
    s = hook.settings
    assert (s.feedback_interval_s, s.executor_capacity, s.plan, s.batching) == \
        (1.0, 8, {"tm_a": 2}, False)
    built = (StreamplaceHook.builder().nodes(NODES).plan({"tm_a": 3}).node_scheduler("fcfs")
             .executor_capacity(4).batching(True).build())
    assert (built.settings.plan, built.settings.scheduler) == ({"tm_a": 3}, "fcfs")


@pytest.mark.parametrize("interval", [0, -1.0, NAN, INF, "2", None])
def test_the_model_refresher_refuses_an_interval_it_would_not_wait(interval):
    with pytest.raises(ValueError) as error:
        ModelRefresher(router=None, client=None, interval_s=interval)
    _refused(error, ("refresh_interval_s",))


# (BatchPolicy keywords, words of the reason)
POLICY_CASES = [
    (dict(preferred_batch_sizes="16"), ("preferred_batch_sizes", "'16'")),
    (dict(preferred_batch_sizes=8), ("preferred_batch_sizes", "8")),
    (dict(preferred_batch_sizes=(1, 2.7)), ("preferred_batch_sizes", "2.7")),
    (dict(preferred_batch_sizes=(True,)), ("preferred_batch_sizes", "True")),
    (dict(preferred_batch_sizes=(NAN,)), ("preferred_batch_sizes", "nan")),
    (dict(preferred_batch_sizes=(INF,)), ("preferred_batch_sizes", "inf")),
    (dict(preferred_batch_sizes=(10**30,)), ("preferred_batch_sizes", "1000000")),
    (dict(preferred_batch_sizes=(1, 2), max_batch_size=NAN), ("max_batch_size", "nan")),
    (dict(preferred_batch_sizes=(1, 2), max_batch_size=2.5), ("max_batch_size", "2.5")),
    (dict(preferred_batch_sizes=(1, 2), max_batch_size=10**30), ("max_batch_size", "digits")),
    (dict(preferred_batch_sizes=(1, 2), max_batch_size=None), ("max_batch_size", "None")),
    (dict(preferred_batch_sizes=(1, 4), latency_target_ms=INF), ("latency_target_ms", "inf")),
    (dict(preferred_batch_sizes=(1, 4), latency_target_ms="5"), ("latency_target_ms", "'5'")),
    (dict(preferred_batch_sizes=(1, 4), max_queue_delay_us=0.5), ("max_queue_delay_us", "0.5")),
    (dict(preferred_batch_sizes=(1, 4), max_queue_delay_us=None),
     ("max_queue_delay_us", "None")),
]


@pytest.mark.parametrize("fields,words", POLICY_CASES,
                         ids=[repr(c[0])[:60] for c in POLICY_CASES])
def test_a_batch_policy_refuses_nonsense(fields, words):
    with pytest.raises(OperatorError) as error:
        BatchPolicy(**fields)
    _refused(error, words)


@pytest.mark.parametrize("largest", [2.5, NAN, 10**9, 0])
def test_batch_policy_up_to_refuses_a_size_that_is_no_count(largest):
    with pytest.raises(OperatorError) as error:
        BatchPolicy.up_to(largest)
    _refused(error, ("max_batch_size",))


def test_valid_batch_policies_are_as_before():
    import numpy as np
    assert BatchPolicy.up_to(8, 20_000).preferred_batch_sizes == (1, 2, 4, 8)
    policy = BatchPolicy([np.int64(4), 1, 4], np.int64(8), 1000, 5)
    assert policy == BatchPolicy((1, 4), 8, 1000, 5.0)
    assert type(policy.max_batch_size) is int and policy.batching
    assert BatchPolicy().max_batch_size == 1 and not BatchPolicy().batching


# (what task_size returns, the size the policy sees)
SIZE_CASES = [
    ("numpy int64 of np.prod", lambda np: np.prod(np.array([32, 32])), 1024),
    ("numpy int32", lambda np: np.int32(7), 7),
    ("numpy uint8", lambda np: np.uint8(0), 0),
]


@pytest.mark.parametrize("what,returned,expected", SIZE_CASES, ids=[c[0] for c in SIZE_CASES])
def test_a_numpy_integer_task_size_is_a_size(what, returned, expected):
    import numpy as np
    task, fallbacks = _described(lambda record: returned(np))
    assert (task.input_size, type(task.input_size), fallbacks) == (expected, int, 0)


@pytest.mark.parametrize("returned", [-1, True, 1024.0, "12"])
def test_other_task_sizes_still_fall_back_to_the_serialized_length(returned):
    import numpy as np
    for value in (returned, np.int64(returned) if type(returned) is int else returned):
        task, fallbacks = _described(lambda record: value)
        assert (task.input_size, fallbacks) == (3, 1)   # len("abc")


def _described(task_size):
    """(the task the router describes "abc" as, task_size fallbacks counted)."""
    reader = OperatorRecords(as_operator(str.upper, name="img", task_size=task_size))
    reader.open(FakeContext())
    task, *_ = reader.read("abc")
    return task, reader.descriptor_fallbacks["task_size"]


@pytest.mark.parametrize("name", ["enrich\n", "a\tb", "x" * 201],
                         ids=["newline", "tab", "201 characters"])
def test_an_operator_name_that_is_no_task_type_is_refused_when_built(name):
    with pytest.raises(OperatorError) as error:
        as_operator(str.upper, name=name)
    _refused(error, ("operator's name", "default task type", "printable", "200"))


def test_valid_names_and_a_named_type_still_build():
    assert as_operator(str.upper, name="x" * 200).name == "x" * 200
    assert as_operator(str.upper, name="ok name").name == "ok name"
    # a task_type function: the name is the type only of the records it fails on
    assert as_operator(str.upper, name="two\nlines", task_type=lambda r: "t").name == \
        "two\nlines"


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "0.5", None])
def test_a_feedback_publisher_made_by_hand_refuses_an_interval_that_would_spin(bad):
    from pyflink_jobs.feedback import FeedbackPublisher
    with pytest.raises(ValueError, match="feedback_interval_s"):
        FeedbackPublisher("tm_a", snapshot=lambda: {}, interval_s=bad)


@pytest.mark.parametrize("field, value", [("policy", "no_such_rule"), ("fallback", "typo"),
                                          ("fallback", None)])
def test_settings_made_directly_refuse_an_unknown_rule(field, value):
    from pyflink_jobs.hook import HookSettings
    with pytest.raises(ValueError, match=f"unknown {'fallback ' if field == 'fallback' else ''}policy"):
        HookSettings(**{field: value})
