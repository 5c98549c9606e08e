"""Hostile CSV traces: every reader refuses them with one TraceFormatError naming the file, the
line (when known) and the reason, within bounded time and memory (probe findings F2-F5, F7)."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from simulator.carbon import CarbonSeries
from workload.traces import (
    TraceFormatError,
    alibaba_genai,
    load_genai_qps,
    read_azure_llm,
    read_genai_requests,
    read_nodes,
    read_pods,
)
from workload.traces import _parse

NODE = "sn,cpu_milli,memory_mib,gpu,model\n"
POD = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
       "deletion_time,scheduled_time\n")
GENAI = ("gmt_create,predict_type,predict_status,exec_time_seconds,groupId,prompt_length,"
         "negative_prompt_length,num_images_per_prompt,num_inference_steps,"
         "checkpoint_model_version_id,num_lora\n")
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
QPS = "timestamp_anon,value,container_ip,request_type\n"
CARBON = "timestamp_s,g_per_kwh\n"

GOOD_NODE = "n0,32000,65536,0,\n"
GOOD_POD = "p0,1000,1024,1,500,,LS,Running,0,10,0\n"
GOOD_GENAI = "2024-11-15 16:57:50,TXT_2_IMG,SUCCEED,32.0,G1,63.0,26.0,1.0,30.0,M0,0\n"
GOOD_AZURE = "2023-11-16 18:17:03.9799600,4808,10\n"

READERS = {"nodes": read_nodes, "pods": read_pods, "genai": read_genai_requests,
           "azure": read_azure_llm}


def _file(tmp_path, data: str | bytes, name: str = "trace.csv"):
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def _refused(reader, path, problem: str, line: int | None = -1) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as err:
        reader(path)
    assert err.value.path.startswith(str(path)) and problem in err.value.problem, str(err.value)
    if line != -1:
        assert err.value.line == line
    assert "\n" not in str(err.value) and len(str(err.value)) < 400 + len(str(path))
    return err.value


# ----------------------------------------------------------------- bounds on the file's shape
SHAPE = [
    # (reader, content, problem, line)
    ("azure", AZURE + "2023-11-16 18:17:03," + "9" * 70_000, "line longer than", 2),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens" + "," * 70_000, "line longer than", 1),
    ("azure", AZURE.strip() + "," * 300 + "\n" + GOOD_AZURE, "columns, more than 256", 1),
    ("nodes", NODE.strip() + ",gpu\n" + GOOD_NODE, "header repeats column(s) ['gpu']", 1),
    ("nodes", NODE, "no data rows", None),
    ("nodes", NODE + "\n\n", "no data rows", None),
    ("pods", POD, "no data rows", None),
    ("genai", GENAI, "no data rows", None),
    ("azure", AZURE, "no data rows", None),
    ("nodes", NODE + "n\x000,32000,65536,0,\n", "NUL byte", 2),
    ("nodes", NODE + "n" * 2000 + ",32000,65536,0,\n", "longer than 1024 characters", 2),
]


@pytest.mark.parametrize("reader, content, problem, line", SHAPE)
def test_the_shape_of_a_file_is_bounded(tmp_path, reader, content, problem, line):
    _refused(READERS[reader], _file(tmp_path, content), problem, line)


def test_a_file_over_the_byte_bound_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(_parse, "MAX_FILE_BYTES", 1000)
    path = _file(tmp_path, NODE + GOOD_NODE * 100)
    _refused(read_nodes, path, "more than the 1000 a trace file may have", None)


def test_rows_beyond_the_row_cap_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(_parse, "MAX_ROWS", 3)
    rows = "".join(f"n{i},32000,65536,0,\n" for i in range(4))
    _refused(read_nodes, _file(tmp_path, NODE + rows), "more than 3 data rows", 5)


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_path_that_is_no_regular_file_is_refused_without_blocking(tmp_path, kind):
    path = tmp_path / "nodes.csv"
    if kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)  # open() would wait for a writer for ever
    _refused(read_nodes, path, "not a regular file", None)


def test_a_byte_order_mark_is_accepted(tmp_path):
    table = read_nodes(_file(tmp_path, b"\xef\xbb\xbf" + (NODE + GOOD_NODE).encode()))
    assert [n.name for n in table] == ["n0"]


def test_a_long_header_is_echoed_cut(tmp_path):
    err = _refused(read_nodes, _file(tmp_path, "x" * 5000 + "\n" + "1\n"), "header lacks", 1)
    assert len(err.problem) < 300


# ------------------------------------------------------------------------------ number bounds
NUMBERS = [
    # (reader, header, row, problem)
    ("genai", GENAI, GOOD_GENAI.replace(",32.0,", ",1e306,"), "is above 604800"),
    ("genai", GENAI, GOOD_GENAI.replace(",30.0,", ",0,"), "'num_inference_steps': '0' is below 1"),
    ("genai", GENAI, GOOD_GENAI.replace(",1.0,30.0", ",0,30.0"), "'num_images_per_prompt'"),
    ("genai", GENAI, GOOD_GENAI.replace(",63.0,", ",20000000,"), "'prompt_length'"),
    ("genai", GENAI, GOOD_GENAI.replace(",M0,0", ",M0,1000"), "'num_lora'"),
    ("azure", AZURE, "2023-11-16 18:17:04.1,99999999999999999999,1\n", "is above 1e+07"),
    ("azure", AZURE, "2023-11-16 18:17:04.1,1e308,1\n", "is above 1e+07"),
    ("azure", AZURE, "2023-11-16 18:17:04.1,1e400,1\n", "beyond the float range"),
    ("azure", AZURE, "2023-11-16 18:17:04.1,\u0664\u0662,1\n", "is not a number"),
    ("azure", AZURE, "2023-11-16 18:17:04.1,1_000,1\n", "'1_000' is not a number"),
    ("azure", AZURE, "2023-11-16 18:17:04.1,5,infinity\n", "is infinite"),
    ("azure", AZURE, "2023-11-16 18:17:04.1,NaN,5\n", "is NaN"),
    ("azure", AZURE, "2023-11-16 18:17:04.1,0x10,5\n", "is not a number"),
    ("azure", AZURE, "9999-12-31 23:59:59,5,5\n", "outside the years 1990-2099"),
    ("azure", AZURE, "0001-01-01 00:00:00,5,5\n", "outside the years 1990-2099"),
    ("azure", AZURE, "\u0662023-11-16 18:17:04,5,5\n", "is not a 'YYYY-MM-DD HH:MM:SS'"),
    ("nodes", NODE, "n0,32000,2147483648,0,\n", "'memory_mib'"),
    ("nodes", NODE, "n0,2000000,65536,0,\n", "'cpu_milli'"),
    ("nodes", NODE, "n0,32000,65536,65,T4\n", "'gpu'"),
    ("pods", POD, "p0,1000,1024,1,500,,LS,Running,10000000000,,\n", "'creation_time'"),
    ("pods", POD, "p0,1000,1024,100,500,,LS,Running,0,10,0\n", "'num_gpu'"),
    ("pods", POD, "p0,1000,1024,1,500,,LS,Running,0,10,-1\n", "'scheduled_time'"),
]


@pytest.mark.parametrize("reader, header, row, problem", NUMBERS)
def test_numbers_are_ascii_finite_and_bounded(tmp_path, reader, header, row, problem):
    _refused(READERS[reader], _file(tmp_path, header + row), problem, 2)


def test_a_long_bad_value_is_echoed_cut(tmp_path):
    err = _refused(read_azure_llm, _file(tmp_path, AZURE + f"2023-11-16 18:17:04,{'x' * 900},1\n"),
                   "is not a number", 2)
    assert len(err.problem) < 250


def test_one_mistyped_year_cannot_stretch_a_trace(tmp_path):
    rows = GOOD_GENAI + GOOD_GENAI.replace("2024-11-15", "2099-11-15") + GOOD_GENAI
    _refused(read_genai_requests, _file(tmp_path, GENAI + rows), "at most 366 days", 3)


def test_the_real_shapes_still_read(tmp_path):
    assert len(read_genai_requests(_file(tmp_path, GENAI + GOOD_GENAI, "g.csv"))) == 1
    assert len(read_azure_llm(_file(tmp_path, AZURE + GOOD_AZURE, "a.csv"))) == 1
    assert len(read_pods(_file(tmp_path, POD + GOOD_POD, "p.csv"))) == 1


# ----------------------------------------------------------------------------- the QPS archive
def _archive(tmp_path, members: list[tuple[str, bytes]]):
    folder = tmp_path / alibaba_genai.ALIBABA_GENAI.folder
    folder.mkdir(exist_ok=True)
    with tarfile.open(folder / "qps.tar.gz", "w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return folder / "qps.tar.gz"


def _qps(rows: str | bytes) -> list[tuple[str, bytes]]:
    return [("qps.csv", QPS.encode() + (rows if isinstance(rows, bytes) else rows.encode()))]


QPS_CASES = [
    # (members, problem)
    (_qps(b"1,2,\xff,Generative Requests\n"), "not UTF-8 text"),
    (_qps(""), "no data rows"),
    (_qps("1,1e308,a,Generative Requests\n"), "'value': '1e308' is above"),
    (_qps("-1e308,1,a,Generative Requests\n"), "'timestamp_anon': '-1e308' is below 0"),
    (_qps("1e308,1,a,Generative Requests\n"), "'timestamp_anon': '1e308' is above"),
    (_qps("1,1,a,Generative Requests\n1000000000,1,a,Generative Requests\n"), "at most 366"),
    (_qps("1,nan,a,Generative Requests\n"), "is NaN"),
    ([("other.txt", b"x")], "archive holds no qps.csv"),
]


@pytest.mark.parametrize("members, problem", QPS_CASES)
def test_a_hostile_qps_archive_is_refused(tmp_path, members, problem):
    path = _archive(tmp_path, members)
    _refused(lambda _: load_genai_qps(tmp_path), path, problem)


def test_qps_members_are_bounded_before_they_are_read(tmp_path, monkeypatch):
    monkeypatch.setattr(alibaba_genai, "MAX_FILE_BYTES", 1000)
    path = _archive(tmp_path, _qps("\n" * 2000))
    _refused(lambda _: load_genai_qps(tmp_path), path, "holds 2047 bytes, more than 1000")


def test_the_qps_member_is_decoded_as_a_bounded_stream(tmp_path, monkeypatch):
    monkeypatch.setattr(_parse, "MAX_FILE_BYTES", 1000)  # the member text, not the archive
    path = _archive(tmp_path, _qps("\n" * 2000))
    _refused(lambda _: load_genai_qps(tmp_path), path, "more than 1000 characters of text")


def test_qps_archive_members_are_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(alibaba_genai, "MAX_ARCHIVE_MEMBERS", 3)
    path = _archive(tmp_path, [(f"x{i}", b"") for i in range(5)] + _qps("1,1,a,API Requests\n"))
    _refused(lambda _: load_genai_qps(tmp_path), path, "more than 3 members")


def test_a_truncated_qps_archive_is_refused(tmp_path):
    path = _archive(tmp_path, _qps("1,1,a,Generative Requests\n" * 5000))
    path.write_bytes(path.read_bytes()[:200])
    _refused(lambda _: load_genai_qps(tmp_path), path, "")


# ------------------------------------------------------------------------------------- carbon
CARBON_CASES = [
    # (content, problem)
    (CARBON.encode() + b"0,1\xff\n", "not UTF-8 text"),
    ((CARBON + "0," + "9" * 200_000 + "\n").encode(), "line longer than"),
    ((CARBON + "0,1_000\n").encode(), "is not a number"),
    ((CARBON + "0,\u0664\u0662\n").encode(), "is not a number"),
    ((CARBON + "1e300,100\n").encode(), "timestamp_s must be a finite number in"),
    ((CARBON + "0,1\x00\n").encode(), "NUL byte"),
    ((CARBON + "0\n").encode(), "no g_per_kwh field"),
]


@pytest.mark.parametrize("content, problem", CARBON_CASES)
def test_a_hostile_carbon_series_is_refused(tmp_path, content, problem):
    _refused(lambda p: CarbonSeries.from_csv(p), _file(tmp_path, content), problem)


def test_a_carbon_series_with_a_byte_order_mark_reads(tmp_path):
    path = _file(tmp_path, b"\xef\xbb\xbf" + (CARBON + "0,100\n60,200\n").encode())
    assert CarbonSeries.from_csv(path).g_per_kwh == (100.0, 200.0)


def test_a_carbon_path_that_is_a_directory_is_refused(tmp_path):
    _refused(lambda p: CarbonSeries.from_csv(p), tmp_path, "not a regular file")
