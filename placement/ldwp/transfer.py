"""Moving LDWP to a changed cluster (nodes joined or left).

- Paper-style (:func:`transfer_paper_agent`): a new network whose hidden layer (256 -> 128)
  is copied from the old one; the input and output layers change size. Weights that still mean
  the same thing are kept: the task columns of the input layer, and the input columns and output
  rows of nodes present in both clusters. A new node's columns and row start as those of the
  old node most like it (nearest by :func:`~placement.ldwp.features.node_spec_features`: cores,
  GPUs, memory, speeds), so a new P4 node is scored as the old P4 nodes were. (Starting them as
  the mean of the old nodes' made the network collapse on 17 nodes: 8.7-16.6 tasks/min, below
  Random, and no task for any new node.) Then a short fine-tuning on the new cluster (online
  learning, as the agent does anyway) adjusts them. The replay buffer is cleared (its shapes
  changed).
- Size-agnostic (:func:`transfer_node_scoring_agent`): the same weights serve the new cluster;
  only the node list changes (zero re-training).

Example::

    agent = transfer_paper_agent(agent, new_cluster)
"""

from __future__ import annotations

import numpy as np
import torch

from placement.ldwp.agent import LDWPPolicy
from placement.ldwp.features import APPS, node_spec_features
from workload.model import NODE_STATE_FIELDS, ClusterSpec

__all__ = ["transfer_paper_agent", "transfer_node_scoring_agent", "transfer", "most_similar_node"]


def transfer_node_scoring_agent(agent: LDWPPolicy, cluster: ClusterSpec) -> LDWPPolicy:
    agent.cluster = cluster
    agent.replay.items.clear()
    agent._pending.clear()
    return agent


def most_similar_node(spec, old_cluster: ClusterSpec) -> int:
    """Index in ``old_cluster`` of the node whose spec features are nearest to ``spec``'s
    (Euclidean; ties to the first)."""
    target = np.asarray(node_spec_features(spec))
    distances = [float(np.linalg.norm(np.asarray(node_spec_features(n)) - target))
                 for n in old_cluster.nodes]
    return int(np.argmin(distances))


def transfer_paper_agent(agent: LDWPPolicy, cluster: ClusterSpec) -> LDWPPolicy:
    old_ids = list(agent.cluster.node_ids)
    new = LDWPPolicy(cluster, agent.costs, agent.settings)
    new.global_step, new.updates, new.training = agent.global_step, agent.updates, agent.training
    old_layers = [m for m in agent.q_network.modules() if isinstance(m, torch.nn.Linear)]
    new_layers = [m for m in new.q_network.modules() if isinstance(m, torch.nn.Linear)]
    task_cols, per_node = len(APPS) + 1, len(NODE_STATE_FIELDS)
    with torch.no_grad():
        for old, fresh in zip(old_layers[1:-1], new_layers[1:-1]):  # hidden layers: copied
            fresh.weight.copy_(old.weight)
            fresh.bias.copy_(old.bias)
        first_old, first_new = old_layers[0], new_layers[0]
        first_new.bias.copy_(first_old.bias)
        first_new.weight[:, :task_cols] = first_old.weight[:, :task_cols]
        old_blocks = first_old.weight[:, task_cols:].reshape(first_old.weight.shape[0],
                                                             len(old_ids), per_node)
        last_old, last_new = old_layers[-1], new_layers[-1]
        for j, (node_id, spec) in enumerate(zip(cluster.node_ids, cluster.nodes)):
            cols = slice(task_cols + j * per_node, task_cols + (j + 1) * per_node)
            i = (old_ids.index(node_id) if node_id in old_ids
                 else most_similar_node(spec, agent.cluster))
            first_new.weight[:, cols] = old_blocks[:, i, :]
            last_new.weight[j] = last_old.weight[i]
            last_new.bias[j] = last_old.bias[i]
    new.target_network.load_state_dict(new.q_network.state_dict())
    return new


def transfer(agent: LDWPPolicy, cluster: ClusterSpec) -> LDWPPolicy:
    """The right transfer for the agent's network kind."""
    if agent.settings.network == "paper":
        return transfer_paper_agent(agent, cluster)
    return transfer_node_scoring_agent(agent, cluster)
