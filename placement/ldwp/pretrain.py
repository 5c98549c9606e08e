"""Pre-training LDWP: an MLP trained to convergence on a good heuristic's logged decisions
initialises the DQN (the paper pre-trains; what data it used is an open point — we use
simulator rollouts of the MCT/ETC rule on training seeds, never the evaluation seeds).

The Q-network's outputs are trained as logits of the teacher's choice (cross-entropy), so after
pre-training ``argmax Q`` reproduces the teacher; online DQN learning then adjusts the values.

Example::

    states, actions = collect_demonstrations(agent, teacher, scheduler, cluster, workloads, costs)
    curve = pretrain(agent, states, actions)        # loss per epoch, stops at convergence
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import nn

from workload.model import Decision, Observation, Policy

__all__ = ["collect_demonstrations", "pretrain", "demonstrations_hash"]


class _Recorder(Policy):
    def __init__(self, agent, teacher: Policy):
        self.agent, self.teacher = agent, teacher
        self.name = f"record-{teacher.name}"
        self.states: list[np.ndarray] = []
        self.actions: list[int] = []

    def decide(self, observation: Observation) -> Decision:
        decision = self.teacher.decide(observation)
        self.states.append(self.agent.encode(observation))
        self.actions.append(observation.node_ids.index(decision.node))
        return decision


def collect_demonstrations(agent, teacher: Policy, node_scheduler, cluster, workloads, costs,
                           progress: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Run the teacher on each (tasks, seed) in ``workloads`` and log (encoded state, action)."""
    from tqdm import tqdm

    from simulator import Simulator
    recorder = _Recorder(agent, teacher)
    simulator = Simulator(costs)
    for tasks, seed in tqdm(list(workloads), desc="demonstrations", unit="run",
                            disable=not progress):
        simulator.run(recorder, node_scheduler, cluster, tasks, seed=seed)
    return np.stack(recorder.states), np.asarray(recorder.actions, dtype=np.int64)


def demonstrations_hash(states: np.ndarray, actions: np.ndarray) -> str:
    """What the model was pre-trained on, for the model file's metadata."""
    digest = hashlib.sha256(states.tobytes())
    digest.update(actions.tobytes())
    return digest.hexdigest()[:16]


def pretrain(agent, states: np.ndarray, actions: np.ndarray, epochs: int = 200,
             learning_rate: float = 1e-2, batch_size: int = 256, tolerance: float = 1e-4,
             patience: int = 10, seed: int = 0, progress: bool = True) -> list[float]:
    """Fit ``agent.q_network`` so that argmax Q = the teacher's action; Adam on cross-entropy.
    Stops when the epoch loss has not improved by ``tolerance`` for ``patience`` epochs
    (convergence) or after ``epochs``. Copies the result into the target network."""
    from tqdm import tqdm
    generator = torch.Generator().manual_seed(seed)
    x = torch.from_numpy(states)
    y = torch.from_numpy(actions)
    net = agent.q_network
    optimizer = torch.optim.Adam(net.parameters(), lr=learning_rate)
    loss_fn = nn.CrossEntropyLoss()
    curve: list[float] = []
    best, stale = float("inf"), 0
    bar = tqdm(range(epochs), desc="pre-training", unit="epoch", disable=not progress)
    for _ in bar:
        order = torch.randperm(len(x), generator=generator)
        total = 0.0
        for start in range(0, len(x), batch_size):
            index = order[start:start + batch_size]
            loss = loss_fn(net(x[index]), y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(index)
        epoch_loss = total / len(x)
        curve.append(epoch_loss)
        bar.set_postfix(loss=f"{epoch_loss:.4f}")
        if epoch_loss < best - tolerance:
            best, stale = epoch_loss, 0
        else:
            stale += 1
            if stale >= patience:
                break
    agent.target_network.load_state_dict(net.state_dict())
    agent._numpy_layers = None
    return curve
