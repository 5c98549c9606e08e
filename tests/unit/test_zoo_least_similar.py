"""Least-similar node placement (``least_similar``): scenario rows where the application mix
decides among the nodes within the slack, each beside what ``mct`` picks; the remembered mix
(completions, queue-depth bound, size bound); random observations; a simulator run."""

from __future__ import annotations

import doctest
import math
import random

import pytest

import placement.policies.least_similar as least_similar_module
from interference.schedulers.mystic import cosine
from placement.policies import make_policy
from placement.policies.least_similar import LeastSimilarPolicy
from workload.catalog import app_ids
from workload.estimates import CostModel
from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task

SIZE = 20_000_000  # face_recognition: 0.35 s on a p4 node, 3.67 s on the 2-core node


@pytest.fixture(scope="module")
def costs() -> CostModel:
    return CostModel()


THREE = ClusterSpec((NodeSpec("tm_a", 6, 32, gpus=(GpuSpec("p4", 8),)),
                     NodeSpec("tm_b", 6, 32, gpus=(GpuSpec("p4", 8),)),
                     NodeSpec("tm_c", 2, 8)))
S = NodeState


def observe(*states: NodeState, app: str = "face_recognition", task: str = "t") -> Observation:
    return Observation(Task(task, app, SIZE), tuple(states), now_s=0.0)


def with_history(policy: LeastSimilarPolicy, history: dict[str, list[str]]) -> None:
    for node, apps in history.items():
        for i, app in enumerate(apps):
            policy.note_sent(Task(f"h-{node}-{i}", app, SIZE), node)


FACE, INTRUSION, SYNOPSIS = "face_recognition", "intrusion_detection", "video_synopsis"
# App profiles' cosines: face~intrusion 0.761, face~synopsis 0.866, intrusion~synopsis 0.943.
# Rows: settings, history {node: apps sent}, observation, expected node, reason keywords,
#       what mct picks on the same observation (must differ).
SCENARIOS = [
    pytest.param({}, {"tm_a": [FACE, FACE], "tm_b": [INTRUSION, INTRUSION]},
                 observe(S("tm_a", queue_depth=2), S("tm_b", queue_depth=2, backlog_s=0.35),
                         S("tm_c")),
                 "tm_b", ["least similar: tm_b cosine 0.761", "next tm_a 1.000",
                          "1 of 3 nodes outside the slack"],
                 "tm_a", id="least-similar-mix-within-the-slack"),
    pytest.param({"slack": 100.0}, {"tm_a": [FACE, FACE], "tm_b": [INTRUSION, INTRUSION]},
                 observe(S("tm_a", queue_depth=2), S("tm_b", queue_depth=2, backlog_s=0.35),
                         S("tm_c")),
                 "tm_c", ["tm_c cosine 0.000", "0 of 3 nodes outside"],
                 "tm_a", id="a-huge-slack-lets-the-slow-empty-node-win"),
    pytest.param({}, {"tm_a": [FACE, FACE], "tm_b": [SYNOPSIS, SYNOPSIS]},
                 observe(S("tm_a", queue_depth=2, backlog_s=1.0), S("tm_b", queue_depth=2),
                         S("tm_c"), app=INTRUSION),
                 "tm_a", ["tm_a cosine 0.761", "next tm_b 0.943"],
                 "tm_b", id="intrusion-avoids-the-synopsis-node"),
    pytest.param({}, {"tm_a": [FACE, FACE, FACE], "tm_b": [INTRUSION]},
                 # tm_a's tasks finished unreported: the router counts none there now
                 observe(S("tm_b", queue_depth=1), S("tm_a", queue_depth=0), S("tm_c")),
                 "tm_a", ["tm_a cosine 0.000", "next tm_b 0.761"],
                 "tm_b", id="mix-is-bounded-by-the-queue-depth"),
]


@pytest.mark.parametrize("settings, history, obs, expected, keywords, mct_node", SCENARIOS)
def test_scenarios(costs, settings, history, obs, expected, keywords, mct_node):
    policy = LeastSimilarPolicy(THREE, costs, **settings)
    with_history(policy, history)
    decision = policy.decide(obs)
    assert decision.node == expected, decision.reason
    for keyword in keywords:
        assert keyword in decision.reason, decision.reason
    assert decision.node in decision.scores and set(decision.scores) <= set(obs.node_ids)
    mct = make_policy("mct", THREE, costs=costs).decide(obs)
    assert mct.node == mct_node != decision.node


def test_slack_zero_is_mct_with_similarity_as_tie_breaker(costs):
    obs = observe(S("tm_a", queue_depth=2), S("tm_b", queue_depth=2, backlog_s=0.35), S("tm_c"))
    policy = LeastSimilarPolicy(THREE, costs, slack=0.0)
    with_history(policy, {"tm_a": [FACE, FACE], "tm_b": [INTRUSION, INTRUSION]})
    assert policy.decide(obs).node == make_policy("mct", THREE, costs=costs).decide(obs).node


def test_a_sequence_mixes_applications_over_equal_nodes(costs):
    """mct sends every task to the first of two idle equal nodes; this policy puts each task
    beside the application least like it. (Cosine ignores how many tasks a node runs, so two
    nodes with the same mix tie, and the tie goes to the earlier completion, then order.)"""
    two = ClusterSpec(THREE.nodes[:2])
    policy, mct = LeastSimilarPolicy(two, costs), make_policy("mct", two, costs=costs)
    chosen, depth = [], {"tm_a": 0, "tm_b": 0}
    for i, app in enumerate([FACE, FACE, INTRUSION, INTRUSION, SYNOPSIS]):
        obs = observe(S("tm_a", queue_depth=depth["tm_a"]), S("tm_b", queue_depth=depth["tm_b"]),
                      app=app, task=f"t{i}")
        chosen.append(policy.decide(obs).node)
        depth[chosen[-1]] += 1
        assert mct.decide(obs).node == "tm_a"
    # face -> a (tie); face -> b (empty, 0 < 1); both run face: intrusion ties -> a; the next
    # intrusion goes to b (face only, 0.761 < a's face+intrusion mix); synopsis: equal mixes
    assert chosen == ["tm_a", "tm_b", "tm_a", "tm_b", "tm_a"]
    assert policy.mix == {"tm_a": {FACE: 1.0, INTRUSION: 1.0, SYNOPSIS: 1.0},
                          "tm_b": {FACE: 1.0, INTRUSION: 1.0}}


def test_completions_retries_and_the_size_bound(costs):
    policy = LeastSimilarPolicy(THREE, costs, max_tasks=2)
    policy.note_sent(Task("x", FACE, SIZE), "tm_a")
    policy.note_sent(Task("x", FACE, SIZE), "tm_b")     # sent again: it left tm_a
    assert policy.mix == {"tm_a": {}, "tm_b": {FACE: 1.0}}
    policy.observe_completion("x", 3.0, "tm_b")
    policy.observe_completion("never-sent", 3.0, "tm_b")  # unknown: ignored
    assert policy.mix["tm_b"] == {}
    for i in range(3):
        policy.note_sent(Task(f"y{i}", INTRUSION, SIZE), "tm_c")
    assert policy.mix["tm_c"] == {INTRUSION: 2.0}        # the oldest was forgotten
    assert policy.node_vector("tm_c") == pytest.approx(
        [2 * v for v in policy.profile(INTRUSION)])
    assert cosine(policy.profile(FACE), policy.node_vector("tm_a")) == 0.0


def test_profiles_weigh_stages_by_time_and_count_cpu_only_work(costs):
    policy = LeastSimilarPolicy(THREE, costs)
    face, intrusion = policy.profile(FACE), policy.profile(INTRUSION)
    assert len(face) == 8 and face[-1] == 0.0          # face recognition: no CPU-only stage
    assert 0.4 < intrusion[-1] < 0.7                   # tracking is half of intrusion's time
    # face_detection and face_encoding (SM 0.9) dominate face recognition's time
    assert face[0] == pytest.approx(0.846, abs=1e-3)


def test_unknown_nodes_are_left_out(costs):
    policy = LeastSimilarPolicy(THREE, costs)
    decision = policy.decide(observe(S("tm_new"), S("tm_b")))
    assert decision.node == "tm_b" and "left out tm_new (no node spec)" in decision.reason
    with pytest.raises(KeyError, match="set_cluster"):
        policy.decide(observe(S("tm_new")))
    with pytest.raises(ValueError, match="no nodes"):
        policy.decide(Observation(Task("t", FACE, SIZE), (), 0.0))


def test_random_observations_give_observed_nodes_deterministically(costs):
    rng = random.Random(7)
    policy, again = LeastSimilarPolicy(THREE, costs, seed=1), LeastSimilarPolicy(THREE, costs,
                                                                                seed=1)
    spread = set()
    for i in range(200):
        ids = list(THREE.node_ids)
        rng.shuffle(ids)
        ids = ids[:rng.randint(1, 3)]
        states = tuple(S(n, *(rng.random() for _ in range(6)), queue_depth=rng.randint(0, 6),
                         backlog_s=rng.random() * 5) for n in ids)
        obs = Observation(Task(f"t{i}", rng.choice(app_ids()), rng.randint(1, 50_000_000)),
                          states, 0.0)
        decision = policy.decide(obs)
        assert decision == again.decide(obs)
        assert decision.node in obs.node_ids and decision.reason.strip()
        assert decision.node in decision.scores and set(decision.scores) <= set(obs.node_ids)
        assert all(0.0 <= v <= 1.0 + 1e-9 for v in decision.scores.values())
        spread.add(decision.node)
    assert spread == set(THREE.node_ids)


def test_simulator_run_finishes_repeats_and_empties_the_mix():
    from interference.schedulers import make_node_scheduler
    from simulator import Simulator
    from simulator.scenarios import paper_cluster, paper_costs, saturated_workload
    paper, cluster = paper_costs(), paper_cluster()
    tasks = saturated_workload(120, seed=4)
    runs = []
    for _ in range(2):
        policy = LeastSimilarPolicy(cluster, paper, seed=4)
        result = Simulator(paper).run(policy, make_node_scheduler("fcfs", paper), cluster,
                                      tasks, seed=4)
        runs.append(result.metrics)
        assert sum(sum(m.values()) for m in policy.mix.values()) == 0  # every completion heard
        assert any("least similar" in d.reason for _, d in result.decisions)
    assert runs[0].completed == len(tasks) and runs[0].policy == "least_similar"
    assert len({n for n, c in runs[0].per_node_tasks.items() if c}) >= 8  # spread out
    assert runs[0] == runs[1]


@pytest.mark.parametrize("settings, message", [
    ({"slack": -0.1}, "slack"),
    ({"slack": math.inf}, "slack"),
    ({"profile_pixels": 0}, "profile_pixels"),
    ({"profile_pixels": 1.5}, "profile_pixels"),
    ({"max_tasks": 0}, "max_tasks"),
])
def test_bad_settings_raise(settings, message):
    with pytest.raises(ValueError, match=message):
        LeastSimilarPolicy(THREE, **settings)


def test_name_and_doctest():
    assert LeastSimilarPolicy.name == "least_similar"
    result = doctest.testmod(least_similar_module)
    assert result.attempted >= 1 and result.failed == 0
