"""The cluster manager's waiting queue (``SimulationConfig.max_dispatched_per_node``): tasks
wait at the manager and the longest-waiting one is decided while fewer than W x nodes decided
tasks are unfinished; without a limit every task is decided on arrival, as before."""

from __future__ import annotations

import math

import pytest

from placement.policies import make_policy
from simulator import SimulationConfig, Simulator
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, NodeSpec, Policy, Task

from sim_fakes import FirstFit


class Recording(Policy):
    """Sends every task to the first node and keeps what it saw at each decision."""

    name = "recording"

    def __init__(self):
        self.seen = []

    def decide(self, observation):
        self.seen.append((observation.task.task_id, observation.now_s,
                          sum(n.queue_depth for n in observation.nodes)))
        return Decision(observation.node_ids[0], "first")


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def _node(name: str, cores: int = 1) -> NodeSpec:
    return NodeSpec(name, cpu_cores=cores, host_memory_gb=8, downlink_mbps=800,
                    uplink_mbps=800)


def _tasks(count: int, apps=("video_synopsis",)) -> list[Task]:
    return [Task(f"t{i}", apps[i % len(apps)], 50_000, arrival_s=0.0) for i in range(count)]


def _run(costs, policy, cluster, tasks, limit=None, **config):
    config = SimulationConfig(**{"service_noise_sigma": 0.0, **config},
                              max_dispatched_per_node=limit)
    return Simulator(costs, config).run(policy, FirstFit(), cluster, tasks, seed=3)


def _events(result, kind):
    return [(e.time, e.task_id) for e in result.events if e.kind == kind]


def test_without_a_limit_every_task_is_decided_on_arrival(costs):
    policy = Recording()
    result = _run(costs, policy, ClusterSpec((_node("a"),)), _tasks(3))
    assert [t for t, _ in _events(result, "decide")] == [0.0, 0.0, 0.0]
    assert [depth for _, _, depth in policy.seen] == [0, 1, 2]


def test_with_limit_one_each_task_is_decided_when_the_previous_completes(costs):
    policy = Recording()
    result = _run(costs, policy, ClusterSpec((_node("a"),)), _tasks(3), limit=1)
    decided, completed = _events(result, "decide"), _events(result, "complete")
    assert [task for _, task in decided] == ["t0", "t1", "t2"]   # the longest-waiting first
    assert decided[0][0] == 0.0
    # t1 is decided at t0's completion, t2 at t1's: nothing waits at the node
    assert [t for t, _ in decided[1:]] == pytest.approx([t for t, _ in completed[:2]])
    assert [depth for _, _, depth in policy.seen] == [0, 0, 0]
    assert result.metrics.completed == 3


@pytest.mark.parametrize("limit, nodes, cap", [
    (1, 2, 2),      # W x nodes
    (0.5, 3, 2),    # rounded up
    (0.01, 2, 1),   # at least one task can always be decided
    (2.5, 2, 5),
])
def test_never_more_unfinished_decided_tasks_than_the_limit(costs, limit, nodes, cap):
    cluster = ClusterSpec(tuple(_node(f"n{i}") for i in range(nodes)))
    result = _run(costs, make_policy("round_robin", cluster, costs), cluster, _tasks(12),
                  limit=limit)
    unfinished, most = 0, 0
    for event in result.events:
        unfinished += {"decide": 1, "complete": -1}.get(event.kind, 0)
        most = max(most, unfinished)
    assert most == cap
    assert result.metrics.completed == 12 and len(result.decisions) == 12


def test_tasks_arriving_later_wait_behind_the_ones_already_waiting(costs):
    tasks = _tasks(4) + [Task("late", "video_synopsis", 50_000, arrival_s=0.001)]
    result = _run(costs, Recording(), ClusterSpec((_node("a"),)), tasks, limit=2)
    assert [task for _, task in _events(result, "decide")] == ["t0", "t1", "t2", "t3", "late"]


def test_the_same_seed_gives_the_same_run(costs):
    cluster = ClusterSpec((_node("a", 2), _node("b")))
    runs = [_run(costs, make_policy("mct", cluster, costs), cluster,
                 _tasks(20, ("video_synopsis", "intrusion_detection")), limit=2,
                 service_noise_sigma=0.3) for _ in range(2)]
    assert [(e.time, e.kind, e.task_id, e.node) for e in runs[0].events] == \
        [(e.time, e.kind, e.task_id, e.node) for e in runs[1].events]


def test_a_node_slower_than_its_estimate_gets_less_work_when_decisions_wait(costs):
    """Node b is 4x slower than its spec says (hidden): MCT, deciding every task on arrival,
    splits them by the estimates; deciding from the manager's queue, each task goes where work
    ran out, so b gets fewer and the burst ends sooner."""
    cluster = ClusterSpec((_node("a"), _node("b")))
    hidden = (("b", "video_synopsis", 4.0),)
    tasks = _tasks(24)
    runs = {limit: _run(costs, make_policy("mct", cluster, costs), cluster, tasks, limit=limit,
                        hidden_task_type_factors=hidden) for limit in (None, 1)}
    on_arrival, queued = runs[None].metrics, runs[1].metrics
    assert on_arrival.per_node_tasks == {"a": 12, "b": 12}
    assert queued.per_node_tasks["b"] < 8
    assert queued.throughput_per_min > 1.4 * on_arrival.throughput_per_min


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, True, "4"])
def test_a_limit_that_is_not_a_positive_number_is_refused(bad):
    with pytest.raises(ValueError, match="max_dispatched_per_node"):
        SimulationConfig(max_dispatched_per_node=bad)
