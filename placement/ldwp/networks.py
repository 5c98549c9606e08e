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

from placement.ldwp.evidence import TRUST_RULES, trusted_correction
from placement.ldwp.features import NODE_ROW_SIZE, completion_prior, scaled_completion_q

__all__ = ["PaperQNetwork", "NodeScoringQNetwork", "NumpyQ", "numpy_forward", "export_layers",
           "load_layers", "completion_prior", "pooled_correction_torch",
           "trusted_correction_torch"]

PRIORS = ("none", "completion")
RESIDUALS = ("additive", "scaled")


def pooled_correction_torch(correction: torch.Tensor, trust: torch.Tensor) -> torch.Tensor:
    """:func:`placement.ldwp.evidence.pooled_correction` on tensors: ``correction`` (..., M, C),
    ``trust`` (..., M); the same rule per decision (the leading dimensions)."""
    weights = trust.to(correction.dtype).unsqueeze(-1)                    # (..., M, 1)
    top = weights.amax(dim=-2, keepdim=True)                               # (..., 1, 1)
    total = weights.sum(dim=-2, keepdim=True)
    pooled = (weights * correction).sum(dim=-2, keepdim=True) / \
        torch.where(total > 0, total, torch.ones_like(total))            # 0 where no trust
    return weights * correction + (top - weights) * pooled


def trusted_correction_torch(correction: torch.Tensor, trust: torch.Tensor,
                             rule: str = "pooled") -> torch.Tensor:
    """:func:`placement.ldwp.evidence.trusted_correction` on tensors (``rule``: "pooled" or
    "per_node", a :data:`placement.ldwp.evidence.TRUST_RULES` name)."""
    if rule == "pooled":
        return pooled_correction_torch(correction, trust)
    if rule == "per_node":
        return correction * trust.to(correction.dtype).unsqueeze(-1)
    raise ValueError(f"trust rule must be one of {sorted(TRUST_RULES)}, got {rule!r}")


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

    def forward(self, rows: torch.Tensor, trust: torch.Tensor | None = None,
                rule: str = "pooled") -> torch.Tensor:  # (..., M, F) -> (..., M)
        """Q per node; ``trust`` (..., M) in [0, 1] weights the learned correction when deciding,
        by ``rule`` (placement.ldwp.evidence.TRUST_RULES: "pooled" across the nodes, or
        "per_node", each node's correction times its own trust): all 0 gives the prior alone.
        The training loss passes no trust."""
        out = self.body(self.with_context(rows))
        if trust is not None and self.prior != "none":
            out = trusted_correction_torch(out, trust, rule)
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


class NumpyQ:
    """A frozen numpy copy of a Q-network for fast single decisions (no torch on the hot path).

    Example::

        fast = NumpyQ(agent.q_network, "node_scoring", q_prior="completion", residual="scaled")
        q = fast(rows)          # one Q per node row, as the torch network gives
    """

    def __init__(self, net: nn.Module, network: str, q_prior: str = "none",
                 residual: str = "additive"):
        self.layers = export_layers(net)
        self.network, self.q_prior, self.residual = network, q_prior, residual
        if network == "node_scoring":
            # [row, mean] @ W1.T == row @ W1a.T + mean @ W1b.T: split W1 once so the hot path
            # never builds the concatenated (M, 2F) matrix.
            weight, bias = self.layers[0]
            half = weight.shape[1] // 2
            self.split_first = (np.ascontiguousarray(weight[:, :half].T),
                                np.ascontiguousarray(weight[:, half:].T), bias)

    def __call__(self, state: np.ndarray, trust: np.ndarray | None = None,
                 rule: str = "pooled") -> np.ndarray:
        if self.network != "node_scoring":
            return numpy_forward(self.layers, state[None, :])[0]
        own, context, bias = self.split_first
        hidden = state @ own + (state.mean(axis=0) @ context + bias)
        np.maximum(hidden, 0.0, out=hidden)
        out = numpy_forward(self.layers[1:], hidden)
        if trust is not None:
            out = trusted_correction(out, trust, rule)
        if self.q_prior == "completion" and self.residual == "scaled":
            return scaled_completion_q(state, out, lib=np)
        q = out[:, 0]
        if self.q_prior == "completion":
            q = q + completion_prior(state)
        return q


def load_layers(net: nn.Module, layers: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """Copy (weight, bias) pairs into ``net``'s Linear layers in order; ValueError (nothing
    half-copied is left to trust: the caller drops the network) when count or shapes differ."""
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    if len(linears) != len(layers):
        raise ValueError(f"has {len(layers)} layers, the network needs {len(linears)}")
    with torch.no_grad():
        for module, (weight, bias) in zip(linears, layers):
            if tuple(module.weight.shape) != weight.shape:
                raise ValueError(f"layer shape {weight.shape} does not fit "
                                 f"{tuple(module.weight.shape)}")
            module.weight.copy_(torch.from_numpy(weight))
            module.bias.copy_(torch.from_numpy(bias))
