"""Interference-aware opportunistic placement (``opportunistic``): hand-made nodes where packing
onto a GPU in use, the slowdown bound, the memory bound and the core-or-wait rule are visible,
each beside a simpler rule that decides otherwise; a random property loop; a simulator run."""

from __future__ import annotations

import doctest
import math
import random
from functools import partial

import pytest

import interference.schedulers.opportunistic as opportunistic_module
from interference.schedulers import make_node_scheduler
from interference.schedulers.opportunistic import (UNKNOWN_PAIR_SLOWDOWN,
                                                   OpportunisticScheduler, PairSlowdown)
from stage_builders import (SIZE, assign_twice, check_expected, costs,  # noqa: F401 (fixture)
                            cpu, gpu_running, label, simulate, st)
from workload.catalog import APPLICATIONS
from workload.model import Stage

# SIZE: a 10 s 640x480 clip at 25 fps: 914 MB of GPU memory per stage.
gpu = partial(gpu_running, capacity=2)  # gpu(i, *running): two co-run slots unless a row says


# Profile prior (calibration): face_detection next to face_compare 1.00 (no metric sums past
# 1), next to face_encoding 1.80 (both at SM 0.9). face_detection: 10.5 s on a core, 0.70 s on
# a k80 at SIZE.
# Rows: settings, units, ready, now, {stage: (unit, keyword) or None = waits},
#       contrast: (a simpler scheduler, a stage, the unit it picks there or None = waits),
#       which must differ from this scheduler's choice for that stage.
SCENARIOS = [
    pytest.param({}, [cpu(0), gpu(0), gpu(1, "face_compare", free_at_s=2.0)],
                 [st("face_detection")], 0.0,
                 {"t1/face_detection": ("gpu:1", "pack onto busy gpu:1 (runs face_compare), "
                                                 "worst predicted slowdown 1.00 <= 1.50")},
                 ("mystic", "t1/face_detection", "gpu:0"),
                 id="packs-onto-a-gpu-in-use-not-the-idle-one"),
    pytest.param({}, [cpu(0), gpu(0), gpu(1, "face_compare", free_at_s=2.0)],
                 [st("face_detection")], 0.0,
                 {"t1/face_detection": ("gpu:1", "(profile)")},
                 ("mct", "t1/face_detection", "gpu:0"), id="mct-would-open-the-idle-gpu"),
    pytest.param({}, [cpu(0), gpu(1, "face_encoding"), gpu(0)],
                 [st("face_detection")], 0.0,
                 {"t1/face_detection": ("gpu:0", "refused gpu:1 slowdown 1.80 > 1.50")},
                 ("fcfs", "t1/face_detection", "gpu:1"),
                 id="refuses-a-pair-over-the-slowdown-bound"),
    pytest.param({"max_slowdown": 2.0}, [cpu(0), gpu(1, "face_encoding"), gpu(0)],
                 [st("face_detection")], 0.0,
                 {"t1/face_detection": ("gpu:1", "slowdown 1.80 <= 2.00")},
                 ("mystic", "t1/face_detection", "gpu:0"), id="a-looser-bound-accepts-the-pair"),
    pytest.param({}, [cpu(0), gpu(1, "face_compare", model="p4", memory_mb=8192.0,
                                  memory_util=0.8),
                      gpu(0, model="p4", memory_mb=8192.0)],
                 [st("face_detection")], 0.0,
                 # 0.8 * 8192 + 914 = 7468 MB > 0.9 * 8192 = 7373 MB
                 {"t1/face_detection": ("gpu:0", "refused gpu:1 memory")},
                 ("fcfs", "t1/face_detection", "gpu:1"),
                 id="refuses-a-gpu-whose-memory-would-pass-the-bound"),
    pytest.param({}, [cpu(0), gpu(0), gpu(1)],
                 [st("face_compare", "t1"), st("face_distance", "t2", 0.1)], 0.0,
                 {"t1/face_compare": ("gpu:0", "idle gpu:0"),
                  "t2/face_distance": ("gpu:0", "pack onto busy gpu:0")},
                 ("mystic", "t2/face_distance", "gpu:1"), id="consolidates-a-call-onto-one-gpu"),
    pytest.param({}, [cpu(0), gpu(0, "face_encoding", free_at_s=100.0)],
                 [st("face_detection")], 0.0,
                 {"t1/face_detection": ("cpu:0", "beats waiting for gpu:0 (100.70s)")},
                 ("fcfs", "t1/face_detection", "gpu:0"), id="core-when-faster-than-waiting"),
    pytest.param({}, [cpu(0), gpu(0, "face_encoding", free_at_s=1.0)],
                 [st("face_detection")], 0.0, {"t1/face_detection": None},
                 ("mystic", "t1/face_detection", "gpu:0"),
                 id="waits-for-a-refused-gpu-that-frees-soon"),
    pytest.param({}, [cpu(0), cpu(1, speed=2.0), gpu(0)],
                 [st("tracking")], 0.0, {"t1/tracking": ("cpu:1", "CPU only, fastest free core")},
                 ("fcfs", "t1/tracking", "cpu:0"), id="cpu-only-stage-takes-the-fastest-core"),
]


@pytest.mark.parametrize("settings, units, ready, now, expected, contrast", SCENARIOS)
def test_scenarios(costs, settings, units, ready, now, expected, contrast):
    out = OpportunisticScheduler(costs, **settings).assign(ready, units, now)
    got = check_expected(out, ready, units, expected)
    other, stage, other_unit = contrast
    theirs = {label(a.stage): a.unit_id
              for a in make_node_scheduler(other, costs=costs).assign(ready, units, now)}
    assert theirs.get(stage) == other_unit, theirs
    assert (got[stage].unit_id if stage in got else None) != other_unit


def test_measurements_override_the_profile_prior(costs):
    scheduler = OpportunisticScheduler(costs)
    units = [cpu(0), gpu(1, "face_encoding"), gpu(0)]
    ready = [st("face_detection")]
    assert scheduler.assign(ready, units, 0.0)[0].unit_id == "gpu:0"  # prior 1.80: refused
    # measured: the pair barely interferes (rates 0.9 -> slowdown 1.11 each way)
    scheduler.observe_corun("face_detection", "face_encoding", "k80", 0.9)
    scheduler.observe_corun("face_encoding", "face_detection", "k80", 0.9)
    got = scheduler.assign(ready, units, 0.0)[0]
    assert got.unit_id == "gpu:1" and "1.11 <= 1.50 (measured)" in got.reason
    # ... but on another GPU model the prior still holds
    assert scheduler.assign(ready, [cpu(0), gpu(1, "face_encoding", model="v100"),
                                    gpu(0, model="v100")], 0.0)[0].unit_id == "gpu:0"
    # a failed launch next to it (rate 0) rules the pair out from then on
    scheduler.observe_corun("face_encoding", "face_detection", "k80", 0.0)
    assert scheduler.assign(ready, units, 0.0)[0].unit_id == "gpu:0"
    assert scheduler.slowdowns.observations == 3


def test_pair_slowdown_prior_average_and_bound(costs):
    pairs = PairSlowdown(lambda s: costs.stage(s).gpu_profile, measurement_weight=0.5,
                         max_pairs=2)
    assert pairs.prior("face_detection", "face_encoding") == pytest.approx(1.8)
    assert pairs.prior("face_compare", "face_distance") == 1.0  # nothing oversubscribed
    assert pairs.prior("face_detection", "tracking") == UNKNOWN_PAIR_SLOWDOWN  # no profile
    pairs.observe("a", "b", "k80", 0.5)           # slowdown 2
    pairs.observe("a", "b", "k80", 1.0)           # 1, averaged: 1.5
    assert pairs.pair("a", "b", "k80") == (1.5, "measured")
    pairs.observe("a", "b", "k80", 2.0)           # faster than estimated: counts as 1
    assert pairs.pair("a", "b", "k80")[0] == pytest.approx(1.25)
    assert pairs.predict("a", ["b", "b"], "k80") == pytest.approx(1.25 ** 2)
    pairs.observe("c", "d", "k80", 0.0)
    pairs.observe("e", "f", "k80", 0.5)           # third pair: the stalest (a, b) goes
    assert ("a", "b", "k80") not in pairs.measured and len(pairs.measured) == 2
    assert math.isinf(pairs.pair("c", "d", "k80")[0])
    with pytest.raises(ValueError, match="measured_rate"):
        pairs.observe("a", "b", "k80", -0.1)


def _random_node(rng: random.Random):
    gpu_stages = [s.name for a in APPLICATIONS.values() for s in a.stages if s.gpu_capable]
    units = [cpu(i, speed=rng.choice([0.5, 1.0, 2.0]),
                 running=("tracking",) if rng.random() < 0.4 else (),
                 free_at_s=rng.uniform(0, 5)) for i in range(rng.randint(0, 3))]
    for i in range(rng.randint(0, 3)):
        capacity = rng.randint(1, 3)
        running = tuple(rng.sample(gpu_stages, rng.randint(0, capacity)))
        memory = rng.choice([0.0, 8192.0, 12288.0])
        units.append(gpu(i, *running, model=rng.choice(["k80", "p4", "v100"]),
                         capacity=capacity, free_at_s=rng.uniform(0, 5) if running else 0.0,
                         memory_mb=memory, memory_util=rng.uniform(0, 0.9) if running else 0.0))
    rng.shuffle(units)
    ready = []
    for t in range(rng.randint(0, 8)):
        app = rng.choice(list(APPLICATIONS.values()))
        name = rng.choice([s.name for s in app.stages])
        ready.append(Stage(f"t{t}", app.app_id, name, rng.choice([36_864, 20_000_000, SIZE]),
                           app.stage(name).gpu_capable, round(rng.uniform(0, 3), 1)))
    return units, ready


def test_property_rules_bounds_and_determinism(costs):
    rng = random.Random(61)
    placed = packed = 0
    for _ in range(300):
        units, ready = _random_node(rng)
        settings = {"max_slowdown": rng.choice([1.0, 1.3, 1.5, 2.0])}
        out, scheduler = assign_twice(lambda: OpportunisticScheduler(costs, **settings), ready,
                                      units, 1.0)
        by_id = {u.unit_id: u for u in units}
        final = {u.unit_id: list(u.running) for u in units}
        added_mb = {u.unit_id: 0.0 for u in units}
        for a in out:
            final[a.unit_id].append(a.stage.stage)
            if by_id[a.unit_id].kind == "gpu":
                added_mb[a.unit_id] += costs.gpu_memory_mb(a.stage.stage, a.stage.input_size)
        for uid, extra in added_mb.items():
            unit = by_id[uid]
            if not extra:
                continue
            placed += 1
            if unit.memory_mb:  # the memory bound holds on every GPU that received stages
                assert unit.memory_util * unit.memory_mb + extra <= 0.9 * unit.memory_mb + 1e-6
            if len(final[uid]) >= 2:  # and every party's predicted slowdown is bounded
                packed += 1
                for i, party in enumerate(final[uid]):
                    rest = final[uid][:i] + final[uid][i + 1:]
                    assert scheduler.slowdowns.predict(party, rest, unit.model) \
                        <= settings["max_slowdown"] + 1e-9
        # no GPU-capable stage waits while an idle GPU could hold it
        taken = {label(a.stage) for a in out}
        idle = [u for u in units if u.kind == "gpu" and not final[u.unit_id] and u.capacity]
        for s in ready:
            if label(s) not in taken and s.gpu_capable:
                need = costs.gpu_memory_mb(s.stage, s.input_size)
                assert not [u for u in idle if not u.memory_mb or need <= 0.9 * u.memory_mb]
    assert placed > 100 and packed > 10  # the loop exercised packing


class Recording(OpportunisticScheduler):
    """The same scheduler, keeping the reasons it gave (the engine logs starts only)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.reasons: list[str] = []

    def assign(self, ready, units, now_s):
        out = super().assign(ready, units, now_s)
        self.reasons.extend(a.reason for a in out)
        return out


def test_simulator_run_finishes_and_repeats():
    runs = []
    for _ in range(2):
        run = simulate(lambda paper, _: Recording(paper, seed=3), 3)
        runs.append(run.result.metrics)
        scheduler = run.scheduler
        assert scheduler.slowdowns.observations > 0  # it heard the co-runs it caused
        assert any("pack onto busy" in r for r in scheduler.reasons)
        assert any("refused" in r for r in scheduler.reasons)
    assert runs[0].completed == len(run.tasks) and runs[0].node_scheduler == "opportunistic"
    assert runs[0] == runs[1]


@pytest.mark.parametrize("settings, message", [
    ({"max_slowdown": 0.9}, "max_slowdown"),
    ({"max_slowdown": math.inf}, "max_slowdown"),
    ({"max_slowdown": math.nan}, "max_slowdown"),
    ({"memory_bound": 0.0}, "memory_bound"),
    ({"memory_bound": 1.2}, "memory_bound"),
    ({"measurement_weight": 0.0}, "measurement_weight"),
    ({"measurement_weight": 1.5}, "measurement_weight"),
])
def test_bad_settings_raise(settings, message):
    with pytest.raises(ValueError, match=message):
        OpportunisticScheduler(**settings)


def test_name_and_doctest():
    assert OpportunisticScheduler.name == "opportunistic"
    result = doctest.testmod(opportunistic_module)
    assert result.attempted >= 1 and result.failed == 0
