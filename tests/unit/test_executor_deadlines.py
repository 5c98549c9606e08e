"""Per-task deadlines and priorities in the node executor's queues (issue 17, build item 3).

Scenario tables: admission order (max_in_flight 1, one core, a blocker holding the slot) and
ready-stage order (one core, tasks admitted, a blocker on the core) under several node
schedulers; the admission gate and the urgency windows on their own; invalid TaskEvent
attributes in the Flink executor function. Stages of 4,096 pixels (about a millisecond) keep
the file fast; one stage is slowed by a few ms so start times in ms are strictly ordered.
"""

from __future__ import annotations

import asyncio
import doctest
import threading
import time

import pytest

from interference.executor import ExecutorSettings, NodeExecutor
from interference.executor import deadlines as deadlines_module
from interference.executor.deadlines import (AdmissionGate, Urgency, admission_key,
                                             assign_in_windows, urgency_of, urgency_order)
from interference.executor.dispatch import ExecutorCore
from interference.schedulers import FcfsScheduler
from workload.apps.registry import OPERATORS
from workload.model import Assignment, ComputingUnit, Stage
from workload.task_attributes import TaskSLO
from flink_fakes import FakeContext

SIZE = 4096
APP = "face_recognition"  # the tasks whose order is checked
BLOCKER_APP, BLOCKER_STAGE = "video_synopsis", "gmm_background"  # a stage no task above has
SLOWED_STAGE, SLOWED_S = "face_detection", 0.004  # > 1 ms: start times (ms) strictly ordered
WAIT_S = 30.0  # upper bound of every wait (never hang the suite)


def settings(**overrides) -> ExecutorSettings:
    return ExecutorSettings(**{"cpu_workers": 1, "use_gpu": "never", "scheduler": "fcfs",
                               **overrides})


def wait_until(predicate, what: str) -> None:
    end = time.perf_counter() + WAIT_S
    while not predicate():
        assert time.perf_counter() < end, f"timed out waiting for {what}"
        time.sleep(0.002)


@pytest.fixture
def blocker(monkeypatch):
    """Patch the blocker's stage to wait on an event (``entered`` is set when it runs) and slow
    the tasks' first stage a little. Yields (entered, release)."""
    entered, release = threading.Event(), threading.Event()
    real_block, real_slow = OPERATORS[BLOCKER_STAGE], OPERATORS[SLOWED_STAGE]

    def blocking(frames, inputs, **options):
        entered.set()
        release.wait(timeout=WAIT_S)
        return real_block(frames, inputs, **options)

    def slowed(frames, inputs, **options):
        time.sleep(SLOWED_S)
        return real_slow(frames, inputs, **options)

    monkeypatch.setitem(OPERATORS, BLOCKER_STAGE, blocking)
    monkeypatch.setitem(OPERATORS, SLOWED_STAGE, slowed)
    yield entered, release
    release.set()


def start_order(outcomes: dict) -> list[str]:
    for name, outcome in outcomes.items():
        assert outcome.status == "OK", (name, outcome.error)
    order = sorted(outcomes, key=lambda name: outcomes[name].started_at_ms)
    starts = [outcomes[name].started_at_ms for name in order]
    assert len(set(starts)) == len(starts), f"tied start times {starts}"
    return order


NONE = None
#: (scenario, SLOs of A, B, C submitted in this order, expected start order)
SCENARIOS = [
    ("deadlines: earliest absolute deadline first",
     (NONE, TaskSLO(deadline_s=10.0), TaskSLO(deadline_s=1.0)), ["C", "B", "A"]),
    ("no SLOs: first come, first served",
     (NONE, NONE, NONE), ["A", "B", "C"]),
    ("tenants alone change nothing",
     (TaskSLO(tenant="x"), TaskSLO(tenant="y"), TaskSLO(tenant="x")), ["A", "B", "C"]),
    ("priorities break deadline ties (no deadlines: all tie)",
     (NONE, TaskSLO(priority=5), TaskSLO(priority=1)), ["B", "C", "A"]),
    ("any deadline goes before any priority",
     (TaskSLO(priority=100), TaskSLO(deadline_s=10.0), TaskSLO(deadline_s=1.0, priority=-100)),
     ["C", "B", "A"]),
    ("equal deadlines: arrival order",
     (TaskSLO(deadline_s=5.0), TaskSLO(deadline_s=5.0), NONE), ["A", "B", "C"]),
]


@pytest.mark.parametrize("scenario,slos,expected", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_admission_goes_by_deadline_then_priority_then_arrival(blocker, scenario, slos,
                                                               expected):
    """max_in_flight 1: the blocker holds the only slot; A, B, C wait in line, submitted in
    this order; once the blocker finishes, they are admitted (and so start) in the rule's
    order."""
    entered, release = blocker
    with NodeExecutor(settings(max_in_flight=1, node_id="tm_deadline")) as node:
        first = node.submit("blocker", BLOCKER_APP, SIZE)
        assert entered.wait(WAIT_S)
        futures: dict[str, object] = {}
        threads = []
        for i, (name, slo) in enumerate(zip("ABC", slos)):
            thread = threading.Thread(target=lambda n=name, s=slo: futures.__setitem__(
                n, node.submit(f"task-{n}", APP, SIZE, slo=s)), daemon=True)
            thread.start()
            threads.append(thread)
            wait_until(lambda k=i + 1: node._slots.waiting == k, f"{name} waiting in line")
        release.set()
        assert first.result(timeout=WAIT_S).status == "OK"
        for thread in threads:
            thread.join(WAIT_S)
        outcomes = {name: future.result(timeout=WAIT_S) for name, future in futures.items()}
    assert start_order(outcomes) == expected, scenario
    # One at a time: each one finished before the next one started.
    ordered = [outcomes[name] for name in expected]
    assert all(a.finished_at_ms <= b.started_at_ms for a, b in zip(ordered, ordered[1:]))


@pytest.mark.parametrize("scheduler", ["fcfs", "iawp", "sjf_bsbf", "heft"])
@pytest.mark.parametrize("scenario,slos,expected",
                         [s for s in SCENARIOS if s[1] != (NONE, NONE, NONE)],
                         ids=[s[0] for s in SCENARIOS if s[1] != (NONE, NONE, NONE)])
def test_ready_stages_go_to_the_scheduler_most_urgent_first(blocker, scheduler, scenario, slos,
                                                            expected):
    """All admitted at once (max_in_flight 8) while the blocker holds the only core: whatever
    the node scheduler's own order (IAWP: speed-up, SJF: size, HEFT: rank), the most urgent
    task's ready stages get the core first, so the tasks start in the rule's order."""
    entered, release = blocker
    with NodeExecutor(settings(max_in_flight=8, scheduler=scheduler)) as node:
        first = node.submit("blocker", BLOCKER_APP, SIZE)
        assert entered.wait(WAIT_S)
        futures = {name: node.submit(f"task-{name}", APP, SIZE, slo=slo)
                   for name, slo in zip("ABC", slos)}
        wait_until(lambda: node.snapshot()["queue_depth"] == 3, "A, B, C admitted")
        time.sleep(0.05)  # the dispatcher has handled their arrival (ready, no room)
        release.set()
        assert first.result(timeout=WAIT_S).status == "OK"
        outcomes = {name: future.result(timeout=WAIT_S) for name, future in futures.items()}
    assert start_order(outcomes) == expected, scenario


def test_no_slo_ready_order_is_fcfs(blocker):
    entered, release = blocker
    with NodeExecutor(settings(max_in_flight=8)) as node:
        first = node.submit("blocker", BLOCKER_APP, SIZE)
        assert entered.wait(WAIT_S)
        futures = {name: node.submit(f"task-{name}", APP, SIZE) for name in "ABC"}
        wait_until(lambda: node.snapshot()["queue_depth"] == 3, "A, B, C admitted")
        release.set()
        assert first.result(timeout=WAIT_S).status == "OK"
        outcomes = {name: future.result(timeout=WAIT_S) for name, future in futures.items()}
    assert start_order(outcomes) == ["A", "B", "C"]


def test_run_task_takes_an_slo_and_a_bad_slo_fails_the_task():
    async def main(node):
        ok = await node.run_task("ok-1", APP, SIZE, slo=TaskSLO(deadline_s=2.0, priority=3))
        bad = await node.run_task("bad-1", APP, SIZE, slo={"deadline_ms": "5"})
        return ok, bad

    with NodeExecutor(settings(node_id="tm_slo")) as node:
        ok, bad = asyncio.run(main(node))
        refused = node.refuse("r-1", APP, "invalid task attributes: x").result(timeout=1)
        assert node.snapshot()["failed"] == 2
    assert ok.status == "OK"
    assert bad.status == "FAILED" and "slo must be" in bad.error and bad.stages == []
    assert (refused.status, refused.error, refused.node_id, refused.stages) == \
        ("FAILED", "invalid task attributes: x", "tm_slo", [])


# ------------------------------------------------------------------ the rule, on its own
def test_urgency_of_and_admission_keys():
    assert urgency_of(None, 1.0) is None
    assert urgency_of(TaskSLO(), 1.0) is None
    assert urgency_of(TaskSLO(tenant="a"), 1.0) is None
    assert urgency_of(TaskSLO(deadline_s=2.5), 1.0) == Urgency(3.5, 0)
    assert urgency_of(TaskSLO(priority=-4), 1.0) == Urgency(None, -4)
    with pytest.raises(TypeError, match="TaskSLO"):
        urgency_of({"deadline_ms": "1"}, 0.0)
    with pytest.raises(ValueError, match="finite"):
        urgency_of(TaskSLO(deadline_s=1.0), float("nan"))
    keys = [admission_key(Urgency(None, 0), 0.0), admission_key(None, 5.0),
            admission_key(Urgency(None, 9), 9.0), admission_key(Urgency(30.0, -100), 9.0),
            admission_key(Urgency(20.0, 0), 9.5), admission_key(Urgency(20.0, 1), 9.9)]
    ranked = sorted(range(len(keys)), key=lambda i: keys[i])
    assert ranked == [5, 4, 3, 2, 0, 1]


def test_priorities_break_equal_absolute_deadlines_and_stages_keep_dag_order():
    ready = [Stage(t, APP, stage, 10, ready_at_s=at) for t, stage, at in [
        ("t1", "face_landmarks", 0.3), ("t2", "face_detection", 0.1),
        ("t3", "face_detection", 0.2), ("t4", "face_detection", 0.0),
        ("t1", "face_detection", 0.3)]]
    urgency = {"t1": Urgency(5.0, 0), "t2": Urgency(5.0, 7), "t3": Urgency(1.0, 0)}
    assert [(s.task_id, s.stage) for s in urgency_order(ready, urgency)] == [
        ("t3", "face_detection"), ("t2", "face_detection"), ("t1", "face_detection"),
        ("t1", "face_landmarks"), ("t4", "face_detection")]


def cores(n: int, running: int = 0) -> list[ComputingUnit]:
    return [ComputingUnit(f"cpu:{i}", "cpu", running=("x",) if i < running else ())
            for i in range(n)]


class Recording:
    """A scheduler call that records its windows and places by a rule of its own."""

    def __init__(self, rule=lambda ready: ready):
        self.windows: list[list[str]] = []
        self.rule = rule

    def __call__(self, ready, units, now_s):
        self.windows.append([s.task_id for s in ready])
        return FcfsScheduler().assign(self.rule(ready), units, now_s)


def stages(*task_ids: str, cpu_only: bool = False) -> list[Stage]:
    return [Stage(t, APP, "face_detection", 10, gpu_capable=not cpu_only, ready_at_s=i)
            for i, t in enumerate(task_ids)]


WINDOW_CASES = [
    # (case, units, ordered, expected windows, expected placed)
    ("one window when the room holds every stage", cores(3), stages("a", "b"),
     [["a", "b"]], ["a", "b"]),
    ("a window per free slot's worth", cores(2), stages("a", "b", "c", "d"),
     [["a", "b"]], ["a", "b"]),
    ("no room: the scheduler is not asked", cores(2, running=2), stages("a"), [], []),
    ("busy units reduce the room", cores(3, running=2), stages("a", "b"), [["a"]], ["a"]),
]


@pytest.mark.parametrize("case,units,ordered,windows,placed", WINDOW_CASES,
                         ids=[c[0] for c in WINDOW_CASES])
def test_assign_in_windows(case, units, ordered, windows, placed):
    call = Recording()
    out = assign_in_windows(ordered, units, 0.0, call)
    assert call.windows == windows, case
    assert [a.stage.task_id for a in out] == placed, case


def test_a_scheduler_of_its_own_order_still_serves_the_window_first():
    """A scheduler that always prefers the last stage it sees (like SJF preferring a small
    one) gets only the urgent stage while there is one free slot."""
    call = Recording(rule=lambda ready: list(reversed(ready)))
    out = assign_in_windows(stages("urgent", "later", "last"), cores(1), 0.0, call)
    assert [a.stage.task_id for a in out] == ["urgent"] and call.windows == [["urgent"]]


def test_a_stage_the_scheduler_keeps_waiting_leaves_its_unit_to_the_next_window():
    def keeps_a_waiting(ready, units, now_s):
        return [Assignment(s, next(u.unit_id for u in units if not u.running), "test")
                for s in ready if s.task_id != "a"][:1]
    out = assign_in_windows(stages("a", "b", "c"), cores(1), 0.0, keeps_a_waiting)
    assert [a.stage.task_id for a in out] == ["b"]


def test_windows_are_bounded_then_the_rest_goes_in_one_call():
    call = Recording(rule=lambda ready: [])  # places nothing: every window is asked
    ordered = stages(*[f"t{i:02d}" for i in range(40)])
    assign_in_windows(ordered, cores(1), 0.0, call, max_windows=5)
    assert [len(w) for w in call.windows] == [1, 1, 1, 1, 36]


def test_without_urgencies_the_scheduler_is_asked_once_with_everything():
    calls = []

    class Core:
        def _assign(self, ready, units, now_s):
            calls.append(list(ready))
            return []

    ready = stages("b", "a")
    ExecutorCore._assign_in_order(Core(), ready, {}, cores(1), 0.0)
    assert calls == [ready]


# ------------------------------------------------------------------ the admission gate
def test_gate_hands_slots_to_the_most_urgent_waiter_and_nobody_jumps_the_line():
    gate = AdmissionGate(1, poll_s=0.01)
    assert gate.try_take(admission_key(None, 0.0))
    got: list[str] = []

    def wait(name, key):
        assert gate.take(key)
        got.append(name)

    keys = {"plain": admission_key(None, 1.0), "late": admission_key(Urgency(10.0), 2.0),
            "soon": admission_key(Urgency(3.0), 3.0)}
    threads = []
    for i, (name, key) in enumerate(keys.items()):
        threads.append(threading.Thread(target=wait, args=(name, key), daemon=True))
        threads[-1].start()
        wait_until(lambda k=i + 1: gate.waiting == k, f"{name} in line")
    assert not gate.try_take(admission_key(None, 0.5))  # a free-rider after "soon": no
    for expected in ("soon", "late", "plain"):
        gate.release()
        wait_until(lambda e=expected: e in got, expected)
        assert got[-1] == expected
    for thread in threads:
        thread.join(WAIT_S)
    gate.release()
    with pytest.raises(ValueError, match="more often"):
        gate.release()


def test_gate_waiters_that_give_up_or_are_stopped_take_nothing():
    gate = AdmissionGate(1, poll_s=0.01)
    assert gate.try_take(admission_key(None, 0.0))
    gave_up = threading.Event()
    gave_up.set()
    assert gate.take(admission_key(None, 1.0), gave_up) is False
    assert gate.take(admission_key(None, 1.0), stop=lambda: True) is False
    assert gate.waiting == 0
    gate.release()
    assert gate.try_take(admission_key(None, 2.0))
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="slots"):
            AdmissionGate(bad)


def test_a_closed_executor_refuses_waiting_submitters():
    entered, release = threading.Event(), threading.Event()
    with NodeExecutor(settings(max_in_flight=1)) as node:
        real = OPERATORS[BLOCKER_STAGE]
        OPERATORS[BLOCKER_STAGE] = lambda f, i, **o: (entered.set(), release.wait(WAIT_S),
                                                     real(f, i, **o))[-1]
        try:
            node.submit("blocker", BLOCKER_APP, SIZE)
            assert entered.wait(WAIT_S)
            errors = []

            def late():
                try:
                    node.submit("late", APP, SIZE)
                except RuntimeError as exc:
                    errors.append(str(exc))
            thread = threading.Thread(target=late, daemon=True)
            thread.start()
            wait_until(lambda: node._slots.waiting == 1, "late waiting")
            closer = threading.Thread(target=node.close, daemon=True)
            closer.start()
            wait_until(lambda: errors, "the waiter refused")
            release.set()
            closer.join(WAIT_S)
        finally:
            OPERATORS[BLOCKER_STAGE] = real
            release.set()
    assert "closed" in errors[0]


# ------------------------------------------------------------------ the Flink function
BAD_ATTRIBUTES = [
    ({"deadline_ms": "soon"}, "deadline_ms"),
    ({"deadline_ms": "nan"}, "deadline_ms"),
    ({"deadline_ms": "0"}, "deadline_ms"),
    ({"deadline_ms": "1e999"}, "deadline_ms"),
    ({"priority": "1000"}, "priority"),
    ({"priority": "high"}, "priority"),
    ({"tenant": "no spaces!"}, "tenant"),
    ({"tenant": "x" * 65}, "tenant"),
]


@pytest.fixture(scope="module")
def executor_function():
    from pyflink_jobs.executor_function import ExecutorFunctionSettings, NodeExecutorFunction
    function = NodeExecutorFunction("tm_a", ExecutorFunctionSettings(
        bootstrap_servers="127.0.0.1:1", feedback_interval_s=60.0, cpu_workers=1,
        scheduler="fcfs"))
    function.open(FakeContext())
    yield function
    function.feedback.producer = None
    function.close()


def invoke(function, event: dict) -> dict:
    from workload.codec import decode
    (encoded,) = asyncio.run(function.async_invoke(event))
    return decode("TaskResult", encoded)


@pytest.mark.parametrize("attributes,key", BAD_ATTRIBUTES, ids=[repr(a)[:30] for a, _ in
                                                                BAD_ATTRIBUTES])
def test_invalid_attributes_fail_the_task_with_the_key_named(executor_function, attributes,
                                                             key):
    before = executor_function.executor.snapshot()["failed"]
    result = invoke(executor_function, {"task_id": "bad-attr", "app_id": APP,
                                        "input_size": SIZE, "submitted_at_ms": 1,
                                        "attributes": attributes})
    assert result["status"] == "FAILED" and result["stage_timings"] == []
    assert "invalid task attributes" in result["error"] and repr(key) in result["error"]
    assert executor_function.executor.snapshot()["failed"] == before + 1


@pytest.mark.parametrize("attributes", [None, {}, {"deadline_ms": "1500", "priority": "-3",
                                                   "tenant": "team-a", "other": "kept"}])
def test_valid_or_absent_attributes_run_the_task(executor_function, attributes):
    event = {"task_id": f"good-{len(attributes or {})}", "app_id": APP, "input_size": SIZE,
             "submitted_at_ms": 1}
    if attributes is not None:
        event["attributes"] = attributes
    result = invoke(executor_function, event)
    assert result["status"] == "OK", result["error"]


def test_doctests():
    assert doctest.testmod(deadlines_module).failed == 0
