"""The Q-networks of LDWP (torch), and the same forward pass in numpy for the router.

- :class:`PaperQNetwork`: the paper's MLP, x_t -> 256 -> 128 -> one Q-value per node (ReLU).
  Its input and output sizes depend on the node count M.
- :class:`NodeScoringQNetwork`: our size-agnostic variant: one shared MLP scores each node from
  (task features, that node's features, the mean of all nodes' features), so the same weights
  serve any M and a changed cluster needs no re-training.

``numpy_forward(layers, x)`` runs exported weights without torch (tested to agree with torch).

Example::

    >>> net = NodeScoringQNetwork()
    >>> import torch
    >>> net(torch.zeros(3, 16)).shape
    torch.Size([3])
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from placement.ldwp.features import NODE_ROW_SIZE

__all__ = ["PaperQNetwork", "NodeScoringQNetwork", "numpy_forward", "export_layers"]


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class PaperQNetwork(nn.Module):
    """Paper-faithful: input (len(apps) + 1 + 6 M) -> hidden_sizes (256, 128) -> M Q-values."""

    kind = "paper"

    def __init__(self, input_size: int, nodes: int, hidden_sizes: tuple[int, ...] = (256, 128)):
        super().__init__()
        self.input_size, self.nodes, self.hidden_sizes = input_size, nodes, tuple(hidden_sizes)
        self.body = _mlp([input_size, *hidden_sizes, nodes])

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, in) -> (B, M)
        return self.body(x)


class NodeScoringQNetwork(nn.Module):
    """Size-agnostic: Q(node_i) = f([row_i, mean_j row_j]) with one shared f."""

    kind = "node_scoring"

    def __init__(self, hidden_sizes: tuple[int, ...] = (128, 64)):
        super().__init__()
        self.hidden_sizes = tuple(hidden_sizes)
        self.body = _mlp([2 * NODE_ROW_SIZE, *hidden_sizes, 1])

    @staticmethod
    def with_context(rows: torch.Tensor) -> torch.Tensor:
        context = rows.mean(dim=-2, keepdim=True).expand_as(rows)
        return torch.cat([rows, context], dim=-1)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:  # (..., M, F) -> (..., M)
        return self.body(self.with_context(rows)).squeeze(-1)


def export_layers(net: nn.Module) -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight, bias) of every Linear layer in order, as float32 numpy arrays."""
    return [(m.weight.detach().cpu().numpy().astype(np.float32),
             m.bias.detach().cpu().numpy().astype(np.float32))
            for m in net.modules() if isinstance(m, nn.Linear)]


def numpy_forward(layers: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
    """The MLP forward pass (ReLU between layers, none after the last) in numpy."""
    for i, (weight, bias) in enumerate(layers):
        x = x @ weight.T + bias
        if i < len(layers) - 1:
            np.maximum(x, 0.0, out=x)
    return x
