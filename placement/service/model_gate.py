"""The gate between the online learner and the model store: nothing non-finite or implausible
is published, and a bad model is rolled back to the last good one.

Why: one hostile feedback record once made the service's loss NaN; every version published
after it had NaN weights, routers took ``argmax`` over NaN (always the first node) and the
service resumed from the poisoned version after a restart. The features are now clamped
(``placement.ldwp.features``) and the learner refuses implausible timings, but a learning
system should not rely on every path being perfect, so each candidate version passes this gate:

1. **Finite.** Every weight and every Q-value on the held-back examples is finite.
2. **Plausible.** No held-back Q-value is beyond ``max_abs_q`` (rewards are minus a log or a
   scaled latency: a few units; 1e3 means the network has diverged).
3. **Not worse than the last good version on held-back work.** The learner keeps one in
   ``holdout_every`` examples out of training (the held-back set, at most ``holdout_size``, the
   newest kept). Once it holds ``min_holdout`` examples, the candidate's mean squared error
   against their rewards must be at most ``max_error_ratio`` times the last good version's
   error on the same examples, plus ``error_slack`` (small errors may double by noise alone).

A refused candidate is not published; the learner's network (and its target network) is set
back to the last good weights and its optimizer state is reset (Adam's moments may hold the
NaN too). The replay buffer is cleared, because the examples that led to the bad model would
lead there again. Each refusal is counted and logged with its reason.

Example::

    gate = PublishGate()
    gate.accept(agent)                         # the weights the learner starts from
    gate.hold_back(state, action, reward)      # examples it does not train on
    verdict = gate.check(agent)                # before publishing
    if not verdict.ok:
        gate.rollback(agent)
"""

from __future__ import annotations

import copy
import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["PublishGate", "GateVerdict"]


@dataclass(frozen=True)
class GateVerdict:
    """Whether a candidate may be published, why not, and the held-back errors compared."""

    ok: bool
    reason: str
    error: float | None = None            # candidate's held-back mean squared error
    previous_error: float | None = None   # last good version's, on the same examples


class PublishGate:
    """Held-back examples, the last good weights, and the checks above."""

    def __init__(self, holdout_every: int = 16, holdout_size: int = 256, min_holdout: int = 16,
                 max_error_ratio: float = 4.0, error_slack: float = 0.05,
                 max_abs_q: float = 1e3):
        if holdout_every < 2 or holdout_size < 1 or min_holdout < 1:
            raise ValueError("need holdout_every >= 2, holdout_size >= 1, min_holdout >= 1")
        if not (max_error_ratio >= 1.0 and error_slack >= 0.0 and max_abs_q > 0.0):
            raise ValueError("need max_error_ratio >= 1, error_slack >= 0, max_abs_q > 0")
        self.holdout_every, self.min_holdout = holdout_every, min_holdout
        self.max_error_ratio, self.error_slack = max_error_ratio, error_slack
        self.max_abs_q = max_abs_q
        self._held: deque[tuple[np.ndarray, int, float]] = deque(maxlen=holdout_size)
        self._last_good: torch.nn.Module | None = None
        self.rejected = 0
        self.last_verdict: GateVerdict | None = None

    # -- the held-back set --------------------------------------------------------------------
    def is_held_back(self, example_number: int) -> bool:
        """Whether the learner's ``example_number``-th example (1-based) is held back
        (deterministic: the same record sequence always holds back the same examples)."""
        return example_number % self.holdout_every == 0

    def hold_back(self, state: np.ndarray, action: int, reward: float) -> None:
        self._held.append((state, int(action), float(reward)))

    @property
    def held_back(self) -> int:
        return len(self._held)

    # -- checking -----------------------------------------------------------------------------
    def _held_back_q(self, network: torch.nn.Module) -> tuple[np.ndarray, np.ndarray]:
        """(Q of the action taken, every Q-value) on the held-back examples."""
        taken, every = [], []
        with torch.no_grad():
            for state, action, _ in self._held:
                q = network(torch.from_numpy(np.asarray(state, dtype=np.float32))).numpy()
                every.append(q.ravel())
                taken.append(q.ravel()[action])
        return np.asarray(taken, dtype=np.float64), (np.concatenate(every) if every
                                                     else np.zeros(0))

    def _error(self, network: torch.nn.Module) -> tuple[float, np.ndarray]:
        taken, every = self._held_back_q(network)
        rewards = np.asarray([r for _, _, r in self._held], dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            error = float(np.mean((taken - rewards) ** 2)) if len(rewards) else 0.0
        return error, every

    def check(self, agent) -> GateVerdict:
        """The verdict on ``agent.q_network`` as a candidate version."""
        verdict = self._check(agent.q_network)
        self.last_verdict = verdict
        return verdict

    def _check(self, network: torch.nn.Module) -> GateVerdict:
        for name, parameter in network.named_parameters():
            if not torch.isfinite(parameter).all():
                return GateVerdict(False, f"non-finite weights in {name}")
        error, every = self._error(network)
        if not np.isfinite(every).all() or not math.isfinite(error):
            return GateVerdict(False, "non-finite Q-values on held-back examples")
        if every.size and float(np.abs(every).max()) > self.max_abs_q:
            return GateVerdict(False, f"implausible Q-value {float(np.abs(every).max()):.3g} "
                                      f"(bound {self.max_abs_q:g}) on held-back examples", error)
        if self._last_good is None or len(self._held) < self.min_holdout:
            return GateVerdict(True, f"finite; {len(self._held)} held-back examples", error)
        previous, _ = self._error(self._last_good)
        bound = self.max_error_ratio * previous + self.error_slack
        if error > bound:
            return GateVerdict(False, f"held-back error {error:.4g} above {bound:.4g} "
                                      f"({self.max_error_ratio:g} x the last good version's "
                                      f"{previous:.4g} + {self.error_slack:g})", error, previous)
        return GateVerdict(True, f"held-back error {error:.4g} (last good {previous:.4g}, "
                                 f"{len(self._held)} examples)", error, previous)

    # -- last good weights --------------------------------------------------------------------
    def accept(self, agent) -> None:
        """Remember ``agent``'s current weights as the last good ones (after a publish, and
        the weights the learner starts from)."""
        self._last_good = copy.deepcopy(agent.q_network).eval()

    def rollback(self, agent) -> None:
        """Put the last good weights back into ``agent`` (network and target), with a fresh
        optimizer and an empty replay buffer."""
        self.rejected += 1
        if self._last_good is None:  # nothing good yet: at least start the optimizer afresh
            raise RuntimeError("no last good weights to roll back to: call accept() first")
        state = self._last_good.state_dict()
        agent.q_network.load_state_dict(state)
        agent.target_network.load_state_dict(state)
        agent.optimizer = agent._optimizer()
        agent.replay.items.clear()
        agent._numpy_layers = None
