"""``streamplace cluster start|stop|status``: a real standalone Flink 2.2 cluster from the
apache-flink wheel's own distribution (FLINK_HOME is the installed ``pyflink`` package).

One JobManager and one TaskManager per entry of the cluster spec. Each TaskManager gets its own
configuration folder, its node id as ``taskmanager.resource-id``, an external resource named after
it (for pinning operators through slot sharing groups, with fine-grained resource management on),
explicit JVM memory sizes, its CPU affinity (taskset), and in its environment its node id, work
multiplier, thread limits and CUDA_VISIBLE_DEVICES. Python workers run in process mode with this
virtualenv's interpreter.

With ``isolation: host`` in the spec (and a machine that can emulate hosts) each TaskManager
runs in its own emulated host at its own address, the JobManager binds the head address, and
``stop`` removes the hosts (``streamplace.flink_hosts``); otherwise CPU-set mode, as before.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from placement.service.flink_rest import FlinkRestClient, FlinkRestError, FlinkUnreachable
from streamplace.config import StreamplaceConfig
from streamplace.flink_files import ProcessFiles, flink_home
from streamplace.flink_hosts import (HostLauncher, IsolationPlan, plan_isolation,
                                     taskmanager_address, with_host_addresses)
from streamplace.flink_jobs import run_python_job, wait_for_job_state, wait_for_savepoint
from streamplace.processes import LaunchError, ManagedProcess, require_java, tail
from workload.cluster_spec import LocalClusterSpec, TaskManagerSpec, load_cluster_spec

__all__ = ["FlinkCluster", "flink_home", "TaskManagerStatus", "ClusterStatus"]

#: Seconds a status poll of the REST API may take (the JobManager answers in milliseconds; a
#: hung one must not stall `streamplace cluster status`).
REST_POLL_TIMEOUT_S = 5.0
#: Seconds a job-control request (stop-with-savepoint, cancel) may take to be accepted.
REST_CONTROL_TIMEOUT_S = 10.0



@dataclass
class TaskManagerStatus:
    node_id: str
    running: bool
    registered: bool
    pid: int | None
    slots_total: int | None = None
    slots_free: int | None = None
    external_resources: dict | None = None
    address: str | None = None   # its own host's address (host mode only)


@dataclass
class ClusterStatus:
    jobmanager_running: bool
    rest_url: str
    taskmanagers: list[TaskManagerStatus]
    jobs: list[dict]
    isolation: str = ""   # IsolationPlan.describe(): the mode in use and why

    def __str__(self) -> str:
        lines = [f"flink: JobManager {'running' if self.jobmanager_running else 'stopped'}"
                 + (f", web UI and REST at {self.rest_url}" if self.jobmanager_running else "")]
        if self.isolation:
            lines.append(f"  {self.isolation}")
        for tm in self.taskmanagers:
            state = "registered" if tm.registered else ("starting" if tm.running else "stopped")
            extra = ""
            if tm.registered:
                extra = f", slots free {tm.slots_free}/{tm.slots_total}, " \
                        f"resources {tm.external_resources}"
            lines.append(f"  {tm.node_id}: {state}" + (f" (pid {tm.pid})" if tm.pid else "")
                         + (f" at {tm.address}" if tm.address else "") + extra)
        for job in self.jobs:
            lines.append(f"  job {job.get('jid')}: {job.get('name')} {job.get('state')}")
        return "\n".join(lines)


def newest_checkpoint_path(checkpoints: dict) -> str | None:
    """The external path of the newest completed checkpoint or savepoint in a REST
    ``/jobs/<id>/checkpoints`` body, or None."""
    latest = checkpoints.get("latest") or {}
    candidates = [c for c in (latest.get("completed"), latest.get("savepoint")) if c]
    if not candidates:
        return None
    newest = max(candidates, key=lambda c: c.get("latest_ack_timestamp", 0))
    return newest.get("external_path")


def newest_retained_checkpoint(folder: Path) -> str | None:
    """The URI of the highest ``chk-N`` in ``folder`` that holds its ``_metadata``, or None."""
    done = [(int(p.name[4:]), p) for p in folder.glob("chk-*")
            if p.name[4:].isdigit() and (p / "_metadata").is_file()]
    return max(done)[1].as_uri() if done else None


class FlinkCluster:
    """The local cluster described by ``config.flink`` and its cluster spec.

    Example::

        cluster = FlinkCluster(load_config())
        cluster.start()            # JobManager + one TaskManager per spec entry, waits for all
        print(cluster.status())
        cluster.stop()
    """

    def __init__(self, config: StreamplaceConfig, spec: LocalClusterSpec | None = None,
                 plan: IsolationPlan | None = None):
        self.spec = spec or load_cluster_spec(config.flink.cluster_spec)
        # ``plan``: tests pass one; else probe the machine (only for an isolation: host spec).
        self.isolation = plan or plan_isolation(config, self.spec)
        if self.isolation.emulated:  # no-op when load_config already moved the addresses
            config = with_host_addresses(config, self.spec, probe=lambda: (True, ""))
        self.config = config
        self.files = ProcessFiles(config, self.spec, self.isolation,
                                  HostLauncher(config, self.spec))
        self.hosts_note: str | None = None   # what stop() did with the hosts, for the CLI
        self.dir = config.flink_dir
        self.rest_url = config.flink.rest_url
        self.rest = FlinkRestClient(self.rest_url, timeout_s=REST_POLL_TIMEOUT_S)
        self.jobmanager = ManagedProcess(
            name="Flink JobManager", pid_file=self.dir / "jobmanager" / "process.pid",
            log_file=self.dir / "jobmanager" / "log" / "console.out",
            marker=str(self.dir / "jobmanager" / "conf"),
            ports=[(config.flink.host, config.flink.rest_port),
                   (config.flink.host, config.flink.rpc_port)])

    @property
    def hosts(self) -> HostLauncher:
        """The emulated hosts' launcher (shared with :attr:`files`, which wraps commands in it)."""
        return self.files.hosts

    @hosts.setter
    def hosts(self, launcher: HostLauncher) -> None:
        self.files.hosts = launcher

    # Processes ---------------------------------------------------------------------------------
    def _tm_process(self, tm: TaskManagerSpec) -> ManagedProcess:
        base = self.dir / tm.id
        return ManagedProcess(name=f"Flink TaskManager {tm.id}", pid_file=base / "process.pid",
                              log_file=base / "log" / "console.out", marker=str(base / "conf"))

    # Public API -------------------------------------------------------------------------------
    def start(self) -> "ClusterStatus":
        """Start whatever is not running yet and wait until every TaskManager registered."""
        require_java()  # fail with the install hint before writing any configuration
        self.spec.check_fits_machine()
        common = self.files.common_config()
        if self.isolation.emulated:  # the bridge (head address) must exist before any bind
            busy = any(self._tm_process(tm).is_running() for tm in self.spec.taskmanagers)
            self.hosts.ensure(busy=busy)
        if not self.jobmanager.is_running():
            self.jobmanager.check_ports_free()
            jm_conf = dict(common)
            jm_conf["io.tmp.dirs"] = str(self.dir / "jobmanager" / "tmp")
            jm_conf["web.tmpdir"] = str(self.dir / "jobmanager" / "tmp")
            self.files.write_conf("jobmanager", jm_conf)
            self.jobmanager.launch([str(flink_home() / "bin" / "jobmanager.sh"),
                                    "start-foreground"], env=self.files.env("jobmanager"))
        taskset = shutil.which("taskset")
        for tm in self.spec.taskmanagers:
            proc = self._tm_process(tm)
            if proc.is_running():
                continue
            # a stale working directory (earlier jobs' blobs) only slows the start down
            shutil.rmtree(self.files.working_dir(tm.id), ignore_errors=True)
            self.files.write_conf(tm.id, self.files.taskmanager_config(tm, common))
            proc.launch(self.files.taskmanager_command(tm, taskset), env=self.files.taskmanager_env(tm))
        self.jobmanager.wait_ready(self._rest_up, self.config.flink.start_timeout_s,
                                   log_to_show=self._newest_log("jobmanager"))
        deadline = time.monotonic() + self.config.flink.start_timeout_s
        while True:
            registered = self._registered_ids()
            missing = [tm for tm in self.spec.taskmanagers if tm.id not in registered]
            if not missing:
                break
            for tm in missing:
                if not self._tm_process(tm).is_running():
                    log = self._newest_log(tm.id)
                    raise LaunchError(f"TaskManager {tm.id} exited during start-up. Last log "
                                      f"lines ({log}):\n{tail(log)}")
            if time.monotonic() > deadline:
                raise LaunchError(f"TaskManagers {[tm.id for tm in missing]} did not register "
                                  f"within {self.config.flink.start_timeout_s:.0f} s; logs in "
                                  f"{self.dir}/<node>/log")
            time.sleep(0.5)
        return self.status()

    def stop(self) -> list[str]:
        """Stop TaskManagers, then the JobManager, then remove the emulated hosts this home's
        state file lists (whatever the spec says now; also after a crash) unless the broker
        still listens on the head address. Returns the names of what was stopped."""
        stopped = []
        for tm in self.spec.taskmanagers:
            if self._tm_process(tm).stop(timeout_s=30):
                stopped.append(tm.id)
            if not self._tm_process(tm).is_running():
                shutil.rmtree(self.files.working_dir(tm.id), ignore_errors=True)
        if self.jobmanager.stop(timeout_s=30):
            stopped.append("jobmanager")
        self.hosts_note = self.hosts.release(still_needed=self._broker_running)
        return stopped

    def _broker_running(self) -> bool:
        from streamplace.kafka_broker import KafkaBroker  # it imports this module's config only
        return KafkaBroker(self.config).process.is_running()

    def processes_running(self) -> bool:
        """Whether the JobManager or any TaskManager of this home still runs."""
        return self.jobmanager.is_running() or any(
            self._tm_process(tm).is_running() for tm in self.spec.taskmanagers)

    def taskmanager_running(self, node_id: str) -> bool:
        """Whether the process of TaskManager ``node_id`` of this home runs (not whether it
        is registered with the JobManager: see :meth:`taskmanager_ids`)."""
        return self._tm_process(self.spec.node(node_id)).is_running()

    def kill_taskmanager(self, node_id: str, hard: bool = False) -> bool:
        """Stop one TaskManager (node leaving), or with ``hard`` SIGKILL it and its Python
        workers at once, as a crash would (failure tests)."""
        process = self._tm_process(self.spec.node(node_id))
        return process.stop(timeout_s=0 if hard else 10)

    def status(self) -> ClusterStatus:
        overview = self._get("/taskmanagers") if self.jobmanager.is_running() else None
        by_id = {tm["id"]: tm for tm in (overview or {}).get("taskmanagers", [])}
        tms = []
        for tm in self.spec.taskmanagers:
            info = by_id.get(tm.id)
            proc = self._tm_process(tm)
            tms.append(TaskManagerStatus(
                node_id=tm.id, running=proc.is_running(), registered=info is not None,
                pid=proc.pid(), address=(taskmanager_address(self.isolation, self.spec, tm.id)
                                         if self.isolation.emulated else None),
                slots_total=info.get("slotsNumber") if info else None,
                slots_free=info.get("freeSlots") if info else None,
                external_resources=(info.get("totalResource", {}).get("extendedResources")
                                    if info else None)))
        jobs = (self._get("/jobs/overview") or {}).get("jobs", []) if overview else []
        return ClusterStatus(self.jobmanager.is_running(), self.rest_url, tms, jobs,
                             self.isolation.describe())

    # REST helpers ------------------------------------------------------------------------------
    def _get(self, path: str) -> dict | None:
        # None while the JobManager is down or says no: every caller here polls.
        return self.rest.get_or_none(path)

    def _rest_up(self) -> bool:
        return self._get("/overview") is not None

    def _registered_ids(self) -> set[str]:
        return {tm["id"] for tm in (self._get("/taskmanagers") or {}).get("taskmanagers", [])}

    def _newest_log(self, name: str) -> Path:
        logs = sorted((self.dir / name / "log").glob("*.log"), key=lambda p: p.stat().st_mtime)
        return logs[-1] if logs else self.dir / name / "log" / "console.out"

    # Jobs --------------------------------------------------------------------------------------
    def submit_python_job(self, script: Path, args: list[str], timeout_s: float = 180,
                          restore_from: str | None = None,
                          default_env: dict[str, str] | None = None) -> str:
        """``flink run -d -py script -- args`` against this cluster; returns the job id.
        ``restore_from``: a savepoint or retained checkpoint to start from (state of operators
        that no longer exist is skipped: ``--allowNonRestoredState``). ``default_env``:
        variables for the job's client where the caller's environment has none of its own."""
        env = self.files.env("client")
        env["FLINK_CONF_DIR"] = str(self.files.conf_dir("jobmanager"))
        for name, value in (default_env or {}).items():
            env.setdefault(name, value)
        return run_python_job(f"{self.config.flink.host}:{self.config.flink.rest_port}", script,
                              args, env, timeout_s, restore_from)

    def job(self, job_id: str) -> dict | None:
        return self._get(f"/jobs/{job_id}")

    def wait_job_state(self, job_id: str, states: set[str], timeout_s: float = 120) -> str:
        """Wait until ``job_id`` is in one of ``states`` and return it; LaunchError when the
        job ends in another state or ``timeout_s`` passes."""
        return wait_for_job_state(self.rest, job_id, states, timeout_s)

    def taskmanager_ids(self) -> set[str]:
        """Resource ids of the TaskManagers registered now (empty when REST is down)."""
        return self._registered_ids()

    def latest_checkpoint(self, job_id: str) -> str | None:
        """External path of the job's newest completed checkpoint (or savepoint), if any."""
        return newest_checkpoint_path(self._get(f"/jobs/{job_id}/checkpoints") or {})

    def latest_checkpoint_on_disk(self, job_id: str) -> str | None:
        """The newest completed checkpoint of ``job_id`` in this cluster's checkpoint folder
        (``chk-N`` with its ``_metadata``): what a job is restored from when the JobManager,
        and with it REST and the checkpoint history, is gone. Retained checkpoints only
        (``externalized-checkpoint-retention``, set by this launcher)."""
        return newest_retained_checkpoint(self.dir / "checkpoints" / job_id)

    def restart_jobmanager(self, hard: bool = True) -> float:
        """Stop the JobManager (SIGKILL with ``hard``, as a crash would) and start it again;
        the running TaskManagers register with the new one. Without HA services the new
        JobManager does not know the old jobs: resubmit them from
        :meth:`latest_checkpoint_on_disk` (``streamplace.supervisor`` does the same for a
        lost TaskManager). Returns the seconds until every TaskManager registered again."""
        began = time.monotonic()
        self.jobmanager.stop(timeout_s=0 if hard else 30)
        try:
            self.start()
        except LaunchError as exc:
            # A TaskManager may shut itself down while its JobManager is gone (seen once in
            # make faults: tm_a stopped as the new JobManager came up). start() launches
            # whatever is not running, so one more call brings it back; a second failure is
            # a real one.
            print(f"a TaskManager stopped during the JobManager's restart ({str(exc)[:200]}); "
                  "starting what is not running again", file=sys.stderr)
            self.start()
        return time.monotonic() - began

    def stop_with_savepoint(self, job_id: str, timeout_s: float = 120) -> str:
        """Stop the job with a savepoint (no drain: in-flight async tasks stay in the savepoint
        and are re-issued on restore); returns the savepoint path."""
        target = (self.dir / "savepoints").as_uri()
        try:
            trigger = self.rest.trigger_stop_with_savepoint(job_id, target, drain=False,
                                                            timeout_s=REST_CONTROL_TIMEOUT_S)
        except (FlinkUnreachable, FlinkRestError) as exc:
            raise LaunchError(f"stop-with-savepoint of {job_id} was not accepted: {exc}") \
                from None
        return wait_for_savepoint(self.rest, job_id, trigger, timeout_s)

    def cancel_job(self, job_id: str) -> None:
        """Ask Flink to cancel ``job_id``; a JobManager that is gone or does not know the job
        is ignored (there is nothing left to cancel)."""
        try:
            self.rest.cancel(job_id, timeout_s=REST_CONTROL_TIMEOUT_S)
        except (FlinkUnreachable, FlinkRestError):
            pass
