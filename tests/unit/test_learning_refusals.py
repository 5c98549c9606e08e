"""What a node's learners refused to learn from reaches its feedback and the service's metrics
(``learning_refused``), bounded on both sides: the executors publish their counts, and a
hostile table in feedback cannot grow what the service keeps or exports."""

from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace

import pytest

from interference.executor import (ExecutorSettings, NodeExecutor, OperatorExecutor,
                                   OperatorExecutorSettings)
from placement.service.examples import NodeHistory
from placement.service.metrics import ServiceMetrics
from pyflink_jobs.feedback import FeedbackPublisher
from workload.codec import decode, encode
from workload.model import NodeState
from workload.operators import StagedOperator, stage
from workload.refusals import (MAX_REFUSAL_COUNT, MAX_REFUSAL_KEY_CHARS, MAX_REFUSAL_KEYS,
                               bounded_refusals, learning_refusals, refused_total)

BIG = {f"k{i:03d}": i + 1 for i in range(100)}


@pytest.mark.parametrize("label,table,expected", [
    ("not a mapping", [("a", 1)], {}),
    ("none", None, {}),
    ("good counts", {"batch:non-finite": 2, "alone:implausible": 1},
     {"batch:non-finite": 2, "alone:implausible": 1}),
    ("zero, negative, bool, float, NaN, text", {"a": 0, "b": -3, "c": True, "d": 1.5,
                                                "e": math.nan, "f": "7"}, {}),
    ("beyond Avro's safe integer", {"a": MAX_REFUSAL_COUNT + 1, "b": 4}, {"b": 4}),
    ("a key that is no text, or empty", {5: 1, "": 2, None: 3, "ok": 1}, {"ok": 1}),
    ("a long key is cut", {"x" * 10_000: 3}, {"x" * MAX_REFUSAL_KEY_CHARS: 3}),
    ("keys equal once cut are added", {"y" * 70: 2, "y" * 80: 5},
     {"y" * MAX_REFUSAL_KEY_CHARS: 7}),
    ("the largest 32 of 100", BIG,
     {f"k{i:03d}": i + 1 for i in range(100 - MAX_REFUSAL_KEYS, 100)}),
])
def test_a_refusal_table_is_checked_and_bounded(label, table, expected):
    assert bounded_refusals(table) == expected
    assert refused_total(table) == float(sum(expected.values()))


def test_a_million_keys_cost_no_more_than_a_bounded_look():
    table = {f"k{i}": 1 for i in range(1_000_000)}
    assert len(bounded_refusals(table)) == MAX_REFUSAL_KEYS


def test_learners_counts_are_named_by_learner_and_reason():
    sources = {"batch": Counter({"non-finite": 2, "bad-size": 0}),
               "alone": SimpleNamespace(refused=Counter({"implausible": 3})),
               "scheduler": SimpleNamespace(refused=4),          # counted without reasons
               "fcfs": SimpleNamespace(), "none": None,
               "flag": SimpleNamespace(refused=True)}            # no count
    assert learning_refusals(sources) == {"batch:non-finite": 2, "alone:implausible": 3,
                                          "scheduler:refused": 4}


def _operator() -> StagedOperator:
    return StagedOperator("double", [stage("double", lambda xs: [2 * x for x in xs])])


def test_an_operator_executor_publishes_what_its_learners_refused():
    settings = OperatorExecutorSettings(cpu_workers=1, use_gpu="never")
    with OperatorExecutor(_operator(), settings) as executor:
        assert executor.snapshot()["learning_refused"] == {}
        executor.sizer.observe("double", "cpu", 4, math.nan)      # a broken timing
        executor.sizer.observe("double", "cpu", 4, -1.0)
        executor.telemetry.readings_refused["util:nan"] += 1
        refused = executor.snapshot()["learning_refused"]
    assert refused["gpu_reading:util:nan"] == 1
    assert sum(v for k, v in refused.items() if k.startswith("batch:")) == 2


def test_a_node_executor_publishes_its_alone_baselines_refusals():
    with NodeExecutor(ExecutorSettings(cpu_workers=1, use_gpu="never")) as executor:
        executor.learner.baseline.refused["non-finite"] += 3
        assert executor.snapshot()["learning_refused"] == {"alone:non-finite": 3}


def test_the_feedback_record_carries_the_table_bounded_and_through_avro():
    snap = {"cpu_util": 0.5, "learning_refused": {**BIG, "bad": -1}}
    record = FeedbackPublisher("tm_a", lambda: snap).build_record()
    assert record["learning_refused"] == bounded_refusals(BIG)
    assert decode("NodeFeedback", encode("NodeFeedback", record))["learning_refused"] == \
        record["learning_refused"]
    # a snapshot without the key (an older executor) reports an empty table
    assert FeedbackPublisher("tm_a", lambda: {}).build_record()["learning_refused"] == {}


def test_the_service_keeps_and_exports_a_hostile_table_bounded():
    hostile = {**{"z" * 5000 + str(i): 10 for i in range(10_000)}, "nan": math.nan}
    history = NodeHistory()
    history.add({"node_id": "tm_a", "emitted_at_ms": 1, "sequence": 1,
                 "learning_refused": hostile}, NodeState("tm_a"))
    kept = history.latest_record("tm_a")["learning_refused"]
    assert len(kept) <= MAX_REFUSAL_KEYS and all(len(k) <= MAX_REFUSAL_KEY_CHARS for k in kept)
    metrics = ServiceMetrics()
    metrics.set_node_feedback("tm_a", {"learning_refused": {"batch:non-finite": 2,
                                                            "alone:implausible": 5}})
    assert metrics.value("node_learning_refused", node="tm_a") == 7.0
    metrics.set_node_feedback("tm_b", {"learning_refused": "garbage"})
    assert metrics.value("node_learning_refused", node="tm_b") == 0.0
