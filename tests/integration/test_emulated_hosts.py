"""Emulated hosts on the real kernel: namespaces, bridge, tbf-shaped links, cgroup CPU quota and
memory limit, telemetry, and removal that leaves nothing behind (also from a fresh object after
a "crash"). Needs root, network namespaces, tc and cgroup v1; skipped with the reason otherwise.
Needs no Kafka or Flink.

Every run uses its own prefix (``spt<random>``) and subnet 10.213.250.0/24, so a developer's
cluster (prefix ``sp``, 10.213.0.0/24) is never touched. About 15 s.
"""

from __future__ import annotations

import glob
import secrets
import socket
import subprocess
import sys
import time

import pytest

from streamplace.hosts import EmulatedHosts, HostSpec, HostTelemetry, available, rates

OK, REASON = available()
pytestmark = [pytest.mark.skipif(not OK, reason=f"emulated hosts unavailable: {REASON}"),
              pytest.mark.timeout(120)]

SUBNET = "10.213.250.0/24"
UPLINKS = {"tm_a": 40.0, "tm_b": 120.0}
DOWNLINKS = {"tm_a": 80.0, "tm_b": 200.0}
CPU_QUOTA = 0.5
MEMORY_MB = 256
SEND_SECONDS = 2.0
#: Shaped rate vs measured TCP goodput: headers take ~4.5 % of each 1514-byte frame, TCP start
#: and the 10 ms bucket add a little either way; the issue asks for +-25 %.
RATE_TOLERANCE = 0.25

SENDER = """
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
block, end = b"x" * 65536, time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    s.sendall(block)
s.close()
"""
LISTENER = """
import socket, sys
srv = socket.create_server((sys.argv[1], 0))
print(srv.getsockname()[1], flush=True)
srv.settimeout(10)
conn, peer = srv.accept()
print(conn.recv(16).decode(), peer[0], flush=True)
"""
RECEIVER = """
import socket, sys, time
srv = socket.create_server((sys.argv[1], 0))
print(srv.getsockname()[1], flush=True)
srv.settimeout(10)
conn, _ = srv.accept()
total, first, last = 0, None, None
while chunk := conn.recv(1 << 20):
    last = time.monotonic()
    first = first or last
    total += len(chunk)
print(total * 8 / (last - first) / 1e6, flush=True)
"""
CONNECT = """
import socket, sys
socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).sendall(b"hello")
"""
BUSY = """
import time
end = time.monotonic() + float(__import__("sys").argv[1])
while time.monotonic() < end:
    pass
"""


def specs():
    return [HostSpec(node_id=node, address_index=2 + i, uplink_mbps=up,
                     downlink_mbps=DOWNLINKS[node], cpu_quota=CPU_QUOTA, memory_mb=MEMORY_MB)
            for i, (node, up) in enumerate(UPLINKS.items())]


def leftovers(prefix: str) -> list[str]:
    """Everything of ``prefix`` still on this machine: namespaces, links, cgroups."""
    found = []
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [line.split()[0] for line in spaces.splitlines() if line.startswith(f"{prefix}-")]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found += [line.split(": ")[1].split("@")[0] for line in links.splitlines()
              if line.split(": ")[1].startswith(prefix)]
    found += glob.glob(f"/sys/fs/cgroup/*/**/streamplace/{prefix}-*", recursive=True)
    return found


@pytest.fixture
def prefix():
    name = f"spt{secrets.token_hex(2)}"  # e.g. spt3fa2: unique per run, 'spt3fa2v3h' fits
    yield name
    assert leftovers(name) == [], "a test left hosts behind"


@pytest.fixture
def hosts(tmp_path, prefix):
    emulated = EmulatedHosts(prefix=prefix, subnet=SUBNET, state_dir=tmp_path / "state")
    emulated.create(specs())
    yield emulated
    emulated.destroy()  # also when the test failed half-way


def run_in(hosts, node, script, *args, **kw):
    return subprocess.run(hosts.wrap_command(node, [sys.executable, "-c", script, *args]),
                          capture_output=True, text=True, timeout=30, **kw)


def shaped_throughput_mbps(hosts, node) -> float:
    """Goodput of one TCP stream node -> head, measured at the head."""
    with socket.create_server((hosts.head_address, 0)) as server:
        server.settimeout(10)
        port = server.getsockname()[1]
        sender = subprocess.Popen(hosts.wrap_command(
            node, [sys.executable, "-c", SENDER, hosts.head_address, str(port),
                   str(SEND_SECONDS)]))
        conn, _ = server.accept()
        total, first, last = 0, None, None
        with conn:
            while chunk := conn.recv(1 << 20):
                now = time.monotonic()
                first = first or now
                total += len(chunk)
                last = now
        assert sender.wait(timeout=30) == 0
    return total * 8 / (last - first) / 1e6


def test_hosts_reach_the_head_and_each_other(hosts):
    for node in UPLINKS:  # node -> head
        with socket.create_server((hosts.head_address, 0)) as server:
            server.settimeout(10)
            probe = subprocess.Popen(hosts.wrap_command(node, [
                sys.executable, "-c", CONNECT, hosts.head_address,
                str(server.getsockname()[1])]))
            conn, peer = server.accept()
            assert peer[0] == hosts.address(node)  # it really comes from the node's address
            conn.close()
            assert probe.wait(timeout=10) == 0
    # tm_a -> tm_b, across both links and the bridge
    listener = subprocess.Popen(hosts.wrap_command("tm_b", [
        sys.executable, "-c", LISTENER, hosts.address("tm_b")]), stdout=subprocess.PIPE,
        text=True)
    port = listener.stdout.readline().strip()
    assert run_in(hosts, "tm_a", CONNECT, hosts.address("tm_b"), port).returncode == 0
    assert listener.stdout.readline().split() == ["hello", hosts.address("tm_a")]
    assert listener.wait(timeout=10) == 0


def test_uplinks_are_shaped_to_the_spec(hosts):
    telemetry = HostTelemetry(hosts)
    measured = {}
    for node, uplink in UPLINKS.items():
        before = telemetry.sample(node)
        measured[node] = shaped_throughput_mbps(hosts, node)
        use = rates(before, telemetry.sample(node))
        assert abs(measured[node] - uplink) <= RATE_TOLERANCE * uplink, measured
        assert use.uplink_util > 0.6  # the telemetry sees the link busy
        assert use.downlink_util < 0.2  # only acknowledgements came back
    assert measured["tm_b"] > 2 * measured["tm_a"], measured


def test_downlink_is_shaped_to_the_spec(hosts):
    """head -> tm_a: the head end of tm_a's link holds it to its downlink."""
    receiver = subprocess.Popen(hosts.wrap_command("tm_a", [
        sys.executable, "-c", RECEIVER, hosts.address("tm_a")]), stdout=subprocess.PIPE,
        text=True)
    port = int(receiver.stdout.readline())
    with socket.create_connection((hosts.address("tm_a"), port), timeout=10) as conn:
        block, end = b"x" * 65536, time.monotonic() + SEND_SECONDS
        while time.monotonic() < end:
            conn.sendall(block)
    measured = float(receiver.stdout.readline())
    assert receiver.wait(timeout=10) == 0
    assert abs(measured - DOWNLINKS["tm_a"]) <= RATE_TOLERANCE * DOWNLINKS["tm_a"], measured


def test_cpu_quota_and_memory_limit_hold(hosts):
    telemetry = HostTelemetry(hosts)
    before = telemetry.sample("tm_a")
    assert run_in(hosts, "tm_a", BUSY, "2.0").returncode == 0
    after = telemetry.sample("tm_a")
    cores = (after.cpu_seconds - before.cpu_seconds) / (after.time_s - before.time_s)
    assert 0.1 < cores <= CPU_QUOTA + 0.1, cores  # a busy loop, held to half a core
    assert rates(before, after).cpu_util > 0.2
    assert after.memory_limit_bytes == MEMORY_MB << 20
    # allocating 400 MiB in a 256 MiB host: the kernel's OOM killer ends it (SIGKILL)
    hog = run_in(hosts, "tm_a", "x = [bytearray(16 << 20) for _ in range(25)]; print('lived')")
    assert hog.returncode == -9 and "lived" not in hog.stdout


def test_destroy_from_a_new_object_after_a_crash_leaves_nothing(tmp_path, prefix):
    launcher = EmulatedHosts(prefix=prefix, subnet=SUBNET, state_dir=tmp_path / "state")
    launcher.create(specs())
    # a TaskManager the crashed launcher left running inside its host
    orphan = subprocess.Popen(launcher.wrap_command("tm_b", ["sleep", "300"]))
    time.sleep(0.2)
    assert leftovers(prefix) != []
    del launcher  # the crash: only the state file survives

    EmulatedHosts(prefix=prefix, subnet=SUBNET, state_dir=tmp_path / "state").destroy()
    assert orphan.wait(timeout=10) == -15  # stopped by SIGTERM, not left running
    assert leftovers(prefix) == []
    assert not (tmp_path / "state" / "hosts.json").exists()
    EmulatedHosts(prefix=prefix, subnet=SUBNET, state_dir=tmp_path / "state").destroy()
