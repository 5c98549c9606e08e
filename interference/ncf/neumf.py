"""NeuMF (He et al., WWW 2017): a GMF tower and an MLP tower fused by one output layer.

    GMF: row_gmf[u] * column_gmf[i]                      (element-wise product)
    MLP: concat(row_mlp[u], column_mlp[i]) -> hidden_layers (ReLU)
    output: sigmoid(w . concat(GMF, MLP) + b)

GMF generalises matrix factorisation (a learned weighting of the latent product), the MLP adds
non-linear interactions. He et al. pre-train the towers separately; with matrices this small we
train both jointly from the start (one Adam run), same loss and training interface as
:class:`interference.ncf.paper_ncf.PaperNCF` (squared error + L2, Adam, online plain SGD).
Settings tuned on masks of seeds 100-104 of the Gavel benchmark only.

Example::

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> truth = rng.random((8, 2)) @ rng.random((2, 6)) / 2
    >>> mask = rng.random(truth.shape) < 0.5
    >>> NeuMF().fit(truth, mask, seed=0).predict([0, 1], [2, 3]).shape
    (2,)
"""

from __future__ import annotations

from dataclasses import dataclass

from interference.ncf._base import TorchCompletionModel

__all__ = ["NeuMF", "NeuMFSettings"]


@dataclass(frozen=True)
class NeuMFSettings:
    gmf_size: int = 8                            # GMF latent dimension
    mlp_embedding_size: int = 8                  # per-side embedding of the MLP tower
    hidden_layers: tuple[int, ...] = (32, 16, 8)  # He et al.'s tower halves its width per layer
    l2: float = 1e-4
    learning_rate: float = 3e-3                  # Adam, pre-training
    epochs: int = 600                            # full-batch Adam steps
    validation_share: float = 0.0     # early stopping share (0 = off; 0.15 gave no gain in tuning)
    online_learning_rate: float = 0.05           # plain SGD, online_update
    online_steps: int = 50
    init_std: float = 0.1


def _network(n_rows: int, n_cols: int, s: NeuMFSettings, output_bias: float):
    import torch
    from torch import nn

    class NeuMFNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.row_gmf = nn.Embedding(n_rows, s.gmf_size)
            self.column_gmf = nn.Embedding(n_cols, s.gmf_size)
            self.row_mlp = nn.Embedding(n_rows, s.mlp_embedding_size)
            self.column_mlp = nn.Embedding(n_cols, s.mlp_embedding_size)
            for emb in (self.row_gmf, self.column_gmf, self.row_mlp, self.column_mlp):
                nn.init.normal_(emb.weight, 0.0, s.init_std)
            sizes = [2 * s.mlp_embedding_size, *s.hidden_layers]
            layers: list[nn.Module] = []
            for a, b in zip(sizes, sizes[1:]):
                layers += [nn.Linear(a, b), nn.ReLU()]
            self.mlp = nn.Sequential(*layers)
            self.output = nn.Linear(s.gmf_size + sizes[-1], 1)
            nn.init.constant_(self.output.bias, output_bias)

        def forward(self, rows, cols):
            gmf = self.row_gmf(rows) * self.column_gmf(cols)
            mlp = self.mlp(torch.cat([self.row_mlp(rows), self.column_mlp(cols)], dim=-1))
            return torch.sigmoid(self.output(torch.cat([gmf, mlp], dim=-1))).squeeze(-1)

    return NeuMFNet()


class NeuMF(TorchCompletionModel):
    """GMF + MLP towers fused by a sigmoid output layer."""

    name = "neumf"
    Settings = NeuMFSettings

    def build_network(self, n_rows: int, n_cols: int, output_bias: float):
        return _network(n_rows, n_cols, self.settings, output_bias)
