"""The Q-networks of LDWP (torch), and the same forward pass in numpy for the router.

- :class:`PaperQNetwork`: the paper's MLP, x_t -> 256 -> 128 -> one Q-value per node (ReLU).
  Its input and output sizes depend on the node count M.
- :class:`NodeScoringQNetwork`: our size-agnostic variant: one shared MLP scores each node from
  (task features, that node's features, the mean of all nodes' features), so the same weights
  serve any M and a changed cluster needs no re-training. With ``prior="completion"`` (ours,
  "residual" LDWP) the MLP only learns a correction: Q(node) = -log(1 + estimated completion
  time of the task there) + MLP(...), and the MLP's last layer starts at zero, so the untrained
  agent decides exactly like the MCT/ETC rule (minimum estimated completion time). With
  ``residual="scaled"`` the MLP instead gives two log-factors (g, h) per node and
  Q = -log(1 + exp(g) * wait + exp(h) * task time): a learned per-node correction of how fast
  the node really works off its backlog and of the task's own time (both 1 at the start).

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

from placement.ldwp.features import NODE_ROW_SIZE, completion_prior, scaled_completion_q

__all__ = ["PaperQNetwork", "NodeScoringQNetwork", "numpy_forward", "export_layers",
           "completion_prior"]

PRIORS = ("none", "completion")
RESIDUALS = ("additive", "scaled")


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

    def __init__(self, hidden_sizes: tuple[int, ...] = (128, 64), prior: str = "none",
                 residual: str = "additive", row_size: int = NODE_ROW_SIZE):
        super().__init__()
        if prior not in PRIORS:
            raise ValueError(f"prior must be one of {PRIORS}, got {prior!r}")
        if residual not in RESIDUALS:
            raise ValueError(f"residual must be one of {RESIDUALS}, got {residual!r}")
        self.hidden_sizes = tuple(hidden_sizes)
        self.prior, self.residual, self.row_size = prior, residual, row_size
        outputs = 2 if (prior != "none" and residual == "scaled") else 1
        self.body = _mlp([2 * row_size, *hidden_sizes, outputs])
        if prior != "none":
            last = self.body[-1]
            nn.init.zeros_(last.weight)  # residual starts at 0: the untrained agent is MCT
            nn.init.zeros_(last.bias)

    @staticmethod
    def with_context(rows: torch.Tensor) -> torch.Tensor:
        context = rows.mean(dim=-2, keepdim=True).expand_as(rows)
        return torch.cat([rows, context], dim=-1)

    def forward(self, rows: torch.Tensor,
                trust: torch.Tensor | None = None) -> torch.Tensor:  # (..., M, F) -> (..., M)
        """Q per node; ``trust`` (..., M) in [0, 1] weights the learned correction when deciding
        (placement.ldwp.evidence): 0 gives the prior alone. Training passes none."""
        out = self.body(self.with_context(rows))
        if trust is not None and self.prior != "none":
            out = out * trust.unsqueeze(-1)
        if self.prior == "completion" and self.residual == "scaled":
            return scaled_completion_q(rows, out, lib=torch)
        q = out.squeeze(-1)
        if self.prior == "completion":
            q = q + completion_prior(rows)
        return q


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
