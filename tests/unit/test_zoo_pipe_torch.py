"""Pipe-Torch (placement.policies.pipe_torch): a scenario table on hand-made two-node clusters
where the defining decision shows (a fast node behind a slow link gets no cut before it, the
same node behind a usable link gets the later stages; two equal nodes joined by a fast link
split a long chain in two; a slow link, a loaded node or max_segments 1 keep the task whole);
the dynamic program against brute force; a short simulation; bad settings."""

from __future__ import annotations

import doctest
import itertools

import pytest

import placement.policies.pipe_torch as module
from interference.schedulers import make_node_scheduler
from placement.policies import make_policy
from placement.policies.pipe_torch import ChainEstimate, PipeTorchPolicy, best_partition
from simulator import SimulationConfig, Simulator, paper_cluster, paper_workload
from workload.estimates import CostModel
from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task

FACE = Task("t", "face_recognition", 2_000_000)


def _fast_behind(downlink_mbps: float) -> ClusterSpec:
    """``a``: one plain core; ``f``: a V100 node (far faster) behind a downlink of that rate."""
    return ClusterSpec((NodeSpec("a", 1, 16),
                        NodeSpec("f", 1, 16, gpus=(GpuSpec("v100", 16),),
                                 downlink_mbps=downlink_mbps)))


EQUAL_FAST = ClusterSpec((NodeSpec("a", 1, 16), NodeSpec("b", 1, 16)))
EQUAL_SLOW = ClusterSpec((NodeSpec("a", 1, 16, uplink_mbps=10, downlink_mbps=10),
                          NodeSpec("b", 1, 16, uplink_mbps=10, downlink_mbps=10)))
LATER = {"face_encoding": "f", "face_distance": "f", "face_compare": "f"}

# (cluster, node states (None: idle), settings, expected home, expected stage_nodes: None for
#  the whole task, else {stage: node} for the stages not on home)
SCENARIOS = [
    pytest.param(_fast_behind(1), None, {}, "a", None, id="fast-node-behind-slow-link-no-cut"),
    pytest.param(_fast_behind(20), None, {}, "a", LATER,
                 id="fast-node-behind-usable-link-takes-the-later-stages"),
    pytest.param(_fast_behind(1000), None, {}, "f", None, id="fast-node-on-fast-link-whole"),
    pytest.param(EQUAL_FAST, None, {}, "a",
                 {"face_landmarks": "b", "face_encoding": "b", "face_distance": "b",
                  "face_compare": "b"}, id="equal-nodes-fast-link-two-way-split"),
    pytest.param(EQUAL_SLOW, None, {}, "a", None, id="equal-nodes-slow-link-stays-whole"),
    pytest.param(EQUAL_FAST, (NodeState("a", backlog_s=5.0), NodeState("b")), {}, "b", None,
                 id="loaded-node-is-a-slow-step-whole-elsewhere"),
    pytest.param(EQUAL_FAST, None, {"max_segments": 1}, "a", None, id="max-segments-1-whole"),
]


@pytest.fixture(scope="module")
def costs():
    return CostModel()


@pytest.mark.parametrize("cluster, states, settings, home, split", SCENARIOS)
def test_defining_decisions(costs, cluster, states, settings, home, split):
    states = states or tuple(NodeState(n.node_id) for n in cluster.nodes)
    decision = PipeTorchPolicy(cluster, costs, **settings).decide(Observation(FACE, states, 0.0))
    assert decision.node == home
    if split is None:
        assert decision.stage_nodes is None
    else:
        away = {s: n for s, n in decision.stage_nodes.items() if n != home}
        assert away == split
    assert decision.reason.startswith("pipe-torch: bottleneck")
    assert set(decision.scores) == set(cluster.node_ids)


def test_the_split_is_explained_and_the_whole_option_named(costs):
    obs = Observation(FACE, (NodeState("a"), NodeState("b")), 0.0)
    reason = PipeTorchPolicy(EQUAL_FAST, costs).decide(obs).reason
    assert "2 segment(s)" in reason and "face_detection@a" in reason
    assert "face_landmarks..face_compare@b" in reason and "(whole on a:" in reason


def _brute_force(chain, nodes, max_segments):
    n, best = len(chain.stages), None
    for k in range(1, max_segments + 1):
        for cuts in itertools.combinations(range(1, n), k - 1):
            bounds = (0, *cuts, n)
            for order in itertools.permutations(nodes, k):
                segs = [chain.segment(order[i - 1] if i else None, order[i], bounds[i],
                                      bounds[i + 1]) for i in range(k)]
                value = max(s.time_s for s in segs)
                best = value if best is None else min(best, value)
    return best


@pytest.mark.parametrize("app", ["face_recognition", "intrusion_detection", "video_synopsis"])
@pytest.mark.parametrize("max_segments", [1, 2, 3])
def test_the_dynamic_program_finds_the_brute_force_optimum(costs, app, max_segments):
    cluster = ClusterSpec((NodeSpec("a", 2, 16, uplink_mbps=300),
                           NodeSpec("b", 4, 16, cpu_speed=1.5, downlink_mbps=200),
                           NodeSpec("c", 1, 16, gpus=(GpuSpec("p4", 8),), downlink_mbps=500)))
    states = {"a": NodeState("a", backlog_s=0.2), "b": NodeState("b"),
              "c": NodeState("c", speed_factor=1.3)}
    policy = PipeTorchPolicy(cluster, costs)
    chain = ChainEstimate(Task("t", app, 3_000_000), policy, states, policy._units,
                          policy.fractions)
    found = best_partition(chain, ["a", "b", "c"], max_segments, max)
    assert found.value == pytest.approx(_brute_force(chain, "abc", max_segments), rel=1e-12)
    assert len({s.node for s in found.segments}) == len(found.segments)  # a node per segment


def test_a_short_simulation_splits_and_completes_every_task_deterministically():
    costs = CostModel()
    cluster = paper_cluster(nodes=3)
    tasks = paper_workload(30, tasks=30, seed=2)

    def run():
        return Simulator(costs, SimulationConfig()).run(
            make_policy("pipe_torch", cluster, costs), make_node_scheduler("heft", costs),
            cluster, tasks, seed=2)

    first, again = run(), run()
    assert first.metrics.completed == 30 and first.events == again.events
    assert any(d.stage_nodes for _, d in first.decisions)


@pytest.mark.parametrize("settings, message", [
    ({"max_segments": 0}, "max_segments"), ({"max_segments": 2.0}, "max_segments"),
    ({"candidate_nodes": 0}, "candidate_nodes"), ({"candidate_nodes": True}, "candidate_nodes"),
    ({"min_split_gain": 1.0}, "min_split_gain"), ({"min_split_gain": -0.1}, "min_split_gain"),
    ({"min_split_gain": float("nan")}, "min_split_gain"),
])
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        PipeTorchPolicy(EQUAL_FAST, **settings)


def test_bad_node_states_and_unknown_apps_are_refused(costs):
    policy = PipeTorchPolicy(EQUAL_FAST, costs)
    with pytest.raises(ValueError, match="backlog_s"):
        policy.decide(Observation(FACE, (NodeState("a", backlog_s=-1.0), NodeState("b")), 0.0))
    with pytest.raises(KeyError, match="unknown application"):
        policy.decide(Observation(Task("t", "nope", 1), (NodeState("a"),), 0.0))


def test_docstring_example_runs():
    assert doctest.testmod(module).failed == 0
