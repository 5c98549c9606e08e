"""The core model's invariants: the paper's observation layout and clear refusals."""

from __future__ import annotations

import pytest

from workload.catalog import APPLICATIONS, STAGE_TYPES, AppDef, StageDef, app_ids
from workload.model import (ClusterSpec, ComputingUnit, Decision, GpuSpec, NodeSpec,
                            NodeState, Observation, Policy, Task)


def test_paper_observation_is_tid_tsize_then_six_numbers_per_node():
    nodes = (NodeState("a", cpu_util=0.5, gpu_util=0.25, host_mem_util=0.1, gpu_mem_util=0.2,
                       uplink_util=0.3, downlink_util=0.4, queue_depth=9),
             NodeState("b"))
    obs = Observation(Task("t", "video_synopsis", 300), nodes, now_s=1.0)
    assert obs.paper_vector() == [1.0, 300.0, 0.5, 0.25, 0.1, 0.2, 0.3, 0.4, 0, 0, 0, 0, 0, 0]
    assert obs.node_ids == ("a", "b")


def test_task_type_index_follows_the_catalog():
    assert [Task("t", a, 1).type_index for a in app_ids()] == [0, 1, 2]
    assert Task("t", "unknown-app", 1).type_index == -1


@pytest.mark.parametrize("build,message", [
    (lambda: ClusterSpec(()), "at least one node"),
    (lambda: ClusterSpec((NodeSpec("a", 1, 8), NodeSpec("a", 2, 8))), "unique"),
    (lambda: NodeSpec("a", 0, 8), "cpu_cores"),
    (lambda: ComputingUnit("tpu:0", "tpu"), "cpu' or 'gpu"),
    # a 0 link divided by zero in every transfer estimate; an infinite speed hung the
    # simulator, a NaN one made it report nothing; a GPU's memory of 0 or NaN likewise
    (lambda: NodeSpec("a", 1, 8, downlink_mbps=0), "downlink_mbps"),
    (lambda: NodeSpec("a", 1, 8, uplink_mbps=-5.0), "uplink_mbps"),
    (lambda: NodeSpec("a", 1, 8, downlink_mbps=float("nan")), "downlink_mbps"),
    (lambda: NodeSpec("a", 1, 8, cpu_speed=float("inf")), "cpu_speed"),
    (lambda: NodeSpec("a", 1, 8, cpu_speed=float("nan")), "cpu_speed"),
    (lambda: NodeSpec("a", 1, float("nan")), "host_memory_gb"),
    (lambda: GpuSpec("k80", 0), "memory_gb"),
    (lambda: GpuSpec("k80", float("nan")), "memory_gb"),
    (lambda: GpuSpec("k80", True), "memory_gb"),
])
def test_invalid_specs_are_refused(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_numpy_numbers_and_ints_are_valid_spec_values():
    import numpy as np
    node = NodeSpec("a", 2, np.float64(8.0), (GpuSpec("k80", np.int64(12)),),
                    cpu_speed=np.float32(1.5), uplink_mbps=100, downlink_mbps=np.int64(50))
    assert node.downlink_mbps == 50 and NodeSpec("b", 1, 0).host_memory_gb == 0


def test_catalog_dags_are_topological_and_cpu_only_stages_are_the_papers():
    assert set(app_ids()) == {"intrusion_detection", "video_synopsis", "face_recognition"}
    cpu_only = {s.name for app in APPLICATIONS.values() for s in app.stages if not s.gpu_capable}
    assert cpu_only == {"tracking", "tube_stitching"}
    assert len(STAGE_TYPES) == len(set(STAGE_TYPES)) == 13
    with pytest.raises(ValueError, match="topological"):
        AppDef("bad", (StageDef("b", ("a",)), StageDef("a")))


def test_a_policy_must_decide_and_learn_defaults_to_nothing():
    class First(Policy):
        name = "first"

        def decide(self, observation):
            return Decision(observation.node_ids[0], "first node listed")

    obs = Observation(Task("t", "face_recognition", 1), (NodeState("x"), NodeState("y")), 0.0)
    policy = First()
    assert policy.decide(obs).node == "x" and policy.learn(None) is None
    with pytest.raises(TypeError):
        Policy()  # abstract


@pytest.mark.parametrize("name, in_flight, capacity, offered, skipped", [
    ("room everywhere", {"a": 0, "b": 1}, {"a": 2, "b": 2}, ["a", "b"], 0),
    ("one full", {"a": 2, "b": 1}, {"a": 2, "b": 2}, ["b"], 1),
    ("all full: all offered", {"a": 3, "b": 2}, {"a": 2, "b": 2}, ["a", "b"], 2),
    ("a node without capacity is always full", {}, {"a": 1}, ["a"], 1),
    ("no capacity: never full", {"a": 99, "b": 99}, None, ["a", "b"], 0),
])
def test_offered_nodes(name, in_flight, capacity, offered, skipped):
    from workload.model import offered_nodes
    assert offered_nodes(["a", "b"], in_flight, capacity) == (offered, skipped), name
