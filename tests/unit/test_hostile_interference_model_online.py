"""Hostile co-run records and profiles against IAWP's online interference learning
(IawpScheduler.observe_corun, InterferenceModel.observe, STDM.observe): whatever one bad
record holds, it is refused and counted, nothing is learned from it, no row is taken by it,
nothing is raised to the caller, and where work goes does not change."""

from __future__ import annotations

import copy
import math
import time

import numpy as np
import pytest
import torch

import interference.slowdown as slowdown
from interference.schedulers.iawp import IawpScheduler
from interference.slowdown import InterferenceModel
from interference.stdm import STDM
from workload.model import ComputingUnit, Stage

torch.set_num_threads(1)

TRAINING_JOBS = ["ResNet-18 (batch size 16)", "LM (batch size 5)", "Transformer (batch size 32)",
                 "Recommendation (batch size 4096)"]   # not in calibration's stage_to_gavel_job
A, B = "face_detection", "face_encoding"               # stages the calibration knows


@pytest.fixture(scope="module")
def fitted() -> InterferenceModel:
    """A small MF interference model for v100 (t4 maps to it), pairs at 0.6-0.9."""
    rng = np.random.default_rng(1)
    n = len(TRAINING_JOBS)
    matrix = 0.6 + 0.3 * rng.random((n, n))
    return InterferenceModel("matrix_factorization", model_settings={"epochs": 100},
                             spare_rows=8).fit_matrix("v100", TRAINING_JOBS, matrix,
                                                      np.ones((n, n), bool))


def _scheduler(model: InterferenceModel) -> IawpScheduler:
    return IawpScheduler(interference="slowdown", interference_model=copy.deepcopy(model))


def _state(s: IawpScheduler):
    gpu = s.model.gpus["v100"]
    return (list(gpu.names), gpu.model.matrix.copy(), gpu.model.mask.copy(),
            gpu.completed.copy())


def _same(a, b) -> bool:
    return (a[0] == b[0] and np.array_equal(a[1], b[1], equal_nan=True)
            and np.array_equal(a[2], b[2]) and np.array_equal(a[3], b[3]))


def _decision(s: IawpScheduler) -> list[tuple[str, str]]:
    """Where a ready A goes while B runs on the only GPU."""
    units = [ComputingUnit("cpu:0", "cpu"),
             ComputingUnit("gpu:0", "gpu", model="v100", running=(B,), capacity=2,
                           memory_mb=16000.0)]
    ready = [Stage("t9", "face_recognition", A, 36_864, True, 0.0)]
    return [(a.stage.stage, a.unit_id) for a in s.assign(ready, units, 0.0)]


# ------------------------------------------------------------------ finding 3: the rate itself
@pytest.mark.parametrize("rate,outcome", [
    (math.nan, "rate"), (math.inf, "rate"), (-math.inf, "rate"), (-1.0, "rate"),
    (1e9, "rate"), (10 ** 400, "rate"), (11.0, "rate"), (1.0 / 1e-6, "rate"),
    (True, "rate"), (False, "rate"), ("0.5", "rate"), (None, "rate"), (np.bool_(True), "rate"),
    (complex(0.5, 0), "rate"),
    # accepted: a plausible rate, numpy's, noise above 1 (learned as 1), a failed launch
    (0.5, "learned"), (np.float64(0.7), "learned"), (1.4, "learned"), (0.0, "learned"),
])
def test_observe_corun_refuses_and_counts_what_is_no_plausible_rate(fitted, rate, outcome):
    s = _scheduler(fitted)
    before, decision = _state(s), _decision(s)
    s.observe_corun(A, B, "v100", rate)   # never raises
    if outcome == "learned":
        assert s.observed == 1 and not s.refused
        assert not _same(before, _state(s))
        return
    assert s.observed == 0 and s.refused == {outcome: 1}
    assert _same(before, _state(s)), "a refused record changed the model"
    assert _decision(s) == decision


def test_only_a_reported_out_of_memory_failure_means_cannot_co_run(fitted):
    s = _scheduler(fitted)
    assert _decision(s) == [(A, "gpu:0")]
    s.observe_corun(A, B, "v100", 0.0)
    s.observe_corun(B, A, "v100", 0)
    gpu = s.model.gpus["v100"]
    cell = (gpu.index[A], gpu.index[B])
    assert gpu.model.matrix[cell] == 1e-3 and s.observed == 2
    assert _decision(s) == [], "a pair that ran out of memory must wait, not co-run"


# ------------------------------------------------------------------ finding 4: pair lockout
STALL = 10 / 3.6e6   # an hour-long call of a 10 ms stage


@pytest.mark.parametrize("history,co_runs,outliers", [
    # one stalled co-run (both stages' timings) is held aside: the pair still co-runs
    ([(A, B, STALL), (B, A, STALL)], True, {"held": 2}),
    ([(A, B, 1e-12)], True, {"held": 1}),
    # a stall, then a plausible rate of that pair: the stall is dropped, the rate learned
    ([(A, B, STALL), (A, B, 0.8), (B, A, STALL), (B, A, 0.8)], True,
     {"held": 2, "dropped": 2}),
    # confirmed by a second stall of the same pair: learned, the pair stops co-running
    ([(A, B, STALL), (B, A, STALL), (A, B, STALL), (B, A, STALL)], False,
     {"held": 2, "confirmed": 2}),
])
def test_one_stalled_co_run_cannot_lock_a_pair_out(fitted, history, co_runs, outliers):
    s = _scheduler(fitted)
    assert _decision(s) == [(A, "gpu:0")]
    for stage, partner, rate in history:
        s.observe_corun(stage, partner, "v100", rate)
    assert (_decision(s) == [(A, "gpu:0")]) == co_runs
    assert dict(s.model.outliers) == outliers
    assert s.observed == len(history) and not s.refused


def test_plausible_rates_are_learned_at_once(fitted):
    """The guard only holds rates far (10x) under the prediction: what the simulator measures
    (never under 0.29 x the prediction) is learned as before."""
    s = _scheduler(fitted)
    predicted = s.model.predict_throughput(A, B, "v100")
    s.observe_corun(A, B, "v100", 0.3 * predicted)
    gpu = s.model.gpus["v100"]
    assert gpu.model.matrix[gpu.index[A], gpu.index[B]] == pytest.approx(0.3 * predicted)
    assert not s.model.outliers


# ------------------------------------------------------------------ finding 5: spare rows
def test_made_up_names_cannot_take_the_spare_rows(fitted):
    s = _scheduler(fitted)
    names = list(s.model.gpus["v100"].names)
    for i in range(40):
        s.observe_corun(f"junk{i}", B, "v100", 0.5)
        s.observe_corun(B, f"junk{i}", "v100", 0.5)
    s.observe_corun(42, B, "v100", 0.5)
    assert s.refused == {"unknown_stage": 81} and s.observed == 0
    assert s.model.gpus["v100"].names == names
    s.observe_corun(A, B, "v100", 0.5)   # a real stage still gets its row
    assert s.observed == 1 and A in s.model.gpus["v100"].index


@pytest.mark.parametrize("setup,call,reason", [
    ("full", (A, B, "v100", 0.5), "no_spare_row"),
    ("none", (A, B, "h100", 0.5), "unknown_gpu_model"),
])
def test_no_row_left_and_unknown_gpu_models_are_counted_not_raised(fitted, setup, call, reason):
    model = copy.deepcopy(fitted)
    if setup == "full":
        model.gpus["v100"].capacity = len(model.gpus["v100"].names) + 1   # room for one name
    s = IawpScheduler(interference="slowdown", interference_model=model)
    before = _state(s)
    s.observe_corun(*call)
    assert s.refused == {reason: 1} and s.observed == 0
    assert _same(before, _state(s)), "the refused record claimed a row or learned"


@pytest.mark.parametrize("call", [
    dict(stage="s_new", partner="p_new", measured_rate=0.5),                 # no row for both
    dict(stage="s_new", partner=TRAINING_JOBS[0], measured_rate=0.5, partner_rate=math.nan),
    dict(stage="s_new", partner=TRAINING_JOBS[0], measured_rate=True),
    dict(stage="s_new", partner=TRAINING_JOBS[0], measured_rate="0.5"),
    dict(stage="s_new", partner=TRAINING_JOBS[0], measured_rate=10 ** 400),
])
def test_the_model_refuses_all_or_nothing(fitted, call):
    model = copy.deepcopy(fitted)
    gpu = model.gpus["v100"]
    gpu.capacity = len(gpu.names) + 1
    names, matrix = list(gpu.names), gpu.model.matrix.copy()
    with pytest.raises(slowdown.ObservationRefused):
        model.observe(device_type="v100", **call)
    assert gpu.names == names and np.array_equal(gpu.model.matrix, matrix, equal_nan=True)


def test_check_rate_takes_real_numbers_only():
    check = slowdown.check_rate
    assert check(0.5) == 0.5 and check(np.float32(0.25)) == 0.25 and check(2) == 2.0
    for bad in (0, -0.0, True, "1", None, math.nan, 10.5, 10 ** 400, [0.5]):
        with pytest.raises(slowdown.ObservationRefused):
            check(bad)


# ------------------------------------------------------------------ finding 6: STDM
@pytest.mark.parametrize("value", ["0.7", "nan", True, False, None, math.nan, math.inf, -1e300,
                                   1e300, 10 ** 400, -0.5, 1e12, np.bool_(True), [0.5]])
def test_stdm_refuses_implausible_measurements_and_records_nothing(value):
    stdm = STDM(["a", "b"])
    stdm.observe("a", "gpu_sm", 0.2)
    stdm.observe("b", "gpu_sm", 0.9)
    normalized = stdm.normalized()[0]
    with pytest.raises(ValueError):
        stdm.observe("new", "gpu_sm", value)
    assert stdm.rows == ["a", "b"] and int(stdm.mask.sum()) == 2
    assert np.array_equal(stdm.normalized()[0], normalized, equal_nan=True)


def test_stdm_accepts_plausible_measurements():
    stdm = STDM(["a"])
    for column, value in (("gpu_sm", 0), ("speedup", np.float64(6.5)), ("input_size", 1e9)):
        stdm.observe("a", column, value)
    assert int(stdm.mask.sum()) == 3


def test_sparse_profile_records_all_or_nothing():
    stdm = STDM(["known"])
    values = iter([0.4, math.nan])
    with pytest.raises(ValueError):
        stdm.sparse_profile("new", np.random.default_rng(0), measure=lambda r, c: next(values))
    assert stdm.rows == ["known"] and not stdm.mask.any()


def test_stdm_rows_cost_linear_time():
    started = time.perf_counter()
    stdm = STDM()
    for i in range(60_000):   # ~0.15 s; stacking one row at a time took ~25 s (quadratic)
        stdm.observe(f"r{i}", "gpu_sm", 0.5)
    assert time.perf_counter() - started < 5.0
    assert stdm.shape == (60_000, 11) and stdm.row_index("r59999") == 59_999
