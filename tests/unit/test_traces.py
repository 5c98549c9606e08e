"""Trace readers, data-dir resolution, generator fallback and the real third-party files."""

from __future__ import annotations

import io
import json
import logging
import os
import statistics
import tarfile
from pathlib import Path

import pytest

from workload.traces import (
    ALIBABA_GENAI,
    ALIBABA_GPU,
    AZURE_LLM,
    DATA_DIR_ENV,
    GAVEL,
    POD_VARIANTS,
    ColocationTable,
    DataNotFound,
    InferenceRequest,
    JobKey,
    NodeInventory,
    NodeTable,
    PodRecord,
    PodTrace,
    RequestTrace,
    TraceFormatError,
    bursty_arrivals,
    generate_colocation_table,
    generate_nodes,
    generate_pods,
    generate_requests,
    load_alibaba_nodes,
    load_alibaba_pods,
    load_azure_llm,
    load_gavel,
    load_genai_qps,
    load_genai_requests,
    load_or_generate_azure,
    load_or_generate_colocation,
    load_or_generate_genai,
    load_or_generate_nodes,
    load_or_generate_pods,
    lognormal_sizes,
    mmpp_arrivals,
    poisson_arrivals,
    read_azure_llm,
    read_gavel,
    read_genai_requests,
    read_nodes,
    read_pods,
    resolve_data_dir,
    sample_nodes,
    time_compress,
)
from workload.traces import datadir

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
              "creation_time,deletion_time,scheduled_time\n")
GENAI_HEADER = ("gmt_create,predict_type,predict_status,exec_time_seconds,groupId,prompt_length,"
                "negative_prompt_length,num_images_per_prompt,num_inference_steps,"
                "checkpoint_model_version_id,num_lora\n")
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def no_data_env(monkeypatch, tmp_path):
    """Resolution sees no env var and no checkout data unless the test sets them."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.setattr(datadir, "_CHECKOUT_DATA_DIR", tmp_path / "no-checkout-data")
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ------------------------------------------------------------------------- data dir resolution
def test_explicit_dir_wins_over_env_var(no_data_env, monkeypatch):
    explicit, env = no_data_env / "explicit", no_data_env / "env"
    explicit.mkdir(), env.mkdir()
    monkeypatch.setenv(DATA_DIR_ENV, str(env))
    assert resolve_data_dir(explicit) == explicit
    assert resolve_data_dir(str(explicit)) == explicit
    assert resolve_data_dir() == env


def test_env_var_wins_over_checkout_and_cwd(no_data_env, monkeypatch):
    checkout, env = no_data_env / "checkout", no_data_env / "env"
    checkout.mkdir(), env.mkdir(), (no_data_env / "data").mkdir()
    monkeypatch.setattr(datadir, "_CHECKOUT_DATA_DIR", checkout)
    monkeypatch.setenv(DATA_DIR_ENV, str(env))
    assert resolve_data_dir() == env


def test_checkout_data_then_cwd_data_then_none(no_data_env, monkeypatch):
    assert resolve_data_dir() is None
    (no_data_env / "data").mkdir()
    assert resolve_data_dir() == no_data_env / "data"
    checkout = no_data_env / "checkout"
    checkout.mkdir()
    monkeypatch.setattr(datadir, "_CHECKOUT_DATA_DIR", checkout)
    assert resolve_data_dir() == checkout


def test_missing_explicit_or_env_dir_does_not_fall_through(no_data_env, monkeypatch):
    (no_data_env / "data").mkdir()  # a fallback that must NOT be picked silently
    assert resolve_data_dir(no_data_env / "typo") is None
    monkeypatch.setenv(DATA_DIR_ENV, str(no_data_env / "typo"))
    assert resolve_data_dir() is None


def test_checkout_default_is_next_to_the_repository():
    repo = Path(__file__).resolve().parents[2]
    assert datadir.checkout_data_dir() == repo.parent / "shared" / "data"


def test_missing_file_names_path_and_public_source(tmp_path):
    with pytest.raises(DataNotFound) as err:
        load_alibaba_nodes(tmp_path)
    text = str(err.value)
    assert str(tmp_path / "alibaba-gpu-v2023" / "openb_node_list_all_node.csv") in text
    assert ALIBABA_GPU.url in text and DATA_DIR_ENV in text


def test_missing_data_dir_is_reported(no_data_env):
    with pytest.raises(DataNotFound, match="no data folder found"):
        load_gavel()


@pytest.mark.parametrize("load, size", [
    (lambda d: load_or_generate_nodes(d, n_nodes=12), 12),
    (lambda d: load_or_generate_pods(d, n_pods=15), 15),
    (lambda d: load_or_generate_genai(d, n_requests=20), 20),
    (lambda d: load_or_generate_azure(d, kind="conv", n_requests=25), 25),
    (lambda d: load_or_generate_colocation(d, n_jobs=5), 3),  # three GPU types
])
def test_absent_data_falls_back_to_generator_and_says_so(tmp_path, caplog, load, size):
    with caplog.at_level(logging.WARNING, logger="workload.traces"):
        result = load(tmp_path)
    assert result.source.startswith("generated: ")
    assert str(tmp_path) in result.source and "does not exist" in result.source
    assert len(result.gpu_types if isinstance(result, ColocationTable) else result) == size
    assert [r.getMessage() for r in caplog.records] == [result.source]


def test_fallback_via_env_var_to_empty_dir(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="workload.traces"):
        table = load_or_generate_colocation(n_jobs=4)
    assert table.source.startswith("generated: ") and str(tmp_path) in table.source
    assert len(caplog.records) == 1


def test_present_file_is_read_not_generated(tmp_path, caplog):
    path = write(tmp_path / ALIBABA_GPU.folder / "openb_node_list_all_node.csv",
                 NODE_HEADER + "n0,32000,65536,0,\nn1,96000,393216,8,G2\n")
    with caplog.at_level(logging.WARNING, logger="workload.traces"):
        nodes = load_or_generate_nodes(tmp_path)
    assert nodes.source == str(path) and len(nodes) == 2 and not caplog.records


def test_malformed_file_raises_instead_of_falling_back(tmp_path):
    write(tmp_path / ALIBABA_GPU.folder / "openb_node_list_all_node.csv",
          NODE_HEADER + "n0,32000,65536,zero,\n")
    with pytest.raises(TraceFormatError, match="line 2"):
        load_or_generate_nodes(tmp_path)


# ------------------------------------------------------------------------ Alibaba GPU readers
def test_nodes_read_as_plain_python_records(tmp_path):
    path = write(tmp_path / "nodes.csv",
                 NODE_HEADER + "n0,32000,65536,0,\nn1,96000,393216,8,G2\n"
                 "\nn2,8000,32768,1,V100M16\n")  # a blank line is skipped
    table = read_nodes(path)
    assert isinstance(table, NodeTable) and table.source == str(path)
    assert table.nodes == (NodeInventory("n0", 32000, 65536, 0, ""),
                           NodeInventory("n1", 96000, 393216, 8, "G2"),
                           NodeInventory("n2", 8000, 32768, 1, "V100M16"))
    assert [n.has_gpu for n in table] == [False, True, True]
    assert table.model_counts() == {"": 1, "G2": 1, "V100M16": 1}


@pytest.mark.parametrize("rows, line, problem", [
    ("n0,32000,65536,0,\nn1,96000,lots,8,G2\n", 3, "'memory_mib': 'lots' is not a number"),
    ("n0,32000,65536,0\n", 2, "expected 5 fields, found 4"),
    ("n0,,65536,0,\n", 2, "column 'cpu_milli' is empty"),
    ("n0,32000,65536,2,\n", 2, "does not match GPU model"),
    ("n0,32000,65536,0,\nn0,32000,65536,0,\n", 3, "duplicate node name"),
    ("n0,32000,65536,-1,T4\n", 2, "below 0"),
    ("n0,32000,65536,1.5,T4\n", 2, "not an integer"),
    ("n0,32000,nan,1,T4\n", 2, "not a finite number"),
])
def test_malformed_node_row_names_file_and_line(tmp_path, rows, line, problem):
    path = write(tmp_path / "nodes.csv", NODE_HEADER + rows)
    with pytest.raises(TraceFormatError) as err:
        read_nodes(path)
    assert err.value.path == str(path) and err.value.line == line
    assert str(err.value).startswith(f"{path}, line {line}: ") and problem in str(err.value)


def test_missing_header_column_is_reported_on_line_one(tmp_path):
    path = write(tmp_path / "nodes.csv", "sn,cpu_milli,memory_mib,gpu\nn0,1,1,0\n")
    with pytest.raises(TraceFormatError, match=r"line 1: header lacks column\(s\) \['model'\]"):
        read_nodes(path)


def test_empty_file_is_a_format_error(tmp_path):
    with pytest.raises(TraceFormatError, match="line 1: file is empty"):
        read_nodes(write(tmp_path / "nodes.csv", ""))


def test_pods_parse_optional_times_specs_and_fractional_gpus(tmp_path):
    path = write(tmp_path / "pods.csv", POD_HEADER
                 + "p1,6000,12288,1,460,,LS,Running,500,900,500\n"
                 + "p0,12000,16384,1,1000,V100M16|V100M32,BE,Failed,100,400,130\n"
                 + "p2,4000,0,0,0,,BE,Pending,700,,\n")
    pods = read_pods(path)
    assert isinstance(pods, PodTrace) and [p.name for p in pods] == ["p0", "p1", "p2"]
    p0, p1, p2 = pods
    assert p0 == PodRecord("p0", 12000, 16384, 1, 1000, ("V100M16", "V100M32"), "BE", "Failed",
                           100, 400, 130)
    assert p1.fractional_gpu and p1.gpu_request == pytest.approx(0.46) and not p0.fractional_gpu
    assert p2.scheduled_s is None and p2.deletion_s is None and p2.lifetime_s is None
    assert p2.gpu_spec == () and p2.gpu_request == 0.0
    assert pods.arrivals() == [0.0, 400.0, 600.0]


@pytest.mark.parametrize("row, problem", [
    ("p0,1000,1024,1,1500,,LS,Running,0,10,0", "exceeds one GPU"),
    ("p0,1000,1024,0,500,,LS,Running,0,10,0", "does not match gpu_milli"),
    ("p0,1000,1024,1,500,,LS,Running,50,10,50", "precedes creation_time"),
    ("p0,1000,1024,1,500,,,Running,0,10,0", "column 'qos' is empty"),
])
def test_malformed_pod_row_names_file_and_line(tmp_path, row, problem):
    path = write(tmp_path / "pods.csv", POD_HEADER + "ok,1000,1024,1,500,,LS,Running,0,10,0\n"
                 + row + "\n")
    with pytest.raises(TraceFormatError, match=f"line 3: .*{problem}") as err:
        read_pods(path)
    assert err.value.path == str(path)


def test_load_pods_rejects_unknown_variant(tmp_path):
    with pytest.raises(ValueError, match="variant"):
        load_alibaba_pods(tmp_path, variant="nope")


def test_sample_nodes_is_stratified_deterministic_and_distinct():
    nodes = NodeTable(tuple(
        NodeInventory(f"n{i}", 1000, 1024, 0 if model == "" else 1, model)
        for i, model in enumerate([""] * 30 + ["G2"] * 50 + ["T4"] * 15 + ["A10"] * 2
                                  + ["P100"] * 3)
    ), source="test")
    picked = sample_nodes(nodes, 10, seed=5)
    assert picked == sample_nodes(nodes, 10, seed=5)
    assert picked != sample_nodes(nodes, 10, seed=6)
    assert len({n.name for n in picked}) == 10
    counts = {m: sum(n.gpu_model == m for n in picked) for m in ["", "G2", "T4", "A10", "P100"]}
    # One per model first (rare A10 kept), then the other 5 in proportion to what is left
    # (29, 49, 14, 1, 2 -> 1.53, 2.58, 0.74, 0.05, 0.11), largest remainders first.
    assert counts == {"": 2, "G2": 4, "T4": 2, "A10": 1, "P100": 1}
    assert [n.name for n in picked] == sorted((n.name for n in picked), key=lambda s: int(s[1:]))
    assert all(n.has_gpu for n in sample_nodes(nodes, 20, seed=1, include_cpu_only=False))
    assert {n.gpu_model for n in sample_nodes(nodes, 2, seed=0)} <= {"", "G2"}  # biggest strata
    assert sample_nodes(nodes, 0) == [] and len(sample_nodes(nodes, 100)) == 100
    with pytest.raises(ValueError):
        sample_nodes(nodes, 101)


# ---------------------------------------------------------------------- GenAI and Azure readers
def test_genai_requests_sorted_with_empty_values_as_none(tmp_path):
    path = write(tmp_path / "lora.csv", GENAI_HEADER
                 + "2024-11-15 16:58:00,TXT_2_IMG,SUCCEED,32.0,G1,63.0,26.0,1.0,30.0,M0000,0\n"
                 + "2024-11-15 16:57:50,IMG_2_IMG,FAILED,0.0,G2,,,,,,1\n")
    trace = read_genai_requests(path)
    assert isinstance(trace, RequestTrace) and trace.source == str(path)
    first, second = trace
    assert first == InferenceRequest("lora-3", 0.0, "IMG_2_IMG", exec_time_ms=0.0, status="FAILED",
                                     group_id="G2", num_lora=1)
    assert second.arrival_s == 10.0 and second.exec_time_ms == 32000.0 and second.steps == 30
    assert second.model_id == "M0000" and second.images == 1 and second.prompt_length == 63
    assert trace.arrivals() == [0.0, 10.0] and str(trace.start) == "2024-11-15 16:57:50"


@pytest.mark.parametrize("row, problem", [
    ("2024-11-15 16:57,TXT_2_IMG,SUCCEED,32.0,G1,63.0,26.0,1.0,30.0,M0,0", "gmt_create"),
    ("2024-11-15T16:57:50+08:00,TXT_2_IMG,SUCCEED,32,G1,63,26,1,30,M0,0", "gmt_create"),
    ("2024-11-15 16:57:50,TXT_2_IMG,SUCCEED,32.0,G1,63.0,26.0,1.0,30.5,M0,0", "not an integer"),
    ("2024-11-15 16:57:50,TXT_2_IMG,SUCCEED,,G1,63.0,26.0,1.0,30.0,M0,0", "exec_time_seconds"),
])
def test_malformed_genai_row_names_file_and_line(tmp_path, row, problem):
    path = write(tmp_path / "lora.csv", GENAI_HEADER + row + "\n")
    with pytest.raises(TraceFormatError, match=f"{path}, line 2: .*{problem}"):
        read_genai_requests(path)


def test_azure_timestamps_keep_sub_second_precision(tmp_path):
    path = write(tmp_path / "code.csv", AZURE_HEADER + "2023-11-16 18:17:03.9799600,4808,10\n"
                 + "2023-11-16 18:17:05.0319600,3180,8\n2023-11-16 18:17:05.5,110,27")
    trace = read_azure_llm(path, kind="code")
    assert trace.arrivals() == pytest.approx([0.0, 1.052, 1.52004], abs=1e-9)
    assert trace[0] == InferenceRequest("code-2", 0.0, "code", context_tokens=4808,
                                        generated_tokens=10)
    with pytest.raises(TraceFormatError, match="line 2: column 'ContextTokens'"):
        read_azure_llm(write(tmp_path / "bad.csv", AZURE_HEADER + "2023-11-16 18:17:03,x,1\n"))


def test_azure_both_merges_on_one_clock(tmp_path):
    folder = tmp_path / AZURE_LLM.folder
    write(folder / "AzureLLMInferenceTrace_code.csv", AZURE_HEADER + "2023-11-16 18:00:10,5,1\n")
    write(folder / "AzureLLMInferenceTrace_conv.csv", AZURE_HEADER + "2023-11-16 18:00:00,7,2\n"
          + "2023-11-16 18:00:20,9,3\n")
    both = load_azure_llm(tmp_path, kind="both")
    assert [(r.kind, r.arrival_s) for r in both] == [("conv", 0.0), ("code", 10.0), ("conv", 20.0)]
    assert "code.csv + " in both.source
    with pytest.raises(ValueError):
        load_azure_llm(tmp_path, kind="chat")


def test_genai_qps_sums_containers_per_timestamp(tmp_path):
    csv_text = ("timestamp_anon,value,container_ip,request_type\n100.0,0.5,a,Generative Requests\n"
                "100.0,0.25,b,Generative Requests\n160.0,1.0,a,Generative Requests\n"
                "100.0,9.0,,API Requests\n")
    archive = tmp_path / ALIBABA_GENAI.folder / "qps.tar.gz"
    archive.parent.mkdir(parents=True)
    with tarfile.open(archive, "w:gz") as tar:
        data = csv_text.encode()
        info = tarfile.TarInfo("qps.csv")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    assert load_genai_qps(tmp_path) == [(0.0, 0.75), (60.0, 1.0)]
    assert load_genai_qps(tmp_path, request_type=None) == [(0.0, 9.75), (60.0, 1.0)]


def test_time_compress_keeps_origin_and_scales_gaps():
    assert time_compress([5.0, 15.0, 35.0], 10) == [5.0, 6.0, 8.0]
    assert time_compress([], 3) == []
    for bad in (0, -1, float("inf")):
        with pytest.raises(ValueError):
            time_compress([1.0], bad)


# ------------------------------------------------------------------------------- Gavel reader
A, B, C = "('A', 1)", "('B', 1)", "('C', 2)"
SMALL_GAVEL = {
    "k80": {A: {"null": 2.0, A: [1.0, 1.0], B: [1.0, 0.5]},
            B: {"null": 1.0, A: [0.5, 1.0], B: [0, 0]},
            C: {"null": 0.0, C: [0.0, 0.0]}},
    "v100": {A: {"null": 8.0, A: [4.0, 4.0], B: [6.0, 3.0]},
             B: {"null": 5.0, A: [3.0, 6.0], B: [0.0, 0.0]},
             C: {"null": 3.0, C: [0.0, 0.0]}},
}


def test_gavel_table_normalizes_and_compares_gpu_types(tmp_path):
    path = write(tmp_path / "t.json", json.dumps(SMALL_GAVEL, indent=4))
    table = read_gavel(path)
    assert table.gpu_types == ("k80", "v100") and table.source == str(path)
    assert table.jobs("v100") == (JobKey("A", 1), JobKey("B", 1), JobKey("C", 2))
    assert table.normalized("A", "B", "v100") == (0.75, 0.6)
    assert table.normalized(("B", 1), JobKey("A"), "v100") == (0.6, 0.75)
    assert table.combined("A", "B", "v100") == pytest.approx(1.35)
    assert table.feasible("A", "B", "k80") and not table.feasible("B", "B", "v100")
    assert table.normalized("B", "B", "v100") == (0.0, 0.0)
    assert table.pairs("v100", feasible_only=True) == [(JobKey("A"), JobKey("A")),
                                                       (JobKey("A"), JobKey("B")),
                                                       (JobKey("B"), JobKey("A"))]
    assert len(table.pairs("v100")) == 5
    assert table.speed_factor("A", "v100") == 4.0 and table.speed_factor("B", "v100") == 5.0
    with pytest.raises(ValueError, match="cannot run on the reference"):
        table.speed_factor(("C", 2), "v100")  # isolated 0 on k80: it does not fit there
    stats = table.stats("v100")
    assert (stats.pairs, stats.infeasible, stats.feasible) == (5, 2, 3)
    assert stats.combined_p50 == pytest.approx(1.35) and stats.infeasible_fraction == 0.4
    assert table.stats("v100", unordered=True).pairs == 4
    with pytest.raises(KeyError):
        table.normalized("A", "C", "v100")  # different scales never pair


@pytest.mark.parametrize("mutate, problem", [
    (lambda d: d["v100"][B].__setitem__(A, [3.0]), "expected [this_job, partner]"),
    (lambda d: d["v100"][B].__setitem__(A, [3.0, -1.0]), "expected [this_job, partner]"),
    (lambda d: d["v100"][B].__setitem__("('Z', 1)", [1.0, 1.0]), "partner is not a job"),
    (lambda d: d["v100"][B].pop("null"), "isolated throughput"),
    (lambda d: d["k80"][C].__setitem__(C, [1.0, 1.0]), "cannot co-run"),
])
def test_malformed_gavel_entry_names_file_line_and_key(tmp_path, mutate, problem):
    data = json.loads(json.dumps(SMALL_GAVEL))
    mutate(data)
    text = json.dumps(data, indent=4)
    path = write(tmp_path / "t.json", text)
    with pytest.raises(TraceFormatError) as err:
        read_gavel(path)
    assert err.value.path == str(path) and problem in err.value.problem
    gpu = "k80" if "cannot co-run" in problem else "v100"
    key_line = text.splitlines()[err.value.line - 1]
    assert err.value.line > text.splitlines().index(f'    "{gpu}": {{') and "('" in key_line


def test_gavel_invalid_json_reports_line(tmp_path):
    path = write(tmp_path / "t.json", '{\n  "k80": {\n    "x": [1, 2\n}\n')
    with pytest.raises(TraceFormatError, match=r"line \d: invalid JSON"):
        read_gavel(path)


# ---------------------------------------------------------------------------------- generators
GENERATORS = {
    "nodes": lambda seed: generate_nodes(40, seed=seed),
    "pods": lambda seed: generate_pods(40, seed=seed),
    "genai": lambda seed: generate_requests(40, seed=seed, style="genai"),
    "llm": lambda seed: generate_requests(40, seed=seed, style="llm", duration_s=60.0),
    "colocation": lambda seed: generate_colocation_table(6, seed=seed),
    "poisson": lambda seed: poisson_arrivals(3.0, n=40, seed=seed),
    "bursty": lambda seed: bursty_arrivals(3.0, n=40, seed=seed),
    "mmpp": lambda seed: mmpp_arrivals([1.0, 9.0, 0.1], [5.0, 2.0, 9.0], duration_s=60.0,
                                       seed=seed),
    "sizes": lambda seed: lognormal_sizes(40, median=5.0, sigma=1.0, seed=seed),
}
TYPES = {"nodes": (NodeTable, NodeInventory), "pods": (PodTrace, PodRecord),
         "genai": (RequestTrace, InferenceRequest), "llm": (RequestTrace, InferenceRequest)}


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generators_are_deterministic_per_seed(name):
    make = GENERATORS[name]
    assert make(3) == make(3)
    assert make(3) != make(4)


@pytest.mark.parametrize("name", sorted(TYPES))
def test_generators_return_the_readers_types(name):
    container, record = TYPES[name]
    made = GENERATORS[name](0)
    assert isinstance(made, container) and made.source.startswith("generated: ")
    assert len(made) == 40 and all(isinstance(r, record) for r in made)
    if isinstance(made, RequestTrace):
        assert made.arrivals() == sorted(made.arrivals()) and made.arrivals()[0] == 0.0
        assert all(type(r.arrival_s) is float for r in made)


def test_arrival_processes_have_the_requested_rate_and_burstiness():
    def gap_cv(times):
        gaps = [b - a for a, b in zip(times, times[1:])]
        return statistics.pstdev(gaps) / statistics.fmean(gaps)

    steady = poisson_arrivals(4.0, n=4000, seed=0)
    bursts = bursty_arrivals(4.0, n=4000, seed=0)
    assert steady[-1] == pytest.approx(1000.0, rel=0.1) and 0.9 < gap_cv(steady) < 1.1
    assert 500 < bursts[-1] < 1500 and gap_cv(bursts) > 1.5
    windowed = poisson_arrivals(4.0, duration_s=50.0, seed=1)
    assert windowed[-1] < 50.0 and 150 < len(windowed) < 250
    with pytest.raises(ValueError, match="exactly one"):
        poisson_arrivals(1.0, n=5, duration_s=5.0)


def test_generated_requests_have_trace_like_work_sizes():
    genai = generate_requests(2000, seed=0, style="genai")
    median_exec = statistics.median(r.exec_time_ms for r in genai)
    assert 20000 < median_exec < 26000  # real trace: 23 s
    assert statistics.mode(r.steps for r in genai) == 30
    llm = generate_requests(2000, seed=0, style="llm", duration_s=3600.0)
    assert all(r.context_tokens >= 2 and r.generated_tokens >= 1 for r in llm)
    assert all(r.exec_time_ms is None for r in llm)


def test_generated_colocation_table_has_gavel_like_shape():
    table = generate_colocation_table(20, seed=2, infeasible_fraction=0.6)
    jobs = table.jobs("v100")
    assert table.gpu_types == ("k80", "p100", "v100") and len(jobs) == 20
    for j in jobs[:5]:
        for k in jobs[:5]:
            a, b = table.normalized(j, k, "v100")
            assert table.normalized(k, j, "v100") == (b, a)
            assert (0.0 < a <= 1.0) if table.feasible(j, k, "v100") else (a, b) == (0.0, 0.0)
    stats = {g: table.stats(g) for g in table.gpu_types}
    assert all(abs(s.infeasible_fraction - 0.6) < 0.05 for s in stats.values())
    assert stats["v100"].combined_p50 > stats["k80"].combined_p50 > 0.9
    assert stats["v100"].combined_p10 < 0.9  # some pairs lose throughput by sharing
    speed = statistics.median(table.speed_factor(j, "v100") for j in jobs)
    assert 3.5 < speed < 6.5


# --------------------------------------------------------------------- the real files, if present
@pytest.fixture(scope="module")
def real_dir():
    root = resolve_data_dir()
    if root is None:
        where = os.environ.get(DATA_DIR_ENV) or "<checkout>/../shared/data and ./data"
        pytest.skip(f"no real data folder at {where} (set {DATA_DIR_ENV}; see docs/data.md)")
    return root


def _need(root: Path, source) -> Path:
    if not (root / source.folder).is_dir():
        pytest.skip(f"{root / source.folder} absent (public source: {source.url})")
    return root


@pytest.fixture(scope="module")
def real_nodes(real_dir):
    _need(real_dir, ALIBABA_GPU)
    return load_alibaba_nodes(real_dir), load_alibaba_nodes(real_dir, which="gpu")


@pytest.fixture(scope="module")
def real_pods(real_dir):
    _need(real_dir, ALIBABA_GPU)
    return {v: load_alibaba_pods(real_dir, variant=v) for v in POD_VARIANTS}


@pytest.fixture(scope="module")
def real_gavel(real_dir):
    _need(real_dir, GAVEL)
    return load_gavel(real_dir), load_gavel(real_dir, measurements="physical")


def test_real_alibaba_inventory_matches_readme(real_nodes):
    every, gpu_only = real_nodes
    assert len(every) == 1523 and len(gpu_only) == 1213
    assert every.model_counts() == {"G2": 549, "T4": 404, "": 310, "P100": 134, "V100M16": 55,
                                    "G3": 39, "V100M32": 30, "A10": 2}
    assert gpu_only.model_counts() == {k: v for k, v in every.model_counts().items() if k}
    cluster = sample_nodes(every, 16, seed=0)
    assert len({n.gpu_model for n in cluster}) == 8 and cluster == sample_nodes(every, 16, seed=0)


def test_real_alibaba_pods_match_readme(real_pods):
    default = real_pods["default"]
    assert all(len(p) == 8152 for p in real_pods.values())
    counts = {g: sum(p.num_gpu == g for p in default) for g in (1, 0, 8, 2, 4)}
    assert counts == {1: 6989, 0: 1088, 8: 44, 2: 16, 4: 15}
    assert sum(p.fractional_gpu for p in default) == 3078
    assert {q: sum(p.qos == q for p in default) for q in ("LS", "BE", "Burstable", "Guaranteed")} \
        == {"LS": 4647, "BE": 3398, "Burstable": 100, "Guaranteed": 7}
    assert sum(p.scheduled_s is None for p in default) == 897  # the Pending pods
    arrivals = default.arrivals()
    assert arrivals[0] == 0.0 and 148 < arrivals[-1] / 86400 < 150  # ~149 days
    constrained = sum(bool(p.gpu_spec) for p in real_pods["gpuspec33"] if p.num_gpu)
    gpu_pods = sum(p.num_gpu > 0 for p in real_pods["gpuspec33"])
    assert constrained / gpu_pods == pytest.approx(0.33, abs=0.02)  # "~33% carry a constraint"


def test_real_genai_requests_match_readme(real_dir):
    trace = load_genai_requests(_need(real_dir, ALIBABA_GENAI))
    assert len(trace) == 26823 and 22.9 < trace.duration_s / 86400 < 23.1
    kinds = {k: sum(r.kind == k for r in trace) for k in ("TXT_2_IMG", "IMG_2_IMG", "INPAINTING")}
    assert kinds == {"TXT_2_IMG": 24438, "IMG_2_IMG": 2199, "INPAINTING": 186}
    assert sum(r.status == "SUCCEED" for r in trace) == 26392
    assert sum(r.status == "FAILED" for r in trace) == 398
    assert len({r.group_id for r in trace}) == 4247
    assert sum(r.model_id is None for r in trace) == 25  # rows with no model / steps / images
    assert statistics.median(r.exec_time_ms for r in trace) == 23000.0


def test_real_azure_traces_match_readme(real_dir):
    _need(real_dir, AZURE_LLM)
    code, conv = load_azure_llm(real_dir, kind="code"), load_azure_llm(real_dir, kind="conv")
    assert (len(code), len(conv)) == (8819, 19366)
    assert all(t.duration_s < 3600 for t in (code, conv))
    assert str(code.start).startswith("2023-11-16 18:17")
    assert str(conv.start).startswith("2023-11-16 18:15")


def test_real_gavel_per_gpu_facts(real_gavel):
    table, physical = real_gavel
    assert set(table.gpu_types) == {"k80", "p100", "v100", "k80_unconsolidated",
                                    "p100_unconsolidated", "v100_unconsolidated"}
    for gpu in ("k80", "p100", "v100"):
        jobs = table.jobs(gpu)
        assert len(jobs) == 83 and len({j.model for j in jobs}) == 26
        assert sorted({j.scale for j in jobs}) == [1, 2, 4, 8]
    infeasible = {g: table.stats(g).infeasible for g in ("k80", "p100", "v100")}
    assert infeasible == {"k80": 1170, "p100": 1103, "v100": 1123}
    v100 = table.stats("v100")
    # PAPER.md: on V100 the median pair gains 37%, the worst 10% lose over 30%, ~64% cannot co-run.
    assert v100.pairs == 1759 and v100.combined_p50 == pytest.approx(1.37, abs=0.005)
    assert v100.combined_p10 < 0.70 and v100.infeasible_fraction == pytest.approx(0.64, abs=0.005)
    # The physical-cluster file has the same infeasible set but smaller gains.
    assert physical.stats("v100").infeasible == 1123
    assert physical.stats("v100").combined_p50 < v100.combined_p50
    resnet = "ResNet-50 (batch size 64)"
    assert table.speed_factor(resnet, "v100") > table.speed_factor(resnet, "p100") > 1.0
    assert table.isolated_throughput(("ResNet-50 (batch size 128)", 2), "k80") == 0.0
