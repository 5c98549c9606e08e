"""LDWP trusts its learned correction only as far as it has evidence (placement.ldwp.evidence):
where no node of a decision has any (nodes never seen, a task type never learned) it decides
exactly as its prior, MCT; a node without evidence beside nodes with evidence (a node never
seen, a node 3x faster than any in training, a node with no GPU) gets their pooled correction,
so that every node's Q is on one scale."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from placement.ldwp.agent import LDWPPolicy, LDWPSettings
from placement.ldwp.evidence import (MAX_SIGNATURES, Evidence, EvidenceError, evidence_columns,
                                     model_evidence, pooled_correction)
from placement.ldwp.features import completion_prior, scaled_completion_q
from placement.ldwp.modelfile import ModelFileError
from placement.policies import make_policy
from simulator import paper_cluster
from workload.estimates import CostModel
from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task

torch.set_num_threads(1)
APPS = ("face_recognition", "video_synopsis", "intrusion_detection")


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def trained_like(cluster: ClusterSpec, costs, examples: int = 1000, seed: int = 3,
                 apps=APPS, on=None) -> LDWPPolicy:
    """A residual agent with a strong, arbitrary learned correction and ``examples`` recorded
    per (node type of ``on`` or ``cluster``, task type)."""
    agent = LDWPPolicy(cluster, costs, LDWPSettings(network="node_scoring", q_prior="completion",
                                                     residual="scaled", spec_features=True,
                                                     hidden_sizes=(16,), seed=seed))
    torch.manual_seed(seed)
    with torch.no_grad():
        for module in agent.q_network.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, 1.0)
                module.bias.normal_(0.0, 1.0)
    agent._numpy_layers = None
    agent.training = False
    source = on or cluster
    for app in apps:
        obs = Observation(Task("x", app, 10**6), tuple(NodeState(n) for n in source.node_ids),
                          0.0)
        state = LDWPPolicy(source, costs, agent.settings).encode(obs)
        for row in state:
            agent.evidence.record(row, weight=examples)
    return agent


def observation(cluster: ClusterSpec, rng: random.Random, app: str | None = None) -> Observation:
    nodes = tuple(NodeState(n, queue_depth=rng.randrange(6), backlog_s=rng.random() * 500)
                  for n in cluster.node_ids)
    return Observation(Task("t", app or rng.choice(APPS), rng.randrange(10**5, 10**7)), nodes, 0.0)


TRAINING = paper_cluster(nodes=4)
SHAPE = TRAINING.nodes[0]
# (name, the evaluation cluster, nodes whose Q must be the prior alone)
NO_EVIDENCE = [
    ("a node 3x faster than any in training",
     ClusterSpec(TRAINING.nodes + (NodeSpec("fast", SHAPE.cpu_cores, SHAPE.host_memory_gb,
                                            SHAPE.gpus, cpu_speed=3.0),)), {"fast"}),
    ("a node with no GPU", ClusterSpec(TRAINING.nodes + (NodeSpec("cpu", 16, 64),)), {"cpu"}),
    ("a GPU type never seen",
     ClusterSpec(TRAINING.nodes + (NodeSpec("a100", 8, 64, gpus=(GpuSpec("a100", 40, 8.0),)),)),
     {"a100"}),
    ("only unseen nodes: the whole decision is MCT's",
     ClusterSpec((NodeSpec("slow", 8, 32), NodeSpec("fast3x", 8, 32, cpu_speed=3.0))),
     {"slow", "fast3x"}),
]


def raw_correction(agent: LDWPPolicy, state: np.ndarray) -> np.ndarray:
    """The network's learned correction per node row, before any trust (float64)."""
    net = agent.q_network
    with torch.no_grad():
        rows = torch.from_numpy(state)[None]
        return net.body(net.with_context(rows))[0].double().numpy()


@pytest.mark.parametrize("name,cluster,unseen", NO_EVIDENCE, ids=[c[0] for c in NO_EVIDENCE])
def test_a_node_without_evidence_gets_the_pooled_correction(costs, name, cluster, unseen):
    agent = trained_like(cluster, costs, on=TRAINING)
    rng = random.Random(1)
    for _ in range(20):
        obs = observation(cluster, rng)
        state = agent.encode(obs)
        trust = agent.evidence.trust(state)
        raw = raw_correction(agent, state)
        q, prior = agent.q_values(state), completion_prior(state.astype(np.float64))
        seen = [i for i, node in enumerate(obs.node_ids) if node not in unseen]
        for i, node in enumerate(obs.node_ids):
            if node in unseen:
                assert trust[i] == pytest.approx(0.0, abs=1e-9)
            else:
                assert trust[i] > 0.9  # 1,000 examples of that node type and task type
        if not seen:   # nothing known: the prior alone
            np.testing.assert_allclose(q, prior, rtol=1e-5, atol=1e-6)
            continue
        top = trust.max()
        pooled = (trust[seen] @ raw[seen]) / trust[seen].sum()
        for i, node in enumerate(obs.node_ids):
            used = trust[i] * raw[i] + (top - trust[i]) * pooled
            expected = scaled_completion_q(state[i:i + 1].astype(np.float64), used[None, :],
                                           lib=np)[0]
            assert q[i] == pytest.approx(expected, rel=1e-4, abs=1e-6), node
    if unseen == set(cluster.node_ids):
        mct = make_policy("mct", cluster, costs)
        same = sum(agent.decide(o).node == mct.decide(o).node
                   for o in (observation(cluster, rng) for _ in range(40)))
        assert same >= 38  # MCT's exact estimate vs the agent's affine fit may split a tie


def test_a_learning_agent_acts_on_each_nodes_own_trust_a_frozen_one_on_the_pooled(costs):
    """While it learns (``training``), the agent acts as the shipped files were trained (each
    node's correction times its own trust), so they rebuild bit for bit; frozen, it pools."""
    cluster = NO_EVIDENCE[1][1]                      # the training nodes and a GPU-less node
    agent = trained_like(cluster, costs, on=TRAINING)
    state = agent.encode(observation(cluster, random.Random(6)))
    trust, raw = agent.evidence.trust(state), raw_correction(agent, state)
    prior = completion_prior(state.astype(np.float64))
    unseen = cluster.node_ids.index("cpu")
    agent.training = True
    learning = agent.q_values(state)
    assert learning[unseen] == pytest.approx(prior[unseen], rel=1e-5, abs=1e-6)
    expected = scaled_completion_q(state.astype(np.float64), raw * trust[:, None], lib=np)
    np.testing.assert_allclose(learning, expected, rtol=1e-4, atol=1e-6)
    agent.training = False
    frozen = agent.q_values(state)
    np.testing.assert_allclose(frozen, scaled_completion_q(
        state.astype(np.float64), pooled_correction(raw, trust), lib=np), rtol=1e-4, atol=1e-6)
    assert frozen[unseen] != pytest.approx(prior[unseen], rel=1e-3)
    agent.settings.learning_trust_rule, agent.training = "pooled", True
    np.testing.assert_allclose(agent.q_values(state), frozen, rtol=1e-6)  # learns as it decides
    agent.settings.learning_trust_rule, agent.training = "per_node", False
    agent.trust_rule = "per_node"                       # a frozen agent on the rule before
    np.testing.assert_allclose(agent.q_values(state), learning, rtol=1e-6)
    np.testing.assert_allclose(agent.q_values(state, use_numpy=True), learning, rtol=1e-4,
                               atol=1e-6)


@pytest.mark.parametrize("rule,in_header", [("per_node", False), ("pooled", True)])
def test_the_learning_rule_is_in_a_model_file_only_when_it_is_not_the_default(rule, in_header):
    """Files trained before the setting keep their bytes; one trained pooled says so."""
    from placement.ldwp.agent_file import agent_metadata
    settings = LDWPSettings(network="node_scoring", q_prior="completion", residual="scaled",
                            learning_trust_rule=rule)
    header = agent_metadata(settings, ["a"], 0, None)["settings"]
    assert ("learning_trust_rule" in header) is in_header
    assert LDWPSettings(**{**header, "hidden_sizes": tuple(header["hidden_sizes"])}) \
        .learning_trust_rule == rule


@pytest.mark.parametrize("bad", ["median", "", None, 1])
def test_an_unknown_learning_rule_is_refused(bad):
    with pytest.raises(ValueError, match="learning_trust_rule"):
        LDWPSettings(network="node_scoring", q_prior="completion", learning_trust_rule=bad)


# (name, corrections per node (M, 2), trust (M,), the corrections the decision uses)
POOLING = [
    ("one trust for all: trust x correction, as before pooling",
     [[1.0, 2.0], [3.0, -1.0]], [0.5, 0.5], [[0.5, 1.0], [1.5, -0.5]]),
    ("an unknown node gets the known nodes' mean",
     [[1.0, 2.0], [3.0, 4.0], [50.0, -50.0]], [1.0, 1.0, 0.0], [[1.0, 2.0], [3.0, 4.0],
                                                                  [2.0, 3.0]]),
    ("the mean is weighted by trust, the unknown node raised to the top trust",
     [[0.0, 0.0], [4.0, 8.0], [9.0, 9.0]], [0.25, 0.75, 0.0], [[1.5, 3.0], [3.0, 6.0],
                                                                [2.25, 4.5]]),
    ("no trust anywhere: the prior alone", [[5.0, 5.0], [-5.0, 1.0]], [0.0, 0.0],
     [[0.0, 0.0], [0.0, 0.0]]),
    ("a single node", [[2.0, -3.0]], [0.4], [[0.8, -1.2]]),
]


@pytest.mark.parametrize("name,correction,trust,expected", POOLING, ids=[p[0] for p in POOLING])
def test_pooled_correction_scenarios(name, correction, trust, expected):
    correction, trust = np.array(correction), np.array(trust)
    np.testing.assert_allclose(pooled_correction(correction, trust), expected, atol=1e-12)
    from placement.ldwp.networks import pooled_correction_torch
    batch = pooled_correction_torch(torch.from_numpy(correction)[None],
                                    torch.from_numpy(trust)[None])[0].numpy()
    np.testing.assert_allclose(batch, expected, atol=1e-12)
    from placement.ldwp.evidence import pooling_matrix   # the router's numpy path's form
    np.testing.assert_allclose(pooling_matrix(trust) @ correction, expected, atol=1e-12)


def test_the_pooling_matrix_pools_as_pooled_correction_on_random_trust():
    rng = np.random.default_rng(3)
    from placement.ldwp.evidence import pooling_matrix
    for m in (1, 2, 11, 40):
        for _ in range(20):
            trust = rng.uniform(0.0, 1.0, m) * (rng.uniform(size=m) > 0.3)
            correction = rng.normal(size=(m, 2)) * 10.0
            np.testing.assert_allclose(pooling_matrix(trust) @ correction,
                                       pooled_correction(correction, trust), atol=1e-12)


def test_a_correction_common_to_every_node_leaves_an_unknown_node_on_the_same_scale(costs):
    """The shipped model's corrections are large and mostly common to all nodes (the prior
    underestimates waits everywhere). Pooled, a node without evidence is as slow as the
    others in the model's eyes; trusted as zero (the rule before), it looked 20x cheaper and
    took every task, however long its queue."""
    from placement.ldwp.features import COMPLETION_COLUMN, COMPLETION_SCALE, ESTIMATE_COLUMN
    wait = np.array([1.0, 2.0, 15.0])          # s: node "new" (no evidence) has the longest queue
    estimate = np.array([0.5, 0.5, 0.5])
    rows = np.zeros((3, max(COMPLETION_COLUMN, ESTIMATE_COLUMN) + 1))
    rows[:, ESTIMATE_COLUMN] = np.log1p(estimate) / COMPLETION_SCALE
    rows[:, COMPLETION_COLUMN] = np.log1p(wait + estimate) / COMPLETION_SCALE
    common = np.full((3, 2), math.log(20.0))
    trust = np.array([1.0, 1.0, 0.0])
    q_new = scaled_completion_q(rows, pooled_correction(common, trust), lib=np)
    q_old = scaled_completion_q(rows, common * trust[:, None], lib=np)
    assert int(np.argmax(q_new)) == 0          # MCT's choice: the shortest completion
    assert int(np.argmax(q_old)) == 2          # the bare prior of the new node undercut it


def test_with_evidence_the_correction_changes_decisions(costs):
    agent = trained_like(TRAINING, costs)
    rng = random.Random(2)
    mct = make_policy("mct", TRAINING, costs)
    differs = sum(agent.decide(o).node != mct.decide(o).node
                  for o in (observation(TRAINING, rng) for _ in range(40)))
    assert differs > 0  # the arbitrary correction is trusted on the node types it was learned on


def test_a_task_type_never_learned_gets_the_prior(costs):
    agent = trained_like(TRAINING, costs, apps=("face_recognition",))
    state = agent.encode(observation(TRAINING, random.Random(3), app="video_synopsis"))
    assert np.all(agent.evidence.trust(state) == 0.0)
    np.testing.assert_allclose(agent.q_values(state), completion_prior(state.astype(np.float64)),
                               rtol=1e-5)


def test_online_learning_raises_the_trust_of_a_new_node(costs):
    cluster = NO_EVIDENCE[1][1]
    agent = trained_like(cluster, costs, on=TRAINING)
    rng = random.Random(4)
    obs = observation(cluster, rng, app="video_synopsis")
    state = agent.encode(obs)
    cpu = obs.node_ids.index("cpu")
    before = agent.evidence.trust(state)[cpu]
    for _ in range(50):   # examples the agent learns from, each on the cpu node
        agent._store((state, cpu, -1.0, None, True))
    after = agent.evidence.trust(state)[cpu]
    assert before < 1e-9 and after == pytest.approx(0.5, abs=0.01)  # evidence_half = 50


def test_the_evidence_travels_in_the_model_file_and_a_hostile_one_is_refused(costs, tmp_path):
    agent = trained_like(TRAINING, costs)
    path = tmp_path / "m.spm"
    agent.save(path)
    loaded = LDWPPolicy.from_file(path, TRAINING, costs)
    state = agent.encode(observation(TRAINING, random.Random(5)))
    np.testing.assert_allclose(loaded.evidence.trust(state), agent.evidence.trust(state))
    np.testing.assert_allclose(loaded.q_values(state), agent.q_values(state), rtol=1e-5)
    spec, types = evidence_columns("catalog", True)
    good = agent.evidence.to_metadata()
    bad_cases = [
        {**good, "entries": [[[0.0] * 6, [1.0, 0.0, 0.0], float("inf")]]},
        {**good, "entries": [[[0.0] * 5, [1.0, 0.0, 0.0], 3.0]]},
        {**good, "entries": [[[0.0] * 6, [1.0, 0.0, 0.0], -1.0]]},
        {**good, "entries": [[[0.0] * 6, [1.0, 0.0, 0.0], 1.0]] * (MAX_SIGNATURES + 1)},
        {**good, "evidence_half": float("nan")},
        ["not", "a", "mapping"],
    ]
    for bad in bad_cases:
        with pytest.raises(EvidenceError):
            Evidence.from_metadata(bad, spec, types)
    with pytest.raises(ModelFileError, match="evidence"):
        from placement.ldwp.modelfile import load_model, save_model
        layers, metadata = load_model(path)
        save_model(tmp_path / "bad.spm", layers, {**metadata, "evidence": bad_cases[0]})
        LDWPPolicy.from_file(tmp_path / "bad.spm", TRAINING, costs)


@pytest.mark.parametrize("field, value", [("bandwidth", 1e200), ("bandwidth", 1e154),
                                          ("bandwidth", 1e-9), ("evidence_half", 1e300),
                                          ("evidence_half", 1e-12)])
def test_implausible_evidence_settings_in_a_file_are_refused_by_both_loaders(costs, tmp_path,
                                                                               field, value):
    """A bandwidth of 1e200 loaded and then overflowed on every decision (the service answered
    500s, the router fell back with a warning per record); 1e154 trusted the correction on
    node kinds the file has no evidence for. Both loaders refuse them now."""
    from placement.ldwp.inference import NumpyLDWPPolicy
    from placement.ldwp.modelfile import load_model, save_model
    agent = trained_like(TRAINING, costs)
    agent.save(tmp_path / "m.spm")
    layers, metadata = load_model(tmp_path / "m.spm")
    evidence = {**metadata["evidence"], field: value}
    save_model(tmp_path / "bad.spm", layers, {**metadata, "evidence": evidence})
    with pytest.raises(ModelFileError, match="evidence"):
        LDWPPolicy.from_file(tmp_path / "bad.spm", TRAINING, costs)
    with pytest.raises(ModelFileError, match="evidence"):
        NumpyLDWPPolicy.from_file(tmp_path / "bad.spm", TRAINING, costs)


def test_a_model_file_without_evidence_decides_as_its_prior_and_full_trust_is_a_choice(costs):
    assert len(model_evidence({}, "catalog", True).counts) == 0
    agent = trained_like(TRAINING, costs)
    agent.evidence = model_evidence({}, "catalog", True)
    state = agent.encode(observation(TRAINING, random.Random(6)))
    np.testing.assert_allclose(agent.q_values(state), completion_prior(state.astype(np.float64)),
                               rtol=1e-5)
    full = LDWPSettings(network="node_scoring", q_prior="completion", residual="scaled",
                        correction_trust="full")
    assert LDWPPolicy(TRAINING, costs, full).evidence is None
    with pytest.raises(ValueError, match="correction_trust"):
        LDWPSettings(network="node_scoring", q_prior="completion", correction_trust="some")


def test_non_finite_rows_are_never_counted_and_the_table_is_bounded():
    spec, types = evidence_columns("catalog", True)
    evidence = Evidence(spec, types)
    row = np.zeros(30)
    row[0] = 1.0
    bad = row.copy()
    bad[spec[0]] = math.nan
    evidence.record(bad)
    assert evidence.counts == {}
    for i in range(MAX_SIGNATURES + 10):
        r = row.copy()
        r[spec[0]] = i / 1000.0
        evidence.record(r)
    assert len(evidence.counts) == MAX_SIGNATURES


@pytest.mark.parametrize("value", ["median", "", None, 7, ["pooled"], "pooled" * 1000])
def test_a_file_naming_an_unknown_learning_rule_is_refused_by_both_loaders(costs, tmp_path,
                                                                          value):
    from placement.ldwp.inference import NumpyLDWPPolicy
    from placement.ldwp.modelfile import load_model, save_model
    trained_like(TRAINING, costs).save(tmp_path / "m.spm")
    layers, metadata = load_model(tmp_path / "m.spm")
    settings = {**metadata["settings"], "learning_trust_rule": value}
    save_model(tmp_path / "bad.spm", layers, {**metadata, "settings": settings})
    with pytest.raises(ModelFileError, match="learning_trust_rule"):
        LDWPPolicy.from_file(tmp_path / "bad.spm", TRAINING, costs)
    with pytest.raises(ModelFileError, match="learning_trust_rule"):
        NumpyLDWPPolicy.from_file(tmp_path / "bad.spm", TRAINING, costs)


def test_a_file_trained_pooled_decides_pooled_frozen_and_learns_pooled(costs, tmp_path):
    agent = trained_like(TRAINING, costs)
    agent.settings.learning_trust_rule = "pooled"
    agent.save(tmp_path / "m.spm")
    loaded = LDWPPolicy.from_file(tmp_path / "m.spm", TRAINING, costs)
    assert loaded.settings.learning_trust_rule == "pooled" and loaded.trust_rule == "pooled"
