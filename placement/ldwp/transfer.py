"""Moving LDWP to a changed cluster (nodes joined or left).

- Paper-style (:func:`transfer_paper_agent`): a new network whose hidden layer (256 -> 128)
  is copied from the old one; the input and output layers change size. Weights that still mean
  the same thing are kept: the task columns of the input layer, and the input columns and output
  rows of nodes present in both clusters. A new node's columns and row start as the mean of the
  old nodes' (an average node), not random. The replay buffer is cleared (its shapes changed).
- Size-agnostic (:func:`transfer_node_scoring_agent`): the same weights serve the new cluster;
  only the node list changes (zero re-training).

Example::

    agent = transfer_paper_agent(agent, new_cluster)
"""

from __future__ import annotations

import torch

from placement.ldwp.agent import LDWPPolicy
from placement.ldwp.features import APPS
from workload.model import NODE_STATE_FIELDS, ClusterSpec

__all__ = ["transfer_paper_agent", "transfer_node_scoring_agent", "transfer"]


def transfer_node_scoring_agent(agent: LDWPPolicy, cluster: ClusterSpec) -> LDWPPolicy:
    agent.cluster = cluster
    agent.replay.items.clear()
    agent._pending.clear()
    return agent


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
        mean_block = old_blocks.mean(dim=1)
        last_old, last_new = old_layers[-1], new_layers[-1]
        mean_row, mean_bias = last_old.weight.mean(dim=0), last_old.bias.mean()
        for j, node_id in enumerate(cluster.node_ids):
            cols = slice(task_cols + j * per_node, task_cols + (j + 1) * per_node)
            if node_id in old_ids:
                i = old_ids.index(node_id)
                first_new.weight[:, cols] = old_blocks[:, i, :]
                last_new.weight[j] = last_old.weight[i]
                last_new.bias[j] = last_old.bias[i]
            else:
                first_new.weight[:, cols] = mean_block
                last_new.weight[j] = mean_row
                last_new.bias[j] = mean_bias
    new.target_network.load_state_dict(new.q_network.state_dict())
    return new


def transfer(agent: LDWPPolicy, cluster: ClusterSpec) -> LDWPPolicy:
    """The right transfer for the agent's network kind."""
    if agent.settings.network == "paper":
        return transfer_paper_agent(agent, cluster)
    return transfer_node_scoring_agent(agent, cluster)
