"""exactly_once_report: the exactly-once check the integration tests share, on hand-made
result records (no broker).

Example: three tasks sent, ``t1`` answered twice -> ``duplicates == ("t1",)``.
"""

from __future__ import annotations

import pytest

from streamplace.kafka_io import ExactlyOnceReport, exactly_once_report

SENT = ("t1", "t2", "t3")


def ok(task_id):
    return {"task_id": task_id, "status": "OK", "node_id": "tm_b"}


@pytest.mark.parametrize("results, expected", [
    pytest.param([ok("t1"), ok("t2"), ok("t3")], ExactlyOnceReport(), id="all-fine"),
    pytest.param([ok("t3"), ok("t1"), ok("t2"), ok("t1"), ok("t1")],
                 ExactlyOnceReport(duplicates=("t1",)), id="duplicate"),
    pytest.param([ok("t1"), ok("t3")], ExactlyOnceReport(missing=("t2",)), id="missing"),
    pytest.param([ok("t1"), ok("t2"), ok("t3"), ok("x9")],
                 ExactlyOnceReport(unexpected=("x9",)), id="unexpected"),
    pytest.param([ok("t1"), {**ok("t2"), "status": "FAILED"}, ok("t3")],
                 ExactlyOnceReport(not_ok=(("t2", "FAILED"),)), id="failed-status"),
    pytest.param([ok("t2"), ok("t2"), {**ok("t9"), "status": "FAILED"}],
                 ExactlyOnceReport(duplicates=("t2",), missing=("t1", "t3"), unexpected=("t9",),
                                   not_ok=(("t9", "FAILED"),)), id="everything-wrong"),
])
def test_report_names_each_kind_of_violation(results, expected):
    report = exactly_once_report(results, SENT)
    assert report == expected
    assert report.ok is (expected == ExactlyOnceReport())


def test_expected_ids_may_be_any_iterable_and_are_read_once():
    report = exactly_once_report(iter([ok("t1"), ok("t2")]), (i for i in ("t1", "t2")))
    assert report.ok


def test_describe_counts_each_problem_and_shows_the_first_ids():
    assert exactly_once_report([ok("t1"), ok("t2"), ok("t3")], SENT).describe() == (
        "every task exactly once, all OK")
    sent = [f"t{i}" for i in range(10)]
    message = exactly_once_report([ok("t0"), ok("t0"), {**ok("t1"), "status": "FAILED"}],
                                  sent).describe(shown=3)
    assert message == ("1 duplicated (t0); 8 missing (t2, t3, t4, ...); "
                       "1 not OK (t1: FAILED)")


def test_the_report_is_frozen():
    with pytest.raises(AttributeError):
        ExactlyOnceReport().missing = ("t1",)
