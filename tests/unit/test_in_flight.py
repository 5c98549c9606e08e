"""The router's in-flight ledger (pyflink_jobs/in_flight.py): counts, backlog, replays,
completions, expiry and tenant releases, on small hand-written scenarios."""

from __future__ import annotations

import doctest

import pytest

from pyflink_jobs import in_flight
from pyflink_jobs.in_flight import InFlightLedger
from pyflink_jobs.routed import DecisionContext


class _Quotas:
    """Records what the ledger releases."""

    def __init__(self):
        self.released = []

    def release(self, tenant, completed_after_s):
        self.released.append((tenant, completed_after_s))


def test_the_module_example_runs():
    assert doctest.testmod(in_flight).failed == 0


def test_add_counts_a_task_and_returns_what_the_node_held_before():
    ledger = InFlightLedger(("a", "b"), timeout_s=60.0)
    assert ledger.add("t1", "a", now=1.0, work_s=0.25, speed=2.0) == DecisionContext(0, 0.0, 2.0)
    assert ledger.add("t2", "a", now=2.0, work_s=0.5) == DecisionContext(1, 250.0, 1.0)
    assert (ledger.count, ledger.backlog_s) == ({"a": 2, "b": 0}, {"a": 0.75, "b": 0.0})
    assert "t1" in ledger.entries and "t3" not in ledger.entries


def test_a_replayed_task_id_counts_once():
    ledger = InFlightLedger(("a", "b"), timeout_s=60.0)
    ledger.add("t1", "a", now=1.0, work_s=0.25)
    ledger.add("t1", "b", now=2.0, work_s=0.5)  # the same record, routed again
    assert (ledger.count, ledger.backlog_s) == ({"a": 0, "b": 1}, {"a": 0.0, "b": 0.5})
    assert list(ledger.entries.items()) == [("t1", ("b", 2.0, 0.5))]


@pytest.mark.parametrize("completed,expected_count,expected_backlog", [
    (["t1"], 1, 0.5),                    # one of two done
    (["t1", "t1"], 1, 0.5),              # a duplicate report: harmless
    (["t1", "t2"], 0, 0.0),              # both done
    (["unknown"], 2, 0.75),              # never in flight: nothing changes
], ids=["one", "duplicate", "both", "unknown"])
def test_completions_retire_each_task_once(completed, expected_count, expected_backlog):
    ledger = InFlightLedger(("a",), timeout_s=60.0)
    ledger.add("t1", "a", now=1.0, work_s=0.25)
    ledger.add("t2", "a", now=1.5, work_s=0.5)
    for task_id in completed:
        ledger.complete(task_id, now=3.0)
    assert ledger.count["a"] == expected_count
    assert ledger.backlog_s["a"] == pytest.approx(expected_backlog)


# (reporter, task id it names, (timing is the reporter's, retired entry), counts after)
REPORTS = [
    ("a", "t1", (True, ("a", 1.0, 0.25)), {"a": 0, "b": 1}),   # its own task: retired
    ("b", "t1", (False, None), {"a": 1, "b": 1}),              # a's task: stays counted on a
    ("a", "t2", (False, None), {"a": 1, "b": 1}),              # b's task: stays counted on b
    ("a", "other", (True, None), {"a": 1, "b": 1}),            # not ours: learnable, no change
]


@pytest.mark.parametrize("reporter, task_id, answer, counts", REPORTS,
                         ids=["own", "other-node-a", "other-node-b", "unknown"])
def test_a_report_retires_only_the_reporters_own_tasks(reporter, task_id, answer, counts):
    ledger = InFlightLedger(("a", "b"), timeout_s=60.0)
    ledger.add("t1", "a", now=1.0, work_s=0.25)
    ledger.add("t2", "b", now=1.5, work_s=0.5)
    assert ledger.report(task_id, now=3.0, node=reporter) == answer
    assert ledger.count == counts


def test_backlog_never_goes_below_zero():
    ledger = InFlightLedger(("a",), timeout_s=60.0)
    ledger.add("t1", "a", now=1.0, work_s=0.25)
    ledger.backlog_s["a"] = 0.1  # estimates drift (costs relearned between add and complete)
    ledger.complete("t1", now=2.0)
    assert ledger.backlog_s["a"] == 0.0 and ledger.count["a"] == 0


def test_expiry_forgets_the_oldest_tasks_past_the_timeout_only():
    ledger = InFlightLedger(("a", "b"), timeout_s=10.0)
    for i, (node, sent) in enumerate([("a", 0.0), ("b", 5.0), ("a", 12.0)]):
        ledger.add(f"t{i}", node, now=sent, work_s=1.0)
    ledger.expire(now=15.5)  # t0 (15.5 s old) and t1 (10.5 s) go, t2 (3.5 s) stays
    assert list(ledger.entries) == ["t2"]
    assert ledger.count == {"a": 1, "b": 0}
    ledger.expire(now=15.5)  # again: nothing more
    assert list(ledger.entries) == ["t2"]


def test_tenants_are_released_with_the_time_to_completion_or_none():
    quotas = _Quotas()
    ledger = InFlightLedger(("a",), timeout_s=10.0, quotas=quotas)
    ledger.add("done", "a", now=1.0, work_s=0.1, tenant="acme")
    ledger.add("replayed", "a", now=2.0, work_s=0.1, tenant="beta")
    ledger.add("lost", "a", now=3.0, work_s=0.1, tenant="acme")
    ledger.complete("done", now=4.0)
    ledger.forget("replayed")
    ledger.expire(now=20.0)
    assert quotas.released == [("acme", 3.0), ("beta", None), ("acme", None)]
    assert ledger.count["a"] == 0
