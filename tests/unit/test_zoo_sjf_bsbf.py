"""SJF-BSBF (shortest remaining work first, best sharing benefit first): hand-made nodes where the
order and the partner choice are visible, contrast rows where FCFS / Mystic choose otherwise,
measured co-run rates overriding the profile prior, a property loop through the shared rule
checker, a short simulation run twice, and the settings' guards."""

from __future__ import annotations

import doctest
import random
import re
from functools import partial

import pytest

from interference.schedulers import sjf_bsbf as sjf_bsbf_module
from interference.schedulers.sjf_bsbf import SjfBsbfScheduler, downstream
from stage_builders import (SIZE, assign_twice, check_expected, costs,  # noqa: F401 (fixture)
                            cpu, make, random_node, simulate, st)
from stage_builders import gpu as any_gpu
from workload.catalog import APPLICATIONS

gpu = partial(any_gpu, capacity=2)  # two co-run slots to share unless a row says otherwise

# Remaining work at SIZE on a k80 node (s): face_detection task 0.94, face_compare 0.00,
# intrusion_detection from dog_pyramid 2.41 (the stage itself is 6 ms).
# Prior benefits (profiles): face_detection beside face_encoding 1.11 (SM 0.9 + 0.9),
# beside frame_difference 1.43 (global load 0.6 + 0.8), beside gmm_background 1.25.


ONE = [gpu(0, capacity=1)]
PARTNERS = [gpu(0, running=("face_encoding",), free_at_s=1.0),
            gpu(1, running=("frame_difference",), free_at_s=1.0)]
# The executor measured the prior's favourite pair to run badly and the other one well.
MEASURED = [("face_detection", "frame_difference", "k80", 0.30),
            ("frame_difference", "face_detection", "k80", 0.35),
            ("face_detection", "face_encoding", "k80", 0.95),
            ("face_encoding", "face_detection", "k80", 0.90)]
ALL_BAD = [("face_detection", p, "k80", 0.2) for p in ("face_encoding", "frame_difference")]

# Each row: scheduler, settings, observed co-runs, units, ready stages,
# {task/stage: (unit, reason keyword) or None for "left waiting"}.
SCENARIOS = [
    pytest.param("sjf_bsbf", {}, [], ONE,
                 [st("face_detection", "t1", 0.0), st("face_compare", "t2", 0.1)],
                 {"t2/face_compare": ("gpu:0", "remaining work 0.0s, idle gpu:0 alone"),
                  "t1/face_detection": None},
                 id="shortest-remaining-work-first"),
    pytest.param("fcfs", {}, [], ONE,
                 [st("face_detection", "t1", 0.0), st("face_compare", "t2", 0.1)],
                 {"t1/face_detection": ("gpu:0", "first gpu"), "t2/face_compare": None},
                 id="contrast-fcfs-serves-the-older-long-task"),
    pytest.param("sjf_bsbf", {}, [], ONE,
                 [st("dog_pyramid", "t1", 0.0), st("face_detection", "t2", 0.1)],
                 {"t2/face_detection": ("gpu:0", "remaining work 0.9s"), "t1/dog_pyramid": None},
                 id="the-task-s-remaining-work-not-the-stage-s"),
    pytest.param("sjf_bsbf", {}, [], PARTNERS, [st("face_detection")],
                 {"t1/face_detection": ("gpu:1", "best sharing benefit 1.43 >= 1.00 beside "
                                                 "frame_difference (prior)")},
                 id="best-prior-sharing-benefit"),
    pytest.param("fcfs", {}, [], PARTNERS, [st("face_detection")],
                 {"t1/face_detection": ("gpu:0", "first gpu")},
                 id="contrast-fcfs-first-gpu-with-room"),
    pytest.param("sjf_bsbf", {}, MEASURED, PARTNERS, [st("face_detection")],
                 {"t1/face_detection": ("gpu:0", "best sharing benefit 1.85 >= 1.00 beside "
                                                 "face_encoding (measured)")},
                 id="measured-benefit-overrides-the-prior"),
    pytest.param("mystic", {}, MEASURED, PARTNERS, [st("face_detection")],
                 {"t1/face_detection": ("gpu:1", "least similar")},
                 id="contrast-mystic-ignores-measurements"),
    pytest.param("sjf_bsbf", {"min_observations": 3}, MEASURED, PARTNERS, [st("face_detection")],
                 {"t1/face_detection": ("gpu:1", "1.43 >= 1.00 beside frame_difference (prior)")},
                 id="too-few-measurements-keep-the-prior"),
    pytest.param("sjf_bsbf", {}, ALL_BAD, PARTNERS, [st("face_detection")],
                 {"t1/face_detection": None},  # measured 0.2 + prior 0.56 / 0.71: below 1
                 id="no-beneficial-partner-waits"),
    pytest.param("sjf_bsbf", {"benefit_threshold": 1.5}, [], PARTNERS, [st("face_detection")],
                 {"t1/face_detection": None}, id="threshold-setting-forbids-the-share"),
    pytest.param("sjf_bsbf", {}, [], [gpu(0, running=("frame_difference",)), gpu(1)],
                 [st("face_detection")],
                 {"t1/face_detection": ("gpu:1", "idle gpu:1 alone")},
                 id="an-idle-gpu-before-any-share"),
    pytest.param("sjf_bsbf", {}, [],
                 [gpu(0, running=("frame_difference",), memory_mb=12 * 1024, memory_util=0.95),
                  gpu(1, running=("face_encoding",))],
                 [st("face_detection")],
                 {"t1/face_detection": ("gpu:1", "benefit 1.11 >= 1.00 beside face_encoding")},
                 id="best-partner-without-memory-falls-to-the-next"),
    pytest.param("sjf_bsbf", {}, [], [cpu(0, speed=2.0), gpu(0, capacity=1)],
                 [st("face_compare")],
                 {"t1/face_compare": ("cpu:0", "earliest est. completion")},
                 id="tiny-stage-to-a-faster-core"),
    pytest.param("sjf_bsbf", {}, ALL_BAD,
                 [cpu(0), gpu(0, running=("face_encoding",), free_at_s=60.0)],
                 [st("face_detection"), st("tracking", "t2")],
                 {"t1/face_detection": ("cpu:0", "no idle GPU or beneficial share"),
                  "t2/tracking": None},
                 id="no-share-and-a-late-gpu-the-core-in-sjf-order"),
    pytest.param("sjf_bsbf", {}, [], [cpu(0), gpu(0, memory_mb=512)], [st("face_detection")],
                 {"t1/face_detection": ("cpu:0", "earliest est. completion")},
                 id="never-waits-for-an-idle-gpu-it-cannot-fit"),  # no event would wake it
]


@pytest.mark.parametrize("name,settings,observed,units,ready,expected", SCENARIOS)
def test_scenarios(costs, name, settings, observed, units, ready, expected):
    scheduler = make(name, costs, settings, SjfBsbfScheduler)
    for stage, partner, model, rate in observed:
        scheduler.observe_corun(stage, partner, model, rate)
    check_expected(scheduler.assign(ready, units, 0.5), ready, units, expected)


def test_remaining_work_and_benefit_numbers(costs):
    sched = SjfBsbfScheduler(costs)
    units = [cpu(0), gpu(0)]
    assert downstream("intrusion_detection", "gaussian_pyramid") == (
        "dog_pyramid", "scale_space_extrema", "tracking")
    assert downstream("video_synopsis", "tube_stitching") == ()
    assert downstream("no_such_app", "x") == ()

    def best(name):
        times = [costs.cpu_ms(name, SIZE), costs.gpu_ms(name, SIZE, "k80")]
        return min(t for t in times if t is not None)

    # two ready stages of one task share their successors once
    work = sched.remaining_work_s([st("gmm_background", "t3"), st("frame_difference", "t3")],
                                  units)
    assert work["t3"] == pytest.approx(sum(best(n) for n in (
        "gmm_background", "frame_difference", "tracking")) / 1000)
    benefit, own, source = sched.benefit("face_detection", "frame_difference", "k80")
    assert (benefit, own, source) == (pytest.approx(2 / 1.4), pytest.approx(1 / 1.4), "prior")
    assert sched.prior_rate("face_compare", "face_distance") == 1.0  # nothing oversubscribed
    assert sched.prior_rate("tracking", "face_encoding") == 0.5      # CPU stage: no profile
    sched.observe_corun("face_detection", "frame_difference", "k80", 1.7)  # noise: clipped to 1
    sched.observe_corun("face_detection", "frame_difference", "k80", 0.0)  # a failed launch
    assert sched.rate("face_detection", "frame_difference", "k80") == (0.5, "measured")
    assert sched.rate("face_detection", "frame_difference", "p4")[1] == "prior"  # per GPU model


def test_property_rules_threshold_order_and_progress(costs):
    rng = random.Random(2024)
    gpu_stages = [s.name for a in APPLICATIONS.values() for s in a.stages if s.gpu_capable]
    shared = started = 0
    for _ in range(300):
        units, ready = random_node(rng, max_cpus=3, busy_share=0.4, speeds=[0.5, 1.0, 2.0],
                                   gpu_memory=[0.0, 8 * 1024.0])
        settings = {"benefit_threshold": rng.choice([0.8, 1.0, 1.3])}
        observed = [(rng.choice(gpu_stages), rng.choice(gpu_stages),
                     rng.choice(["k80", "p4"]), rng.uniform(0, 1)) for _ in range(5)]

        def build():
            scheduler = SjfBsbfScheduler(costs, **settings)
            for args in observed:
                scheduler.observe_corun(*args)
            return scheduler

        out, _ = assign_twice(build, ready, units, 0.5)
        gpu_work = []
        for a in out:
            found = re.search(r"best sharing benefit (\d+\.\d\d)", a.reason)
            if found:  # every share meets the threshold (to the reason's rounding)
                shared += 1
                assert float(found.group(1)) >= settings["benefit_threshold"] - 0.005
            if "earliest est." not in a.reason:  # GPU placements go shortest-first
                gpu_work.append(float(re.search(r"remaining work (\d+\.\d)s", a.reason)[1]))
        assert gpu_work == sorted(gpu_work)
        if not any(u.running for u in units) and any(
                u.kind == "cpu" or (s.gpu_capable and not u.memory_mb)
                for s in ready for u in units):
            assert out, (units, ready)  # an idle node always starts something
        started += len(out)
    assert shared > 30 and started > 300  # the loop did exercise shares and placements


def _run(seed: int):
    run = simulate(lambda costs, _: SjfBsbfScheduler(costs, seed=seed), seed)
    return run.result.metrics, run.scheduler


def test_short_simulation_finishes_repeats_and_learns():
    (first, scheduler), (second, _) = _run(11), _run(11)
    assert first.completed == first.tasks == 120
    assert first == second
    assert first.node_scheduler == "sjf_bsbf"
    assert scheduler.measured, "the engine's observe_corun calls reached the scheduler"
    assert all(0.0 <= total / count <= 1.0 for count, total in scheduler.measured.values())


@pytest.mark.parametrize("settings,message", [
    ({"benefit_threshold": 0}, "benefit_threshold"),
    ({"benefit_threshold": -1.0}, "benefit_threshold"),
    ({"min_observations": 0}, "min_observations"),
    ({"min_observations": 1.5}, "min_observations"),
    ({"min_observations": True}, "min_observations"),
])
def test_bad_settings_raise(settings, message):
    with pytest.raises(ValueError, match=message):
        SjfBsbfScheduler(**settings)


def test_docstring_example_runs():
    result = doctest.testmod(sjf_bsbf_module)
    assert result.attempted >= 1 and result.failed == 0
    assert SjfBsbfScheduler.name == "sjf_bsbf"
