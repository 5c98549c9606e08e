"""Drain-time judging of training examples (placement.service.drain_judge): small hand-written
completion sequences, and FeedbackExamples with it."""

from __future__ import annotations

import pytest

from placement.service.drain_judge import DrainJudge
from placement.service.examples import FeedbackExamples, TrainingExample
from placement.measured_costs import MeasuredCosts
from workload.model import ClusterSpec, NodeSpec, NodeState, Task


def example(task_id: str, decided_ms: int, latency_ms: float, node: str = "tm_a"):
    return TrainingExample(Task(task_id, "ocr", 1_000), node, latency_ms, decided_ms,
                           (NodeState(node),))


# (name, completions as (task, decided ms, finished ms, work s, backlog s), expected drain ms
#  per task once settled, tasks still waiting at the end)
SCENARIOS = [
    ("alone on an idle node: its own latency",
     [("a", 0, 400, 0.4, 0.0)], {"a": 400.0}, 0),
    ("FIFO: each waits for the work before it",
     [("a", 0, 400, 0.4, 0.0), ("b", 0, 800, 0.4, 0.4)], {"a": 400.0, "b": 800.0}, 0),
    # b was sent second but ran first (the node scheduler reordered): a, sent to an empty
    # node, is judged when the node had done 0.4 s of work (b's, at 400 ms), whichever task
    # it was; b (a's 0.4 s before it, and its own) when a finished
    ("reordered: judged by work done, not by which task",
     [("b", 0, 400, 0.4, 0.4), ("a", 0, 800, 0.4, 0.0)], {"a": 400.0, "b": 800.0}, 0),
    ("a later task overtakes: each judged when the node has done its level of work",
     [("b", 100, 300, 0.2, 0.4), ("a", 0, 700, 0.4, 0.0)], {"a": 700.0, "b": 600.0}, 0),
    ("the router knew of more work than ever completes: waits",
     [("a", 0, 400, 0.4, 5.0)], {}, 1),
]


@pytest.mark.parametrize("name,completions,expected,waiting", SCENARIOS,
                         ids=[s[0] for s in SCENARIOS])
def test_scenarios(name, completions, expected, waiting):
    judge, settled = DrainJudge(), {}
    for task_id, decided, finished, work, backlog in completions:
        for judged in judge.add(example(task_id, decided, finished - decided), finished, work,
                                backlog):
            settled[judged.task.task_id] = judged.latency_ms
    assert settled == pytest.approx(expected)
    assert judge.waiting() == waiting


def test_an_idle_node_settles_what_waits_on_it_at_its_newest_completion():
    judge = DrainJudge()
    assert judge.add(example("a", 0, 400), 400, 0.4, 5.0) == []
    assert judge.add(example("b", 100, 500), 600, 0.1, 5.0) == []   # both levels far off
    settled = {e.task.task_id: e.latency_ms for e in judge.idle("tm_a")}
    assert settled == {"a": 600.0, "b": 500.0} and judge.waiting() == 0


def test_without_the_routers_backlog_or_a_work_estimate_the_own_latency_is_kept():
    judge = DrainJudge()
    kept = judge.add(example("a", 0, 400), 400, 0.4, None)
    assert [e.latency_ms for e in kept] == [400.0]
    kept = judge.add(example("b", 0, 300), 300, float("nan"), 0.0)
    assert [e.latency_ms for e in kept] == [300.0] and judge.settled_by_latency == 2


def test_bounded_waiting_and_a_cut_on_drain_times():
    judge = DrainJudge(max_waiting=3, max_ms=1_000.0)
    settled = []
    for i in range(5):   # levels never reached: beyond 3 waiting, the nearest is settled
        settled += judge.add(example(f"t{i}", 0, 10), 10, 0.01, 100.0)
    assert judge.waiting() == 3 and len(settled) == 2 and judge.settled_by_latency == 2
    assert all(e.latency_ms == 10 for e in settled)
    # a huge completion reaches every level; what waited that long is cut at max_ms
    reached = judge.add(example("late", 0, 10), 5_000_000, 1e6, 0.0)
    assert len(reached) == 4 and judge.waiting() == 0 and judge.idle("tm_a") == []
    assert all(e.latency_ms == 1_000.0 for e in reached)


def test_a_hostile_backlog_only_delays_the_judgment_to_the_nodes_idle_report():
    """A forged ``routed_backlog_ms`` of a day cannot make a drain time longer than the node
    really took: the example waits until the node says it is idle."""
    cluster = ClusterSpec((NodeSpec("tm_a", 2, 8.0), NodeSpec("tm_b", 2, 8.0)))
    examples = FeedbackExamples(cluster, MeasuredCosts(cluster))
    t0 = 1_700_000_000_000

    def report(i: int, in_flight: int, backlog_ms: float) -> dict:
        timing = {"task_id": f"t{i}", "app_id": "ocr", "input_size": 1_000,
                  "queue_ms": 10.0, "service_ms": 90.0, "finished_at_ms": t0 + 100 * i}
        return {"node_id": "tm_a", "emitted_at_ms": t0 + 100 * i + 1, "in_flight": in_flight,
                "queue_depth": 0, "completed": [timing], "routed_queue": [1],
                "routed_backlog_ms": [backlog_ms]}

    assert examples.take([report(1, 3, 86_400_000.0)]) == 1
    assert examples.pending() == 0 and examples.judge.waiting() == 1
    assert examples.take([report(2, 0, 0.0)]) == 1           # idle: both settled
    judged = [examples.pop(), examples.pop()]
    assert {e.task.task_id for e in judged} == {"t1", "t2"}
    first = next(e for e in judged if e.task.task_id == "t1")
    assert first.latency_ms == pytest.approx(200.0)   # decided at t0, node done at t0 + 200


def test_the_latency_judge_queues_every_example_at_once_and_bad_judges_are_refused():
    cluster = ClusterSpec((NodeSpec("tm_a", 2, 8.0),))
    examples = FeedbackExamples(cluster, MeasuredCosts(cluster), judge="latency")
    timing = {"task_id": "t1", "app_id": "ocr", "input_size": 1_000, "queue_ms": 10.0,
              "service_ms": 90.0, "finished_at_ms": 1_700_000_000_100}
    examples.take([{"node_id": "tm_a", "emitted_at_ms": 1_700_000_000_101, "in_flight": 5,
                    "completed": [timing], "routed_queue": [1], "routed_backlog_ms": [1e6]}])
    assert examples.pending() == 1 and examples.judge is None
    assert examples.pop().latency_ms == pytest.approx(100.0)
    with pytest.raises(ValueError, match="judge"):
        FeedbackExamples(cluster, MeasuredCosts(cluster), judge="throughput")


ONE_NODE = ClusterSpec((NodeSpec("tm_a", 2, 8.0),))
T0 = 1_700_000_000_000


def judged_drains(finished_of) -> dict:
    """task id -> judged drain ms of tasks t1.. on tm_a, one idle report each, 100 ms apart;
    ``finished_of(i)``: the (maybe forged) finish the i-th report claims."""
    examples = FeedbackExamples(ONE_NODE, MeasuredCosts(ONE_NODE))
    i = 1
    while (finished := finished_of(i)) is not None:
        timing = {"task_id": f"t{i}", "app_id": "ocr", "input_size": 1_000,
                  "queue_ms": 10.0, "service_ms": 90.0, "finished_at_ms": finished}
        examples.take([{"node_id": "tm_a", "emitted_at_ms": T0 + 100 * i + 1, "in_flight": 0,
                        "completed": [timing], "routed_queue": [0], "routed_backlog_ms": [0.0]}])
        i += 1
    out = {}
    while (example := examples.pop()) is not None:
        out[example.task.task_id] = example.latency_ms
    return out


def test_one_forged_finish_a_day_ahead_does_not_lengthen_other_tasks_drain_times():
    """A task cannot finish after the report that carries it was sent: the judge's clock for
    the node stops there, so one forged ``finished_at_ms`` does not judge later tasks a day
    long (it did in a first version of the judge)."""
    honest = judged_drains(lambda i: T0 + 100 * i if i <= 5 else None)
    forged = judged_drains(lambda i: T0 + 100 * i + (86_400_000 if i == 2 else 0)
                           if i <= 5 else None)
    assert set(honest) == set(forged) == {f"t{i}" for i in range(1, 6)}
    # every drain stays within the reports' half-second span; the forged task's neighbour may
    # move by its clamped finish (t3: 1 ms), the rest are as without it
    assert all(v <= 500.0 for v in forged.values()), forged
    same = [k for k in honest if k != "t2" and forged[k] == honest[k]]
    assert len(same) >= 3, (honest, forged)


def test_a_forged_finish_far_in_the_past_teaches_no_hour_long_drain():
    """Its own task would be judged an hour long (decided long before anything the node did);
    the drain times are bounded like latencies (placement.service.latency_bounds)."""
    judged = judged_drains(lambda i: None if i > 40 else
                           T0 - 86_400_000 if i == 40 else T0 + 100 * i)
    assert len(judged) == 40 and judged["t40"] <= 10 * judged["t39"] <= 10 * 500.0
