"""Slowdown- and communication-aware mapping (``comm_aware``): hand-made nodes where data
locality, predicted slowdown and the harm to co-runners decide, each beside a simpler rule that
decides otherwise; the bounded location map; a random property loop; a simulator run."""

from __future__ import annotations

import doctest
import math
import random
from functools import partial

import pytest

import interference.schedulers.comm_aware as comm_aware_module
from interference.schedulers import make_node_scheduler
from interference.schedulers._checks import ready_order
from interference.schedulers.comm_aware import HOST, CommAwareScheduler
from stage_builders import (SIZE, assign_twice, check_expected, costs,  # noqa: F401 (fixture)
                            cpu, gpu_running, label, simulate, st)
from workload.catalog import APPLICATIONS
from workload.model import Stage

# SIZE: 10 s of 640x480 at 25 fps: 307 MB of intermediate data, 51 ms per hop.
gpu = partial(gpu_running, capacity=2)  # gpu(i, *running): two co-run slots unless a row says


# k80 times at SIZE: face_detection 697 ms, face_landmarks 124 ms, face_distance 1 ms (3 ms on
# a core). Profile prior: face_landmarks next to face_encoding 1.40 (and vice versa), next to
# face_compare 1.00; face_detection next to face_encoding 1.80.
# Rows: settings, where earlier stages ran {task: {stage: where}}, units, ready,
#       {stage: (unit, keyword) or None = waits},
#       contrast: (a simpler scheduler, the unit it gives the first stage, or None = waits).
SCENARIOS = [
    pytest.param({}, {"t1": {"face_detection": "gpu:1"}}, [cpu(0), gpu(0), gpu(1)],
                 [st("face_landmarks")],
                 {"t1/face_landmarks": ("gpu:1", "x 124 ms + comm 0 ms")},
                 ("mct", "gpu:0"), id="follows-its-predecessor-to-its-gpu"),
    pytest.param({}, {}, [cpu(0), gpu(0, "face_encoding"), gpu(1, "face_compare")],
                 [st("face_detection")],
                 {"t1/face_detection": ("gpu:1", "slowdown 1.00 next to face_compare x 697 ms")},
                 ("fcfs", "gpu:0"), id="least-predicted-slowdown-x-time"),
    pytest.param({}, {"t1": {"face_detection": "gpu:0"}},
                 [cpu(0), gpu(0, "face_compare", free_at_s=0.5), gpu(1)],
                 [st("face_landmarks")],
                 {"t1/face_landmarks": ("gpu:0", "comm 0 ms + harm 0 ms")},
                 ("mystic", "gpu:1"), id="shares-the-gpu-with-its-data-when-no-slowdown"),
    pytest.param({}, {"t1": {"face_detection": "gpu:0"}},
                 [cpu(0), gpu(0, "face_encoding", free_at_s=0.5), gpu(1)],
                 [st("face_landmarks")],
                 # gpu:0: 1.4 x 124 + harm 0.4 x 500 = 374 ms; gpu:1: 124 + 2 hops 102 = 226 ms
                 {"t1/face_landmarks": ("gpu:1", "comm 102 ms")},
                 ("fcfs", "gpu:0"), id="harm-to-the-co-runner-outweighs-the-copy"),
    pytest.param({"partner_weight": 0.0}, {"t1": {"face_detection": "gpu:0"}},
                 [cpu(0), gpu(0, "face_encoding", free_at_s=0.5), gpu(1)],
                 [st("face_landmarks")],
                 {"t1/face_landmarks": ("gpu:0", "slowdown 1.40 next to face_encoding")},
                 ("mystic", "gpu:1"), id="without-harm-the-copy-decides"),
    pytest.param({}, {"t1": {"face_encoding": HOST}}, [cpu(0), gpu(0)],
                 [st("face_distance")],
                 {"t1/face_distance": ("cpu:0", "3 ms + comm 0 ms")},
                 ("mct", "gpu:0"), id="a-tiny-stage-stays-where-its-data-is"),
    pytest.param({}, {"t1": {"face_detection": "gpu:0"}},
                 [cpu(0), gpu(0, "face_compare", capacity=1, free_at_s=0.05), gpu(1)],
                 [st("face_landmarks")], {"t1/face_landmarks": None},
                 ("mystic", "gpu:1"), id="waits-briefly-for-the-gpu-holding-its-data"),
    pytest.param({"wait_for_busy": False}, {"t1": {"face_detection": "gpu:0"}},
                 [cpu(0), gpu(0, "face_compare", capacity=1, free_at_s=0.05), gpu(1)],
                 [st("face_landmarks")],
                 {"t1/face_landmarks": ("gpu:1", "comm 102 ms")},
                 ("comm_aware", None), id="never-waits-when-told-not-to"),
    pytest.param({"comm_weight": 0.0}, {"t1": {"face_encoding": HOST}}, [cpu(0), gpu(0)],
                 [st("face_distance")],
                 {"t1/face_distance": ("gpu:0", "comm 0 ms")},
                 ("comm_aware", "cpu:0"), id="without-the-comm-term-the-gpu-wins"),
]


@pytest.mark.parametrize("settings, history, units, ready, expected, contrast", SCENARIOS)
def test_scenarios(costs, settings, history, units, ready, expected, contrast):
    scheduler = CommAwareScheduler(costs, **settings)
    scheduler.locations.update({t: dict(where) for t, where in history.items()})
    got = check_expected(scheduler.assign(ready, units, 0.0), ready, units, expected)
    other_name, other_unit = contrast
    other = make_node_scheduler(other_name, costs=costs) if other_name != "comm_aware" \
        else CommAwareScheduler(costs)  # the default settings, for the settings rows
    if isinstance(other, CommAwareScheduler):
        other.locations.update({t: dict(where) for t, where in history.items()})
    theirs = {label(a.stage): a.unit_id for a in other.assign(ready, units, 0.0)}
    first = label(ready[0])
    assert theirs.get(first) == other_unit, theirs
    assert (got[first].unit_id if first in got else None) != other_unit


def test_a_task_walks_its_dag_on_one_gpu_and_is_then_forgotten(costs):
    scheduler = CommAwareScheduler(costs)
    units = [cpu(0), gpu(0), gpu(1)]
    chain = [s.name for s in APPLICATIONS["face_recognition"].stages]
    where = []
    for i, name in enumerate(chain):
        # gpu:0 is busy with another task's stage each time: only locality keeps t1 on gpu:1
        busy = [cpu(0), gpu(0, "face_compare", free_at_s=5.0), gpu(1)] if i else units[::-1]
        (a,) = scheduler.assign([st(name)], busy, float(i))
        where.append(a.unit_id)
        if i < len(chain) - 1:
            assert scheduler.locations["t1"][name] == a.unit_id
    assert where[1:4] == [where[0]] * 3  # the heavy stages follow the first one's data
    assert "t1" not in scheduler.locations  # every stage placed: nothing left to remember


def test_the_location_map_is_bounded(costs):
    scheduler = CommAwareScheduler(costs, max_tasks=2)
    for t in ("a", "b", "c"):
        scheduler.assign([st("face_detection", t)], [gpu(0)], 0.0)
    assert list(scheduler.locations) == ["b", "c"]
    # a forgotten predecessor is taken to be in host memory: one hop to any GPU
    assert scheduler.input_locations(st("face_landmarks", "a")) == [HOST]
    assert scheduler.input_locations(st("face_landmarks", "c")) == ["gpu:0"]
    assert scheduler.comm_s(st("face_landmarks", "a"), "gpu:0") == pytest.approx(
        SIZE * 4.0 / 6e9)
    assert scheduler.comm_s(st("face_landmarks", "c"), "gpu:1") == pytest.approx(
        2 * SIZE * 4.0 / 6e9)


def test_a_pair_that_failed_to_launch_is_never_co_run(costs):
    scheduler = CommAwareScheduler(costs)
    units = [cpu(0), gpu(0, "face_encoding", capacity=1, free_at_s=30.0),
             gpu(1, "face_compare")]
    assert scheduler.assign([st("face_detection")], units, 0.0)[0].unit_id == "gpu:1"
    scheduler.observe_corun("face_detection", "face_compare", "k80", 0.0)
    out = scheduler.assign([st("face_detection", "t2")], units, 0.0)
    assert [a.unit_id for a in out] in ([], ["cpu:0"])  # waits or takes the core


def _random_node(rng: random.Random):
    gpu_stages = [s.name for a in APPLICATIONS.values() for s in a.stages if s.gpu_capable]
    units = [cpu(i, speed=rng.choice([0.5, 1.0, 2.0]),
                 running=("tracking",) if rng.random() < 0.4 else (),
                 free_at_s=rng.uniform(0, 5)) for i in range(rng.randint(0, 3))]
    for i in range(rng.randint(0, 3)):
        capacity = rng.randint(1, 3)
        running = tuple(rng.sample(gpu_stages, rng.randint(0, capacity)))
        units.append(gpu(i, *running, model=rng.choice(["k80", "p4", "v100"]),
                         capacity=capacity, free_at_s=rng.uniform(0, 5) if running else 0.0,
                         memory_mb=rng.choice([0.0, 8192.0]),
                         memory_util=rng.uniform(0, 0.9) if running else 0.0))
    rng.shuffle(units)
    ready = []
    for t in range(rng.randint(0, 8)):
        app = rng.choice(list(APPLICATIONS.values()))
        name = rng.choice([s.name for s in app.stages])
        ready.append(Stage(f"t{t}", app.app_id, name, rng.choice([36_864, 20_000_000, SIZE]),
                           app.stage(name).gpu_capable, round(rng.uniform(0, 3), 1)))
    return units, ready


def test_property_rules_determinism_and_least_cost_first(costs):
    rng = random.Random(17)
    placed = 0
    for _ in range(300):
        units, ready = _random_node(rng)
        history = {f"t{t}": {"face_detection": rng.choice([HOST, "gpu:0", "gpu:1"])}
                   for t in range(4)}

        def build():
            scheduler = CommAwareScheduler(costs)
            scheduler.locations.update({t: dict(w) for t, w in history.items()})
            return scheduler

        out, _ = assign_twice(build, ready, units, 1.0)
        placed += len(out)
        if not ready:
            continue
        # the first stage in arrival order sees the node as it is: it takes the least-cost
        # unit if that unit can take it now, and waits (or has no unit) otherwise
        first = ready_order(ready)[0]
        fresh = CommAwareScheduler(costs)
        fresh.locations.update({t: dict(w) for t, w in history.items()})
        need = costs.gpu_memory_mb(first.stage, first.input_size) if first.gpu_capable else 0.0
        view = ({u.unit_id: list(u.running) for u in units},
                {u.unit_id: u.memory_util * u.memory_mb for u in units},
                {u.unit_id: max(0, u.capacity - len(u.running)) for u in units},
                {u.unit_id: max(1.0, u.free_at_s) for u in units})
        scored = [x for x in (fresh._score(first, u, 1.0, need, *view) for u in units) if x]
        mine = next((a for a in out if a.stage == first), None)
        if not scored:
            assert mine is None
            continue
        best = min(x[0] for x in scored)
        starts_now = [x for x in scored if x[0] == best and x[6]]
        if mine is None:
            assert not [x for x in scored if x[0] == best][0][6]
        else:
            assert starts_now and mine.unit_id == starts_now[0][1].unit_id
    assert placed > 200


def test_simulator_run_finishes_and_repeats():
    runs = []
    for _ in range(2):
        run = simulate(lambda paper, _: CommAwareScheduler(paper, seed=5), 5)
        runs.append(run.result.metrics)
        # only a last stage that failed to launch and was placed again is left behind
        assert len(run.scheduler.locations) <= run.result.metrics.oom_failures
        assert run.scheduler.slowdowns.observations > 0
    assert runs[0].completed == len(run.tasks) and runs[0].node_scheduler == "comm_aware"
    assert runs[0] == runs[1]


@pytest.mark.parametrize("settings, message", [
    ({"intermediate_bytes_per_pixel": -1.0}, "intermediate_bytes_per_pixel"),
    ({"transfer_gb_per_s": 0.0}, "transfer_gb_per_s"),
    ({"transfer_gb_per_s": math.inf}, "transfer_gb_per_s"),
    ({"comm_weight": math.nan}, "comm_weight"),
    ({"partner_weight": -0.5}, "partner_weight"),
    ({"memory_bound": 0.0}, "memory_bound"),
    ({"measurement_weight": 2.0}, "measurement_weight"),
    ({"max_tasks": 0}, "max_tasks"),
    ({"max_tasks": 2.5}, "max_tasks"),
])
def test_bad_settings_raise(settings, message):
    with pytest.raises(ValueError, match=message):
        CommAwareScheduler(**settings)


def test_name_and_doctest():
    assert CommAwareScheduler.name == "comm_aware"
    result = doctest.testmod(comm_aware_module)
    assert result.attempted >= 1 and result.failed == 0
