"""NCF completion model files: a fitted completion model, never pickle, refused when damaged.

Every registered completion model (``per_job_mean``, ``matrix_factorization``, ``paper_ncf``,
``neumf``) is saved in the array file of :mod:`workload.arrayfile` with magic
``b"SPNCFM01"``: size bound, magic, SHA-256 over header and arrays, array table back to back,
every value finite, no non-finite number in the header. On top of that, this module stores:

- arrays: the torch network's ``state_dict`` as ``network.<key>`` (float32; a 0-d buffer such as
  matrix factorisation's global mean is stored as one value), and for the paper NCF its MF prior's
  as ``prior.network.<key>``;
- metadata: the registry name (``model``), the settings dataclass as JSON (``settings``), the
  fitted ``shape``, the ``observed`` matrix (``null`` where unobserved; exact float64 values,
  which the per-job means are computed from and ``online_update`` records into), ``epochs_used``;
  for the paper NCF the lambda it trained with (``prior_weight``), its ``fit_report`` and its
  prior (the same fields, nested); and the caller's ``metadata``.

Loading rebuilds the model the way its own code would, and refuses (with
:class:`CompletionModelFileError`) an unknown model name, settings its constructor refuses (or of
the wrong type, or unknown or missing), arrays missing from or extra to the network the settings
and shape describe, shapes that differ from it, observed values outside the model's range, a
prior that is not the one the settings describe, and a model whose completion is not finite.
The network's shape is worked out on torch's ``meta`` device first, so hostile settings (a
hidden layer of a billion units) allocate nothing, and a fitted shape whose completion would
hold more than :data:`MAX_COMPLETION_FLOATS` values at the network's widest layer is refused
before anything is computed over it. What is finite but implausible is refused too (a
learned model must not publish it): observed values outside the model's range (its ``clip``
for matrix factorisation) or :data:`MAX_ABS_VALUE`, a ``clip`` beyond it, weights beyond
:data:`MAX_ABS_WEIGHT`, MF's global mean outside its range, a paper NCF's lambda that its
settings did not give it, and a model that cannot take one online step (tried on a copy).
The loaded model's ``complete()`` is bit-identical to the saved one's (the same float32
weights on the same code), and its ``online_update`` takes the same steps (the paper NCF's
prior target is recomputed from its restored MF prior exactly as ``fit`` computes it).

:func:`save_completion_model` parses the bytes back before writing them: a file it writes is a
file it can read. The digest is not a signature (see :mod:`workload.arrayfile`).

Example::

    >>> import os, tempfile
    >>> import numpy as np
    >>> from interference.ncf import make_completion_model
    >>> m = np.array([[0.2, 0.4], [0.9, 0.0]]); mask = np.array([[True, True], [True, False]])
    >>> model = make_completion_model("per_job_mean").fit(m, mask)
    >>> path = save_completion_model(os.path.join(tempfile.mkdtemp(), "m.spncf"), model,
    ...                              {"trained_on": "a doctest"})
    >>> np.array_equal(load_completion_model(path).complete(), model.complete())
    True
"""

from __future__ import annotations

import copy
import math
from dataclasses import MISSING, asdict, fields
from pathlib import Path

import numpy as np

from interference.ncf._base import CompletionModel, TorchCompletionModel
from interference.ncf.matrix_factorization import MatrixFactorization
from interference.ncf.paper_ncf import PaperNCF
from interference.ncf.per_job_mean import PerJobMean
from workload.arrayfile import ArrayFileError, read_arrays, read_bounded, write_arrays

__all__ = ["save_completion_model", "load_completion_model", "parse_completion_model",
           "CompletionModelFileError", "MAGIC", "FORMAT_VERSION", "MAX_FILE_BYTES",
           "MAX_HEADER_BYTES", "MAX_MATRIX_SIDE", "MAX_SETTING_INT", "MAX_SETTING_ITEMS",
           "MAX_TEXT_CHARS", "MAX_ONLINE_STEPS", "SETTING_BOUNDS", "MAX_COMPLETION_FLOATS",
           "MAX_ABS_VALUE", "MAX_ABS_WEIGHT"]

MAGIC = b"SPNCFM01"
FORMAT_VERSION = 1
#: a file larger than this is refused before it is read (a paper NCF on a 100 x 100 matrix is
#: about 200 KB)
MAX_FILE_BYTES = 64 << 20
#: the header holds the observed matrix as JSON (~6 bytes per unobserved entry, ~20 per
#: observed): 16 MB is a fully observed 800 x 800 matrix, far above the STDMs and co-location
#: matrices these models complete
MAX_HEADER_BYTES = 16 << 20
#: most rows or columns of a fitted matrix (rows of an embedding table)
MAX_MATRIX_SIDE = 1 << 16
#: the largest integer setting accepted (epochs, steps, widths: a bound against a hostile file)
MAX_SETTING_INT = 2 ** 31 - 1
#: the longest tuple setting (hidden layers, candidate lambdas)
MAX_SETTING_ITEMS = 64
#: the longest text setting (``prior``, ``fallback``)
MAX_TEXT_CHARS = 200
#: most SGD steps one ``online_update`` may take (the shipped models take 50): a file must not
#: make every update after loading run for hours
MAX_ONLINE_STEPS = 100_000
#: most values one layer of the network may hold when it runs over every entry of the fitted
#: matrix at once: rows x columns x the widest layer (what ``complete()`` does, and every online
#: step of the paper NCF's prior term, forward and backward). 2^24 float32 is 64 MiB: a paper
#: NCF (widest layer 128) of up to 131,072 entries (362 x 362, or an STDM of 11,900 rows),
#: MF (5 factors) up to 3.3 million. The shipped matrices are 26 x 26, 58 x 58 with the online
#: spare rows. Before this bound a 4 MiB file of a 600 x 600 paper NCF took 400 MiB to load.
MAX_COMPLETION_FLOATS = 1 << 24
#: largest magnitude of an observed value, a ``clip`` end, MF's global mean and a completed
#: value: the models complete normalised throughputs and normalised STDMs, in [0, 1]; a model
#: kept in raw units (``clip=None``) stays far below this
MAX_ABS_VALUE = 1e6
#: largest magnitude of a learned weight: the shipped models' are under 1 (L2-regularised
#: training). A 3e38 one (finite) loaded, and every online update after it raised
#: FloatingPointError; far above this a weight saturates a sigmoid or overflows a step.
MAX_ABS_WEIGHT = 1e4
#: [low, high] of the numeric settings whose constructors do not bound them (matrix
#: factorisation and NeuMF check nothing): checked after the constructor, so its own message
#: wins where it has one. Far beyond any tuned value; a negative ``init_std`` made torch raise
#: RuntimeError, a 1e308 learning rate only failed at the first online_update. ``clip``:
#: (low, high) of a completion, within :data:`MAX_ABS_VALUE`.
SETTING_BOUNDS = {"learning_rate": (1e-12, 1e3), "online_learning_rate": (1e-12, 1e3),
                  "l2": (0.0, 1e3), "init_std": (0.0, 100.0), "validation_share": (0.0, 0.9),
                  "prior_weight": (0.0, 1e6), "prior_weight_candidates": (0.0, 1e6),
                  "online_steps": (0, MAX_ONLINE_STEPS), "clip": (-MAX_ABS_VALUE, MAX_ABS_VALUE)}
#: what rebuilding a model from checked settings may still raise (torch and numpy on values
#: no check foresaw): refused as a CompletionModelFileError, never let out as it is
_REBUILD_ERRORS = (TypeError, ValueError, RuntimeError, ArithmeticError, IndexError, KeyError,
                   AttributeError)
_KIND = "completion model file"
_BASE_KEYS = {"model", "settings", "shape", "observed"}
_TORCH_KEYS = {"epochs_used"}
_PAPER_KEYS = {"prior_weight", "fit_report", "prior"}
_REPORT_KEYS = {"prior", "prior_weight", "epochs", "validation"}
_VALIDATION_KEYS = {"held_out_entries", "mse", "prior_mse"}


class CompletionModelFileError(ArrayFileError):
    """A completion model file that cannot be trusted or read, or a model that cannot be
    saved, with the reason (a ``ValueError``)."""


def _registry() -> dict[str, type[CompletionModel]]:
    # imported here: interference.ncf's __init__ imports this module
    from interference.ncf import COMPLETION_MODELS
    return COMPLETION_MODELS


# ------------------------------------------------------------------------------------ saving
def save_completion_model(path: str | Path, model: CompletionModel,
                          metadata: dict | None = None) -> Path:
    """Write the fitted ``model`` (and the caller's JSON ``metadata``: data hash, seeds, ...)
    to ``path``; returns the path. Refuses an unfitted model, a type not registered in
    ``COMPLETION_MODELS``, and anything non-finite (weights, settings, metadata).

    Example::

        model = make_completion_model("paper_ncf").fit(stdm, mask, seed=0)
        save_completion_model("models/stdm_ncf.spncf", model, {"stdm": "k80", "seed": 0})
    """
    metadata = {} if metadata is None else metadata
    if not isinstance(metadata, dict):
        raise CompletionModelFileError(f"metadata must be a dict, got {type(metadata).__name__}")
    arrays, state = _export(model, "")
    state["metadata"] = metadata
    for array_name, array in arrays:
        if not np.isfinite(array).all():
            raise CompletionModelFileError(f"cannot save {model.name}: {array_name} holds "
                                           "non-finite values")
    data = write_arrays(None, arrays, state, MAGIC, format_version=FORMAT_VERSION,
                        error=CompletionModelFileError)
    try:   # never write a file the loader refuses (non-finite settings, a non-finite model)
        parse_completion_model(data, f"the {model.name} model to save")
    except CompletionModelFileError as exc:
        raise CompletionModelFileError(f"cannot save: {exc}") from None
    path = Path(path)
    path.write_bytes(data)
    return path


def _export(model: CompletionModel, prefix: str) -> tuple[list[tuple[str, np.ndarray]], dict]:
    """(named arrays, metadata) of a fitted registered model; array names start ``prefix``."""
    registry = _registry()
    if registry.get(getattr(model, "name", None)) is not type(model):
        raise CompletionModelFileError(f"only the registered completion models "
                                       f"({', '.join(sorted(registry))}) can be saved, got "
                                       f"{type(model).__name__}")
    if model.mask is None or (isinstance(model, TorchCompletionModel) and model.network is None):
        raise CompletionModelFileError(f"{model.name} is not fitted: nothing to save")
    state = {"model": model.name, "settings": asdict(model.settings),
             "shape": list(model.shape),
             "observed": [[float(v) if seen else None for v, seen in zip(values, row)]
                          for values, row in zip(model.matrix, model.mask)]}
    arrays = []
    if isinstance(model, TorchCompletionModel):
        for key, tensor in model.network.state_dict().items():
            if str(tensor.dtype) != "torch.float32":
                raise CompletionModelFileError(f"cannot save {model.name}: {key} is "
                                               f"{tensor.dtype}, the file holds float32")
            array = tensor.detach().cpu().numpy().copy()
            arrays.append((f"{prefix}network.{key}", array.reshape(array.shape or (1,))))
        used = getattr(model, "epochs_used", None)
        state["epochs_used"] = None if used is None else int(used)
    if isinstance(model, PaperNCF):
        state["prior_weight"] = float(model._prior_weight)
        state["fit_report"] = model.fit_report   # JSON turns the candidates' keys into text
        state["prior"] = None
        if model.prior_model is not None:
            prior_arrays, state["prior"] = _export(model.prior_model, f"{prefix}prior.")
            arrays += prior_arrays
    return arrays, state


# ----------------------------------------------------------------------------------- loading
def load_completion_model(path: str | Path) -> CompletionModel:
    """The fitted completion model in the file at ``path`` (see the module docstring for every
    check); :class:`CompletionModelFileError` when it is not a sound completion model file.

    Example::

        model = load_completion_model("models/stdm_ncf.spncf")
        model.online_update([3], [7], [0.42])   # then keep learning, as after fit
    """
    data = read_bounded(path, _KIND, MAX_FILE_BYTES, CompletionModelFileError)
    return parse_completion_model(data, str(path))[0]


def parse_completion_model(data: bytes, name: str = _KIND) -> tuple[CompletionModel, dict]:
    """``(model, the caller's metadata)`` of a completion model file's bytes (a download);
    ``name`` is used in error messages.

    Example::

        model, metadata = parse_completion_model(response.content, "downloaded NCF model")
    """
    arrays, state = read_arrays(data, name, MAGIC, kind=_KIND, format_version=FORMAT_VERSION,
                                max_file_bytes=MAX_FILE_BYTES, max_header_bytes=MAX_HEADER_BYTES,
                                max_dimension=MAX_MATRIX_SIDE, max_dims=2,
                                error=CompletionModelFileError)
    by_name, used = dict(arrays), set()
    try:
        model = _import(state, by_name, "", name, used, top=True)
        unused = sorted(set(by_name) - used)
        if unused:
            _refuse(name, f"arrays {unused} belong to no part of the {model.name} model")
        completion = model.complete()   # bounded: _import checked MAX_COMPLETION_FLOATS
        if not np.isfinite(completion).all():
            _refuse(name, f"the {model.name} model's completion is not finite: refused")
        _check_plausible(model, completion, name)
        _check_online_step(model, name)
    except CompletionModelFileError:
        raise
    except _REBUILD_ERRORS as exc:  # every check passed, yet the model cannot be rebuilt
        _refuse(name, f"the model cannot be rebuilt from the file: {type(exc).__name__}: "
                      f"{str(exc)[:200]}")
    return model, state["metadata"]


def _refuse(name: str, reason: str):
    raise CompletionModelFileError(f"{name}: {reason}")


def _import(state, arrays: dict[str, np.ndarray], prefix: str, name: str, used: set[str],
            top: bool = False) -> CompletionModel:
    """The model ``state`` describes, its arrays (named ``prefix...``) loaded and marked used."""
    if not isinstance(state, dict):
        _refuse(name, f"the {prefix or 'model'} state is not an object")
    registry = _registry()
    cls = registry.get(state.get("model")) if isinstance(state.get("model"), str) else None
    if cls is None:
        _refuse(name, f"unknown completion model {state.get('model')!r}; known: "
                      f"{', '.join(sorted(registry))}")
    keys = _BASE_KEYS | ({"metadata"} if top else set())
    keys |= _TORCH_KEYS if issubclass(cls, TorchCompletionModel) else set()
    keys |= _PAPER_KEYS if cls is PaperNCF else set()
    if set(state) != keys:
        _refuse(name, f"a {cls.name} state has the keys {sorted(keys)}, the file's has "
                      f"{sorted(state)}")
    if top and not isinstance(state["metadata"], dict):
        _refuse(name, "the caller's metadata is not an object")
    model = _settings_model(cls, state["settings"], name)
    shape = _shape(state["shape"], name)
    _check_work(model, shape, name)
    matrix, mask = _observed(state["observed"], shape, name)
    if isinstance(model, TorchCompletionModel):
        try:
            model._check_values(matrix[mask], "the file")
        except ValueError as exc:
            _refuse(name, str(exc))
    low, high = _value_range(model)
    observed = matrix[mask]
    if observed.size and (observed.min() < low or observed.max() > high):
        _refuse(name, f"the observed matrix holds values in [{observed.min():.3g}, "
                      f"{observed.max():.3g}]; a {model.name} model with these settings holds "
                      f"values in [{low:g}, {high:g}]")
    model._store(matrix, mask)
    if isinstance(model, PerJobMean):
        model._refresh()   # the means, computed from the exact float64 observations
    if isinstance(model, TorchCompletionModel):
        _load_network(model, shape, arrays, prefix, name, used)
        epochs = state["epochs_used"]
        if epochs is not None:
            if not _is_count(epochs):
                _refuse(name, f"epochs_used {epochs!r} is not an int >= 0")
            model.epochs_used = epochs
    if isinstance(model, PaperNCF):
        _paper_state(model, state, arrays, prefix, name, used)
    return model


def _load_network(model: TorchCompletionModel, shape: tuple[int, int], arrays, prefix: str,
                  name: str, used: set[str]) -> None:
    """Check the file's arrays against the network the settings and shape describe (worked out
    on the meta device: nothing allocated), then build it and load them."""
    import torch

    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        skeleton = model.build_network(*shape, output_bias=0.0)
    start = f"{prefix}network."
    expected = {start + key: tuple(t.shape) for key, t in skeleton.state_dict().items()}
    present = {key for key in arrays if key.startswith(start)}
    if missing := sorted(set(expected) - present):
        _refuse(name, f"the {model.name} network needs arrays {missing} that the file lacks")
    if extra := sorted(present - set(expected)):
        _refuse(name, f"arrays {extra} are not part of the {model.name} network its settings "
                      "describe")
    for key, want in expected.items():
        if arrays[key].shape != (want or (1,)):
            _refuse(name, f"array {key} has shape {list(arrays[key].shape)}; the {model.name} "
                          f"network its settings describe needs {list(want or (1,))}")
    model._build(shape, 0.5, seed=0)   # RNG-isolated; every value is replaced just below
    model.network.load_state_dict({key[len(start):]: torch.from_numpy(
        arrays[key].reshape(want).copy()) for key, want in expected.items()}, strict=True)
    model.network.eval()
    used.update(expected)


def _paper_state(model: PaperNCF, state: dict, arrays, prefix: str, name: str,
                 used: set[str]) -> None:
    """Restore the paper NCF's lambda, fit report, MF prior and the prior term's target."""
    import torch

    weight = state["prior_weight"]
    if not _is_number(weight) or weight < 0:
        _refuse(name, f"prior_weight {weight!r} is not a finite number >= 0")
    # fit trains with the settings' lambda or one of its candidates, nothing else (a 1e300
    # lambda loaded, and every online update after it raised FloatingPointError)
    s = model.settings
    if weight != s.prior_weight and weight not in s.prior_weight_candidates:
        _refuse(name, f"prior_weight {repr(weight)[:40]} is neither the settings' prior_weight "
                      f"{s.prior_weight!r} nor one of its candidates")
    model._prior_weight = weight
    model.fit_report = _fit_report(state["fit_report"], name)
    model.prior_model, model._prior_target = None, None
    if state["prior"] is None:
        return
    if s.prior != "matrix_factorization":
        _refuse(name, f"the file holds an MF prior but its settings say prior={s.prior!r}")
    prior = _import(state["prior"], arrays, f"{prefix}prior.", name, used)
    wanted = MatrixFactorization(factors=s.prior_factors, epochs=s.prior_epochs).settings
    if type(prior) is not MatrixFactorization or prior.settings != wanted or (
            prior.shape != model.shape):
        _refuse(name, f"the prior is not the {model.shape[0]}x{model.shape[1]} MF with "
                      f"{s.prior_factors} factors and {s.prior_epochs} epochs that the "
                      "paper NCF's settings describe")
    model.prior_model = prior
    # what PaperNCF._start computes from its prior: MF's completion clipped to [0, 1]
    completed = np.clip(prior.complete(), 0.0, 1.0)
    rows, cols = np.divmod(np.arange(completed.size), completed.shape[1])
    model._prior_target = (torch.as_tensor(rows), torch.as_tensor(cols),
                           torch.as_tensor(completed.ravel(), dtype=torch.float32))


# ---------------------------------------------------------------------------- plausibility
def _widest(model: CompletionModel, shape: tuple[int, int]) -> int:
    """Values per entry in the widest layer of ``model``'s network (1 without one), worked
    out on the meta device (nothing allocated)."""
    if not isinstance(model, TorchCompletionModel):
        return 1
    import torch
    from torch import nn

    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        skeleton = model.build_network(*shape, output_bias=0.0)
    widths = [1]
    for module in skeleton.modules():
        if isinstance(module, nn.Linear):
            widths += [module.in_features, module.out_features]
        elif isinstance(module, nn.Embedding):
            widths.append(module.embedding_dim)
    return max(widths)


def _check_work(model: CompletionModel, shape: tuple[int, int], name: str) -> None:
    """Refuse a fitted shape whose completion would exceed :data:`MAX_COMPLETION_FLOATS`."""
    widest = _widest(model, shape)
    work = shape[0] * shape[1] * widest
    if work > MAX_COMPLETION_FLOATS:
        _refuse(name, f"a {shape[0]}x{shape[1]} {model.name} with a widest layer of {widest} "
                      f"would hold {work:,} values per layer to complete (limit "
                      f"{MAX_COMPLETION_FLOATS:,})")


def _value_range(model: CompletionModel) -> tuple[float, float]:
    """The values ``model`` can hold: a sigmoid model's range, MF's ``clip``, else
    +-:data:`MAX_ABS_VALUE`."""
    if isinstance(model, TorchCompletionModel) and model.value_range is not None:
        return model.value_range
    clip = getattr(model.settings, "clip", None)
    return tuple(clip) if clip is not None else (-MAX_ABS_VALUE, MAX_ABS_VALUE)


def _networks(model: CompletionModel):
    """(array-name prefix, network) of the model and of its MF prior, if any."""
    if getattr(model, "network", None) is not None:
        yield "network.", model.network
    prior = getattr(model, "prior_model", None)
    if prior is not None:
        yield "prior.network.", prior.network


def _check_plausible(model: CompletionModel, completion: np.ndarray, name: str) -> None:
    """Refuse a finite completion beyond :data:`MAX_ABS_VALUE`, weights beyond
    :data:`MAX_ABS_WEIGHT`, and an MF global mean outside its model's values."""
    if completion.size and float(np.abs(completion).max()) > MAX_ABS_VALUE:
        _refuse(name, f"the {model.name} model completes values up to "
                      f"{float(np.abs(completion).max()):.3g} (limit {MAX_ABS_VALUE:g})")
    for prefix, network in _networks(model):
        owner = model.prior_model if prefix.startswith("prior") else model
        for key, tensor in network.state_dict().items():
            array = tensor.detach().cpu().numpy()
            if key == "global_mean":   # a value, not a weight: it must be one the model holds
                low, high = _value_range(owner)
                if not low <= float(array) <= high:
                    _refuse(name, f"{prefix}global_mean {float(array):.3g} is outside the "
                                  f"values [{low:g}, {high:g}] the model holds")
            elif array.size and float(np.abs(array).max()) > MAX_ABS_WEIGHT:
                _refuse(name, f"array {prefix}{key} holds a weight of magnitude "
                              f"{float(np.abs(array).max()):.3g} (limit {MAX_ABS_WEIGHT:g})")


def _check_online_step(model: CompletionModel, name: str) -> None:
    """Refuse a model that cannot take one online SGD step: tried on a copy (the loaded model
    is left as it is), on one observed entry and its own value (else entry (0, 0) and its
    prediction). Bounded by :data:`MAX_COMPLETION_FLOATS`, one step is cheap."""
    if not isinstance(model, TorchCompletionModel):
        return   # online_update only records values and recomputes means
    rows, cols = np.nonzero(model.mask)
    row, col = (int(rows[0]), int(cols[0])) if rows.size else (0, 0)
    value = float(model.matrix[row, col]) if rows.size else float(model.predict([0], [0])[0])
    low, high = _value_range(model)
    trial = copy.deepcopy(model)
    try:
        trial.online_update([row], [col], [min(max(value, low), high)], steps=1)
    except (FloatingPointError, ValueError, RuntimeError) as exc:
        _refuse(name, f"the {model.name} model cannot take one online step: "
                      f"{type(exc).__name__}: {str(exc)[:120]}")


# ------------------------------------------------------------------------------- validation
def _is_number(value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SETTING_INT


def _settings_model(cls: type[CompletionModel], raw, name: str) -> CompletionModel:
    """``cls`` built with the file's settings: each checked against its dataclass field's
    type, then the model's own constructor (and its ``__post_init__``) judges them."""
    if not isinstance(raw, dict):
        _refuse(name, f"the {cls.name} settings are not an object")
    known = {f.name: f for f in fields(cls.Settings)}
    missing, unknown = sorted(set(known) - set(raw)), sorted(set(raw) - set(known))
    if missing or unknown:
        _refuse(name, f"the {cls.name} settings do not match this streamplace's: missing "
                      f"{missing}, unknown {unknown}")
    values = {key: _setting(field, raw[key], cls.name, name) for key, field in known.items()}
    try:
        model = cls(**values)
    except (TypeError, ValueError) as exc:
        _refuse(name, f"{cls.__name__} refuses the file's settings: {exc}")
    _check_bounds(values, cls.name, name)
    return model


def _check_bounds(values: dict, model_name: str, name: str) -> None:
    """Refuse settings outside :data:`SETTING_BOUNDS`, and a ``clip`` that is not [low, high]."""
    for key, (low, high) in SETTING_BOUNDS.items():
        value = values.get(key)
        if value is None:
            continue
        items = value if isinstance(value, tuple) else (value,)
        if not all(low <= v <= high for v in items):
            _refuse(name, f"{model_name} setting {key} = {repr(value)[:80]} is not in "
                          f"[{low:g}, {high:g}]")
    clip = values.get("clip")
    if clip is not None and not (len(clip) == 2 and clip[0] < clip[1]):
        _refuse(name, f"{model_name} setting clip = {repr(clip)[:80]} is not [low, high] with "
                      "low < high")


def _setting(field, value, model_name: str, name: str):
    """``value`` as the type of ``field``'s default (a JSON list becomes a tuple)."""
    default = field.default if field.default is not MISSING else field.default_factory()
    shown = f"{model_name} setting {field.name} = {repr(value)[:80]}"
    if value is None:
        if "None" in str(field.type):
            return None
        _refuse(name, f"{shown} may not be null")
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        _refuse(name, f"{shown} is not true or false")
    if isinstance(default, int):
        if _is_count(value):
            return value
        _refuse(name, f"{shown} is not an int in [0, {MAX_SETTING_INT}]")
    if isinstance(default, float):
        if _is_number(value):
            return value
        _refuse(name, f"{shown} is not a finite number")
    if isinstance(default, str):
        if isinstance(value, str) and len(value) <= MAX_TEXT_CHARS:
            return value
        _refuse(name, f"{shown} is not a text of at most {MAX_TEXT_CHARS} characters")
    if isinstance(default, tuple):
        counts = bool(default) and all(isinstance(v, int) for v in default)   # layer widths
        if isinstance(value, list) and len(value) <= MAX_SETTING_ITEMS and all(
                _is_count(v) if counts else _is_number(v) for v in value):
            return tuple(value)
        _refuse(name, f"{shown} is not a list of at most {MAX_SETTING_ITEMS} "
                      f"{'ints >= 0' if counts else 'finite numbers'}")
    _refuse(name, f"{shown}: this loader cannot read a setting like its default {default!r}")


def _shape(raw, name: str) -> tuple[int, int]:
    if not (isinstance(raw, list) and len(raw) == 2 and all(
            _is_count(v) and 0 < v <= MAX_MATRIX_SIDE for v in raw)):
        _refuse(name, f"the fitted shape {repr(raw)[:80]} is not [rows, columns], each 1 to "
                      f"{MAX_MATRIX_SIDE}")
    return raw[0], raw[1]


def _observed(raw, shape: tuple[int, int], name: str) -> tuple[np.ndarray, np.ndarray]:
    """The observed matrix (NaN elsewhere) and mask from rows of numbers and nulls."""
    if not (isinstance(raw, list) and len(raw) == shape[0] and all(
            isinstance(row, list) and len(row) == shape[1] for row in raw)):
        _refuse(name, f"the observed matrix is not {shape[0]} rows of {shape[1]} entries")
    if not all(v is None or _is_number(v) for row in raw for v in row):
        _refuse(name, "the observed matrix holds an entry that is neither null nor a finite "
                      "number")
    mask = np.array([[v is not None for v in row] for row in raw], dtype=bool).reshape(shape)
    matrix = np.array([[np.nan if v is None else float(v) for v in row] for row in raw],
                      dtype=np.float64).reshape(shape)
    return matrix, mask


def _fit_report(raw, name: str) -> dict | None:
    """The paper NCF's fit report; the candidate lambdas' MSE keys back to numbers."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) != _REPORT_KEYS:
        _refuse(name, f"the fit report must be null or an object with keys {sorted(_REPORT_KEYS)}")
    validation = raw["validation"]
    if validation is None:
        return dict(raw)
    if not isinstance(validation, dict) or set(validation) != _VALIDATION_KEYS or not (
            isinstance(validation["mse"], dict)):
        _refuse(name, "the fit report's validation must be null or an object with keys "
                      f"{sorted(_VALIDATION_KEYS)}")
    mse = {}
    for key, value in validation["mse"].items():
        try:
            candidate = float(key)
        except ValueError:
            candidate = math.nan
        if not (math.isfinite(candidate) and _is_number(value)):
            _refuse(name, f"the fit report's validation MSE {key!r}: {value!r} is not a "
                          "finite lambda and a finite number")
        mse[candidate] = value
    return {**raw, "validation": {**validation, "mse": mse}}
