"""Node-level baseline schedulers (FCFS, MCT, PATS, HEFT, Mystic): hand-made scenarios with the
expected unit per stage, exact HEFT ranks from the shipped calibration, and a property loop over
random nodes through the shared rule checker."""

from __future__ import annotations

import doctest
import importlib
import random

import pytest

from interference.schedulers import (NODE_SCHEDULERS, HeftScheduler, MctUnitScheduler,
                                     MysticScheduler, PatsScheduler, make_node_scheduler,
                                     validate_assignments)
from interference.schedulers.mystic import cosine
from stage_builders import (SIZE, assign_twice, check_expected, costs,  # noqa: F401 (fixture)
                            cpu, gpu, random_node, st)
from workload.model import Assignment

CPU_ONLY = {"tracking", "tube_stitching"}

# Each row: scheduler, settings, units, ready stages, now, {task/stage: (unit, reason keyword)
# or None for "left waiting"}. k80 GPUs keep the speedups equal to the calibration's numbers.
SCENARIOS = [
    # --- FCFS: arrival order (ready_at_s, then task id, then DAG position), first fit
    pytest.param("fcfs", {}, [cpu(0), gpu(0)],
                 [st("face_detection", "t5", 0.5), st("tracking", "t9", 0.2),
                  st("gmm_background", "t3", 0.3), st("gmm_background", "t0", 0.3)], 1.0,
                 {"t9/tracking": ("cpu:0", "CPU only"), "t0/gmm_background": ("gpu:0", "first gpu"),
                  "t3/gmm_background": None, "t5/face_detection": None},
                 id="fcfs-arrival-order"),
    pytest.param("fcfs", {}, [cpu(0), gpu(0)],
                 [st("frame_difference", "t1"), st("gmm_background", "t1")], 0.0,
                 {"t1/gmm_background": ("gpu:0", "first gpu"),
                  "t1/frame_difference": ("cpu:0", "no gpu with room")},
                 id="fcfs-dag-position-breaks-ties"),
    pytest.param("fcfs", {"prefer_gpu": False}, [cpu(0), gpu(0)],
                 [st("gmm_background", "t1", 0.0), st("face_detection", "t2", 0.1)], 0.0,
                 {"t1/gmm_background": ("cpu:0", "first unit"),
                  "t2/face_detection": ("gpu:0", "first unit")},
                 id="fcfs-no-gpu-preference"),
    pytest.param("fcfs", {}, [gpu(0, capacity=2), gpu(1, capacity=2)],
                 [st("face_detection", "t1"), st("face_encoding", "t2"), st("tracking", "t3")],
                 0.0,
                 {"t1/face_detection": ("gpu:0", "first gpu"),
                  "t2/face_encoding": ("gpu:0", "first gpu"), "t3/tracking": None},
                 id="fcfs-first-fit-fills-a-gpu-first"),
    # --- MCT: a busy fast GPU beats an idle slow core when it finishes sooner
    pytest.param("mct", {}, [cpu(0), gpu(0, running=("face_detection",), free_at_s=1.5)],
                 [st("face_encoding")], 1.0, {"t1/face_encoding": None},
                 id="mct-waits-for-busy-gpu"),
    pytest.param("mct", {}, [cpu(0), gpu(0, running=("face_detection",), free_at_s=4.0)],
                 [st("face_encoding")], 1.0, {"t1/face_encoding": ("cpu:0", "earliest")},
                 id="mct-idle-core-when-gpu-busy-too-long"),
    pytest.param("mct", {}, [cpu(0), gpu(0)],
                 [st("face_encoding", "t1", 0.0), st("face_encoding", "t2", 0.1)], 0.0,
                 {"t1/face_encoding": ("gpu:0", "earliest"), "t2/face_encoding": None},
                 id="mct-second-stage-queues-behind-the-first"),
    pytest.param("mct", {}, [cpu(0), gpu(0, capacity=2)],
                 [st("face_encoding", "t1", 0.0), st("face_encoding", "t2", 0.1)], 0.0,
                 {"t1/face_encoding": ("gpu:0", "earliest"),
                  "t2/face_encoding": ("gpu:0", "earliest")},
                 id="mct-co-runs-when-the-gpu-has-room"),
    # gmm: 9.22 s on a core, 0.92 s on a k80. The GPU frees at 8 s: the first gmm waits for it
    # (8.92 s), and books it, so the second finishes sooner on the core (9.22 < 9.84 s).
    pytest.param("mct", {}, [cpu(0), gpu(0, running=("face_detection",), free_at_s=8.0)],
                 [st("gmm_background", "t1", 0.0), st("gmm_background", "t2", 0.1)], 0.0,
                 {"t1/gmm_background": None, "t2/gmm_background": ("cpu:0", "earliest")},
                 id="mct-waiting-stage-books-its-unit"),
    pytest.param("mct", {"reserve_waiting": False},
                 [cpu(0), gpu(0, running=("face_detection",), free_at_s=8.0)],
                 [st("gmm_background", "t1", 0.0), st("gmm_background", "t2", 0.1)], 0.0,
                 {"t1/gmm_background": None, "t2/gmm_background": None},
                 id="mct-without-booking-both-wait"),
    pytest.param("mct", {"wait_for_busy": False},
                 [cpu(0), gpu(0, running=("face_detection",), free_at_s=1.5)],
                 [st("face_encoding")], 1.0, {"t1/face_encoding": ("cpu:0", "earliest")},
                 id="mct-greedy-never-waits"),
    # --- PATS: speedups face_detection 15, frame_difference 6, face_compare 1, tracking 0
    pytest.param("pats", {},
                 [cpu(0), cpu(1), gpu(0), gpu(1, running=("face_encoding",), capacity=2)],
                 [st("tracking", "t1", 0.0), st("frame_difference", "t2", 0.1),
                  st("face_detection", "t3", 0.2), st("face_compare", "t4", 0.3)], 0.0,
                 {"t3/face_detection": ("gpu:0", "highest predicted speedup 15.0"),
                  "t1/tracking": ("cpu:0", "lowest predicted speedup 0.0 (CPU only)"),
                  "t4/face_compare": ("cpu:1", "lowest predicted speedup 1.0"),
                  "t2/frame_difference": None},
                 id="pats-speedup-order-and-no-co-run"),
    pytest.param("pats", {}, [gpu(0), gpu(1)],
                 [st("tracking", "t1"), st("face_compare", "t2", 0.1),
                  st("gmm_background", "t3", 0.2)], 0.0,
                 {"t3/gmm_background": ("gpu:0", "highest"),
                  "t2/face_compare": ("gpu:1", "highest"), "t1/tracking": None},
                 id="pats-cpu-only-stage-never-on-gpu"),
    # --- HEFT: ranks gmm 7196 > gaussian_pyramid 6135 > frame_difference 2349 (ms, cpu+k80)
    pytest.param("heft", {}, [gpu(0)],
                 [st("frame_difference", "t1", 0.0), st("gaussian_pyramid", "t1", 0.0)], 0.0,
                 {"t1/gaussian_pyramid": ("gpu:0", "upward rank"), "t1/frame_difference": None},
                 id="heft-longer-successors-first"),
    pytest.param("heft", {}, [cpu(0), gpu(0)],
                 [st("frame_difference", "t1"), st("gaussian_pyramid", "t1"),
                  st("gmm_background", "t1")], 0.0,
                 {"t1/gmm_background": ("gpu:0", "upward rank 7195"),
                  "t1/gaussian_pyramid": None,  # waits for the GPU (1.53 s < 4.86 s on a core)
                  "t1/frame_difference": ("cpu:0", "earliest est. finish")},
                 id="heft-rank-order-then-earliest-finish"),
    # --- Mystic: cosine(face_detection, face_encoding) 0.977 > (.., frame_difference) 0.778
    pytest.param("mystic", {},
                 [cpu(0), gpu(0, running=("face_encoding",), capacity=2),
                  gpu(1, running=("frame_difference",), capacity=2)],
                 [st("face_detection")], 0.0,
                 {"t1/face_detection": ("gpu:1", "least similar gpu, mean cosine 0.78")},
                 id="mystic-least-similar-gpu"),
    pytest.param("mystic", {},
                 [cpu(0), gpu(0, running=("face_encoding",), capacity=2),
                  gpu(1, running=("frame_difference",), capacity=2), gpu(2, capacity=2)],
                 [st("face_detection"), st("tracking", "t2", 0.1)], 0.0,
                 {"t1/face_detection": ("gpu:2", "cosine 0.00 to nothing"),
                  "t2/tracking": ("cpu:0", "CPU only")},
                 id="mystic-idle-gpu-preferred"),
    pytest.param("mystic", {}, [cpu(0), gpu(0, capacity=2), gpu(1, capacity=2)],
                 [st("face_detection", "t1", 0.0), st("face_encoding", "t2", 0.1)], 0.0,
                 {"t1/face_detection": ("gpu:0", "to nothing"),
                  "t2/face_encoding": ("gpu:1", "to nothing")},
                 id="mystic-sees-its-own-placements"),
    pytest.param("mystic", {},
                 [cpu(0), cpu(1, running=("tracking",)), gpu(0, running=("face_encoding",))],
                 [st("face_detection"), st("gmm_background", "t2", 0.1)], 0.0,
                 {"t1/face_detection": ("cpu:0", "no gpu with room"),
                  "t2/gmm_background": None},
                 id="mystic-full-gpus-fall-back-to-idle-core"),
]


@pytest.mark.parametrize("name,settings,units,ready,now,expected", SCENARIOS)
def test_scenarios(costs, name, settings, units, ready, now, expected):
    scheduler = make_node_scheduler(name, costs=costs, **settings)
    check_expected(scheduler.assign(ready, units, now), ready, units, expected)


def test_mct_remembers_which_unit_a_waiting_stage_waits_for(costs):
    mct = MctUnitScheduler(costs)
    units = [cpu(0), gpu(0, running=("face_detection",), free_at_s=1.5)]
    assert mct.assign([st("face_encoding")], units, 1.0) == []
    assert mct.last_waiting == {("t1", "face_encoding"): "gpu:0"}
    # the wait is worth it: GPU finish (1.5 s + 119 ms) is before the core's (1 s + 2381 ms)
    gpu_finish = 1.5 + costs.gpu_ms("face_encoding", SIZE, "k80") / 1000
    assert gpu_finish < 1.0 + costs.cpu_ms("face_encoding", SIZE) / 1000


def test_heft_upward_ranks_are_exact(costs):
    units = [cpu(0), gpu(0)]

    def mean(s):  # mean over the unit kinds that can run s: (cpu, 1.0) and (gpu, k80)
        gpu_time = costs.gpu_ms(s, SIZE, "k80")
        times = [costs.cpu_ms(s, SIZE)] + ([gpu_time] if gpu_time is not None else [])
        return sum(times) / len(times)

    heft = HeftScheduler(costs)
    rank = {n: heft.upward_rank(st(n), units) for n in
            ("gmm_background", "frame_difference", "gaussian_pyramid", "tracking")}
    assert rank["tracking"] == pytest.approx(costs.cpu_ms("tracking", SIZE))
    assert rank["frame_difference"] == pytest.approx(mean("frame_difference") + mean("tracking"))
    assert rank["gaussian_pyramid"] == pytest.approx(
        mean("gaussian_pyramid") + mean("dog_pyramid") + mean("scale_space_extrema")
        + mean("tracking"))
    assert rank["gmm_background"] == pytest.approx(mean("gmm_background") + mean("tracking"))
    assert rank["gmm_background"] > rank["gaussian_pyramid"] > rank["frame_difference"]
    # the same stage type has another successor chain in video synopsis
    synopsis = heft.upward_rank(st("gmm_background", app="video_synopsis"), units)
    assert synopsis == pytest.approx(mean("gmm_background") + mean("tube_extraction")
                                     + mean("tube_stitching"))
    # kinds, not units: more identical cores do not change the mean
    assert heft.upward_rank(st("gaussian_pyramid"), [cpu(0), cpu(1), cpu(2), gpu(0), gpu(1)]) \
        == pytest.approx(rank["gaussian_pyramid"])


def test_heft_remembers_ranks_only_for_fixed_estimates_and_within_its_bound(costs, monkeypatch):
    from interference.schedulers import heft as heft_module

    class LearningCosts:  # estimates that change between calls (as the executor's measured ones)
        def __init__(self):
            self.scale = 1.0

        def unit_ms(self, stage, input_size, unit):
            ms = costs.unit_ms(stage, input_size, unit)
            return None if ms is None else self.scale * ms

        def cpu_ms(self, stage, input_size, cpu_speed=1.0):
            return self.scale * costs.cpu_ms(stage, input_size, cpu_speed)

    units = [cpu(0), gpu(0)]
    fresh = HeftScheduler(costs)
    first = fresh.upward_rank(st("gaussian_pyramid"), units)
    assert fresh.upward_rank(st("gaussian_pyramid"), units) == first
    # another node's unit kinds are another key, not the remembered rank
    assert fresh.upward_rank(st("gaussian_pyramid"), [cpu(0)]) != first
    learning = LearningCosts()
    heft = HeftScheduler(learning)
    before = heft.upward_rank(st("gaussian_pyramid"), units)
    learning.scale = 2.0
    assert heft.upward_rank(st("gaussian_pyramid"), units) == pytest.approx(2 * before)
    assert heft._ranks == {}
    monkeypatch.setattr(heft_module, "RANK_CACHE_ENTRIES", 3)
    bounded = HeftScheduler(costs)
    for size in range(1000, 1010):
        bounded.upward_rank(st("tracking", size=size), units)
        assert len(bounded._ranks) <= 3


def test_pats_speedup_uses_the_best_gpu_model_of_the_node(costs):
    pats = PatsScheduler(costs)
    stage = st("face_detection")
    units = [cpu(0), gpu(0, "k80"), gpu(1, "v100")]
    best = min(costs.gpu_ms("face_detection", SIZE, m) for m in ("k80", "v100"))
    assert pats.speedup(stage, units) == pytest.approx(costs.cpu_ms("face_detection", SIZE) / best)
    assert pats.speedup(st("tracking"), units) == 0.0
    assert pats.speedup(stage, [cpu(0)]) == pytest.approx(15.0)  # no GPU: reference speedup


def test_mystic_similarity_guards_and_aggregates(costs):
    assert cosine([0.0, 0.0], [1.0, 2.0]) == 0.0
    assert cosine(None, [1.0]) == 0.0
    assert cosine([1.0, 0.0], [2.0, 0.0]) == pytest.approx(1.0)
    mean = MysticScheduler(costs)
    worst = MysticScheduler(costs, aggregate="max")
    running = ("face_encoding", "frame_difference")
    pairs = [cosine(costs.stage("face_detection").gpu_profile, costs.stage(r).gpu_profile)
             for r in running]
    assert mean.similarity("face_detection", running) == pytest.approx(sum(pairs) / 2)
    assert worst.similarity("face_detection", running) == pytest.approx(max(pairs))
    assert mean.similarity("face_detection", ("tracking",)) == 0.0  # CPU stage: no profile
    assert mean.similarity("face_detection", ()) == 0.0
    with pytest.raises(ValueError, match="aggregate"):
        MysticScheduler(costs, aggregate="median")


def test_registry_and_factory(costs):
    assert set(NODE_SCHEDULERS) == {"fcfs", "mct", "pats", "heft", "mystic", "iawp", "vapor",
                                    "sjf_bsbf", "schedtune", "gpu_share", "opportunistic",
                                    "comm_aware", "dual_agent_order", "edf_dvfs", "vgpu_fair",
                                    "sjf_bco_order", "elastic_batch"}
    for name, cls in NODE_SCHEDULERS.items():
        assert cls.name == name
        assert isinstance(make_node_scheduler(name.upper(), costs=costs, seed=3), cls)
    with pytest.raises(ValueError, match="known: comm_aware, .*fcfs, .*heft, iawp, mct, mystic"):
        make_node_scheduler("random")
    with pytest.raises(TypeError):
        make_node_scheduler("pats", costs=costs, prefer_gpu=True)
    assert make_node_scheduler("fcfs", prefer_gpu=False).prefer_gpu is False


@pytest.mark.parametrize("bad,message", [
    (lambda s, t: [Assignment(s, "cpu:0", "x"), Assignment(s, "cpu:1", "x")], "twice"),
    (lambda s, t: [Assignment(t, "gpu:0", "x")], "CPU-only"),
    (lambda s, t: [Assignment(s, "gpu:9", "x")], "unknown unit"),
    (lambda s, t: [Assignment(s, "gpu:0", "x"), Assignment(t, "cpu:1", "x")], "room for 0"),
    (lambda s, t: [Assignment(s, "cpu:0", "x"), Assignment(t, "cpu:0", "x")], "room for 1"),
    (lambda s, t: [Assignment(st("gmm_background", "t7"), "cpu:0", "x")], "not among"),
    (lambda s, t: [Assignment(s, "cpu:0", "  ")], "no reason"),
])
def test_checker_catches_each_broken_rule(bad, message):
    s, t = st("face_detection"), st("tracking", "t2")
    units = [cpu(0), cpu(1, running=("tube_stitching",)), gpu(0, running=("gmm_background",))]
    with pytest.raises(ValueError, match=message):
        validate_assignments(bad(s, t), [s, t], units)


def test_property_every_scheduler_obeys_the_rules(costs):
    rng = random.Random(20210)
    checked = 0
    for _ in range(150):
        units, ready = random_node(rng, max_cpus=4, busy_share=0.3, speeds=[0.5, 1.0, 1.5])
        now = rng.uniform(0, 4)
        for name in NODE_SCHEDULERS:
            out, _ = assign_twice(lambda: make_node_scheduler(name, costs=costs), ready, units,
                                  now)
            kinds = {u.unit_id: u.kind for u in units}
            assert not [a for a in out if a.stage.stage in CPU_ONLY and kinds[a.unit_id] == "gpu"]
            checked += len(out)
            room = {u.unit_id: u.capacity - len(u.running) for u in units}
            for a in out:
                room[a.unit_id] -= 1
            left = [s for s in ready if s not in {a.stage for a in out}]
            if name == "fcfs":  # work-conserving: nothing left that fits a unit with room
                assert not [(s, u) for s in left for u in units if room[u.unit_id] > 0
                            and (u.kind == "cpu" or s.gpu_capable)]
            if name == "pats":  # no idle core while anything waits; no idle GPU for GPU work
                used = {a.unit_id for a in out}
                idle = [u for u in units if not u.running and u.unit_id not in used]
                assert not (left and any(u.kind == "cpu" for u in idle))
                assert not ([s for s in left if s.gpu_capable]
                            and any(u.kind == "gpu" for u in idle))
    assert checked > 300  # the loop did exercise assignments


@pytest.mark.parametrize("module", ["__init__", "_checks", "fcfs", "mct_unit", "pats", "heft",
                                    "mystic"])
def test_docstring_examples_run(module):
    name = "interference.schedulers" + ("" if module == "__init__" else f".{module}")
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted >= 1 and result.failed == 0


# -- IAWP (the paper's node scheduler) ---------------------------------------------------------

def _iawp_units(gpu_running=(), memory_util=0.0):
    from workload.model import ComputingUnit
    return [ComputingUnit("cpu:0", "cpu"), ComputingUnit("cpu:1", "cpu"),
            ComputingUnit("gpu:0", "gpu", model="v100", running=tuple(gpu_running), capacity=2,
                          memory_util=memory_util, memory_mb=16 * 1024)]


def _stage(task, app, name, size=20_000_000, gpu_capable=True, ready=0.0):
    from workload.model import Stage
    return Stage(task, app, name, size, gpu_capable, ready)


def test_iawp_paper_rules_scenarios():
    from interference.schedulers import make_node_scheduler
    from interference.schedulers._checks import validate_assignments
    scheduler = make_node_scheduler("iawp")
    ready = [_stage("t1", "intrusion_detection", "tracking", gpu_capable=False),
             _stage("t2", "face_recognition", "face_encoding"),
             _stage("t3", "video_synopsis", "frame_difference")]
    units = _iawp_units()
    got = scheduler.assign(ready, units, 0.0)
    validate_assignments(got, ready, units)
    where = {a.stage.stage: a.unit_id for a in got}
    # Both GPU-capable stages are queued for the one GPU (queue length 4); the GPU has room for
    # two, so both launch; the CPU-only stage takes an idle core.
    assert where["tracking"].startswith("cpu")
    assert where["face_encoding"] == "gpu:0" and where["frame_difference"] == "gpu:0"
    assert all("IAWP" in a.reason for a in got)


def test_iawp_prefers_the_stage_least_similar_to_what_runs():
    from interference.schedulers import make_node_scheduler
    from interference.schedulers.mystic import cosine
    from workload.estimates import CostModel
    costs = CostModel()
    scheduler = make_node_scheduler("iawp", costs, queue_length=4)
    candidates = ["face_detection", "frame_difference"]
    running = "face_encoding"
    similarity = {c: cosine(costs.stage(c).gpu_profile, costs.stage(running).gpu_profile)
                  for c in candidates}
    expected = min(candidates, key=similarity.get)
    ready = [_stage(f"t{i}", "face_recognition" if c.startswith("face") else "video_synopsis", c)
             for i, c in enumerate(candidates)]
    got = scheduler.assign(ready, _iawp_units(gpu_running=(running,)), 0.0)
    on_gpu = [a.stage.stage for a in got if a.unit_id == "gpu:0"]
    assert on_gpu == [expected]


def test_iawp_keeps_high_speedup_stages_for_the_gpu_and_respects_memory():
    from interference.schedulers import make_node_scheduler
    scheduler = make_node_scheduler("iawp", queue_length=1)
    ready = [_stage("t1", "face_recognition", "face_encoding"),
             _stage("t2", "video_synopsis", "frame_difference")]
    got = scheduler.assign(ready, _iawp_units(memory_util=0.95), 0.0)
    # The GPU is over the memory threshold: nothing launches there, and the queued stage (the
    # larger speed-up) is not handed to a core either; the other one goes to a core.
    assert {a.stage.stage: a.unit_id for a in got} == {"frame_difference": "cpu:0"}


def test_iawp_slowdown_variant_learns_to_avoid_a_pair_that_fails():
    from interference.schedulers import make_node_scheduler
    scheduler = make_node_scheduler("iawp", interference="slowdown", min_combined_throughput=1.0)
    for _ in range(20):
        scheduler.observe_corun("face_detection", "face_encoding", "v100", 0.0)
        scheduler.observe_corun("face_encoding", "face_detection", "v100", 0.0)
    ready = [_stage("t1", "face_recognition", "face_detection")]
    got = scheduler.assign(ready, _iawp_units(gpu_running=("face_encoding",)), 0.0)
    assert got == [] or got[0].unit_id != "gpu:0"
    assert scheduler.observed == 40
