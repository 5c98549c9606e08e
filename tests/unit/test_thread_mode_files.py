"""PyFlink thread mode (``flink.python_execution_mode: thread``): what the cluster's files say."""

from __future__ import annotations

import os

from streamplace.config import load_config
from streamplace.flink_cluster import FlinkCluster
from streamplace.flink_files import flink_home
from workload.cluster_spec import LocalClusterSpec

SPEC = LocalClusterSpec.model_validate({"taskmanagers": [
    {"id": "tm_a", "cpu_cores": 1, "cpu_affinity": [0]}]})


def _cluster(tmp_path, *overrides):
    return FlinkCluster(load_config(overrides=[f"home={tmp_path}", *overrides]), spec=SPEC,
                        plan=None)


def test_process_mode_leaves_the_configuration_and_environment_as_flink_ships_them(tmp_path):
    files = _cluster(tmp_path).files
    conf = files.common_config()
    assert "python.execution-mode" not in conf
    assert "pemja." not in str(conf.get("classloader.parent-first-patterns.additional", ""))
    env = files.taskmanager_env(SPEC.taskmanagers[0])
    assert "FLINK_LIB_DIR" not in env or env["FLINK_LIB_DIR"] == os.environ.get("FLINK_LIB_DIR")


def test_thread_mode_loads_pemja_once_from_the_taskmanagers_own_lib(tmp_path):
    files = _cluster(tmp_path, "flink.python_execution_mode=thread",
                     "flink.extra_config={classloader.parent-first-patterns.additional: "
                     "'com.example.'}").files
    conf = files.common_config()
    assert conf["python.execution-mode"] == "thread"
    # the user's own pattern is kept, pemja's is added once
    assert conf["classloader.parent-first-patterns.additional"] == "com.example.;pemja."
    env = files.taskmanager_env(SPEC.taskmanagers[0])
    lib = env["FLINK_LIB_DIR"]
    names = sorted(os.listdir(lib))
    shipped = sorted(p.name for p in (flink_home() / "lib").glob("*.jar"))
    assert [n for n in names if not n.startswith("flink-python")] == shipped
    assert [n for n in names if n.startswith("flink-python")], "flink-python jar missing"
    assert all(os.path.exists(os.path.join(lib, n)) for n in names)  # links that resolve
    import site
    assert env["PYTHONPATH"].split(os.pathsep)[0] == site.getsitepackages()[0]
    # building it again keeps the same links (a restart), nothing doubled
    assert sorted(os.listdir(files.thread_mode_lib())) == names


def test_subtask_index_in_both_modes():
    from pyflink_jobs.flink_ops import subtask_index

    class ProcessContext:
        def get_index_of_this_subtask(self):
            return 2

    class TaskInfo:
        def getIndexOfThisSubtask(self):  # noqa: N802 - the Java name
            return 1

    class JavaContext:  # Flink 2: the index lives on the task info
        def getTaskInfo(self):  # noqa: N802
            return TaskInfo()

    class ThreadContext:  # PyFlink 2.2 thread mode asks the Java context the Flink 1 way
        _runtime_context = JavaContext()

        def get_index_of_this_subtask(self):
            raise AttributeError("'pemja.PyJObject' object has no attribute "
                                 "'getIndexOfThisSubtask'")

    class Broken:
        def get_index_of_this_subtask(self):
            raise AttributeError("something else")

    assert subtask_index(ProcessContext()) == 2
    assert subtask_index(ThreadContext()) == 1
    assert subtask_index(None) == 0
    import pytest
    with pytest.raises(AttributeError):
        subtask_index(Broken())


def test_the_batching_executor_is_refused_in_thread_mode_with_the_reason(monkeypatch):
    import pytest

    from pyflink_jobs import hook as hook_module
    from pyflink_jobs.flink_ops import python_execution_mode
    assert python_execution_mode(object()) == "process"  # no JVM behind it: Flink's default
    monkeypatch.setattr(hook_module, "python_execution_mode", lambda stream: "thread")
    hook = hook_module.StreamplaceHook.create("127.0.0.1:9092")
    with pytest.raises(ValueError, match="does not run AsyncFunctions in thread mode"):
        hook._execute(object(), object(), pickled=True)
