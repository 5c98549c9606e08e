"""Plain matrix factorisation (biases + latent dot product), the classic collaborative filter.

    prediction(u, i) = global_mean + row_bias[u] + column_bias[i] + <P[u], Q[i]>

Trained on the observed entries with squared error + L2 (all parameters), full batch, Adam;
``online_update`` takes plain SGD steps on new entries (as the paper's NCF does). A row with
no observed entry predicts ``global_mean + column_bias``: what others saw with that column.
Predictions are clipped to ``clip`` (default [0, 1], the range of normalised throughput and
of a normalised STDM); ``clip=None`` keeps them raw.

Example::

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> truth = rng.random((8, 2)) @ rng.random((2, 6)) / 2         # rank 2, values in [0, 1]
    >>> mask = rng.random(truth.shape) < 0.5
    >>> model = MatrixFactorization().fit(truth, mask, seed=0)
    >>> float(np.abs(model.complete() - truth)[~mask].mean()) < 0.1
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from interference.ncf._base import TorchCompletionModel

__all__ = ["MatrixFactorization", "MatrixFactorizationSettings"]


@dataclass(frozen=True)
class MatrixFactorizationSettings:
    """Hyperparameters; chosen on tuning masks (seeds 100-104), never on evaluation masks."""

    factors: int = 5                  # latent dimension of P and Q (1-8 tried; 5 best at 40%)
    init_std: float = 0.3             # N(0, init_std) start of P and Q; biases start at 0
    l2: float = 3e-4                  # weight of sum of squared parameters in the loss
    learning_rate: float = 0.03       # Adam, pre-training
    epochs: int = 500                 # full-batch Adam steps
    validation_share: float = 0.0     # early stopping share (0 = off; 0.15 gave no gain in tuning)
    online_learning_rate: float = 0.1  # plain SGD, online_update
    online_steps: int = 50            # SGD steps per online_update
    clip: tuple[float, float] | None = (0.0, 1.0)


def _network(n_rows: int, n_cols: int, factors: int, init_std: float, global_mean: float):
    import torch
    from torch import nn

    class BiasedMF(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.row_factors = nn.Embedding(n_rows, factors)
            self.column_factors = nn.Embedding(n_cols, factors)
            self.row_bias = nn.Embedding(n_rows, 1)
            self.column_bias = nn.Embedding(n_cols, 1)
            for emb in (self.row_factors, self.column_factors):
                nn.init.normal_(emb.weight, 0.0, init_std)
            for emb in (self.row_bias, self.column_bias):
                nn.init.zeros_(emb.weight)
            # a constant, not a parameter: L2 should not pull the mean towards 0
            self.register_buffer("global_mean", torch.tensor(float(global_mean)))

        def forward(self, rows, cols):
            dot = (self.row_factors(rows) * self.column_factors(cols)).sum(-1)
            return (self.global_mean + self.row_bias(rows).squeeze(-1)
                    + self.column_bias(cols).squeeze(-1) + dot)

    return BiasedMF()


class MatrixFactorization(TorchCompletionModel):
    """Biased matrix factorisation: the collaborative filter NCF replaces."""

    name = "matrix_factorization"
    Settings = MatrixFactorizationSettings
    value_range = None   # linear output: any real values can be fitted

    def build_network(self, n_rows: int, n_cols: int, output_bias: float):
        return _network(n_rows, n_cols, self.settings.factors, self.settings.init_std,
                        output_bias)

    def _output_bias(self, mean: float) -> float:
        return mean

    def predict(self, rows, cols) -> np.ndarray:
        out = super().predict(rows, cols)
        return out if self.settings.clip is None else np.clip(out, *self.settings.clip)
