"""Emulated hosts (streamplace/hosts) without root: every command goes to a scripted runner and
every cgroup file to a folder under tmp_path, so these tests pin the exact commands, the
record-before-create state file, crash-safe and tolerant removal, the availability checks and
the telemetry arithmetic. The real kernel objects are exercised by
tests/integration/test_emulated_hosts.py.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from streamplace.hosts import (CgroupFiles, EmulatedHosts, HostNames, HostSample, HostsError,
                               HostSpec, HostSystem, HostTelemetry, available, rates,
                               select_mode, tbf_arguments)

OWN_MEMORY_GROUP = "/sandbox/job1"  # the launcher's own memory cgroup: hosts nest under it
PROC_CGROUP = f"4:memory:{OWN_MEMORY_GROUP}\n2:cpuacct:/\n1:cpu:/\n"

SPECS = [HostSpec(node_id="tm_a", address_index=2, uplink_mbps=40, downlink_mbps=120,
                  cpu_quota=0.5, memory_mb=256),
         HostSpec(node_id="tm_b", address_index=3, uplink_mbps=120, downlink_mbps=40,
                  cpu_quota=1.5, memory_mb=512)]

ADDRS = ("1: lo    inet 127.0.0.1/8 scope host lo\n"
         "4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\n")
LINKS = ("1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536\n"
         "4: eth0@if5: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500\n"
         "9: spv9h@if8: <BROADCAST> mtu 1500\n")  # an interface of our prefix we did NOT make


def done(argv, rc=0, out="", err=""):
    return subprocess.CompletedProcess(list(argv), rc, out, err)


class ScriptedRunner:
    """Records every command; answers listings like a quiet machine, everything else rc 0.

    ``fail`` maps a command prefix (tuple) to (rc, stderr). ``on_call`` sees each command
    before it is answered (to inspect the state file at that moment).
    """

    def __init__(self, fail=None, addrs=ADDRS, links=LINKS, netns="", pids=None, on_call=None):
        self.calls: list[list[str]] = []
        self.fail = dict(fail or {})
        self.listing = {("ip", "-o", "-4", "addr", "show"): addrs,
                        ("ip", "-o", "link", "show"): links, ("ip", "netns", "list"): netns}
        self.pids = pids or {}  # namespace -> stdout of `ip netns pids`
        self.on_call = on_call

    def __call__(self, argv):
        argv = list(argv)
        self.calls.append(argv)
        if self.on_call:
            self.on_call(argv)
        for prefix, (rc, err) in self.fail.items():
            if tuple(argv[:len(prefix)]) == prefix:
                return done(argv, rc, "", err)
        if tuple(argv) in self.listing:
            return done(argv, 0, self.listing[tuple(argv)])
        if argv[:3] == ["ip", "netns", "pids"]:
            return done(argv, 0, self.pids.get(argv[3], ""))
        return done(argv, 0)

    def changes(self):
        """The commands that change something (listings and pid queries left out)."""
        return [c for c in self.calls
                if tuple(c) not in self.listing and c[:3] != ["ip", "netns", "pids"]]


class FakeCgroups(CgroupFiles):
    """cgroup v1 as plain folders; rmdir drops control files first, as cgroupfs would."""

    def __init__(self, root: Path, on_mkdir=None):
        super().__init__(root=root, proc_cgroup=PROC_CGROUP)
        self.on_mkdir = on_mkdir
        for controller, control in (("cpu", "cpu.cfs_quota_us"), ("cpuacct", "cpuacct.usage"),
                                    ("memory", "memory.limit_in_bytes")):
            (root / controller).mkdir(parents=True, exist_ok=True)
            (root / controller / control).write_text("0\n")
        (root / "memory" / OWN_MEMORY_GROUP.strip("/")).mkdir(parents=True, exist_ok=True)

    def mkdir(self, path):
        if self.on_mkdir:
            self.on_mkdir(path)
        super().mkdir(path)

    def rmdir(self, path):
        for child in Path(path).iterdir():
            if child.is_file():
                child.unlink()
        super().rmdir(path)


def make_hosts(tmp_path, runner=None, prefix="sp", **system_kw):
    cg = system_kw.pop("cgroups", None) or FakeCgroups(tmp_path / "cgroup")
    system = HostSystem(run=runner or ScriptedRunner(), cgroups=cg,
                        net_root=tmp_path / "net", **system_kw)
    return EmulatedHosts(prefix=prefix, subnet="10.213.0.0/24", state_dir=tmp_path / "state",
                         system=system, destroy_grace_s=1.0)


def state_of(tmp_path):
    return json.loads((tmp_path / "state" / "hosts.json").read_text())


def tbf(rate_bits, burst):
    return ["tbf", "rate", f"{rate_bits}bit", "burst", f"{burst}b", "latency", "20ms"]


def node_script(namespace, veth, address, inside, head):
    """The commands that make one host: its namespace, a veth pair into the bridge, the address
    and default route inside, and the two shaped ends (``inside``: the node's uplink, shaped in
    its namespace; ``head``: its downlink, shaped on the bridge side).

    Example: ``node_script("sp-tm_a", 2, "10.213.0.2", tbf(...), tbf(...))[0]`` is
    ``["ip", "netns", "add", "sp-tm_a"]``.
    """
    outside, within = f"spv{veth}h", f"spv{veth}n"
    return [
        ["ip", "netns", "add", namespace],
        ["ip", "link", "add", outside, "type", "veth", "peer", "name", within],
        ["ip", "link", "set", within, "netns", namespace],
        ["ip", "link", "set", outside, "master", "spbr0"],
        ["ip", "link", "set", outside, "up"],
        ["ip", "-n", namespace, "link", "set", "lo", "up"],
        ["ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", within],
        ["ip", "-n", namespace, "link", "set", within, "up"],
        ["ip", "-n", namespace, "route", "add", "default", "via", "10.213.0.1"],
        ["tc", "-n", namespace, "qdisc", "replace", "dev", within, "root", *inside],
        ["tc", "qdisc", "replace", "dev", outside, "root", *head],
    ]


BRIDGE_SCRIPT = [
    ["ip", "link", "add", "spbr0", "type", "bridge"],
    ["ip", "addr", "add", "10.213.0.1/24", "dev", "spbr0"],
    ["ip", "link", "set", "spbr0", "up"],
]

#: one row per node of SPECS: (its spec, namespace, veth number, address, uplink tbf, downlink
#: tbf). tm_a's 40 Mbit/s up / 120 down and tm_b's reverse pin which end gets which rate.
NODE_SCRIPTS = [
    pytest.param(SPECS[0], "sp-tm_a", 2, "10.213.0.2", tbf(40_000_000, 50_000),
                 tbf(120_000_000, 150_000), id="tm_a"),
    pytest.param(SPECS[1], "sp-tm_b", 3, "10.213.0.3", tbf(120_000_000, 150_000),
                 tbf(40_000_000, 50_000), id="tm_b"),
]

EXPECTED_CREATE = BRIDGE_SCRIPT + [command for row in NODE_SCRIPTS
                                   for command in node_script(*row.values[1:])]

# destroy: newest first; a veth's deletion takes its peer, a namespace's the end inside it
EXPECTED_DESTROY = [
    ["ip", "link", "del", "spv3h"], ["ip", "netns", "del", "sp-tm_b"],
    ["ip", "link", "del", "spv2h"], ["ip", "netns", "del", "sp-tm_a"],
    ["ip", "link", "del", "spbr0"],
]


# -- creating ------------------------------------------------------------------------------
def test_create_runs_the_exact_command_sequence_for_two_nodes(tmp_path):
    runner = ScriptedRunner()
    hosts = make_hosts(tmp_path, runner)
    handles = hosts.create(SPECS)

    assert runner.changes() == EXPECTED_CREATE
    # the listings that guard against touching what is not ours come first
    assert runner.calls[:3] == [["ip", "-o", "-4", "addr", "show"], ["ip", "-o", "link", "show"],
                                ["ip", "netns", "list"]]
    assert hosts.head_address == "10.213.0.1"
    assert {n: h.address for n, h in handles.items()} == {"tm_a": "10.213.0.2",
                                                          "tm_b": "10.213.0.3"}
    assert hosts.address("tm_b") == "10.213.0.3"


@pytest.mark.parametrize("spec, namespace, veth, address, uplink, downlink", NODE_SCRIPTS)
def test_create_runs_the_same_script_for_a_node_made_alone(tmp_path, spec, namespace, veth,
                                                          address, uplink, downlink):
    # a node's commands depend on its own spec only, not on the nodes made with it
    runner = ScriptedRunner()
    handles = make_hosts(tmp_path, runner).create([spec])
    assert runner.changes() == BRIDGE_SCRIPT + node_script(namespace, veth, address, uplink,
                                                           downlink)
    assert handles[spec.node_id].address == address


def test_create_writes_quota_and_memory_limit_into_cgroups_under_the_own_group(tmp_path):
    hosts = make_hosts(tmp_path)
    handles = hosts.create(SPECS)
    root = tmp_path / "cgroup"
    b = handles["tm_b"].cgroups
    assert b == {"cpu": str(root / "cpu/streamplace/sp-tm_b"),
                 "cpuacct": str(root / "cpuacct/streamplace/sp-tm_b"),
                 "memory": str(root / "memory/sandbox/job1/streamplace/sp-tm_b")}
    assert Path(b["cpu"], "cpu.cfs_period_us").read_text() == "100000"
    assert Path(b["cpu"], "cpu.cfs_quota_us").read_text() == "150000"
    assert Path(b["memory"], "memory.limit_in_bytes").read_text() == str(512 << 20)


def test_names_over_15_characters_are_refused_before_anything_is_made(tmp_path):
    with pytest.raises(HostsError, match="at most 15"):
        HostNames("abcdefghijklm")  # 'abcdefghijklmbr0' is 16 characters
    runner = ScriptedRunner()
    hosts = make_hosts(tmp_path, runner, prefix="abcdefghij")  # bridge name: exactly 15
    wide = HostSpec(node_id="tm_a", address_index=254, uplink_mbps=1, downlink_mbps=1,
                    cpu_quota=1, memory_mb=64)  # 'abcdefghijv254h' is 15: allowed
    hosts.create([wide])
    hosts.destroy()
    hosts = make_hosts(tmp_path, ScriptedRunner(), prefix="abcdefghijk")  # 11 + 'v254h' = 16
    with pytest.raises(HostsError, match="'abcdefghijkv254h' is 16 characters"):
        hosts.create([wide])
    assert hosts.system.run.calls == []


def test_each_resource_is_in_the_state_file_before_it_is_created(tmp_path):
    seen = []

    def listed(kind, name):
        path = tmp_path / "state" / "hosts.json"
        entries = json.loads(path.read_text())["resources"] if path.exists() else []
        return {"kind": kind, "name": name, "created": False} in entries

    def on_call(argv):
        if argv[:3] == ["ip", "link", "add"]:
            kind = "bridge" if argv[-1] == "bridge" else "veth"
            seen.append((argv[3], listed(kind, argv[3])))
        elif argv[:3] == ["ip", "netns", "add"]:
            seen.append((argv[3], listed("netns", argv[3])))

    def on_mkdir(path):
        kind = "cgroup_group" if path.endswith("/streamplace") else "cgroup"
        seen.append((path, listed(kind, path)))

    runner = ScriptedRunner(on_call=on_call)
    hosts = make_hosts(tmp_path, runner, cgroups=FakeCgroups(tmp_path / "cgroup", on_mkdir))
    hosts.create(SPECS)
    # bridge + 2 x (netns, veth) + 3 groups + 2 x 3 host cgroups
    assert len(seen) == 1 + 4 + 3 + 6
    assert all(ok for _, ok in seen), [name for name, ok in seen if not ok]
    assert all(e["created"] for e in state_of(tmp_path)["resources"])


def test_create_refuses_names_or_a_subnet_already_in_use(tmp_path):
    runner = ScriptedRunner(netns="sp-tm_b (id: 3)\n")
    with pytest.raises(HostsError, match=r"\['sp-tm_b'\] already exist"):
        make_hosts(tmp_path, runner).create(SPECS)
    assert runner.changes() == []  # nothing made, nothing recorded
    assert not (tmp_path / "state" / "hosts.json").exists()
    runner = ScriptedRunner(addrs=ADDRS + "7: wg0    inet 10.213.0.77/16 scope global wg0\n")
    with pytest.raises(HostsError, match="overlaps 10.213.0.77/16 on wg0"):
        make_hosts(tmp_path, runner).create(SPECS)
    assert runner.changes() == []


def test_create_refuses_while_the_state_file_lists_hosts(tmp_path):
    hosts = make_hosts(tmp_path)
    hosts.create(SPECS[:1])
    with pytest.raises(HostsError, match="call destroy"):
        hosts.create(SPECS[1:])


def test_a_failed_create_removes_what_it_made_and_not_what_it_failed_to_make(tmp_path):
    runner = ScriptedRunner(fail={("ip", "link", "add", "spv3h"): (2, "RTNETLINK answers: "
                                                                    "Operation not permitted")})
    hosts = make_hosts(tmp_path, runner)
    with pytest.raises(HostsError, match="Operation not permitted"):
        hosts.create(SPECS)
    removed = [c for c in runner.changes() if c[:3] in (["ip", "link", "del"],
                                                      ["ip", "netns", "del"])]
    # tm_b's namespace was made (removed), its veth never was (not deleted: maybe not ours)
    assert removed == [["ip", "netns", "del", "sp-tm_b"], ["ip", "link", "del", "spv2h"],
                       ["ip", "netns", "del", "sp-tm_a"], ["ip", "link", "del", "spbr0"]]
    assert not (tmp_path / "state" / "hosts.json").exists()
    assert not (tmp_path / "cgroup" / "cpu" / "streamplace").exists()


# -- removing ------------------------------------------------------------------------------
def test_destroy_from_a_fresh_object_removes_exactly_what_the_state_lists(tmp_path):
    make_hosts(tmp_path).create(SPECS)  # the "crashed" launcher: its object is gone
    runner = ScriptedRunner()
    make_hosts(tmp_path, runner).destroy()

    assert runner.changes() == EXPECTED_DESTROY  # spv9h (in `ip link`, not ours) untouched
    assert not (tmp_path / "state" / "hosts.json").exists()
    leftovers = [p for p in (tmp_path / "cgroup").rglob("*") if "streamplace" in str(p)]
    assert leftovers == []
    runner2 = ScriptedRunner()
    make_hosts(tmp_path, runner2).destroy()  # idempotent: nothing listed, nothing done
    assert runner2.changes() == []


def test_destroy_tolerates_what_is_already_gone_and_keeps_what_it_could_not_remove(tmp_path):
    make_hosts(tmp_path).create(SPECS)
    gone = {("ip", "link", "del", "spv3h"): (1, 'Cannot find device "spv3h"'),
            ("ip", "netns", "del", "sp-tm_a"): (1, 'Cannot remove namespace file '
                                                '"/run/netns/sp-tm_a": No such file or directory'),
            ("ip", "link", "del", "spbr0"): (2, "RTNETLINK answers: Device or resource busy")}
    shutil.rmtree(tmp_path / "cgroup" / "cpu" / "streamplace" / "sp-tm_a")  # half-made host
    hosts = make_hosts(tmp_path, ScriptedRunner(fail=gone))
    with pytest.raises(HostsError, match="spbr0.*Device or resource busy"):
        hosts.destroy()
    # only the bridge is left to remove, and the next destroy removes just that
    assert [e["name"] for e in state_of(tmp_path)["resources"]] == ["spbr0"]
    runner = ScriptedRunner()
    make_hosts(tmp_path, runner).destroy()
    assert runner.changes() == [["ip", "link", "del", "spbr0"]]
    assert not (tmp_path / "state" / "hosts.json").exists()


def test_a_shared_cgroup_group_is_left_to_the_other_prefix(tmp_path):
    cg = FakeCgroups(tmp_path / "cgroup")
    make_hosts(tmp_path, cgroups=cg).create(SPECS[:1])
    other = tmp_path / "cgroup" / "cpu" / "streamplace" / "dev-tm_a"  # another prefix's host
    other.mkdir()
    make_hosts(tmp_path, cgroups=cg).destroy()
    assert other.is_dir() and not (other.parent / "sp-tm_a").exists()


def test_destroy_stops_processes_left_in_a_host_then_kills_those_that_stay(tmp_path):
    make_hosts(tmp_path).create(SPECS[:1])
    procs = tmp_path / "cgroup" / "cpu" / "streamplace" / "sp-tm_a" / "cgroup.procs"
    procs.write_text("4242\n4343\n")
    signals, now = [], [0.0]

    def kill(pid, sig):
        signals.append((pid, sig))
        if sig == signal.SIGTERM and pid == 4242:  # 4242 obeys, 4343 ignores SIGTERM
            procs.write_text("4343\n")
        if sig == signal.SIGKILL:
            procs.write_text("")
            runner.pids.clear()

    def sleep(s):
        now[0] += s

    runner = ScriptedRunner(pids={"sp-tm_a": f"4343\n{os.getpid()}\n"})  # also via the netns
    hosts = make_hosts(tmp_path, runner, cgroups=FakeCgroups(tmp_path / "cgroup"), kill=kill,
                       sleep=sleep, clock=lambda: now[0])
    hosts.destroy()
    assert set(signals[:2]) == {(4242, signal.SIGTERM), (4343, signal.SIGTERM)}
    assert signals[2:] == [(4343, signal.SIGKILL)]  # only the one that stayed, after the grace
    assert 1.0 <= now[0] < 1.5  # waited the grace period, not longer
    assert os.getpid() not in [p for p, _ in signals]


def test_a_state_file_naming_what_is_not_ours_is_refused_untouched(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    for resource in ({"kind": "veth", "name": "eth0", "created": True},
                     {"kind": "netns", "name": "other-ns", "created": True},
                     {"kind": "cgroup", "name": "/sys/fs/cgroup/cpu/user.slice", "created": True},
                     {"kind": "cgroup", "name": str(tmp_path / "cgroup/cpu/streamplace/../x"),
                      "created": True}):
        (state / "hosts.json").write_text(json.dumps(
            {"version": 1, "prefix": "sp", "subnet": "10.213.0.0/24", "hosts": [],
             "resources": [resource]}))
        runner = ScriptedRunner()
        with pytest.raises(HostsError, match="refusing to touch it"):
            make_hosts(tmp_path, runner).destroy()
        assert runner.changes() == []
    (state / "hosts.json").write_text("{not json")
    with pytest.raises(HostsError, match="cannot read the hosts state file"):
        make_hosts(tmp_path).destroy()
    (state / "hosts.json").write_text(json.dumps({"version": 1, "prefix": "spt", "hosts": [],
                                                  "resources": []}))
    with pytest.raises(HostsError, match="belongs to prefix 'spt'"):
        make_hosts(tmp_path).destroy()


# -- entering ------------------------------------------------------------------------------
def test_wrap_command_joins_the_cgroups_then_the_namespace_keeping_the_pid(tmp_path):
    hosts = make_hosts(tmp_path)
    hosts.create(SPECS)
    argv = hosts.wrap_command("tm_a", ["java", "-Xmx1g", "Main"])
    root = tmp_path / "cgroup"
    assert argv[:3] == ["sh", "-c", argv[2]] and 'exec "$@"' in argv[2]
    assert argv[3:] == ["streamplace-host",
                        f"{root}/cpu/streamplace/sp-tm_a/cgroup.procs",
                        f"{root}/cpuacct/streamplace/sp-tm_a/cgroup.procs",
                        f"{root}/memory/sandbox/job1/streamplace/sp-tm_a/cgroup.procs",
                        "--", "nsenter", "--net=/run/netns/sp-tm_a", "--", "java", "-Xmx1g",
                        "Main"]
    with pytest.raises(HostsError, match="no emulated host for node 'tm_z'"):
        hosts.wrap_command("tm_z", ["true"])


def test_the_enter_script_writes_its_own_pid_and_execs(tmp_path):
    """The shell part of wrap_command, run for real against plain files."""
    a, b = tmp_path / "a.procs", tmp_path / "b.procs"
    from streamplace.hosts import ENTER_SCRIPT
    out = subprocess.run(["sh", "-c", ENTER_SCRIPT, "x", str(a), str(b), "--", "sh", "-c",
                          "echo $$"], capture_output=True, text=True, check=True).stdout
    assert a.read_text() == b.read_text() == out  # the pid that joined is the pid that runs
    bad = subprocess.run(["sh", "-c", ENTER_SCRIPT, "x", str(tmp_path / "no/such"), "--",
                          "true"], capture_output=True, text=True)
    assert bad.returncode == 125  # a cgroup it cannot join: it does not run outside limits


# -- availability --------------------------------------------------------------------------
def ok_system(tmp_path, **kw):
    return HostSystem(run=ScriptedRunner(), cgroups=FakeCgroups(tmp_path / "cgroup"), **kw)


def test_available_when_everything_is_there(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    ok, reason = available(ok_system(tmp_path))
    assert ok and "cgroup v1" in reason
    assert select_mode(True, ok_system(tmp_path))[0] == "emulated-hosts"


def test_not_available_without_root(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    ok, reason = available(ok_system(tmp_path))
    assert not ok and reason == "emulated hosts need root (running as uid 1000)"
    mode, why = select_mode(True, ok_system(tmp_path))
    assert mode == "cpu-set" and "need root" in why


def test_not_available_without_tc_namespaces_or_cgroup_v1(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "tc" else f"/bin/{name}")
    ok, reason = available(ok_system(tmp_path))
    assert not ok and "`tc` was not found" in reason
    monkeypatch.setattr(shutil, "which", lambda name: f"/bin/{name}")
    no_ns = HostSystem(run=ScriptedRunner(fail={("unshare",): (1, "unshare: Operation not "
                                                                  "permitted")}),
                       cgroups=FakeCgroups(tmp_path / "cgroup"))
    ok, reason = available(no_ns)
    assert not ok and "may not create network namespaces" in reason and "not permitted" in reason
    v2_only = HostSystem(run=ScriptedRunner(), cgroups=FakeCgroups(tmp_path / "cgroup"))
    (tmp_path / "cgroup" / "memory" / "memory.limit_in_bytes").unlink()  # no v1 memory
    ok, reason = available(v2_only)
    assert not ok and "`memory` is not mounted" in reason


# -- specs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("field, value", [("cpu_quota", 0), ("cpu_quota", math.nan),
                                          ("cpu_quota", 0.001), ("uplink_mbps", math.inf),
                                          ("downlink_mbps", -1), ("memory_mb", 8),
                                          ("address_index", 1), ("node_id", "../etc"),
                                          ("node_id", "tm a")])
def test_host_spec_refuses_unusable_values(field, value):
    fields = dict(node_id="tm_a", address_index=2, uplink_mbps=40, downlink_mbps=40,
                  cpu_quota=0.5, memory_mb=256)
    fields[field] = value
    with pytest.raises(ValueError):
        HostSpec(**fields)


def test_specs_must_have_distinct_nodes_and_addresses_that_fit(tmp_path):
    hosts = make_hosts(tmp_path)
    with pytest.raises(HostsError, match="own address_index"):
        hosts.create([SPECS[0], SPECS[1].model_copy(update={"address_index": 2})])
    with pytest.raises(HostsError, match="does not fit subnet"):
        hosts.create([SPECS[0].model_copy(update={"address_index": 255})])
    with pytest.raises(HostsError, match="private range"):
        EmulatedHosts(prefix="sp", subnet="8.8.8.0/24", state_dir=tmp_path)


def test_tbf_burst_is_ten_milliseconds_of_rate_but_at_least_ten_frames():
    assert tbf_arguments(120) == tbf(120_000_000, 150_000)
    assert tbf_arguments(1) == tbf(1_000_000, 15_140)  # 1 Mbit/s: 1,250 B < 10 frames
    with pytest.raises(HostsError):
        tbf_arguments(math.nan)


# -- telemetry -----------------------------------------------------------------------------
def sample(time_s, cpu_s=0.0, mem=0, tx=0, rx=0, node="tm_a", limit=256 << 20):
    return HostSample(node, time_s=time_s, cpu_seconds=cpu_s, memory_bytes=mem,
                      memory_limit_bytes=limit, tx_bytes=tx, rx_bytes=rx, cpu_quota=0.5,
                      uplink_mbps=40, downlink_mbps=120)


def test_rates_are_use_over_capacity():
    r = rates(sample(100.0), sample(102.0, cpu_s=0.25, mem=64 << 20, tx=2_500_000,
                                    rx=15_000_000))
    assert r.elapsed_s == 2.0
    assert r.cpu_util == pytest.approx(0.25)  # 0.25 s of 2 s at 0.5 core
    assert r.mem_util == pytest.approx(0.25)
    assert r.uplink_util == pytest.approx(0.25)  # 20 Mbit over 2 s of 40 Mbit/s
    assert r.downlink_util == pytest.approx(0.5)  # 120 Mbit over 2 s of 120 Mbit/s


def test_rates_are_clamped_to_the_unit_interval():
    over = rates(sample(0.0), sample(1.0, cpu_s=0.9, mem=300 << 20, tx=10**8, rx=10**9))
    assert (over.cpu_util, over.mem_util, over.uplink_util, over.downlink_util) == (1, 1, 1, 1)
    reset = rates(sample(0.0, cpu_s=50, tx=10**6, rx=10**6), sample(1.0))  # host recreated
    assert (reset.cpu_util, reset.uplink_util, reset.downlink_util) == (0, 0, 0)


def test_rates_with_no_elapsed_time_are_zero_and_wrong_order_is_refused():
    r = rates(sample(5.0), sample(5.0, cpu_s=1.0, mem=128 << 20, tx=10**6))
    assert (r.elapsed_s, r.cpu_util, r.uplink_util, r.downlink_util) == (0, 0, 0, 0)
    assert r.mem_util == pytest.approx(0.5)  # memory is a level, not a rate
    with pytest.raises(ValueError, match="out of order"):
        rates(sample(6.0), sample(5.0))
    with pytest.raises(ValueError, match="different hosts"):
        rates(sample(5.0), sample(6.0, node="tm_b"))


def test_telemetry_reads_cgroups_and_the_head_end_of_the_link(tmp_path):
    hosts = make_hosts(tmp_path, clock=lambda: 7.5)
    handle = hosts.create(SPECS)["tm_a"]
    Path(handle.cgroups["cpuacct"], "cpuacct.usage").write_text("1500000000\n")
    Path(handle.cgroups["memory"], "memory.usage_in_bytes").write_text(f"{64 << 20}\n")
    stats = tmp_path / "net" / "spv2h" / "statistics"
    stats.mkdir(parents=True)
    (stats / "rx_bytes").write_text("1000\n")  # received by the head end = sent by the node
    (stats / "tx_bytes").write_text("2000\n")
    s = HostTelemetry(hosts).sample("tm_a")
    assert (s.time_s, s.cpu_seconds, s.memory_bytes, s.memory_limit_bytes) == \
        (7.5, 1.5, 64 << 20, 256 << 20)
    assert (s.tx_bytes, s.rx_bytes) == (1000, 2000)
    (stats / "rx_bytes").write_text("nan\n")
    with pytest.raises(HostsError, match="not a byte"):
        HostTelemetry(hosts).sample("tm_a")
    (stats / "rx_bytes").unlink()
    with pytest.raises(HostsError, match="cannot read"):
        HostTelemetry(hosts).sample("tm_a")


def test_cgroup_files_find_the_own_group_of_each_controller():
    files = CgroupFiles(proc_cgroup="12:cpu,cpuacct:/user.slice\n4:memory:/\n0::/init.scope\n")
    assert files.own_group("cpu") == files.own_group("cpuacct") == "/user.slice"
    assert files.own_group("memory") == "/"


def test_co_mounted_cpu_and_cpuacct_share_one_cgroup(tmp_path):
    root = tmp_path / "cgroup"
    (root / "cpu,cpuacct").mkdir(parents=True)
    (root / "cpu").symlink_to(root / "cpu,cpuacct")  # as systemd mounts cgroup v1
    (root / "cpuacct").symlink_to(root / "cpu,cpuacct")
    hosts = make_hosts(tmp_path, cgroups=FakeCgroups(root))
    cgroups = hosts.create(SPECS[:1])["tm_a"].cgroups
    assert cgroups["cpu"] == cgroups["cpuacct"] == str(root / "cpu,cpuacct/streamplace/sp-tm_a")
    assert len(hosts.wrap_command("tm_a", ["true"])) == 4 + 2 + 1 + 3 + 1  # two procs files
    hosts.destroy()
    assert list((root / "cpu,cpuacct").iterdir()) != [] and \
        not (root / "cpu,cpuacct" / "streamplace").exists()


def test_state_writers_in_parallel_lose_nothing_and_leave_no_temporary_file(tmp_path):
    """Two tear-downs of one prefix at once (a `cluster stop` while a benchmark still stops)
    once shared one temporary name, and a reader saw an empty state file; each change now
    holds a lock from load to save and writes a temporary file of its own."""
    import threading
    from streamplace.hosts.state import HostsState
    path = tmp_path / "state" / "hosts.json"
    names = [f"sp-tm_{i}" for i in range(40)]

    def writer(chunk):
        state = HostsState(path, HostNames("sp"), cgroup_root=tmp_path, subnet="10.213.0.0/24")
        for name in chunk:
            state.record("netns", name)
            state.mark_created("netns", name)
            state.load()    # never a half-written (empty) file

    threads = [threading.Thread(target=writer, args=(names[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    state = HostsState(path, HostNames("sp"), cgroup_root=tmp_path, subnet="10.213.0.0/24")
    assert sorted(e["name"] for e in state.resources() if e["created"]) == sorted(names)
    assert [p.name for p in path.parent.iterdir() if p.suffix == ".tmp"] == []
    state.clear()
    assert list(path.parent.iterdir()) == []


def test_telemetry_reads_the_hosts_throttled_seconds(tmp_path):
    hosts = make_hosts(tmp_path)
    handle = hosts.create(SPECS)["tm_a"]
    stat = Path(handle.cgroups["cpu"], "cpu.stat")
    stat.write_text("nr_periods 40\nnr_throttled 3\nthrottled_time 2500000000\n")
    assert HostTelemetry(hosts).throttled_s("tm_a") == 2.5
    stat.write_text("nr_periods 40\nthrottled_time -5\n")
    with pytest.raises(HostsError, match="no throttled_time"):
        HostTelemetry(hosts).throttled_s("tm_a")
    stat.unlink()
    with pytest.raises(HostsError, match="cannot read"):
        HostTelemetry(hosts).throttled_s("tm_a")
