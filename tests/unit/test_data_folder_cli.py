"""The data folder on the command line (found by an outside probe, F4/F6/F7): a folder the user
named (``--data-dir``, ``$STREAMPLACE_DATA_DIR``, the argument of ``python -m workload.traces``)
that is missing, empty, not a folder or one level too deep, and a data file that is a directory,
a symbolic link loop, malformed or unreadable, get one line and exit 2: never a traceback, never
generated data in its place, and ``demo`` starts nothing. Scenario tables; no broker, cluster or
service is started (``demo``'s are stubs that fail the test when started)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from streamplace.cli import main
from workload.traces import __main__ as traces_cli
from workload.traces import datadir

REPO = Path(__file__).resolve().parents[2]
GENAI = "alibaba-genai-v2026-requests"
GENAI_FILE = "lora_request_trace.csv"
GAVEL = "gavel-colocation-throughputs"
GAVEL_FILE = "simulation_throughputs.json"
NODES = "alibaba-gpu-v2023"
NODES_FILE = "openb_node_list_all_node.csv"
GENAI_HEADER = ("gmt_create,predict_type,predict_status,exec_time_seconds,groupId,prompt_length,"
                "negative_prompt_length,num_images_per_prompt,num_inference_steps,"
                "checkpoint_model_version_id,num_lora\n")
GENAI_ROW = "2024-11-15 16:57:50,TXT_2_IMG,SUCCEED,32.0,G0000,63.0,26.0,1.0,30.0,M0000,0\n"


class Started(Exception):
    """A demo stub was asked to start something: the data should have been refused first."""


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """No data folder from the environment or the checkout; a private home; demo's services
    replaced by stubs that raise :class:`Started` (and record it) instead of starting."""
    monkeypatch.delenv(datadir.DATA_DIR_ENV, raising=False)
    monkeypatch.setattr(datadir, "_CHECKOUT_DATA_DIR", tmp_path / "no-checkout-data")
    monkeypatch.setenv("STREAMPLACE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("streamplace.kafka_io.BROKER_CHECK_S", 0.5)
    started: list[str] = []

    def refuse(what):
        def start(*_args, **_kwargs):
            started.append(what)
            raise Started(what)
        return start

    import placement.service
    import streamplace.demo as demo
    monkeypatch.setattr(demo, "fetch_jars", refuse("fetch_jars"))
    monkeypatch.setattr(demo, "KafkaBroker", refuse("KafkaBroker"))
    monkeypatch.setattr(demo, "FlinkCluster", refuse("FlinkCluster"))
    monkeypatch.setattr(demo, "ensure_topics", refuse("ensure_topics"))
    monkeypatch.setattr(demo, "_run_variant", refuse("_run_variant"))
    monkeypatch.setattr(placement.service, "PlacementService", refuse("PlacementService"))
    return started


def _with(path: Path, folder: str, name: str, text: str | None = None) -> Path:
    (path / folder).mkdir(parents=True, exist_ok=True)
    if text is not None:
        (path / folder / name).write_text(text)
    return path


# ------------------------------------------------------------------ a named folder that is wrong
def _missing(tmp):
    return tmp / "typo"


def _a_file(tmp):
    (tmp / "file.txt").write_text("not a folder\n")
    return tmp / "file.txt"


def _empty_folder(tmp):
    (tmp / "empty").mkdir()
    return tmp / "empty"


def _stray_folder(tmp):
    (tmp / "stray").mkdir()
    (tmp / "stray" / "notes.txt").write_text("not a data set\n")
    return tmp / "stray"


def _one_level_too_deep(tmp):
    return _with(tmp / "data", GENAI, GENAI_FILE, GENAI_HEADER + GENAI_ROW) / GENAI


def _dangling_link(tmp):
    (tmp / "gone").symlink_to(tmp / "nowhere")
    return tmp / "gone"


def _link_loop(tmp):
    (tmp / "a").symlink_to(tmp / "b")
    (tmp / "b").symlink_to(tmp / "a")
    return tmp / "a"


# (folder builder, words of the one line)
BAD_FOLDERS = [
    (_missing, "is not a folder (it does not exist)"),
    (_a_file, "is not a folder (it is a file)"),
    (_stray_folder, "holds none of the data-set folders (alibaba-genai-v2026-requests/"),
    (_one_level_too_deep, "name its parent"),
    (_dangling_link, "symbolic link to a missing target"),
    (_link_loop, "symbolic link loop"),
]
FOLDER_IDS = [f.__name__.strip("_") for f, _ in BAD_FOLDERS]

# (how a command is run, given the named folder and whether it comes from the environment)
COMMANDS = {
    "replay --data-dir": (["--set", "kafka.port=1", "replay", "--light", "--limit", "3",
                           "--data-dir", "{dir}"], False),
    "replay $ENV": (["--set", "kafka.port=1", "replay", "--light", "--limit", "3"], True),
    "demo --data-dir": (["demo", "--quick", "--tasks", "3", "--data-dir", "{dir}"], False),
    "demo $ENV": (["demo", "--quick", "--tasks", "3"], True),
    "simulate $ENV": (["simulate", "--tasks", "4", "--nodes", "2"], True),
}


def _run_cli(monkeypatch, command: str, folder: Path) -> int:
    argv, from_env = COMMANDS[command]
    if from_env:
        monkeypatch.setenv(datadir.DATA_DIR_ENV, str(folder))
    return main([a.replace("{dir}", str(folder)) for a in argv])


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("make, words", BAD_FOLDERS, ids=FOLDER_IDS)
def test_a_wrong_named_folder_is_one_line_and_exit_2(isolated, monkeypatch, capsys, tmp_path,
                                                      command, make, words):
    folder = make(tmp_path)
    assert _run_cli(monkeypatch, command, folder) == 2
    out, err = capsys.readouterr()
    assert words in err and str(folder) in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "generated" not in out + err and isolated == []
    if COMMANDS[command][1]:
        assert f"${datadir.DATA_DIR_ENV}=" in err      # says the folder came from the env var


@pytest.mark.parametrize("named_by", ["argument", "$ENV"])
@pytest.mark.parametrize("make, words", BAD_FOLDERS, ids=FOLDER_IDS)
def test_python_m_workload_traces_refuses_a_wrong_folder(isolated, monkeypatch, capsys, tmp_path,
                                                         make, words, named_by):
    folder = make(tmp_path)
    if named_by == "$ENV":
        monkeypatch.setenv(datadir.DATA_DIR_ENV, str(folder))
    assert traces_cli.main([str(folder)] if named_by == "argument" else []) == 2
    out, err = capsys.readouterr()
    assert words in err and str(folder) in err and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


# (argv, environment value, words): the empty string named as the folder
EMPTY_NAMES = [
    (["--set", "kafka.port=1", "replay", "--light", "--data-dir", ""], "/nonexistent",
     "--data-dir is the empty string"),
    (["demo", "--quick", "--data-dir", ""], None, "--data-dir is the empty string"),
]


@pytest.mark.parametrize("argv, env, words", EMPTY_NAMES, ids=["replay", "demo"])
def test_an_empty_data_dir_is_refused_not_taken_as_the_cwd(isolated, monkeypatch, capsys, argv,
                                                           env, words):
    if env is not None:
        monkeypatch.setenv(datadir.DATA_DIR_ENV, env)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and isolated == []


def test_python_m_workload_traces_refuses_an_empty_folder_name(isolated, capsys):
    assert traces_cli.main([""]) == 2
    assert "is the empty string" in capsys.readouterr().err


# --------------------------------------------------- a data file that is there but is no file
def _file_is_a_directory(tmp, folder, name):
    (tmp / "d" / folder / name).mkdir(parents=True)
    return tmp / "d"


def _file_is_a_link_loop(tmp, folder, name):
    (tmp / "d" / folder).mkdir(parents=True)
    (tmp / "d" / folder / name).symlink_to("other")
    (tmp / "d" / folder / "other").symlink_to(name)
    return tmp / "d"


def _file_is_a_dangling_link(tmp, folder, name):
    (tmp / "d" / folder).mkdir(parents=True)
    (tmp / "d" / folder / name).symlink_to(tmp / "unmounted" / name)
    return tmp / "d"


def _file_is_a_fifo(tmp, folder, name):
    (tmp / "d" / folder).mkdir(parents=True)
    os.mkfifo(tmp / "d" / folder / name)
    return tmp / "d"


def _malformed(tmp, folder, name):
    text = {GENAI_FILE: GENAI_HEADER + "2024-11-15 16:57:50,TXT_2_IMG\n",
            GAVEL_FILE: "{",
            NODES_FILE: "sn,cpu_milli,memory_mib,gpu,model\nn1,x,1024,0,\n"}[name]
    return _with(tmp / "d", folder, name, text)


# (builder, words of the one line)
NOT_A_FILE = [
    (_file_is_a_directory, "is a directory, not a file"),
    (_file_is_a_link_loop, "is a symbolic link loop, not a file"),
    (_file_is_a_dangling_link, "which does not exist"),
    (_file_is_a_fifo, "is not a regular file"),
    (_malformed, ""),
]
FILE_IDS = [f.__name__.strip("_") for f, _ in NOT_A_FILE]
# (command, the data set it reads, how it names the folder)
READERS = {
    "replay": (GENAI, GENAI_FILE, ["--set", "kafka.port=1", "replay", "--light", "--limit", "3",
                                   "--data-dir", "{dir}"]),
    "demo": (GENAI, GENAI_FILE, ["demo", "--quick", "--tasks", "3", "--data-dir", "{dir}"]),
    "simulate": (GAVEL, GAVEL_FILE, None),   # $STREAMPLACE_DATA_DIR
}


@pytest.mark.parametrize("command", list(READERS))
@pytest.mark.parametrize("make, words", NOT_A_FILE, ids=FILE_IDS)
def test_a_data_file_that_is_no_trace_file_is_named_and_not_generated(
        isolated, monkeypatch, capsys, tmp_path, command, make, words):
    folder_name, file_name, argv = READERS[command]
    folder = make(tmp_path, folder_name, file_name)
    if argv is None:
        monkeypatch.setenv(datadir.DATA_DIR_ENV, str(folder))
        argv = ["simulate", "--tasks", "4", "--nodes", "2"]
    assert main([a.replace("{dir}", str(folder)) for a in argv]) == 2
    out, err = capsys.readouterr()
    assert str(folder / folder_name / file_name) in err and words in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "generated" not in out and isolated == []


@pytest.mark.parametrize("folder_name, file_name", [(NODES, NODES_FILE), (GENAI, GENAI_FILE)],
                         ids=["nodes", "genai"])
@pytest.mark.parametrize("make, words", NOT_A_FILE[:2], ids=FILE_IDS[:2])
def test_python_m_workload_traces_names_the_file_that_is_not_one(isolated, capsys, tmp_path,
                                                                 folder_name, file_name, make,
                                                                 words):
    folder = make(tmp_path, folder_name, file_name)
    assert traces_cli.main([str(folder)]) == 2
    err = capsys.readouterr().err
    assert str(folder / folder_name / file_name) in err and words in err
    assert len(err.strip().splitlines()) == 1


# -------------------------------------------- python -m workload.traces: empty or odd contents
def _header_only_nodes(tmp):
    return _with(tmp / "d", NODES, NODES_FILE, "sn,cpu_milli,memory_mib,gpu,model\n")


def _header_only_genai(tmp):
    return _with(tmp / "d", GENAI, GENAI_FILE, GENAI_HEADER)


def _gavel_without_feasible_pairs(tmp):
    text = ('{"k80": {"(\'A\', 1)": {"null": 1.0, "(\'B\', 1)": [0.0, 0.0]},'
            ' "(\'B\', 1)": {"null": 1.0, "(\'A\', 1)": [0.0, 0.0]}}}')
    return _with(tmp / "d", GAVEL, GAVEL_FILE, text)


# (builder, words of the one line)
ODD_CONTENTS = [
    (_header_only_nodes, NODES_FILE),
    (_header_only_genai, GENAI_FILE),
    (_gavel_without_feasible_pairs, "no feasible pairs"),
]


@pytest.mark.parametrize("make, words", ODD_CONTENTS,
                         ids=[f.__name__.strip("_") for f, _ in ODD_CONTENTS])
def test_python_m_workload_traces_reports_empty_traces_in_one_line(isolated, capsys, tmp_path,
                                                                   make, words):
    folder = make(tmp_path)
    assert traces_cli.main([str(folder)]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


# ------------------------------------------------------------ unreadable files (another user)
def _as_another_user() -> list[str] | None:
    """How to run a command as a user that chmod 000 keeps out (root reads everything)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"] if setpriv else None


# (data set folder, file, the command line after the interpreter, env var or not)
UNREADABLE = [
    (GENAI, GENAI_FILE, ["-m", "streamplace.cli", "--set", "kafka.port=1", "replay",
                         "--light", "--limit", "3", "--data-dir", "{dir}"], False),
    (GAVEL, GAVEL_FILE, ["-m", "streamplace.cli", "simulate", "--tasks", "4", "--nodes", "2"],
     True),
    (NODES, NODES_FILE, ["-m", "workload.traces", "{dir}"], False),
]


@pytest.mark.parametrize("folder_name, file_name, argv, from_env", UNREADABLE,
                         ids=["replay", "simulate", "python -m workload.traces"])
def test_an_unreadable_data_file_is_one_line_and_exit_2(folder_name, file_name, argv, from_env):
    prefix = _as_another_user()
    if prefix is None:
        pytest.skip("running as root without setpriv: cannot make a file unreadable")
    top = Path(tempfile.mkdtemp(prefix="sp-unreadable-"))   # reachable by the other user
    try:
        top.chmod(0o755)
        folder = _with(top / "d", folder_name, file_name, "x\n")
        for p in (top / "d", top / "d" / folder_name):
            p.chmod(0o755)
        (folder / folder_name / file_name).chmod(0)
        (top / "home").mkdir(mode=0o777)
        (top / "home").chmod(0o777)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(top / "home"),
               "STREAMPLACE_HOME": str(top / "home"), "PYTHONPATH": str(REPO)}
        if from_env:
            env[datadir.DATA_DIR_ENV] = str(folder)
        cmd = prefix + [sys.executable] + [a.replace("{dir}", str(folder)) for a in argv]
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=120)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Permission denied" in done.stderr and file_name in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------- the known folder names
def test_known_folders_are_every_readers_data_set():
    from simulator.carbon import CARBON_SOURCE
    from workload.traces.alibaba_genai import ALIBABA_GENAI
    from workload.traces.alibaba_gpu import ALIBABA_GPU
    from workload.traces.azure_llm import AZURE_LLM
    from workload.traces.gavel import GAVEL as GAVEL_SOURCE
    sources = (ALIBABA_GENAI, ALIBABA_GPU, AZURE_LLM, GAVEL_SOURCE, CARBON_SOURCE)
    assert sorted(datadir.KNOWN_FOLDERS) == sorted(s.folder for s in sources)
    assert all(f"`{name}/`" in (REPO / "docs" / "data.md").read_text()
               for name in datadir.KNOWN_FOLDERS if name != "carbon-intensity")


# ------------------------------------------------------- nothing named: the search still runs
def test_without_a_named_folder_the_search_and_the_generator_remain(isolated, tmp_path):
    assert datadir.check_named_data_dir(None) is None            # nothing found: generators
    (tmp_path / "data").mkdir()
    assert datadir.check_named_data_dir(None) == tmp_path / "data"   # ./data, even if empty
    good = _with(tmp_path / "good", GENAI, GENAI_FILE, GENAI_HEADER + GENAI_ROW)
    assert datadir.check_named_data_dir(good, option="--data-dir") == good


def test_an_empty_named_folder_means_no_data_and_the_generators_say_so(isolated, monkeypatch,
                                                                        tmp_path):
    # docker-compose names /data in $STREAMPLACE_DATA_DIR; on a host without the data the mount
    # is an empty folder, and the stack must still run on generated data
    monkeypatch.setenv(datadir.DATA_DIR_ENV, str(_empty_folder(tmp_path)))
    assert datadir.check_named_data_dir(None) == tmp_path / "empty"
    assert datadir.check_named_data_dir(tmp_path / "empty", option="--data-dir") == \
        tmp_path / "empty"
