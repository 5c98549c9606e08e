"""The router's fast decision path (``NumpyLDWPPolicy.decide``) against a straightforward
reference: one Python loop per node building each row from its definition (features.py's
docstrings), the concatenated [row, mean] network in float64 from the file's arrays, and the
residual's Q from its formula. Same node, same Q-values to 1e-9 relative, on random seeded
observations for 3, 11 and 100 nodes; and the fast rows round to exactly the shared encoding
(``features.node_rows``, which the torch agent trains on). No torch: random weights.

Every test runs twice: on the compiled path (``placement.ldwp.compiled``, numba) and on the
numpy path (``STREAMPLACE_JIT=0``, what a router without numba runs)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from placement.ldwp import compiled
from placement.ldwp.compiled import JIT_ENV, jit_available
from placement.ldwp.features import (APPS, COMPLETION_SCALE, MAX_ENCODED_SIZE,
                                     task_encoding_metadata, type_code)
from placement.ldwp.inference import (ESTIMATE_CACHE_SIZE, NODE_SET_CACHE_SIZE,
                                      TASK_TYPE_CACHE_SIZE, NumpyLDWPPolicy)
from placement.measured_costs import MeasuredCosts
from simulator.scenarios import paper_cluster, paper_costs
from workload.estimates import CostModel
from workload.model import NODE_STATE_FIELDS, ClusterSpec, NodeState, Observation, Task

RTOL = 1e-9
TYPES = (*APPS, "user_operator")   # the built-in apps and a type no calibration knows
#: the network variants the router can load (name -> settings, hidden sizes)
VARIANTS = {
    "residual (the benchmark's)": ({"q_prior": "completion", "residual": "scaled",
                                    "spec_features": True}, (128, 64)),
    "residual additive, hashed types": ({"q_prior": "completion", "task_encoding": "hashed"},
                                        (32, 16)),
    "plain node scoring": ({}, (32,)),
}


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def decision_path(request, monkeypatch):
    """Which path the policies built in the test decide on (chosen when they are built)."""
    if request.param == "compiled" and not jit_available():
        pytest.skip("numba (or scipy) is not installed: the numpy path is tested alone")
    monkeypatch.setenv(JIT_ENV, "1" if request.param == "compiled" else "0")
    return request.param


def _cluster(nodes: int) -> ClusterSpec:
    """The paper's node types, cycled and renamed past its 11 nodes."""
    base = paper_cluster().nodes
    specs = [dataclasses.replace(base[i % len(base)], node_id=f"{base[i % len(base)].node_id}"
                                 + (f"-r{i // len(base)}" if i >= len(base) else ""))
             for i in range(nodes)]
    return ClusterSpec(tuple(specs), name=f"test-{nodes}")


def _layers(sizes: list[int], seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """float32 (out, in) weights and biases as a model file holds them; large enough that the
    residual head is far from zero (the untrained one is exactly MCT)."""
    rng = np.random.default_rng(seed)
    return [((rng.standard_normal((b, a)) / math.sqrt(a)).astype(np.float32),
             (0.3 * rng.standard_normal(b)).astype(np.float32))
            for a, b in zip(sizes, sizes[1:])]


def _node_scoring_policy(cluster, variant: str, costs=None, seed: int = 0):
    """(policy, its layers as the file holds them)."""
    settings, hidden = VARIANTS[variant]
    # full trust: these tests check the numbers of the network itself; the evidence weighting
    # is checked against the shared path below and in tests/unit/test_evidence.py
    settings = {"hidden_sizes": list(hidden), "correction_trust": "full", **settings}
    encoding = settings.get("task_encoding", "catalog")
    width = (16 + (8 if encoding == "hashed" else 0) + (6 if settings.get("spec_features")
                                                          else 0))
    outputs = 2 if settings.get("residual") == "scaled" else 1
    metadata = {"kind": "node_scoring", "nodes": list(cluster.node_ids), "settings": settings,
                "task_types": task_encoding_metadata(encoding), "observation": "node_rows"}
    layers = _layers([2 * width, *hidden, outputs], seed)
    return NumpyLDWPPolicy(layers, metadata, cluster,
                           costs if costs is not None else paper_costs()), layers


def _paper_policy(cluster, seed: int = 0):
    """(policy, its layers as the file holds them)."""
    m = len(cluster.nodes)
    metadata = {"kind": "paper", "nodes": list(cluster.node_ids),
                "settings": {"hidden_sizes": [256, 128]},
                "task_types": task_encoding_metadata("catalog"), "observation": "paper_vector"}
    layers = _layers([len(APPS) + 1 + 6 * m, 256, 128, m], seed)
    return NumpyLDWPPolicy(layers, metadata, cluster), layers


def _observations(node_ids, count: int, seed: int, stranger: bool = False):
    """Random observations, some numbers out of range (hostile feedback), and optionally a
    node the model's cluster does not know."""
    rng = np.random.default_rng(seed)
    ids = list(node_ids) + (["stranger"] if stranger else [])
    for i in range(count):
        nodes = tuple(NodeState(n, *(float(u) for u in rng.uniform(-0.1, 1.2, 6)),
                                queue_depth=int(rng.integers(0, 12)),
                                backlog_s=float(rng.choice([0.0, rng.uniform(0, 300)])),
                                speed_factor=float(rng.uniform(0.3, 3.0)))
                      for n in ids)
        size = int(rng.choice([0, rng.integers(1_000, 10**9)]))
        yield Observation(Task(f"t{i}", TYPES[i % len(TYPES)], size), nodes, 0.0)


# -- the straightforward reference ---------------------------------------------------------------
def _clamp(value: float, low: float, high: float) -> float:
    return low if math.isnan(value) else min(high, max(low, value))


def _reference_rows(policy: NumpyLDWPPolicy, obs: Observation):
    """(rows, wait, estimate) node by node, from the definitions in features.py."""
    task = obs.task
    size = math.log1p(_clamp(float(task.input_size), 0.0, MAX_ENCODED_SIZE)) / 20.0
    task_columns = [1.0 if a == task.app_id else 0.0 for a in APPS] + [size]
    estimates, waits, rows = [], [], []
    for node in obs.nodes:
        if node.node_id in policy.coefficients:
            table, units = policy.coefficients[node.node_id]
            if policy.live is not None:
                alone = policy.live.estimates_s([node.node_id], task.app_id,
                                                task.input_size)[node.node_id]
            else:
                fixed, slope = table.get(task.app_id, (0.0, 0.0))
                alone = fixed + slope * task.input_size
        else:
            units, alone = 1, 0.0
        estimate = _clamp(alone * node.speed_factor, 0.0, 1e7)
        wait = _clamp(node.backlog_s, 0.0, 1e7) / _clamp(units, 1.0, 1e4)
        estimates.append(estimate)
        waits.append(wait)
        rows.append(task_columns + [_clamp(getattr(node, f), 0.0, 1.0) for f in NODE_STATE_FIELDS]
                    + [math.log1p(_clamp(node.queue_depth, 0.0, 1e6)) / 5.0,
                       math.log1p(_clamp(node.backlog_s, 0.0, 1e7)) / 10.0,
                       math.log1p(estimate) / 10.0,
                       math.log1p(wait + estimate) / COMPLETION_SCALE])
    known = [e for e in estimates if e > 0]
    for row, estimate, node in zip(rows, estimates, obs.nodes):
        row += [min(known) / estimate if estimate > 0 else 0.0, 1.0]
        if policy.task_encoding == "hashed":
            row += list(type_code(task.app_id))
        if policy.spec_features:
            row += list(policy._spec_rows.get(node.node_id, (0.0,) * 6))
    return np.array(rows), np.array(waits), np.array(estimates)


def _mlp(layers, x: np.ndarray) -> np.ndarray:
    for i, (weight, bias) in enumerate(layers):
        x = x @ weight.astype(np.float64).T + bias.astype(np.float64)
        if i < len(layers) - 1:
            x = np.maximum(x, 0.0)
    return x


def _reference_q(policy: NumpyLDWPPolicy, layers, obs: Observation) -> np.ndarray:
    if policy.kind == "paper":
        x = [1.0 if a == obs.task.app_id else 0.0 for a in APPS]
        x.append(math.log1p(_clamp(float(obs.task.input_size), 0.0, MAX_ENCODED_SIZE)) / 20.0)
        x += [_clamp(getattr(n, f), 0.0, 1.0) for n in obs.nodes for f in NODE_STATE_FIELDS]
        return _mlp(layers, np.array(x))
    rows, wait, estimate = _reference_rows(policy, obs)
    both = np.concatenate([rows, np.repeat(rows.mean(axis=0)[None], len(rows), axis=0)], 1)
    out = _mlp(layers, both)
    if policy.q_prior != "completion":
        return out[:, 0]
    if policy.residual == "scaled":
        return -np.log1p(np.exp(out[:, 0]) * wait + np.exp(out[:, 1]) * estimate)
    return out[:, 0] - np.log1p(wait + estimate)


def _assert_agrees(policy, layers, obs) -> None:
    expected = _reference_q(policy, layers, obs)
    ids, q, _ = policy.fast_q_values(obs)
    assert ids == obs.node_ids
    np.testing.assert_allclose(q, expected, rtol=RTOL, atol=0)
    decision = policy.decide(obs)
    assert decision.node == obs.node_ids[int(np.argmax(expected))]
    np.testing.assert_allclose([decision.scores[n] for n in ids], expected, rtol=RTOL, atol=0)


# -- the tests ------------------------------------------------------------------------------------
@pytest.mark.parametrize("nodes", [3, 11, 100])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_fast_path_gives_the_references_node_and_q_values(nodes, variant, decision_path):
    cluster = _cluster(nodes)
    policy, layers = _node_scoring_policy(cluster, variant, seed=nodes)
    for obs in _observations(cluster.node_ids, 40, seed=nodes, stranger=nodes == 11):
        _assert_agrees(policy, layers, obs)
    # the path under test really decided (a failed compiled call would fall back silently)
    used = policy.compiled is not None and policy.compiled.failed is None
    assert used == (decision_path == "compiled")


def test_a_failing_compiled_call_falls_back_to_numpy_with_the_same_answer(decision_path,
                                                                            monkeypatch):
    if decision_path != "compiled":
        pytest.skip("the compiled path's fallback")
    cluster = _cluster(11)
    policy, layers = _node_scoring_policy(cluster, "residual (the benchmark's)")

    def broken(*_args):
        raise RuntimeError("no LLVM here")

    monkeypatch.setattr(compiled, "_KERNEL", broken)
    for obs in _observations(cluster.node_ids, 5, seed=3):
        _assert_agrees(policy, layers, obs)
    assert policy.compiled.failed == "RuntimeError: no LLVM here"


@pytest.mark.parametrize("nodes", [3, 11, 100])
def test_the_paper_networks_fast_path_gives_the_references_node_and_q_values(nodes):
    cluster = _cluster(nodes)
    policy, layers = _paper_policy(cluster, seed=nodes)
    for obs in _observations(cluster.node_ids, 40, seed=nodes):
        _assert_agrees(policy, layers, obs)
        _, _, x = policy.fast_q_values(obs)
        np.testing.assert_array_equal(x.astype(np.float32), policy.encode(obs))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_fast_rows_round_to_exactly_the_shared_encoding(variant):
    """The router decides on the numbers the torch agent trains on (node_rows), bit for bit
    after float32 rounding, hostile values and an unknown node included."""
    cluster = _cluster(11)
    policy, _ = _node_scoring_policy(cluster, variant)
    for obs in _observations(cluster.node_ids, 60, seed=5, stranger=True):
        _, _, rows = policy.fast_q_values(obs)
        np.testing.assert_array_equal(rows.astype(np.float32), policy.encode(obs))
        # and the plain path (shared encoding, float64 forward) agrees to float32 rounding
        np.testing.assert_allclose(policy.fast_q_values(obs)[1],
                                   policy.q_values(policy.encode(obs)), rtol=1e-4, atol=1e-5)


def test_nan_and_infinite_node_numbers_read_as_node_rows_reads_them():
    cluster = _cluster(3)
    policy, layers = _node_scoring_policy(cluster, "residual (the benchmark's)")
    weird = (math.nan, math.inf, -math.inf)
    nodes = tuple(NodeState(n, cpu_util=w, gpu_util=-w, queue_depth=3, backlog_s=w,
                            speed_factor=w) for n, w in zip(cluster.node_ids, weird))
    obs = Observation(Task("t", "video_synopsis", 10**6), nodes, 0.0)
    _, _, rows = policy.fast_q_values(obs)
    assert np.isfinite(rows).all()
    np.testing.assert_array_equal(rows.astype(np.float32), policy.encode(obs))
    _assert_agrees(policy, layers, obs)


@pytest.mark.parametrize("size", [0, 1, 10**6, 2.5e6, 10**30, -7, True, math.nan, math.inf,
                                  1e301])
def test_every_kind_of_task_size_gives_the_references_numbers(size, decision_path):
    """Plain sizes are finished in the kernel (fixed + slope * size); odd ones (bool, huge,
    not finite) come finished from the numpy estimate. Both agree with the reference, and no
    size makes the compiled path give up."""
    cluster = _cluster(4)
    policy, layers = _node_scoring_policy(cluster, "residual (the benchmark's)")
    for obs in _observations(cluster.node_ids, 3, seed=8):
        obs = dataclasses.replace(obs, task=Task("t", APPS[1], size))
        if isinstance(size, float) and not math.isfinite(size):
            _, q, rows = policy.fast_q_values(obs)   # NaN/inf estimates: read as node_rows does
            np.testing.assert_array_equal(rows.astype(np.float32), policy.encode(obs))
            assert np.isfinite(q).all()
        else:
            _assert_agrees(policy, layers, obs)
    used = policy.compiled is not None and policy.compiled.failed is None
    assert used == (decision_path == "compiled")


def test_a_learned_cost_model_is_asked_live_not_cached():
    cluster = _cluster(3)
    costs = MeasuredCosts(cluster, prior=CostModel(colocation=None))
    policy, layers = _node_scoring_policy(cluster, "residual (the benchmark's)", costs=costs)
    obs = next(_observations(cluster.node_ids, 1, seed=2))
    obs = dataclasses.replace(obs, task=Task("t", "my_op", 50_000))
    _assert_agrees(policy, layers, obs)
    before = policy.fast_q_values(obs)[1]
    for size in (10_000, 50_000, 90_000):   # the first node turns out slow for my_op
        costs.observe(cluster.node_ids[0], "my_op", size, 30.0 + 1e-3 * size)
    _assert_agrees(policy, layers, obs)
    assert policy.fast_q_values(obs)[1][0] < before[0]


def test_the_caches_stay_bounded_and_right(decision_path):
    cluster = _cluster(11)
    policy, layers = _node_scoring_policy(cluster, "residual (the benchmark's)")
    rng = np.random.default_rng(9)
    ids = cluster.node_ids
    for i in range(NODE_SET_CACHE_SIZE + 8):   # subsets: a router skipping full nodes
        subset = tuple(n for n in ids if rng.random() < 0.7) or ids[:1]
        obs = next(_observations(subset, 1, seed=i))
        _assert_agrees(policy, layers, obs)
    assert len(policy.fast_rows._node_sets) <= NODE_SET_CACHE_SIZE
    for i in range(TASK_TYPE_CACHE_SIZE + 8):  # ever-new user types
        obs = next(_observations(ids, 1, seed=i))
        _assert_agrees(policy, layers, dataclasses.replace(obs, task=Task("t", f"op{i}", 7)))
    for size in range(ESTIMATE_CACHE_SIZE + 8):
        obs = next(_observations(ids, 1, seed=size))
        _assert_agrees(policy, layers, dataclasses.replace(obs, task=Task("t", APPS[0], size)))
    node_set = policy.fast_rows._node_sets[ids]
    assert len(node_set.types) <= TASK_TYPE_CACHE_SIZE
    # the compiled path's first layer on each (node set, type) template: bounded as well
    assert len(policy._template_parts) <= TASK_TYPE_CACHE_SIZE
    assert bool(policy._template_parts) == (decision_path == "compiled")
    assert len(node_set.estimates) <= ESTIMATE_CACHE_SIZE
    hits = policy.fast_rows.estimate_hits
    policy.decide(dataclasses.replace(obs, task=Task("t", APPS[0], size)))
    if decision_path == "compiled":   # the kernel finishes the estimate: no cache to ask
        assert policy.fast_rows.estimate_hits == hits
    else:
        assert policy.fast_rows.estimate_hits > hits  # an equal size is a cache hit


def test_the_reason_names_the_best_and_the_runner_up():
    cluster = _cluster(11)
    policy, _ = _node_scoring_policy(cluster, "residual (the benchmark's)")
    for obs in _observations(cluster.node_ids, 10, seed=4):
        decision = policy.decide(obs)
        ranked = sorted(decision.scores.items(), key=lambda kv: -kv[1])
        assert decision.reason == (f"LDWP: highest Q {ranked[0][1]:.3f} on {ranked[0][0]}, "
                                   f"next {ranked[1][0]} {ranked[1][1]:.3f}")
    single = Observation(Task("t", APPS[0], 10), (NodeState(cluster.node_ids[0]),), 0.0)
    assert policy.decide(single).reason.endswith(f"on {cluster.node_ids[0]}")


def test_a_task_type_that_is_not_a_string_takes_the_plain_path():
    cluster = _cluster(3)
    policy, _ = _node_scoring_policy(cluster, "plain node scoring")
    obs = Observation(Task("t", 7, 1000), tuple(NodeState(n) for n in cluster.node_ids), 0.0)
    ids, q, _ = policy.fast_q_values(obs)
    np.testing.assert_array_equal(q, policy.q_values(policy.encode(obs)))
    assert policy.decide(obs).node in ids


def test_the_fast_path_weights_the_correction_by_its_evidence_as_the_shared_path_does():
    from placement.ldwp.evidence import evidence_columns, Evidence
    cluster = _cluster(11)
    policy, layers = _node_scoring_policy(cluster, "residual (the benchmark's)", seed=4)
    spec, types = evidence_columns("catalog", True)
    evidence = Evidence(spec, types)
    for obs in _observations(cluster.node_ids[:6], 3, seed=1):   # evidence on six nodes only
        for row in policy.encode(obs):
            evidence.record(row, weight=40.0)
    policy.evidence = evidence
    weighted = 0
    for obs in _observations(cluster.node_ids, 30, seed=2):
        ids, q, _ = policy.fast_q_values(obs)
        state = policy.encode(obs)
        trust = evidence.trust(state)
        weighted += int(((trust > 0.01) & (trust < 0.99)).sum())
        np.testing.assert_allclose(q, policy.q_values(state), rtol=1e-5, atol=1e-6)
        assert policy.decide(obs).node == ids[int(np.argmax(q))]
    assert weighted > 0   # some nodes really were partly trusted
