"""What the Flink processes of a local cluster are started with: their configuration files,
environments and command lines (:class:`ProcessFiles`), rendered from streamplace's config and
the cluster spec. :class:`streamplace.flink_cluster.FlinkCluster` starts and stops the
processes; this module only decides what they get, so its output is testable without a JVM.

Example::

    files = ProcessFiles(config, spec, plan_isolation(config, spec), HostLauncher(config, spec))
    common = files.common_config()
    conf = files.taskmanager_config(spec.node("tm_a"), common)   # tm_a's config.yaml
"""

from __future__ import annotations

import importlib.util
import json
import os
import site
import shutil
import sys
from pathlib import Path

import yaml

from pyflink_jobs.flink_ops import ROUTER_RESOURCE
from streamplace.config import StreamplaceConfig
from streamplace.flink_hosts import (HostLauncher, IsolationPlan, taskmanager_address,
                                     taskmanager_host_options)
from streamplace.processes import LaunchError, require_java
from workload.cluster_spec import JVM_METASPACE_MB, LocalClusterSpec, TaskManagerSpec

__all__ = ["ProcessFiles", "flink_home", "LOG_CONFIG_FILES"]

LOG_CONFIG_FILES = ("log4j-console.properties", "log4j.properties", "log4j-cli.properties",
                    "logback-console.xml", "logback.xml")


def flink_home() -> Path:
    """The Flink distribution inside the installed apache-flink wheel (no pyflink import)."""
    spec = importlib.util.find_spec("pyflink")
    if spec is None or not spec.submodule_search_locations:
        raise LaunchError("apache-flink is not installed in this Python environment "
                          f"({sys.executable}); run `make install`")
    home = Path(list(spec.submodule_search_locations)[0])
    if not (home / "bin" / "taskmanager.sh").is_file():
        raise LaunchError(f"{home} does not contain Flink's bin/ scripts; reinstall apache-flink")
    return home


def _flatten(data: dict, prefix: str = "") -> dict[str, object]:
    flat: dict[str, object] = {}
    for key, value in data.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, full + "."))
        else:
            flat[full] = value
    return flat



class ProcessFiles:
    """Configuration folders, environments and command lines of one cluster's processes
    (``<flink_dir>/<name>/conf``, one per process: ``jobmanager``, each TaskManager id,
    ``client``)."""

    def __init__(self, config: StreamplaceConfig, spec: LocalClusterSpec,
                 isolation: IsolationPlan, hosts: HostLauncher):
        self.config = config
        self.spec = spec
        self.isolation = isolation
        self.hosts = hosts
        self.dir = config.flink_dir

    def conf_dir(self, name: str) -> Path:
        return self.dir / name / "conf"

    def common_config(self) -> dict[str, object]:
        shipped = yaml.safe_load((flink_home() / "conf" / "config.yaml").read_text()) or {}
        conf = _flatten(shipped)
        f = self.config.flink
        venv_python = sys.executable
        conf.update({
            "jobmanager.rpc.address": f.host, "jobmanager.rpc.port": f.rpc_port,
            "jobmanager.bind-host": f.host,
            "rest.address": f.host, "rest.port": f.rest_port, "rest.bind-address": f.host,
            "taskmanager.bind-host": f.host, "taskmanager.host": f.host,
            "jobmanager.memory.process.size": f"{f.jobmanager_memory_mb}m",
            "cluster.fine-grained-resource-management.enabled": True,
            "parallelism.default": self.config.job.parallelism,
            "execution.checkpointing.dir": (self.dir / "checkpoints").as_uri(),
            "execution.checkpointing.savepoint-dir": (self.dir / "savepoints").as_uri(),
            # Python workers (process mode) must use the interpreter that has streamplace.
            "python.executable": venv_python, "python.client.executable": venv_python,
            # Notice a dead TaskManager in seconds, not the default 50 s.
            "heartbeat.interval": 2000, "heartbeat.timeout": 15000,
            # A consumer asks for its producer's partition with backoff up to this long before
            # failing the job (default 10 s): a producer on a slow host (an emulated 0.35-core
            # host, a busy real one) whose Python worker still imports torch needs longer, and
            # failing there restarted the job in a loop (PartitionNotFoundException).
            "taskmanager.network.request-backoff.max": 60000,
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": 50,
            "restart-strategy.fixed-delay.delay": "2 s",
            # A cancelled job keeps its last checkpoint, so a job whose pinned TaskManager died
            # can be resubmitted from it on the remaining nodes (streamplace.supervisor).
            "execution.checkpointing.externalized-checkpoint-retention":
                "RETAIN_ON_CANCELLATION",
        })
        if f.python_execution_mode == "thread":
            conf["python.execution-mode"] = "thread"
        conf.update(f.extra_config)
        if f.python_execution_mode == "thread":
            # pemja from the TaskManager's own classpath (thread_mode_lib), never a job's copy:
            # its native library loads once per JVM
            key = "classloader.parent-first-patterns.additional"
            patterns = [p for p in str(conf.get(key, "")).split(";") if p]
            conf[key] = ";".join(patterns + ([] if "pemja." in patterns else ["pemja."]))
        return conf

    def thread_mode_lib(self) -> Path:
        """Flink's lib folder for thread mode: the wheel's lib jars plus ``flink-python`` (which
        Flink ships per job from opt/). pemja, inside it, loads its native library once per
        JVM and on JDK 17 fails to load it again for a second job's class loader
        (``NoSuchFieldException: loadedLibraryNames``); from the parent class loader every job
        shares the one copy."""
        lib = self.dir / "lib"
        lib.mkdir(parents=True, exist_ok=True)
        wanted = {jar.name: jar for jar in (flink_home() / "lib").glob("*.jar")}
        wanted.update({jar.name: jar for jar in (flink_home() / "opt").glob("flink-python*.jar")})
        for stale in lib.iterdir():
            if stale.name not in wanted or not stale.exists():
                stale.unlink()
        for name, jar in wanted.items():
            if not (lib / name).exists():
                (lib / name).symlink_to(jar)
        return lib

    def write_conf(self, name: str, conf: dict[str, object]) -> Path:
        conf_dir = self.conf_dir(name)
        conf_dir.mkdir(parents=True, exist_ok=True)
        for log_file in LOG_CONFIG_FILES:
            source = flink_home() / "conf" / log_file
            if source.is_file():
                shutil.copyfile(source, conf_dir / log_file)
        (conf_dir / "config.yaml").write_text(yaml.safe_dump(conf, sort_keys=True, width=10_000))
        return conf_dir

    def working_dir(self, tm_id: str) -> Path:
        """Flink's working directory of TaskManager ``tm_id`` (``<io.tmp.dirs>/tm_<resource-id>``):
        the blobs (Python files, jars) of every job it ran, and local state. With a fixed
        resource id Flink keeps it across restarts, and a new TaskManager reads it all at start
        (3 GB after a few dozen benchmark jobs: minutes on a slow disk). Nothing in it outlives
        a cluster's life here (no local recovery; the JobManager serves the blobs again)."""
        return self.dir / tm_id / "tmp" / f"tm_{tm_id}"

    def env(self, name: str) -> dict[str, str]:
        env = dict(os.environ)
        base = self.dir / name
        (base / "log").mkdir(parents=True, exist_ok=True)
        (base / "tmp").mkdir(parents=True, exist_ok=True)
        env.update({"FLINK_CONF_DIR": str(self.conf_dir(name)), "FLINK_LOG_DIR": str(base / "log"),
                    "FLINK_PID_DIR": str(base), "FLINK_HOME": str(flink_home())})
        java = require_java()
        env.setdefault("JAVA_HOME", str(Path(os.path.realpath(java)).parents[1]))
        if self.config.flink.python_execution_mode == "thread":
            env["FLINK_LIB_DIR"] = str(self.thread_mode_lib())
            # Python inside the JVM (pemja) starts from the base installation, not this
            # virtual environment: it finds pemja, pyflink and the dependencies on this path.
            env["PYTHONPATH"] = os.pathsep.join(
                [*site.getsitepackages(), *filter(None, [env.get("PYTHONPATH", "")])])
        return env

    def taskmanager_env(self, tm: TaskManagerSpec) -> dict[str, str]:
        env = self.env(tm.id)
        threads = str(tm.threads)
        env.update({
            "STREAMPLACE_NODE_ID": tm.id,
            "STREAMPLACE_WORK_MULTIPLIER": str(tm.work_multiplier),
            "STREAMPLACE_TASK_TYPE_MULTIPLIERS": json.dumps(tm.task_type_multipliers),
            "STREAMPLACE_NODE_LABELS": ",".join(tm.labels),
            "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads, "STREAMPLACE_TORCH_THREADS": threads,
            # A node without GPUs in the spec must not see the host's GPUs either.
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in tm.gpu_ids),
        })
        return env

    def taskmanager_command(self, tm: TaskManagerSpec, taskset: str | None) -> list[str]:
        """The TaskManager's command line: Flink's script, pinned with taskset when the spec
        gives CPUs, and in host mode entered into the node's host (same pid)."""
        cmd = [str(flink_home() / "bin" / "taskmanager.sh"), "start-foreground",
               # A list-valued option must come as -D (the yaml list form is read as one name).
               "-D", f"external-resources={tm.id};{ROUTER_RESOURCE}"]
        if tm.cpu_affinity and taskset:
            cmd = [taskset, "-c", ",".join(map(str, tm.cpu_affinity))] + cmd
        if self.isolation.emulated:
            cmd = self.hosts.wrap(tm.id, cmd)
        return cmd

    def taskmanager_config(self, tm: TaskManagerSpec, common: dict[str, object]) -> dict[str, object]:
        conf = dict(common)
        base = self.dir / tm.id
        conf.update({
            "taskmanager.resource-id": tm.id,
            "taskmanager.cpu.cores": tm.cpu_cores,
            "taskmanager.numberOfTaskSlots": tm.slots,
            "taskmanager.memory.task.heap.size": f"{tm.task_heap_mb}m",
            "taskmanager.memory.managed.size": f"{tm.managed_mb}m",
            "taskmanager.memory.task.off-heap.size": "0m",
            "taskmanager.memory.framework.heap.size": "128m",
            "taskmanager.memory.framework.off-heap.size": "128m",
            "taskmanager.memory.network.min": "64m", "taskmanager.memory.network.max": "64m",
            "taskmanager.memory.jvm-metaspace.size": f"{JVM_METASPACE_MB}m",
            "taskmanager.memory.jvm-overhead.min": "192m",
            "taskmanager.memory.jvm-overhead.max": "192m",
            f"external-resource.{tm.id}.amount": tm.slots,
            # one per TaskManager: colocated routers spread one per TaskManager on it
            f"external-resource.{ROUTER_RESOURCE}.amount": 1,
            "io.tmp.dirs": str(base / "tmp"),
        })
        if self.isolation.emulated:
            conf.update(taskmanager_host_options(taskmanager_address(self.isolation, self.spec,
                                                                     tm.id)))
        conf.pop("taskmanager.memory.process.size", None)
        return conf
