"""LDWP: a deep Q-network that picks the node for every streaming task (Zhang, Geng & Ma 2021).

Read top to bottom, CleanRL style:

1. ``decide``: encode the observation (paper layout or our per-node rows), epsilon-greedy over
   the Q-values (exploration only while ``training``), return the node and a human reason.
2. ``learn``: store (s, a, r, s', done) in the replay buffer; every ``train_frequency`` steps
   after ``learning_starts``, sample ``batch_size`` transitions, compute
   ``td_target = r + gamma * max_a' Q_target(s', a') * (1 - done)`` and take one SGD step on
   the squared TD error; copy the Q-network into the target network every
   ``target_network_frequency`` steps. With ``double_q`` the next action is the online
   network's argmax, valued by the target network (Double DQN); ``loss="huber"`` uses the
   smooth-L1 TD loss instead of the squared error.

The reward is the paper's: the change of cluster throughput between consecutive decisions
(``Transition.reward`` from the simulator, or the placement service from feedback), scaled to
tasks per minute.

Our residual variant (``network="node_scoring", q_prior="completion"``, ``reward="task_latency"``,
``latency_transform="log"``, ``gamma=0``): Q(s, node) = -log(1 + MCT's estimated completion time
there) + a learned correction, fitted to -log(1 + the task's measured latency). The untrained
agent is exactly the MCT rule; online learning corrects the public cost estimate with what the
feedback reports (node types that run slower or faster than profiled, co-location, the node
scheduler's ordering). ``residual_l2`` keeps the correction small where data are scarce.

Energy-aware variant (ours, off by default): with ``energy_weight`` (lambda) > 0 an outcome
reward (``task_latency`` or ``drain_time``) becomes ``latency reward - lambda x E / energy_scale_j``
where E is the task's busy joules from its executor's stage timings at completion
(``observe_stage_runs``: each stage's unit and its share of that unit's time, priced by
``simulator.energy.task_busy_energy_j`` with the calibration's PowerModel, the energy report's
own rule). The shipped ``ldwp_energy_paper.spm`` is the residual variant trained so.

Example::

    agent = LDWPPolicy(cluster, costs, LDWPSettings(network="node_scoring"))
    result = Simulator(costs).run(agent, scheduler, cluster, tasks, seed=1)  # learns online
    agent.training = False                                                   # greedy from now on
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from placement.ldwp.agent_file import (agent_metadata, correction_evidence, read_agent_file,
                                       restore_trained_state)
from placement.ldwp.encoding import ObservationEncoder
from placement.ldwp.features import completion_prior, node_row_size, paper_vector_size
from placement.ldwp.modelfile import ModelFileError, save_model
from placement.ldwp.networks import NodeScoringQNetwork, NumpyQ, PaperQNetwork, export_layers
from placement.ldwp.outcomes import OutcomeRewards
from placement.ldwp.settings import LDWPSettings
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, Observation, Policy, Transition

__all__ = ["LDWPSettings", "LDWPPolicy"]


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
        # costs: a CostModel (static per-app estimates) or a MeasuredCosts (learned, any task
        # type; its estimates are read live on every encode)
        self.settings = settings or LDWPSettings()
        self.name = f"ldwp-{self.settings.network}"
        self._cluster = cluster
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
        # task_latency / drain_time / energy: rewards known only at completion
        self.outcomes = OutcomeRewards(self.settings, cluster, self.costs, store=self._store)
        self._stored = 0
        s = self.settings
        self.encoder = ObservationEncoder(
            cluster, self.costs, s.network, s.task_encoding, s.spec_features,
            paper_nodes=self.q_network.nodes if s.network == "paper" else None)
        self._numpy_layers = None
        #: how a frozen agent weighs its correction by trust (placement.ldwp.evidence
        #: TRUST_RULES); a learning one acts on ``settings.learning_trust_rule``
        self.trust_rule = "pooled"
        # examples learned per (node signature, task type): how far decisions trust the
        # learned correction (placement.ldwp.evidence); None: no prior, or full trust
        self.evidence = correction_evidence(self.settings)

    @property
    def cluster(self) -> ClusterSpec:
        return self._cluster

    @cluster.setter
    def cluster(self, cluster: ClusterSpec) -> None:
        """A transfer to another cluster (placement.ldwp.transfer): the encoder and the outcome
        bookkeeping follow."""
        self._cluster = self.encoder.cluster = self.outcomes.cluster = cluster

    # -- construction ----------------------------------------------------------------------
    def _build(self) -> nn.Module:
        s = self.settings
        if s.network == "paper":
            m = len(self.cluster.nodes)
            return PaperQNetwork(paper_vector_size(m), m, s.hidden_sizes)
        return NodeScoringQNetwork(s.hidden_sizes, prior=s.q_prior, residual=s.residual,
                                   row_size=node_row_size(s.task_encoding, s.spec_features))

    def _optimizer(self) -> torch.optim.Optimizer:
        params = self.q_network.parameters()
        if self.settings.optimizer == "sgd":
            return torch.optim.SGD(params, lr=self.settings.learning_rate)
        return torch.optim.Adam(params, lr=self.settings.learning_rate)

    # -- encoding ---------------------------------------------------------------------------
    def encode(self, observation: Observation,
               estimates_s: dict[str, float] | None = None) -> np.ndarray:
        """The network's input for ``observation``. ``estimates_s`` (node_scoring): per node
        the task's estimated seconds to use instead of asking the cost model now (the service
        keeps the ones current when the task was decided)."""
        return self.encoder(observation, estimates_s)

    def q_values(self, state: np.ndarray, use_numpy: bool = False) -> np.ndarray:
        """Q per node for deciding: the learned correction weighted by its evidence
        (placement.ldwp.evidence), by ``trust_rule`` ("pooled" over the nodes) once the agent
        is frozen (``training`` False, how every benchmark, the router and the service decide).
        While it learns it acts on ``settings.learning_trust_rule``: by default each node's own
        trust, the rule the shipped files were trained with, so that each rebuilds bit for bit
        from its recorded command (docs/ldwp.md)."""
        trust = self.evidence.trust(state) if self.evidence is not None else None
        rule = self.settings.learning_trust_rule if self.training else self.trust_rule
        if use_numpy:
            if self._numpy_layers is None:  # reset to None after every training step
                s = self.settings
                self._numpy_layers = NumpyQ(self.q_network, s.network, s.q_prior, s.residual)
            return self._numpy_layers(state, trust, rule)
        with torch.no_grad():
            batch = torch.from_numpy(state).unsqueeze(0)
            out = self.q_network(batch) if trust is None else \
                self.q_network(batch, trust=torch.from_numpy(trust[None, :].astype(np.float32)),
                               rule=rule)
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
            if self.settings.reward == "drain_time":
                self.outcomes.register_drain(observation, index)
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
        if self.settings.reward in ("task_latency", "drain_time"):
            # The reward is known only later, from completions (the feedback topic).
            self.outcomes.await_outcome(transition.observation.task.task_id,
                                        (state, action, next_state, transition.done))
            return
        self._store((state, action, transition.reward * self.settings.reward_scale, next_state,
                     transition.done))

    def observe_completion(self, task_id: str, latency_s: float, node_id: str) -> None:
        """A placed task finished (simulator, or the service reading the feedback topic)."""
        if self.training:
            self.outcomes.completed(task_id, latency_s, node_id)

    def observe_stage_runs(self, task_id: str, node_id: str, stage_runs) -> None:
        """A placed task's stage timings at its completion (before ``observe_completion``):
        ``(stage, unit_id, busy_share_s)`` each; only ``energy_weight`` > 0 reads them."""
        if self.training and self.settings.energy_weight != 0:
            self.outcomes.stage_runs(task_id, node_id, stage_runs)

    def latency_reward(self, latency_s: float) -> float:
        """The reward for ``latency_s`` seconds (task latency, or drain time)."""
        return self.outcomes.latency_reward(latency_s)

    def record_evidence(self, state: np.ndarray, action: int) -> None:
        """Count one learned example on the chosen node's row of ``state`` (node_scoring
        with a prior only): what lets a correction be trusted (placement.ldwp.evidence).
        Whatever adds an example to the replay buffer must call this too."""
        if self.evidence is not None and self.settings.network == "node_scoring":
            self.evidence.record(state[action])

    def _store(self, item: tuple) -> None:
        self.replay.add(item)
        self.record_evidence(item[0], item[1])
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
        # Examples of different node counts (a node that began reporting later: the service
        # then sees more nodes than its spec names) cannot stack into one tensor: each count
        # is its own group, their losses weighted by their sizes (one group: the same loss).
        groups: dict[tuple, list] = {}
        for item in batch:
            after = item[3] if item[3] is not None else item[0]
            groups.setdefault((item[0].shape, after.shape), []).append(item)
        if len(groups) == 1:
            loss = self._batch_loss(batch)
        else:
            loss = sum(self._batch_loss(items) * len(items) for items in groups.values()) \
                / len(batch)
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.q_network.parameters(), self.settings.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        self._numpy_layers = None
        self.losses.append(loss.item())

    def _batch_loss(self, batch: list) -> torch.Tensor:
        """The TD loss of replayed examples whose states have one shape."""
        states = torch.from_numpy(np.stack([b[0] for b in batch]))
        actions = torch.tensor([b[1] for b in batch])
        rewards = torch.tensor([b[2] for b in batch], dtype=torch.float32)
        dones = torch.tensor([1.0 if (b[4] or b[3] is None) else 0.0 for b in batch])
        next_states = torch.from_numpy(np.stack([b[3] if b[3] is not None else b[0]
                                                 for b in batch]))
        td_target = self.td_target(rewards, next_states, dones)
        q_all = self.q_network(states)
        q_taken = q_all.gather(1, actions.unsqueeze(1)).squeeze(1)
        if self.settings.loss == "huber":
            loss = nn.functional.smooth_l1_loss(q_taken, td_target)
        else:
            loss = nn.functional.mse_loss(q_taken, td_target)
        if self.settings.residual_l2 > 0 and self.settings.q_prior != "none":
            chosen = states[torch.arange(len(batch)), actions]
            residual = q_taken - completion_prior(chosen)
            loss = loss + self.settings.residual_l2 * (residual ** 2).mean()
        return loss

    def td_target(self, rewards: torch.Tensor, next_states: torch.Tensor,
                  dones: torch.Tensor) -> torch.Tensor:
        """r + gamma * Q_target(s', a') * (1 - done), a' = argmax of the target network
        (DQN) or of the online network (``double_q``: Double DQN, van Hasselt et al. 2016)."""
        with torch.no_grad():
            next_q = self.target_network(next_states)
            if self.settings.double_q:
                best = self.q_network(next_states).argmax(dim=-1, keepdim=True)
                next_value = next_q.gather(-1, best).squeeze(-1)
            else:
                next_value = next_q.max(dim=-1).values
            return rewards + self.settings.gamma * next_value * (1.0 - dones)

    # -- export -----------------------------------------------------------------------------
    def metadata(self) -> dict:
        """The model file header: settings, nodes, updates, task types, evidence table."""
        return agent_metadata(self.settings, self.cluster.node_ids, self.updates, self.evidence)

    def save(self, path, **extra_metadata) -> None:
        """Weights + metadata in the pickle-free model file format (placement.ldwp.modelfile)."""
        save_model(path, export_layers(self.q_network), {**self.metadata(), **extra_metadata})

    @classmethod
    def from_file(cls, path, cluster: ClusterSpec, costs: CostModel | None = None,
                  training: bool = False) -> "LDWPPolicy":
        """Rebuild an agent from a model file; refuses a paper network built for other nodes."""
        layers, metadata, model, settings = read_agent_file(path)
        try:
            agent = cls(cluster, costs, LDWPSettings(**settings))
        except (TypeError, ValueError) as exc:  # unknown or invalid settings in the header
            raise ModelFileError(f"{path} has settings this streamplace cannot build: "
                                 f"{exc}") from None
        restore_trained_state(agent, layers, metadata, model, path)
        agent.training = training
        return agent
