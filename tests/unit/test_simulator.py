"""The simulator: exact event logs for tiny cases, determinism, bounds, and clear refusals."""

from __future__ import annotations

import pytest

from simulator import GreedyOracle, SimulationConfig, Simulator, paper_cluster, paper_workload
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import (Assignment, ClusterSpec, Decision, GpuSpec, NodeScheduler, NodeSpec,
                            Policy, Task)

from sim_fakes import FirstFit


class FirstNode(Policy):
    name = "first"

    def decide(self, observation):
        return Decision(observation.node_ids[0], "always the first node")


class RoundRobin(Policy):
    name = "rr"

    def __init__(self):
        self.turn = 0

    def decide(self, observation):
        self.turn += 1
        return Decision(observation.node_ids[self.turn % len(observation.node_ids)], "turn")


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def _sim(costs, **config):
    return Simulator(costs, SimulationConfig(service_noise_sigma=0.0, **config))


def test_exact_event_log_of_one_pipeline_task_on_one_core(costs):
    node = NodeSpec("solo", cpu_cores=1, host_memory_gb=8, downlink_mbps=8, uplink_mbps=8)
    task = Task("t1", "face_recognition", 1_000_000, arrival_s=5.0)
    result = _sim(costs).run(FirstNode(), FirstFit(), ClusterSpec((node,)), [task], seed=0)

    expected = [(5.0, "decide", "", "")]
    now = 5.0 + task.input_size / 1e6  # 8 Mbit/s = 1 MB/s downlink
    expected.append((now, "input_received", "", ""))
    for stage in APPLICATIONS["face_recognition"].stages:  # a chain: one stage after another
        expected.append((now, "start", stage.name, "cpu:0"))
        now += costs.cpu_ms(stage.name, task.input_size) / 1000.0
        expected.append((now, "finish", stage.name, "cpu:0"))
    now += task.input_size * 0.02 / 1e6  # the result (2% of the input) goes up the uplink
    expected.append((now, "complete", "", ""))
    got = [(e.time, e.kind, e.stage, e.unit) for e in result.events]
    assert [g[1:] for g in got] == [x[1:] for x in expected]
    assert [g[0] for g in got] == pytest.approx([x[0] for x in expected], abs=1e-6)
    m = result.metrics
    assert m.completed == 1 and m.latency_p50_s == pytest.approx(now - 5.0, abs=1e-6)


def test_parallel_stages_of_a_dag_start_together_when_units_allow(costs):
    node = NodeSpec("n", cpu_cores=3, host_memory_gb=8)
    task = Task("t1", "intrusion_detection", 200_000)
    events = _sim(costs).run(FirstNode(), FirstFit(), ClusterSpec((node,)), [task], 0).events
    first_starts = [e for e in events if e.kind == "start"][:3]
    assert {e.stage for e in first_starts} == {"gmm_background", "frame_difference",
                                               "gaussian_pyramid"}
    assert len({e.time for e in first_starts}) == 1
    started = {e.stage: e.time for e in events if e.kind == "start"}
    finished = {e.stage: e.time for e in events if e.kind == "finish"}
    for stage in APPLICATIONS["intrusion_detection"].stages:
        for dep in stage.deps:
            assert started[stage.name] >= finished[dep]


def test_same_seed_same_log_and_a_different_seed_differs(costs):
    cluster = paper_cluster(nodes=3)
    tasks = paper_workload(30, tasks=40, seed=3)
    sim = Simulator(costs)
    first = sim.run(RoundRobin(), FirstFit(), cluster, tasks, seed=7)
    again = sim.run(RoundRobin(), FirstFit(), cluster, tasks, seed=7)
    other = sim.run(RoundRobin(), FirstFit(), cluster, tasks, seed=8)
    assert first.events == again.events and first.metrics == again.metrics
    assert first.events != other.events


@pytest.mark.parametrize("policy", [FirstNode, RoundRobin, GreedyOracle])
def test_no_policy_beats_the_upper_bound(costs, policy):
    cluster = paper_cluster(nodes=4)
    for tasks in (paper_workload(60, tasks=60, seed=1), paper_workload(5, tasks=30, seed=2)):
        m = Simulator(costs).run(policy(), FirstFit(), cluster, tasks, seed=1).metrics
        assert m.completed == len(tasks)
        assert m.throughput_per_min <= m.upper_bound_per_min + 1e-9


def test_cpu_only_stages_never_run_on_gpus(costs):
    cluster = ClusterSpec((NodeSpec("g", 1, 16, gpus=(GpuSpec("v100", 16),)),))
    tasks = paper_workload(30, tasks=12, seed=4)
    events = Simulator(costs).run(FirstNode(), FirstFit(), cluster, tasks, 0).events
    for e in events:
        if e.kind == "start" and e.stage in ("tracking", "tube_stitching"):
            assert e.unit.startswith("cpu")
    assert any(e.kind == "start" and e.unit.startswith("gpu") for e in events)


def test_a_launch_that_does_not_fit_in_gpu_memory_fails_and_is_retried(costs):
    """Two big tasks on one 8 GB P4: the second GPU launch runs out of memory, returns to the
    ready queue after the retry delay, and both tasks still complete."""
    size = 600_000_000
    assert 2 * costs.gpu_memory_mb("face_detection", size) > 8 * 1024
    cluster = ClusterSpec((NodeSpec("g", 1, 64, gpus=(GpuSpec("p4", 8),)),))
    tasks = [Task(f"t{i}", "face_recognition", size, arrival_s=0.0) for i in range(2)]
    result = _sim(costs).run(FirstNode(), FirstFit(), cluster, tasks, seed=0)
    ooms = [e for e in result.events if e.kind == "oom"]
    assert result.metrics.completed == 2 and result.metrics.oom_failures == len(ooms) >= 1
    retried = ooms[0]
    later_start = [e for e in result.events if e.kind == "start" and e.task_id == retried.task_id
                   and e.stage == retried.stage and e.time >= retried.time + 1.0]
    assert later_start, "the stage that ran out of memory never started again"


def test_co_running_stages_progress_at_the_measured_rates(costs):
    """Two equal stages sharing a V100 finish when the measured (or, without the data, the
    generated) normalised throughput says."""
    from simulator.ground_truth import GroundTruth
    truth = GroundTruth(costs, 0)
    chains = {"face_detection": "face_recognition", "gmm_background": "video_synopsis"}
    stage = next((s for s in chains if 0 < truth.corun_rates(s, s, "v100")[0] < 1), None)
    if stage is None:
        pytest.skip("no candidate stage can co-run with itself in this co-location table")
    rate = truth.corun_rates(stage, stage, "v100")[0]
    cluster = ClusterSpec((NodeSpec("g", 1, 64, gpus=(GpuSpec("v100", 16),)),))
    tasks = [Task(f"t{i}", chains[stage], 1_000_000, arrival_s=0.0) for i in range(2)]
    events = _sim(costs, result_fraction=0.0).run(FirstNode(), FirstFit(), cluster, tasks,
                                                  0).events
    starts = [e for e in events if e.kind == "start" and e.stage == stage]
    finishes = [e for e in events if e.kind == "finish" and e.stage == stage]
    alone_s = costs.gpu_ms(stage, 1_000_000, "v100") / 1000.0
    assert len({e.time for e in starts}) == 1 and {e.unit for e in starts} == {"gpu:0"}
    assert finishes[0].time - starts[0].time == pytest.approx(alone_s / rate, rel=1e-6)


def test_a_policy_choosing_an_unknown_node_is_refused(costs):
    class Wrong(Policy):
        name = "wrong"

        def decide(self, observation):
            return Decision("nowhere", "bug")

    with pytest.raises(ValueError, match="nowhere"):
        Simulator(costs).run(Wrong(), FirstFit(), paper_cluster(nodes=2),
                             paper_workload(10, tasks=2, seed=0), 0)


def test_a_scheduler_putting_tracking_on_a_gpu_is_refused(costs):
    class Reckless(NodeScheduler):
        name = "reckless"

        def assign(self, ready, units, now_s):
            gpu = next(u for u in units if u.kind == "gpu")
            return [Assignment(s, gpu.unit_id) for s in ready[:1]]

    cluster = ClusterSpec((NodeSpec("g", 1, 16, gpus=(GpuSpec("p4", 8),)),))
    tasks = [Task("t", "intrusion_detection", 100_000)]
    with pytest.raises(ValueError, match="reckless"):
        Simulator(costs).run(FirstNode(), Reckless(), cluster, tasks, 0)


def test_learning_policies_get_one_transition_per_decision(costs):
    class Recorder(RoundRobin):
        def __init__(self):
            super().__init__()
            self.transitions = []

        def learn(self, transition):
            self.transitions.append(transition)

    policy = Recorder()
    tasks = paper_workload(30, tasks=25, seed=5)
    Simulator(costs).run(policy, FirstFit(), paper_cluster(nodes=3), tasks, 0)
    assert len(policy.transitions) == 25
    assert policy.transitions[-1].done and policy.transitions[-1].next_observation is None
    assert all(t.next_observation is not None for t in policy.transitions[:-1])


def test_node_utilisation_is_reported_over_time(costs):
    cluster = paper_cluster(nodes=2)
    tasks = paper_workload(30, tasks=20, seed=6)
    result = Simulator(costs).run(RoundRobin(), FirstFit(), cluster, tasks, 0)
    times = sorted({t for t, _ in result.samples})
    assert len(times) >= 5 and all(b - a == pytest.approx(2.0) for a, b in zip(times, times[1:]))
    states = [s for _, s in result.samples]
    assert {s.node_id for s in states} == set(cluster.node_ids)
    assert all(0.0 <= s.cpu_util <= 1.0 and 0.0 <= s.gpu_util <= 1.0 for s in states)
    assert max(s.cpu_util for s in states) > 0 and max(s.downlink_util for s in states) > 0


def test_alibaba_cluster_samples_the_nodes_the_calibration_lists():
    from simulator import alibaba_cluster
    from workload.estimates import load_calibration
    from workload.traces import load_or_generate_nodes
    # the inventory's own source: a data folder can be there without the Alibaba files (an
    # empty one named, as `make unit-without-data` does)
    if load_or_generate_nodes(which="gpu").source.startswith("generated"):
        pytest.skip("Alibaba data not found: the generated inventory is used instead")
    listed = load_calibration().raw["alibaba_setting"]["nodes"]
    assert list(alibaba_cluster(16, seed=0).node_ids) == listed


def test_paper_cluster_has_the_papers_shape():
    cluster = paper_cluster()
    assert len(cluster.nodes) == 11
    assert {len(n.gpus) for n in cluster.nodes} == {2, 4}
    assert {g.model for n in cluster.nodes for g in n.gpus} == {"p4", "k80"}
    assert all(8 <= n.host_memory_gb <= 32 for n in cluster.nodes)


def test_a_generated_colocation_table_lets_the_stages_co_run_as_the_real_one_does():
    """Without the Gavel file the ground truth maps the stages onto a generated table's
    synthetic jobs, those that co-run with the most others first: the real file blocks 2 of the
    66 stage pairs (K80 only); in name order a generated table blocked 29 on every GPU, and a
    machine without the data simulated another cluster."""
    import itertools

    from simulator.ground_truth import GroundTruth
    from workload.traces.generators import generate_colocation_table
    costs = CostModel(colocation=None)
    for seed in (0, 1, 2):
        truth = GroundTruth(costs, 0, generate_colocation_table(26, seed=seed))
        stages = sorted(truth._jobs)
        assert len(set(map(truth._job, stages))) == len(stages)   # one synthetic job each
        for model in ("k80", "p100", "v100", "p4"):
            blocked = [pair for pair in itertools.combinations_with_replacement(stages, 2)
                       if truth.corun_rates(*pair, model) == (0.0, 0.0)]
            assert len(blocked) <= 3, (seed, model, blocked)
