"""EDF-DVFS (earliest deadline first, lowest-energy unit and DVFS level meeting the deadline) and
the TaskDirectory it reads deadlines from: EDF order beside FCFS, the level chosen as the deadline
tightens, the fastest unit for an impossible deadline, downstream time kept, unknown tasks, the
directory's bound, a property loop through the shared rule checker, a short simulation, guards."""

from __future__ import annotations

import doctest
import math
import random
import re

import pytest

from interference.schedulers import edf_dvfs as edf_module
from interference.schedulers import task_directory as directory_module
from interference.schedulers import validate_assignments
from interference.schedulers.edf_dvfs import EdfDvfsScheduler, downstream_tail_ms
from interference.schedulers.fcfs import FcfsScheduler
from interference.schedulers.task_directory import UNKNOWN, TaskDirectory, TaskInfo
from stage_builders import (SIZE, assign_twice, costs, cpu, gpu,  # noqa: F401 (fixture)
                            random_units, simulate, st)
from workload.catalog import APPLICATIONS
from workload.model import Stage, Task

# Hand numbers (CostModel(), SIZE), from calibration.yaml's power: section, exponent 3:
# tracking on a core at max (3200 MHz): 2.124 s. Core busy power P(f) = 4.25 + 9.92 (f/3200)^3:
#   1200 MHz: 5.664 s x 4.773 W = 27.0 J     1800: 3.776 s x 6.016 W = 22.7 J  <- cheapest
#   2400 MHz: 2.832 s x 8.435 W = 23.9 J     3200: 2.124 s x 14.17 W = 30.1 J
# (the idle part makes 1800, not the lowest level, the cheapest: the "critical frequency").
# face_detection on a k80 at 875 MHz: 0.697 s; P(f) = 25 + 125 (f/875)^3:
#   560: 1.090 s x 57.8 W = 63.0 J  <- cheapest   705: 0.866 s, 78 J
#   810: 0.753 s                                  875: 0.697 s, 105 J
# face_detection on a v100 at 1530 MHz: 0.0795 s; at 1005 MHz 0.121 s x 113.7 W = 13.8 J.
# face_detection's downstream critical path on a k80-only node: landmarks 123.6 + encoding 119.1
#   + distance 0.9 + compare 0.7 = 244.3 ms.


def task(task_id: str, deadline_s: float | None, arrival: float = 0.0, app="face_recognition",
         tenant: str = "") -> Task:
    return Task(task_id, app, SIZE, arrival, tenant=tenant, deadline_s=deadline_s)


# -- EDF order -------------------------------------------------------------------------------
# Absolute deadlines: t4 0+3 = 3.0, t2 0.5+3 = 3.5, t1 0+9 = 9.0, t3 none (last).
# Arrival order (FCFS): t1, t3, t4 (all at 0, by id), then t2 (0.5).
EDF_TASKS = [task("t1", 9.0), task("t2", 3.0, 0.5), task("t3", None), task("t4", 3.0)]
EDF_READY = [st("tracking", "t1", 0.0), st("tracking", "t2", 0.5), st("tracking", "t3", 0.0),
             st("tracking", "t4", 0.0)]


@pytest.mark.parametrize("scheduler,cores,expected", [
    ("edf", 1, ["t4"]),
    ("edf", 2, ["t4", "t2"]),
    ("edf", 3, ["t4", "t2", "t1"]),
    ("edf", 4, ["t4", "t2", "t1", "t3"]),  # no deadline: last
    ("fcfs", 1, ["t1"]),                    # contrast: arrival order
    ("fcfs", 2, ["t1", "t3"]),
], ids=lambda v: str(v))
def test_edf_order_table(costs, scheduler, cores, expected):
    sched = (EdfDvfsScheduler(costs, tasks=EDF_TASKS) if scheduler == "edf"
             else FcfsScheduler(costs))
    units = [cpu(i) for i in range(cores)]
    out = sched.assign(EDF_READY, units, 0.5)
    validate_assignments(out, EDF_READY, units)
    assert [a.stage.task_id for a in out] == expected
    assert [a.unit_id for a in out] == [f"cpu:{i}" for i in range(cores)]


# -- unit and level --------------------------------------------------------------------------
# Each row: settings, units, stage, relative deadline (None: none), expected unit, MHz, keyword.
K80 = [gpu(0)]
MIXED = [cpu(0), gpu(0), gpu(1, "v100")]
LEVELS = [
    pytest.param({}, [cpu(0)], "tracking", None, "cpu:0", 1800, "no deadline; lowest energy",
                 id="no-deadline-cheapest-level-is-the-critical-one"),
    pytest.param({}, [cpu(0)], "tracking", 100.0, "cpu:0", 1800, "4/4 options meeting it",
                 id="loose-deadline-lower-frequency"),
    pytest.param({}, [cpu(0)], "tracking", 3.0, "cpu:0", 2400, "2/4 options meeting it",
                 id="tighter-deadline-next-level"),  # 1800 takes 3.776 s > 3
    pytest.param({}, [cpu(0)], "tracking", 2.5, "cpu:0", 3200, "1/4 options meeting it",
                 id="tight-deadline-max-frequency"),  # 2400 takes 2.832 s > 2.5
    pytest.param({}, [cpu(0)], "tracking", 2.0, "cpu:0", 3200, "cannot be met",
                 id="impossible-on-the-only-core-max"),
    pytest.param({"reserve_downstream": False}, K80, "face_detection", 100.0, "gpu:0", 560,
                 "lowest energy", id="gpu-loose-lowest-level"),
    pytest.param({"reserve_downstream": False}, K80, "face_detection", 0.8, "gpu:0", 810,
                 "2/4 options", id="gpu-deadline-0.8-needs-810"),
    pytest.param({"reserve_downstream": False}, K80, "face_detection", 0.7, "gpu:0", 875,
                 "1/4 options", id="gpu-tight-max"),
    pytest.param({"reserve_downstream": False}, K80, "face_detection", 1.0, "gpu:0", 705,
                 "finish by 1.000s", id="no-reserve-whole-deadline"),  # 560: 1.090 > 1
    pytest.param({}, K80, "face_detection", 1.0, "gpu:0", 810, "0.244s kept for downstream",
                 id="reserve-downstream-tightens-to-810"),  # finish by 0.756: 705 is 0.866
    # the v100 at 1005 MHz: 13.8 J at Gavel's speeds, 32.6 J at the calibration's alone (a
    # machine without the data); the k80 63 J, the core 112 J
    pytest.param({}, MIXED, "face_detection", 100.0, "gpu:1", 1005, "lowest energy of the 12/12",
                 id="cheapest-unit-of-three"),
    pytest.param({}, MIXED, "face_detection", 0.05, "gpu:1", 1530,
                 "fastest unit at its highest level", id="impossible-fastest-unit"),
    pytest.param({"reserve_downstream": False}, [cpu(0), gpu(0)], "face_distance", 0.004,
                 "cpu:0", 2400, "lowest energy", id="core-cheaper-when-it-meets"),
    # core at 3200 takes 2.8 ms > 2.5 ms; the k80 at 560 MHz takes 1.4 ms: dearer, but in time.
    pytest.param({"reserve_downstream": False}, [cpu(0), gpu(0)], "face_distance", 0.0025,
                 "gpu:0", 560, "lowest energy", id="tight-deadline-moves-to-the-gpu"),
    # a k80 already running one stage: 2 x 0.697 s at max > 1.2 s; nothing meets it.
    pytest.param({"reserve_downstream": False}, [gpu(0, capacity=2, running=("face_encoding",))],
                 "face_detection", 1.2, "gpu:0", 875, "cannot be met",
                 id="co-runner-doubles-the-time"),
]


@pytest.mark.parametrize("settings,units,stage,deadline,unit,mhz,keyword", LEVELS)
def test_unit_and_level_table(costs, settings, units, stage, deadline, unit, mhz, keyword):
    sched = EdfDvfsScheduler(costs, tasks=[task("t1", deadline, app=st(stage).app_id)],
                             **settings)
    ready = [st(stage)]
    out = sched.assign(ready, units, 0.0)
    validate_assignments(out, ready, units)
    assert len(out) == 1, out
    level = int(re.search(r"@ (\d+) MHz", out[0].reason)[1])
    assert (out[0].unit_id, level) == (unit, mhz), out[0].reason
    assert keyword in out[0].reason, out[0].reason
    assert sched.chosen_levels == {("t1", stage): mhz}


def test_energy_and_tail_numbers(costs):
    sched = EdfDvfsScheduler(costs)
    opts = sched.options(st("tracking"), cpu(0), 0, 0.0)
    assert [round(o[0], 1) for o in opts] == [27.0, 22.7, 23.9, 30.1]
    assert [o[2] for o in opts] == [1200, 1800, 2400, 3200]
    assert opts[-1][1] == pytest.approx(costs.cpu_ms("tracking", SIZE) / 1000)
    assert opts[0][3] == pytest.approx(opts[-1][3] * 3200 / 1200)  # time / (f / f_max)
    k80 = lambda name: costs.gpu_ms(name, SIZE, "k80")  # noqa: E731
    assert downstream_tail_ms("face_recognition", "face_detection", k80) == pytest.approx(
        sum(k80(n) for n in ("face_landmarks", "face_encoding", "face_distance", "face_compare")))
    # intrusion_detection: gmm_background -> tracking only; gaussian_pyramid -> 3 stages after
    assert downstream_tail_ms("intrusion_detection", "gmm_background", lambda n: 1.0) == 1.0
    assert downstream_tail_ms("intrusion_detection", "gaussian_pyramid", lambda n: 1.0) == 3.0
    assert downstream_tail_ms("no_such_app", "x", lambda n: 1.0) == 0.0


def test_unknown_task_gets_defaults(costs):
    sched = EdfDvfsScheduler(costs, tasks=[task("known", 2.5, app="intrusion_detection")])
    ready = [st("tracking", "stranger"), st("tracking", "known", 0.1)]
    out = sched.assign(ready, [cpu(0), cpu(1)], 0.1)
    # The known task's deadline ranks it first although it arrived later; the stranger has
    # no deadline (after every deadline) and takes the cheapest level.
    assert [a.stage.task_id for a in out] == ["known", "stranger"]
    assert "no deadline" in out[1].reason and "@ 1800 MHz" in out[1].reason
    assert "@ 3200 MHz" in out[0].reason  # finish by 2.5: only max (2.124 s from 0.1) meets
    assert EdfDvfsScheduler(costs).assign(ready[:1], [cpu(0)], 0.0)[0].reason.startswith(
        "EDF-DVFS: no deadline")


def test_gpu_model_without_power_entry_uses_the_reference_gpu(costs):
    # h200 is unknown to the calibration (speed given): k80 levels and watts, said in the reason
    out = EdfDvfsScheduler(costs).assign([st("face_detection")],
                                         [gpu(0, "h200", speed=8.0)], 0.0)
    assert "@ 560 MHz" in out[0].reason
    assert "no power entry for 'h200': k80's" in out[0].reason


def test_chosen_levels_bounded(costs):
    sched = EdfDvfsScheduler(costs, max_recorded=2)
    for i in range(3):
        sched.assign([st("tracking", f"t{i}")], [cpu(0)], float(i))
    assert list(sched.chosen_levels) == [("t1", "tracking"), ("t2", "tracking")]


def test_waits_when_nothing_can_run_it(costs):
    # CPU-only tracking with only a GPU free waits; the GPU stage behind it still starts.
    ready = [st("tracking", "t1"), st("face_detection", "t2", 0.1)]
    out = EdfDvfsScheduler(costs).assign(ready, [cpu(0, running=("x",)), gpu(0)], 0.2)
    assert [(a.stage.task_id, a.unit_id) for a in out] == [("t2", "gpu:0")]


# -- the directory ---------------------------------------------------------------------------
def test_directory_entries_and_defaults():
    d = TaskDirectory([task("t1", 3.0, 2.0, tenant="a"), task("t2", None)])
    assert d.get("t1") == TaskInfo("a", 5.0, 0)
    assert d.get("t2") == TaskInfo("", None, 0)
    assert d.get("nobody") is UNKNOWN and "nobody" not in d and len(d) == 2
    d.add(task("t1", 3.0, 2.0, tenant="a"))  # the same task again: fine
    with pytest.raises(ValueError, match="already held"):
        d.add(task("t1", 4.0, 2.0, tenant="a"))
    assert d.tenants() == ["", "a"]
    d.remove("t1")
    assert d.get("t1") is UNKNOWN


def test_directory_bound_lru_and_refuse():
    lru = TaskDirectory([task("t1", 1.0), task("t2", 1.0)], max_entries=2)
    lru.get("t1")  # used: t2 is now the least recently used
    lru.add(task("t3", 1.0))
    assert ("t1" in lru, "t2" in lru, "t3" in lru, lru.evicted) == (True, False, True, 1)
    assert lru.get("t2") is UNKNOWN  # evicted: reads as unknown
    refuse = TaskDirectory([task("t1", 1.0)], max_entries=1, on_full="refuse")
    with pytest.raises(ValueError, match="full"):
        refuse.add(task("t2", 1.0))
    assert "t1" in refuse and len(refuse) == 1
    with pytest.raises(ValueError, match="more than max_entries=2"):
        TaskDirectory([task(f"t{i}", 1.0) for i in range(3)], max_entries=2)
    sched = EdfDvfsScheduler(tasks=[task("t1", 1.0)], max_tasks=1)
    assert sched.directory.max_entries == 1
    shared = TaskDirectory()
    assert EdfDvfsScheduler(tasks=shared).directory is shared


@pytest.mark.parametrize("kwargs,message", [
    ({"tasks": "t1"}, "list of Task"),
    ({"tasks": [("t1", 1.0)]}, "Task objects"),
    ({"tasks": [Task("t", "face_recognition", 1, -1.0)]}, "arrival_s"),
    ({"tasks": [Task("t", "face_recognition", 1, math.nan)]}, "arrival_s"),
    ({"tasks": [Task("t", "face_recognition", 1, deadline_s=-1.0)]}, "deadline_s"),
    ({"tasks": [Task("t", "face_recognition", 1, deadline_s=math.inf)]}, "deadline_s"),
    ({"tasks": [Task("t", "face_recognition", 1, tenant="a b")]}, "tenant"),
    ({"max_tasks": 0}, "max_entries"),
    ({"max_tasks": True}, "max_entries"),
    ({"power": {"cpu_core": 1}}, "PowerModel"),
    ({"reserve_downstream": "yes"}, "reserve_downstream"),
    ({"max_recorded": 0}, "max_recorded"),
])
def test_bad_settings_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EdfDvfsScheduler(**kwargs)


def test_bad_inputs_raise(costs):
    with pytest.raises(ValueError, match="on_full"):
        TaskDirectory(on_full="fifo")
    with pytest.raises(ValueError, match="now_s"):
        EdfDvfsScheduler(costs).assign([st("tracking")], [cpu(0)], math.nan)
    with pytest.raises(TypeError):
        EdfDvfsScheduler(costs, deadline_factor=2)  # unknown setting


# -- property loop and a short run -----------------------------------------------------------
def test_property_rules_edf_order_and_levels(costs):
    rng = random.Random(17)
    power = EdfDvfsScheduler(costs).power
    started = 0
    for _ in range(200):
        units = random_units(rng)
        ready, tasks = [], []
        for t in range(rng.randint(0, 6)):
            app = rng.choice(list(APPLICATIONS))
            name = rng.choice([s.name for s in APPLICATIONS[app].stages])
            arrival = round(rng.uniform(0, 2), 1)
            capable = APPLICATIONS[app].stage(name).gpu_capable
            ready.append(Stage(f"t{t}", app, name, SIZE, capable, arrival))
            if rng.random() < 0.8:
                tasks.append(Task(f"t{t}", app, SIZE, arrival,
                                  deadline_s=rng.choice([0.01, 1.0, 5.0, 60.0])))
        out, sched = assign_twice(lambda: EdfDvfsScheduler(costs, tasks=tasks), ready, units,
                                  2.0)
        deadlines = [sched.directory.get(a.stage.task_id).deadline_at_s for a in out]
        keys = [(d is None, d or 0.0) for d in deadlines]
        assert keys == sorted(keys)  # started in EDF order
        by_id = {u.unit_id: u for u in units}
        for a in out:
            unit = by_id[a.unit_id]
            spec = power.cpu_core if unit.kind == "cpu" else power.gpus[unit.model]
            assert sched.chosen_levels[(a.stage.task_id, a.stage.stage)] in spec.frequencies_mhz
            if "cannot be met" in a.reason:
                assert sched.chosen_levels[(a.stage.task_id, a.stage.stage)] == spec.max_mhz
        started += len(out)
    assert started > 200


def test_short_simulation_completes_every_task():
    from workload.task_attributes import with_tenants_and_deadlines
    run = simulate(lambda costs, tasks: EdfDvfsScheduler(costs, tasks=tasks), 3, tasks=60,
                   prepare=lambda costs, tasks: with_tenants_and_deadlines(tasks, costs=costs,
                                                                          seed=3))
    metrics, scheduler, tasks = run.result.metrics, run.scheduler, run.tasks
    assert metrics.completed == metrics.tasks == 60
    assert metrics.node_scheduler == "edf_dvfs"
    stages = sum(len(APPLICATIONS[t.app_id].stages) for t in tasks)
    assert len(scheduler.chosen_levels) == stages  # every started stage has its level


def test_docstring_examples_run():
    for module in (edf_module, directory_module):
        result = doctest.testmod(module)
        assert result.attempted >= 1 and result.failed == 0
    assert EdfDvfsScheduler.name == "edf_dvfs"
