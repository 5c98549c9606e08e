"""Configuration, cluster specs and topic definitions: validated, with clear errors (no JVM)."""

from __future__ import annotations

import textwrap

import pytest

from streamplace.cluster_spec import JVM_FIXED_OVERHEAD_MB, SpecError, load_cluster_spec
from streamplace.config import ConfigError, load_config
from streamplace.flink_cluster import FlinkCluster
from streamplace.topics import topic_definitions


def test_overrides_beat_file_beat_defaults(tmp_path):
    file = tmp_path / "sp.yaml"
    file.write_text("kafka: {port: 19000, heap_mb: 256}\njob: {checkpoint_interval_ms: 500}\n")
    cfg = load_config(file, ["kafka.port=19500"])
    assert cfg.kafka.port == 19500 and cfg.kafka.heap_mb == 256
    assert cfg.job.checkpoint_interval_ms == 500 and cfg.flink.rest_port == 8081


@pytest.mark.parametrize("overrides,message", [
    (["kafka.port=notaport"], "kafka.port"),
    (["kafka.prot=1"], "prot"),
    (["kafka.port=9092", "flink.rest_port=9092"], "ports must differ"),
    (["job.transaction_timeout_ms=900000"], "must be below"),
    (["noequals"], "section.key=value"),
])
def test_bad_settings_are_refused_with_the_reason(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_default_spec_is_three_unequal_taskmanagers():
    spec = load_cluster_spec("default")
    assert [tm.id for tm in spec.taskmanagers] == ["tm_a", "tm_b", "tm_c"]
    # The inequality is real: tm_a has a core to itself, tm_b and tm_c share the other one,
    # and tm_c does every unit of work twice. No two nodes overlap partly (a node whose cores
    # held another's would make that other add no capacity).
    affinity = {tm.id: set(tm.cpu_affinity) for tm in spec.taskmanagers}
    assert affinity["tm_a"].isdisjoint(affinity["tm_b"] | affinity["tm_c"])
    assert affinity["tm_b"] == affinity["tm_c"]
    assert spec.node("tm_c").work_multiplier > spec.node("tm_a").work_multiplier
    assert spec.node("tm_a").process_memory_mb == 384 + 384 + JVM_FIXED_OVERHEAD_MB


@pytest.mark.parametrize("body,message", [
    ("taskmanagers: []", "at least 1"),
    ("taskmanagers: [{id: tm-a, cpu_cores: 1}]", "must start with a letter"),
    ("taskmanagers: [{id: a, cpu_cores: 1}, {id: a, cpu_cores: 1}]", "unique"),
    ("taskmanagers: [{id: a, cpu_cores: 1, work_multiplier: 0.5}]", "work_multiplier"),
    ("taskmanagers: [{id: a, cpu_cores: 1, colour: red}]", "colour"),
])
def test_bad_specs_are_refused(tmp_path, body, message):
    path = tmp_path / "spec.yaml"
    path.write_text(body)
    with pytest.raises(SpecError, match=message):
        load_cluster_spec(path)


def test_unknown_shipped_spec_lists_the_known_ones():
    with pytest.raises(SpecError, match="default"):
        load_cluster_spec("no-such-spec")


def test_taskmanager_configuration_pins_and_isolates(tmp_path):
    cfg = load_config(None, [f"home={tmp_path}"])
    cluster = FlinkCluster(cfg)
    tm = cluster.spec.node("tm_c")
    conf = cluster.files.taskmanager_config(tm, cluster.files.common_config())
    assert conf["taskmanager.resource-id"] == "tm_c"
    assert conf["external-resource.tm_c.amount"] == tm.slots
    assert conf["cluster.fine-grained-resource-management.enabled"] is True
    assert "taskmanager.memory.process.size" not in conf  # explicit parts instead
    env = cluster.files.taskmanager_env(tm)
    assert env["STREAMPLACE_NODE_ID"] == "tm_c" and env["STREAMPLACE_WORK_MULTIPLIER"] == "2.0"
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["OMP_NUM_THREADS"] == "1"


def test_topic_definitions_follow_configured_names():
    cfg = load_config(None, ["job.topic_tasks=my-tasks", "kafka.topic_partitions=4"])
    topics = topic_definitions(cfg)
    assert set(topics) == {"my-tasks", "results", "feedback", "dead-letter"}
    assert topics["my-tasks"]["partitions"] == 4 and topics["feedback"]["partitions"] == 1
    assert all(t["config"]["compression.type"] in {"lz4", "uncompressed"}
               for t in topics.values())


def test_cli_help_lists_every_subcommand(capsys):
    from streamplace.cli import main
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for command in ("kafka", "cluster", "up", "down", "jars", "job", "produce", "demo", "info"):
        assert command in out


def test_cli_reports_config_errors_cleanly(capsys):
    from streamplace.cli import main
    assert main(["--set", "kafka.port=0", "kafka", "status"]) == 2
    assert "kafka.port" in capsys.readouterr().err


def test_cli_help_does_not_import_heavy_modules():
    import subprocess
    import sys
    code = textwrap.dedent("""
        import sys
        from streamplace.cli import build_parser
        build_parser()
        print(sorted(m for m in ('torch', 'pyflink', 'confluent_kafka', 'pydantic')
                     if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_cli_simulate_runs_a_pair_and_explains_decisions(capsys):
    from streamplace.cli import main
    assert main(["simulate", "--tasks", "12", "--nodes", "3", "--policy", "round_robin",
                 "--scheduler", "fcfs", "--show-decisions", "2"]) == 0
    out = capsys.readouterr().out
    assert "throughput_per_min" in out and "completed                        12" in out
    assert out.count("  p0000") == 2


def test_cli_simulate_names_the_known_policies_on_a_typo(capsys):
    from streamplace.cli import main
    assert main(["simulate", "--policy", "leastloaded", "--tasks", "2"]) == 2
    assert "least_loaded" in capsys.readouterr().err


def test_cli_simulate_runs_the_shipped_ldwp_model_and_refuses_a_bad_file(capsys, tmp_path):
    from placement.ldwp.shipped import shipped_model
    from streamplace.cli import main
    assert shipped_model().stat().st_size > 1000
    assert main(["simulate", "--policy", "ldwp", "--tasks", "10", "--show-decisions", "1"]) == 0
    out = capsys.readouterr().out
    assert "completed                        10" in out and "LDWP: highest Q" in out
    bad = tmp_path / "bad.spm"
    bad.write_bytes(b"SPMODEL2" + b"\0" * 64)
    assert main(["simulate", "--policy", "ldwp", "--model", str(bad), "--tasks", "2"]) == 2
    assert "bad.spm" in capsys.readouterr().err
