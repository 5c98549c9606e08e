"""LDWP: a deep Q-network that picks the node for every streaming task (Zhang, Geng & Ma 2021).

Read top to bottom, CleanRL style:

1. ``decide``: encode the observation (paper layout or our per-node rows), epsilon-greedy over
   the Q-values (exploration only while ``training``), return the node and a human reason.
2. ``learn``: store (s, a, r, s', done) in the replay buffer; every ``train_frequency`` steps
   after ``learning_starts``, sample ``batch_size`` transitions, compute
   ``td_target = r + gamma * max_a' Q_target(s', a') * (1 - done)`` and take one SGD step on
   the squared TD error; copy the Q-network into the target network every
   ``target_network_frequency`` steps.

The reward is the paper's: the change of cluster throughput between consecutive decisions
(``Transition.reward`` from the simulator, or the placement service from feedback), scaled to
tasks per minute.

Example::

    agent = LDWPPolicy(cluster, costs, LDWPSettings(network="node_scoring"))
    result = Simulator(costs).run(agent, scheduler, cluster, tasks, seed=1)  # learns online
    agent.training = False                                                   # greedy from now on
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn

from placement.ldwp.features import node_rows, paper_vector, paper_vector_size
from placement.ldwp.networks import (NodeScoringQNetwork, PaperQNetwork, export_layers,
                                     numpy_forward)
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, Observation, Policy, Transition

__all__ = ["LDWPSettings", "LDWPPolicy"]


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
    #                                    credited when it completes (feedback topic)
    reward_scale: float = 60.0         # (open) reward in tasks/min instead of tasks/s
    latency_scale_s: float = 100.0     # (ours) task_latency reward = -latency / this
    max_grad_norm: float = 10.0        # (open) clips updates so lr 0.1 stays stable
    seed: int = 0

    def __post_init__(self) -> None:
        if self.network not in ("paper", "node_scoring"):
            raise ValueError(f"network must be 'paper' or 'node_scoring', got {self.network!r}")
        if self.reward not in ("throughput_change", "task_latency"):
            raise ValueError(f"reward must be 'throughput_change' or 'task_latency', got "
                             f"{self.reward!r}")
        if self.optimizer not in ("sgd", "adam"):
            raise ValueError(f"optimizer must be 'sgd' or 'adam', got {self.optimizer!r}")
        self.hidden_sizes = tuple(self.hidden_sizes)


@dataclass
class _Replay:
    capacity: int
    items: deque = field(default_factory=deque)

    def add(self, item) -> None:
        if len(self.items) >= self.capacity:
            self.items.popleft()
        self.items.append(item)

    def sample(self, rng: random.Random, batch: int) -> list:
        return [self.items[rng.randrange(len(self.items))] for _ in range(batch)]


class LDWPPolicy(Policy):
    """The DQN placement policy; ``training`` turns exploration and learning on or off."""

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None,
                 settings: LDWPSettings | None = None):
        self.settings = settings or LDWPSettings()
        self.name = f"ldwp-{self.settings.network}"
        self.cluster = cluster
        self.costs = costs or CostModel()
        self.rng = random.Random(self.settings.seed)
        torch.manual_seed(self.settings.seed)
        self.q_network = self._build()
        self.target_network = self._build()
        self.target_network.load_state_dict(self.q_network.state_dict())
        self.optimizer = self._optimizer()
        self.replay = _Replay(self.settings.buffer_size)
        self.training = True
        self.global_step = 0
        self.updates = 0
        self.losses: list[float] = []
        self._pending: dict[int, tuple] = {}
        self._awaiting_outcome: dict[str, tuple] = {}
        self._early_outcomes: dict[str, float] = {}
        self._stored = 0
        self._estimate_cache: dict = {}
        self._numpy_layers = None

    # -- construction ----------------------------------------------------------------------
    def _build(self) -> nn.Module:
        s = self.settings
        if s.network == "paper":
            m = len(self.cluster.nodes)
            return PaperQNetwork(paper_vector_size(m), m, s.hidden_sizes)
        return NodeScoringQNetwork(s.hidden_sizes)

    def _optimizer(self) -> torch.optim.Optimizer:
        params = self.q_network.parameters()
        if self.settings.optimizer == "sgd":
            return torch.optim.SGD(params, lr=self.settings.learning_rate)
        return torch.optim.Adam(params, lr=self.settings.learning_rate)

    # -- encoding ---------------------------------------------------------------------------
    def encode(self, observation: Observation) -> np.ndarray:
        if self.settings.network == "paper":
            if len(observation.nodes) != self.q_network.nodes:
                raise ValueError(f"the paper network was built for {self.q_network.nodes} nodes "
                                 f"and sees {len(observation.nodes)}; transfer it first "
                                 "(placement.ldwp.transfer)")
            return paper_vector(observation)
        task = observation.task
        coefficients = self._coefficients()
        estimates, units = {}, {}
        for node_id in observation.node_ids:
            entry = coefficients.get(node_id)
            if entry is None:
                continue  # a node the agent's cluster spec does not know: estimate unknown
            per_app, unit_count = entry
            fixed, slope = per_app.get(task.app_id, (0.0, 0.0))
            estimates[node_id] = fixed + slope * task.input_size
            units[node_id] = unit_count
        return node_rows(observation, estimates, units)

    def _coefficients(self) -> dict:
        """Per node of the agent's cluster: ({app: (fixed_s, per_pixel_s)}, parallel units),
        built once per cluster so encoding costs no cost-model call on the router's hot path."""
        key = tuple(self.cluster.node_ids)
        if self._estimate_cache.get("key") != key:
            table = {spec.node_id: (self.costs.task_time_coefficients(spec),
                                    spec.cpu_cores + len(spec.gpus))
                     for spec in self.cluster.nodes}
            self._estimate_cache = {"key": key, "table": table}
        return self._estimate_cache["table"]

    def q_values(self, state: np.ndarray, use_numpy: bool = False) -> np.ndarray:
        if use_numpy:
            if self._numpy_layers is None:
                self._numpy_layers = export_layers(self.q_network)
                if self.settings.network == "node_scoring":
                    # [row, mean] @ W1.T == row @ W1a.T + mean @ W1b.T: split W1 once so the
                    # hot path never builds the concatenated (M, 2F) matrix.
                    weight, bias = self._numpy_layers[0]
                    half = weight.shape[1] // 2
                    self._split_first = (np.ascontiguousarray(weight[:, :half].T),
                                         np.ascontiguousarray(weight[:, half:].T), bias)
            if self.settings.network == "node_scoring":
                own, context, bias = self._split_first
                hidden = state @ own + (state.mean(axis=0) @ context + bias)
                np.maximum(hidden, 0.0, out=hidden)
                return numpy_forward(self._numpy_layers[1:], hidden)[:, 0]
            return numpy_forward(self._numpy_layers, state[None, :])[0]
        with torch.no_grad():
            out = self.q_network(torch.from_numpy(state).unsqueeze(0))
        return out[0].numpy()

    # -- acting -----------------------------------------------------------------------------
    def epsilon(self) -> float:
        s = self.settings
        fraction = min(1.0, self.global_step / max(1, s.exploration_steps))
        return s.start_e + fraction * (s.end_e - s.start_e)

    def decide(self, observation: Observation) -> Decision:
        state = self.encode(observation)
        q = self.q_values(state)
        ids = observation.node_ids
        scores = {n: float(v) for n, v in zip(ids, q)}
        if self.training and self.rng.random() < self.epsilon():
            index = self.rng.randrange(len(ids))
            reason = f"LDWP exploring (epsilon {self.epsilon():.2f}): {ids[index]}"
        else:
            index = int(np.argmax(q))
            ranked = sorted(range(len(ids)), key=lambda i: -q[i])
            runner = f", next {ids[ranked[1]]} {q[ranked[1]]:.3f}" if len(ids) > 1 else ""
            reason = f"LDWP: highest Q {q[index]:.3f} on {ids[index]}{runner}"
        if self.training:
            self._pending[id(observation)] = (state, index)
            self.global_step += 1
        return Decision(ids[index], reason, scores)

    # -- learning ---------------------------------------------------------------------------
    def learn(self, transition: Transition) -> None:
        if not self.training:
            return
        pending = self._pending.pop(id(transition.observation), None)
        if pending is None:
            return  # a decision made while not training
        state, action = pending
        next_state = (self.encode(transition.next_observation)
                      if transition.next_observation is not None else None)
        if self.settings.reward == "task_latency":
            # The reward is this task's own latency, known when it completes.
            task_id = transition.observation.task.task_id
            latency = self._early_outcomes.pop(task_id, None)
            if latency is None:
                self._awaiting_outcome[task_id] = (state, action, next_state, transition.done)
            else:  # the task finished before the next decision arrived
                self._store((state, action, -latency / self.settings.latency_scale_s,
                             next_state, transition.done))
            return
        self._store((state, action, transition.reward * self.settings.reward_scale, next_state,
                     transition.done))

    def observe_completion(self, task_id: str, latency_s: float, node_id: str) -> None:
        """A placed task finished (simulator, or the service reading the feedback topic)."""
        if not self.training or self.settings.reward != "task_latency":
            return
        pending = self._awaiting_outcome.pop(task_id, None)
        if pending is None:
            if len(self._early_outcomes) > 100_000:
                self._early_outcomes.clear()  # outcomes of decisions made while not training
            self._early_outcomes[task_id] = latency_s
            return
        state, action, next_state, done = pending
        self._store((state, action, -latency_s / self.settings.latency_scale_s, next_state,
                     done))

    def _store(self, item: tuple) -> None:
        self.replay.add(item)
        s = self.settings
        self._stored += 1
        # The paper's schedule counts decisions; outcome rewards arrive later, so count those.
        step = self.global_step if s.reward == "throughput_change" else self._stored
        if len(self.replay.items) >= s.learning_starts and step % s.train_frequency == 0:
            self._train_step()
        if step % s.target_network_frequency == 0:
            self.target_network.load_state_dict(self.q_network.state_dict())

    def _train_step(self) -> None:
        batch = self.replay.sample(self.rng, self.settings.batch_size)
        states = torch.from_numpy(np.stack([b[0] for b in batch]))
        actions = torch.tensor([b[1] for b in batch])
        rewards = torch.tensor([b[2] for b in batch], dtype=torch.float32)
        dones = torch.tensor([1.0 if (b[4] or b[3] is None) else 0.0 for b in batch])
        next_states = torch.from_numpy(np.stack([b[3] if b[3] is not None else b[0]
                                                 for b in batch]))
        with torch.no_grad():
            target_max = self.target_network(next_states).max(dim=-1).values
            td_target = rewards + self.settings.gamma * target_max * (1.0 - dones)
        q_taken = self.q_network(states).gather(1, actions.unsqueeze(1)).squeeze(1)
        loss = nn.functional.mse_loss(q_taken, td_target)
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.q_network.parameters(), self.settings.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        self._numpy_layers = None
        self.losses.append(loss.item())

    # -- export -----------------------------------------------------------------------------
    def metadata(self) -> dict:
        settings = asdict(self.settings)
        settings["hidden_sizes"] = list(self.settings.hidden_sizes)
        return {"kind": self.settings.network, "nodes": list(self.cluster.node_ids),
                "settings": settings, "updates": self.updates,
                "observation": "paper_vector" if self.settings.network == "paper"
                else "node_rows"}

    def save(self, path, **extra_metadata) -> None:
        """Weights + metadata in the pickle-free model file format (placement.ldwp.modelfile)."""
        from placement.ldwp.modelfile import save_model
        save_model(path, export_layers(self.q_network), {**self.metadata(), **extra_metadata})

    @classmethod
    def from_file(cls, path, cluster: ClusterSpec, costs: CostModel | None = None,
                  training: bool = False) -> "LDWPPolicy":
        """Rebuild an agent from a model file; refuses a paper network built for other nodes."""
        from placement.ldwp.modelfile import ModelFileError, load_model
        layers, metadata = load_model(path)
        settings = dict(metadata["settings"])
        settings["hidden_sizes"] = tuple(settings["hidden_sizes"])
        agent = cls(cluster, costs, LDWPSettings(**settings))
        if agent.settings.network == "paper" and list(cluster.node_ids) != metadata["nodes"]:
            raise ModelFileError(f"{path} is a paper-layout model for nodes {metadata['nodes']}; "
                                 "transfer it to this cluster first")
        linears = [m for m in agent.q_network.modules() if isinstance(m, nn.Linear)]
        if len(linears) != len(layers):
            raise ModelFileError(f"{path} has {len(layers)} layers, the network needs "
                                 f"{len(linears)}")
        with torch.no_grad():
            for module, (weight, bias) in zip(linears, layers):
                if tuple(module.weight.shape) != weight.shape:
                    raise ModelFileError(f"{path}: layer shape {weight.shape} does not fit "
                                         f"{tuple(module.weight.shape)}")
                module.weight.copy_(torch.from_numpy(weight))
                module.bias.copy_(torch.from_numpy(bias))
        agent.target_network.load_state_dict(agent.q_network.state_dict())
        agent.updates = int(metadata.get("updates", 0))
        agent.training = training
        return agent
