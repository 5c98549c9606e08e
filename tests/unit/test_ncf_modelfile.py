"""NCF completion model files (interference.ncf.modelfile): every registered model saved and
loaded gives the same completion and the same online updates; damaged, forged or out-of-range
files are refused with a clear reason."""

from __future__ import annotations

import dataclasses
import doctest
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import interference.ncf.modelfile as modelfile_module
from interference.ncf import COMPLETION_MODELS, make_completion_model
from interference.ncf.modelfile import (FORMAT_VERSION, MAGIC, CompletionModelFileError,
                                        load_completion_model, parse_completion_model,
                                        save_completion_model)
from workload.arrayfile import read_arrays, write_arrays

ROOT = Path(__file__).resolve().parents[2]
#: short training runs: these tests are about the file, not the fit
FAST = {"per_job_mean": {}, "matrix_factorization": {"epochs": 60},
        "neumf": {"epochs": 60}, "paper_ncf": {"epochs": 40, "prior_epochs": 40}}


def _matrix(seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """A rank-2 matrix in [0, 1] (sigmoid models' range), about half of it observed."""
    rng = np.random.default_rng(seed)
    truth = rng.random((7, 2)) @ rng.random((2, 5)) / 2
    return truth, rng.random(truth.shape) < 0.5


def _fitted(name: str, **overrides):
    truth, mask = _matrix()
    return make_completion_model(name, **{**FAST[name], **overrides}).fit(truth, mask, seed=1)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    """Registry name -> (fitted model, path of its file); fitted once for the module."""
    folder = tmp_path_factory.mktemp("ncf")
    out = {}
    for name in FAST:
        model = _fitted(name)
        out[name] = (model, save_completion_model(folder / f"{name}.spncf", model,
                                                  {"trained_on": "seed 3", "mask_seed": 3}))
    return out


def _forge(path, edit):
    """Re-save the file's arrays and metadata after ``edit(arrays_dict, metadata)`` with a
    valid digest (write_arrays): only the model checks can catch it."""
    arrays, metadata = read_arrays(path.read_bytes(), "original", MAGIC,
                                   max_header_bytes=16 << 20)
    arrays = dict(arrays)
    edit(arrays, metadata)
    write_arrays(path, list(arrays.items()), metadata, MAGIC, format_version=FORMAT_VERSION)
    return path


def test_every_registered_model_is_covered():
    assert set(FAST) == set(COMPLETION_MODELS)


@pytest.mark.parametrize("name", list(FAST))
def test_a_loaded_model_completes_exactly_like_the_saved_one(saved, name):
    model, path = saved[name]
    loaded, metadata = parse_completion_model(path.read_bytes(), "download")
    assert type(loaded) is type(model) and loaded.settings == model.settings
    assert metadata == {"trained_on": "seed 3", "mask_seed": 3}
    # bit-identical: the same float32 weights (exact float64 observations) on the same code
    assert np.array_equal(loaded.complete(), model.complete())
    assert np.array_equal(load_completion_model(path).complete(), model.complete())
    np.testing.assert_array_equal(loaded.mask, model.mask)
    np.testing.assert_array_equal(loaded.matrix, model.matrix)   # NaN where unobserved
    assert loaded.shape == model.shape == (7, 5)
    assert getattr(loaded, "epochs_used", None) == getattr(model, "epochs_used", None)


@pytest.mark.parametrize("name", list(FAST))
def test_online_update_after_loading_takes_the_same_steps(tmp_path, name):
    model = _fitted(name)
    loaded = load_completion_model(save_completion_model(tmp_path / "m.spncf", model))
    before = loaded.complete()
    rows, cols, values = [0, 3, 6], [4, 0, 2], [0.9, 0.05, 0.7]
    model.online_update(rows, cols, values, steps=5)
    loaded.online_update(rows, cols, values, steps=5)
    assert not np.array_equal(loaded.complete(), before)   # it learned something
    assert np.array_equal(loaded.complete(), model.complete())
    assert loaded.mask[3, 0] and loaded.matrix[3, 0] == 0.05
    # and the updated model saves and loads again
    again = load_completion_model(save_completion_model(tmp_path / "again.spncf", loaded))
    assert np.array_equal(again.complete(), model.complete())


def test_the_paper_ncf_keeps_its_prior_and_its_validation_choice(tmp_path):
    model = _fitted("paper_ncf", prior_weight_candidates=(0.1, 1.0), validation_share=0.3)
    loaded = load_completion_model(save_completion_model(tmp_path / "p.spncf", model))
    assert loaded.fit_report == model.fit_report          # lambda keys are numbers again
    assert set(loaded.fit_report["validation"]["mse"]) == {0.1, 1.0}
    assert loaded._prior_weight == model._prior_weight == model.fit_report["prior_weight"]
    assert np.array_equal(loaded.prior_model.complete(), model.prior_model.complete())
    for got, want in zip(loaded._prior_target, model._prior_target):
        assert bool((got == want).all())
    model.online_update([1], [1], [0.5], steps=3)
    loaded.online_update([1], [1], [0.5], steps=3)
    assert np.array_equal(loaded.complete(), model.complete())


@pytest.mark.parametrize("name,overrides", [("paper_ncf", {"prior": None}),
                                            ("matrix_factorization", {"clip": None}),
                                            ("per_job_mean", {"fallback": "column"}),
                                            ("neumf", {"hidden_layers": (8,)})])
def test_other_settings_round_trip(tmp_path, name, overrides):
    model = _fitted(name, **overrides)
    loaded = load_completion_model(save_completion_model(tmp_path / "m.spncf", model))
    assert loaded.settings == model.settings
    assert np.array_equal(loaded.complete(), model.complete())


def test_a_tampered_setting_fails_the_digest(saved, tmp_path):
    data = saved["paper_ncf"][1].read_bytes()
    assert data.count(b'"prior_weight": 0.3') >= 1
    path = tmp_path / "tampered.spncf"
    path.write_bytes(data.replace(b'"prior_weight": 0.3', b'"prior_weight": 0.9', 1))
    with pytest.raises(CompletionModelFileError, match="SHA-256"):
        load_completion_model(path)


def _copy(saved, name, tmp_path):
    path = tmp_path / f"{name}.spncf"
    path.write_bytes(saved[name][1].read_bytes())
    return path


def _set_setting(key, value):
    return lambda arrays, meta: meta["settings"].__setitem__(key, value)


@pytest.mark.parametrize("name,edit,message", [
    # an array removed, added, or of another shape (re-saved with a valid digest)
    ("paper_ncf", lambda a, m: a.pop("network.mlp.2.weight"),
     r"needs arrays \['network.mlp.2.weight'\] that the file lacks"),
    ("neumf", lambda a, m: a.pop("network.output.bias"), "lacks"),
    ("matrix_factorization", lambda a, m: a.pop("network.global_mean"), "lacks"),
    ("paper_ncf", lambda a, m: a.pop("prior.network.row_bias.weight"),
     r"\['prior.network.row_bias.weight'\]"),
    ("neumf", lambda a, m: a.__setitem__("network.extra.weight", np.ones(3)),
     "not part of the neumf network"),
    ("per_job_mean", lambda a, m: a.__setitem__("network.row.weight", np.ones(3)),
     "belong to no part of the per_job_mean model"),
    ("paper_ncf", lambda a, m: m.__setitem__("prior", None), "belong to no part"),
    ("matrix_factorization", lambda a, m: a.__setitem__(
        "network.row_factors.weight", a["network.row_factors.weight"].T.copy()),
     r"has shape \[5, 7\]; .* needs \[7, 5\]"),
    ("neumf", _set_setting("gmf_size", 4), "network.row_gmf.weight has shape"),
    ("paper_ncf", lambda a, m: m.__setitem__("shape", [6, 5]), "observed matrix is not 6 rows"),
    # the model and its settings
    ("neumf", lambda a, m: m.__setitem__("model", "transformer"),
     "unknown completion model 'transformer'"),
    ("neumf", lambda a, m: m.__setitem__("model", ["neumf"]), "unknown completion model"),
    ("paper_ncf", _set_setting("prior_weight", -1.0),
     "PaperNCF refuses the file's settings: PaperNCFSettings.prior_weight must be"),
    ("paper_ncf", _set_setting("prior_factors", 9), "cannot hold the MF prior"),
    ("per_job_mean", _set_setting("fallback", "median"),
     "PerJobMean refuses the file's settings: fallback must be"),
    ("matrix_factorization", _set_setting("factors", 2.5), "factors = 2.5 is not an int"),
    ("matrix_factorization", _set_setting("online_steps", -1), "is not an int"),
    ("matrix_factorization", _set_setting("l2", "small"), "l2 = 'small' is not a finite"),
    ("matrix_factorization", _set_setting("clip", [0, "1"]), "clip = .* is not a list"),
    ("neumf", _set_setting("hidden_layers", [8.5]), "ints >= 0"),
    ("paper_ncf", _set_setting("init_embeddings_from_prior", 1), "not true or false"),
    ("paper_ncf", lambda a, m: m["settings"].pop("l2"), r"missing \['l2'\]"),
    ("paper_ncf", _set_setting("dropout", 0.1), r"unknown \['dropout'\]"),
    ("paper_ncf", lambda a, m: m["prior"]["settings"].__setitem__("epochs", 41),
     "the prior is not the 7x5 MF with 5 factors and 40 epochs"),
    # state
    ("paper_ncf", lambda a, m: m["observed"][0].__setitem__(
        next(i for i, v in enumerate(m["observed"][0]) if v is not None), 1.5),
     "normalise first"),
    ("per_job_mean", lambda a, m: m["observed"][0].__setitem__(0, "high"),
     "neither null nor a finite number"),
    ("per_job_mean", lambda a, m: m.__setitem__("shape", [0, 5]), "fitted shape"),
    ("neumf", lambda a, m: m.__setitem__("epochs_used", -3), "epochs_used"),
    ("paper_ncf", lambda a, m: m.__setitem__("prior_weight", -0.5), "prior_weight"),
    ("paper_ncf", lambda a, m: m.__setitem__("fit_report", {"prior": None}), "fit report"),
    ("neumf", lambda a, m: m.__setitem__("learned_on", "gpu"), "has the keys"),
    ("neumf", lambda a, m: m.__setitem__("metadata", "x"), "caller's metadata"),
])
def test_forged_files_are_refused_with_a_clear_message(saved, tmp_path, name, edit, message):
    path = _forge(_copy(saved, name, tmp_path), edit)
    with pytest.raises(CompletionModelFileError, match=message):
        load_completion_model(path)


@pytest.mark.parametrize("name,key,value", [("matrix_factorization", "l2", math.nan),
                                            ("neumf", "learning_rate", math.inf),
                                            ("paper_ncf", "init_std", -math.inf)])
def test_non_finite_settings_are_refused_on_load_and_on_save(saved, tmp_path, name, key, value):
    path = _forge(_copy(saved, name, tmp_path), _set_setting(key, value))
    with pytest.raises(CompletionModelFileError, match="non-finite number"):
        load_completion_model(path)
    model = _fitted(name)
    if name != "paper_ncf":   # PaperNCF's own settings refuse a non-finite value
        model.settings = dataclasses.replace(model.settings, **{key: value})
        with pytest.raises(CompletionModelFileError, match="cannot save.*non-finite"):
            save_completion_model(tmp_path / "bad.spncf", model)
        assert not (tmp_path / "bad.spncf").exists()


def test_non_finite_weights_are_refused_on_load_and_on_save(saved, tmp_path):
    def poison(arrays, meta):
        arrays["network.mlp.0.weight"][0, 0] = np.nan

    with pytest.raises(CompletionModelFileError, match="mlp.0.weight holds non-finite"):
        load_completion_model(_forge(_copy(saved, "paper_ncf", tmp_path), poison))
    model = _fitted("neumf")
    import torch
    with torch.no_grad():
        model.network.output.bias.fill_(math.inf)
    with pytest.raises(CompletionModelFileError, match="output.bias holds non-finite"):
        save_completion_model(tmp_path / "bad.spncf", model)


def test_finite_weights_whose_completion_overflows_are_refused(saved, tmp_path):
    def overflow(arrays, meta):
        meta["settings"]["clip"] = None   # clipping would hide the overflow
        for key in ("network.row_factors.weight", "network.column_factors.weight"):
            arrays[key][:] = 3e38

    with pytest.raises(CompletionModelFileError, match="completion is not finite"):
        load_completion_model(_forge(_copy(saved, "matrix_factorization", tmp_path), overflow))


def test_damaged_oversize_and_foreign_files_are_refused(saved, tmp_path):
    data = saved["neumf"][1].read_bytes()
    for damaged, message in ((data[:-1], "SHA-256"), (data[:-40] + bytes(40), "SHA-256"),
                             (data[:20], "truncated"), (b"SPMODEL2" + data[8:], "bad magic")):
        with pytest.raises(CompletionModelFileError, match=message):
            parse_completion_model(damaged, "download")
    huge = tmp_path / "huge.spncf"
    with open(huge, "wb") as handle:
        handle.write(MAGIC)
        handle.truncate(modelfile_module.MAX_FILE_BYTES + 1)   # sparse: no real disk use
    with pytest.raises(CompletionModelFileError, match="limit for a completion model file"):
        load_completion_model(huge)


def test_only_fitted_registered_models_are_saved(tmp_path):
    with pytest.raises(CompletionModelFileError, match="not fitted"):
        save_completion_model(tmp_path / "m.spncf", make_completion_model("neumf"))
    with pytest.raises(CompletionModelFileError, match="not fitted"):
        save_completion_model(tmp_path / "m.spncf", make_completion_model("per_job_mean"))

    class Tweaked(COMPLETION_MODELS["per_job_mean"]):
        pass

    truth, mask = _matrix()
    with pytest.raises(CompletionModelFileError, match="only the registered"):
        save_completion_model(tmp_path / "m.spncf", Tweaked().fit(truth, mask))
    with pytest.raises(CompletionModelFileError, match="metadata must be a dict"):
        save_completion_model(tmp_path / "m.spncf", _fitted("per_job_mean"), ["x"])
    with pytest.raises(CompletionModelFileError, match="not JSON"):
        save_completion_model(tmp_path / "m.spncf", _fitted("per_job_mean"), {"x": object()})


def test_importing_the_package_still_leaves_torch_alone():
    code = ("import sys, interference.ncf.modelfile as m; assert m.save_completion_model; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_module_examples_run():
    assert doctest.testmod(modelfile_module, optionflags=doctest.ELLIPSIS).failed == 0
