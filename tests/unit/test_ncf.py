"""STDM, completion models (per-job mean, MF, paper NCF, NeuMF), the interference model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interference.ncf import COMPLETION_MODELS, make_completion_model
from interference.ncf.paper_ncf import PaperNCF
from interference.slowdown import (GroundTruthLeak, InterferenceModel, cosine_priority,
                                   ground_truth_jobs)
from interference.stdm import GPU_METRICS, STDM, STDM_METRICS
from workload.traces.records import ColocationTable, JobKey

torch.set_num_threads(1)

LEARNED = ("matrix_factorization", "paper_ncf", "neumf")
TRAINING_JOBS = ["ResNet-18 (batch size 16)", "LM (batch size 5)", "Transformer (batch size 32)",
                 "Recommendation (batch size 4096)"]   # not in calibration's stage_to_gavel_job


@pytest.fixture(scope="module")
def low_rank():
    """A known rank-2 8x6 matrix in [0, 1] with 50% of its entries observed."""
    rng = np.random.default_rng(0)
    truth = rng.random((8, 2)) @ rng.random((2, 6)) / 2
    mask = rng.random(truth.shape) < 0.5
    return truth, mask


@pytest.fixture(scope="module")
def held_out_mae(low_rank):
    truth, mask = low_rank
    return {name: float(np.abs(make_completion_model(name).fit(truth, mask, seed=0).complete()
                               - truth)[~mask].mean()) for name in COMPLETION_MODELS}


# ------------------------------------------------------------------------------------- STDM
def test_stdm_has_the_papers_columns():
    assert STDM_METRICS[-1] == "speedup" and "input_size" in STDM_METRICS
    assert len(STDM_METRICS) == 11 and len(GPU_METRICS) == 7
    assert GPU_METRICS[0] == "gpu_sm" and GPU_METRICS[-1] == "global_store_throughput"


def test_sparse_profiling_measures_exactly_two_entries_per_new_row():
    stdm = STDM(["known"])
    calls = []

    def measure(row, column):
        calls.append((row, column))
        return float(len(calls))

    rng = np.random.default_rng(7)
    for stage in ("gmm_background", "face_encoding", "tracking"):
        measured = stdm.sparse_profile(stage, rng, measure=measure)
        assert len(measured) == 2 and stdm.mask[stdm.row_index(stage)].sum() == 2
    assert len(calls) == 6 and len(set(calls)) == 6
    assert stdm.mask[stdm.row_index("known")].sum() == 0
    # profiling a row again measures two entries it does not have yet
    before = stdm.mask[stdm.row_index("tracking")].copy()
    again = stdm.sparse_profile("tracking", rng, measure=measure)
    assert not any(before[stdm.column_index(c)] for c in again)
    assert stdm.mask[stdm.row_index("tracking")].sum() == 4


def test_stdm_normalises_each_column_to_unit_range_and_back():
    stdm = STDM(["a", "b", "c"])
    for row, value in zip("abc", (2.0, 6.0, 4.0)):
        stdm.observe(row, "speedup", value)
    stdm.observe("a", "gpu_sm", 0.3)
    normalized, mask = stdm.normalized()
    col = stdm.column_index("speedup")
    assert normalized[:, col].tolist() == [0.0, 1.0, 0.5]
    assert mask.sum() == 4 and np.isnan(normalized[~mask]).all()
    assert normalized[0, stdm.column_index("gpu_sm")] == 0.0    # a lone value maps to 0
    back = stdm.denormalize(np.nan_to_num(normalized))
    assert back[:, col].tolist() == [2.0, 6.0, 4.0]
    assert np.isnan(stdm.to_numpy()[1, stdm.column_index("gpu_sm")])


# ---------------------------------------------------------------------- completion models
@pytest.mark.parametrize("name", LEARNED)
def test_learned_models_recover_a_low_rank_matrix(held_out_mae, name):
    assert held_out_mae[name] < 0.06, held_out_mae


@pytest.mark.parametrize("name", LEARNED)
def test_per_job_mean_is_worse_than_the_learned_models(held_out_mae, name):
    assert held_out_mae["per_job_mean"] > 1.5 * held_out_mae[name], held_out_mae


def test_per_job_mean_falls_back_to_the_global_mean_for_an_unobserved_row():
    m = np.array([[0.2, 0.4], [0.9, 0.0], [0.0, 0.0]])
    mask = np.array([[True, True], [True, False], [False, False]])
    completed = make_completion_model("per_job_mean").fit(m, mask).complete()
    assert completed[0].tolist() == pytest.approx([0.3, 0.3])
    assert completed[2].tolist() == pytest.approx([0.5, 0.5])


def test_paper_ncf_architecture_is_128_64_32_with_a_sigmoid_output(low_rank):
    truth, mask = low_rank
    model = PaperNCF(embedding_size=8).fit(truth, mask, seed=0)
    assert model.layer_sizes() == [16, 128, 64, 32, 1]
    relus = [m for m in model.network.mlp if isinstance(m, torch.nn.ReLU)]
    assert len(relus) == 3
    out = model.complete()
    assert ((out > 0) & (out < 1)).all()
    with torch.no_grad():   # a huge pre-activation saturates at 1, never beyond: a sigmoid
        model.network.output.bias.fill_(50.0)
    assert np.allclose(model.complete(), 1.0) and (model.complete() <= 1.0).all()


def test_sigmoid_models_refuse_values_outside_unit_range():
    with pytest.raises(ValueError, match="normalise"):
        PaperNCF().fit(np.array([[2.0, 0.5]]), np.array([[True, True]]))


def test_online_update_uses_plain_sgd_and_pretraining_adam(low_rank, monkeypatch):
    truth, mask = low_rank
    built = []
    for cls in ("SGD", "Adam"):
        original = getattr(torch.optim, cls)

        def spy(*args, _original=original, _name=cls, **kwargs):
            built.append(_name)
            return _original(*args, **kwargs)
        monkeypatch.setattr(torch.optim, cls, spy)
    model = PaperNCF(epochs=20).fit(truth, mask, seed=0)
    assert built == ["Adam"]
    rows, cols = np.nonzero(~mask)
    before = model.predict(rows[:2], cols[:2])
    model.online_update(rows[:2], cols[:2], truth[rows[:2], cols[:2]], steps=30)
    assert built == ["Adam", "SGD"]
    assert type(model.last_online_optimizer).__name__ == "SGD"
    after = model.predict(rows[:2], cols[:2])
    target = truth[rows[:2], cols[:2]]
    assert np.abs(after - target).sum() < np.abs(before - target).sum()
    assert model.mask[rows[0], cols[0]]   # the new entries are recorded as observed


@pytest.mark.parametrize("name", LEARNED)
def test_learning_is_deterministic_for_a_seed(low_rank, name):
    truth, mask = low_rank
    torch.manual_seed(123)   # the global torch seed must not matter ...
    a = make_completion_model(name, epochs=50).fit(truth, mask, seed=3).complete()
    torch.manual_seed(456)
    b = make_completion_model(name, epochs=50).fit(truth, mask, seed=3).complete()
    c = make_completion_model(name, epochs=50).fit(truth, mask, seed=4).complete()
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)  # ... the seed does


def test_unknown_settings_are_refused():
    with pytest.raises(TypeError, match="unknown settings"):
        make_completion_model("paper_ncf", embeding_size=8)
    with pytest.raises(ValueError, match="unknown completion model"):
        make_completion_model("svd")


# ---------------------------------------------------------------------- interference model
def _training_matrix():
    rng = np.random.default_rng(1)
    n = len(TRAINING_JOBS)
    return np.clip(0.4 + 0.5 * rng.random((n, n)), 0, 1), np.ones((n, n), bool)


def test_interference_model_refuses_ground_truth_half_jobs():
    truth_half = ground_truth_jobs()
    assert "A3C" in truth_half and len(truth_half) == 11
    model = InterferenceModel("per_job_mean")
    matrix, mask = _training_matrix()
    names = TRAINING_JOBS[:-1] + ["A3C"]
    with pytest.raises(GroundTruthLeak, match="A3C"):
        model.fit_matrix("v100", names, matrix, mask)
    with pytest.raises(GroundTruthLeak):
        model.fit_matrix("v100", TRAINING_JOBS[:-1] + [JobKey("CycleGAN", 1)], matrix, mask)
    assert "v100" not in model.gpus


def test_fit_table_keeps_only_training_half_jobs():
    jobs = [JobKey(n) for n in TRAINING_JOBS[:2]] + [JobKey("A3C")]
    iso = {j: 10.0 for j in jobs}
    pairs = {(a, b): (6.0, 6.0) for a in jobs for b in jobs}
    table = ColocationTable({"v100": iso}, {"v100": pairs}, source="test")
    model = InterferenceModel("per_job_mean", spare_rows=2).fit_table(table, ["v100"])
    assert model.gpus["v100"].names == TRAINING_JOBS[:2]


@pytest.mark.parametrize("name", ["per_job_mean", "matrix_factorization"])
def test_slowdown_of_known_pairs_and_online_observations(name):
    matrix, mask = _training_matrix()
    model = InterferenceModel(name, spare_rows=4).fit_matrix("v100", TRAINING_JOBS, matrix, mask)
    a, b = TRAINING_JOBS[:2]
    one = model.predict(a, [b], "v100")
    assert one >= 1.0 and model.predict(a, [], "v100") == 1.0
    assert model.predict(a, [b], "t4") == one            # t4 borrows v100 (calibration)
    assert model.predict(a, [b, b], "v100") == pytest.approx(one ** 2)   # multiplicative
    # a stage seen only while running: learned online from its measured rate
    model.observe("face_encoding", b, "v100", measured_rate=0.5)
    assert model.predict("face_encoding", [b], "v100") == pytest.approx(2.0, rel=0.15)
    with pytest.raises(ValueError):
        model.observe("face_encoding", b, "v100", measured_rate=0.0)
    with pytest.raises(KeyError):
        model.predict(a, [b], "cpu")


def test_interference_model_completes_an_stdm_in_measured_units():
    stdm = STDM(["s1", "s2", "s3"], columns=["gpu_sm", "speedup"])
    for row, sm, speedup in (("s1", 0.2, 2.0), ("s2", 0.8, 8.0)):
        stdm.observe(row, "gpu_sm", sm)
        stdm.observe(row, "speedup", speedup)
    stdm.observe("s3", "gpu_sm", 0.5)
    completed = InterferenceModel("per_job_mean").complete(stdm)
    assert completed[:2].tolist() == [[0.2, 2.0], [0.8, 8.0]]       # measured entries kept
    assert 2.0 <= completed[2, 1] <= 8.0                             # filled within range


def test_cosine_priority_guards_zero_and_negative_similarity():
    assert cosine_priority([1.0, 0.0], [[2.0, 0.0]]) == pytest.approx(1.0)
    assert cosine_priority([1.0, 1.0], [[1.0, 0.0], [0.0, 1.0]]) == pytest.approx(2 ** 0.5)
    for running in ([[0.0, 0.0]], [[-1.0, 0.0]], [], [None]):
        assert cosine_priority([1.0, 0.0], running) == 1000.0
    assert cosine_priority([0.0, 0.0], [[1.0, 1.0]], min_similarity=0.01) == 100.0


# ---------------------------------------------------------------------- benchmark plumbing
def test_benchmark_pair_mask_is_symmetric_with_the_asked_fraction():
    from benchmarks.ncf import pair_mask, unseen_job_split

    mask = pair_mask(26, 0.2, np.random.default_rng(0))
    assert (mask == mask.T).all()
    assert mask.sum() == pytest.approx(0.2 * 26 * 26, rel=0.1)
    new, observed = unseen_job_split(26, 2, np.random.default_rng(0))
    assert new.sum() == 5 and observed[np.ix_(~new, ~new)].all()
    assert (observed[new].sum(axis=1) == 2).all() and not observed[np.ix_(new, new)].any()
