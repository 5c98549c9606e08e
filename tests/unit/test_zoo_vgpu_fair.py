"""Virtual multi-channel GPU fair scheduling (credits per tenant, replenished by weight): GPU
starts over a sequence of ``assign`` calls in the weights' proportions, single decisions beside
FCFS, the credit cap, CPU-only stages FCFS, unknown tasks, a property loop through the shared
rule checker, a short simulation and the settings' guards."""

from __future__ import annotations

import doctest
import math
import random

import pytest

from interference.schedulers import validate_assignments
from interference.schedulers import vgpu_fair as vgpu_module
from interference.schedulers.fcfs import FcfsScheduler
from interference.schedulers.task_directory import TaskDirectory
from interference.schedulers.vgpu_fair import VgpuFairScheduler
from stage_builders import (SIZE, assign_twice, check_expected, costs,  # noqa: F401 (fixture)
                            cpu, gpu, random_units, simulate, st)
from workload.catalog import APPLICATIONS
from workload.model import Stage, Task


def tasks_of(tenants: dict[str, int], size: int = SIZE) -> list[Task]:
    return [Task(f"{t}{i:03d}", "face_recognition", size, 0.0, tenant=t)
            for t, n in tenants.items() for i in range(n)]


def run_sequence(costs, weights, calls: int, tenants="ab", period_stages: int = 4,
                 cap_periods: float = 1.0, absent=None) -> tuple[str, VgpuFairScheduler]:
    """One k80 (one slot); every tenant always has face_detection stages ready (all at 0, so
    ties go by task id: 'a...' first); each call is one stage time c after the last (the last
    stage finished). period_s = period_stages x c. ``absent``: (tenant, first call, last call)
    during which that tenant has nothing ready. Returns the tenants of the GPU starts."""
    c = costs.gpu_ms("face_detection", SIZE, "k80") / 1000.0
    tasks = tasks_of({t: calls for t in tenants})
    sched = VgpuFairScheduler(costs, tasks=tasks, weights=weights, period_s=period_stages * c,
                              cap_periods=cap_periods)
    ready = [st("face_detection", t.task_id) for t in tasks]
    seq = ""
    for k in range(calls):
        offer = ready
        if absent and absent[1] <= k <= absent[2]:
            offer = [s for s in ready if not s.task_id.startswith(absent[0])]
        out = sched.assign(offer, [gpu(0)], k * c)
        validate_assignments(out, offer, [gpu(0)])
        assert len(out) == 1, out
        ready.remove(out[0].stage)
        seq += out[0].stage.task_id[0]
    return seq, sched


# Hand derivation (c = one stage's GPU time; credits equal to 1e-9 are a tie, and a tie goes to
# the tenant whose oldest ready stage sorts first: same ready time, so by task id, "a..." first).
# 3:1, period 4c: per period a gets 4c x 3/4 = 3c, b gets c; both start with one allotment.
#   call 0: a 3c > b c -> a (3c -> 2c); call 1: a (2c -> c); call 2: tie c = c -> a (0);
#   call 3: b (c -> 0). Call 4 (t = 4c): +3c / +c (capped at one allotment): again -> "aaab".
# 1:3 mirrors it, except the tie at call 2 still goes to a: b, b, a (tie), b -> "bbab".
# 1:1, period 4c: 2c each: a (tie), b, a (tie), b -> "ab" repeated.
# 2:1, period 3c: a 2c, b c: a (2c -> c), a (tie c = c), b -> "aab".
@pytest.mark.parametrize("weights,period_stages,pattern,counts", [
    ({"a": 1, "b": 1}, 4, "ab", {"a": 30, "b": 30}),
    ({"a": 3, "b": 1}, 4, "aaab", {"a": 45, "b": 15}),
    ({"a": 1, "b": 3}, 4, "bbab", {"a": 15, "b": 45}),
    ({}, 4, "ab", {"a": 30, "b": 30}),  # no weights: equal by default
    ({"a": 2.0}, 3, "aab", {"a": 40, "b": 20}),  # b unlisted: default weight 1
], ids=["1:1", "3:1", "1:3", "default-equal", "2:1"])
def test_gpu_starts_follow_the_weights(costs, weights, period_stages, pattern, counts):
    seq, sched = run_sequence(costs, weights, 60, period_stages=period_stages)
    assert seq == pattern * (60 // len(pattern))
    assert sched.gpu_starts == counts


def test_weights_hold_when_the_period_does_not_divide(costs):
    # 2:1 over a 4-stage period: no repeating pattern, but within one start of 40:20.
    seq, _ = run_sequence(costs, {"a": 2.0}, 60, period_stages=4)
    assert abs(seq.count("a") - 40) <= 1 and abs(seq.count("b") - 20) <= 1, seq


def test_contrast_fcfs_ignores_tenants(costs):
    tasks = tasks_of({"a": 40, "b": 40})
    ready = sorted((st("face_detection", t.task_id) for t in tasks), key=lambda s: s.task_id)
    seq = ""
    for k in range(40):
        out = FcfsScheduler(costs).assign(ready, [gpu(0)], float(k))
        ready.remove(out[0].stage)
        seq += out[0].stage.task_id[0]
    assert seq == "a" * 40  # arrival order (ids at equal ready times): tenant b starves


def test_credit_cap_stops_hoarding(costs):
    # Equal weights, period 2c: c each per period while both are active. b is away for calls
    # 2-21 (10 periods): a, alone, gets the whole 2c per period and spends it (no debt); b, as
    # if it joined, gets c per period, capped at one allotment (c). Call 22 (t = 22c): a 0 + c,
    # b c: they alternate, 3 starts each. With an effectively unlimited cap b returns with
    # 12c and takes all 6.
    capped, _ = run_sequence(costs, {}, 28, period_stages=2, absent=("b", 2, 21))
    hoard, _ = run_sequence(costs, {}, 28, period_stages=2, cap_periods=1e6,
                            absent=("b", 2, 21))
    assert capped[2:22] == hoard[2:22] == "a" * 20
    assert capped[22:] == "ababab", capped
    assert hoard[22:] == "bbbbbb", hoard


# Single decisions. Each row: weights, tenants' tasks (task -> tenant), units, ready stages,
# expected {task: (unit, reason keyword) or None for "waits"}.
TEN = {"a1": "a", "a2": "a", "b1": "b", "b2": "b"}
DECISIONS = [
    # a arrived first, but b (weight 3) holds 3/4 of the credits: b gets the slot.
    pytest.param({"a": 1, "b": 3}, [gpu(0)],
                 [st("face_detection", "a1", 0.0), st("face_detection", "b1", 0.5)],
                 {"b1": ("gpu:0", "tenant 'b' (weight 3) has the most credits"), "a1": None},
                 id="most-credits-not-first-come"),
    # equal credits: the tenant whose oldest ready stage arrived first (b1 at 0.1)
    pytest.param({}, [gpu(0)],
                 [st("face_detection", "a1", 0.2), st("face_detection", "b1", 0.1)],
                 {"b1": ("gpu:0", "tenant 'b'"), "a1": None}, id="tie-by-arrival"),
    # two GPU slots: one each (credits 0.5 x 2 slots = 1.0 GPU-s each; a pays 0.697)
    pytest.param({}, [gpu(0), gpu(1)],
                 [st("face_detection", "a1", 0.0), st("face_detection", "a2", 0.1),
                  st("face_detection", "b1", 0.2)],
                 {"a1": ("gpu:0", "tenant 'a'"), "b1": ("gpu:1", "tenant 'b'"), "a2": None},
                 id="second-slot-to-the-other-tenant"),
    # a co-run slot: the idle GPU first (least loaded)
    pytest.param({}, [gpu(0, capacity=2, running=("face_encoding",)), gpu(1)],
                 [st("face_detection", "a1")], {"a1": ("gpu:1", "on gpu:1")},
                 id="least-loaded-gpu"),
    # CPU-only stages FCFS on cores; a GPU stage waits for the busy GPU, not for a core
    pytest.param({}, [cpu(0), cpu(1), gpu(0, running=("face_encoding",))],
                 [st("face_detection", "a1", 0.0), st("tracking", "b1", 0.1),
                  st("tube_stitching", "b2", 0.2)],
                 {"b1": ("cpu:0", "CPU-only stage, FCFS"), "b2": ("cpu:1", "FCFS"), "a1": None},
                 id="cpu-only-fcfs-gpu-stage-waits"),
    # no GPU on the node: a GPU-capable stage runs on a core (it would wait forever)
    pytest.param({}, [cpu(0)], [st("face_detection", "a1")],
                 {"a1": ("cpu:0", "no GPU here can take it")}, id="no-gpu-node"),
    # too big for an empty 512 MB GPU: to a core too
    pytest.param({}, [cpu(0), gpu(0, memory_mb=512)], [st("face_detection", "a1")],
                 {"a1": ("cpu:0", "no GPU here can take it")}, id="never-fits-the-gpu"),
]


@pytest.mark.parametrize("weights,units,ready,expected", DECISIONS)
def test_decisions(costs, weights, units, ready, expected):
    tasks = [Task(t, "face_recognition", SIZE, tenant=tenant) for t, tenant in TEN.items()]
    out = VgpuFairScheduler(costs, tasks=tasks, weights=weights).assign(ready, units, 1.0)
    check_expected(out, ready, units, expected, key=lambda s: s.task_id)


def test_unknown_tasks_are_the_empty_tenant(costs):
    sched = VgpuFairScheduler(costs, tasks=tasks_of({"a": 1}))
    out = sched.assign([st("face_detection", "stranger"), st("face_detection", "a000", 0.1)],
                       [gpu(0), gpu(1)], 0.0)
    assert [a.stage.task_id for a in out] == ["stranger", "a000"]  # equal credits: arrival
    assert "tenant '' (weight 1)" in out[0].reason
    assert sched.gpu_starts == {"": 1, "a": 1}
    # no directory at all: every task is tenant "", plain arrival order on the GPU
    out = VgpuFairScheduler(costs).assign([st("face_detection", "x", 0.2),
                                           st("face_detection", "y", 0.1)], [gpu(0)], 0.0)
    assert [a.stage.task_id for a in out] == ["y"]


def test_credits_spent_by_estimated_gpu_time(costs):
    sched = VgpuFairScheduler(costs, tasks=tasks_of({"a": 2}), period_s=2.0)
    sched.assign([st("face_detection", "a000")], [gpu(0, "v100")], 0.0)
    # one tenant, 1 slot: allotment 2.0 GPU-s; minus face_detection on a v100 (0.0795 s)
    assert sched.credits["a"] == pytest.approx(2.0 - costs.gpu_ms("face_detection", SIZE,
                                                                  "v100") / 1000)
    sched.assign([st("face_detection", "a001")], [gpu(0, "v100")], 4.5)  # 2 periods: capped
    assert sched.credits["a"] == pytest.approx(2.0 - costs.gpu_ms("face_detection", SIZE,
                                                                  "v100") / 1000)
    assert sched.last_replenish_s == 4.0


@pytest.mark.parametrize("kwargs,message", [
    ({"weights": {"a": 0}}, "weight of tenant"),
    ({"weights": {"a": -1.0}}, "weight of tenant"),
    ({"weights": {"a": math.nan}}, "weight of tenant"),
    ({"weights": {"a": True}}, "weight of tenant"),
    ({"weights": {1: 1.0}}, "tenant names"),
    ({"weights": [("a", 1.0)]}, "weights must map"),
    ({"default_weight": math.inf}, "default_weight"),
    ({"period_s": 0}, "period_s"),
    ({"period_s": math.nan}, "period_s"),
    ({"cap_periods": -1}, "cap_periods"),
    ({"tasks": [Task("t", "face_recognition", 1, tenant="bad name")]}, "tenant"),
    ({"tasks": 7}, "list of Task"),
    ({"max_tasks": -1}, "max_entries"),
])
def test_bad_settings_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        VgpuFairScheduler(**kwargs)


def test_bad_inputs_raise(costs):
    with pytest.raises(ValueError, match="now_s"):
        VgpuFairScheduler(costs).assign([st("face_detection", "a")], [gpu(0)], math.inf)
    with pytest.raises(TypeError):
        VgpuFairScheduler(costs, quantum_s=1.0)  # unknown setting
    shared = TaskDirectory(tasks_of({"a": 1}))
    assert VgpuFairScheduler(costs, tasks=shared).directory is shared


def test_property_rules_and_gpu_stages_stay_off_cores(costs):
    rng = random.Random(171)
    started = 0
    for _ in range(200):
        units = random_units(rng)
        ready, tasks = [], []
        for t in range(rng.randint(0, 8)):
            app = rng.choice(list(APPLICATIONS))
            name = rng.choice([s.name for s in APPLICATIONS[app].stages])
            capable = APPLICATIONS[app].stage(name).gpu_capable
            ready.append(Stage(f"t{t}", app, name, SIZE, capable, round(rng.uniform(0, 2), 1)))
            tasks.append(Task(f"t{t}", app, SIZE, tenant=rng.choice("abc")))
        weights = {"a": rng.choice([1.0, 3.0])}
        out, _ = assign_twice(lambda: VgpuFairScheduler(costs, tasks=tasks, weights=weights),
                              ready, units, 2.0)
        kinds = {u.unit_id: u.kind for u in units}
        has_gpu = any(u.kind == "gpu" for u in units)
        for a in out:
            if a.stage.gpu_capable and has_gpu:
                assert kinds[a.unit_id] == "gpu", a  # every GPU here fits SIZE's 914 MB
        started += len(out)
    assert started > 200


def test_short_simulation_completes_every_task():
    from workload.task_attributes import with_tenants_and_deadlines
    run = simulate(lambda costs, tasks: VgpuFairScheduler(costs, tasks=tasks,
                                                          weights={"a": 3, "b": 1}),
                   5, tasks=60, prepare=lambda _, tasks: with_tenants_and_deadlines(
                       tasks, {"a": 3, "b": 1}, deadline_factor=None, seed=5))
    metrics, scheduler = run.result.metrics, run.scheduler
    assert metrics.completed == metrics.tasks == 60
    assert metrics.node_scheduler == "vgpu_fair"
    assert set(scheduler.gpu_starts) == {"a", "b"}


def test_docstring_example_runs():
    result = doctest.testmod(vgpu_module)
    assert result.attempted >= 1 and result.failed == 0
    assert VgpuFairScheduler.name == "vgpu_fair"
