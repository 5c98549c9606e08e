"""The supervisor's decisions on a scripted cluster (the real one is in tests/integration)."""

from __future__ import annotations

import pytest

from streamplace.processes import LaunchError
from streamplace.supervisor import JobSupervisor, choose_host


class ScriptedCluster:
    """Answers like FlinkCluster and records what the supervisor asked of it."""

    def __init__(self, alive):
        self.alive = set(alive)
        self.log: list[tuple] = []

    def taskmanager_ids(self):
        return set(self.alive)

    def latest_checkpoint(self, job_id):
        self.log.append(("checkpoint", job_id))
        return f"file:///chk/{job_id}/chk-7"

    def cancel_job(self, job_id):
        self.log.append(("cancel", job_id))

    def stop_with_savepoint(self, job_id):
        self.log.append(("savepoint", job_id))
        return f"file:///sp/{job_id}"

    def wait_job_state(self, job_id, states, timeout_s=0):
        self.log.append(("wait", job_id, tuple(sorted(states))))
        return next(iter(states))


def make(alive=("tm_a", "tm_b", "tm_c")):
    cluster = ScriptedCluster(alive)
    submitted = []

    def submit(plan, retired, restore):
        submitted.append((dict(plan), dict(retired), restore))
        return f"job{len(submitted)}"

    supervisor = JobSupervisor(cluster, submit, "job0", {"tm_a": 1, "tm_b": 1, "tm_c": 1},
                               capacities={"tm_a": 2.0, "tm_b": 1.0, "tm_c": 0.5},
                               clock=iter(range(100)).__next__, sleep=lambda s: None)
    return cluster, supervisor, submitted


def test_nothing_happens_while_every_planned_node_is_alive():
    cluster, supervisor, submitted = make()
    assert supervisor.check_once() is None
    cluster.alive = set()  # REST down: no conclusion either
    assert supervisor.check_once() is None
    assert submitted == [] and cluster.log == []


def test_a_dead_taskmanager_is_replaced_from_the_last_checkpoint_with_its_operator_retired():
    cluster, supervisor, submitted = make()
    cluster.alive.discard("tm_c")
    report = supervisor.check_once()
    assert submitted == [({"tm_a": 1, "tm_b": 1}, {"tm_c": "tm_a"}, "file:///chk/job0/chk-7")]
    assert [entry[0] for entry in cluster.log] == ["checkpoint", "cancel", "wait", "wait"]
    assert report.lost_nodes == ["tm_c"] and report.new_job == "job1"
    assert report.recovery_s > 0 and supervisor.job_id == "job1"
    assert supervisor.check_once() is None  # the new plan no longer names tm_c


class BlinkingCluster(ScriptedCluster):
    """Answers each REST poll from a script of alive sets (the last one repeats)."""

    def __init__(self, polls):
        super().__init__(polls[0])
        self.polls = list(polls)

    def taskmanager_ids(self):
        return set(self.polls.pop(0) if len(self.polls) > 1 else self.polls[0])


@pytest.mark.parametrize("name, polls, lost", [
    ("missed one poll (heartbeat late under load)",
     [{"tm_a", "tm_b"}, {"tm_a", "tm_b", "tm_c"}], None),
    ("missing from both polls", [{"tm_a", "tm_b"}, {"tm_a", "tm_b"}], ["tm_c"]),
    ("two missing, one back on the second poll", [{"tm_a"}, {"tm_a", "tm_b"}], ["tm_c"]),
    ("REST down on the second poll", [{"tm_a", "tm_b"}, set()], None),
])
def test_a_node_is_lost_only_when_missing_from_two_polls(name, polls, lost):
    cluster = BlinkingCluster(polls)
    pauses = []
    supervisor = JobSupervisor(cluster, lambda plan, retired, restore: "job1", "job0",
                               {"tm_a": 1, "tm_b": 1, "tm_c": 1},
                               clock=iter(range(100)).__next__, sleep=pauses.append)
    report = supervisor.check_once()
    assert pauses[:1] == [JobSupervisor.CONFIRM_PAUSE_S], name
    if lost is None:
        assert report is None and cluster.log == [], name
    else:
        assert report.lost_nodes == lost, name


def test_a_returning_node_gets_its_own_executor_back_through_a_savepoint():
    cluster, supervisor, submitted = make()
    cluster.alive.discard("tm_c")
    supervisor.check_once()
    cluster.alive.add("tm_c")
    report = supervisor.apply_plan({"tm_a": 2, "tm_b": 1, "tm_c": 1})
    assert submitted[-1] == ({"tm_a": 2, "tm_b": 1, "tm_c": 1}, {}, "file:///sp/job1")
    assert report.retired == {} and supervisor.plan["tm_a"] == 2


def test_when_a_host_dies_its_retired_operators_move_with_it():
    cluster, supervisor, submitted = make()
    cluster.alive.discard("tm_c")
    supervisor.check_once()
    cluster.alive.discard("tm_a")
    supervisor.check_once()
    assert submitted[-1][:2] == ({"tm_b": 1}, {"tm_c": "tm_b", "tm_a": "tm_b"})


def test_removing_a_node_from_the_plan_retires_it():
    cluster, supervisor, submitted = make()
    supervisor.apply_plan({"tm_a": 1, "tm_b": 1})
    assert submitted[-1] == ({"tm_a": 1, "tm_b": 1}, {"tm_c": "tm_a"}, "file:///sp/job0")


HOST_CASES = [
    ("most capable wins", {"tm_a": 1, "tm_b": 1}, {"tm_a": 2.0, "tm_b": 1.0}, "tm_a"),
    ("capacity beats instances", {"tm_a": 1, "tm_b": 3}, {"tm_a": 2.0, "tm_b": 1.0}, "tm_a"),
    ("equal capacity: more instances", {"tm_a": 1, "tm_b": 3}, {}, "tm_b"),
    ("full tie: the first name", {"tm_a": 1, "tm_b": 1}, {}, "tm_a"),
]


@pytest.mark.parametrize("name,plan,capacities,expected", HOST_CASES,
                         ids=[c[0] for c in HOST_CASES])
def test_choose_host(name, plan, capacities, expected):
    assert choose_host(plan, capacities) == expected


def test_no_host_left_is_a_clear_error():
    with pytest.raises(ValueError, match="no node left"):
        choose_host({})


class FlakyCluster(ScriptedCluster):
    """The first ``failures`` jobs submitted fail at once; ``on_fail`` runs when one does
    (e.g. PyFlink killing another TaskManager while the previous job was cancelled)."""

    def __init__(self, alive, failures, on_fail=lambda cluster: None):
        super().__init__(alive)
        self.failures, self.on_fail = failures, on_fail

    def wait_job_state(self, job_id, states, timeout_s=0):
        super().wait_job_state(job_id, states, timeout_s)
        if "RUNNING" in states and self.failures > 0:
            self.failures -= 1
            self.on_fail(self)
            raise LaunchError(f"job {job_id} is FAILED: NoResourceAvailableException")
        return next(iter(states))


def make_flaky(failures, on_fail=lambda cluster: None):
    cluster = FlakyCluster(("tm_a", "tm_b", "tm_c"), failures, on_fail)
    submitted, pauses = [], []

    def submit(plan, retired, restore):
        submitted.append((dict(plan), dict(retired), restore))
        return f"job{len(submitted)}"

    supervisor = JobSupervisor(cluster, submit, "job0", {"tm_a": 1, "tm_b": 1, "tm_c": 1},
                               capacities={"tm_a": 2.0, "tm_b": 1.0, "tm_c": 0.5},
                               clock=iter(range(100)).__next__, sleep=pauses.append)
    return cluster, supervisor, submitted, pauses


def test_a_resubmission_that_fails_because_another_node_died_is_retried_without_it():
    cluster, supervisor, submitted, pauses = make_flaky(1, lambda c: c.alive.discard("tm_a"))
    cluster.alive.discard("tm_c")
    report = supervisor.check_once()
    assert submitted[0] == ({"tm_a": 1, "tm_b": 1}, {"tm_c": "tm_a"}, "file:///chk/job0/chk-7")
    # tm_a died under the first resubmission: the second runs on tm_b alone, hosting both
    # retired executors, from the newest checkpoint (the failed job's)
    assert submitted[1] == ({"tm_b": 1}, {"tm_c": "tm_b", "tm_a": "tm_b"},
                            "file:///chk/job1/chk-7")
    # each loss confirmed by a second poll; one pause before the retry
    assert ("cancel", "job1") in cluster.log
    assert pauses == [JobSupervisor.CONFIRM_PAUSE_S, JobSupervisor.RETRY_PAUSE_S,
                      JobSupervisor.CONFIRM_PAUSE_S]
    assert report.lost_nodes == ["tm_c", "tm_a"] and report.old_job == "job0"
    assert report.new_job == "job2" and supervisor.job_id == "job2"
    assert report.timings["attempts"] == 2.0 and len(supervisor.errors) == 1


def test_after_the_last_failed_attempt_the_error_reaches_the_caller():
    cluster, supervisor, submitted, _ = make_flaky(JobSupervisor.RESUBMIT_ATTEMPTS)
    cluster.alive.discard("tm_c")
    with pytest.raises(LaunchError, match="FAILED"):
        supervisor.check_once()
    assert len(submitted) == JobSupervisor.RESUBMIT_ATTEMPTS
    assert supervisor.job_id == f"job{JobSupervisor.RESUBMIT_ATTEMPTS}"  # the newest job
    assert supervisor.plan == {"tm_a": 1, "tm_b": 1, "tm_c": 1}  # nothing recovered yet


def test_the_watcher_survives_a_failed_recovery_and_tries_again():
    cluster, supervisor, submitted, _ = make_flaky(JobSupervisor.RESUBMIT_ATTEMPTS)
    cluster.alive.discard("tm_c")
    reports = []
    checks = iter(range(10))
    supervisor.watch(interval_s=0.0, until=lambda: bool(reports) or next(checks) > 5,
                     on_report=reports.append)
    assert len(reports) == 1 and reports[0].lost_nodes == ["tm_c"]
    assert reports[0].old_job == f"job{JobSupervisor.RESUBMIT_ATTEMPTS}"
    assert any("check failed" in e for e in supervisor.errors)
