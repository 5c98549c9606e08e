"""Every LDWP hyperparameter in one validated record (:class:`LDWPSettings`), torch-free.

It lives apart from the torch agent (:mod:`placement.ldwp.agent`) so that the router's numpy
loader (:mod:`placement.ldwp.inference`) checks a model file's settings with the very same
rules as the torch agent: :func:`placement.ldwp.model_settings.read_model_settings` builds one
from every file's header, so both loaders accept and refuse the same files (before 2026-12-05
the numpy loader took a NaN ``evidence_half``, a ``correction_trust`` of "bogus", a string
seed and unknown keys that the torch loader refused). Numbers are checked for type and
plausible range here, not only where the agent happens to use them.

Example::

    >>> LDWPSettings(network="node_scoring", q_prior="completion").hidden_sizes
    (256, 128)
    >>> LDWPSettings(gamma=1.5)
    Traceback (most recent call last):
    ...
    ValueError: gamma must be a number in [0, 1], got 1.5
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from placement.ldwp.evidence import BANDWIDTH_RANGE, EVIDENCE_HALF_RANGE
from placement.ldwp.features import TASK_ENCODINGS

__all__ = ["LDWPSettings", "REWARDS"]

#: (field, low, high) of every real-valued setting (inclusive bounds)
_REAL_RANGES = (("learning_rate", 1e-9, 10.0), ("gamma", 0.0, 1.0), ("start_e", 0.0, 1.0),
                ("end_e", 0.0, 1.0), ("reward_scale", 1e-9, 1e9),
                ("latency_scale_s", 1e-9, 1e9), ("max_grad_norm", 1e-9, 1e9),
                ("residual_l2", 0.0, 1e6), ("evidence_half", *EVIDENCE_HALF_RANGE),
                ("evidence_bandwidth", *BANDWIDTH_RANGE))
#: (field, low, high) of every integer setting
_INT_RANGES = (("batch_size", 1, 1_000_000), ("buffer_size", 1, 100_000_000),
               ("target_network_frequency", 1, 10**12), ("exploration_steps", 0, 10**12),
               ("learning_starts", 0, 10**12), ("train_frequency", 1, 10**12),
               ("seed", 0, 2**63 - 1))
#: hidden layers at most, and units per layer at most (a header asking for more is hostile)
MAX_HIDDEN_LAYERS, MAX_HIDDEN_UNITS = 16, 65_536


REWARDS = ("throughput_change", "task_latency", "drain_time")


@dataclass
class LDWPSettings:
    """Every LDWP hyperparameter. Paper values where the paper gives them; (open) = our choice."""

    network: str = "paper"             # "paper" (x_t -> one Q per node) or "node_scoring" (ours)
    hidden_sizes: tuple[int, ...] = (256, 128)   # paper: MLP 256-128, ReLU
    optimizer: str = "sgd"             # paper: SGD ("adam" available for our variant)
    learning_rate: float = 0.1         # paper
    batch_size: int = 20               # paper
    gamma: float = 0.8                 # paper: discount
    buffer_size: int = 10_000          # (open) replay capacity
    target_network_frequency: int = 200  # (open) the paper's mu: steps between target copies
    start_e: float = 0.3               # paper's walk-through: 30% random actions
    end_e: float = 0.01                # (open)
    exploration_steps: int = 2_000     # (open) linear decay of epsilon over this many decisions
    learning_starts: int = 100         # (open) transitions before the first update
    train_frequency: int = 1           # (open) decisions per gradient step
    reward: str = "throughput_change"  # paper: change of cluster throughput between decisions;
    #                                    "task_latency" (ours): -latency of the placed task itself,
    #                                    credited when it completes (feedback topic);
    #                                    "drain_time" (ours): -time until the chosen node has
    #                                    finished as much work as it held at the decision plus
    #                                    this task (counted from completions, so it does not
    #                                    depend on the order the node scheduler picks)
    reward_scale: float = 60.0         # (open) reward in tasks/min instead of tasks/s
    latency_scale_s: float = 100.0     # (ours) task_latency reward = -latency / this
    max_grad_norm: float = 10.0        # (open) clips updates so lr 0.1 stays stable
    # -- beyond the paper (defaults keep the paper's algorithm) --------------------------------
    double_q: bool = False             # Double DQN: td_target uses Q_target(s', argmax Q(s', .))
    loss: str = "mse"                  # TD loss: "mse" (paper: squared error) or "huber"
    q_prior: str = "none"              # node_scoring only: "completion" adds -log(1 + MCT's
    #                                    estimated completion s) to each node's Q (residual Q);
    #                                    the learned part starts at 0, so untrained = MCT
    latency_transform: str = "linear"  # task_latency / drain_time reward: "linear"
    #                                    -seconds / latency_scale_s, "log" -log(1 + seconds)
    #                                    (the scale of q_prior)
    residual: str = "additive"         # q_prior only: "additive" Q = prior + MLP; "scaled"
    #                                    Q = -log(1 + e^g wait + e^h task time), (g, h) = MLP
    residual_l2: float = 0.0           # q_prior only: weight of an L2 penalty on the learned
    #                                    correction of the taken actions (stay close to MCT)
    spec_features: bool = False        # node_scoring only: append each node's static spec
    #                                    (cores, GPUs, memories, speeds) to its row
    task_encoding: str = "catalog"     # task type columns (placement.ldwp.features): "catalog"
    #                                    (paper: one-hot over the built-in apps, other types
    #                                    all zeros) or "hashed" (node_scoring only: one-hot +
    #                                    a BLAKE2b code of any other type string)
    correction_trust: str = "evidence"  # q_prior only: "evidence" (ours) decides with the
    #                                    learned correction times its trust, evidence /
    #                                    (evidence + evidence_half), from the examples learned on
    #                                    similar nodes and the same task type
    #                                    (placement.ldwp.evidence); "full" always trusts it
    evidence_half: float = 50.0        # examples at which the correction gets half weight
    evidence_bandwidth: float = 0.05   # spec-column distance at which evidence fades to 1/e
    learning_trust_rule: str = "per_node"  # (ours) how a LEARNING agent weighs the correction
    #                                    by trust (placement.ldwp.evidence.TRUST_RULES): each
    #                                    node's own ("per_node", how the shipped files were
    #                                    trained) or "pooled"; a frozen agent decides "pooled"
    energy_weight: float = 0.0         # (ours) lambda: outcome reward minus lambda x the task's
    #                                    busy joules / energy_scale_j; 0 = off (the latency
    #                                    reward exactly). Needs reward task_latency or drain_time
    energy_scale_j: float = 1000.0     # (ours) joules worth one unit of reward at lambda 1;
    #                                    ASSUMPTION: ~ a task's busy energy on the paper cluster
    seed: int = 0

    def __post_init__(self) -> None:
        if self.network not in ("paper", "node_scoring"):
            raise ValueError(f"network must be 'paper' or 'node_scoring', got {self.network!r}")
        if self.reward not in REWARDS:
            raise ValueError(f"reward must be one of {REWARDS}, got {self.reward!r}")
        if self.optimizer not in ("sgd", "adam"):
            raise ValueError(f"optimizer must be 'sgd' or 'adam', got {self.optimizer!r}")
        if self.loss not in ("mse", "huber"):
            raise ValueError(f"loss must be 'mse' or 'huber', got {self.loss!r}")
        if self.q_prior not in ("none", "completion"):
            raise ValueError(f"q_prior must be 'none' or 'completion', got {self.q_prior!r}")
        if self.q_prior != "none" and self.network != "node_scoring":
            raise ValueError("q_prior needs network='node_scoring' (the prior is a per-node "
                             "column of its rows)")
        if self.residual not in ("additive", "scaled"):
            raise ValueError(f"residual must be 'additive' or 'scaled', got {self.residual!r}")
        if self.spec_features and self.network != "node_scoring":
            raise ValueError("spec_features needs network='node_scoring'")
        if self.task_encoding not in TASK_ENCODINGS:
            raise ValueError(f"task_encoding must be one of {TASK_ENCODINGS}, got "
                             f"{self.task_encoding!r}")
        if self.task_encoding != "catalog" and self.network != "node_scoring":
            raise ValueError("task_encoding='hashed' needs network='node_scoring' (the paper "
                             "layout keeps the paper's TID)")
        if self.correction_trust not in ("evidence", "full"):
            raise ValueError(f"correction_trust must be 'evidence' or 'full', got "
                             f"{self.correction_trust!r}")
        if self.learning_trust_rule not in ("per_node", "pooled"):
            raise ValueError(f"learning_trust_rule must be 'per_node' or 'pooled', got "
                             f"{self.learning_trust_rule!r}")
        if self.latency_transform not in ("linear", "log"):
            raise ValueError(f"latency_transform must be 'linear' or 'log', got "
                             f"{self.latency_transform!r}")
        self._check_energy()
        self._check_numbers()
        self.hidden_sizes = tuple(self.hidden_sizes)

    def _check_numbers(self) -> None:
        for name, low, high in _REAL_RANGES:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not (math.isfinite(value) and low <= value <= high):
                raise ValueError(f"{name} must be a number in [{low:g}, {high:g}], got "
                                 f"{value!r}")
        for name, low, high in _INT_RANGES:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be an int in [{low}, {high}], got {value!r}")
        for name in ("double_q", "spec_features"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        hidden = self.hidden_sizes
        if not isinstance(hidden, (list, tuple)) or not 1 <= len(hidden) <= MAX_HIDDEN_LAYERS \
                or not all(isinstance(h, int) and not isinstance(h, bool)
                           and 1 <= h <= MAX_HIDDEN_UNITS for h in hidden):
            raise ValueError(f"hidden_sizes must be 1-{MAX_HIDDEN_LAYERS} layer sizes in "
                             f"[1, {MAX_HIDDEN_UNITS}], got {hidden!r}")

    def _check_energy(self) -> None:
        for name in ("energy_weight", "energy_scale_j"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.energy_scale_j <= 0:
            raise ValueError(f"energy_scale_j must be > 0 (joules per unit of reward), got "
                             f"{self.energy_scale_j!r}")
        if self.energy_weight > 0 and self.reward not in ("task_latency", "drain_time"):
            raise ValueError(f"energy_weight needs an outcome reward (task_latency or "
                             f"drain_time): a task's energy is known at its completion, not "
                             f"with reward={self.reward!r}")
