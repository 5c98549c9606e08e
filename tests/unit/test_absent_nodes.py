"""A cluster-spec node that never reports is left out of the service's observations in time.

Found by reading the service beside a real cluster of ``tm_a`` and ``tm_b`` (the default spec
names ``tm_c`` too): ``tm_c`` never reports, yet it stayed in ``/decide``'s default node set
(idle, so the fallback rule and MCT sent work to a node nothing runs on), in every training
example, and in the burst check, which then held every learned version for want of
``tm_c``'s drain rate. Now a spec node still silent ``absent_after_s`` after the first report
is left out (``placement.service.examples.FeedbackExamples._nodes_in_use``), on the
service's own clock, so a report's forged time stamp cannot do it.
"""

from __future__ import annotations

import pytest

from placement.measured_costs import MeasuredCosts
from placement.service.examples import ABSENT_AFTER_S, FeedbackExamples
from placement.service.settings import ServiceSettings
from test_service import client_for, make_service, synthetic_feedback
from workload.model import ClusterSpec, NodeSpec

CLUSTER = ClusterSpec(tuple(NodeSpec(n, 2, 8.0) for n in ("tm_a", "tm_b", "tm_c")))


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def report(node: str, sequence: int = 0, emitted_at_ms: int = 1_700_000_000_000) -> dict:
    return {"node_id": node, "emitted_at_ms": emitted_at_ms, "cpu_util": 0.5,
            "queue_depth": 1, "in_flight": 1, "completed": [], "sequence": sequence}


# (nodes that reported, seconds since the first report) -> nodes in use
SCENARIOS = {
    "no report yet: the spec's nodes": ((), 0.0, ["tm_a", "tm_b", "tm_c"]),
    "no report yet, long after start": ((), 10 * ABSENT_AFTER_S, ["tm_a", "tm_b", "tm_c"]),
    "two of three reported, just now": (("tm_a", "tm_b"), 1.0, ["tm_a", "tm_b", "tm_c"]),
    "two of three reported, just before the limit": (("tm_a", "tm_b"), ABSENT_AFTER_S - 0.1,
                                                      ["tm_a", "tm_b", "tm_c"]),
    "two of three reported, past the limit: tm_c is left out": (
        ("tm_a", "tm_b"), ABSENT_AFTER_S, ["tm_a", "tm_b"]),
    "all reported, past the limit": (("tm_c", "tm_a", "tm_b"), 10 * ABSENT_AFTER_S,
                                     ["tm_a", "tm_b", "tm_c"]),
    "a node outside the spec and one of it, past the limit": (
        ("worker_9", "tm_b"), ABSENT_AFTER_S, ["tm_b", "worker_9"]),
    "a node outside the spec and one of it, just now": (
        ("worker_9", "tm_b"), 1.0, ["tm_a", "tm_b", "tm_c", "worker_9"]),
    "only nodes outside the spec: at once (another cluster's spec)": (
        ("worker_1", "worker_2"), 0.0, ["worker_1", "worker_2"]),
}


@pytest.mark.parametrize("case", list(SCENARIOS))
def test_which_nodes_observations_are_over(case):
    reported, elapsed, expected = SCENARIOS[case]
    clock = FakeClock()
    examples = FeedbackExamples(CLUSTER, MeasuredCosts(CLUSTER), clock=clock)
    for i, node in enumerate(reported):
        examples.take([report(node, i)])
    clock.now += elapsed
    assert examples.node_ids() == expected
    assert [s.node_id for s in examples.node_states()] == expected


def test_a_silent_node_counts_again_when_it_reports():
    clock = FakeClock()
    examples = FeedbackExamples(CLUSTER, MeasuredCosts(CLUSTER), clock=clock)
    examples.take([report("tm_a"), report("tm_b")])
    clock.now += 2 * ABSENT_AFTER_S
    assert examples.node_ids() == ["tm_a", "tm_b"]
    examples.take([report("tm_c", 1)])   # a TaskManager that joined late
    assert examples.node_ids() == ["tm_a", "tm_b", "tm_c"]


def test_forged_time_stamps_do_not_drop_a_node():
    """The wait runs on the service's clock: reports stamped an hour apart (or at the
    epoch) make no spec node absent before ``absent_after_s`` of the service's own time."""
    clock = FakeClock()
    examples = FeedbackExamples(CLUSTER, MeasuredCosts(CLUSTER), clock=clock)
    examples.take([report("tm_a", 0, emitted_at_ms=0),
                   report("tm_b", 0, emitted_at_ms=1_700_003_600_000)])
    assert examples.node_ids() == ["tm_a", "tm_b", "tm_c"]


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), 86_400.1])
def test_the_setting_is_bounded(value):
    with pytest.raises(ValueError):
        ServiceSettings(absent_after_s=value)


def test_a_service_beside_part_of_its_spec_decides_and_learns_over_the_nodes_that_report(
        tmp_path):
    """The default-shaped spec, feedback from tm_a and tm_b only (tm_c is not in this
    cluster): once the wait is over (0 s here), /decide picks only among those two, /health
    lists them, and the training examples and the burst check see two nodes."""
    service = make_service(tmp_path, absent_after_s=0.0)
    reports = [r for r in synthetic_feedback(480, seed=5) if r["node_id"] != "tm_c"]
    tasks = sum(len(r["completed"]) for r in reports)
    assert service.ingest.ingest(reports) == tasks
    assert service.learner.train_pending() == tasks
    assert service.learner.node_ids() == ["tm_a", "tm_b"]
    assert {item[0].shape[0] for item in service.learner.agent.replay.items} == {2}
    client = client_for(service)
    answer = client.post("/decide", json={"tasks": [
        {"task_id": f"x{i}", "app_id": "face_recognition", "input_size": 1000 * (i + 1)}
        for i in range(20)]})
    assert answer.status_code == 200, answer.text
    assert {d["node"] for d in answer.json()} <= {"tm_a", "tm_b"}
    assert client.get("/health").json()["nodes"] == ["tm_a", "tm_b"]
    # an observation that names tm_c itself is still answered (it is in the spec)
    answer = client.post("/decide", json={
        "tasks": [{"task_id": "y", "app_id": "face_recognition", "input_size": 1000}],
        "nodes": [{"node_id": "tm_c"}]})
    assert answer.status_code == 200 and answer.json()[0]["node"] == "tm_c"
