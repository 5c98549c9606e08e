"""The launcher's two modes without starting a process: spec validation (``isolation``, link,
quota and memory fields), which mode is chosen and why, the addresses clients get, the
TaskManager commands and Flink options in each mode, the broker's listener, and when the
emulated hosts are created, reused and removed (a scripted stand-in for EmulatedHosts)."""

from __future__ import annotations

import math

import pytest

from streamplace.config import ConfigError, load_config
from streamplace.flink_cluster import ClusterStatus, FlinkCluster, TaskManagerStatus
from streamplace.flink_hosts import (HostLauncher, IsolationPlan, host_specs, plan_isolation,
                                     with_host_addresses)
from streamplace.hosts import MODE_CPU_SET, MODE_EMULATED, HostSpec
from streamplace.kafka_broker import KafkaBroker
from streamplace.processes import LaunchError
from workload.cluster_spec import (DEFAULT_LINK_MBPS, MEMORY_LIMIT_MARGIN_MB, LocalClusterSpec,
                                   SpecError, load_cluster_spec)

HEAD = "10.213.0.1"


def _spec(isolation="host", **tm_fields):
    tm = {"id": "tm_a", "cpu_cores": 1, **tm_fields}
    return LocalClusterSpec.model_validate({"isolation": isolation, "taskmanagers": [tm]})


def _never_probed():
    raise AssertionError("a cpuset spec must not probe the machine")


# -- spec ------------------------------------------------------------------------------------
def test_isolation_defaults_to_cpuset_and_rejects_other_words():
    assert load_cluster_spec("default").isolation == "cpuset"
    with pytest.raises(ValueError, match="isolation"):
        _spec(isolation="vm")


@pytest.mark.parametrize("field,value", [
    ("uplink_mbps", 0), ("uplink_mbps", -5), ("downlink_mbps", math.inf),
    ("downlink_mbps", math.nan), ("uplink_mbps", 1e9), ("cpu_quota", 0.001),
    ("cpu_quota", 5000), ("memory_limit_mb", 100)])
def test_bad_host_fields_are_refused(field, value):
    with pytest.raises(ValueError, match=field if field != "memory_limit_mb" else "process"):
        _spec(**{field: value})


def test_a_yaml_infinity_is_refused_with_the_file_name(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("isolation: host\ntaskmanagers:\n  - {id: tm_a, cpu_cores: 1, "
                    "uplink_mbps: .inf}\n")
    with pytest.raises(SpecError, match="bad.yaml"):
        load_cluster_spec(path)


def test_host_limits_fill_in_documented_defaults():
    tm = _spec(cpu_cores=0.5, uplink_mbps=8).taskmanagers[0]
    limits = tm.host_limits()
    assert limits == {"uplink_mbps": 8.0, "downlink_mbps": DEFAULT_LINK_MBPS, "cpu_quota": 0.5,
                      "memory_mb": tm.process_memory_mb + MEMORY_LIMIT_MARGIN_MB}
    huge = _spec(cpu_cores=9000).taskmanagers[0]  # cpu_cores alone has no upper bound
    with pytest.raises(SpecError, match="set cpu_quota"):
        huge.host_limits()


def test_shipped_hosts_spec_fits_two_cores_and_hides_which_host_suits_what():
    spec = load_cluster_spec("hosts")
    assert spec.isolation == "host"
    limits = [tm.host_limits() for tm in spec.taskmanagers]
    assert sum(lim["cpu_quota"] for lim in limits) <= 1.8
    assert sum(lim["memory_mb"] for lim in limits) <= 20 * 1024
    # the prior every policy could read is the same for all: only measuring tells them apart
    assert {(tm.cpu_cores, tm.work_multiplier) for tm in spec.taskmanagers} == {(1, 1.0)}
    assert all(not tm.labels for tm in spec.taskmanagers)
    fastest_cpu = max(spec.taskmanagers, key=lambda tm: tm.cpu_quota)
    fastest_link = max(spec.taskmanagers, key=lambda tm: tm.uplink_mbps)
    assert fastest_cpu.id != fastest_link.id  # a speed factor that ranks hosts differently
    # and one host slow for one application only (hidden from every policy, like the quota)
    slow_for_one = [tm for tm in spec.taskmanagers if tm.task_type_multipliers]
    assert len(slow_for_one) == 1 and len(slow_for_one[0].task_type_multipliers) == 1
    assert [s.address_index for s in host_specs(spec)] == [2, 3, 4]


def test_config_refuses_a_public_or_tiny_hosts_subnet():
    for subnet in ("8.8.8.0/24", "10.213.0.0/30", "not-a-net"):
        with pytest.raises(ConfigError, match="hosts_subnet"):
            load_config(overrides=[f"flink.hosts_subnet={subnet}"])


# -- mode and addresses ----------------------------------------------------------------------
def test_cpuset_spec_keeps_cpuset_mode_without_probing():
    plan = plan_isolation(load_config(), load_cluster_spec("default"), probe=_never_probed)
    assert plan.mode == MODE_CPU_SET and plan.head_address is None
    assert "isolation: cpuset" in plan.describe()


def test_host_spec_falls_back_with_the_reason_when_unavailable():
    plan = plan_isolation(load_config(), _spec(), probe=lambda: (False, "need root (uid 1000)"))
    assert plan.mode == MODE_CPU_SET
    assert "falls back" in plan.reason and "uid 1000" in plan.describe()


def test_host_mode_moves_loopback_addresses_to_the_head_address_only():
    cfg = load_config(overrides=["flink.hosts_subnet=10.77.0.0/24"])
    moved = with_host_addresses(cfg, _spec(), probe=lambda: (True, "root"))
    assert (moved.kafka.host, moved.flink.host) == ("10.77.0.1", "10.77.0.1")
    assert moved.kafka.bootstrap_servers == "10.77.0.1:9092"
    assert cfg.kafka.host == "127.0.0.1"  # a copy: the caller's config is untouched
    explicit = load_config(overrides=["kafka.host=192.168.5.5"])
    kept = with_host_addresses(explicit, _spec(), probe=lambda: (True, "root"))
    assert kept.kafka.host == "192.168.5.5" and kept.flink.host == HEAD
    assert with_host_addresses(cfg, _spec("cpuset"), probe=_never_probed) is cfg
    assert with_host_addresses(cfg, _spec(), probe=lambda: (False, "no")) is cfg


# -- commands and Flink options --------------------------------------------------------------
class FakeHosts:
    """HostLauncher's ``wrap``, scripted (no namespace needed)."""

    def wrap(self, node_id, argv):
        return ["enter", node_id, "--", *argv]


def _cluster(tmp_path, spec, plan):
    cfg = load_config(overrides=[f"home={tmp_path}"])
    return FlinkCluster(cfg, spec=spec, plan=plan)


def test_cpuset_mode_commands_and_options_are_unchanged(tmp_path):
    spec = load_cluster_spec("default")
    cluster = _cluster(tmp_path, spec, None)
    tm_a = spec.node("tm_a")
    cmd = cluster.files.taskmanager_command(tm_a, "/usr/bin/taskset")
    assert cmd[:3] == ["/usr/bin/taskset", "-c", "0"]
    assert cmd[3].endswith("bin/taskmanager.sh")
    assert cmd[4:] == ["start-foreground", "-D", "external-resources=tm_a;streamplace_router"]
    conf = cluster.files.taskmanager_config(tm_a, cluster.files.common_config())
    assert conf["taskmanager.host"] == conf["taskmanager.bind-host"] == "127.0.0.1"
    assert conf["jobmanager.rpc.address"] == conf["rest.address"] == "127.0.0.1"
    assert cluster.rest_url == "http://127.0.0.1:8081"
    assert cluster.isolation.mode == MODE_CPU_SET


def test_host_mode_enters_each_host_and_binds_its_own_address(tmp_path):
    spec = load_cluster_spec("hosts")
    plan = IsolationPlan(MODE_EMULATED, "root", HEAD, "10.213.0.0/24")
    cluster = _cluster(tmp_path, spec, plan)
    cluster.hosts = FakeHosts()
    common = cluster.files.common_config()
    assert common["jobmanager.rpc.address"] == common["jobmanager.bind-host"] == HEAD
    assert common["rest.address"] == common["rest.bind-address"] == HEAD
    assert cluster.rest_url == f"http://{HEAD}:8081"
    for index, tm in enumerate(spec.taskmanagers):
        cmd = cluster.files.taskmanager_command(tm, "/usr/bin/taskset")
        assert cmd[:3] == ["enter", tm.id, "--"] and cmd[3].endswith("taskmanager.sh")
        conf = cluster.files.taskmanager_config(tm, common)
        address = f"10.213.0.{2 + index}"
        assert conf["taskmanager.host"] == conf["taskmanager.bind-host"] == address
        assert conf["jobmanager.rpc.address"] == HEAD
    text = str(ClusterStatus(True, cluster.rest_url, [TaskManagerStatus(
        "tm_a", True, True, 7, address="10.213.0.2")], [], plan.describe()))
    assert "isolation: emulated-hosts, head address 10.213.0.1" in text
    assert "tm_a: registered (pid 7) at 10.213.0.2" in text


def test_broker_listens_and_advertises_on_the_configured_address(tmp_path):
    cfg = with_host_addresses(load_config(overrides=[f"home={tmp_path}"]), _spec(),
                              probe=lambda: (True, "root"))
    broker = KafkaBroker(cfg)
    broker.dir.mkdir(parents=True)
    text = broker._render_properties().read_text()
    assert f"listeners=PLAINTEXT://{HEAD}:9092,CONTROLLER://{HEAD}:9093" in text
    assert f"advertised.listeners=PLAINTEXT://{HEAD}:9092" in text
    assert "127.0.0.1" not in text


# -- creating and removing hosts -------------------------------------------------------------
class ScriptedEmulatedHosts:
    """Records create/destroy; ``handles`` reflect what was created."""

    class _State:
        def __init__(self, outer):
            self.outer = outer

        def resources(self):
            return [1] if self.outer.created else []

    class _Names:
        bridge = "spbr0"

    class _System:
        def __init__(self, outer):
            self.outer = outer

        def run(self, argv):
            import subprocess
            ok = self.outer.kernel_has_them
            out = "\n".join(f"sp-{s.node_id}" for s in self.outer.created) if ok else ""
            return subprocess.CompletedProcess(argv, 0 if ok else 1, out, "")

    def __init__(self, created=()):
        self.created = list(created)
        self.kernel_has_them = True
        self.log: list[str] = []
        self.state, self.names, self.system = self._State(self), self._Names(), self._System(self)

    def handles(self):
        from streamplace.hosts import HostHandle
        return {s.node_id: HostHandle(s, f"sp-{s.node_id}", "x", "h", "n", {})
                for s in self.created}

    def create(self, specs):
        self.log.append("create")
        self.created = list(specs)

    def destroy(self):
        self.log.append("destroy")
        self.created = []


def _launcher(tmp_path, spec, hosts):
    return HostLauncher(load_config(overrides=[f"home={tmp_path}"]), spec, hosts=hosts)


def test_ensure_creates_reuses_and_replaces_stale_hosts(tmp_path):
    spec = load_cluster_spec("hosts")
    fresh = ScriptedEmulatedHosts()
    assert _launcher(tmp_path, spec, fresh).ensure(busy=False) == "created"
    assert fresh.log == ["create"] and [s.node_id for s in fresh.created] == ["tm_a", "tm_b",
                                                                               "tm_c"]
    same = ScriptedEmulatedHosts(host_specs(spec))
    assert _launcher(tmp_path, spec, same).ensure(busy=False) == "reused" and same.log == []
    gone = ScriptedEmulatedHosts(host_specs(spec))
    gone.kernel_has_them = False  # a reboot: the state file outlived the namespaces
    assert _launcher(tmp_path, spec, gone).ensure(busy=False) == "created"
    assert gone.log == ["destroy", "create"]
    other = [HostSpec(node_id="tm_a", address_index=2, uplink_mbps=1, downlink_mbps=1,
                      cpu_quota=1, memory_mb=64)]
    stale = ScriptedEmulatedHosts(other)
    assert _launcher(tmp_path, spec, stale).ensure(busy=False) == "created"
    assert stale.log == ["destroy", "create"]
    running = ScriptedEmulatedHosts(other)
    with pytest.raises(LaunchError, match="cluster stop"):
        _launcher(tmp_path, spec, running).ensure(busy=True)
    assert running.log == []


def test_release_keeps_hosts_in_use_and_removes_them_otherwise(tmp_path):
    spec = load_cluster_spec("hosts")
    hosts = ScriptedEmulatedHosts(host_specs(spec))
    launcher = _launcher(tmp_path, spec, hosts)
    assert "kept" in launcher.release(still_needed=lambda: True) and hosts.log == []
    assert "removed" in launcher.release(still_needed=lambda: False)
    assert hosts.log == ["destroy"]
    assert launcher.release(still_needed=lambda: False) is None  # nothing listed: no-op


def test_release_without_a_state_file_touches_nothing(tmp_path):
    launcher = HostLauncher(load_config(overrides=[f"home={tmp_path}"]))
    assert launcher.release(still_needed=_never_probed) is None
    assert launcher._hosts is None  # no EmulatedHosts (no root needed) was even built

