"""Hostile NCF / MF completion model files (interference.ncf.modelfile) that are well formed,
finite and carry a valid digest, yet would make a loaded model allocate without bound or
publish, learn from or fail on implausible values: refused with CompletionModelFileError and
a one-line reason, before anything large is computed."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

import interference.ncf.modelfile as modelfile
from interference.ncf import make_completion_model
from interference.ncf.matrix_factorization import MatrixFactorization
from interference.ncf.modelfile import (FORMAT_VERSION, MAGIC, CompletionModelFileError,
                                        parse_completion_model, save_completion_model)
from interference.ncf.paper_ncf import PaperNCF
from interference.ncf.shipped import load_shipped_ncf, shipped_ncf_model
from workload.arrayfile import read_arrays, write_arrays

torch.set_num_threads(1)
FAST = {"matrix_factorization": {"epochs": 60}, "neumf": {"epochs": 60},
        "paper_ncf": {"epochs": 40, "prior_epochs": 40}, "per_job_mean": {}}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, bytes]:
    """Registry name -> the bytes of a small fitted model's file (values in [0, 1])."""
    rng = np.random.default_rng(3)
    truth = rng.random((7, 2)) @ rng.random((2, 5)) / 2
    mask = rng.random(truth.shape) < 0.5
    folder = tmp_path_factory.mktemp("files")
    return {name: save_completion_model(folder / f"{name}.spncf", make_completion_model(
        name, **settings).fit(truth, mask, seed=1)).read_bytes()
        for name, settings in FAST.items()}


def _forge(data: bytes, edit) -> bytes:
    """The file after ``edit(arrays, state)``, re-signed (only the content checks can tell)."""
    arrays, state = read_arrays(data, "original", MAGIC, max_header_bytes=16 << 20)
    arrays = {k: v.copy() for k, v in arrays}
    edit(arrays, state)
    return write_arrays(None, list(arrays.items()), state, MAGIC, format_version=FORMAT_VERSION)


def _first_observed(state):
    return next((i, j) for i, row in enumerate(state["observed"])
                for j, v in enumerate(row) if v is not None)


def _set_observed(value):
    def edit(arrays, state):
        i, j = _first_observed(state)
        state["observed"][i][j] = value
    return edit


def _scale(key, factor):
    return lambda arrays, state: arrays.__setitem__(key, arrays[key] * factor)


def _put(key, value):
    return lambda arrays, state: arrays[key].__setitem__((...), value)


def _both(*edits):
    def edit(arrays, state):
        for e in edits:
            e(arrays, state)
    return edit


# ------------------------------------------------------------ finding 2: plausible contents
@pytest.mark.parametrize("name,edit,reason", [
    # MF holds normalised throughputs: its observed values must lie in its clip range
    ("matrix_factorization", _set_observed(1e300), r"observed matrix holds values in"),
    ("matrix_factorization", _set_observed(-5.0), r"observed matrix holds values in"),
    ("per_job_mean", _set_observed(1e300), r"observed matrix holds values in"),
    # clip wide open, and weights scaled far past training's (finite, so digest-valid)
    ("matrix_factorization", lambda a, s: s["settings"].__setitem__("clip", [-1e300, 1e300]),
     r"setting clip .* is not in"),
    ("matrix_factorization", _put("network.global_mean", 3e38), r"global_mean 3e\+38 is outside"),
    ("matrix_factorization", _put("network.global_mean", -4.0), r"global_mean -4 is outside"),
    ("matrix_factorization", _scale("network.row_bias.weight", 1e9), r"row_bias.weight holds a "
                                                                     r"weight of magnitude"),
    ("neumf", _put("network.output.bias", 5e4), r"output.bias holds a weight"),
    ("paper_ncf", _scale("network.mlp.0.weight", 1e12), r"mlp.0.weight holds a weight"),
    ("paper_ncf", _put("prior.network.global_mean", 2.0), r"prior.network.global_mean"),
    # a raw-unit MF (no clip) may not complete values beyond MAX_ABS_VALUE
    ("matrix_factorization", _both(lambda a, s: s["settings"].__setitem__("clip", None),
                                   _put("network.global_mean", 0.5),
                                   _put("network.row_factors.weight", 1e4),
                                   _put("network.column_factors.weight", 1e4)),
     r"completes values up to"),
    # the paper NCF's lambda in its state: only the one its settings gave it
    ("paper_ncf", lambda a, s: s.__setitem__("prior_weight", 1e300), r"prior_weight 1e\+300"),
    ("paper_ncf", lambda a, s: s.__setitem__("prior_weight", 0.7), r"prior_weight 0.7 is neither"),
])
def test_implausible_contents_are_refused(files, name, edit, reason):
    with pytest.raises(CompletionModelFileError, match=reason):
        parse_completion_model(_forge(files[name], edit), "forged")


def test_a_model_that_cannot_take_one_online_step_is_refused_untouched(files, monkeypatch):
    def diverge(self, rows, cols, values, steps=None):
        raise FloatingPointError("parameter 'row_factors.weight' became non-finite")

    model, _ = parse_completion_model(files["matrix_factorization"], "sound")
    monkeypatch.setattr(MatrixFactorization, "online_update", diverge)
    with pytest.raises(CompletionModelFileError, match="cannot take one online step"):
        parse_completion_model(files["matrix_factorization"], "diverging")
    monkeypatch.undo()
    loaded, _ = parse_completion_model(files["matrix_factorization"], "sound")
    np.testing.assert_array_equal(loaded.complete(), model.complete())   # the trial was a copy


@pytest.mark.parametrize("name", ["matrix_factorization", "paper_ncf"])
@pytest.mark.parametrize("gpu", ["k80", "p100", "v100"])
def test_the_shipped_models_load_and_keep_learning(name, gpu):
    model, _ = load_shipped_ncf(name, gpu)
    model.online_update([0], [1], [0.5])
    assert np.isfinite(model.complete()).all()


# ------------------------------------------------------------ finding 1: bounded memory
def _big_paper_ncf(rows: int, hidden: list[int] | None = None) -> bytes:
    """A small, well-formed paper-NCF file (valid digest, default layout) of a large fitted
    shape: what the probe forged (a 4 MiB file of 600 x 600 took 400 MiB to load)."""
    data = shipped_ncf_model("paper_ncf", "v100").read_bytes()
    _, state = read_arrays(data, "shipped", MAGIC, max_header_bytes=16 << 20)
    if hidden:
        state["settings"]["hidden_layers"] = hidden
    observed = [[None] * rows for _ in range(rows)]
    observed[0][0] = 0.5
    for part in (state, state["prior"]):
        part["shape"], part["observed"] = [rows, rows], observed
    state["fit_report"] = None
    s = state["settings"]
    model = PaperNCF(**{k: tuple(v) if isinstance(v, list) else v for k, v in s.items()})
    rng = np.random.default_rng(0)
    arrays = []
    with torch.device("meta"):
        nets = (("network.", model.build_network(rows, rows, 0.0)),
                ("prior.network.", MatrixFactorization(factors=s["prior_factors"],
                                                       epochs=s["prior_epochs"])
                 .build_network(rows, rows, 0.0)))
    for prefix, net in nets:
        for key, t in net.state_dict().items():
            arrays.append((prefix + key, (rng.standard_normal(tuple(t.shape) or (1,)) * 0.01)
                           .astype("<f4")))
    return write_arrays(None, arrays, state, MAGIC, format_version=FORMAT_VERSION)


@pytest.mark.parametrize("rows,hidden", [(400, None), (120, [4096])])
def test_a_small_file_of_a_large_completion_is_refused_before_computing_it(rows, hidden,
                                                                           monkeypatch):
    data = _big_paper_ncf(rows, hidden)
    assert len(data) < 8 << 20

    def never(self):
        raise AssertionError("complete() ran over a completion past the bound")

    monkeypatch.setattr(PaperNCF, "complete", never)
    monkeypatch.setattr(MatrixFactorization, "complete", never)
    started = time.perf_counter()
    with pytest.raises(CompletionModelFileError, match="values per layer to complete"):
        parse_completion_model(data, "big")
    assert time.perf_counter() - started < 10.0


def test_the_bound_leaves_room_for_the_matrices_iawp_completes():
    # 26 Gavel jobs + 32 spare rows online; an STDM of 1,000 stage types x 11 metrics
    paper = PaperNCF()
    for shape in ((58, 58), (1000, 11)):
        modelfile._check_work(paper, shape, "fits")
    with pytest.raises(CompletionModelFileError):
        modelfile._check_work(paper, (400, 400), "too big")
