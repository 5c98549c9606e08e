"""The simulator's two knobs that make it match a real engine's cluster spec: the bytes a task's
record moves (``bytes_per_unit``, ``fixed_bytes``) and a node slow for one task type only
(``hidden_task_type_factors``), checked on exact one-task event logs."""

from __future__ import annotations

import math

import pytest

from simulator import SimulationConfig, Simulator
from simulator.from_spec import cluster_from_spec, hidden_task_type_factors
from workload.catalog import APPLICATIONS
from workload.cluster_spec import LocalClusterSpec
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, NodeSpec, Policy, Task

SIZE = 1_000_000
NODE = NodeSpec("solo", cpu_cores=1, host_memory_gb=8, downlink_mbps=8, uplink_mbps=8)


class FirstNode(Policy):
    name = "first"

    def decide(self, observation):
        return Decision(observation.node_ids[0], "always the first node")


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def _latency(costs, app="face_recognition", **config) -> float:
    from interference.schedulers import make_node_scheduler
    sim = Simulator(costs, SimulationConfig(service_noise_sigma=0.0, **config))
    result = sim.run(FirstNode(), make_node_scheduler("fcfs", costs), ClusterSpec((NODE,)),
                     [Task("t1", app, SIZE, arrival_s=0.0)], seed=0)
    return result.metrics.latency_p50_s


def _compute_s(costs, app) -> float:
    return sum(costs.cpu_ms(s.name, SIZE) for s in APPLICATIONS[app].stages) / 1000.0


@pytest.mark.parametrize("per_unit,fixed,moved", [
    (1.0, 0.0, SIZE),            # the paper's frames: every unit of size is a byte (default)
    (0.0, 62.0, 62.0),           # a light record: its own size, whatever the task's
    (0.271, 4020.0, 4020.0 + 0.271 * SIZE),   # a record carrying its JPEG clip
], ids=["frames", "light-record", "payload"])
def test_a_task_moves_the_bytes_its_record_has(costs, per_unit, fixed, moved):
    latency = _latency(costs, bytes_per_unit=per_unit, fixed_bytes=fixed)
    # 8 Mbit/s = 1 MB/s each way; the result is 2% of what came in
    expected = _compute_s(costs, "face_recognition") + moved / 1e6 * 1.02
    assert latency == pytest.approx(expected, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("field,value", [("bytes_per_unit", -1.0), ("fixed_bytes", math.nan),
                                         ("fixed_bytes", math.inf)])
def test_bad_byte_settings_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        SimulationConfig(**{field: value})


@pytest.mark.parametrize("factors,app,slower", [
    ((), "face_recognition", 1.0),
    ((("solo", "face_recognition", 3.0),), "face_recognition", 3.0),
    ((("solo", "face_recognition", 3.0),), "video_synopsis", 1.0),   # another type: unchanged
    ((("other", "face_recognition", 3.0),), "face_recognition", 1.0),  # another node
], ids=["none", "listed-type", "other-type", "other-node"])
def test_a_hidden_factor_slows_only_its_type_on_its_node(costs, factors, app, slower):
    latency = _latency(costs, app=app, bytes_per_unit=0.0,
                       hidden_task_type_factors=factors)
    # nothing crosses the links but the 1-byte floor of a result (1 us at 1 MB/s)
    assert latency == pytest.approx(_compute_s(costs, app) * slower + 1e-6, rel=1e-9)


def test_a_bad_hidden_factor_is_refused():
    with pytest.raises(ValueError, match="finite positive"):
        SimulationConfig(hidden_task_type_factors=(("n", "a", 0.0),))


def test_the_spec_hides_the_factor_from_what_policies_see():
    spec = LocalClusterSpec.model_validate({"isolation": "host", "taskmanagers": [
        {"id": "tm_a", "cpu_cores": 1, "cpu_quota": 0.5,
         "task_type_multipliers": {"text_inference": 3, "face_recognition": 2}},
        {"id": "tm_b", "cpu_cores": 1}]})
    assert hidden_task_type_factors(spec) == (("tm_a", "face_recognition", 2.0),
                                              ("tm_a", "text_inference", 3.0))
    nodes = {n.node_id: n for n in cluster_from_spec(spec).nodes}
    assert nodes["tm_a"].cpu_speed == pytest.approx(0.5)   # the quota, not the hidden factor
    assert nodes["tm_a"].labels == nodes["tm_b"].labels == ()


class Recording(Policy):
    """MCT, keeping every observation it was handed."""

    name = "recording-mct"

    def __init__(self, cluster, costs):
        from placement.policies import make_policy
        self.mct = make_policy("mct", cluster, costs)
        self.seen = []

    def decide(self, observation):
        self.seen.append(observation)
        return self.mct.decide(observation)


TWINS = ClusterSpec((NodeSpec("a", cpu_cores=1, host_memory_gb=8),
                     NodeSpec("b", cpu_cores=1, host_memory_gb=8)))
SLOW_B = (("b", "face_recognition", 3.0),)


def _twins_run(costs, measured: bool):
    from interference.schedulers import make_node_scheduler
    tasks = [Task(f"t{i}", "face_recognition" if i % 2 else "intrusion_detection", 200_000,
                  arrival_s=i * 0.001) for i in range(40)]
    policy = Recording(TWINS, costs)
    result = Simulator(costs, SimulationConfig(
        service_noise_sigma=0.0, bytes_per_unit=0.0, hidden_task_type_factors=SLOW_B,
        policies_measure_type_factors=measured)).run(
        policy, make_node_scheduler("fcfs", costs), TWINS, tasks, seed=0)
    return policy, result


@pytest.mark.parametrize("measured", [False, True], ids=["hidden", "measured"])
def test_policies_see_a_hidden_factor_only_when_told_it_is_measured(costs, measured):
    policy, _ = _twins_run(costs, measured)
    for observation in policy.seen:
        speed = {s.node_id: s.speed_factor for s in observation.nodes}
        slow = measured and observation.task.app_id == "face_recognition"
        assert speed == {"a": 1.0, "b": 3.0 if slow else 1.0}


class AlwaysB(Recording):
    name = "always-b"

    def decide(self, observation):
        self.seen.append(observation)
        return Decision("b", "always b")


def test_a_measured_factor_weighs_the_backlog_of_the_slow_type(costs):
    from interference.schedulers import make_node_scheduler
    backlog = {}
    for measured in (False, True):
        policy = AlwaysB(TWINS, costs)
        tasks = [Task("t0", "face_recognition", 200_000, arrival_s=0.0),
                 Task("t1", "intrusion_detection", 200_000, arrival_s=0.001)]
        Simulator(costs, SimulationConfig(
            service_noise_sigma=0.0, bytes_per_unit=0.0, hidden_task_type_factors=SLOW_B,
            policies_measure_type_factors=measured)).run(
            policy, make_node_scheduler("fcfs", costs), TWINS, tasks, seed=0)
        backlog[measured] = policy.seen[1].nodes[1].backlog_s   # b, when t1 arrives
    assert backlog[False] > 0
    assert backlog[True] == pytest.approx(3.0 * backlog[False])


def test_mct_moves_work_off_a_node_it_measured_slow(costs):
    _, hidden = _twins_run(costs, measured=False)
    _, measured = _twins_run(costs, measured=True)
    assert hidden.metrics.per_node_tasks["b"] > measured.metrics.per_node_tasks["b"]
    assert measured.metrics.throughput_per_min > hidden.metrics.throughput_per_min
