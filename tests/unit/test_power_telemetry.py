"""Node power and energy per task in the executor's feedback (issue 17, build item 3).

A fake ``pynvml`` module (monkeypatched into ``sys.modules``) stands in for the GPUs: its power
readings are watts, garbage (NaN, negative, huge, a string, raising NVMLError) that must be
ignored and counted; the CPU estimate, the energy split and the feedback record are checked on
hand-computed numbers.
"""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path

import pytest

import workload
from interference.executor import power
from interference.executor.devices import cpu_count
from interference.executor.host_stats import HostStats
from interference.executor.telemetry import SOURCE_CGROUP, NodeTelemetry, feedback_numbers
from pyflink_jobs.feedback import FeedbackPublisher, FinishedTask
from pyflink_jobs.routed import DecisionContext, RoutedRecord
from simulator.energy import PowerSpec
from workload.codec import Codec, decode, encode

#: idle == busy: the CPU estimate does not depend on the (real, moving) process utilisation
FLAT_CORE = PowerSpec("cpu_core", 5.0, 5.0, (2400.0,))
CORE = PowerSpec("cpu_core", 4.0, 14.0, (2400.0,))
T4_BUSY_W = 70.0  # calibration.yaml power.gpus.t4.busy_w


class NVMLError(Exception):
    pass


def fake_nvml(monkeypatch, readings: list, names=None) -> types.ModuleType:
    """A pynvml with one GPU per entry of ``readings``: milliwatts, or an exception to raise."""
    fake = types.ModuleType("pynvml")
    fake.NVMLError = NVMLError
    fake.nvmlInit = lambda: None
    fake.nvmlShutdown = lambda: None
    fake.nvmlDeviceGetCount = lambda: len(readings)
    fake.nvmlDeviceGetHandleByIndex = lambda i: i
    fake.nvmlDeviceGetUUID = lambda h: f"GPU-{h:04d}"
    fake.nvmlDeviceGetName = lambda h: (names or ["Tesla T4"] * len(readings))[h]
    fake.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=50, memory=0)
    fake.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=1 << 30, total=4 << 30)

    def power_usage(h):
        value = readings[h]
        if isinstance(value, BaseException):
            raise value
        return value
    fake.nvmlDeviceGetPowerUsage = power_usage
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return fake


def telemetry(tmp_path, cpu_power=FLAT_CORE) -> NodeTelemetry:
    # an empty host tree: no CPU quota, the process view (cores = this process's CPUs)
    return NodeTelemetry(min_interval_s=0.0, host_stats=HostStats(tmp_path), cpu_power=cpu_power)


# -- GPU readings --------------------------------------------------------------------------

GPU_SCENARIOS = [
    # (readings in mW or exception, published W per GPU, refused readings)
    ([71_500], [71.5], 0),
    ([0, 250_000], [0.0, 250.0], 0),
    ([5_000_000], [5000.0], 0),                      # the bound itself is believed
    ([float("nan")], [None], 1),
    ([float("inf")], [None], 1),
    ([-1_000], [None], 1),
    ([6_000_000], [None], 1),                        # 6 kW: a unit error, not a GPU
    ([NVMLError("Not Supported")], [None], 1),       # no power sensor (MIG, some vGPUs)
    (["75000"], [None], 1),
    ([None], [None], 1),
    ([True], [None], 1),
    ([1 << 80], [None], 1),                          # an int beyond any sensor
    ([100_000, NVMLError("GPU is lost"), 50_000], [100.0, None, 50.0], 1),
]


@pytest.mark.parametrize("readings,watts,refused", GPU_SCENARIOS,
                         ids=[repr(s[0])[:40] for s in GPU_SCENARIOS])
def test_gpu_power_readings_are_bounded_and_garbage_is_counted(monkeypatch, tmp_path, readings,
                                                               watts, refused):
    fake_nvml(monkeypatch, readings)
    with telemetry(tmp_path) as t:
        sample = t.sample()
        t.sample()  # counted per reading
    assert [g["power_w"] for g in sample["gpus"]] == watts
    assert t.power_ignored == 2 * refused
    assert (t.power_error is None) == (refused == 0)
    cpu_w = cpu_count() * FLAT_CORE.busy_w
    assert sample["cpu_power_w"] == pytest.approx(cpu_w)
    measured = [w for w in watts if w is not None]
    assert sample["power_w"] == pytest.approx(sum(measured) + cpu_w)
    assert sample["power_source"] == ("nvml+cpu-estimate" if measured else "cpu-estimate")
    # energy per task: a refused GPU is charged its calibration busy watts (Tesla T4: 70 W)
    assert sample["unit_power_w"] == {"cpu": FLAT_CORE.busy_w, **{
        f"gpu:{i}": T4_BUSY_W if w is None else w for i, w in enumerate(watts)}}
    assert all(math.isfinite(v) for v in sample["unit_power_w"].values())


def test_visible_gpus_are_the_units_in_cuda_order(monkeypatch, tmp_path):
    """gpu:<i> is the i-th visible device, as the executor names its units."""
    fake_nvml(monkeypatch, [10_000, 20_000, 30_000])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    with telemetry(tmp_path) as t:
        sample = t.sample()
    assert sample["unit_power_w"] == {"cpu": 5.0, "gpu:0": 30.0, "gpu:1": 10.0}
    assert sample["power_w"] == pytest.approx(40.0 + cpu_count() * 5.0)


def test_an_unknown_gpu_model_falls_back_to_the_executors_estimate_key(monkeypatch, tmp_path):
    fake_nvml(monkeypatch, [NVMLError("x"), NVMLError("y")], names=["NVIDIA H200", "Tesla P4"])
    with telemetry(tmp_path) as t:
        units = t.sample()["unit_power_w"]
    # an H200 is estimated as the calibration's fastest model (a10: 150 W), as the executor does
    assert (units["gpu:0"], units["gpu:1"]) == (150.0, 75.0)


def test_without_nvml_the_cpu_estimate_is_stated(monkeypatch, tmp_path):
    fake = fake_nvml(monkeypatch, [])

    def no_library():
        raise NVMLError("NVML Shared Library Not Found")
    fake.nvmlInit = no_library
    with telemetry(tmp_path) as t:
        sample = t.sample()
    assert sample["gpus"] == [] and t.nvml_error.startswith("NVML unavailable")
    assert sample["power_source"] == "cpu-estimate"
    assert sample["power_w"] == pytest.approx(cpu_count() * 5.0)
    numbers = feedback_numbers(sample)
    assert {k: numbers[k] for k in ("power_w", "power_source")} == {
        "power_w": sample["power_w"], "power_source": "cpu-estimate"}
    with telemetry(tmp_path, cpu_power=None) as t:  # no calibration: nothing to state
        sample = t.sample()
    assert (sample["power_w"], sample["power_source"], sample["unit_power_w"]) == (-1.0, "", {})


def test_the_shipped_calibration_gives_the_cpu_watts(monkeypatch, tmp_path):
    fake_nvml(monkeypatch, [])
    with NodeTelemetry(min_interval_s=0.0, host_stats=HostStats(tmp_path)) as t:
        sample = t.sample()
    assert sample["unit_power_w"] == {"cpu": 14.17}  # power.cpu_core.busy_w
    low, high = cpu_count() * 4.25, cpu_count() * 14.17
    assert low - 1e-9 <= sample["power_w"] <= high + 1e-9


# -- CPU estimate ------------------------------------------------------------------------

CPU_SCENARIOS = [
    # (util, cores, W): cores x (4 + 10 x util)
    (0.0, 1, 4.0),
    (1.0, 1, 14.0),
    (0.5, 2, 18.0),
    (0.25, 0.45, 0.45 * 6.5),    # a cgroup quota of 0.45 cores
    (1.7, 1, 14.0),              # clamped
    (-0.5, 1, 4.0),
    (float("nan"), 4, 16.0),     # no measurement: idle, not busy
    (0.5, 0, 0.0),
    (0.5, float("inf"), 0.0),
    (0.5, -2, 0.0),
]


@pytest.mark.parametrize("util,cores,watts", CPU_SCENARIOS)
def test_cpu_power_estimate(util, cores, watts):
    assert power.cpu_power_estimate_w(util, cores, CORE) == pytest.approx(watts)


def test_a_host_with_a_cpu_quota_estimates_its_quota_of_cores(tmp_path):
    group = "/sp/h1"
    files = {"proc/self/cgroup": f"3:cpu,cpuacct:{group}\n0::/\n",
             "proc/self/mountinfo": "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup "
                                    "rw,cpu,cpuacct\n",
             f"sys/fs/cgroup/cpu,cpuacct{group}/cpu.cfs_quota_us": "50000\n",
             f"sys/fs/cgroup/cpu,cpuacct{group}/cpu.cfs_period_us": "100000\n",
             f"sys/fs/cgroup/cpu,cpuacct{group}/cpuacct.usage": "0\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    clock = types.SimpleNamespace(now=100.0)
    stats = HostStats(tmp_path, lambda: clock.now)
    with NodeTelemetry(min_interval_s=0.0, host_stats=stats, cpu_power=CORE) as t:
        clock.now += 2.0  # 0.5 core x 2 s; 0.25 s used: util 0.25
        (tmp_path / f"sys/fs/cgroup/cpu,cpuacct{group}/cpuacct.usage").write_text("250000000\n")
        sample = t.sample()
    assert sample["source"] == SOURCE_CGROUP and sample["cpu_util"] == pytest.approx(0.25)
    assert sample["cpu_power_w"] == pytest.approx(0.5 * (4.0 + 10.0 * 0.25))


# -- node power ----------------------------------------------------------------------------

@pytest.mark.parametrize("gpus,cpu_w,expected", [
    ([200.0, 100.0], 30.0, (330.0, "nvml+cpu-estimate")),
    ([None, 100.0], 30.0, (130.0, "nvml+cpu-estimate")),
    ([None], 30.0, (30.0, "cpu-estimate")),
    ([], 30.0, (30.0, "cpu-estimate")),
    ([150.0], None, (150.0, "nvml")),
    ([], None, (-1.0, "")),
    ([power.MAX_GPU_WATTS] * 65, 0.0, (-1.0, "")),  # beyond any node: not published
])
def test_node_power(gpus, cpu_w, expected):
    assert power.node_power(gpus, cpu_w) == expected


# -- energy per task -----------------------------------------------------------------------

UNITS = {"cpu": 10.0, "gpu:0": 200.0, "gpu:1": 100.0}
ENERGY_SCENARIOS = [
    # (stages per task, energy per task in J, computed by hand)
    ("one cpu stage", {"a": [("cpu:0", 0, 1500)]}, {"a": 15.0}),
    ("cpu then gpu", {"a": [("cpu:3", 0, 1000), ("gpu:1", 1000, 1250)]}, {"a": 10.0 + 25.0}),
    ("two gpus", {"a": [("gpu:0", 0, 500), ("gpu:1", 0, 500)]}, {"a": 100.0 + 50.0}),
    # 0-500 a alone (100 J), 500-1000 shared (50 J each), 1000-1500 b alone (100 J)
    ("overlap on one gpu", {"a": [("gpu:0", 0, 1000)], "b": [("gpu:0", 500, 1500)]},
     {"a": 150.0, "b": 150.0}),
    # three records of one batched call: the call's 300 ms x 200 W split three ways
    ("one batch", {i: [("gpu:0", 100, 400)] for i in range(3)}, {i: 20.0 for i in range(3)}),
    ("different units do not share", {"a": [("cpu:0", 0, 1000)], "b": [("cpu:1", 0, 1000)]},
     {"a": 10.0, "b": 10.0}),
    ("back to back", {"a": [("gpu:0", 0, 500)], "b": [("gpu:0", 500, 1000)]},
     {"a": 100.0, "b": 100.0}),
    ("empty stage", {"a": [("gpu:0", 700, 700), ("cpu:0", 0, 100)]}, {"a": 1.0}),
    ("no stages", {"a": []}, {"a": -1.0}),
    ("unit of unknown power", {"a": [("gpu:7", 0, 100)], "b": [("cpu:0", 0, 100)]},
     {"a": -1.0, "b": 1.0}),
    ("end before start", {"a": [("cpu:0", 100, 50)]}, {"a": -1.0}),
    ("not finite", {"a": [("cpu:0", 0, float("inf"))]}, {"a": -1.0}),
    ("longer than a day", {"a": [("cpu:0", 0, 2 * power.MAX_STAGE_MS)]}, {"a": -1.0}),
]


@pytest.mark.parametrize("stages,energies", [s[1:] for s in ENERGY_SCENARIOS],
                         ids=[s[0] for s in ENERGY_SCENARIOS])
def test_energy_per_task(stages, energies):
    got = power.task_energies_j(stages, UNITS)
    assert got == pytest.approx(energies)


def test_energies_of_one_report_never_exceed_what_the_units_drew():
    import random
    rng = random.Random(17)
    stages = {}
    for task in range(200):
        start = rng.uniform(0, 10_000)
        stages[task] = [(f"gpu:{rng.randrange(2)}", start, start + rng.uniform(0, 800))]
    energies = power.task_energies_j(stages, UNITS)
    for unit in ("gpu:0", "gpu:1"):
        spans = sorted((s, e) for rows in stages.values() for u, s, e in rows if u == unit)
        busy, reach = 0.0, -math.inf  # the union of the unit's busy intervals
        for s, e in spans:
            busy += max(0.0, e - max(s, reach))
            reach = max(reach, e)
        charged = sum(energies[t] for t, rows in stages.items() if rows[0][0] == unit)
        assert charged == pytest.approx(UNITS[unit] * busy / 1000.0)


@pytest.mark.parametrize("value,expected", [(5.0, 5.0), (0.0, 0.0), (-0.1, -1.0),
                                            (float("nan"), -1.0), (power.MAX_TASK_JOULES * 2,
                                                                   -1.0), ("5", -1.0)])
def test_task_energy_bounds(value, expected):
    assert power.bounded_energy(value) == expected


# -- the feedback record -------------------------------------------------------------------

class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def routed(task_id: str, at_ms: int) -> RoutedRecord:
    event = {"task_id": task_id, "app_id": "video_synopsis", "input_size": 64}
    return RoutedRecord(task_id, "video_synopsis", 64, "tm_a", at_ms, DecisionContext(), event)


def finished(task_id: str, stages) -> FinishedTask:
    end = max(e for _, _, e in stages) if stages else 100_000
    return FinishedTask(task_id, "video_synopsis", 64, 1.0, 40.0, 40.0, end, tuple(stages))


def test_the_feedback_record_carries_node_power_and_energy_per_task():
    snaps = [{"cpu_util": 0.5, "power_w": 180.0, "power_source": "nvml+cpu-estimate",
              "unit_power_w": {"cpu": 10.0, "gpu:0": 100.0}},
             {"cpu_util": 0.5, "power_w": 280.0, "power_source": "nvml+cpu-estimate",
              "unit_power_w": {"cpu": 10.0, "gpu:0": 300.0}}]
    clock = Clock(100.0)
    publisher = FeedbackPublisher("tm_a", lambda: snaps[0], clock=clock)
    first = publisher.build_record()  # the reading at the start of the next interval
    assert first["completed"] == first["completed_energy_j"] == []
    assert (first["power_w"], first["power_source"]) == (180.0, "nvml+cpu-estimate")
    publisher.snapshot = lambda: snaps[1]
    publisher.task_finished(finished("t1", [("cpu:0", 99_000, 99_500), ("gpu:0", 99_500,
                                                                         100_000)]),
                            routed("t1", 98_900), bytes_in=1, bytes_out=1)
    publisher.task_finished(finished("t2", []), routed("t2", 99_000), bytes_in=1, bytes_out=1)
    publisher.task_finished(finished("t3", [("gpu:0", 99_500, 100_000)]), None, 1, 1)
    clock.now = 100.5
    record = publisher.build_record()
    # GPU: (100 + 300) / 2 = 200 W over the interval; t1: 0.5 s x 10 W + 0.5 s x 200 W
    assert [t["task_id"] for t in record["completed"]] == ["t1", "t2"]  # t3: not routed
    assert record["completed_energy_j"] == pytest.approx([105.0, -1.0])  # same order
    assert all("energy_j" not in t for t in record["completed"])  # not in TaskTiming
    assert (record["power_w"], record["power_source"]) == (280.0, "nvml+cpu-estimate")
    assert decode("NodeFeedback", encode("NodeFeedback", record)) == record


@pytest.mark.parametrize("snap,expected", [
    ({}, (-1.0, "")),
    ({"power_w": float("nan"), "power_source": "cpu-estimate"}, (-1.0, "")),
    ({"power_w": -3.0, "power_source": "cpu-estimate"}, (-1.0, "")),
    ({"power_w": 1e9, "power_source": "nvml+cpu-estimate"}, (-1.0, "")),
    ({"power_w": "200", "power_source": "cpu-estimate"}, (-1.0, "")),
    ({"power_w": 200.0, "power_source": "a guess"}, (-1.0, "")),
    ({"power_w": 200.0}, (-1.0, "")),
    ({"power_w": 200, "power_source": "cpu-estimate"}, (200.0, "cpu-estimate")),
])
def test_a_broken_snapshots_power_is_not_published(snap, expected):
    publisher = FeedbackPublisher("tm_a", lambda: snap, clock=Clock(1.0))
    record = publisher.build_record()
    assert (record["power_w"], record["power_source"]) == expected
    assert decode("NodeFeedback", encode("NodeFeedback", record))["power_w"] == expected[0]


@pytest.mark.parametrize("unit_power", [None, "200 W", {"gpu:0": float("nan")},
                                        {"gpu:0": -5.0}, {"gpu:0": 1e7}, {7: 100.0},
                                        {"gpu:0": True}])
def test_garbage_unit_power_gives_no_energy(unit_power):
    publisher = FeedbackPublisher("tm_a", lambda: {"unit_power_w": unit_power},
                                  clock=Clock(1.0))
    publisher.task_finished(finished("t1", [("gpu:0", 0, 500)]), routed("t1", 0), 1, 1)
    assert publisher.build_record()["completed_energy_j"] == [-1.0]


def test_the_built_in_executors_outcome_gives_its_stage_times():
    from interference.executor import StageRecord
    outcome = types.SimpleNamespace(queue_ms=1.0, service_ms=30.0, finished_at_ms=130, stages=[
        StageRecord("decode", "cpu:0", 100, 110, 1), StageRecord("model", "gpu:0", 110, 130, 1)])
    task = FinishedTask.from_task_outcome({"task_id": "t", "app_id": "a", "input_size": 1},
                                          outcome)
    assert task.stages == (("cpu:0", 100, 110), ("gpu:0", 110, 130)) and task.work_ms == 30.0
    assert power.task_energies_j({"t": task.stages}, UNITS) == {"t": pytest.approx(0.1 + 4.0)}


def _v2() -> dict:
    """The NodeFeedback schema before power and energy (what routers and services not yet
    upgraded read with)."""
    return json.loads((Path(workload.__file__).parent / "schemas" / "history" /
                       "node_feedback.v2.avsc").read_text())


def _published(tasks: int) -> dict:
    """A record of the publisher with ``tasks`` routed tasks (every other one without stage
    times: energy -1) on one GPU at 200 W."""
    snap = {"power_w": 230.0, "power_source": "nvml+cpu-estimate",
            "unit_power_w": {"cpu": 10.0, "gpu:0": 200.0}}
    publisher = FeedbackPublisher("tm_a", lambda: snap, clock=Clock(1.0))
    for i in range(tasks):
        stages = [("gpu:0", 100 * i, 100 * i + 50)] if i % 2 == 0 else []
        publisher.task_finished(finished(f"t{i}", stages), routed(f"t{i}", 0), 1, 1)
    return publisher.build_record()


#: NodeFeedback fields appended after the v2 release (power and energy, then tenants, then
#: the learners' refusals, then the service's model version behind each decision)
AFTER_V2 = ("power_w", "power_source", "completed_energy_j", "completed_tenant",
            "completed_deadline_met", "learning_refused", "routed_model_version")


@pytest.mark.parametrize("tasks", [0, 1, 2, 7])
def test_a_reader_before_energy_decodes_the_publishers_records(tasks):
    """New writer -> v2 reader: every v2 field equal, the appended power and energy left
    unread; the current reader gets the energies, one per task in the timings' order."""
    record = _published(tasks)
    assert len(record["completed_energy_j"]) == len(record["completed"]) == tasks
    assert record["completed_energy_j"] == pytest.approx(
        [10.0 if i % 2 == 0 else -1.0 for i in range(tasks)])  # 50 ms x 200 W
    data = encode("NodeFeedback", record)
    old_reader = Codec(reader_schemas={"NodeFeedback": _v2()})
    assert old_reader.decode("NodeFeedback", data) == {
        k: v for k, v in record.items() if k not in AFTER_V2}
    assert decode("NodeFeedback", data) == record


def test_a_writer_before_energy_still_decodes_with_energy_not_reported():
    record = _published(2)
    old = {k: v for k, v in record.items() if k not in AFTER_V2}
    data = Codec(reader_schemas={"NodeFeedback": _v2()}).encode("NodeFeedback", old)
    got = decode("NodeFeedback", data)
    assert (got["power_w"], got["power_source"], got["completed_energy_j"]) == (-1.0, "", [])
    assert got["completed"] == record["completed"]


@pytest.mark.parametrize("energies,completed,counted", [
    ([2.0, 3.0], 2, [2.0, 3.0]),
    ([2.0, -1.0], 2, [2.0]),       # -1: not reported, not averaged
    ([], 2, []),                   # a writer before energy
    ([2.0], 2, []),                # a length mismatch: not trusted
    ([], 0, []),
])
def test_the_gpu_check_reads_energy_per_task_from_the_top_level_array(energies, completed,
                                                                        counted):
    from benchmarks.gpu_check import _energy
    report = {"completed": [{"task_id": f"t{i}"} for i in range(completed)],
              "completed_energy_j": energies, "power_source": "cpu-estimate"}
    got = _energy([report], [(0.5, 0.1, 100.0)], 0)
    assert (got["tasks_with_energy"], got["tasks_reported"]) == (len(counted), completed)
    assert got["energy_j_total"] == sum(counted)
    assert got["energy_j_per_task_mean"] == (sum(counted) / len(counted) if counted else None)


def test_the_learner_accepts_feedback_with_and_without_the_energy_fields(tmp_path):
    from placement.service.learner import OnlineLearner
    from placement.service.store import ModelStore
    from workload.model import ClusterSpec, NodeSpec
    now = 1_764_500_000_000
    timing = {"task_id": "t1", "app_id": "video_synopsis", "input_size": 64, "queue_ms": 5.0,
              "service_ms": 40.0, "finished_at_ms": now - 100, "work_ms": 30.0}
    base = {"node_id": "tm_a", "emitted_at_ms": now, "cpu_util": 0.5, "gpu_util": 0.0,
            "host_mem_util": 0.1, "gpu_mem_util": 0.0, "uplink_bytes_per_s": 0.0,
            "downlink_bytes_per_s": 0.0, "queue_depth": 0, "in_flight": 0, "sequence": 1}
    with_energy = decode("NodeFeedback", encode("NodeFeedback", {
        **base, "power_w": 120.0, "power_source": "nvml+cpu-estimate",
        "completed": [timing], "completed_energy_j": [3.5]}))
    # a v2 writer, read by the current reader: the defaults
    v2_writer = Codec(reader_schemas={"NodeFeedback": _v2()})
    without = decode("NodeFeedback", v2_writer.encode("NodeFeedback", {
        **base, "sequence": 2, "completed": [{**timing, "task_id": "t2"}]}))
    assert without["completed_energy_j"] == []
    # a broken writer: more energies than tasks (the learner does not read them anyway)
    mismatched = {**with_energy, "sequence": 3, "completed": [{**timing, "task_id": "t3"}],
                  "completed_energy_j": [1.0, 2.0]}
    learner = OnlineLearner(ClusterSpec((NodeSpec("tm_a", 1, 16.0),)), ModelStore(tmp_path),
                            {"hidden_sizes": (16, 8), "seed": 0})
    assert learner.take([with_energy, without, mismatched]) == 3


def test_the_modules_examples_hold():
    import doctest

    from interference.executor import telemetry as telemetry_module
    from pyflink_jobs import feedback as feedback_module
    for module in (power, telemetry_module, feedback_module):
        assert doctest.testmod(module).failed == 0, module.__name__
