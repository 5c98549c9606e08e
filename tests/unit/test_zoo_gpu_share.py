"""Fractional GPU sharing (best-fit packing of GPU fractions): hand-made nodes where the fraction
decision is visible, contrast rows where FCFS / Mystic choose otherwise, a property loop through
the shared rule checker (fractions never exceed one GPU), and a short simulation."""

from __future__ import annotations

import doctest
import random
from functools import partial

import pytest

from interference.schedulers import gpu_share as gpu_share_module
from interference.schedulers.gpu_share import GpuShareScheduler
from stage_builders import (assign_twice, check_expected, costs, cpu,  # noqa: F401 (fixture)
                            make, simulate)
from stage_builders import gpu as any_gpu
from stage_builders import st as any_st
from workload.catalog import APPLICATIONS
from workload.model import Stage

gpu = partial(any_gpu, capacity=2)  # two co-run slots unless a row says otherwise
st = partial(any_st, size=10_000_000)  # 10 Mpx unless a row says otherwise

# Public SM fractions (calibration.yaml stage_gpu_profile[0]): face_detection 0.9,
# face_encoding 0.9, gmm_background 0.7, frame_difference 0.2, dog_pyramid 0.2,
# face_compare 0.1. Peaks: frame_difference 0.8, dog_pyramid 0.7.


THREE = [cpu(0), gpu(0, running=("face_detection",)), gpu(1, running=("frame_difference",)),
         gpu(2)]  # 0.1, 0.8 and 1.0 of a GPU free
TIGHT = [cpu(0), gpu(0, running=("face_detection",)), gpu(1, running=("gmm_background",))]

# Each row: scheduler, settings, units, ready stages, {task/stage: (unit, reason keyword) or None}.
SCENARIOS = [
    pytest.param("gpu_share", {}, THREE, [st("dog_pyramid")],
                 {"t1/dog_pyramid": ("gpu:1", "request 0.20 (compute 0.20, memory 0.03), best "
                                              "fit 0.80 free")},
                 id="best-fit-smallest-remaining-that-holds-it"),
    pytest.param("gpu_share", {}, [gpu(0), gpu(1, running=("face_detection",)),
                                   gpu(2, running=("frame_difference",))], [st("dog_pyramid")],
                 {"t1/dog_pyramid": ("gpu:2", "best fit 0.80 free")},
                 id="best-fit-skips-the-first-idle-gpu"),
    pytest.param("fcfs", {}, THREE, [st("dog_pyramid")],
                 {"t1/dog_pyramid": ("gpu:0", "first gpu")}, id="contrast-fcfs-first-with-a-slot"),
    pytest.param("mystic", {}, THREE, [st("dog_pyramid")],
                 {"t1/dog_pyramid": ("gpu:2", "to nothing")}, id="contrast-mystic-idle-gpu"),
    pytest.param("gpu_share", {}, TIGHT, [st("face_encoding")], {"t1/face_encoding": None},
                 id="no-fraction-free-waits-beside-an-idle-core"),
    pytest.param("fcfs", {}, TIGHT, [st("face_encoding")],
                 {"t1/face_encoding": ("gpu:0", "first gpu")},
                 id="contrast-fcfs-overcommits-the-gpu"),
    pytest.param("gpu_share", {"cpu_fallback": True}, TIGHT, [st("face_encoding")],
                 {"t1/face_encoding": ("cpu:0", "request 0.90: no gpu fraction free")},
                 id="fallback-takes-the-core"),
    # Memory dominates: 300 + 8 * 900 = 7500 MB of a P4's 8192 MB is 0.92 of the GPU.
    pytest.param("gpu_share", {},
                 [gpu(0, "p4", running=("frame_difference",), memory_mb=8192),
                  gpu(1, "p4", memory_mb=8192)],
                 [st("face_compare", size=900_000_000)],
                 {"t1/face_compare": ("gpu:1", "request 0.92 (compute 0.10, memory 0.92)")},
                 id="memory-fraction-dominates"),
    pytest.param("gpu_share", {},
                 [gpu(0, "p4", running=("frame_difference",), memory_mb=8192),
                  gpu(1, "p4", memory_mb=8192)],
                 [st("face_compare", size=10_000_000)],
                 {"t1/face_compare": ("gpu:0", "request 0.10 (compute 0.10")},
                 id="small-input-packs-beside-the-running-stage"),
    # 300 + 8 * 2000 = 16300 MB: more than a whole P4, so no GPU could ever hold it.
    pytest.param("gpu_share", {}, [cpu(0), gpu(0, "p4", memory_mb=8192)],
                 [st("face_compare", size=2_000_000_000)],
                 {"t1/face_compare": ("cpu:0", "request 1.99 fits no gpu even empty")},
                 id="request-over-one-goes-to-a-core-at-once"),
    # The count bound: gpu:0 has 0.8 of its compute free but both co-run slots taken.
    pytest.param("gpu_share", {},
                 [gpu(0, running=("face_compare", "face_compare")), gpu(1, capacity=2)],
                 [st("frame_difference")], {"t1/frame_difference": ("gpu:1", "1.00 free")},
                 id="capacity-bounds-the-count"),
    pytest.param("gpu_share", {}, [gpu(0, capacity=3), gpu(1, capacity=3)],
                 [st("dog_pyramid", "t1"), st("frame_difference", "t2", ready=0.1),
                  st("face_detection", "t3", ready=0.2)],
                 {"t1/dog_pyramid": ("gpu:0", "1.00 free"),
                  "t2/frame_difference": ("gpu:0", "0.80 free"),
                  "t3/face_detection": ("gpu:1", "1.00 free")},
                 id="placements-in-one-call-use-up-fractions"),
    pytest.param("gpu_share", {"compute_metric": "peak"},
                 [gpu(0, running=("dog_pyramid",)), gpu(1)], [st("frame_difference")],
                 {"t1/frame_difference": ("gpu:1", "request 0.80 (compute 0.80")},
                 id="peak-metric-asks-for-more"),
    pytest.param("gpu_share", {}, [gpu(0, running=("dog_pyramid",)), gpu(1)],
                 [st("frame_difference")],
                 {"t1/frame_difference": ("gpu:0", "request 0.20")}, id="sm-metric-packs"),
    # The memory a unit shows is charged to what runs there: 0.85 of it leaves 0.15 free.
    pytest.param("gpu_share", {},
                 [gpu(0, running=("face_compare",), memory_util=0.85, memory_mb=12288), gpu(1)],
                 [st("dog_pyramid")], {"t1/dog_pyramid": ("gpu:1", "1.00 free")},
                 id="shown-memory-is-charged"),
    pytest.param("gpu_share", {},
                 [gpu(0, running=("face_compare",), memory_mb=12288), gpu(1)],
                 [st("dog_pyramid")], {"t1/dog_pyramid": ("gpu:0", "0.90 free")},
                 id="without-memory-reading-compute-counts"),
    pytest.param("gpu_share", {}, [cpu(0, running=("tracking",)), cpu(1, speed=0.5),
                                   cpu(2, speed=1.5), gpu(0)],
                 [st("tracking")], {"t1/tracking": ("cpu:1", "CPU only, FCFS first free core")},
                 id="cpu-only-fcfs-first-free-core"),
]


@pytest.mark.parametrize("name,settings,units,ready,expected", SCENARIOS)
def test_scenarios(costs, name, settings, units, ready, expected):
    out = make(name, costs, settings, GpuShareScheduler).assign(ready, units, 0.0)
    check_expected(out, ready, units, expected)


def test_requests_follow_the_public_estimates(costs):
    share = GpuShareScheduler(costs)
    p4 = gpu(0, "p4", memory_mb=8192)
    asked, compute, memory = share.request(st("gmm_background", size=300_000_000), p4)
    assert compute == pytest.approx(costs.stage("gmm_background").gpu_profile[0])
    assert memory == pytest.approx(costs.gpu_memory_mb("gmm_background", 300_000_000) / 8192)
    assert asked == max(compute, memory)
    # memory_mb 0 in a view: the calibration's 12 GB for a K80
    assert share.request(st("dog_pyramid"), gpu(1))[2] == pytest.approx(380 / 12288)
    assert share.compute_fraction("no_such_stage") == 1.0
    assert GpuShareScheduler(costs, unknown_compute_fraction=0.25) \
        .compute_fraction("no_such_stage") == 0.25
    assert share.used_fraction(gpu(0, running=("face_detection", "dog_pyramid"))) \
        == pytest.approx(1.1)
    assert share.last_waiting == {}
    share.assign([st("face_encoding")], TIGHT, 0.0)
    assert share.last_waiting == {("t1", "face_encoding"):
                                  "request 0.90: no gpu has that fraction free"}


def test_property_rules_determinism_and_fractions_within_one(costs):
    rng = random.Random(11)
    gpu_stages = [s.name for a in APPLICATIONS.values() for s in a.stages if s.gpu_capable]
    placed = 0
    for _ in range(200):
        units = [cpu(i, running=("tracking",) if rng.random() < 0.4 else ())
                 for i in range(rng.randint(0, 3))]
        for i in range(rng.randint(0, 3)):
            capacity = rng.randint(1, 4)
            units.append(gpu(i, rng.choice(["k80", "p4", "p100", "v100"]), capacity=capacity,
                             running=tuple(rng.sample(gpu_stages, rng.randint(0, capacity - 1))),
                             memory_util=rng.choice([0.0, 0.2, 0.6]),
                             memory_mb=rng.choice([0.0, 8192.0, 16384.0])))
        rng.shuffle(units)
        ready = []
        for t in range(rng.randint(0, 8)):
            app = rng.choice(list(APPLICATIONS))
            name = rng.choice([s.name for s in APPLICATIONS[app].stages])
            ready.append(Stage(f"t{t}", app, name, rng.choice([0, 50_000_000, 460_000_000]),
                               APPLICATIONS[app].stage(name).gpu_capable,
                               round(rng.uniform(0, 2), 1)))
        settings = rng.choice([{}, {"cpu_fallback": True}, {"compute_metric": "peak"}])
        out, scheduler = assign_twice(lambda: GpuShareScheduler(costs, **settings), ready, units,
                                      1.0)
        placed += len(out)
        for g in (u for u in units if u.kind == "gpu"):
            new = [a.stage for a in out if a.unit_id == g.unit_id]
            total = scheduler.used_fraction(g) + sum(scheduler.request(s, g)[0] for s in new)
            assert not new or total <= 1.0 + 1e-6, (g, new)
        gpus = [u for u in units if u.kind == "gpu"]
        if not settings.get("cpu_fallback") and gpus:
            for a in out:  # a GPU-capable stage on a core: only when no GPU could ever hold it
                if a.stage.gpu_capable and a.unit_id.startswith("cpu"):
                    assert min(scheduler.request(a.stage, g)[0] for g in gpus) > 1.0
    assert placed > 250


def _simulate(seed: int):
    return simulate(lambda costs, _: GpuShareScheduler(costs, seed=seed), seed, nodes=3).result


def test_short_simulation_finishes_and_repeats():
    first, second = _simulate(5), _simulate(5)
    assert first.metrics.completed == first.metrics.tasks == 120
    assert first.metrics.as_dict() == second.metrics.as_dict()
    assert first.metrics.oom_failures == 0  # fractions keep predicted memory under each GPU's
    starts = [e for e in first.events if e.kind == "start"]
    cpu_starts = {e.stage for e in starts if e.unit.startswith("cpu")}
    assert cpu_starts <= {"tracking", "tube_stitching"}  # GPU requests wait for a fraction


@pytest.mark.parametrize("settings,match", [
    ({"compute_metric": "mean"}, "compute_metric"),
    ({"unknown_compute_fraction": 0.0}, "unknown_compute_fraction"),
    ({"unknown_compute_fraction": 1.5}, "unknown_compute_fraction"),
    ({"unknown_compute_fraction": True}, "unknown_compute_fraction"),
    ({"cpu_fallback": "no"}, "cpu_fallback"),
])
def test_bad_settings_raise(settings, match):
    with pytest.raises(ValueError, match=match):
        GpuShareScheduler(**settings)


def test_name_and_docstring_example():
    assert GpuShareScheduler.name == "gpu_share"
    result = doctest.testmod(gpu_share_module)
    assert result.attempted >= 1 and result.failed == 0
