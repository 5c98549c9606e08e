"""Energy axis (simulator.energy): hand-computed joules for tiny event logs, one real tiny run,
and refusals of bad power sections. Power numbers below are chosen for easy arithmetic: a core
idles at 2 W and is busy at 10 W (8 W dynamic), a GPU "g" idles at 20 W and is busy at 100 W
(80 W dynamic), levels 500 / 1000 MHz, exponent 3."""

from __future__ import annotations

import copy
import math

import pytest

from simulator import SimulationConfig, Simulator
from simulator.energy import PowerModel, energy_report
from simulator.engine import EventRecord
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel, load_calibration
from workload.model import (Assignment, ClusterSpec, Decision, GpuSpec, NodeScheduler, NodeSpec,
                            Policy, Task)


def _entry(idle, busy, levels, **extra):
    return {"idle_w": idle, "busy_w": busy, "frequencies_mhz": levels, "source": "assumed",
            "idle_source": "assumed", "citation": "test numbers", **extra}


RAW = {"gpu_models": {"g": {"memory_gb": 16, "speed": 1.0}},
       "power": {"dvfs_exponent": {"value": 3.0, "source": "assumed", "citation": "test"},
                 "cpu_core": _entry(2.0, 10.0, [1000, 2000]),
                 "gpus": {"g": _entry(20.0, 100.0, [500, 1000])}}}
POWER = PowerModel.from_calibration(RAW)

ONE_CORE = NodeSpec("n1", cpu_cores=1, host_memory_gb=8)
CORE_AND_GPU = NodeSpec("n1", cpu_cores=1, host_memory_gb=8, gpus=(GpuSpec("g", 16, 1.0),))
IDLE_NODE = NodeSpec("n2", cpu_cores=2, host_memory_gb=8, gpus=(GpuSpec("g", 16, 1.0),))


def _stage(task, stage, unit, start, finish, node="n1"):
    return [EventRecord(start, "start", task, stage, node, unit),
            EventRecord(finish, "finish", task, stage, node, unit)]


def _log(*runs, completes=()):
    events = [EventRecord(0.0, "decide", t, node="n1") for t, _ in completes]
    for run in runs:
        events += _stage(*run)
    events += [EventRecord(time, "complete", t, node="n1") for t, time in completes]
    return sorted(events, key=lambda e: e.time)


# name, nodes, stage runs (task, stage, unit, start, finish), completes, frequency,
# expected (idle_j, busy_j, {task: busy_j})
CASES = [
    # One CPU stage 1..3 s on the only core; span 0..4 s. idle 2 W * 4 s; busy 8 W * 2 s.
    ("one cpu stage", (ONE_CORE,), [("t1", "a", "cpu:0", 1.0, 3.0)], [("t1", 4.0)], None,
     (8.0, 16.0, {"t1": 16.0})),
    # Two stages co-run on one GPU: t1 0..4, t2 2..6; span 0..6. GPU busy once over 0..6:
    # 80 W * 6 s = 480 J. t1: 0..2 alone 160 + 2..4 half 80 = 240; t2: 80 + 4..6 alone 160.
    # idle: (core 2 W + GPU 20 W) * 6 s = 132.
    ("co-run overlapping", (CORE_AND_GPU,),
     [("t1", "a", "gpu:0", 0.0, 4.0), ("t2", "a", "gpu:0", 2.0, 6.0)],
     [("t1", 6.0), ("t2", 6.0)], None, (132.0, 480.0, {"t1": 240.0, "t2": 240.0})),
    # t2 1..3 inside t1 0..4: t1 = 80 (0..1) + 80 (half of 1..3) + 80 (3..4) = 240; t2 = 80.
    # GPU busy 4 s = 320 J; idle 22 W * 4 s = 88.
    ("co-run nested", (CORE_AND_GPU,),
     [("t1", "a", "gpu:0", 0.0, 4.0), ("t2", "b", "gpu:0", 1.0, 3.0)],
     [("t1", 4.0), ("t2", 4.0)], None, (88.0, 320.0, {"t1": 240.0, "t2": 80.0})),
    # The first case plus an idle node (2 cores + 1 GPU): it adds (2*2 + 20) W * 4 s = 96 J of
    # idle energy and nothing else.
    ("idle node", (ONE_CORE, IDLE_NODE), [("t1", "a", "cpu:0", 1.0, 3.0)], [("t1", 4.0)],
     None, (8.0 + 96.0, 16.0, {"t1": 16.0})),
    # GPU at 500 of 1000 MHz: dynamic 80 W * 0.5^3 = 10 W, for 2 s = 20 J; idle 22 W * 2 s.
    ("half clock", (CORE_AND_GPU,), [("t1", "a", "gpu:0", 0.0, 2.0)], [("t1", 2.0)],
     {("n1", "gpu:0"): 500}, (44.0, 20.0, {"t1": 20.0})),
    # CPU stage then GPU stage of one task: 8 W * 1 s + 80 W * 2 s = 168; idle 22 W * 3 s.
    ("cpu then gpu", (CORE_AND_GPU,),
     [("t1", "a", "cpu:0", 0.0, 1.0), ("t1", "b", "gpu:0", 1.0, 3.0)], [("t1", 3.0)], None,
     (66.0, 168.0, {"t1": 168.0})),
]


@pytest.mark.parametrize("name,nodes,runs,completes,frequency,expected", CASES,
                         ids=[c[0] for c in CASES])
def test_energy_of_hand_written_event_logs(name, nodes, runs, completes, frequency, expected):
    idle_j, busy_j, busy_by_task = expected
    report = energy_report(_log(*runs, completes=completes), ClusterSpec(nodes), POWER,
                           frequency_mhz=frequency)
    assert report.idle_j == pytest.approx(idle_j)
    assert report.busy_j == pytest.approx(busy_j)
    assert report.total_j == pytest.approx(idle_j + busy_j)
    share = idle_j / len(completes)  # the idle energy split evenly over completed tasks
    for task, busy in busy_by_task.items():
        assert report.per_task[task].busy_j == pytest.approx(busy)
        assert report.per_task[task].total_j == pytest.approx(busy + share)
    assert report.joules_per_completed_task == pytest.approx((idle_j + busy_j) / len(completes))
    # Every joule is in exactly one interval (what carbon integrates) and one node.
    assert sum(i.joules for i in report.intervals) == pytest.approx(idle_j + busy_j)
    assert sum(report.per_node_j.values()) == pytest.approx(idle_j + busy_j)


def test_idle_node_energy_is_only_its_idle_power():
    report = energy_report(_log(("t1", "a", "cpu:0", 1.0, 3.0), completes=[("t1", 4.0)]),
                           ClusterSpec((ONE_CORE, IDLE_NODE)), POWER)
    assert report.per_node_j["n2"] == pytest.approx(96.0)   # (2 * 2 + 20) W * 4 s
    assert report.per_node_j["n1"] == pytest.approx(24.0)   # 2 W * 4 s + 8 W * 2 s


def test_unfinished_task_gets_busy_energy_but_no_idle_share():
    # t2 never completes: no idle share; t1 (the only completed task) carries all idle energy.
    events = _log(("t1", "a", "cpu:0", 0.0, 1.0), ("t2", "a", "cpu:0", 1.0, 2.0),
                  completes=[("t1", 3.0)])
    report = energy_report(events, ClusterSpec((ONE_CORE,)), POWER)
    assert report.per_task["t2"].idle_share_j == 0.0 and not report.per_task["t2"].completed
    assert report.per_task["t1"].total_j == pytest.approx(8.0 + 2.0 * 3.0)


def test_explicit_span_adds_idle_time():
    events = _log(("t1", "a", "cpu:0", 1.0, 3.0), completes=[("t1", 4.0)])
    report = energy_report(events, ClusterSpec((ONE_CORE,)), POWER, span_s=(0.0, 10.0))
    assert report.idle_j == pytest.approx(20.0)     # 2 W * 10 s


class FirstNode(Policy):
    name = "first"

    def decide(self, observation):
        return Decision(observation.node_ids[0], "always the first node")


class OnlyCore(NodeScheduler):
    name = "only-core"

    def assign(self, ready, units, now_s):
        free = [u for u in units if u.kind == "cpu" and not u.running]
        return [Assignment(stage, unit.unit_id) for stage, unit in zip(ready, free)]


def test_real_tiny_run_on_one_core():
    # One face_recognition task (a chain of stages) on a 1-core node, no noise: the core is busy
    # for the sum of the stage times; every unit idles from the decision (t=5) to completion.
    costs = CostModel()
    node = NodeSpec("solo", cpu_cores=1, host_memory_gb=8, downlink_mbps=8, uplink_mbps=8)
    task = Task("t1", "face_recognition", 1_000_000, arrival_s=5.0)
    result = Simulator(costs, SimulationConfig(service_noise_sigma=0.0)).run(
        FirstNode(), OnlyCore(), ClusterSpec((node,)), [task], seed=0)
    busy_s = sum(costs.cpu_ms(s.name, task.input_size) / 1000.0
                 for s in APPLICATIONS["face_recognition"].stages)
    span = 1.0 + busy_s + 0.02   # 1 MB in at 1 MB/s, the stages, 2% of it back out
    report = energy_report(result, ClusterSpec((node,)), POWER)
    assert report.span_s[1] - report.span_s[0] == pytest.approx(span, abs=1e-6)
    assert report.busy_j == pytest.approx(8.0 * busy_s, abs=1e-6)  # event times: 1e-9 s
    assert report.idle_j == pytest.approx(2.0 * span, abs=1e-6)
    assert report.completed == ("t1",)


def test_shipped_calibration_loads_and_covers_every_gpu_model():
    calibration = load_calibration()
    power = PowerModel.from_calibration(calibration)
    assert set(calibration.gpu_models) <= set(power.gpus)
    # Board power from the NVIDIA sheets (per die for the K80: 300 W board / 2).
    assert {m: power.gpus[m].busy_w for m in ("k80", "p100", "v100", "t4")} == \
        {"k80": 150.0, "p100": 250.0, "v100": 300.0, "t4": 70.0}
    assert power.cpu_core.busy_w == pytest.approx(85 / 6, abs=0.01)   # E5-2620 v3 TDP / cores


def _bad(path, value):
    raw = copy.deepcopy(RAW)
    target = raw
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return raw


_DELETE = object()

BAD = [
    ("nan busy", ("power", "gpus", "g", "busy_w"), math.nan, "busy_w"),
    ("inf idle", ("power", "cpu_core", "idle_w"), math.inf, "idle_w"),
    ("busy below idle", ("power", "gpus", "g", "busy_w"), 10.0, "below its idle_w"),
    ("zero idle", ("power", "cpu_core", "idle_w"), 0.0, "idle_w"),
    ("bool watts", ("power", "cpu_core", "busy_w"), True, "busy_w"),
    ("missing model", ("power", "gpus", "g"), _DELETE, "lacks the calibrated GPU models"),
    ("no levels", ("power", "gpus", "g", "frequencies_mhz"), [], "frequencies_mhz"),
    ("levels descending", ("power", "gpus", "g", "frequencies_mhz"), [1000, 500], "ascending"),
    ("bad source", ("power", "gpus", "g", "source"), "guessed", "source"),
    ("no citation", ("power", "cpu_core", "citation"), "  ", "citation"),
    ("nan exponent", ("power", "dvfs_exponent", "value"), math.nan, "dvfs_exponent"),
    ("no power section", ("power",), _DELETE, "no power: section"),
]


@pytest.mark.parametrize("name,path,value,message", BAD, ids=[b[0] for b in BAD])
def test_bad_power_section_is_refused(name, path, value, message):
    with pytest.raises(ValueError, match=message):
        PowerModel.from_calibration(_bad(path, value))


@pytest.mark.parametrize("name,events,nodes,kwargs,message", [
    ("finish without start", [EventRecord(1.0, "finish", "t1", "a", "n1", "cpu:0")],
     (ONE_CORE,), {}, "without a start"),
    ("unknown unit", _stage("t1", "a", "cpu:3", 0.0, 1.0), (ONE_CORE,), {}, "no unit"),
    ("unknown node", _stage("t1", "a", "cpu:0", 0.0, 1.0, node="nx"), (ONE_CORE,), {},
     "not in the cluster"),
    ("unknown level", _stage("t1", "a", "gpu:0", 0.0, 1.0), (CORE_AND_GPU,),
     {"frequency_mhz": {("n1", "gpu:0"): 700}}, "no frequency level"),
    ("span too short", _stage("t1", "a", "cpu:0", 0.0, 5.0), (ONE_CORE,),
     {"span_s": (0.0, 1.0)}, "contain every event"),
    ("no events", [], (ONE_CORE,), {}, "no event log"),
    ("unknown gpu model", _stage("t1", "a", "gpu:0", 0.0, 1.0),
     (NodeSpec("n1", 1, 8, gpus=(GpuSpec("h200", 141, 8.0),)),), {}, "no power entry"),
])
def test_bad_event_logs_are_refused(name, events, nodes, kwargs, message):
    with pytest.raises(ValueError, match=message):
        energy_report(events, ClusterSpec(nodes), POWER, **kwargs)
