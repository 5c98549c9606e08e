"""LDWP: it learns a trivially learnable cluster, its model files are safe, numpy == torch."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
import torch

from placement.ldwp.agent import LDWPPolicy, LDWPSettings
from placement.ldwp.modelfile import ModelFileError, load_model, save_model
from placement.ldwp.networks import export_layers
from workload.estimates import CostModel
from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def _stream(n: int, seed: int, rate_per_min: float) -> list[Task]:
    rng, now, tasks = random.Random(seed), 0.0, []
    for i in range(n):
        now += rng.expovariate(rate_per_min / 60)
        tasks.append(Task(f"t{seed}-{i}", "face_recognition", 3_000_000, now))
    return tasks


@pytest.mark.parametrize("network,lr", [("paper", 0.1), ("node_scoring", 0.01)])
def test_learns_to_prefer_the_node_that_is_twice_as_fast(costs, network, lr):
    from interference.schedulers import make_node_scheduler
    from simulator import Simulator
    cluster = ClusterSpec((NodeSpec("slow", 2, 16, cpu_speed=0.5),
                           NodeSpec("fast", 2, 16, cpu_speed=1.0)))
    agent = LDWPPolicy(cluster, costs, LDWPSettings(network=network, learning_rate=lr, seed=0,
                                                     exploration_steps=1500))
    sim = Simulator(costs)
    for episode in range(6):
        sim.run(agent, make_node_scheduler("fcfs"), cluster, _stream(400, episode, 90), episode)
    assert agent.updates > 2000
    agent.training = False
    result = sim.run(agent, make_node_scheduler("fcfs"), cluster, _stream(200, 99, 90), 99)
    chosen = Counter(d.node for _, d in result.decisions)
    assert chosen["fast"] >= 0.8 * sum(chosen.values()), chosen


def _observation(m: int, seed: int) -> Observation:
    rng = random.Random(seed)
    nodes = tuple(NodeState(f"n{i}", cpu_util=rng.random(), gpu_util=rng.random(),
                            host_mem_util=rng.random(), gpu_mem_util=rng.random(),
                            uplink_util=rng.random(), downlink_util=rng.random(),
                            queue_depth=rng.randrange(9), backlog_s=rng.random() * 100)
                  for i in range(m))
    return Observation(Task("t", "intrusion_detection", rng.randrange(1, 10**8)), nodes, 0.0)


def _cluster(m: int) -> ClusterSpec:
    return ClusterSpec(tuple(NodeSpec(f"n{i}", 2 + i, 16, gpus=(GpuSpec("t4", 16),) * (i % 2))
                             for i in range(m)))


@pytest.mark.parametrize("network", ["paper", "node_scoring"])
def test_numpy_inference_agrees_with_torch(costs, network):
    agent = LDWPPolicy(_cluster(4), costs, LDWPSettings(network=network, seed=3))
    for seed in range(20):
        state = agent.encode(_observation(4, seed))
        np.testing.assert_allclose(agent.q_values(state, use_numpy=True),
                                   agent.q_values(state), rtol=1e-5, atol=1e-6)


def test_node_scoring_serves_any_number_of_nodes(costs):
    agent = LDWPPolicy(_cluster(3), costs, LDWPSettings(network="node_scoring"))
    agent.cluster = _cluster(7)
    agent.training = False
    assert agent.decide(_observation(7, 1)).node in {f"n{i}" for i in range(7)}


def test_paper_network_refuses_a_changed_cluster_until_transferred(costs):
    agent = LDWPPolicy(_cluster(3), costs, LDWPSettings(network="paper"))
    with pytest.raises(ValueError, match="transfer"):
        agent.decide(_observation(5, 0))


def test_model_file_round_trip(tmp_path, costs):
    agent = LDWPPolicy(_cluster(3), costs, LDWPSettings(network="paper", seed=1))
    path = save_model(tmp_path / "m.spm", export_layers(agent.q_network), agent.metadata())
    layers, metadata = load_model(path)
    assert metadata["nodes"] == ["n0", "n1", "n2"] and metadata["kind"] == "paper"
    for (w1, b1), (w2, b2) in zip(layers, export_layers(agent.q_network)):
        np.testing.assert_array_equal(w1, w2)
        np.testing.assert_array_equal(b1, b2)


@pytest.mark.parametrize("damage,message", [
    (lambda d: d[:-10], "truncated"),
    (lambda d: d[:-40] + bytes(40), "SHA-256"),
    (lambda d: b"PICKLE!!" + d[8:], "magic"),
    (lambda d: d[:20], "truncated"),
])
def test_corrupted_model_files_are_refused(tmp_path, costs, damage, message):
    agent = LDWPPolicy(_cluster(2), costs, LDWPSettings(network="node_scoring"))
    path = save_model(tmp_path / "m.spm", export_layers(agent.q_network), agent.metadata())
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ModelFileError, match=message):
        load_model(path)


def test_settings_are_validated():
    with pytest.raises(ValueError, match="network"):
        LDWPSettings(network="transformer")
    with pytest.raises(ValueError, match="optimizer"):
        LDWPSettings(optimizer="rmsprop")


def test_paper_transfer_keeps_what_still_means_the_same(costs):
    from placement.ldwp.transfer import most_similar_node, transfer_paper_agent
    old_cluster = _cluster(3)
    agent = LDWPPolicy(old_cluster, costs, LDWPSettings(network="paper", seed=2))
    grown = ClusterSpec(old_cluster.nodes + (NodeSpec("n9", 4, 16),))
    moved = transfer_paper_agent(agent, grown)
    old = [m for m in agent.q_network.modules() if isinstance(m, torch.nn.Linear)]
    new = [m for m in moved.q_network.modules() if isinstance(m, torch.nn.Linear)]
    assert torch.equal(old[1].weight, new[1].weight)          # hidden layer copied
    assert new[0].weight.shape[1] == old[0].weight.shape[1] + 6  # six inputs per new node
    assert torch.equal(new[0].weight[:, :22], old[0].weight)    # task + the 3 old nodes
    assert torch.equal(new[-1].weight[:3], old[-1].weight)      # their Q rows
    # the new node starts as the old node most like it (not an average node)
    twin = most_similar_node(grown.nodes[3], old_cluster)
    assert twin == 2  # n2: the same 4 cores, 16 GB, no GPU
    assert torch.equal(new[-1].weight[3], old[-1].weight[twin])
    assert torch.equal(new[0].weight[:, 22:28], old[0].weight[:, 4 + 6 * twin:10 + 6 * twin])
    moved.training = False
    assert moved.decide(_observation(4, 0)).node in grown.node_ids


@pytest.mark.parametrize("new_node, twin", [
    (NodeSpec("x", 8, 32, gpus=(GpuSpec("p4", 8),) * 4), "p4x4"),
    (NodeSpec("x", 8, 32, gpus=(GpuSpec("k80", 12),) * 2), "k80x2"),
    (NodeSpec("x", 16, 64), "cpu16"),
    (NodeSpec("x", 16, 64, cpu_speed=3.0), "cpu16"),
    (NodeSpec("x", 8, 32, gpus=(GpuSpec("a100", 40, 8.0),)), "p4x4"),  # the faster GPUs
])
def test_a_new_node_starts_as_the_old_node_most_like_it(new_node, twin):
    from placement.ldwp.transfer import most_similar_node
    old = ClusterSpec((NodeSpec("p4x4", 8, 32, gpus=(GpuSpec("p4", 8),) * 4),
                       NodeSpec("k80x2", 8, 32, gpus=(GpuSpec("k80", 12),) * 2),
                       NodeSpec("cpu16", 16, 64)))
    assert old.node_ids[most_similar_node(new_node, old)] == twin


def test_pretraining_makes_the_agent_reproduce_its_teacher(costs):
    from placement.ldwp.pretrain import collect_demonstrations, pretrain
    from placement.policies import make_policy
    from interference.schedulers import make_node_scheduler
    from simulator import paper_cluster, paper_workload
    cluster = paper_cluster(nodes=4)
    agent = LDWPPolicy(cluster, costs, LDWPSettings(network="node_scoring", seed=1))
    teacher = make_policy("mct", cluster, costs)
    workloads = [(paper_workload(40, 120, seed=s), s) for s in (11, 12)]
    states, actions = collect_demonstrations(agent, teacher, make_node_scheduler("fcfs"), cluster,
                                             workloads, costs, progress=False)
    curve = pretrain(agent, states, actions, progress=False)
    assert curve[-1] < curve[0]
    q = agent.q_network(torch.from_numpy(states)).argmax(dim=1).numpy()
    assert (q == actions).mean() >= 0.95


def test_an_agent_saved_and_loaded_decides_the_same(tmp_path, costs):
    cluster = _cluster(3)
    agent = LDWPPolicy(cluster, costs, LDWPSettings(network="node_scoring", seed=5))
    agent.training = False
    agent.save(tmp_path / "a.spm", training_data="none")
    loaded = LDWPPolicy.from_file(tmp_path / "a.spm", cluster, costs)
    for seed in range(10):
        obs = _observation(3, seed)
        assert loaded.decide(obs).scores == agent.decide(obs).scores


def test_task_latency_reward_is_credited_when_each_task_completes(costs):
    from interference.schedulers import make_node_scheduler
    from simulator import Simulator
    cluster = ClusterSpec((NodeSpec("a", 2, 16), NodeSpec("b", 2, 16)))
    agent = LDWPPolicy(cluster, costs, LDWPSettings(network="node_scoring", reward="task_latency",
                                                     learning_starts=10_000, seed=0))
    tasks = _stream(30, 1, 20)
    result = Simulator(costs).run(agent, make_node_scheduler("fcfs"), cluster, tasks, 0)
    done = [e for e in result.events if e.kind == "complete"]
    assert len(agent.replay.items) == len(done) == 30
    latencies = sorted(e.time - next(t.arrival_s for t in tasks if t.task_id == e.task_id)
                       for e in done)
    rewards = sorted(-item[2] * agent.settings.latency_scale_s for item in agent.replay.items)
    assert rewards == pytest.approx(latencies)
    assert not agent.outcomes.awaiting


# -- beyond the paper: Double DQN, Huber, the residual (MCT-prior) network, drain_time ---------

def _batch_agent(costs, **overrides):
    agent = LDWPPolicy(_cluster(2), costs, LDWPSettings(network="paper", seed=0, **overrides))
    return agent


def _set_q(net, values_by_state: dict):
    """Replace a paper network by a lookup: state row i -> fixed Q-values."""
    table = torch.tensor(values_by_state, dtype=torch.float32)

    class Lookup(torch.nn.Module):
        def forward(self, x):
            return table[x[:, 0].long()]
    return Lookup()


def test_double_q_target_uses_the_online_argmax_valued_by_the_target_network(costs):
    rewards = torch.tensor([1.0, 0.5])
    next_states = torch.tensor([[0.0], [1.0]])
    dones = torch.tensor([0.0, 1.0])
    online = [[1.0, 5.0], [0.0, 0.0]]   # online prefers action 1 in state 0
    target = [[3.0, 2.0], [9.0, 9.0]]   # the target network values it at 2 (its own max is 3)
    plain = _batch_agent(costs, gamma=0.5)
    double = _batch_agent(costs, gamma=0.5, double_q=True)
    for agent in (plain, double):
        agent.q_network, agent.target_network = _set_q(None, online), _set_q(None, target)
    # DQN: 1 + 0.5 * max(3, 2) = 2.5; Double DQN: 1 + 0.5 * target[argmax online = 1] = 2.0;
    # the second transition is terminal: its target is the reward alone.
    assert plain.td_target(rewards, next_states, dones).tolist() == [2.5, 0.5]
    assert double.td_target(rewards, next_states, dones).tolist() == [2.0, 0.5]


def test_new_settings_are_validated():
    with pytest.raises(ValueError, match="loss"):
        LDWPSettings(loss="l1")
    with pytest.raises(ValueError, match="q_prior"):
        LDWPSettings(network="paper", q_prior="completion")
    with pytest.raises(ValueError, match="reward"):
        LDWPSettings(reward="makespan")
    with pytest.raises(ValueError, match="residual"):
        LDWPSettings(network="node_scoring", q_prior="completion", residual="multiplicative")
    paper = LDWPSettings()
    assert (paper.double_q, paper.loss, paper.q_prior, paper.spec_features) == \
        (False, "mse", "none", False)


@pytest.mark.parametrize("residual", ["additive", "scaled"])
def test_untrained_residual_agent_decides_like_mct(costs, residual):
    from placement.policies import make_policy
    from simulator import paper_cluster
    cluster = paper_cluster()
    agent = LDWPPolicy(cluster, costs, LDWPSettings(network="node_scoring", q_prior="completion",
                                                     residual=residual, spec_features=True))
    agent.training = False
    mct = make_policy("mct", cluster, costs)
    rng = random.Random(4)
    agree = 0
    for i in range(50):
        nodes = tuple(NodeState(n, queue_depth=rng.randrange(9), backlog_s=rng.random() * 2000)
                      for n in cluster.node_ids)
        task = Task(f"t{i}", rng.choice(["face_recognition", "video_synopsis",
                                          "intrusion_detection"]), rng.randrange(10**6, 10**8))
        obs = Observation(task, nodes, 0.0)
        agree += agent.decide(obs).node == mct.decide(obs).node
        state = agent.encode(obs)
        np.testing.assert_allclose(agent.q_values(state, use_numpy=True), agent.q_values(state),
                                   rtol=1e-5, atol=1e-5)
    assert agree >= 48  # the agent's affine estimate of the task time may break a near-tie


def test_scaled_residual_q_is_minus_log_of_the_corrected_completion():
    from placement.ldwp.features import (COMPLETION_COLUMN, ESTIMATE_COLUMN, NODE_ROW_SIZE,
                                         scaled_completion_q)
    rows = torch.zeros(1, NODE_ROW_SIZE)
    rows[0, ESTIMATE_COLUMN] = np.log1p(10.0) / 10      # task alone: 10 s
    rows[0, COMPLETION_COLUMN] = np.log1p(40.0) / 10    # wait 30 s + 10 s
    factors = torch.tensor([[np.log(2.0), np.log(0.5)]], dtype=torch.float32)
    q = scaled_completion_q(rows, factors, lib=torch)
    assert q.item() == pytest.approx(-np.log1p(2 * 30 + 0.5 * 10), rel=1e-5)


def test_huber_loss_is_used_when_asked(costs):
    agent = LDWPPolicy(_cluster(2), costs, LDWPSettings(network="node_scoring", loss="huber",
                                                         batch_size=4, seed=0))
    state = agent.encode(_observation(2, 0))
    for _ in range(4):
        agent.replay.add((state, 0, 100.0, state, True))   # a huge TD error
    agent._train_step()
    with torch.no_grad():
        q = agent.q_network(torch.from_numpy(state)[None])[0, 0]
    # smooth L1 of an error e > 1 is |e| - 0.5 (the squared error would be e^2)
    assert agent.losses[-1] == pytest.approx(abs(100.0 - q.item()) - 0.5, rel=0.05)


def test_drain_time_reward_is_the_time_until_the_node_worked_off_its_backlog(costs):
    cluster = ClusterSpec((NodeSpec("a", 2, 16),))
    agent = LDWPPolicy(cluster, costs, LDWPSettings(network="node_scoring", reward="drain_time",
                                                     latency_transform="linear",
                                                     latency_scale_s=1.0,
                                                     learning_starts=10_000, seed=0))
    t1 = Task("t1", "face_recognition", 3_000_000, 0.0)
    t2 = Task("t2", "face_recognition", 3_000_000, 5.0)
    w = agent.outcomes.task_work_s(t1, "a")
    o1 = Observation(t1, (NodeState("a"),), 0.0)
    o2 = Observation(t2, (NodeState("a", queue_depth=1, backlog_s=w),), 5.0)
    agent.decide(o1)
    agent.decide(o2)
    from workload.model import Transition
    agent.learn(Transition(o1, None, 0.0, o2))
    agent.learn(Transition(o2, None, 0.0, None, done=True))
    # t2 completes first (the node scheduler may reorder): the node has now done as much work
    # as t1's decision asked for (w), so t1 is judged at time 25; t2's needs 2 w.
    agent.observe_completion("t2", 20.0, "a")          # at time 25
    assert [item[2] for item in agent.replay.items] == [pytest.approx(-25.0)]
    agent.observe_completion("t1", 40.0, "a")          # at time 40: both works done
    assert sorted(item[2] for item in agent.replay.items) == [pytest.approx(-35.0),
                                                              pytest.approx(-25.0)]
