"""Vapor (copy/compute pipeline pairing on a shared GPU): hand-made nodes where the pairing is
visible, contrast rows where FCFS pairs otherwise, a property loop through the shared rule
checker, a short simulation run twice, and the settings' guards."""

from __future__ import annotations

import doctest
import random
import re
from functools import partial

import pytest

from interference.schedulers import vapor as vapor_module
from interference.schedulers.vapor import VaporScheduler, overlap
from stage_builders import (SIZE, assign_twice, check_expected, costs,  # noqa: F401 (fixture)
                            cpu, make, random_node, simulate, st)
from stage_builders import gpu as any_gpu

gpu = partial(any_gpu, capacity=2)  # two co-run slots to pair unless a row says otherwise

# Copy shares phi at SIZE on a k80 (profile memory-boundness plus a ~6 ms PCIe copy):
# face_encoding 0.34, face_detection 0.35, frame_difference 0.80, dog_pyramid 0.87.
# Overlaps: face_encoding|frame_difference 0.60, face_encoding|face_detection 0.45,
# face_encoding|dog_pyramid 0.62, frame_difference|dog_pyramid 0.28,
# face_detection|frame_difference 0.59.


ENC = gpu(0, running=("face_encoding",), free_at_s=1.0)
TWO_BUSY = [gpu(0, running=("frame_difference",), free_at_s=1.0),
            gpu(1, running=("face_encoding",), free_at_s=1.0)]

# Each row: scheduler, settings, units, ready stages, now, {task/stage: (unit, keyword) | None}.
SCENARIOS = [
    pytest.param("vapor", {}, [ENC],
                 [st("face_detection", "t1", 0.0), st("frame_difference", "t2", 0.5)], 0.5,
                 {"t2/frame_difference": ("gpu:0", "overlap 0.60 >= 0.50"),
                  "t1/face_detection": None},
                 id="copy-heavy-beside-compute-heavy-over-arrival-order"),
    pytest.param("fcfs", {}, [ENC],
                 [st("face_detection", "t1", 0.0), st("frame_difference", "t2", 0.5)], 0.5,
                 {"t1/face_detection": ("gpu:0", "first gpu"), "t2/frame_difference": None},
                 id="contrast-fcfs-pairs-the-older-compute-heavy-stage"),
    pytest.param("vapor", {}, TWO_BUSY,
                 [st("dog_pyramid", "t1", 0.0), st("face_detection", "t2", 0.1)], 0.5,
                 {"t1/dog_pyramid": ("gpu:1", "complements face_encoding, predicted overlap "
                                              "0.62"),
                  "t2/face_detection": ("gpu:0", "complements frame_difference, predicted "
                                                 "overlap 0.59")},
                 id="each-stage-beside-its-complement"),
    pytest.param("fcfs", {}, TWO_BUSY,
                 [st("dog_pyramid", "t1", 0.0), st("face_detection", "t2", 0.1)], 0.5,
                 {"t1/dog_pyramid": ("gpu:0", "first gpu"),
                  "t2/face_detection": ("gpu:1", "first gpu")},
                 id="contrast-fcfs-puts-copy-heavy-beside-copy-heavy"),
    pytest.param("vapor", {}, [gpu(0)],
                 [st("face_detection", "t1", 0.0), st("face_encoding", "t2", 0.1),
                  st("frame_difference", "t3", 0.2)], 0.5,
                 {"t1/face_detection": ("gpu:0", "starts a pipeline with the oldest stage"),
                  "t3/frame_difference": ("gpu:0", "complements face_detection"),
                  "t2/face_encoding": None},
                 id="idle-gpu-starts-a-pipeline-then-takes-its-complement"),
    pytest.param("vapor", {}, [gpu(0), gpu(1)],
                 [st("dog_pyramid", "t1", 0.0), st("face_encoding", "t2", 0.1)], 0.5,
                 {"t1/dog_pyramid": ("gpu:0", "idle gpu:0 starts a pipeline"),
                  "t2/face_encoding": ("gpu:1", "idle gpu:1 starts a pipeline")},
                 id="idle-gpus-run-alone-before-anything-shares"),
    pytest.param("vapor", {}, [cpu(0), ENC], [st("face_detection")], 0.5,
                 {"t1/face_detection": None},  # 0.45 < 0.50; core 10.5 s > GPU at 1 s + 0.7 s
                 id="poor-complement-waits-for-the-gpu"),
    pytest.param("vapor", {"min_overlap": 0.4}, [cpu(0), ENC], [st("face_detection")], 0.5,
                 {"t1/face_detection": ("gpu:0", "overlap 0.45 >= 0.40")},
                 id="min-overlap-setting-admits-the-pair"),
    pytest.param("vapor", {}, [cpu(0), gpu(0, running=("face_encoding",), free_at_s=60.0)],
                 [st("face_detection")], 0.5,
                 {"t1/face_detection": ("cpu:0", "no GPU pipeline slot; earliest est.")},
                 id="core-when-the-gpu-frees-too-late"),
    pytest.param("vapor", {}, [cpu(0), ENC], [st("tracking", "t4")], 0.5,
                 {"t4/tracking": ("cpu:0", "earliest est. completion")},
                 id="cpu-only-stage-to-a-core"),
    pytest.param("vapor", {},
                 [gpu(0, running=("face_encoding",), memory_mb=12 * 1024, memory_util=0.95,
                      free_at_s=1.0)],
                 [st("frame_difference")], 0.5, {"t1/frame_difference": None},
                 id="good-complement-that-does-not-fit-memory-waits"),
    pytest.param("vapor", {}, [cpu(0), gpu(0, memory_mb=512)], [st("face_detection")], 0.5,
                 {"t1/face_detection": ("cpu:0", "earliest est. completion")},
                 id="never-waits-for-an-idle-gpu-it-cannot-fit"),  # no event would wake it
]


@pytest.mark.parametrize("name,settings,units,ready,now,expected", SCENARIOS)
def test_scenarios(costs, name, settings, units, ready, now, expected):
    scheduler = make(name, costs, settings, VaporScheduler)
    check_expected(scheduler.assign(ready, units, now), ready, units, expected)


def test_copy_share_and_overlap_numbers(costs):
    vapor = VaporScheduler(costs)
    phi = {s: vapor.copy_share(s, SIZE, "k80")
           for s in ("face_encoding", "face_detection", "frame_difference", "dog_pyramid")}
    assert phi["face_encoding"] == pytest.approx(0.34, abs=0.01)
    assert phi["frame_difference"] == pytest.approx(0.80, abs=0.01)
    assert phi["dog_pyramid"] > phi["frame_difference"] > 0.5 > phi["face_detection"]
    # the PCIe copy term: a slower link makes every stage more copy-bound
    slow = VaporScheduler(costs, pcie_gb_s=0.1)
    assert slow.copy_share("face_encoding", SIZE, "k80") > phi["face_encoding"] + 0.2
    assert vapor.memory_boundness("tracking") == 0.5  # CPU stage: no profile, no lean
    assert overlap(1.0, 0.0) == 1.0 and overlap(0.5, 0.5) == 0.5 and overlap(0.0, 0.0) == 0.0
    assert vapor.predicted_overlap(st("dog_pyramid"), ("face_encoding", "frame_difference"),
                                   "k80") == pytest.approx(
        (overlap(phi["dog_pyramid"], phi["face_encoding"])
         + overlap(phi["dog_pyramid"], phi["frame_difference"])) / 2)


def test_property_rules_overlap_and_progress(costs):
    rng = random.Random(2021)
    shared = started = 0
    for _ in range(300):
        units, ready = random_node(rng, max_cpus=3, busy_share=0.4, speeds=[0.5, 1.0, 2.0],
                                   gpu_memory=[0.0, 8 * 1024.0])
        settings = {"min_overlap": rng.choice([0.0, 0.5, 0.6])}
        out, _ = assign_twice(lambda: VaporScheduler(costs, **settings), ready, units, 0.5)
        for a in out:
            found = re.search(r"predicted overlap (\d\.\d\d)", a.reason)
            if found:  # every co-run meets the threshold (to the reason's rounding)
                shared += 1
                assert float(found.group(1)) >= settings["min_overlap"] - 0.005
        # Progress: the engine calls again only on events, so a node where nothing runs must
        # start something whenever some ready stage can run somewhere.
        if not any(u.running for u in units) and any(
                u.kind == "cpu" or (s.gpu_capable and not u.memory_mb)
                for s in ready for u in units):
            assert out, (units, ready)
        # Pipelines always start: an idle GPU without memory limits never stays idle while a
        # GPU-capable stage waits.
        placed = {a.unit_id for a in out}
        left = [s for s in ready if s not in {a.stage for a in out}]
        assert not [u for u in units if u.kind == "gpu" and not u.running and not u.memory_mb
                    and u.unit_id not in placed and any(s.gpu_capable for s in left)]
        started += len(out)
    assert shared > 30 and started > 300  # the loop did exercise co-runs and placements


def _run(seed: int):
    return simulate(lambda costs, _: VaporScheduler(costs, seed=seed), seed).result.metrics


def test_short_simulation_finishes_and_repeats():
    first, second = _run(11), _run(11)
    assert first.completed == first.tasks == 120
    assert first == second
    assert first.node_scheduler == "vapor"
    assert first.throughput_per_min > 0 and first.gpu_utilisation > 0


@pytest.mark.parametrize("settings,message", [
    ({"min_overlap": -0.1}, "min_overlap"),
    ({"min_overlap": 1.5}, "min_overlap"),
    ({"pcie_gb_s": 0}, "pcie_gb_s"),
    ({"bytes_per_pixel": -1.0}, "bytes_per_pixel"),
])
def test_bad_settings_raise(settings, message):
    with pytest.raises(ValueError, match=message):
        VaporScheduler(**settings)


def test_docstring_example_runs():
    result = doctest.testmod(vapor_module)
    assert result.attempted >= 1 and result.failed == 0
    assert VaporScheduler.name == "vapor"
