"""The benchmark's host-load sampler on hand-written counters (no hosts needed)."""

import time
from types import SimpleNamespace

import pytest

from benchmarks.host_load import HostLoad


class _Counters:
    """Host counters that a test advances by hand: (cpu s, throttled s) per node."""

    def __init__(self, quotas):
        self.quotas = quotas
        self.cpu = {n: 0.0 for n in quotas}
        self.throttled = {n: 0.0 for n in quotas}
        self.broken = False

    def sample_all(self):
        if self.broken:
            raise OSError("host removed")
        return {n: SimpleNamespace(cpu_seconds=self.cpu[n], cpu_quota=q)
                for n, q in self.quotas.items()}

    def throttled_s(self, node):
        return self.throttled[node]


def _load(counters, machine=lambda: None):
    now = [0.0]
    load = HostLoad(counters, clock=lambda: now[0], machine=machine)
    return load, now


def test_window_gives_cpu_over_quota_and_throttled_share_per_host():
    counters = _Counters({"tm_a": 0.5, "tm_b": 1.0})
    load, now = _load(counters)
    load.sample()                                   # t = 0
    now[0] = 10.0
    counters.cpu.update(tm_a=5.0, tm_b=2.0)         # tm_a used its whole half core
    counters.throttled["tm_a"] = 4.0
    load.sample()                                   # t = 10
    got = load.window(0.0, 10.0)
    assert got["seconds"] == 10.0
    assert got["tm_a"] == {"cpu_over_quota": 1.0, "throttled_share": 0.4}
    assert got["tm_b"] == {"cpu_over_quota": 0.2, "throttled_share": 0.0}
    assert got["benchmark_process_cores"] >= 0.0


def test_window_uses_the_samples_at_or_before_its_ends():
    counters = _Counters({"tm_a": 1.0})
    load, now = _load(counters)
    for t, cpu in ((0.0, 0.0), (5.0, 1.0), (10.0, 6.0), (15.0, 6.0)):
        now[0] = t
        counters.cpu["tm_a"] = cpu
        load.sample()
    # 5.5 -> the sample at 5, 12 -> the sample at 10: 5 cpu s over 5 s
    assert load.window(5.5, 12.0)["tm_a"]["cpu_over_quota"] == pytest.approx(1.0)


def test_too_few_samples_or_a_failing_host_give_an_empty_window_not_a_crash():
    counters = _Counters({"tm_a": 1.0})
    load, _ = _load(counters)
    assert load.window(0.0, 1.0) == {}
    counters.broken = True
    load.sample()
    assert load.samples == [] and "host removed" in load.error


def test_the_sampler_thread_samples_until_the_block_ends():
    counters = _Counters({"tm_a": 1.0})
    with HostLoad(counters, interval_s=0.01) as load:
        deadline = time.monotonic() + 10.0
        while len(load.times) < 4 and time.monotonic() < deadline:
            time.sleep(0.005)
    count = len(load.times)
    assert count >= 5              # the thread's samples, then one at the end
    assert not load._thread.is_alive()


def test_window_gives_the_whole_machines_busy_share_when_it_can_be_read():
    counters = _Counters({"tm_a": 1.0})
    machine = [(100.0, 400.0)]                      # (busy, total) ticks
    load, now = _load(counters, machine=lambda: machine[0])
    load.sample()
    now[0], machine[0] = 10.0, (1_000.0, 1_400.0)   # 900 busy of 1,000 more
    load.sample()
    assert load.window(0.0, 10.0)["machine_busy_share"] == pytest.approx(0.9)
    unread, now = _load(counters)                   # no /proc/stat: left out, no crash
    unread.sample()
    now[0] = 10.0
    unread.sample()
    assert "machine_busy_share" not in unread.window(0.0, 10.0)


def test_machine_cpu_seconds_reads_the_aggregate_line_and_refuses_others(tmp_path):
    from benchmarks.host_load import machine_cpu_seconds
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 2 8 70 5 1 1 3 0 0\ncpu0 5 1 4 35 2 0 0 1 0 0\n")
    assert machine_cpu_seconds(str(stat)) == (25.0, 100.0)   # busy: 10+2+8+1+1+3
    stat.write_text("intr 1 2 3\n")
    assert machine_cpu_seconds(str(stat)) is None
    stat.write_text("cpu  10 two\n")
    assert machine_cpu_seconds(str(stat)) is None
    assert machine_cpu_seconds(str(tmp_path / "missing")) is None
    got = machine_cpu_seconds()                     # this machine (Linux in CI)
    assert got is None or 0 <= got[0] <= got[1]
