"""Costs learned from finished tasks (placement.measured_costs): fits, fallbacks, exploration,
hostile input, and what the policies, LDWP, ObservedSpeed and the service's learner do with
task types nobody calibrated. Every scenario is a small hand-written table; nothing is random
except seeded noise."""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest

from placement.ldwp.features import (NODE_ROW_SIZE, TYPE_HASH_SIZE, node_row_size, node_rows,
                                     type_code)
from placement.measured_costs import AffineFit, MeasuredCosts
from placement.policies import make_policy
from placement.speed import ObservedSpeed, timing_sample
from workload.estimates import CostModel
from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task

NODES = ("tm_a", "tm_b", "tm_c")
# tm_b's spec says it is half as fast; for the operator below it is truly 4x faster than tm_a
CLUSTER = ClusterSpec((NodeSpec("tm_a", 2, 8.0), NodeSpec("tm_b", 2, 8.0, cpu_speed=0.5),
                       NodeSpec("tm_c", 2, 8.0)))
OP = "my_op"  # a user's operator: no calibration knows it


def affine(a: float, b: float):
    return lambda size: a + b * size


def observation(task_type: str, size: int, i: int = 0, nodes=NODES) -> Observation:
    return Observation(Task(f"t{i}", task_type, size), tuple(NodeState(n) for n in nodes), 0.0)


# -- the fit --------------------------------------------------------------------------------------
# (name, true law (a, b), sizes cycled, expected (a, b)): the constrained fit finds the law, and
# a law that would need a negative part is projected onto a, b >= 0.
FIT_CASES = [
    ("fixed plus per byte", (0.2, 1e-6), (1_000, 50_000, 200_000, 900_000), (0.2, 1e-6)),
    ("per byte only", (0.0, 3e-6), (10_000, 20_000, 40_000), (0.0, 3e-6)),
    ("fixed only", (0.5, 0.0), (100, 10_000, 1_000_000), (0.5, 0.0)),
    ("one size: the mean", (0.1, 1e-5), (4_096,), (0.1 + 1e-5 * 4_096, 0.0)),
]


@pytest.mark.parametrize("name,law,sizes,expected", FIT_CASES, ids=[c[0] for c in FIT_CASES])
def test_the_fit_converges_to_the_affine_law(name, law, sizes, expected):
    fit = AffineFit(smoothing=0.05)
    for i in range(60):
        size = sizes[i % len(sizes)]
        fit.add(size, affine(*law)(size))
    a, b = fit.coefficients()
    assert a == pytest.approx(expected[0], abs=1e-9) and b == pytest.approx(expected[1], rel=1e-6,
                                                                           abs=1e-15)


def test_a_law_with_a_negative_intercept_is_fitted_through_the_origin():
    fit = AffineFit(smoothing=0.05)
    for size in (100, 200, 300) * 10:       # time = -1 + 0.02 size: a < 0 is not allowed
        fit.add(size, -1.0 + 0.02 * size)
    a, b = fit.coefficients()
    assert a == 0.0 and 0.0 < b < 0.02


def test_noisy_samples_converge_and_a_new_law_is_followed():
    costs = MeasuredCosts(CLUSTER, smoothing=0.05)
    rng = random.Random(7)
    sizes = (1_000, 30_000, 100_000, 300_000)
    for i in range(400):
        size = sizes[i % 4]
        costs.observe("tm_a", OP, size, affine(0.05, 2e-6)(size) * rng.uniform(0.9, 1.1))
    assert costs.estimate_s("tm_a", OP, 200_000) == pytest.approx(0.45, rel=0.05)
    for i in range(200):  # the node slows down 3x (a neighbour): the decayed fit follows
        size = sizes[i % 4]
        costs.observe("tm_a", OP, size, 3 * affine(0.05, 2e-6)(size))
    assert costs.estimate_s("tm_a", OP, 200_000) == pytest.approx(1.35, rel=0.02)


# -- exploration: MCT (and the untrained residual LDWP, which is MCT) tries every node ------------
TRUE_SPEED = {"tm_a": 1.0, "tm_b": 0.25, "tm_c": 2.0}   # tm_b is 4x faster for this type
SIZES = (2_000, 8_000, 32_000)                            # repeat: stale caches would show


def _true_s(node: str, size: int) -> float:
    return TRUE_SPEED[node] * affine(0.05, 1e-6)(size)


def _untrained_residual_ldwp(costs, tmp_path):
    from placement.ldwp.agent import LDWPPolicy, LDWPSettings
    from placement.ldwp.inference import NumpyLDWPPolicy
    agent = LDWPPolicy(CLUSTER, costs, LDWPSettings(
        network="node_scoring", hidden_sizes=(16, 8), q_prior="completion", residual="scaled",
        latency_transform="log", gamma=0.0, task_encoding="hashed", seed=1))
    agent.save(tmp_path / "m.spmodel")
    return NumpyLDWPPolicy.from_file(tmp_path / "m.spmodel", CLUSTER, costs=costs)


def _loop(policy, costs, n: int) -> list[str]:
    """decide -> the chosen node runs it (synthetic true time) -> learn -> decide ..."""
    chosen = []
    for i in range(n):
        size = SIZES[i % len(SIZES)]
        node = policy.decide(observation(OP, size, i)).node
        assert costs.observe(node, OP, size, _true_s(node, size))
        chosen.append(node)
    return chosen


@pytest.mark.parametrize("which", ["mct", "ldwp"])
def test_exploration_tries_every_node_then_prefers_the_truly_faster_one(which, tmp_path):
    costs = MeasuredCosts(CLUSTER, min_samples=3)
    policy = make_policy("mct", CLUSTER, costs=costs) if which == "mct" else \
        _untrained_residual_ldwp(costs, tmp_path)
    chosen = _loop(policy, costs, 30)
    tried = Counter(chosen[:9])
    assert all(tried[n] >= 3 for n in NODES), chosen[:9]   # every node tried min_samples times
    assert chosen[12:] == ["tm_b"] * 18                     # then the fast one, and only it
    assert costs.estimate_s("tm_b", OP, 8_000) == pytest.approx(_true_s("tm_b", 8_000))


def test_without_optimism_mct_believes_the_spec_and_never_finds_the_fast_node():
    """The control: the exploration rule, not luck, is what finds tm_b."""
    costs = MeasuredCosts(CLUSTER, min_samples=3, optimism=None)
    chosen = _loop(make_policy("mct", CLUSTER, costs=costs), costs, 30)
    assert "tm_b" not in chosen


def test_a_node_fast_for_one_type_and_slow_for_another_is_learned_per_type():
    truth = {("tm_a", "resize"): 0.1, ("tm_a", "ocr"): 1.0,
             ("tm_b", "resize"): 1.0, ("tm_b", "ocr"): 0.1}
    cluster = ClusterSpec(tuple(NodeSpec(n, 1, 8.0) for n in ("tm_a", "tm_b")))
    costs = MeasuredCosts(cluster)
    policy = make_policy("mct", cluster, costs=costs)
    for i in range(40):
        task_type = ("resize", "ocr")[i % 2]
        node = policy.decide(observation(task_type, 1_000, i, ("tm_a", "tm_b"))).node
        costs.observe(node, task_type, 1_000, truth[(node, task_type)])
    for task_type, fast in (("resize", "tm_a"), ("ocr", "tm_b")):
        assert policy.decide(observation(task_type, 1_000, 99, ("tm_a", "tm_b"))).node == fast
        assert costs.estimate_s(fast, task_type, 1_000) == pytest.approx(0.1)


# -- fallbacks ------------------------------------------------------------------------------------
def test_an_unrun_type_is_scaled_by_the_relative_speed_measured_on_shared_types():
    costs = MeasuredCosts(CLUSTER, min_samples=2)
    for task_type in ("x", "y"):           # tm_c measured 3x slower than tm_a on both
        for size in (100, 1_000):
            costs.observe("tm_a", task_type, size, 0.1)
            costs.observe("tm_c", task_type, size, 0.3)
    for size in (100, 1_000):               # "z" ran on tm_a only
        costs.observe("tm_a", "z", size, 0.5)
    assert costs.relative_speed("tm_c", "tm_a") == pytest.approx(3.0)
    assert costs.estimate_s("tm_c", "z", 500, explore=False) == pytest.approx(1.5)
    assert costs.estimate_s("tm_c", "z", 500) == pytest.approx(0.25)  # exploring: 0.5 x best
    assert costs.relative_speed("tm_b", "tm_a") is None


def test_the_prior_answers_for_built_in_apps_and_the_default_for_the_rest():
    prior = CostModel(colocation=None)
    slow = ClusterSpec((NodeSpec("tm_a", 2, 8.0), NodeSpec("tm_s", 2, 8.0, cpu_speed=0.5)))
    costs = MeasuredCosts(slow, prior=prior, default_s=0.2)
    fixed, slope = prior.task_time_coefficients(slow.nodes[0])["video_synopsis"]
    assert costs.estimate_s("tm_a", "video_synopsis", 36_864) == \
        pytest.approx(fixed + slope * 36_864)
    assert costs.estimate_s("tm_a", OP, 10) == pytest.approx(0.2)
    assert costs.estimate_s("tm_s", OP, 10) == pytest.approx(0.4)   # half the CPU speed
    assert MeasuredCosts(slow).estimate_s("tm_a", "video_synopsis", 36_864) == \
        pytest.approx(0.1)  # no prior: a built-in app is just another type
    assert MeasuredCosts().estimate_s("anywhere", OP, 1) == pytest.approx(0.1)  # no specs
    assert costs.cpu_ms("gmm_background", 1_000) == prior.cpu_ms("gmm_background", 1_000)
    with pytest.raises(AttributeError, match="prior"):
        MeasuredCosts().cpu_ms  # noqa: B018 - stage questions need the prior


# -- hostile input --------------------------------------------------------------------------------
# (node, type, size, seconds): each must be refused and change nothing.
HOSTILE = [
    ("tm_a", OP, 1_000, math.nan), ("tm_a", OP, 1_000, math.inf), ("tm_a", OP, 1_000, -1.0),
    ("tm_a", OP, 1_000, 0.0), ("tm_a", OP, 1_000, 1e12), ("tm_a", OP, 1_000, "0.1"),
    ("tm_a", OP, math.nan, 0.1), ("tm_a", OP, -1, 0.1), ("tm_a", OP, 1e12, 0.1),
    ("tm_a", OP, math.inf, 0.1), ("tm_a", OP, True, 0.1), ("tm_a", None, 1_000, 0.1),
    (5, OP, 1_000, 0.1),
]


def _snapshot(costs: MeasuredCosts) -> tuple:
    return (costs.version, costs.task_types(),
            {(n, s): costs.estimate_s(n, OP, s) for n in NODES for s in (0, 1_000, 10**6)},
            [costs.samples(n, OP) for n in NODES])


@pytest.mark.parametrize("sample", HOSTILE, ids=[repr(h) for h in HOSTILE])
def test_hostile_samples_change_nothing(sample):
    costs = MeasuredCosts(CLUSTER, min_samples=2)
    for size in (1_000, 2_000, 3_000):
        costs.observe("tm_a", OP, size, 0.1 + 1e-5 * size)
    before = _snapshot(costs)
    assert costs.observe(*sample) is False
    assert _snapshot(costs) == before and costs.rejected == 1


@pytest.mark.parametrize("size", [math.nan, math.inf, -5, 10**300, "big", None])
def test_estimates_stay_finite_for_any_size(size):
    costs = MeasuredCosts(CLUSTER)
    for s in (1, 10**6):
        costs.observe("tm_a", OP, s, 1e-3 * (1 + s / 1e3))
    for explore in (True, False):
        for node in (*NODES, "elsewhere"):
            value = costs.estimate_s(node, OP, size, explore=explore)
            assert math.isfinite(value) and 0 < value <= costs.max_work_s


def test_the_caps_on_types_nodes_and_names_hold():
    costs = MeasuredCosts(CLUSTER, max_types=4, max_nodes_per_type=2, max_key_chars=20)
    for i in range(100):
        costs.observe("tm_a", f"type-{i}", 10, 0.1)
    assert costs.task_types() == [f"type-{i}" for i in range(96, 100)]
    for i in range(10):
        costs.observe(f"node-{i}", "type-99", 10, 0.1)
    assert costs.samples("node-9", "type-99") == 1 and costs.samples("tm_a", "type-99") == 0
    costs.observe("tm_a", "x" * 100_000, 10, 0.1)
    assert max(len(t) for t in costs.task_types()) < 60
    assert costs.samples("tm_a", "x" * 100_000) == 1   # a long name still finds its own fit


def test_timing_sample_is_the_shared_rule_for_reported_timings():
    good = {"app_id": OP, "input_size": 512, "service_ms": 40.0, "work_ms": 20.0}
    assert timing_sample(good) == (OP, 512, 0.02)
    for broken in ({**good, "input_size": math.nan}, {**good, "input_size": -1},
                   {**good, "app_id": 3}, {**good, "service_ms": math.nan, "work_ms": -1},
                   {"app_id": OP}, {**good, "input_size": "512"}):
        assert timing_sample(broken) is None, broken


# -- ObservedSpeed delegates ---------------------------------------------------------------
def test_observed_speed_delegates_to_measured_costs_with_factor_one():
    costs = MeasuredCosts(CLUSTER, min_samples=2)
    speeds = ObservedSpeed(CLUSTER, costs)
    for size in (1_000, 2_000):
        speeds.observe("tm_c", OP, size, 0.4)
    speeds.observe("tm_c", OP, 1_000, math.nan)      # refused, not counted
    assert speeds.samples("tm_c") == 2 and costs.samples("tm_c", OP) == 2
    assert speeds.estimate_s("tm_c", OP, 1_500) == pytest.approx(0.4)
    assert speeds.estimate_s("tm_a", OP, 1_500) == pytest.approx(0.4)   # not lowered
    assert speeds.factors() == {n: 1.0 for n in NODES}


# -- LDWP with task types it never saw ------------------------------------------------------
def test_hashed_encoding_keeps_built_in_rows_and_codes_other_types_stably():
    obs = Observation(Task("t", "video_synopsis", 10**6), (NodeState("a"), NodeState("b")), 0)
    catalog, hashed = node_rows(obs), node_rows(obs, task_encoding="hashed")
    assert hashed.shape == (2, node_row_size("hashed")) == (2, NODE_ROW_SIZE + TYPE_HASH_SIZE)
    np.testing.assert_array_equal(hashed[:, :NODE_ROW_SIZE], catalog)
    assert not hashed[:, NODE_ROW_SIZE:].any()
    # BLAKE2b, not Python's salted hash(): the same numbers in every process and run
    assert [round(v, 6) for v in type_code(OP)][:3] == [-0.268788, -0.616175, 0.479759]
    assert type_code("ocr") != type_code("resize")
    other = node_rows(observation(OP, 10), task_encoding="hashed")
    assert not other[:, :3].any() and np.allclose(other[0, NODE_ROW_SIZE:], type_code(OP))


@pytest.mark.parametrize("encoding", ["catalog", "hashed"])
def test_an_unseen_type_gets_finite_q_values_and_a_valid_decision(encoding, tmp_path):
    import torch
    from placement.ldwp.agent import LDWPPolicy, LDWPSettings
    from placement.ldwp.inference import NumpyLDWPPolicy
    torch.set_num_threads(1)
    costs = MeasuredCosts(CLUSTER, prior=CostModel(colocation=None))
    for size in (1_000, 5_000, 9_000):
        costs.observe("tm_b", "seen_op", size, 0.01 + 1e-6 * size)
    agent = LDWPPolicy(CLUSTER, costs, LDWPSettings(network="node_scoring", hidden_sizes=(16, 8),
                                                    task_encoding=encoding, seed=3))
    agent.training = False
    agent.save(tmp_path / "m.spmodel")
    policy = NumpyLDWPPolicy.from_file(tmp_path / "m.spmodel", CLUSTER, costs=costs)
    for task_type in ("never_seen_op", "seen_op", "video_synopsis", "ü" * 5_000):
        obs = observation(task_type, 4_096)
        state = policy.encode(obs)
        np.testing.assert_array_equal(state, agent.encode(obs))      # one encoding
        q = policy.q_values(state)
        assert np.all(np.isfinite(q))
        np.testing.assert_allclose(q, agent.q_values(state), rtol=1e-5, atol=1e-6)
        assert policy.decide(obs).node in NODES


def test_a_model_file_from_before_open_types_still_loads_as_catalog(tmp_path):
    from placement.ldwp.agent import LDWPPolicy, LDWPSettings
    from placement.ldwp.inference import NumpyLDWPPolicy
    from placement.ldwp.modelfile import ModelFileError, load_model, save_model
    agent = LDWPPolicy(CLUSTER, CostModel(colocation=None),
                       LDWPSettings(network="node_scoring", hidden_sizes=(8,)))
    agent.save(tmp_path / "new.spmodel")
    layers, metadata = load_model(tmp_path / "new.spmodel")
    old = {k: v for k, v in metadata.items() if k != "task_types"}
    old["settings"] = {k: v for k, v in metadata["settings"].items() if k != "task_encoding"}
    save_model(tmp_path / "old.spmodel", layers, old)
    policy = NumpyLDWPPolicy.from_file(tmp_path / "old.spmodel", CLUSTER)
    assert policy.task_encoding == "catalog"
    assert LDWPPolicy.from_file(tmp_path / "old.spmodel", CLUSTER).settings.task_encoding == \
        "catalog"
    assert policy.decide(observation(OP, 100)).node in NODES
    wrong = dict(old, settings=dict(old["settings"], task_encoding="hashed"))
    save_model(tmp_path / "wrong.spmodel", layers, wrong)   # says hashed, has catalog weights
    with pytest.raises(ModelFileError, match="columns"):
        NumpyLDWPPolicy.from_file(tmp_path / "wrong.spmodel", CLUSTER)


# -- the service's learner ------------------------------------------------------------------------
def _feedback(node: str, timings: list[dict], at_ms: int) -> dict:
    return {"node_id": node, "emitted_at_ms": at_ms, "cpu_util": 0.5, "gpu_util": 0.0,
            "host_mem_util": 0.5, "gpu_mem_util": 0.0, "uplink_bytes_per_s": 1e5,
            "downlink_bytes_per_s": 1e5, "queue_depth": 0, "in_flight": 1, "backpressure": 0.0,
            "completed": timings, "sequence": at_ms}


def test_the_learner_learns_unknown_types_and_skips_broken_timings(tmp_path):
    from placement.service.learner import OnlineLearner
    from placement.service.store import ModelStore
    learner = OnlineLearner(CLUSTER, ModelStore(tmp_path), {"hidden_sizes": (16, 8),
                                                            "learning_starts": 4},
                            min_records_first_version=20, publish_every=1_000, publish_prior=False)
    t0 = 1_700_000_000_000
    records = []
    for i in range(30):
        node = NODES[i % 3]
        work = 50.0 * TRUE_SPEED[node]
        timing = {"task_id": f"u{i}", "app_id": ("resize", "ocr")[i % 2], "input_size": 2_048,
                  "queue_ms": 5.0, "service_ms": work, "work_ms": work,
                  "finished_at_ms": t0 + 100 * i}
        records.append(_feedback(node, [timing], t0 + 100 * i + 1))
    broken = [{"task_id": "b1", "app_id": OP, "input_size": math.nan, "queue_ms": 1.0,
               "service_ms": 5.0, "finished_at_ms": t0},
              {"task_id": "b2", "app_id": OP, "input_size": -4, "queue_ms": 1.0,
               "service_ms": 5.0, "finished_at_ms": t0},
              {"task_id": "b3", "app_id": OP, "input_size": 4, "queue_ms": math.inf,
               "service_ms": 5.0, "finished_at_ms": t0},
              {"task_id": "b4", "app_id": OP, "input_size": 4, "queue_ms": 1.0,
               "service_ms": -5.0, "finished_at_ms": t0}]
    records.append(_feedback("tm_a", broken, t0 + 5_000))
    assert learner.take(records) == 30 and learner.timings_rejected == 4
    first = learner.examples._pending[0]
    # nothing learned yet: the default, over tm_b's spec speed
    assert first.estimates_s == {"tm_a": pytest.approx(0.1), "tm_b": pytest.approx(0.2),
                                 "tm_c": pytest.approx(0.1)}
    # 30 timings: too few for drain rates, so the due version is held (burst_check)
    assert learner.train_pending() == 30 and learner.store.latest() is None
    assert learner.versions_held == 1 and learner.agent.updates > 0
    assert learner.costs.estimate_s("tm_b", "ocr", 2_048) == pytest.approx(0.0125)
    assert all(s.speed_factor == 1.0 for s in learner.node_states())
    assert learner.publish() is None and learner.versions_held == 2
    assert learner.agent.settings.task_encoding == "hashed"
