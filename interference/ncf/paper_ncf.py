"""The paper's NCF (Zhang, Geng & Ma 2021, IAWP): completes the STDM's missing entries.

    one-hot row ("user": stage / job) -> row embedding    \\
                                                          concat -> 128 -> 64 -> 32 -> 1 -> sigmoid
    one-hot column ("item": metric)   -> column embedding /          (ReLU)

A one-hot vector times a weight matrix is an embedding lookup, so the one-hot inputs are
``nn.Embedding`` layers. Loss = squared error on the observed entries + L2 (paper); pre-train
with Adam (paper), then ``online_update`` with plain SGD (paper) on newly profiled entries.
Values must lie in [0, 1] (sigmoid output): normalise first (``STDM.normalized``).

Choices where the paper is silent (PAPER.md "open"), tuned on masks of seeds 100-104 of the
Gavel benchmark, never on its evaluation masks:

- ``embedding_size = 8``: the matrices are small (tens of rows, 11 metric columns or 26
  partners); He et al.'s NCF uses 8-64 predictive factors, and 8 fits tens of rows without
  giving each row more free numbers than it has observations. (16 was no better.)
- ``l2 = 1e-4`` on all parameters, Adam ``learning_rate = 3e-3`` for ``epochs = 600`` full-batch
  steps: enough to fit, L2 keeps rows with few observations near the average row.
- the output bias starts at the logit of the observed mean (learning starts from the mean).
- online SGD: ``online_learning_rate = 0.05``, ``online_steps = 50`` per update.

Example::

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> truth = rng.random((8, 2)) @ rng.random((2, 6)) / 2
    >>> mask = rng.random(truth.shape) < 0.5
    >>> model = PaperNCF().fit(truth, mask, seed=0)
    >>> model.complete().shape, model.layer_sizes()
    ((8, 6), [16, 128, 64, 32, 1])
"""

from __future__ import annotations

from dataclasses import dataclass

from interference.ncf._base import TorchCompletionModel

__all__ = ["PaperNCF", "PaperNCFSettings"]


@dataclass(frozen=True)
class PaperNCFSettings:
    embedding_size: int = 8                         # (open) see module docstring
    hidden_layers: tuple[int, ...] = (128, 64, 32)  # paper: MLP 128-64-32, ReLU
    l2: float = 1e-4                                # (open) weight of the L2 term
    learning_rate: float = 3e-3                     # (open) Adam, pre-training
    epochs: int = 600                               # (open) full-batch Adam steps
    validation_share: float = 0.0     # early stopping share (0 = off; 0.15 gave no gain in tuning)
    online_learning_rate: float = 0.05              # (open) plain SGD, online_update
    online_steps: int = 50                          # (open) SGD steps per online_update
    init_std: float = 0.1                           # (open) N(0, init_std) embeddings


def _network(n_rows: int, n_cols: int, s: PaperNCFSettings, output_bias: float):
    import torch
    from torch import nn

    class NCF(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.row_embedding = nn.Embedding(n_rows, s.embedding_size)      # "user"
            self.column_embedding = nn.Embedding(n_cols, s.embedding_size)   # "item"
            nn.init.normal_(self.row_embedding.weight, 0.0, s.init_std)
            nn.init.normal_(self.column_embedding.weight, 0.0, s.init_std)
            sizes = [2 * s.embedding_size, *s.hidden_layers]
            layers: list[nn.Module] = []
            for a, b in zip(sizes, sizes[1:]):
                layers += [nn.Linear(a, b), nn.ReLU()]
            self.mlp = nn.Sequential(*layers)
            self.output = nn.Linear(sizes[-1], 1)
            nn.init.constant_(self.output.bias, output_bias)

        def forward(self, rows, cols):
            x = torch.cat([self.row_embedding(rows), self.column_embedding(cols)], dim=-1)
            return torch.sigmoid(self.output(self.mlp(x))).squeeze(-1)

    return NCF()


class PaperNCF(TorchCompletionModel):
    """The paper's MLP-NCF: embeddings -> concatenation -> MLP 128-64-32 (ReLU) -> sigmoid."""

    name = "paper_ncf"
    Settings = PaperNCFSettings

    def build_network(self, n_rows: int, n_cols: int, output_bias: float):
        return _network(n_rows, n_cols, self.settings, output_bias)

    def layer_sizes(self) -> list[int]:
        """Widths from the concatenated embeddings to the output, e.g. [16, 128, 64, 32, 1]."""
        from torch import nn

        if self.network is None:
            raise RuntimeError("PaperNCF is not fitted")
        linears = [m for m in self.network.mlp if isinstance(m, nn.Linear)]
        return [linears[0].in_features] + [m.out_features for m in linears] + [
            self.network.output.out_features]
