"""simulator.from_spec: a local cluster spec as the simulator's cluster model.

Cores from the CPU quota in host mode, links from the shaped links, a work multiplier as a
slower cpu_speed; CPU-set mode (also host mode's fallback) shapes nothing; the "told" view is
what Flink is told. Also: the converted cluster runs in the simulator and the quotas show.
"""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from simulator.from_spec import cluster_from_spec, node_from_taskmanager
from workload.cluster_spec import (DEFAULT_LINK_MBPS, LocalClusterSpec, TaskManagerSpec,
                                   load_cluster_spec)


def _spec(isolation: str = "host", **fields) -> LocalClusterSpec:
    tm = TaskManagerSpec(id="tm_x", cpu_cores=fields.pop("cpu_cores", 1), **fields)
    return LocalClusterSpec(isolation=isolation, taskmanagers=[tm])


def test_hosts_spec_quota_becomes_speed_and_links_are_the_shaped_ones():
    cluster = cluster_from_spec(load_cluster_spec("hosts"))
    nodes = {n.node_id: n for n in cluster.nodes}
    assert cluster.name == "hosts/host/truth"
    assert {k: (n.cpu_cores, n.cpu_speed) for k, n in nodes.items()} == {
        "tm_a": (1, 0.9), "tm_b": (1, 0.35), "tm_c": (1, 0.5)}
    assert (nodes["tm_a"].uplink_mbps, nodes["tm_a"].downlink_mbps) == (8.0, 8.0)
    assert (nodes["tm_c"].uplink_mbps, nodes["tm_c"].downlink_mbps) == (40.0, 80.0)
    assert nodes["tm_b"].gpus == ()
    # memory: the host's limit (JVM size + the Python workers' margin), in GB
    tm_a = load_cluster_spec("hosts").node("tm_a")
    assert nodes["tm_a"].host_memory_gb == pytest.approx(tm_a.host_limits()["memory_mb"] / 1024)


def test_a_quota_above_one_core_is_whole_cores_with_the_same_total_capacity():
    node = node_from_taskmanager(_spec(cpu_quota=2.5).taskmanagers[0])
    assert node.cpu_cores == 2 and node.cpu_cores * node.cpu_speed == pytest.approx(2.5)


def test_work_multiplier_is_a_slower_cpu_speed():
    node = node_from_taskmanager(_spec(cpu_quota=0.8, work_multiplier=2.0).taskmanagers[0])
    assert node.cpu_speed == pytest.approx(0.4)


def test_cpuset_fallback_shapes_nothing_and_uses_the_told_cores():
    spec = load_cluster_spec("hosts")
    fallback = cluster_from_spec(spec, isolation="cpuset")
    assert fallback.name == "hosts/cpuset/truth"
    for node in fallback.nodes:
        assert node.cpu_speed == 1.0 and node.cpu_cores == 1
        assert node.uplink_mbps == node.downlink_mbps == DEFAULT_LINK_MBPS


def test_cpuset_pinned_cpus_are_the_cores():
    spec = _spec("cpuset", cpu_cores=2, cpu_affinity=[0, 1, 2, 3], work_multiplier=2.0)
    node = cluster_from_spec(spec).nodes[0]
    assert node.cpu_cores == 4 and node.cpu_speed == pytest.approx(0.25)


def test_told_view_is_what_flink_is_told():
    told = cluster_from_spec(load_cluster_spec("hosts"), view="told")
    assert {(n.cpu_cores, n.cpu_speed, n.uplink_mbps) for n in told.nodes} == {
        (1, 1.0, DEFAULT_LINK_MBPS)}


def test_gpu_ids_become_calibrated_gpus():
    node = node_from_taskmanager(_spec(gpu_ids=[0, 1]).taskmanagers[0], gpu_model="v100")
    assert [g.model for g in node.gpus] == ["v100", "v100"]
    assert all(math.isfinite(g.memory_gb) and g.memory_gb > 0 for g in node.gpus)
    with pytest.raises(ValueError, match="not in the calibration"):
        node_from_taskmanager(_spec(gpu_ids=[0]).taskmanagers[0], gpu_model="no_such_gpu")


@pytest.mark.parametrize("kwargs, message", [
    ({"isolation": "docker"}, "isolation must be one of"),
    ({"view": "guessed"}, "view must be one of"),
])
def test_bad_mode_or_view_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        node_from_taskmanager(_spec().taskmanagers[0], **kwargs)


def test_not_a_spec_is_refused():
    with pytest.raises(TypeError, match="LocalClusterSpec"):
        cluster_from_spec({"taskmanagers": []})


def test_non_finite_limits_never_reach_the_model():
    with pytest.raises(ValidationError):
        _spec(cpu_quota=float("inf"))
    with pytest.raises(ValidationError):
        _spec(uplink_mbps=float("nan"))


def test_the_quotas_show_in_the_simulator():
    """Same tasks, round-robin: the 0.35-core host finishes its third far later than the 0.9-core
    one, so a converted cluster is slower than the same spec unshaped at full cores."""
    from interference.schedulers import make_node_scheduler
    from placement.policies import make_policy
    from simulator import Simulator
    from workload.estimates import CostModel
    from workload.model import Task
    spec = load_cluster_spec("hosts")
    costs = CostModel()
    apps = ("video_synopsis", "face_recognition", "intrusion_detection")
    tasks = [Task(f"t{i}", apps[i % 3], 20_000, i * 0.001) for i in range(60)]
    rates = {}
    for mode in ("host", "cpuset"):
        cluster = cluster_from_spec(spec, isolation=mode)
        policy = make_policy("round_robin", cluster, costs, seed=3)
        result = Simulator(costs).run(policy, make_node_scheduler("fcfs", costs, seed=3),
                                      cluster, tasks, seed=3)
        assert result.metrics.completed == len(tasks)
        rates[mode] = result.metrics.throughput_per_min
    assert rates["host"] < 0.7 * rates["cpuset"]
