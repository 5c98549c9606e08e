"""Hostile input to the executor's online learning (batch sizes, measured stage costs, the
co-run baseline and learner, the NVML readings): nothing non-finite or implausible is learned
from, one bad record moves no choice, refusals are counted and have no other effect, and the
per-name tables stay bounded. Each table row is one record an outside probe sent."""

from __future__ import annotations

import math
import sys
import tracemalloc
import types

import pytest

from interference.executor.batch_sizer import (MAX_KEYS, MAX_SIZES, STALE_AFTER, BatchSizer,
                                               LatencyTable)
from interference.executor.corun import CoRun, CoRunLearner, CostBaseline
from interference.executor.host_stats import HostStats
from interference.executor.stage_costs import MeasuredStageCosts
from interference.executor.telemetry import NodeTelemetry
from workload.estimates import CostModel
from workload.model import ComputingUnit, Stage
from workload.operators import BatchPolicy

NAN, INF = float("nan"), float("inf")
GPU = ComputingUnit("gpu:0", "gpu", model="t4", capacity=2, memory_mb=16000.0)

#: (timing sent, the reason it is refused for)
BAD_MS = [
    (NAN, "non-finite"), (INF, "non-finite"), (-INF, "non-finite"), (10**400, "non-finite"),
    (-1.0, "non-positive"), (0.0, "non-positive"), (0, "non-positive"),
    (1e-12, "implausible"), (3.6e6 + 1.0, "implausible"), (1e9, "implausible"),
    (True, "non-numeric"), (False, "non-numeric"), ("5", "non-numeric"), ("nan", "non-numeric"),
    (None, "non-numeric"), ([5.0], "non-numeric"),
]
BAD_IDS = [repr(v)[:12] for v, _ in BAD_MS]


# -- 1. BatchSizer ---------------------------------------------------------------------------

def trained_sizer(**kw) -> BatchSizer:
    """Sizes 1, 2, 4, 8 at 5, 7, 11, 19 ms (3 samples each), target 50 ms: chooses 8."""
    sizer = BatchSizer({"m": BatchPolicy((1, 2, 4, 8), latency_target_ms=50.0)}, **kw)
    for _ in range(3):
        for n, ms in ((1, 5.0), (2, 7.0), (4, 11.0), (8, 19.0)):
            sizer.observe("m", "gpu", n, ms)
    return sizer


@pytest.mark.parametrize("bad,why", BAD_MS, ids=BAD_IDS)
def test_the_sizer_refuses_a_bad_timing_and_changes_nothing(bad, why):
    sizer = trained_sizer()
    before = sizer.report()
    sizer.observe("m", "gpu", 8, bad)
    assert sizer.report() == before and sizer.choose("m", "gpu") == 8
    assert sizer.refused == {why: 1}


@pytest.mark.parametrize("stage,n,why", [
    ("m", 0, "bad-size"), ("m", -4, "bad-size"), ("m", 2.5, "bad-size"), ("m", True, "bad-size"),
    ("m", "8", "bad-size"), ("m", 10**7, "bad-size"), ("no_policy", 8, "unknown-stage"),
])
def test_the_sizer_refuses_bad_sizes_and_stages_without_a_policy(stage, n, why):
    sizer = trained_sizer()
    before = sizer.report()
    sizer.observe(stage, "gpu", n, 5.0)
    assert sizer.report() == before and sizer.refused == {why: 1}


#: (latency per size, target ms, size the spike hits, spike ms): one believable spike
SPIKES = [
    ({1: 5.0, 2: 7.0, 4: 11.0, 8: 19.0}, 50.0, 8, 200.0),
    ({1: 5.0, 2: 7.0, 4: 11.0, 8: 19.0}, 50.0, 8, 3.6e6),     # an hour: believed, outvoted
    ({1: 3.0, 2: 4.0, 4: 5.0, 8: 9.0}, 6.0, 4, 200.0),        # 5 ms batches, target 6 ms
    ({1: 3.0, 2: 4.0, 4: 5.0, 8: 9.0}, 6.0, 2, 200.0),        # a spike below the choice
    ({1: 3.0, 2: 4.0, 4: 5.0, 8: 9.0}, 6.0, 8, 1e-3),         # a spike down above it
]


@pytest.mark.parametrize("table,target,size,spike", SPIKES)
def test_one_spike_does_not_move_the_chosen_size(table, target, size, spike):
    sizer = BatchSizer({"m": BatchPolicy((1, 2, 4, 8), latency_target_ms=target)})
    for _ in range(3):
        for n, ms in table.items():
            sizer.observe("m", "gpu", n, ms)
    before = sizer.choose("m", "gpu")
    sizer.observe("m", "gpu", size, spike)
    assert sizer.choose("m", "gpu") == before


def test_a_size_held_back_by_an_old_estimate_is_re_probed_and_comes_back():
    sizer = trained_sizer()
    for _ in range(20):  # the node was busy: 8 took 60 ms, over the 50 ms target
        sizer.observe("m", "gpu", 8, 60.0)
    assert sizer.choose("m", "gpu") == 4
    chosen = []
    for _ in range(3 * STALE_AFTER):  # busy no more: 8 takes 19 ms again
        size = sizer.choose("m", "gpu")
        chosen.append(size)
        sizer.observe("m", "gpu", size, {4: 11.0, 8: 19.0}[size])
    first = chosen.index(8)
    assert first == STALE_AFTER and set(chosen[first:]) == {8}  # deterministic, then for good


def test_a_size_that_stays_slow_is_probed_once_per_stale_interval_only():
    sizer = trained_sizer()
    for _ in range(20):
        sizer.observe("m", "gpu", 8, 60.0)
    chosen = []
    for _ in range(10 * STALE_AFTER):
        size = sizer.choose("m", "gpu")
        chosen.append(size)
        sizer.observe("m", "gpu", size, {4: 11.0, 8: 60.0}[size])
    probes = [i for i, s in enumerate(chosen) if s == 8]
    assert 1 <= len(probes) <= 10
    assert all(b - a >= STALE_AFTER for a, b in zip(probes, probes[1:]))
    assert sizer.report()["m"]["gpu"]["batch_size"] == 4  # reading the report probes nothing


# -- 2. MeasuredStageCosts / LatencyTable ----------------------------------------------------

def trained_costs() -> MeasuredStageCosts:
    """score: 6 ms on a core, 2 ms on the GPU (speed-up 3), five calls each."""
    costs = MeasuredStageCosts({"embed": "gpu", "score": "any", "parse": "cpu"}, default_ms=2.0)
    for _ in range(5):
        costs.add_run("score", "cpu", 1, 6.0)
        costs.add_run("score", "gpu", 1, 2.0)
    return costs


def state(costs: MeasuredStageCosts) -> tuple:
    return (costs.stage("score").gpu_speedup, costs.cpu_ms("score", 1),
            costs.gpu_ms("score", 1, "t4"), costs.measured(Stage("b1", "op", "score", 1), GPU))


@pytest.mark.parametrize("where", ["add_run", "add_alone"])
@pytest.mark.parametrize("bad,why", BAD_MS, ids=BAD_IDS)
def test_measured_costs_refuse_a_bad_timing_before_touching_a_table(bad, why, where):
    costs = trained_costs()
    stage = Stage("b1", "op", "score", 1)
    costs.add_alone(stage, GPU, 2.0)  # the skipped first alone call
    before = state(costs)
    if where == "add_run":
        costs.add_run("score", "gpu", 1, bad)
    else:
        costs.add_alone(stage, GPU, bad)
    assert state(costs) == before and costs.refused == {why: 1}
    assert costs.alone.samples(("score", "gpu"), 1) == []  # no half-written entry
    costs.add_alone(stage, GPU, 2.0)  # and a good one after it is learned as usual
    assert costs.measured(stage, GPU)


def test_a_refused_alone_timing_does_not_spend_the_skipped_first_call():
    costs = trained_costs()
    stage = Stage("b1", "op", "score", 1)
    costs.add_alone(stage, GPU, None)
    costs.add_alone(stage, GPU, 2.0)  # the real first call: skipped
    assert not costs.measured(stage, GPU)


#: (table, unit kind, spike ms): one extreme but believable sample of "score"
COST_SPIKES = [("add_run", "gpu", 200.0), ("add_run", "gpu", 3.6e6), ("add_run", "cpu", 1e-3),
               ("add_alone", "gpu", 200.0), ("add_alone", "gpu", 3.6e6),
               ("add_alone", "gpu", 1e-3)]


@pytest.mark.parametrize("where,kind,spike", COST_SPIKES)
def test_one_extreme_sample_does_not_swing_the_speedup(where, kind, spike):
    costs = trained_costs()
    unit = GPU if kind == "gpu" else ComputingUnit("cpu:0", "cpu")
    stage = Stage("b1", "op", "score", 1)
    if where == "add_run":
        costs.add_run("score", kind, 1, spike)
    else:
        costs.add_alone(stage, unit, 2.0)  # skipped
        costs.add_alone(stage, unit, spike)
    assert costs.stage("score").gpu_speedup == pytest.approx(3.0)


@pytest.mark.parametrize("kwargs", [{"default_ms": 0.0}, {"default_ms": NAN},
                                    {"gpu_speedup_prior": 0.0}, {"gpu_speedup_prior": INF}])
def test_measured_costs_reject_a_zero_or_non_finite_default(kwargs):
    with pytest.raises(ValueError):
        MeasuredStageCosts({"s": "any"}, **kwargs)


def test_a_stage_the_operator_does_not_have_is_refused():
    costs = trained_costs()
    costs.add_run("nobody", "gpu", 1, 2.0)
    assert costs.refused == {"unknown-stage": 1} and costs.any_run.adds(("nobody", "gpu")) == 0


# -- 3. CostBaseline and CoRunLearner --------------------------------------------------------

STAGE = Stage("t", "face_recognition", "face_detection", 36_864)
V100 = ComputingUnit("gpu:0", "gpu", model="v100", capacity=2, memory_mb=16000.0)


def trained_baseline() -> tuple[CostBaseline, float]:
    base = CostBaseline(CostModel())
    estimate = base.estimate_ms(STAGE.stage, STAGE.input_size, V100)
    for _ in range(21):  # the first is skipped
        base.add_alone(STAGE, V100, 2.0 * estimate)
    return base, base.alone_ms(STAGE, V100)


@pytest.mark.parametrize("bad,why", BAD_MS, ids=BAD_IDS)
def test_the_baseline_refuses_a_bad_alone_time(bad, why):
    base, before = trained_baseline()
    base.add_alone(STAGE, V100, bad)
    assert base.alone_ms(STAGE, V100) == before and base.refused == {why: 1}
    fresh = CostBaseline(CostModel())
    fresh.add_alone(STAGE, V100, bad)
    fresh.add_alone(STAGE, V100, 1.0)  # the real first run: skipped
    assert not fresh.measured(STAGE, V100)


@pytest.mark.parametrize("elapsed_ms", [3.6e6, 1e-3, 1e-4])
def test_one_extreme_alone_run_does_not_move_the_baseline(elapsed_ms):
    base, before = trained_baseline()
    base.add_alone(STAGE, V100, elapsed_ms)
    assert base.alone_ms(STAGE, V100) == pytest.approx(before, rel=1e-9)


class Spy:
    def __init__(self):
        self.seen = []

    def observe_corun(self, stage, partner, gpu_model, rate):
        self.seen.append(rate)


#: (rate sent to CoRunLearner.observe, what the scheduler receives: None = nothing)
RATES = [(NAN, None), (INF, None), (-INF, None), (-1.0, None), (0.0, None), (0, None),
         (False, None), (True, None), (1e-12, None), (10 / 3.6e6, None), (1e6, None),
         (1e9, None), (10**400, None), ("0.5", None), (None, None),
         (0.5, 0.5), (0.01, 0.01), (1.0, 1.0), (1.5, 1.0), (2.0, 1.0)]


@pytest.mark.parametrize("rate,received", RATES, ids=[repr(r)[:12] for r, _ in RATES])
def test_the_learner_refuses_bad_rates_and_never_makes_one_up(rate, received):
    spy = Spy()
    learner = CoRunLearner(baseline=None, scheduler=spy)
    learner.observe("face_detection", "face_encoding", "v100", rate)
    assert spy.seen == ([] if received is None else [received])
    assert sum(learner.refused.values()) == (received is None)


def test_only_a_real_out_of_memory_teaches_rate_zero():
    spy = Spy()
    learner = CoRunLearner(baseline=None, scheduler=spy)
    run = CoRun("face_detection", V100.unit_id, 0.0)
    run.unit["face_encoding"] = 0.01
    learner.out_of_memory("face_detection", V100, run)
    assert spy.seen == [0.0] and not learner.refused


def corun(partner_s: float) -> CoRun:
    run = CoRun(STAGE.stage, V100.unit_id, 0.0)
    run.node["face_encoding"] = partner_s
    run.unit["face_encoding"] = partner_s
    return run


#: (start s, end s, what ran next to it): calls whose time is not believable
BAD_CALLS = [(0.0, NAN, None), (NAN, 1.0, None), (0.0, INF, None), (1.0, 0.5, None),
             (0.0, 0.0, None), (0.0, 7200.0, None), ("0", 1.0, None), (0.0, NAN, 1.0),
             (0.0, 7200.0, 7200.0)]


@pytest.mark.parametrize("start,end,partner_s", BAD_CALLS)
def test_the_learner_refuses_calls_whose_time_is_not_believable(start, end, partner_s):
    base, before = trained_baseline()
    spy = Spy()
    learner = CoRunLearner(base, spy)
    run = CoRun(STAGE.stage, V100.unit_id, 0.0) if partner_s is None else corun(partner_s)
    learner.learn(STAGE, V100, start, end, run)
    assert base.alone_ms(STAGE, V100) == before and not base.refused
    assert spy.seen == [] and learner.slowdowns() == {} and sum(learner.refused.values()) == 1


@pytest.mark.parametrize("slowdown,sent", [(2.0, 0.5), (50.0, 0.02), (1000.0, None),
                                           (0.25, None), (0.8, 1.0)])
def test_a_co_run_against_a_measured_baseline_must_be_plausible(slowdown, sent):
    base, alone_ms = trained_baseline()
    spy = Spy()
    learner = CoRunLearner(base, spy)
    elapsed_s = alone_ms * slowdown / 1000.0
    learner.learn(STAGE, V100, 0.0, elapsed_s, corun(elapsed_s))
    assert spy.seen == ([] if sent is None else [pytest.approx(sent)])
    assert bool(learner.slowdowns()) == (sent is not None)


# -- 4. bounded per-name tables --------------------------------------------------------------

def retained_mb(fill) -> float:
    tracemalloc.start()
    try:
        fill()
        return tracemalloc.get_traced_memory()[0] / 2**20
    finally:
        tracemalloc.stop()


NAMES = 20_000
TABLES = [
    ("LatencyTable", lambda: LatencyTable(),
     lambda t, i: t.add(f"s{i}", 1, 1.0), lambda t, i: t.estimate(f"s{i}", 1) is not None),
    ("BatchSizer", lambda: BatchSizer({f"s{i}": BatchPolicy.up_to(8) for i in range(NAMES)}),
     lambda t, i: t.observe(f"s{i}", "gpu", 1, 1.0),
     lambda t, i: bool(t.table.samples((f"s{i}", "gpu"), 1))),
    ("MeasuredStageCosts", lambda: MeasuredStageCosts({f"s{i}": "any" for i in range(NAMES)}),
     lambda t, i: t.add_run(f"s{i}", "gpu", 1, 1.0),
     lambda t, i: t.any_run.estimate((f"s{i}", "gpu"), 1) is not None),
    ("CostBaseline", lambda: CostBaseline(CostModel()),
     lambda t, i: [t.add_alone(Stage("t", "a", f"s{i}", 10), V100, 1.0) for _ in range(2)],
     lambda t, i: t.measured(Stage("t", "a", f"s{i}", 10), V100)),
    ("CoRunLearner", lambda: CoRunLearner(CostBaseline(CostModel())),
     lambda t, i: t.learn(Stage("t", "a", f"s{i}", 10), V100, 0.0, 0.01, corun_of(f"p{i}")),
     lambda t, i: any(k[0] == f"s{i}" for k in t.slowdowns())),
]


def corun_of(partner: str) -> CoRun:
    run = CoRun("x", V100.unit_id, 0.0)
    run.node[partner] = 0.01
    run.unit[partner] = 0.01
    return run


@pytest.mark.parametrize("name,make,add,kept", TABLES, ids=[t[0] for t in TABLES])
def test_per_name_tables_keep_the_most_recent_names_only(name, make, add, kept):
    table = make()
    mb = retained_mb(lambda: [add(table, i) for i in range(NAMES)])
    assert mb < 4.0, f"{name}: {mb:.1f} MB for {NAMES} names"
    assert kept(table, NAMES - 1) and not kept(table, 0)  # least recently used went first
    assert sum(kept(table, i) for i in range(NAMES - 2 * MAX_KEYS, NAMES)) == MAX_KEYS


def test_sizes_per_key_are_bounded_too():
    table = LatencyTable()
    for n in range(1, 10_001):
        table.add("k", n, 1.0 + n)
    assert len(table.measured("k")) == MAX_SIZES and table.fit("k") is not None


# -- 5. NVML readings ------------------------------------------------------------------------

class NVMLError(Exception):
    pass


def fake_nvml(monkeypatch, util, used, total, power=100_000):
    fake = types.ModuleType("pynvml")
    fake.NVMLError = NVMLError
    fake.nvmlInit = fake.nvmlShutdown = lambda: None
    fake.nvmlDeviceGetCount = lambda: 1
    fake.nvmlDeviceGetHandleByIndex = lambda i: i
    fake.nvmlDeviceGetUUID = lambda h: "GPU-0000"
    fake.nvmlDeviceGetName = lambda h: "Tesla T4"

    def reading(value, make):
        if isinstance(value, BaseException):
            raise value
        return make(value)
    fake.nvmlDeviceGetUtilizationRates = lambda h: reading(util, lambda v: types.SimpleNamespace(
        gpu=v, memory=0))
    fake.nvmlDeviceGetMemoryInfo = lambda h: reading(
        used, lambda v: types.SimpleNamespace(used=v, total=total))
    fake.nvmlDeviceGetPowerUsage = lambda h: reading(power, lambda v: v)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


GIB = 2**30
#: (util %, used bytes, total bytes, util read, mem_util read, readings refused)
READINGS = [
    (50, 4 * GIB, 16 * GIB, 0.5, 0.25, 0),
    (0, 0, 16 * GIB, 0.0, 0.0, 0),                                # a really empty GPU
    (NAN, NAN, 16 * GIB, 1.0, 1.0, 2),
    (INF, INF, INF, 1.0, 1.0, 2),
    (-5, -1, 16 * GIB, 1.0, 1.0, 2),
    (1e9, 2**70, 16 * GIB, 1.0, 1.0, 2),
    (True, "8", 16 * GIB, 1.0, 1.0, 2),
    (None, None, 16 * GIB, 1.0, 1.0, 2),
    (50, 8 * GIB, 0, 0.5, 1.0, 1),                                # total 0: unknown, not empty
    (TypeError("broken binding"), RuntimeError("x"), 16 * GIB, 1.0, 1.0, 2),
    (NVMLError("Not Supported"), NVMLError("GPU is lost"), 16 * GIB, 0.0, 1.0, 2),
]


@pytest.mark.parametrize("util,used,total,util_read,mem_read,refused", READINGS,
                         ids=[repr(r[:3])[:40] for r in READINGS])
def test_gpu_readings_fail_closed_and_are_counted(monkeypatch, tmp_path, util, used, total,
                                                  util_read, mem_read, refused):
    fake_nvml(monkeypatch, util, used, total)
    with NodeTelemetry(min_interval_s=0.0, host_stats=HostStats(tmp_path),
                       cpu_power=None) as telemetry:
        sample = telemetry.sample()
    gpu = sample["gpus"][0]
    assert (gpu["util"], gpu["mem_util"]) == (util_read, mem_read)
    assert (sample["gpu_util"], sample["gpu_mem_util"]) == (util_read, mem_read)
    assert all(math.isfinite(gpu[k]) and gpu[k] >= 0 for k in ("mem_used_mb", "mem_total_mb"))
    assert sum(telemetry.readings_refused.values()) == refused
    assert (telemetry.reading_error is None) == (refused == 0)


def test_any_exception_from_the_power_reading_is_a_refused_reading(monkeypatch, tmp_path):
    fake_nvml(monkeypatch, 50, GIB, 16 * GIB, power=RuntimeError("binding broke"))
    with NodeTelemetry(min_interval_s=0.0, host_stats=HostStats(tmp_path),
                       cpu_power=None) as telemetry:
        sample = telemetry.sample()
    assert sample["gpus"][0]["power_w"] is None and telemetry.power_ignored == 1
    assert sample["gpus"][0]["util"] == 0.5
