"""``streamplace job run my_job.py [-- its arguments]``: a user's own PyFlink script submitted to
the cluster, its hook told the cluster's spec and service (``STREAMPLACE_HOOK_*``). The
JobManager is a real local HTTP server (the ``jobmanager`` fixture); ``flink run`` itself is
recorded instead of run here (the engines run it in the integration tests)."""

from __future__ import annotations

import json

import pytest

from streamplace.cli import main

JOB_ID = "a" * 32


@pytest.fixture
def submitted(monkeypatch, tmp_path, jobmanager):
    """Where ``flink run`` would have gone: (address, script, args, env) of each call."""
    monkeypatch.setenv("STREAMPLACE_HOME", str(tmp_path / "home"))
    for name in ("STREAMPLACE_HOOK_CLUSTER_SPEC", "STREAMPLACE_HOOK_SERVICE_URL",
                 "STREAMPLACE_HOOK_SERVICE_TOKEN", "STREAMPLACE_SERVICE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    calls = []

    def fake_run(address, script, args, env, timeout_s, restore_from=None):
        calls.append((address, script, list(args), env))
        return JOB_ID
    monkeypatch.setattr("streamplace.flink_cluster.run_python_job", fake_run)
    jobmanager.routes[("GET", "/overview")] = (200, b'{"taskmanagers": 3}')
    jobmanager.routes[("GET", f"/jobs/{JOB_ID}")] = (200, json.dumps({"state": "RUNNING"}).encode())
    return calls


def _base(jobmanager):
    return ["--set", f"flink.rest_port={jobmanager.server_address[1]}"]


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "my_job.py"
    path.write_text("print('a PyFlink job')\n")
    return path


def test_the_script_goes_to_flink_run_with_its_arguments_and_the_clusters_spec(
        submitted, jobmanager, script, capsys):
    argv = _base(jobmanager) + ["--set", "flink.cluster_spec=gpu-host", "job", "run", str(script),
                                "--", "--bootstrap-servers", "127.0.0.1:9092", "--records", "5"]
    assert main(argv) == 0
    [(address, path, args, env)] = submitted
    assert address.endswith(f":{jobmanager.server_address[1]}")
    assert path == script.resolve()
    assert args == ["--bootstrap-servers", "127.0.0.1:9092", "--records", "5"]
    assert env["STREAMPLACE_HOOK_CLUSTER_SPEC"] == "gpu-host"
    assert "STREAMPLACE_HOOK_SERVICE_URL" not in env
    assert env["FLINK_CONF_DIR"].endswith("conf") or "jobmanager" in env["FLINK_CONF_DIR"]
    assert f"job {JOB_ID} RUNNING" in capsys.readouterr().out


def test_the_service_url_reaches_the_hook(submitted, jobmanager, script):
    url = "http://127.0.0.1:8471"
    assert main(_base(jobmanager) + ["job", "run", str(script), "--service-url", url]) == 0
    assert main(_base(jobmanager) + ["job", "run", str(script), "--service-url", url, "--",
                                     "--k", "v"]) == 0
    for _, _, args, env in submitted:
        assert env["STREAMPLACE_HOOK_SERVICE_URL"] == url
        assert "STREAMPLACE_HOOK_SERVICE_TOKEN" in env      # the one serve wrote, or ""
    assert [c[2] for c in submitted] == [[], ["--k", "v"]]


def test_a_variable_the_caller_set_wins(submitted, jobmanager, script, monkeypatch):
    monkeypatch.setenv("STREAMPLACE_HOOK_CLUSTER_SPEC", "/my/own/spec.yaml")
    assert main(_base(jobmanager) + ["job", "run", str(script)]) == 0
    assert submitted[0][3]["STREAMPLACE_HOOK_CLUSTER_SPEC"] == "/my/own/spec.yaml"


@pytest.mark.parametrize("what", ["none", "missing", "not python", "a folder"])
def test_a_script_that_is_not_a_python_file_is_refused(submitted, jobmanager, tmp_path, capsys,
                                                       what):
    target = {"none": [], "missing": [str(tmp_path / "nope.py")],
              "not python": [str(tmp_path / "job.txt")], "a folder": [str(tmp_path)]}[what]
    (tmp_path / "job.txt").write_text("x")
    assert main(_base(jobmanager) + ["job", "run", *target]) == 2
    assert "needs the path of a PyFlink job's .py file" in capsys.readouterr().err
    assert submitted == []


def test_an_unknown_option_before_the_separator_is_refused(submitted, jobmanager, script):
    with pytest.raises(SystemExit) as exit_info:
        main(_base(jobmanager) + ["job", "run", str(script), "--bogus", "1", "--", "--k"])
    assert exit_info.value.code == 2
    assert submitted == []


def test_arguments_after_the_separator_belong_to_job_run_only(submitted, jobmanager, capsys):
    assert main(_base(jobmanager) + ["job", "list", "--", "--k", "v"]) == 2
    assert "for `streamplace job run <job>.py -- ...` only: --k v" in capsys.readouterr().err


def test_no_jobmanager_no_submission(submitted, script, capsys):
    import socket
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    assert main(["--set", f"flink.rest_port={port}", "job", "run", str(script)]) == 3
    assert "no JobManager answers" in capsys.readouterr().err
    assert submitted == []
