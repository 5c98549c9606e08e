"""The host's own numbers read from inside it (interference/executor/host_stats.py) and
NodeTelemetry's host view, over a fake /proc and cgroup v1 tree under tmp_path."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from interference.executor.host_stats import (MAX_COUNT, HostCounters, HostStats, NetCounters,
                                              parse_cgroup_mounts, parse_count, parse_net_dev,
                                              parse_proc_cgroup)
from interference.executor.telemetry import (MAX_LINK_BYTES_PER_S, SOURCE_CGROUP, SOURCE_PROCESS,
                                             NodeTelemetry, host_utilisation)

GROUP = "/streamplace/sp-tm_a"
NO_LIMIT = "9223372036854771712"  # what cgroup v1 writes for "no memory limit" (4 KiB pages)
NET_HEADER = ("Inter-|   Receive                                                |  Transmit\n"
              " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets"
              " errs drop fifo colls carrier compressed\n")


def net_line(name: str, rx: int | str, tx: int | str) -> str:
    return f"{name:>6}: {rx} 10 0 0 0 0 0 0 {tx} 5 0 0 0 0 0 0\n"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def fake_host(root: Path, quota_us="45000", period_us="100000", usage_ns="0",
              memory="0", limit=str(256 << 20), net=(("lo", 999, 999), ("spv2n", 0, 0)),
              mountinfo=True) -> Path:
    """A host's view: own groups at GROUP, cpu and cpuacct co-mounted, memory alone."""
    write(root / "proc/self/cgroup", f"11:memory:{GROUP}\n3:cpu,cpuacct:{GROUP}\n"
                                     "1:name=systemd:/\n0::/\n")
    if mountinfo:
        write(root / "proc/self/mountinfo",
              "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
              "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup "
              "rw,cpu,cpuacct\n"
              "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
              "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
        cpu_dir = root / "sys/fs/cgroup/cpu,cpuacct" / GROUP.lstrip("/")
    else:  # the standard layout, one folder per controller
        cpu_dir = root / "sys/fs/cgroup/cpu" / GROUP.lstrip("/")
        write(root / "sys/fs/cgroup/cpuacct" / GROUP.lstrip("/") / "cpuacct.usage", usage_ns)
    memory_dir = root / "sys/fs/cgroup/memory" / GROUP.lstrip("/")
    for folder, name, value in ((cpu_dir, "cpu.cfs_quota_us", quota_us),
                                (cpu_dir, "cpu.cfs_period_us", period_us),
                                (cpu_dir, "cpuacct.usage", usage_ns),
                                (memory_dir, "memory.usage_in_bytes", memory),
                                (memory_dir, "memory.limit_in_bytes", limit)):
        if value is not None:
            write(folder / name, f"{value}\n")
    write(root / "proc/self/net/dev", NET_HEADER + "".join(net_line(*n) for n in net))
    return cpu_dir


# -- parsers -------------------------------------------------------------------------------
def test_counts_are_digits_within_a_signed_64_bit_range():
    assert parse_count("0\n") == 0 and parse_count(str(MAX_COUNT)) == MAX_COUNT
    for garbage in ("", "-1", "1e9", "nan", "inf", "0x10", "12 34", "١٢", str(MAX_COUNT + 1),
                    "9" * 400, None):
        assert parse_count(garbage) is None, garbage


def test_proc_cgroup_lists_v1_controllers_and_skips_the_rest():
    groups = parse_proc_cgroup("12:cpu,cpuacct:/a\n4:memory:/b\n1:name=systemd:/s\n0::/v2\n"
                               "garbage\n5:pids:relative\n")
    assert groups == {"cpu": "/a", "cpuacct": "/a", "memory": "/b"}


def test_mountinfo_finds_cgroup_v1_mounts_with_escaped_paths():
    mounts = parse_cgroup_mounts(
        "32 31 0:29 /docker/x /sys/fs/cgroup/cpu\\040acct rw - cgroup cgroup rw,cpuacct\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
        "short line - cgroup\n")
    assert mounts == {"cpuacct": [("/docker/x", "/sys/fs/cgroup/cpu acct")]}


def test_net_dev_sums_every_interface_but_loopback_and_ifb():
    text = NET_HEADER + net_line("lo", 10**9, 10**9) + net_line("eth0", 100, 40) \
        + net_line("eth1", 5, 7) + net_line("ifb0", 10**6, 10**6) \
        + "  bad0: 1 2 3\n" + net_line("eth2", "x", 3)
    assert parse_net_dev(text) == NetCounters(105, 47, ("eth0", "eth1"))
    assert parse_net_dev(NET_HEADER + net_line("lo", 5, 5)) == NetCounters(0, 0, ())


# -- HostStats over a fake tree ------------------------------------------------------------
def test_a_host_with_a_quota_reads_its_own_groups(tmp_path):
    fake_host(tmp_path, usage_ns="1500000000", memory=str(64 << 20),
              net=(("lo", 999, 999), ("spv2n", 3000, 1000), ("eth9", 7, 11)))
    stats = HostStats(root=tmp_path, clock=lambda: 4.0)
    sample = stats.sample()
    assert sample == HostCounters(time_s=4.0, cpu_seconds=1.5, cpu_quota=0.45,
                                  memory_bytes=64 << 20, memory_limit_bytes=256 << 20,
                                  net=NetCounters(3007, 1011, ("spv2n", "eth9")))
    assert stats.group_dir("memory") == tmp_path / "sys/fs/cgroup/memory/streamplace/sp-tm_a"


def test_standard_layout_when_mountinfo_is_missing(tmp_path):
    fake_host(tmp_path, usage_ns="2000000000", mountinfo=False)
    stats = HostStats(root=tmp_path)
    assert stats.cpu_seconds() == 2.0 and stats.cpu_quota() == pytest.approx(0.45)


def test_a_mount_of_a_sub_hierarchy_strips_its_root(tmp_path):
    # A container's /sys/fs/cgroup/memory shows /docker/abc, /proc/self/cgroup names it in full.
    write(tmp_path / "proc/self/cgroup", "4:memory:/docker/abc/inner\n")
    write(tmp_path / "proc/self/mountinfo",
          "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
    write(tmp_path / "sys/fs/cgroup/memory/inner/memory.usage_in_bytes", "4096\n")
    assert HostStats(root=tmp_path).memory_bytes() == 4096


def test_no_quota_no_memory_limit_and_no_files_read_as_none(tmp_path):
    fake_host(tmp_path, quota_us="-1", limit=NO_LIMIT)
    stats = HostStats(root=tmp_path)
    assert stats.cpu_quota() is None and stats.memory_limit_bytes() is None
    assert stats.cpu_seconds() == 0.0  # accounting still works without a quota
    empty = HostStats(root=tmp_path / "nothing").sample(clock=lambda: 1.0)
    assert empty == HostCounters(1.0, None, None, None, None, None)


@pytest.mark.parametrize("field,value", [
    ("quota_us", "garbage"), ("quota_us", "nan"), ("quota_us", "0"), ("period_us", "0"),
    ("period_us", "-100000"), ("period_us", None), ("quota_us", None)])
def test_garbled_or_missing_quota_files_mean_no_quota(tmp_path, field, value):
    fake_host(tmp_path, **{field: value})
    assert HostStats(root=tmp_path).cpu_quota() is None


def test_garbled_counters_are_none_never_non_finite(tmp_path):
    fake_host(tmp_path, usage_ns="1.5e9", memory="inf", limit="-1")
    stats = HostStats(root=tmp_path)
    assert (stats.cpu_seconds(), stats.memory_bytes(), stats.memory_limit_bytes()) == \
        (None, None, None)
    write(tmp_path / "proc/self/net/dev", "\x00\xff not a table")
    assert stats.net_bytes() == NetCounters(0, 0, ())
    (tmp_path / "proc/self/net/dev").write_bytes(b"\xff\xfe\x00")  # not UTF-8
    assert stats.net_bytes() is None


def test_a_moved_process_is_found_in_its_new_group(tmp_path):
    fake_host(tmp_path, usage_ns="1000000000")
    stats = HostStats(root=tmp_path)
    assert stats.cpu_seconds() == 1.0
    write(tmp_path / "proc/self/cgroup", "11:memory:/other\n3:cpu,cpuacct:/other\n")
    write(tmp_path / "sys/fs/cgroup/cpu,cpuacct/other/cpuacct.usage", "3000000000\n")
    (tmp_path / "sys/fs/cgroup/cpu,cpuacct" / GROUP.lstrip("/") / "cpuacct.usage").unlink()
    assert stats.cpu_seconds() is None      # the old group's file is gone: re-resolve ...
    assert stats.cpu_seconds() == 3.0       # ... and the next read finds the new group


# -- the rate rule ---------------------------------------------------------------------------
def counters(time_s, cpu_s=0.0, quota=0.5, memory=0, limit=100, rx=0, tx=0):
    return HostCounters(time_s, cpu_s, quota, memory, limit, NetCounters(rx, tx, ("eth0",)))


def test_host_utilisation_is_use_over_the_hosts_own_capacity():
    numbers = host_utilisation(counters(10.0), counters(12.0, cpu_s=0.5, memory=25, rx=4000,
                                                        tx=1000), total_memory_bytes=10**9)
    assert numbers == {"cpu_util": pytest.approx(0.5), "host_mem_util": 0.25,
                       "uplink_bytes_per_s": 500.0, "downlink_bytes_per_s": 2000.0}


def test_host_utilisation_clamps_resets_bursts_and_no_elapsed_time():
    burst = host_utilisation(counters(0.0), counters(1.0, cpu_s=5.0, memory=500, tx=10**18),
                             total_memory_bytes=10**9)
    assert (burst["cpu_util"], burst["host_mem_util"]) == (1.0, 1.0)
    assert burst["uplink_bytes_per_s"] == MAX_LINK_BYTES_PER_S
    reset = host_utilisation(counters(0.0, cpu_s=9.0, rx=10**6, tx=10**6), counters(1.0),
                             total_memory_bytes=10**9)
    assert (reset["cpu_util"], reset["uplink_bytes_per_s"], reset["downlink_bytes_per_s"]) == \
        (0.0, 0.0, 0.0)
    same_time = host_utilisation(counters(3.0), counters(3.0, cpu_s=1.0, memory=50),
                                 total_memory_bytes=10**9)
    assert same_time == {"host_mem_util": 0.5}  # memory is a level; rates need time
    no_limit = host_utilisation(counters(0.0), counters(1.0, memory=25, limit=None),
                                total_memory_bytes=100)
    assert no_limit["host_mem_util"] == 0.25     # over the machine's memory
    for value in no_limit.values():
        assert math.isfinite(value)


# -- NodeTelemetry's host view ---------------------------------------------------------------
class Clock:
    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_node_telemetry_reports_the_hosts_numbers_from_two_samples(tmp_path):
    cpu_dir = fake_host(tmp_path, usage_ns="0", memory=str(64 << 20))
    clock = Clock()
    with NodeTelemetry(min_interval_s=0.0, host_stats=HostStats(tmp_path, clock)) as telemetry:
        clock.now += 2.0  # 0.45 core x 2 s = 0.9 core-seconds available
        write(cpu_dir / "cpuacct.usage", "450000000\n")            # 0.45 s used
        write(tmp_path / "proc/self/net/dev", NET_HEADER + net_line("lo", 10**9, 10**9)
              + net_line("spv2n", 2_000_000, 500_000))
        first = telemetry.sample()
        assert first["source"] == SOURCE_CGROUP
        assert first["cpu_util"] == pytest.approx(0.5)
        assert first["host_mem_util"] == pytest.approx(0.25)
        assert first["uplink_bytes_per_s"] == pytest.approx(250_000.0)   # tx: sent
        assert first["downlink_bytes_per_s"] == pytest.approx(1_000_000.0)  # rx: received
        clock.now += 1.0
        write(cpu_dir / "cpuacct.usage", "9450000000\n")           # 9 s in 1 s: clamped
        write(tmp_path / "proc/self/net/dev", NET_HEADER + net_line("spv2n", 0, 0))  # reset
        second = telemetry.sample()
        assert second["cpu_util"] == 1.0
        assert (second["uplink_bytes_per_s"], second["downlink_bytes_per_s"]) == (0.0, 0.0)


def test_node_telemetry_keeps_the_process_view_without_a_quota(tmp_path):
    fake_host(tmp_path, quota_us="-1", memory=str(10**15))
    with NodeTelemetry(min_interval_s=0.0, host_stats=HostStats(tmp_path)) as telemetry:
        sample = telemetry.sample()
    assert sample["source"] == SOURCE_PROCESS
    assert "uplink_bytes_per_s" not in sample and "downlink_bytes_per_s" not in sample
    assert sample["host_mem_util"] < 1.0  # RSS over the machine, not the fake cgroup's 1 PB
    assert sample["rss_mb"] > 0


def test_node_telemetry_falls_back_per_number_when_a_file_is_unreadable(tmp_path):
    cpu_dir = fake_host(tmp_path, usage_ns="0", memory=str(128 << 20))
    (cpu_dir / "cpuacct.usage").unlink()
    with NodeTelemetry(min_interval_s=0.0, host_stats=HostStats(tmp_path)) as telemetry:
        sample = telemetry.sample()
    assert sample["source"] == SOURCE_PROCESS       # CPU from the processes ...
    assert 0.0 <= sample["cpu_util"] <= 1.0
    assert sample["host_mem_util"] == pytest.approx(0.5)  # ... memory still the host's


def test_node_telemetry_refuses_a_bad_interval():
    with pytest.raises(ValueError, match="min_interval_s"):
        NodeTelemetry(min_interval_s=math.nan)


# -- capacities reach the router -------------------------------------------------------------
SPEC_YAML = """isolation: {isolation}
taskmanagers:
  - {{id: tm_a, cpu_cores: 1, cpu_quota: 0.9, uplink_mbps: 8, downlink_mbps: 16}}
  - {{id: tm_b, cpu_cores: 1}}
"""


@pytest.mark.parametrize("isolation,links", [("host", [16.0, 10_000.0]),
                                             ("cpuset", [1000.0, 1000.0])])
def test_router_nodes_carry_the_shaped_downlink_of_emulated_hosts(tmp_path, isolation, links):
    from pyflink_jobs.hook import nodes_from_cluster_spec
    from pyflink_jobs.router import Router, RouterSettings
    from workload.cluster_spec import DEFAULT_LINK_MBPS
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC_YAML.format(isolation=isolation))
    nodes = nodes_from_cluster_spec(str(spec))
    assert [n.link_mbps for n in nodes] == links
    if isolation == "host":
        assert links[1] == DEFAULT_LINK_MBPS  # unshaped fields: the host's default link
        router = Router(RouterSettings(nodes=nodes, policy="least_loaded"))
        router.on_feedback({"node_id": "tm_a", "emitted_at_ms": 1, "cpu_util": 0.2,
                            "downlink_bytes_per_s": 1_000_000.0,  # 8 Mbit/s of 16
                            "uplink_bytes_per_s": 0.0})
        assert router.reported_state("tm_a").downlink_util == pytest.approx(0.5)


def test_the_task_pipeline_gets_the_clusters_spec(tmp_path, monkeypatch):
    from streamplace.config import StreamplaceConfig
    from streamplace.jobs import task_pipeline_args
    config = StreamplaceConfig()
    config.flink.cluster_spec = "hosts"
    args = task_pipeline_args(config)
    assert args[args.index("--cluster-spec") + 1] == "hosts"
    (tmp_path / "mine.yaml").write_text(SPEC_YAML.format(isolation="host"))
    monkeypatch.chdir(tmp_path)
    config.flink.cluster_spec = "mine.yaml"
    args = task_pipeline_args(config)
    assert args[args.index("--cluster-spec") + 1] == str((tmp_path / "mine.yaml").resolve())
    args = task_pipeline_args(config, cluster_spec="default")  # an override still wins
    assert args[args.index("--cluster-spec") + 1] == "default"


def test_feedback_numbers_carry_link_rates_only_where_the_host_measured_them():
    from interference.executor.telemetry import feedback_numbers
    process = {"cpu_util": 0.2, "host_mem_util": 0.1, "gpu_util": 0.0, "gpu_mem_util": 0.0,
               "sampled_at": 5.0, "source": "process"}
    assert feedback_numbers(process) == {"cpu_util": 0.2, "host_mem_util": 0.1,
                                         "gpu_util": 0.0, "gpu_mem_util": 0.0}
    host = {**process, "source": "cgroup", "uplink_bytes_per_s": 10.0,
            "downlink_bytes_per_s": 20.0}
    assert feedback_numbers(host)["uplink_bytes_per_s"] == 10.0
    assert "sampled_at" not in feedback_numbers(host)
