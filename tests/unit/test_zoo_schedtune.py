"""SchedTune (best fit by predicted GPU memory, no predicted OOM): hand-made nodes where the
memory decision is visible, contrast rows where FCFS / Mystic choose otherwise, learning from
failed launches, a property loop through the shared rule checker, and a short simulation."""

from __future__ import annotations

import dataclasses
import doctest
import random
from functools import partial

import pytest

from interference.schedulers import schedtune as schedtune_module
from interference.schedulers.schedtune import SchedTuneScheduler
from stage_builders import (assign_twice, check_expected, costs, cpu,  # noqa: F401 (fixture)
                            make, simulate)
from stage_builders import gpu as any_gpu
from stage_builders import st as any_st
from workload.catalog import APPLICATIONS
from workload.model import ComputingUnit, Stage

st = partial(any_st, size=200_000_000)  # 200 Mpx (1900 MB on a GPU) unless a row says otherwise


def gpu(i: int, model: str, memory_mb: float, **kw) -> ComputingUnit:
    """SchedTune's rows always name the GPU's model and memory (one slot unless they say)."""
    return any_gpu(i, model, memory_mb=memory_mb, **kw)


# A 200 Mpx stage needs 300 + 8 * 200 = 1900 MB. gpu:0 (P4, 8 GB) LOOKS emptier: one stage of
# three slots, but 90% of its memory is used; gpu:1 (K80, 12 GB) runs two stages in 40%.
EMPTIER_LOOKING = [cpu(0, running=("tracking",)),
                   gpu(0, "p4", 8192, running=("face_encoding",), capacity=3, memory_util=0.9),
                   gpu(1, "k80", 12288, running=("face_detection", "gmm_background"), capacity=3,
                       memory_util=0.4)]
BOTH_FULL = [EMPTIER_LOOKING[0], EMPTIER_LOOKING[1],
             dataclasses.replace(EMPTIER_LOOKING[2], memory_util=0.85)]

# Each row: scheduler, settings, units, ready stages, {task/stage: (unit, reason keyword) or None}.
SCENARIOS = [
    pytest.param("schedtune", {}, EMPTIER_LOOKING, [st("face_landmarks")],
                 {"t1/face_landmarks": ("gpu:1", "best fit, 4244 MB left")},
                 id="would-oom-on-emptier-gpu-goes-where-it-fits"),
    pytest.param("fcfs", {}, EMPTIER_LOOKING, [st("face_landmarks")],
                 {"t1/face_landmarks": ("gpu:0", "first gpu")},
                 id="contrast-fcfs-takes-the-emptier-gpu-and-would-oom"),
    pytest.param("schedtune", {}, BOTH_FULL, [st("face_landmarks")],
                 {"t1/face_landmarks": None}, id="fits-no-gpu-and-no-free-core-waits"),
    pytest.param("schedtune", {"cpu_fallback": True}, [cpu(1)] + BOTH_FULL[1:],
                 [st("face_landmarks")],
                 {"t1/face_landmarks": ("cpu:1", "no gpu fits 1900 MB")},
                 id="fits-no-gpu-falls-back-to-a-core"),
    pytest.param("schedtune", {}, [cpu(1)] + BOTH_FULL[1:],
                 [st("face_landmarks")], {"t1/face_landmarks": None},
                 id="by-default-waits-beside-a-free-core"),
    # Best fit: the busy P4 leaves 7373 - 2048 - 1100 = 4225 MB, the idle K80 9959 MB.
    pytest.param("schedtune", {},
                 [gpu(0, "k80", 12288, capacity=2),
                  gpu(1, "p4", 8192, running=("frame_difference",), capacity=2,
                      memory_util=0.25)],
                 [st("face_detection", size=100_000_000)],
                 {"t1/face_detection": ("gpu:1", "4225 MB left")}, id="best-fit-packs-tightest"),
    pytest.param("mystic", {},
                 [gpu(0, "k80", 12288, capacity=2),
                  gpu(1, "p4", 8192, running=("frame_difference",), capacity=2,
                      memory_util=0.25)],
                 [st("face_detection", size=100_000_000)],
                 {"t1/face_detection": ("gpu:0", "to nothing")},
                 id="contrast-mystic-prefers-the-idle-gpu"),
    # Equal fits (both 16 GB, idle): the shorter predicted time wins (V100 104 ms < P100 191 ms).
    pytest.param("schedtune", {}, [gpu(0, "p100", 16384), gpu(1, "v100", 16384)],
                 [st("face_detection", size=100_000_000)],
                 # the v100's estimate is 104 ms at Gavel's speeds, 245 ms at the calibration's
                 # alone (a machine without the data): the faster GPU either way
                 {"t1/face_detection": ("gpu:1", "fastest of 2 equal fits")},
                 id="equal-fits-go-to-the-faster-gpu"),
    pytest.param("fcfs", {}, [gpu(0, "p100", 16384), gpu(1, "v100", 16384)],
                 [st("face_detection", size=100_000_000)],
                 {"t1/face_detection": ("gpu:0", "first gpu")},
                 id="contrast-fcfs-takes-the-first-equal-gpu"),
    pytest.param("schedtune", {}, [gpu(0, "v100", 16384), gpu(1, "k80", 12288)],
                 [st("face_detection", size=100_000_000)],
                 {"t1/face_detection": ("gpu:1", "est 908 ms")},
                 id="tighter-fit-beats-faster-gpu"),
    pytest.param("schedtune", {"fit_tolerance_mb": 5000.0},
                 [gpu(0, "v100", 16384), gpu(1, "k80", 12288)],
                 [st("face_detection", size=100_000_000)],
                 {"t1/face_detection": ("gpu:0", "fastest of 2 equal fits")},
                 id="tolerance-makes-fits-equal-then-time-decides"),
    # 8192 * 0.7 + 1900 = 7634 MB: under the whole P4, over the default 90% headroom.
    pytest.param("schedtune", {"memory_headroom": 1.0},
                 [cpu(0), gpu(0, "p4", 8192, running=("gmm_background",), capacity=2,
                              memory_util=0.7)],
                 [st("face_landmarks")], {"t1/face_landmarks": ("gpu:0", "best fit")},
                 id="full-headroom-fits"),
    pytest.param("schedtune", {"cpu_fallback": True},
                 [cpu(0), gpu(0, "p4", 8192, running=("gmm_background",), capacity=2,
                              memory_util=0.7)],
                 [st("face_landmarks")], {"t1/face_landmarks": ("cpu:0", "no gpu fits")},
                 id="default-headroom-keeps-a-margin"),
    # The first stage takes the tight P4 slot; its memory is booked, so the second does not fit
    # there any more and goes to the K80.
    pytest.param("schedtune", {},
                 [gpu(0, "p4", 8192, running=("gmm_background",), capacity=3, memory_util=0.5),
                  gpu(1, "k80", 12288, capacity=3)],
                 [st("face_landmarks", "t1"), st("face_landmarks", "t2", ready=0.1)],
                 {"t1/face_landmarks": ("gpu:0", "best fit"),
                  "t2/face_landmarks": ("gpu:1", "best fit")},
                 id="placements-in-one-call-book-memory"),
    pytest.param("schedtune", {}, [cpu(0, speed=1.0), cpu(1, speed=1.5), gpu(0, "k80", 12288)],
                 [st("tracking")], {"t1/tracking": ("cpu:1", "CPU only, fastest free core")},
                 id="cpu-only-to-the-fastest-free-core"),
    pytest.param("fcfs", {}, [cpu(0, speed=1.0), cpu(1, speed=1.5), gpu(0, "k80", 12288)],
                 [st("tracking")], {"t1/tracking": ("cpu:0", "CPU only")},
                 id="contrast-fcfs-takes-the-first-core"),
    # A view without a memory reading still charges the running stages' CUDA contexts, and
    # memory_mb 0 falls back to the calibration's 8 GB for a P4.
    pytest.param("schedtune", {"cpu_fallback": True},
                 [cpu(0), gpu(0, "p4", 0, running=("gmm_background",), capacity=2)],
                 [st("face_landmarks", size=850_000_000)],
                 {"t1/face_landmarks": ("cpu:0", "no gpu fits 7100 MB")},
                 id="context-floor-and-calibration-memory"),
]


@pytest.mark.parametrize("name,settings,units,ready,expected", SCENARIOS)
def test_scenarios(costs, name, settings, units, ready, expected):
    out = make(name, costs, settings, SchedTuneScheduler).assign(ready, units, 0.0)
    check_expected(out, ready, units, expected)


def test_waiting_stage_is_reported(costs):
    scheduler = SchedTuneScheduler(costs, cpu_fallback=True)
    assert scheduler.assign([st("face_landmarks")], BOTH_FULL, 0.0) == []
    assert scheduler.last_waiting == {("t1", "face_landmarks"): "no gpu fits 1900 MB, "
                                                                "no free core"}


def test_a_failed_launch_marks_the_pair_for_that_model(costs):
    units = [gpu(0, "k80", 12288, running=("gmm_background",), capacity=2),
             gpu(1, "k80", 12288, running=("face_encoding",), capacity=2, memory_util=0.5)]
    ready = [st("face_detection", size=100_000_000)]
    scheduler = SchedTuneScheduler(costs)
    assert scheduler.assign(ready, units, 0.0)[0].unit_id == "gpu:1"  # tighter fit
    scheduler.observe_corun("face_encoding", "face_detection", "k80", 0.0)  # either order
    assert scheduler.failed_pairs == {("face_detection", "face_encoding", "k80")}
    assert scheduler.assign(ready, units, 0.0)[0].unit_id == "gpu:0"
    # another model is not affected, and the setting turns the learning off
    v100s = [dataclasses.replace(u, model="v100") for u in units]
    assert scheduler.assign(ready, v100s, 0.0)[0].unit_id == "gpu:1"
    deaf = SchedTuneScheduler(costs, avoid_failed_pairs=False)
    deaf.observe_corun("face_encoding", "face_detection", "k80", 0.0)
    assert deaf.failed_pairs == set() and deaf.assign(ready, units, 0.0)[0].unit_id == "gpu:1"


def test_measured_corun_rates_replace_the_time_slicing_guess(costs):
    scheduler = SchedTuneScheduler(costs)
    stage = st("face_detection", size=100_000_000)
    unit = gpu(0, "v100", 16384, running=("gmm_background",), capacity=2)
    alone = costs.gpu_ms("face_detection", 100_000_000, "v100")
    assert scheduler.predicted_ms(stage, unit) == pytest.approx(alone)
    assert scheduler.predicted_ms(stage, unit, ["gmm_background"]) == pytest.approx(2 * alone)
    scheduler.observe_corun("face_detection", "gmm_background", "v100", 0.8)
    scheduler.observe_corun("face_detection", "gmm_background", "v100", 0.6)
    assert scheduler.predicted_ms(stage, unit, ["gmm_background"]) == pytest.approx(alone / 0.7)


def test_property_rules_determinism_and_no_predicted_oom(costs):
    rng = random.Random(7)
    gpu_stages = [s.name for a in APPLICATIONS.values() for s in a.stages if s.gpu_capable]
    placed = 0
    for trial in range(200):
        units = [cpu(i, speed=rng.choice([0.5, 1.0, 1.5]),
                     running=("tracking",) if rng.random() < 0.4 else ())
                 for i in range(rng.randint(0, 3))]
        for i in range(rng.randint(0, 3)):
            capacity = rng.randint(1, 3)
            model = rng.choice(["k80", "p4", "p100", "v100"])
            units.append(gpu(i, model, rng.choice([0.0, 8192.0, 12288.0]), capacity=capacity,
                             running=tuple(rng.sample(gpu_stages, rng.randint(0, capacity))),
                             memory_util=rng.choice([0.0, 0.3, 0.7, 0.95])))
        rng.shuffle(units)
        ready = []
        for t in range(rng.randint(0, 8)):
            app = rng.choice(list(APPLICATIONS))
            name = rng.choice([s.name for s in APPLICATIONS[app].stages])
            ready.append(Stage(f"t{t}", app, name, rng.choice([0, 50_000_000, 460_000_000]),
                               APPLICATIONS[app].stage(name).gpu_capable,
                               round(rng.uniform(0, 2), 1)))
        settings = rng.choice([{"cpu_fallback": True}, {}, {"memory_headroom": 0.5,
                                                                "cpu_fallback": True}])
        out, scheduler = assign_twice(lambda: SchedTuneScheduler(costs, **settings), ready,
                                      units, 1.0)
        placed += len(out)
        for g in (u for u in units if u.kind == "gpu"):
            new = [a.stage for a in out if a.unit_id == g.unit_id]
            total = scheduler.used_mb(g) + sum(costs.gpu_memory_mb(s.stage, s.input_size)
                                               for s in new)
            assert not new or total <= scheduler.memory_headroom * scheduler.capacity_mb(g) + 1e-6
        if not settings.get("cpu_fallback"):
            cores = {u.unit_id for u in units if u.kind == "cpu"}
            assert not [a for a in out if a.stage.gpu_capable and a.unit_id in cores
                        and any(u.kind == "gpu" for u in units)]
    assert placed > 250


def _simulate(seed: int):
    return simulate(lambda costs, _: SchedTuneScheduler(costs, seed=seed), seed, nodes=3).result


def test_short_simulation_finishes_and_repeats():
    first, second = _simulate(3), _simulate(3)
    assert first.metrics.completed == first.metrics.tasks == 120
    assert first.metrics.as_dict() == second.metrics.as_dict()
    assert first.metrics.throughput_per_min > 0
    starts = [e for e in first.events if e.kind == "start"]
    assert any(e.unit.startswith("gpu") for e in starts)


@pytest.mark.parametrize("settings,match", [
    ({"memory_headroom": 0.0}, "memory_headroom"),
    ({"memory_headroom": 1.5}, "memory_headroom"),
    ({"memory_headroom": "0.9"}, "memory_headroom"),
    ({"fit_tolerance_mb": -1.0}, "fit_tolerance_mb"),
    ({"fit_tolerance_mb": float("nan")}, "fit_tolerance_mb"),
    ({"cpu_fallback": "yes"}, "cpu_fallback"),
    ({"avoid_failed_pairs": 1}, "avoid_failed_pairs"),
])
def test_bad_settings_raise(settings, match):
    with pytest.raises(ValueError, match=match):
        SchedTuneScheduler(**settings)


def test_name_and_docstring_example():
    assert SchedTuneScheduler.name == "schedtune"
    result = doctest.testmod(schedtune_module)
    assert result.attempted >= 1 and result.failed == 0
