"""STDM, completion models (per-job mean, MF, paper NCF, NeuMF), the interference model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interference.ncf import COMPLETION_MODELS, make_completion_model
from interference.ncf._base import observed_validation_split
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


@pytest.mark.parametrize("prior, fit_optimizers", [(None, ["Adam"]),
                                                   ("matrix_factorization", ["Adam", "Adam"])])
def test_online_update_uses_plain_sgd_and_pretraining_adam(low_rank, monkeypatch, prior,
                                                           fit_optimizers):
    """Pre-training is Adam (the MF prior's too: one Adam for it, one for the NCF), online
    updates are plain SGD."""
    truth, mask = low_rank
    built = []
    for cls in ("SGD", "Adam"):
        original = getattr(torch.optim, cls)

        def spy(*args, _original=original, _name=cls, **kwargs):
            built.append(_name)
            return _original(*args, **kwargs)
        monkeypatch.setattr(torch.optim, cls, spy)
    model = PaperNCF(epochs=20, prior=prior).fit(truth, mask, seed=0)
    assert built == fit_optimizers
    rows, cols = np.nonzero(~mask)
    before = model.predict(rows[:2], cols[:2])
    model.online_update(rows[:2], cols[:2], truth[rows[:2], cols[:2]], steps=30)
    assert built == fit_optimizers + ["SGD"]
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


# ------------------------------------------------- the paper NCF's MF prior (issue 14, item 5)
def _pair_mask(n, fraction, seed):
    from benchmarks.ncf import pair_mask
    return pair_mask(n, fraction, np.random.default_rng(seed))


@pytest.fixture(scope="module")
def pair_matrix():
    """A 12x12 matrix in [0, 1] (rank 2 + noise) with 30% of its pairs observed, like Gavel's."""
    rng = np.random.default_rng(5)
    truth = np.clip(rng.random((12, 2)) @ rng.random((2, 12)) / 2
                    + 0.05 * rng.standard_normal((12, 12)), 0, 1)
    return truth, _pair_mask(12, 0.3, 5)


def test_mf_prior_sets_the_embeddings_to_its_factors_and_biases(low_rank):
    from interference.ncf.matrix_factorization import MatrixFactorization

    truth, mask = low_rank
    model = PaperNCF(epochs=0).fit(truth, mask, seed=2)      # no NCF step: the start as built
    mf = model.prior_model.network
    k = model.settings.prior_factors
    for embedding, factors, bias in (
            (model.network.row_embedding, mf.row_factors, mf.row_bias),
            (model.network.column_embedding, mf.column_factors, mf.column_bias)):
        weight = embedding.weight.detach()
        assert torch.equal(weight[:, :k], factors.weight.detach())
        assert torch.equal(weight[:, k], bias.weight.detach()[:, 0])
        assert (weight[:, k + 1:] == 0).all() and weight.shape[1] == 8
    # the prior is an ordinary MF fitted on the same observed entries with the same seed
    alone = MatrixFactorization(factors=k).fit(truth, mask, seed=2)
    assert np.array_equal(model.prior_model.complete(), alone.complete())
    # without the setting (or without a prior) the embeddings are random, not MF's
    plain = PaperNCF(epochs=0, init_embeddings_from_prior=False).fit(truth, mask, seed=2)
    assert not torch.equal(plain.network.row_embedding.weight[:, :k], mf.row_factors.weight)
    assert PaperNCF(epochs=0, prior=None).fit(truth, mask, seed=2).prior_model is None


def test_prior_weight_pulls_the_ncf_towards_its_mf_prior(pair_matrix):
    truth, mask = pair_matrix
    gap = {}
    for weight in (0.0, 30.0):
        model = PaperNCF(prior_weight=weight, epochs=300).fit(truth, mask, seed=0)
        prior = np.clip(model.prior_model.complete(), 0, 1)
        gap[weight] = float(np.abs(model.complete() - prior)[~mask].mean())
    assert gap[30.0] < 0.02 < gap[0.0], gap


def test_mf_prior_makes_the_ncf_at_least_as_good_as_mf(held_out_mae, low_rank):
    truth, mask = low_rank
    plain = float(np.abs(PaperNCF(prior=None).fit(truth, mask, seed=0).complete()
                         - truth)[~mask].mean())
    assert held_out_mae["paper_ncf"] <= held_out_mae["matrix_factorization"] < plain


@pytest.mark.parametrize("shape", [(12, 12), (9, 5)])
def test_validation_split_holds_out_only_observed_entries(shape):
    rng = np.random.default_rng(1)
    mask = rng.random(shape) < 0.4
    if shape[0] == shape[1]:
        mask = mask | mask.T
    train, valid = observed_validation_split(mask, 0.25, np.random.default_rng(3))
    assert not (valid & ~mask).any() and not (train & ~mask).any()
    assert not (train & valid).any() and ((train | valid) == mask).all()
    assert 0.1 < valid.sum() / mask.sum() < 0.4
    if shape[0] == shape[1]:       # a pair and its mirror land on the same side
        assert (valid == valid.T).all()
    again, _ = observed_validation_split(mask, 0.25, np.random.default_rng(3))
    assert np.array_equal(train, again)
    with pytest.raises(ValueError, match="share"):
        observed_validation_split(mask, float("nan"), rng)


def test_validation_choice_never_reads_held_out_entries(pair_matrix, monkeypatch):
    truth, mask = pair_matrix
    seen = []
    original = PaperNCF._train

    def spy(self, rows, cols, values, epochs, validation=None, every=10):
        seen.append(mask[rows, cols].all() and np.isfinite(values).all())
        return original(self, rows, cols, values, epochs, validation, every)

    monkeypatch.setattr(PaperNCF, "_train", spy)
    settings = dict(prior_weight_candidates=(0.1, 3.0), validation_share=0.25, epochs=40,
                    prior_epochs=100)
    results = []
    for filler in (0.0, 1.0, np.nan):      # whatever sits in the held-out entries
        model = PaperNCF(**settings).fit(np.where(mask, truth, filler), mask, seed=4)
        results.append((model.fit_report, model.complete()))
    report = results[0][0]
    assert report["prior_weight"] in (0.1, 3.0) and set(report["validation"]["mse"]) == {0.1, 3.0}
    assert 0 < report["validation"]["held_out_entries"] < mask.sum()
    for other_report, completed in results[1:]:
        assert other_report == report and np.array_equal(completed, results[0][1])
    assert len(seen) == 9 and all(seen)    # 2 candidates + the final fit, 3 fillers


def test_paper_ncf_with_validation_is_deterministic_per_seed(pair_matrix):
    truth, mask = pair_matrix
    settings = dict(prior_weight_candidates=(0.1, 1.0), epochs=30, prior_epochs=100)
    torch.manual_seed(1)
    a = PaperNCF(**settings).fit(truth, mask, seed=7)
    torch.manual_seed(2)
    b = PaperNCF(**settings).fit(truth, mask, seed=7)
    c = PaperNCF(**settings).fit(truth, mask, seed=8)
    assert a.fit_report == b.fit_report and np.array_equal(a.complete(), b.complete())
    assert not np.array_equal(a.complete(), c.complete())


def test_non_finite_inputs_and_settings_are_refused(low_rank):
    truth, mask = low_rank
    broken = truth.copy()
    broken[np.argwhere(mask)[0][0], np.argwhere(mask)[0][1]] = np.nan
    with pytest.raises(ValueError, match="finite"):
        PaperNCF().fit(broken, mask)
    for bad in (dict(prior_weight=float("nan")), dict(prior_weight=-1.0),
                dict(learning_rate=float("inf")), dict(prior_weight_candidates=(0.3, np.inf)),
                dict(validation_share=1.0), dict(embedding_size=4), dict(prior="svd"),
                dict(epochs=-1), dict(prior_weight_candidates=(0.3,), validation_share=0.0)):
        with pytest.raises(ValueError):
            PaperNCF(**bad)
    model = PaperNCF(epochs=20).fit(truth, mask, seed=0)
    before = model.complete()
    rows, cols = np.nonzero(~mask)
    for values in ([np.inf], [np.nan], [1.5]):
        with pytest.raises(ValueError):
            model.online_update(rows[:1], cols[:1], values)
    assert not model.mask[rows[0], cols[0]] and np.array_equal(model.complete(), before)


def test_a_diverging_online_update_is_refused_and_rolled_back(low_rank):
    truth, mask = low_rank
    model = PaperNCF(epochs=20, online_learning_rate=1e30).fit(truth, mask, seed=0)
    before = model.complete()
    rows, cols = np.nonzero(~mask)
    with pytest.raises(FloatingPointError, match="non-finite"):
        model.online_update(rows[:1], cols[:1], [0.5], steps=20)
    assert np.array_equal(model.complete(), before) and not model.mask[rows[0], cols[0]]
    assert all(torch.isfinite(p).all() for p in model.network.parameters())


# ---------------------------------------------------------- benchmark: seeds, previous run
def test_benchmark_refuses_seeds_that_mix_tuning_and_evaluation_masks():
    from benchmarks.ncf import TUNING_SEEDS, check_seeds

    assert check_seeds(list(range(10))) == "evaluation"
    assert check_seeds(list(TUNING_SEEDS[:5])) == "tuning"
    with pytest.raises(ValueError, match="tuning seeds"):
        check_seeds(list(range(95, 105)))


def test_benchmark_keeps_the_previous_five_mask_summary(tmp_path):
    import json

    from benchmarks.ncf import PREVIOUS_KEY, previous_summary

    path = tmp_path / "ncf.json"
    assert previous_summary(path) is None
    old = {"seeds": [0, 1, 2, 3, 4], "summary": [{"model": "paper_ncf"}], "goal": {},
           "git_commit": "abc", "runs": [1, 2]}
    path.write_text(json.dumps(old))
    block = previous_summary(path)
    assert block["summary"] == old["summary"] and block["git_commit"] == "abc"
    assert "runs" not in block
    path.write_text(json.dumps({"seeds": list(range(10)), "summary": [], PREVIOUS_KEY: block}))
    assert previous_summary(path) == block       # carried over from run to run
    path.write_text(json.dumps({"seeds": list(range(10)), "summary": []}))
    assert previous_summary(path) is None
    for broken in ("{not json", "[1, 2]", json.dumps({"seeds": 5}),
                   json.dumps({PREVIOUS_KEY: {"summary": "x"}})):
        path.write_text(broken)
        with pytest.raises(ValueError):
            previous_summary(path)


def test_benchmark_pairs_each_model_with_mf_on_the_same_mask():
    from benchmarks.ncf import paired_differences

    runs = [{"experiment": "random_mask", "gpu": "k80", "fraction": 0.2, "seed": s,
             "model": m, "mae": mae}
            for s, (a, b) in enumerate([(0.10, 0.12), (0.20, 0.21), (0.30, 0.32)])
            for m, mae in (("matrix_factorization", b), ("paper_ncf", a))]
    (row,) = paired_differences(runs)
    assert row["model"] == "paper_ncf" and row["mae_difference"]["n"] == 3
    assert row["mae_difference"]["mean"] == pytest.approx(-0.01667, abs=1e-5)
    assert row["mae_difference"]["ci95"][1] < 0
