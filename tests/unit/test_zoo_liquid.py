"""Liquid (placement.policies.liquid): scenario table where the defining decisions show (pack a
task type onto the nodes already serving it, prefer link headroom, within a slack of the best
regression estimate; the estimate learned from completions), each beside what mct picks; the
regression's bookkeeping (rejected samples, bounded memory, recovering a known model); a short
simulation; bad settings."""

from __future__ import annotations

import doctest
import math
import random

import numpy as np
import pytest

import placement.policies.liquid as liquid_module
from placement.policies.liquid import LiquidPolicy
from placement.policies.mct import MinimumCompletionTimePolicy
from workload.catalog import app_ids
from workload.estimates import CostModel
from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task

S = NodeState
TWIN = ClusterSpec((NodeSpec("tm_a", 4, 16), NodeSpec("tm_b", 4, 16)))
SLOW_B = ClusterSpec((NodeSpec("tm_a", 4, 16), NodeSpec("tm_b", 4, 16, cpu_speed=0.8)))
BUSY_A = (S("tm_a", backlog_s=100.0), S("tm_b"))  # sends a task to tm_b
IDLE = (S("tm_a"), S("tm_b"))


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def obs(task_id: str, states, app: str = "video_synopsis", size: int = 2_000_000) -> Observation:
    return Observation(Task(task_id, app, size), tuple(states), now_s=0.0)


def replay(policy: LiquidPolicy, history) -> None:
    """("decide", observation) places a task; ("done", task_id, factor) reports it finished
    after ``factor`` x its prior estimate on the node it was sent to."""
    placed: dict[str, tuple[str, Observation]] = {}
    for step in history:
        if step[0] == "decide":
            placed[step[1].task.task_id] = (policy.decide(step[1]).node, step[1])
        else:
            _, task_id, factor = step
            node, seen = placed[task_id]
            backlog = next(n.backlog_s for n in seen.nodes if n.node_id == node)
            policy.observe_completion(task_id, factor * policy.prior_s(seen.task, node, backlog),
                                      node)


SERVING_B = [("decide", obs("t0", BUSY_A))]  # tm_b now serves video_synopsis
SLOW_A_SEEN = [("decide", obs("t0", IDLE)), ("done", "t0", 4.0)]
FAST_B_SEEN = [step for i in range(6) for step in
               (("decide", obs(f"t{i}", BUSY_A)), ("done", f"t{i}", 0.5))]

# (settings, cluster, history, final observation, liquid's node, reason keywords, mct's node)
SCENARIOS = [
    pytest.param({}, TWIN, SERVING_B, obs("t1", (S("tm_a"), S("tm_b", backlog_s=0.1))),
                 "tm_b", ["serves video_synopsis (1 in flight, span stays 1)", "2 of 2 fit"],
                 "tm_a", id="packs-the-type-onto-the-node-already-serving-it"),
    pytest.param({}, TWIN, SERVING_B,
                 obs("t1", (S("tm_a"), S("tm_b", backlog_s=0.1)), app="face_recognition"),
                 "tm_a", ["new node for face_recognition (span 0 -> 1)"],
                 "tm_a", id="another-type-is-not-drawn-to-that-node"),
    pytest.param({}, TWIN, SERVING_B, obs("t1", (S("tm_a"), S("tm_b", backlog_s=2.0))),
                 "tm_a", ["1 of 2 fit", "within 15% of best tm_a"],
                 "tm_a", id="slack-bounds-what-compactness-may-cost"),
    pytest.param({"slack": 0.5}, TWIN, SERVING_B,
                 obs("t1", (S("tm_a"), S("tm_b", backlog_s=0.6))),
                 "tm_b", ["within 50% of best tm_a", "serves video_synopsis"],
                 "tm_a", id="wider-slack-packs-further"),
    pytest.param({}, TWIN, [], obs("t1", (S("tm_a", downlink_util=0.9),
                                          S("tm_b", downlink_util=0.1))),
                 "tm_b", ["link headroom 0.90", "new node"],
                 "tm_a", id="most-link-headroom-among-fitting-nodes"),
    pytest.param({"slack": 0.3}, SLOW_B, [], obs("t1", (S("tm_a", downlink_util=0.15),
                                                       S("tm_b", downlink_util=0.12))),
                 "tm_a", ["link headroom 0.80"],
                 "tm_a", id="link-steps-let-the-estimate-decide-between-near-equal-links"),
    pytest.param({"slack": 0.3, "link_step": 0.0}, SLOW_B, [],
                 obs("t1", (S("tm_a", downlink_util=0.15), S("tm_b", downlink_util=0.12))),
                 "tm_b", ["link headroom 0.88"],
                 "tm_a", id="exact-link-comparison"),
    pytest.param({}, SLOW_B, SLOW_A_SEEN, obs("t1", IDLE),
                 "tm_b", ["1 of 2 fit", "model w=(1.00, 1.00) from 0.0 samples"],
                 "tm_a", id="learned-that-the-spec-fast-node-is-slow"),
    pytest.param({}, SLOW_B, FAST_B_SEEN, obs("t9", IDLE),
                 "tm_b", ["2 of 2 fit", "model w=(0.70, 1.00) from 5.9 samples", "next tm_a"],
                 "tm_a", id="learned-that-the-spec-slow-node-is-fast"),
    pytest.param({}, TWIN, SLOW_A_SEEN, obs("t1", IDLE),
                 "tm_a", ["2 of 2 fit", "model w=(1.60, 1.00) from 1.0 samples"],
                 "tm_a", id="identical-nodes-share-the-lesson"),
    pytest.param({"pool_identical_nodes": False}, TWIN, SLOW_A_SEEN, obs("t1", IDLE),
                 "tm_b", ["1 of 2 fit", "model w=(1.00, 1.00)"],
                 "tm_a", id="unpooled-nodes-learn-apart"),
]


@pytest.mark.parametrize("settings, spec, history, final, expected, keywords, mct_node",
                         SCENARIOS)
def test_scenario(settings, spec, history, final, expected, keywords, mct_node, costs):
    policy = LiquidPolicy(spec, costs, **settings)
    replay(policy, history)
    decision = policy.decide(final)
    assert decision.node == expected, decision.reason
    for keyword in keywords:
        assert keyword in decision.reason, decision.reason
    assert set(decision.scores) == set(final.node_ids)
    # the contrast: the simpler minimum-completion-time rule on the same observation
    assert MinimumCompletionTimePolicy(spec, costs).decide(final).node == mct_node


def test_before_any_sample_the_estimates_are_mct(costs):
    spec = ClusterSpec((NodeSpec("c", 8, 32), NodeSpec("g", 6, 32, gpus=(GpuSpec("k80", 12),)),
                        NodeSpec("v", 6, 32, gpus=(GpuSpec("v100", 16), GpuSpec("p4", 8)))))
    rng = random.Random(3)
    ours, mct = LiquidPolicy(spec, costs), MinimumCompletionTimePolicy(spec, costs)
    for i in range(40):
        states = tuple(S(n, backlog_s=rng.random() * 50, downlink_util=rng.random())
                       for n in spec.node_ids)
        o = Observation(Task(f"t{i}", rng.choice(app_ids()), rng.randint(1, 10**7)), states, 0.0)
        assert ours.decide(o).scores == pytest.approx(mct.decide(o).scores, rel=1e-12)


def test_regression_recovers_a_known_latency_model(costs):
    # The truth here: latency = 1.3 x compute + 2.5 x ready. The regression sees only features
    # and latencies, and must find both weights.
    spec = ClusterSpec((NodeSpec("solo", 4, 16),))
    policy = LiquidPolicy(spec, costs, prior_strength=0.5, forgetting=1.0)
    rng = random.Random(5)
    for i in range(200):
        backlog = rng.random() * 10.0
        o = obs(f"t{i}", (S("solo", backlog_s=backlog),), size=rng.randint(10**5, 5 * 10**6))
        policy.decide(o)
        compute = policy.prior_s(o.task, "solo")
        policy.observe_completion(f"t{i}", 1.3 * compute + 2.5 * backlog / 4, "solo")
    assert policy.weights("video_synopsis", "solo") == pytest.approx([1.3, 2.5], abs=0.03)
    assert policy.samples == 200 and policy.rejected == 0


@pytest.mark.parametrize("latency", [math.nan, math.inf, -1.0, 0.0, "slow", None, 1e9, 1e-9])
def test_non_finite_or_implausible_samples_are_rejected(latency, costs):
    policy = LiquidPolicy(TWIN, costs)
    policy.decide(obs("t0", IDLE))
    policy.observe_completion("t0", latency, "tm_a")
    assert policy.rejected == 1 and policy.samples == 0
    assert list(policy.weights("video_synopsis", "tm_a")) == [1.0, 1.0]
    assert policy.serving("tm_a", "video_synopsis") == 0  # but the task is no longer in flight


def test_unknown_or_moved_tasks_teach_nothing(costs):
    policy = LiquidPolicy(TWIN, costs)
    policy.observe_completion("never-seen", 1.0, "tm_a")
    policy.decide(obs("t0", IDLE))                              # to tm_a
    policy.observe_completion("t0", policy.prior_s(obs("t0", IDLE).task, "tm_a"), "tm_b")
    assert policy.rejected == 2 and policy.samples == 0
    policy.decide(obs("t1", IDLE))
    policy.observe_completion("t1", 2 * policy.prior_s(obs("t1", IDLE).task, "tm_a"), "tm_a")
    assert policy.samples == 1 and policy.weights("video_synopsis", "tm_a")[0] > 1.0


def test_pending_tasks_are_bounded(costs):
    policy = LiquidPolicy(TWIN, costs, max_pending=5)
    for i in range(20):
        policy.decide(obs(f"t{i}", IDLE))
    # all packed onto tm_a (it serves the type from the first task on); only 5 are remembered
    assert policy.serving("tm_a", "video_synopsis") == 5
    assert policy.serving("tm_b", "video_synopsis") == 0
    policy.observe_completion("t0", 1.0, "tm_a")                # forgotten long ago
    assert policy.rejected == 1 and policy.samples == 0
    policy.observe_completion("t19", policy.prior_s(obs("t19", IDLE).task, "tm_a"), "tm_a")
    assert policy.samples == 1 and policy.serving("tm_a", "video_synopsis") == 4


def test_unknown_nodes_are_left_out(costs):
    policy = LiquidPolicy(TWIN, costs)
    decision = policy.decide(obs("t0", (S("tm_new"), S("tm_b"))))
    assert decision.node == "tm_b" and "left out tm_new (no node spec)" in decision.reason
    with pytest.raises(KeyError, match="set_cluster"):
        policy.decide(obs("t1", (S("tm_new"),)))


def test_random_observations_and_completions_are_deterministic(costs):
    spec = ClusterSpec((NodeSpec("a", 6, 32, gpus=(GpuSpec("p4", 8),) * 2),
                        NodeSpec("b", 6, 16, gpus=(GpuSpec("k80", 12),)), NodeSpec("c", 4, 8),
                        NodeSpec("d", 8, 64, gpus=(GpuSpec("v100", 16), GpuSpec("t4", 16)))))
    rng = random.Random(11)
    runs = []
    for _ in range(2):
        rng.seed(11)
        policy, log = LiquidPolicy(spec, costs, seed=4, max_pending=50), []
        for i in range(300):
            ids = list(spec.node_ids)
            rng.shuffle(ids)
            ids = ids[:rng.randint(1, 4)]
            states = tuple(S(n, *(rng.random() for _ in range(6)), queue_depth=rng.randint(0, 9),
                             backlog_s=rng.random() * 30) for n in ids)
            o = Observation(Task(f"t{i}", rng.choice(app_ids()), rng.randint(1, 5 * 10**7)),
                            states, 0.0)
            d = policy.decide(o)
            assert d.node in o.node_ids and d.reason and set(d.scores) == set(o.node_ids)
            log.append(d)
            if rng.random() < 0.7:  # a completion (sometimes a garbled one) of a recent task
                done = rng.randint(max(0, i - 20), i)
                policy.observe_completion(f"t{done}", rng.choice([rng.random() * 60, math.nan]),
                                          log[done].node)
        runs.append((log, policy.samples, policy.rejected))
    assert runs[0] == runs[1]
    assert runs[0][1] > 40 and runs[0][2] > 40  # it learned, and refused samples, on the way


def test_short_simulation_finishes_and_repeats(costs):
    from interference.schedulers import make_node_scheduler
    from simulator import Simulator
    from simulator.scenarios import paper_cluster, paper_costs, saturated_workload
    paper, cluster = paper_costs(), paper_cluster()
    tasks = saturated_workload(120, seed=3)
    results = []
    for _ in range(2):
        policy = LiquidPolicy(cluster, paper, seed=3)
        m = Simulator(paper).run(policy, make_node_scheduler("fcfs", paper, seed=3), cluster,
                                 tasks, seed=3).metrics
        results.append(m.as_dict())
        assert m.completed == len(tasks) and policy.samples > 30
    assert results[0] == results[1]


@pytest.mark.parametrize("settings, message", [
    ({"slack": -0.1}, "slack"), ({"slack": math.inf}, "slack"), ({"slack": "x"}, "slack"),
    ({"prior_strength": 0}, "prior_strength"), ({"prior_strength": math.nan}, "prior_strength"),
    ({"forgetting": 0.0}, "forgetting"), ({"forgetting": 1.5}, "forgetting"),
    ({"plausible_ratio": 1.0}, "plausible_ratio"), ({"plausible_ratio": math.inf},
                                                    "plausible_ratio"),
    ({"link_step": -0.1}, "link_step"), ({"link_step": 2.0}, "link_step"),
    ({"max_pending": 0}, "max_pending"), ({"max_pending": 2.5}, "max_pending"),
    ({"pool_identical_nodes": "yes"}, "pool_identical_nodes"),
])
def test_bad_settings_raise(settings, message):
    with pytest.raises(ValueError, match=message):
        LiquidPolicy(TWIN, **settings)


def test_docstring_example_runs():
    result = doctest.testmod(liquid_module)
    assert result.attempted >= 1 and result.failed == 0
    assert np.array_equal(liquid_module.PRIOR_WEIGHTS, [1.0, 1.0])
