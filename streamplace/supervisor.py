"""Keeping a hooked job on the nodes that exist: plan changes, nodes leaving, dead TaskManagers.

Flink pins each executor operator to one TaskManager; if that TaskManager dies, Flink's own
restarts cannot help (no other TaskManager offers its resource) and the job keeps restarting.
:class:`JobSupervisor` watches the cluster and carries out every change by resubmission:

- **A pinned TaskManager died** (:meth:`JobSupervisor.check_once`): take the job's last retained
  checkpoint, cancel the restarting job, resubmit it from that checkpoint without the dead node.
  The dead node's executor operator keeps its uid but is hosted on the most capable survivor
  ("retired"), so the tasks that were in flight there (in the async operator's checkpointed
  state) are re-issued and finish on the host; the router sends it nothing new. Records after
  the checkpoint are read again from Kafka, and the exactly-once sink aborts what the dead job
  had not committed, so results stay exactly-once.
- **A new plan, or a node joining or leaving** (:meth:`JobSupervisor.apply_plan`): stop with a
  savepoint (no drain), resubmit with the new plan from it. A node that comes back is taken off
  the retired list and gets its own executor operator (same uid) again.

Meanwhile: between the TaskManager's death and the new job's RUNNING state no task completes
(the closing note of the integration test measures how long); tasks keep queueing in Kafka and
nothing is lost. Retired operators stay in the job until the node returns.

Example::

    supervisor = JobSupervisor(cluster, submit=lambda plan, retired, restore: ..., job_id=jid,
                               plan={"tm_a": 1, "tm_b": 1, "tm_c": 1})
    report = supervisor.check_once()      # None while every planned node is alive
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from streamplace.processes import LaunchError

__all__ = ["JobSupervisor", "RecoveryReport", "choose_host"]

_log = logging.getLogger(__name__)

Submit = Callable[[dict[str, int], dict[str, str], "str | None"], str]


@dataclass
class RecoveryReport:
    """What the supervisor did and how long each part took (wall-clock seconds)."""

    reason: str
    lost_nodes: list[str]
    old_job: str
    new_job: str
    restored_from: str | None
    plan: dict[str, int]
    retired: dict[str, str]
    detected_at: float
    resubmitted_at: float
    running_at: float
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def recovery_s(self) -> float:
        return self.running_at - self.detected_at


def choose_host(plan: dict[str, int], capacities: dict[str, float] | None = None) -> str:
    """The node that hosts a retired node's executor: the most capable planned node (ties: the
    one with more executor instances, then the name)."""
    if not plan:
        raise ValueError("no node left to host the retired executors")
    capacities = capacities or {}
    return max(sorted(plan), key=lambda n: (capacities.get(n, 1.0), plan[n]))


class JobSupervisor:
    #: Submissions tried per recovery before giving up (the new job can fail at once when
    #: another TaskManager died meanwhile, e.g. PyFlink 2.2.1 killing one on job cancel).
    RESUBMIT_ATTEMPTS = 3
    #: Seconds a resubmitted job may take to reach RUNNING.
    RUNNING_TIMEOUT_S = 240.0
    #: Seconds between a failed submission and the next (lets dying TaskManagers deregister).
    RETRY_PAUSE_S = 5.0
    #: Seconds before a TaskManager missing from the REST list is looked for again: under load
    #: a live TaskManager can miss a heartbeat and drop out of the list for a moment; only one
    #: missing from both polls counts as lost (retiring a live node costs a resubmission).
    CONFIRM_PAUSE_S = 3.0

    def __init__(self, cluster, submit: Submit, job_id: str, plan: dict[str, int],
                 retired: dict[str, str] | None = None,
                 capacities: dict[str, float] | None = None, clock=time.time,
                 sleep: Callable[[float], None] = time.sleep):
        self.cluster = cluster
        self.submit = submit
        self.job_id = job_id
        self.plan = dict(plan)
        self.retired = dict(retired or {})
        self.capacities = dict(capacities or {})
        self.clock = clock
        self.sleep = sleep
        self.reports: list[RecoveryReport] = []
        self.errors: list[str] = []

    def _missing(self, nodes) -> list[str]:
        """The nodes of ``nodes`` absent from two REST polls ``CONFIRM_PAUSE_S`` apart (none
        while REST is down: nothing to conclude)."""
        alive = self.cluster.taskmanager_ids()
        missing = [n for n in sorted(nodes) if alive and n not in alive]
        if not missing:
            return []
        self.sleep(self.CONFIRM_PAUSE_S)
        alive = self.cluster.taskmanager_ids()
        confirmed = [n for n in missing if alive and n not in alive]
        if len(confirmed) < len(missing):
            _log.info("supervisor: %s missed one REST poll but is registered again",
                      ", ".join(n for n in missing if n not in confirmed))
        return confirmed

    def _retire(self, lost: list[str], plan: dict[str, int]) -> dict[str, str]:
        """Where each retired executor lives under ``plan``: a lost node's on the most capable
        planned node; an earlier retired one stays on its host while that is planned."""
        retired = {n: h for n, h in self.retired.items() if n not in plan}
        if lost or retired:
            host = choose_host(plan, self.capacities)
            retired = {n: (h if h in plan else host) for n, h in retired.items()}
            retired.update({n: host for n in lost})
        return retired

    def _resubmit(self, reason: str, lost: list[str], plan: dict[str, int],
                  restore: str | None, detected: float, timings: dict) -> RecoveryReport:
        old_job, lost, plan = self.job_id, list(lost), dict(plan)
        started = self.clock()
        for attempt in range(1, self.RESUBMIT_ATTEMPTS + 1):
            retired = self._retire(lost, plan)
            new_job = None
            try:
                new_job = self.submit(plan, retired, restore)
                resubmitted = self.clock()
                self.cluster.wait_job_state(new_job, {"RUNNING"},
                                            timeout_s=self.RUNNING_TIMEOUT_S)
                break
            except (LaunchError, TimeoutError) as exc:
                self.errors.append(f"attempt {attempt}: {exc}"[:2000])
                _log.warning("supervisor: resubmission %d of %d failed: %s", attempt,
                             self.RESUBMIT_ATTEMPTS, str(exc)[:500])
                if new_job is not None:
                    self.job_id = new_job  # the job to cancel / restore from from now on
                if attempt == self.RESUBMIT_ATTEMPTS:
                    raise
                # Why it failed is usually a node that died meanwhile: drop it from the plan
                # and retry from the newest checkpoint there is.
                if new_job is not None:
                    self.cluster.cancel_job(new_job)
                self.sleep(self.RETRY_PAUSE_S)
                gone = self._missing(plan)
                lost += [n for n in gone if n not in lost]
                plan = {n: c for n, c in plan.items() if n not in gone}
                if new_job is not None:
                    restore = self.cluster.latest_checkpoint(new_job) or restore
        timings["submit_s"] = resubmitted - started
        timings["attempts"] = float(attempt)
        running = self.clock()
        report = RecoveryReport(reason, lost, old_job, new_job, restore, dict(plan),
                                dict(retired), detected, resubmitted, running, timings)
        self.job_id, self.plan, self.retired = new_job, dict(plan), retired
        self.reports.append(report)
        return report

    def check_once(self) -> RecoveryReport | None:
        """If a planned node is gone from the cluster (missing from two REST polls), move the
        job off it (see module doc)."""
        lost = self._missing(self.plan)
        if not lost:
            return None
        detected = self.clock()
        timings: dict[str, float] = {}
        restore = self.cluster.latest_checkpoint(self.job_id)
        self.cluster.cancel_job(self.job_id)
        try:
            self.cluster.wait_job_state(self.job_id, {"CANCELED", "FAILED", "FINISHED"},
                                        timeout_s=60)
        except Exception:  # noqa: BLE001 - a job stuck cancelling must not block recovery
            pass
        timings["cancel_s"] = self.clock() - detected
        plan = {n: c for n, c in self.plan.items() if n not in lost}
        return self._resubmit(f"TaskManager(s) {', '.join(lost)} left the cluster", lost, plan,
                              restore, detected, timings)

    def apply_plan(self, plan: dict[str, int]) -> RecoveryReport:
        """Carry out a new plan (nodes joining or leaving, other instance counts) by
        stop-with-savepoint and resubmission."""
        detected = self.clock()
        savepoint = self.cluster.stop_with_savepoint(self.job_id)
        timings = {"savepoint_s": self.clock() - detected}
        left = sorted(n for n in self.plan if n not in plan)
        for node in plan:
            self.retired.pop(node, None)  # a returning node hosts its own executor again
        return self._resubmit("new plan", left, dict(plan), savepoint, detected, timings)

    def watch(self, interval_s: float = 2.0, until: Callable[[], bool] = lambda: False,
              on_report: Callable[[RecoveryReport], None] = print) -> None:
        """Check every ``interval_s`` until ``until()`` is true."""
        while not until():
            try:
                report = self.check_once()
            except Exception as exc:  # noqa: BLE001 - the watcher outlives one failed recovery
                self.errors.append(f"check failed: {exc}"[:2000])
                _log.warning("supervisor: recovery failed, trying again in %.0f s: %s",
                             interval_s, exc)
                report = None
            if report is not None:
                on_report(report)
            self.sleep(interval_s)
