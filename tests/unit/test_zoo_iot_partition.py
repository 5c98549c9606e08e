"""IoT adaptive partitioning (placement.policies.iot_partition): a scenario table on hand-made
weak, unequal nodes where its defining decisions show beside Pipe-Torch's on the same
observation (end-to-end latency: no split only to shorten the slowest step, so fewer cuts; a
node whose free memory cannot hold a segment is refused, a task no node can hold is split, a
task nothing can hold goes whole to the most free memory); the memory bound from observed
utilisation; a short simulation; bad settings."""

from __future__ import annotations

import doctest

import pytest

import placement.policies.iot_partition as module
from interference.schedulers import make_node_scheduler
from placement.policies import make_policy
from placement.policies.iot_partition import IoTPartitionPolicy
from placement.policies.pipe_torch import PipeTorchPolicy
from simulator import SimulationConfig, Simulator, paper_cluster, paper_workload
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task

FACE = Task("t", "face_recognition", 2_000_000)   # 5 stages of 316 MB each (context + frames)
STAGE_MB = 300 + 8.0 * 2.0

EQUAL_FAST = ClusterSpec((NodeSpec("a", 1, 16), NodeSpec("b", 1, 16)))
FAST_BEHIND_20 = ClusterSpec((NodeSpec("a", 1, 16),
                              NodeSpec("f", 1, 16, gpus=(GpuSpec("v100", 16),),
                                       downlink_mbps=20)))
# small: a fast core but 1 GB (0.9 x 1024 = 922 MB usable: two stages); big: slow, 16 GB
SMALL_FAST = ClusterSpec((NodeSpec("small", 1, 1, cpu_speed=4),
                          NodeSpec("big", 1, 16, cpu_speed=0.5, downlink_mbps=50)))
# two weak devices of 1.2 GB (1106 MB usable: three stages each), the task needs five
TWO_WEAK = ClusterSpec((NodeSpec("s1", 1, 1.2), NodeSpec("s2", 1, 1.2)))
TOO_SMALL = ClusterSpec((NodeSpec("s1", 1, 0.5), NodeSpec("s2", 1, 0.6)))

# (cluster, IoT's home, IoT's segments as node lists in stage order, Pipe-Torch's segments,
#  words in IoT's reason)
SCENARIOS = [
    pytest.param(EQUAL_FAST, "a", ["a"], ["a", "b"], ["latency 0.373 s over 1 segment"],
                 id="equal-nodes-fast-link-no-split-where-pipe-torch-splits"),
    pytest.param(FAST_BEHIND_20, "a", ["a"], ["a", "f"], ["over 1 segment"],
                 id="fast-node-behind-usable-link-the-cut-does-not-pay-back-in-latency"),
    pytest.param(SMALL_FAST, "small", ["small", "big"], ["small"],
                 ["cannot hold the whole task (1580 MB): small (922 MB free)"],
                 id="small-fast-node-refused-the-whole-task-pipe-torch-overfills-it"),
    pytest.param(TWO_WEAK, "s1", ["s1", "s2"], ["s1", "s2"],
                 ["cannot hold the whole task", "s1 (1106 MB free), s2 (1106 MB free)"],
                 id="no-node-holds-the-task-split-over-weak-devices"),
    pytest.param(TOO_SMALL, "s2", ["s2"], ["s1", "s2"],
                 ["no partition of face_recognition (1580 MB", "most free memory (553 MB)"],
                 id="nothing-fits-whole-on-the-most-free-memory"),
]


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def _segments(decision) -> list[str]:
    """The node of each run of consecutive stages (the partition's segments)."""
    if decision.stage_nodes is None:
        return [decision.node]
    nodes = [decision.stage_nodes[s.name] for s in APPLICATIONS[FACE.app_id].stages]
    return [n for i, n in enumerate(nodes) if i == 0 or nodes[i - 1] != n]


@pytest.mark.parametrize("cluster, home, segments, pipe_torch, words", SCENARIOS)
def test_defining_decisions_beside_pipe_torch(costs, cluster, home, segments, pipe_torch,
                                              words):
    obs = Observation(FACE, tuple(NodeState(n.node_id) for n in cluster.nodes), 0.0)
    decision = IoTPartitionPolicy(cluster, costs).decide(obs)
    assert decision.node == home and _segments(decision) == segments
    for word in words:
        assert word in decision.reason
    assert _segments(PipeTorchPolicy(cluster, costs).decide(obs)) == pipe_torch


@pytest.mark.parametrize("cluster", [SMALL_FAST, TWO_WEAK], ids=["small-fast", "two-weak"])
def test_every_segment_fits_its_node(costs, cluster):
    policy = IoTPartitionPolicy(cluster, costs)
    states = tuple(NodeState(n.node_id) for n in cluster.nodes)
    decision = policy.decide(Observation(FACE, states, 0.0))
    for state in states:
        held = sum(STAGE_MB for n in decision.stage_nodes.values() if n == state.node_id)
        assert held <= policy.free_memory_mb(state)


def test_the_memory_bound_follows_observed_utilisation(costs):
    policy = IoTPartitionPolicy(EQUAL_FAST, costs)
    busy = NodeState("a", host_mem_util=0.95)
    assert policy.free_memory_mb(busy) == pytest.approx(0.9 * 16 * 1024 * 0.05)
    decision = policy.decide(Observation(FACE, (busy, NodeState("b")), 0.0))
    assert decision.node == "b" and decision.stage_nodes is None     # a can hold 2 stages
    gpu = ClusterSpec((NodeSpec("g", 1, 1, gpus=(GpuSpec("p4", 8),)),))
    assert IoTPartitionPolicy(gpu, costs).free_memory_mb(
        NodeState("g", gpu_mem_util=0.5)) == pytest.approx(0.9 * (1024 + 4 * 1024))


def test_a_short_simulation_completes_every_task_deterministically():
    costs = CostModel()
    cluster = paper_cluster(nodes=3)
    tasks = paper_workload(30, tasks=30, seed=2)

    def run():
        return Simulator(costs, SimulationConfig()).run(
            make_policy("iot_partition", cluster, costs), make_node_scheduler("heft", costs),
            cluster, tasks, seed=2)

    first, again = run(), run()
    assert first.metrics.completed == 30 and first.events == again.events


@pytest.mark.parametrize("settings, message", [
    ({"usable_memory_fraction": 0.0}, "usable_memory_fraction"),
    ({"usable_memory_fraction": 1.5}, "usable_memory_fraction"),
    ({"usable_memory_fraction": float("nan")}, "usable_memory_fraction"),
    ({"usable_memory_fraction": True}, "usable_memory_fraction"),
    ({"max_segments": 0}, "max_segments"), ({"min_split_gain": 2}, "min_split_gain"),
])
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        IoTPartitionPolicy(EQUAL_FAST, **settings)


def test_docstring_example_runs():
    assert doctest.testmod(module).failed == 0
