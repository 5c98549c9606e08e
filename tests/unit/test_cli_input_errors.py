"""Bad input to the ``streamplace`` command line gets one clear line and a non-zero exit, never a
traceback, a hang or a silent substitute (found by an outside probe of every subcommand).
Scenario tables; no broker or cluster is started (none answers on these ports)."""

from __future__ import annotations

import pytest

from streamplace.cli import main

# (argv, the exit status, words of the message on stderr)
USAGE_ERRORS = [
    (["simulate", "--tasks", "0"], 2, "--tasks: 0 is not in [1,"),
    (["simulate", "--tasks", "-5"], 2, "is not in [1,"),
    (["simulate", "--tasks", "99999999999999999999"], 2, "is not in [1,"),
    (["simulate", "--rate", "0"], 2, "--rate: 0 is not a number in (0,"),
    (["simulate", "--rate", "nan"], 2, "--rate: nan is not a number"),
    (["simulate", "--rate", "inf"], 2, "--rate: inf is not a number"),
    (["simulate", "--nodes", "0"], 2, "--nodes: 0 is not in [1,"),
    (["simulate", "--seed", "-1"], 2, "--seed: -1 is not in [0,"),
    (["simulate", "--manager-queue", "0"], 2, "--manager-queue: 0 is not a number in (0,"),
    (["simulate", "--manager-queue", "nan"], 2, "--manager-queue: nan is not a number"),
    (["replay", "--rate", "nan"], 2, "--rate: nan"),
    (["replay", "--skip", "-3"], 2, "--skip: -3 is not in [0,"),
    (["produce", "--count", "0"], 2, "--count: 0 is not in [1,"),
    (["demo", "--tasks", "-1"], 2, "--tasks: -1 is not in [1,"),
    (["demo", "--rate", "0"], 2, "--rate: 0 is not a number"),
    (["job", "submit", "--parallelism", "-1"], 2, "--parallelism: -1 is not in [1, 1024]"),
]


@pytest.mark.parametrize("argv, status, words", USAGE_ERRORS, ids=[" ".join(a)
                                                                   for a, _, _ in USAGE_ERRORS])
def test_numbers_out_of_range_are_usage_errors(capsys, argv, status, words):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == status
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


# (argv, the exit status, words of the message on stderr)
COMMAND_ERRORS = [
    (["simulate", "--nodes", "12"], 2, "the paper cluster has 11 nodes"),
    (["simulate", "--rate", "1e-6", "--tasks", "5"], 2, "simulated minutes"),
    (["simulate", "--model", "any.spm"], 2, "--model is read by --policy ldwp only"),
    (["replay", "--data-dir", "/no/such/folder"], 2, "--data-dir /no/such/folder is not a folder"),
    (["job", "cancel"], 2, "cancel needs the job id"),
    (["job", "replan", "abc", "--new-plan", "garbage"], 2, "bad plan entry 'garbage'"),
    (["cluster", "status", "--spec", "nosuch"], 2, "no shipped cluster spec named 'nosuch'"),
    (["--set", "kafka.port=[1", "kafka", "status"], 2, "--set kafka.port is not valid YAML"),
    (["--set", "home=", "kafka", "status"], 2, "home must name a folder"),
    (["--set", "home=/etc/passwd", "kafka", "status"], 2, "is a file, not a folder"),
]


@pytest.mark.parametrize("argv, status, words", COMMAND_ERRORS, ids=[" ".join(a)
                                                                     for a, _, _ in COMMAND_ERRORS])
def test_bad_input_gets_one_message_and_a_non_zero_exit(capsys, monkeypatch, tmp_path, argv,
                                                        status, words):
    monkeypatch.setenv("STREAMPLACE_HOME", str(tmp_path))
    assert main(argv) == status
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


# (what the file holds, words of the message)
CONFIG_FILES = [
    (b"a: &anchor [1, 2]\nb: *anchor\n", "anchors and aliases"),
    (b"\xff\xfe not utf-8", "cannot be read"),
    (b"kafka: {port: 9092}\n# " + b"x" * (1 << 20), "byte limit"),
    (b"- a list\n- not a mapping\n", "must hold a mapping"),
]


@pytest.mark.parametrize("content, words", CONFIG_FILES,
                         ids=["alias bomb", "not utf-8", "over 1 MiB", "a list"])
def test_a_bad_configuration_file_is_refused_with_the_reason(capsys, tmp_path, content, words):
    path = tmp_path / "streamplace.yaml"
    path.write_bytes(content)
    assert main(["--config", str(path), "kafka", "status"]) == 2
    assert words in capsys.readouterr().err


def test_a_folder_as_configuration_file_says_so(capsys, tmp_path):
    assert main(["--config", str(tmp_path), "kafka", "status"]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_simulate_json_is_strict_json(capsys):
    import json
    assert main(["simulate", "--tasks", "6", "--nodes", "2", "--json"]) == 0
    document = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(c))
    assert document["tasks"] == 6


def test_simulate_with_a_manager_queue_runs_every_task(capsys):
    import json
    assert main(["simulate", "--tasks", "12", "--nodes", "2", "--saturated",
                 "--manager-queue", "1", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["tasks"] == 12 and document["completed"] == 12


@pytest.mark.parametrize("command", [["produce", "--count", "3"],
                                     ["replay", "--limit", "3", "--light"]])
def test_sending_with_no_broker_says_so_in_one_line(capfd, monkeypatch, tmp_path, command):
    """No broker: one line naming the address, exit 1, and none of librdkafka's connection
    errors on stderr (a producer would print them for a minute before giving up)."""
    import socket
    with socket.socket() as probe:   # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("STREAMPLACE_HOME", str(tmp_path))
    monkeypatch.setattr("streamplace.kafka_io.BROKER_CHECK_S", 1.0)
    assert main(["--set", f"kafka.port={port}", *command]) == 1
    err = capfd.readouterr().err
    assert f"no Kafka broker answers at 127.0.0.1:{port}" in err
    assert "FAIL" not in err and "Traceback" not in err
