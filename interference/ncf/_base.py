"""What every completion model shares: the small interface, input checks, and (for the torch
models) one full-batch training loop.

A completion model fills the missing entries of a partially observed matrix (an STDM, or a
(job, partner) co-location matrix). The interface is deliberately small, like Gavel's policies:

- ``fit(matrix, mask, seed) -> self``: learn from the entries where ``mask`` is true (other
  entries of ``matrix`` are ignored and may be NaN);
- ``predict(rows, cols) -> np.ndarray``: predictions at those (row, column) index pairs;
- ``complete() -> np.ndarray``: the model's prediction for every entry (observed ones too);
- ``online_update(rows, cols, values, steps)``: learn from newly observed entries without
  refitting (the paper: plain SGD after pre-training).

Training of the torch models is full batch: these matrices have at most a few thousand observed
entries, so one batch is both the fastest and the simplest (and it makes learning deterministic
for a seed: the only randomness is the initialisation, drawn under ``torch.random.fork_rng``
so the caller's global torch seed is left alone).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import fields, replace
from typing import Any, ClassVar

import numpy as np

__all__ = ["CompletionModel", "TorchCompletionModel", "check_observations", "as_index_arrays",
           "check_finite_parameters", "observed_validation_split"]


def check_observations(matrix: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validated float64 matrix and bool mask of the same 2-D shape; observed entries finite."""
    matrix = np.asarray(matrix, dtype=np.float64)
    mask = np.asarray(mask, dtype=bool)
    if matrix.ndim != 2 or matrix.shape != mask.shape:
        raise ValueError(f"matrix and mask must be 2-D of one shape, got {matrix.shape} and "
                         f"{mask.shape}")
    if not np.all(np.isfinite(matrix[mask])):
        raise ValueError("observed entries (mask true) must be finite numbers")
    return matrix, mask


def as_index_arrays(rows, cols, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Row and column index arrays of equal length, checked against ``shape``."""
    rows = np.atleast_1d(np.asarray(rows, dtype=np.int64))
    cols = np.atleast_1d(np.asarray(cols, dtype=np.int64))
    if rows.shape != cols.shape or rows.ndim != 1:
        raise ValueError(f"rows and cols must be 1-D of one length, got {rows.shape}, {cols.shape}")
    if rows.size and (rows.min() < 0 or rows.max() >= shape[0] or cols.min() < 0
                      or cols.max() >= shape[1]):
        raise IndexError(f"index outside the fitted {shape[0]}x{shape[1]} matrix (a model's "
                         "shape is fixed by fit; reserve rows for later arrivals there)")
    return rows, cols


def observed_validation_split(mask: np.ndarray, share: float, rng: np.random.Generator,
                              pair_symmetric: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Split the OBSERVED entries into (training mask, validation mask) for choosing settings.

    Only entries where ``mask`` is true are ever put in either part, so a choice made on the
    validation part never looks at an unobserved (held-out evaluation) entry. ``share`` of the
    observed units go to validation. With ``pair_symmetric`` (default: when the matrix is
    square) the unit is the unordered pair {(a, b), (b, a)}: one co-location experiment reveals
    both entries, so splitting them would let validation peek at its mirror entry and choose
    settings that are too optimistic. The validation part is empty when there are fewer than
    2 units (nothing to hold out) and never takes every unit.

    Example::

        >>> mask = np.array([[True, True], [True, False]])
        >>> train, valid = observed_validation_split(mask, 0.5, np.random.default_rng(0))
        >>> bool(((train | valid) == mask).all() and not (train & valid).any())
        True
    """
    mask = np.asarray(mask, dtype=bool)
    if not (math.isfinite(share) and 0.0 <= share < 1.0):
        raise ValueError(f"validation share must be in [0, 1), got {share!r}")
    if pair_symmetric is None:
        pair_symmetric = mask.shape[0] == mask.shape[1]
    rows, cols = np.nonzero(mask)
    if pair_symmetric:
        # unit id = the unordered pair; its mirror entry (if observed) goes with it
        units = np.minimum(rows, cols) * max(mask.shape) + np.maximum(rows, cols)
    else:
        units = rows * mask.shape[1] + cols
    unique = np.unique(units)
    held_units = np.zeros(0, dtype=units.dtype)
    if unique.size >= 2 and share > 0:
        count = min(unique.size - 1, max(1, round(share * unique.size)))
        held_units = rng.choice(unique, size=count, replace=False)
    held = np.isin(units, held_units)
    validation = np.zeros_like(mask)
    validation[rows[held], cols[held]] = True
    return mask & ~validation, validation


def check_finite_parameters(network, what: str) -> None:
    """Raise if any parameter of ``network`` is NaN or infinite (nothing non-finite is kept)."""
    import torch

    for name, parameter in network.named_parameters():
        if not bool(torch.isfinite(parameter).all()):
            raise FloatingPointError(f"{what}: parameter {name!r} became non-finite (lower the "
                                     "learning rate, or check the inputs)")


class CompletionModel(ABC):
    """Base of every completion model. Subclasses set ``name`` and a ``Settings`` dataclass.

    ``Model(settings=None, **overrides)`` builds the settings from the dataclass defaults with
    ``overrides`` replaced (unknown names raise ``TypeError``).
    """

    name: ClassVar[str]
    Settings: ClassVar[type]

    def __init__(self, settings: Any | None = None, **overrides: Any) -> None:
        base = settings if settings is not None else self.Settings()
        known = {f.name for f in fields(base)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown settings {unknown}; known: "
                            f"{sorted(known)}")
        self.settings = replace(base, **overrides)
        self.matrix: np.ndarray | None = None   # observed values (NaN elsewhere), kept up to date
        self.mask: np.ndarray | None = None     # by fit and online_update

    # ------------------------------------------------------------------ interface
    @abstractmethod
    def fit(self, matrix: np.ndarray, mask: np.ndarray, seed: int = 0) -> CompletionModel:
        """Learn from the observed entries; returns ``self``."""

    @abstractmethod
    def predict(self, rows, cols) -> np.ndarray:
        """Predicted values at the (row, col) index pairs."""

    def complete(self) -> np.ndarray:
        """The model's prediction for every entry of the fitted shape."""
        n_rows, n_cols = self.shape
        rows, cols = np.divmod(np.arange(n_rows * n_cols), n_cols)
        return self.predict(rows, cols).reshape(n_rows, n_cols)

    @abstractmethod
    def online_update(self, rows, cols, values, steps: int | None = None) -> CompletionModel:
        """Learn from newly observed entries (also recorded in ``matrix``/``mask``)."""

    # ------------------------------------------------------------------ helpers
    @property
    def shape(self) -> tuple[int, int]:
        if self.mask is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(matrix, mask)")
        return self.mask.shape

    def _store(self, matrix: np.ndarray, mask: np.ndarray) -> None:
        self.matrix = np.where(mask, matrix, np.nan)
        self.mask = mask.copy()

    def _record(self, rows, cols, values) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows, cols = as_index_arrays(rows, cols, self.shape)
        values = np.atleast_1d(np.asarray(values, dtype=np.float64))
        if values.shape != rows.shape or not np.all(np.isfinite(values)):
            raise ValueError("values must be finite, one per (row, col)")
        self.matrix[rows, cols] = values
        self.mask[rows, cols] = True
        return rows, cols, values

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings})"


class TorchCompletionModel(CompletionModel):
    """Shared full-batch training for the torch models.

    A subclass provides ``build_network(n_rows, n_cols, output_bias) -> nn.Module`` whose
    ``forward(rows, cols)`` maps two LongTensors of indices to predictions (shape ``(B,)``), and
    its Settings must have: ``l2``, ``learning_rate``, ``epochs``, ``online_learning_rate``,
    ``online_steps`` (and may have ``validation_share``: early stopping, off by default).
    Loss = mean squared error on the observed entries + ``l2`` x (sum of squares of all
    parameters): the paper's "squared error + L2".
    Pre-training uses Adam (paper), online updates plain SGD (paper). A parameter that turns
    non-finite (a diverging learning rate) raises ``FloatingPointError`` instead of being kept.
    """

    #: values outside this range are refused by fit (sigmoid outputs cannot reach them)
    value_range: ClassVar[tuple[float, float] | None] = (0.0, 1.0)

    def __init__(self, settings: Any | None = None, **overrides: Any) -> None:
        super().__init__(settings, **overrides)
        self.network = None
        self.last_online_optimizer = None    # the optimizer online_update used (SGD)

    @abstractmethod
    def build_network(self, n_rows: int, n_cols: int, output_bias: float):
        """The torch module; ``output_bias`` is a good start for the output layer's bias."""

    def _loss(self, rows, cols, targets):
        prediction = self.network(rows, cols)
        squared_error = ((prediction - targets) ** 2).mean()
        l2 = sum((p ** 2).sum() for p in self.network.parameters())
        return squared_error + self.settings.l2 * l2

    def _check_values(self, values: np.ndarray, when: str) -> None:
        if self.value_range is not None and values.size and (
                values.min() < self.value_range[0] or values.max() > self.value_range[1]):
            raise ValueError(f"{self.name} predicts values in {list(self.value_range)} (sigmoid "
                             f"output); {when} got values in [{values.min():.3g}, "
                             f"{values.max():.3g}]: normalise first (STDM.normalized)")

    def _build(self, shape: tuple[int, int], mean: float, seed: int) -> None:
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.network = self.build_network(*shape, output_bias=self._output_bias(mean))

    def fit(self, matrix: np.ndarray, mask: np.ndarray, seed: int = 0) -> TorchCompletionModel:
        matrix, mask = check_observations(matrix, mask)
        observed = matrix[mask]
        self._check_values(observed, "fit")
        self._store(matrix, mask)
        mean = float(observed.mean()) if observed.size else 0.5
        self._build(mask.shape, mean, seed)
        rows, cols = np.nonzero(mask)
        if rows.size == 0:
            return self
        epochs = self.settings.epochs
        share = getattr(self.settings, "validation_share", 0.0)
        if share > 0 and rows.size >= 10:
            epochs = self._pick_epochs(matrix, mask, share, seed)
            self._build(mask.shape, mean, seed)
        self.epochs_used = epochs
        self._train(rows, cols, matrix[rows, cols], epochs)
        return self

    def _train(self, rows, cols, values, epochs: int, validation=None,
               every: int = 10) -> list[float]:
        """Full-batch Adam for ``epochs`` steps on (rows, cols, values).

        ``validation`` = (rows, cols, values): its MSE is recorded before training and every
        ``every`` steps (so ``curve[i]`` belongs to step ``i * every``: step 0 = the start).
        Returns the validation curve ([] without validation). A non-finite result leaves the
        model unfitted (``network`` None) and raises ``FloatingPointError``."""
        import torch

        r, c = torch.as_tensor(rows), torch.as_tensor(cols)
        y = torch.as_tensor(values, dtype=torch.float32)
        if validation is not None:
            vr, vc = torch.as_tensor(validation[0]), torch.as_tensor(validation[1])
            vy = torch.as_tensor(validation[2], dtype=torch.float32)
        optimizer = torch.optim.Adam(self.network.parameters(), lr=self.settings.learning_rate)
        curve = []

        def record() -> None:
            self.network.eval()
            with torch.no_grad():
                curve.append(float(((self.network(vr, vc) - vy) ** 2).mean()))
            self.network.train()

        self.network.train()
        if validation is not None:
            record()
        for epoch in range(1, epochs + 1):
            optimizer.zero_grad()
            loss = self._loss(r, c, y)
            loss.backward()
            optimizer.step()
            if validation is not None and epoch % every == 0:
                record()
        self.network.eval()
        try:
            check_finite_parameters(self.network, f"{self.name} training")
        except FloatingPointError:
            self.network = None
            raise
        return curve

    def _pick_epochs(self, matrix, mask, share: float, seed: int) -> int:
        """Early stopping: train on (1 - share) of the observed entries, return the step count
        (a multiple of 10) with the lowest MSE on the rest; fit then retrains on all entries."""
        train, held = observed_validation_split(mask, share, np.random.default_rng(seed))
        if not held.any() or not train.any():
            return self.settings.epochs
        (tr, tc), (vr, vc) = np.nonzero(train), np.nonzero(held)
        curve = self._train(tr, tc, matrix[tr, tc], self.settings.epochs,
                            (vr, vc, matrix[vr, vc]))
        return 10 * int(np.argmin(curve[1:])) + 10 if len(curve) > 1 else self.settings.epochs

    def _output_bias(self, mean: float) -> float:
        """Start the output at the observed mean: logit for a sigmoid head, else the mean."""
        p = min(max(mean, 1e-3), 1 - 1e-3)
        return math.log(p / (1 - p))

    def predict(self, rows, cols) -> np.ndarray:
        import torch

        if self.network is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(matrix, mask)")
        rows, cols = as_index_arrays(rows, cols, self.shape)
        with torch.no_grad():
            out = self.network(torch.as_tensor(rows), torch.as_tensor(cols))
        return out.numpy().astype(np.float64)

    def online_update(self, rows, cols, values, steps: int | None = None) -> TorchCompletionModel:
        """``steps`` plain-SGD steps (paper) at ``online_learning_rate`` on the new entries only."""
        import torch

        if self.network is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(matrix, mask)")
        values = np.atleast_1d(np.asarray(values, dtype=np.float64))
        if np.all(np.isfinite(values)):   # non-finite ones are refused by _record
            self._check_values(values, "online_update")
        steps = self.settings.online_steps if steps is None else int(steps)
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        # a diverging update must not leave a half-broken model behind: keep what we had
        saved = ({k: v.clone() for k, v in self.network.state_dict().items()},
                 self.matrix.copy(), self.mask.copy())
        rows, cols, values = self._record(rows, cols, values)
        optimizer = torch.optim.SGD(self.network.parameters(),
                                    lr=self.settings.online_learning_rate)
        self.last_online_optimizer = optimizer
        r, c = torch.as_tensor(rows), torch.as_tensor(cols)
        y = torch.as_tensor(values, dtype=torch.float32)
        self.network.train()
        for _ in range(steps):
            optimizer.zero_grad()
            self._loss(r, c, y).backward()
            optimizer.step()
        self.network.eval()
        try:
            check_finite_parameters(self.network, f"{self.name} online_update")
        except FloatingPointError:
            self.network.load_state_dict(saved[0])
            self.matrix, self.mask = saved[1], saved[2]
            raise
        return self
