"""Fast mode: queueing arithmetic on tiny cases, determinism, the array and object paths agree."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.fast import FastSimulator
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, GpuSpec, NodeSpec, Policy, Task


class LeastBusy(Policy):
    name = "least-busy"

    def decide(self, observation):
        best = min(observation.nodes, key=lambda n: (n.cpu_util, n.queue_depth))
        return Decision(best.node_id, "least busy")

    def decide_array(self, obs):
        return int(np.lexsort((obs.queue_depth, obs.load))[0])


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def test_one_slot_queues_in_arrival_order(costs):
    node = NodeSpec("n", cpu_cores=1, host_memory_gb=8, slots=1)
    tasks = [Task(f"t{i}", "face_recognition", 2_000_000, arrival_s=0.0) for i in range(3)]
    service = costs.task_ms_on(tasks[0], node) / 1000.0
    result = FastSimulator(costs, noise_sigma=0.0).run(LeastBusy(), ClusterSpec((node,)), tasks)
    assert result.completed == 3
    assert result.makespan_s == pytest.approx(3 * service, rel=1e-6)
    assert result.latency_p50_s == pytest.approx(2 * service, rel=1e-6)
    assert result.mean_wait_s == pytest.approx(service, rel=1e-6)  # waits 0, s, 2s


def test_array_and_object_paths_make_the_same_decisions(costs):
    cluster = ClusterSpec(tuple(NodeSpec(f"n{i}", 2 + i % 3, 16,
                                         gpus=(GpuSpec("t4", 16),) * (i % 2)) for i in range(6)))
    tasks = [Task(f"t{i}", ("intrusion_detection", "video_synopsis", "face_recognition")[i % 3],
                  1_000_000 * (1 + i % 7), arrival_s=i * 0.3) for i in range(300)]

    class ObjectsOnly(LeastBusy):
        decide_array = None  # forces the NodeState/Observation path

    sim = FastSimulator(costs)
    fast = sim.run(LeastBusy(), cluster, tasks, seed=3)
    slow = sim.run(ObjectsOnly(), cluster, tasks, seed=3)
    assert list(fast.per_node_tasks) == list(slow.per_node_tasks)
    assert fast.latency_p99_s == slow.latency_p99_s


def test_same_seed_same_result(costs):
    cluster = ClusterSpec((NodeSpec("a", 2, 8), NodeSpec("b", 4, 8)))
    tasks = [Task(f"t{i}", "video_synopsis", 500_000, arrival_s=i * 0.1) for i in range(200)]
    one = FastSimulator(costs).run(LeastBusy(), cluster, tasks, seed=1)
    two = FastSimulator(costs).run(LeastBusy(), cluster, tasks, seed=1)
    other = FastSimulator(costs).run(LeastBusy(), cluster, tasks, seed=2)
    assert one.latency_p99_s == two.latency_p99_s and one.makespan_s == two.makespan_s
    assert one.makespan_s != other.makespan_s


def test_least_loaded_fast_path_agrees_with_its_decide(costs):
    from placement.policies import make_policy
    cluster = ClusterSpec(tuple(NodeSpec(f"n{i}", 1 + i % 4, 16) for i in range(8)))
    tasks = [Task(f"t{i}", "video_synopsis", 3_000_000, arrival_s=i * 0.05) for i in range(400)]
    policy = make_policy("least_loaded", cluster, costs)

    class ObjectsOnly:
        name = "least_loaded-objects"
        decide_array = None

        def decide(self, observation):
            return policy.decide(observation)

    sim = FastSimulator(costs)
    fast = sim.run(policy, cluster, tasks, seed=2)
    slow = sim.run(ObjectsOnly(), cluster, tasks, seed=2)
    assert list(fast.per_node_tasks) == list(slow.per_node_tasks)
