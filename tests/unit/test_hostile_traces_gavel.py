"""Hostile Gavel co-location files: refused with one TraceFormatError naming the file, the line
and the key path, within bounded time and memory (probe findings F1, F4, F5c, F7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workload.traces import TraceFormatError, gavel, read_gavel
from workload.traces.datadir import checkout_data_dir

A, B, C = "('A', 1)", "('B', 1)", "('C', 2)"
TABLE = {
    "k80": {A: {"null": 2.0, A: [1.0, 1.0], B: [1.0, 0.5]},
            B: {"null": 1.0, A: [0.5, 1.0], B: [0, 0]},
            C: {"null": 0.0, C: [0.0, 0.0]}},
    "v100": {A: {"null": 8.0, A: [4.0, 4.0], B: [6.0, 3.0]},
             B: {"null": 5.0, A: [3.0, 6.0], B: [0.0, 0.0]},
             C: {"null": 3.0, C: [0.0, 0.0]}},
}


def _write(tmp_path, data: str | bytes) -> Path:
    path = tmp_path / "throughputs.json"
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def _mutated(mutate) -> str:
    data = json.loads(json.dumps(TABLE))
    mutate(data)
    return json.dumps(data, indent=4)


def _refused(path: Path, problem: str) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as err:
        read_gavel(path)
    assert err.value.path == str(path) and problem in err.value.problem, str(err.value)
    assert "\n" not in str(err.value) and len(err.value.problem) < 400
    return err.value


def _set(gpu, job, key, value):
    return lambda d: d[gpu][job].__setitem__(key, value)


def _both(job, partner, value, mirror):
    return lambda d: (d["v100"][job].__setitem__(partner, value),
                      d["v100"][partner].__setitem__(job, mirror))


VALUES = [
    # (mutation, problem)
    (_set("k80", A, "null", 1e-320), "isolated throughput: 1e-320 is outside [0.0001, 100000]"),
    (_set("k80", A, "null", 1e7), "is outside [0.0001, 100000]"),
    (_set("k80", A, "null", float("nan")), "isolated throughput: NaN is not a number"),
    (_set("k80", A, "null", float("inf")), "isolated throughput: inf is not finite"),
    (_set("k80", A, "null", True), "isolated throughput: True is not a number"),
    (_set("k80", A, "null", -1.0), "is negative"),
    (_both(A, B, [8e-6, 3.0], [3.0, 8e-6]), "this job keeps 1e-06 of its isolated throughput"),
    (_both(A, B, [6.0, 15.0], [15.0, 6.0]), "the partner keeps 3 of its isolated throughput"),
    (_both(A, B, [6.0, 0.0], [0.0, 6.0]), "the partner keeps 0 of its isolated throughput"),
    (_both(A, B, [float("nan"), 3.0], [3.0, 6.0]), "NaN is not a number"),
    (_both(A, B, [float("-inf"), 3.0], [3.0, 6.0]), "-inf is not finite"),
    (_set("v100", B, A, [3.0, 5.0]), "[6.0, 3.0] disagrees with the mirrored pair's [3.0, 5.0]"),
    (_set("v100", B, B, [2.5, 3.0]), "[2.5, 3.0] disagrees with the mirrored pair's [2.5, 3.0]"),
]


@pytest.mark.parametrize("mutate, problem", VALUES)
def test_implausible_throughputs_are_refused_with_their_key(tmp_path, mutate, problem):
    text = _mutated(mutate)
    err = _refused(_write(tmp_path, text), problem)
    assert "('" in text.splitlines()[err.line - 1] or '"null"' in text.splitlines()[err.line - 1]


def _rename(old: str, new: str):
    def mutate(d):
        for gpu in d.values():
            for entry in [gpu, *gpu.values()]:
                if old in entry:
                    entry[new] = entry.pop(old)
    return mutate


KEYS = [
    (_rename(C, "('C', 0)"), "scale 0 is not a GPU count in 1..1024"),
    (_rename(C, "('C', -2)"), "scale -2 is not a GPU count"),
    (_rename(C, "('C', True)"), "scale True is not a GPU count"),
    (_rename(C, "('C', 4096)"), "scale 4096 is not a GPU count"),
    (_rename(C, "('C\\x00', 2)"), "holds control characters"),
    (_rename(C, "('C', " + "1" * 300 + ")"), "job key is not"),
    (_rename(C, "('A',1)"), "names the same job as an earlier key"),
    (lambda d: d.__setitem__("v\x00100", d.pop("v100")), "GPU type is empty"),
    (lambda d: d.__setitem__("", d.pop("v100")), "GPU type is empty"),
]


@pytest.mark.parametrize("mutate, problem", KEYS)
def test_unusual_keys_are_refused(tmp_path, mutate, problem):
    _refused(_write(tmp_path, _mutated(mutate)), problem)


def test_a_long_key_is_echoed_cut(tmp_path):
    key = "('" + "A" * 5000 + "', 1)"
    err = _refused(_write(tmp_path, _mutated(_rename(C, key))), "job key is not")
    assert len(err.problem) < 300


RAW = [
    # (file content, problem)
    ('{"k80": {"(\'A\', 1)": {"null": 1.0}, "(\'A\', 1)": {"null": 2.0}}}', "appears twice"),
    (b'{\xff}', "not UTF-8 text"),
    ('{"k80": {"(\'A\', 1)": {"null": ' + "1" * 5000 + "}}}", "invalid JSON: "),
    ("[" * 200_000 + "]" * 200_000, "JSON nested too deeply"),
    ('{"k80": {"(\'A\', 1)": {"null": 1.0, "(\'A\', 1)": [NaN, 1.0]}}}', "NaN is not a number"),
    ("[1, 2]", "expected a non-empty object"),
]


@pytest.mark.parametrize("content, problem", RAW)
def test_malformed_json_is_one_format_error(tmp_path, content, problem):
    _refused(_write(tmp_path, content), problem)


def test_a_byte_order_mark_is_accepted(tmp_path):
    table = read_gavel(_write(tmp_path, b"\xef\xbb\xbf" + json.dumps(TABLE).encode()))
    assert table.normalized("A", "B", "v100") == (0.75, 0.6)


@pytest.mark.parametrize("bound, value, problem", [
    ("MAX_GAVEL_BYTES", 100, "bytes, more than the 100 a trace file may have"),
    ("MAX_GPU_TYPES", 1, "2 GPU types, more than 1"),
    ("MAX_JOBS", 2, "3 jobs, more than 2"),
    ("MAX_PAIRS", 5, "more than 5 pairs in the file"),
])
def test_the_size_of_a_table_is_bounded(tmp_path, monkeypatch, bound, value, problem):
    monkeypatch.setattr(gavel, bound, value)
    _refused(_write(tmp_path, json.dumps(TABLE, indent=4)), problem)


def test_a_directory_is_refused(tmp_path):
    _refused(tmp_path, "not a regular file")


REAL = checkout_data_dir() / gavel.GAVEL.folder if checkout_data_dir() else None


@pytest.mark.skipif(REAL is None or not (REAL / gavel.GAVEL_FILES["simulation"]).is_file(),
                    reason="the Gavel data is not on this machine")
def test_a_table_whose_co_runs_barely_progress_is_refused(tmp_path):
    """Probe F1: co-located throughputs 1e-6 x the isolated ones made `simulate` run for ever."""
    data = json.loads((REAL / gavel.GAVEL_FILES["simulation"]).read_text())
    k80 = data["k80"]
    for job, entry in k80.items():
        for partner, value in entry.items():
            if partner != "null" and value != [0, 0]:
                entry[partner] = [entry["null"] * 1e-6, k80[partner]["null"] * 1e-6]
    _refused(_write(tmp_path, json.dumps(data)), "keeps 1e-06 of its isolated throughput")
    for measurements in gavel.GAVEL_FILES:  # the real files sit well inside every bound
        assert gavel.load_gavel(REAL.parent, measurements=measurements).gpu_types
