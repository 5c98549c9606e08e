"""NodeTelemetry inside a real emulated host (issue 13, item 2): a process started through
``wrap_command`` burns CPU and sends bytes to the head host while it samples its node; the
numbers it reports are its host's, measured against the host's own capacity: CPU near 1 of the
cgroup quota, uplink bytes/s near the tbf-shaped rate. Needs root, network namespaces, tc and
cgroup v1 (skipped with the reason otherwise); no Kafka or Flink. Own prefix ``spt<random>``
and subnet (10.213.251.0/24), removed afterwards. About 5 s.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
import threading

import pytest

from streamplace.hosts import EmulatedHosts, HostSpec, available

OK, REASON = available()
pytestmark = [pytest.mark.skipif(not OK, reason=f"emulated hosts unavailable: {REASON}"),
              pytest.mark.timeout(60)]

SUBNET = "10.213.251.0/24"
UPLINK_MBPS = 40.0
DOWNLINK_MBPS = 80.0
CPU_QUOTA = 0.5
MEMORY_MB = 512
BURN_SECONDS = 2.0
#: Interface counters count whole frames, so the uplink reads close to the shaped rate; TCP's
#: start and the 10 ms token bucket move it a little either way.
RATE_TOLERANCE = 0.25
#: A busy loop plus a sender saturate the quota; a quota period boundary costs a few percent, and
#: on a loaded 2-core CI machine the host does not always get its whole quota (0.836 measured
#: there). Read against the whole machine instead of the quota, the same burn would report at
#: most CPU_QUOTA / cores (0.25 on 2 cores), so this bound still tells the two apart.
MIN_CPU_UTIL = 0.6

SAMPLER = """
import json, socket, sys, threading, time
from interference.executor.telemetry import NodeTelemetry
telemetry = NodeTelemetry(min_interval_s=0.0)
head, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
telemetry.sample()  # the window starts here
end = time.monotonic() + seconds
def send():
    with socket.create_connection((head, port), timeout=10) as s:
        block = b"x" * 65536
        while time.monotonic() < end:
            s.sendall(block)
sender = threading.Thread(target=send)
sender.start()
while time.monotonic() < end:
    pass
sender.join()
sample = telemetry.sample()
telemetry.close()
print(json.dumps({k: sample[k] for k in ("source", "cpu_util", "host_mem_util",
                                         "uplink_bytes_per_s", "downlink_bytes_per_s")}))
"""


@pytest.fixture
def hosts(tmp_path):
    prefix = f"spt{secrets.token_hex(2)}"
    emulated = EmulatedHosts(prefix=prefix, subnet=SUBNET, state_dir=tmp_path / "state")
    emulated.create([HostSpec(node_id="tm_a", address_index=2, uplink_mbps=UPLINK_MBPS,
                              downlink_mbps=DOWNLINK_MBPS, cpu_quota=CPU_QUOTA,
                              memory_mb=MEMORY_MB)])
    yield emulated
    emulated.destroy()


def drain(server: socket.socket) -> None:
    conn, _ = server.accept()
    with conn:
        while conn.recv(1 << 20):
            pass


def test_node_telemetry_inside_a_host_reports_the_hosts_numbers(hosts):
    with socket.create_server((hosts.head_address, 0)) as server:
        server.settimeout(20)
        receiver = threading.Thread(target=drain, args=(server,), daemon=True)
        receiver.start()
        run = subprocess.run(hosts.wrap_command("tm_a", [
            sys.executable, "-c", SAMPLER, hosts.head_address,
            str(server.getsockname()[1]), str(BURN_SECONDS)]),
            capture_output=True, text=True, timeout=30)
        receiver.join(timeout=10)
    assert run.returncode == 0, run.stderr
    sample = json.loads(run.stdout.strip().splitlines()[-1])
    shaped = UPLINK_MBPS * 1e6 / 8
    assert sample["source"] == "cgroup", sample
    assert sample["cpu_util"] >= MIN_CPU_UTIL, sample
    assert abs(sample["uplink_bytes_per_s"] - shaped) <= RATE_TOLERANCE * shaped, sample
    assert sample["downlink_bytes_per_s"] < 0.2 * DOWNLINK_MBPS * 1e6 / 8, sample  # ACKs only
    assert 0.0 < sample["host_mem_util"] < 1.0, sample
