"""The cross-node stage placement axis (simulator.stage_split, ``Decision.stage_nodes``): off
changes nothing, event for event; on, a downstream stage on another node starts only after its
input crossed the links, in bytes / the slower link's rate; entry stages away from home get the
input forwarded; bad plans are refused."""

from __future__ import annotations

import pytest

from placement.policies.mct import MinimumCompletionTimePolicy
from simulator import LocalityConfig, SimulationConfig, Simulator, paper_cluster, paper_workload
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, NodeSpec, Policy, Task
from workload.stage_output import stage_output_fractions

from sim_fakes import FirstFit


class Plan(Policy):
    """Every task on ``home``, its stages on the nodes ``plan`` names (the rest on home)."""

    name = "plan"

    def __init__(self, home: str, plan: dict[str, str] | None):
        self.home, self.plan = home, plan

    def decide(self, observation):
        if self.plan is None:
            return Decision(self.home, "planned")
        stages = APPLICATIONS[observation.task.app_id].stages
        return Decision(self.home, "planned",
                        stage_nodes={s.name: self.plan.get(s.name, self.home) for s in stages})


class WholeAsPlan(MinimumCompletionTimePolicy):
    """mct's decision, spelled as a stage plan with every stage on the chosen node."""

    def decide(self, observation):
        d = super().decide(observation)
        stages = APPLICATIONS[observation.task.app_id].stages
        return Decision(d.node, d.reason, d.scores, {s.name: d.node for s in stages})


@pytest.fixture(scope="module")
def costs():
    return CostModel()


def _run(costs, cluster, tasks, policy, **config):
    config = SimulationConfig(service_noise_sigma=0.0, **config)
    return Simulator(costs, config).run(policy, FirstFit(gpus_first=False), cluster, tasks, seed=0)


def _time(result, kind, task="t", stage="", node=""):
    return next(e.time for e in result.events if e.kind == kind and e.task_id == task
                and (not stage or e.stage == stage) and (not node or e.node == node))


def _two(up_a=1000.0, down_b=1000.0, cores=1):
    return ClusterSpec((NodeSpec("a", cores, 16, uplink_mbps=up_a),
                        NodeSpec("b", cores, 16, downlink_mbps=down_b)))


def test_off_and_whole_plans_leave_the_event_log_unchanged(costs):
    cluster = paper_cluster(nodes=3)
    tasks = paper_workload(30, tasks=40, seed=3)
    off = Simulator(costs).run(MinimumCompletionTimePolicy(cluster, costs), FirstFit(gpus_first=False), cluster,
                               tasks, seed=5)
    whole = Simulator(costs).run(WholeAsPlan(cluster, costs), FirstFit(gpus_first=False), cluster, tasks, seed=5)
    assert off.events == whole.events and off.metrics == whole.metrics
    assert all(d.stage_nodes is None for _, d in off.decisions)
    assert not any(e.kind.startswith("output_") for e in off.events)


def test_the_axis_changes_the_run_when_a_policy_splits(costs):
    tasks = [Task("t", "face_recognition", 2_000_000)]
    whole = _run(costs, _two(), tasks, Plan("a", None))
    split = _run(costs, _two(), tasks, Plan("a", {"face_encoding": "b", "face_distance": "b",
                                                  "face_compare": "b"}))
    assert whole.events != split.events
    assert {e.node for e in split.events if e.kind == "start"} == {"a", "b"}
    assert split.metrics.completed == 1 and split.metrics.per_node_tasks == {"a": 1, "b": 0}


@pytest.mark.parametrize("up_a, down_b", [(80.0, 1000.0), (1000.0, 80.0), (200.0, 200.0)],
                         ids=["slow-uplink", "slow-downlink", "equal"])
def test_downstream_stage_starts_after_the_transfer_of_bytes_over_the_slower_link(costs, up_a,
                                                                                    down_b):
    task = Task("t", "face_recognition", 2_000_000)
    plan = {"face_landmarks": "b", "face_encoding": "b", "face_distance": "b",
            "face_compare": "b"}
    result = _run(costs, _two(up_a, down_b), [task], Plan("a", plan))
    sent = _time(result, "output_sent", stage="face_detection")
    received = _time(result, "output_received", stage="face_detection")
    assert sent == _time(result, "finish", stage="face_detection")
    data = stage_output_fractions(costs.calibration)["face_detection"] * task.input_size
    assert received - sent == pytest.approx(data / (min(up_a, down_b) * 1e6 / 8), rel=1e-6)
    assert _time(result, "start", stage="face_landmarks", node="b") == pytest.approx(received)
    assert _time(result, "complete") > received


def test_an_entry_stage_away_from_home_gets_the_input_forwarded(costs):
    task = Task("t", "intrusion_detection", 1_000_000)
    result = _run(costs, _two(cores=2), [task],
                  Plan("a", {"gaussian_pyramid": "b", "dog_pyramid": "b",
                             "scale_space_extrema": "b"}))
    arrived = _time(result, "input_received")
    forwarded = _time(result, "output_received", stage="input")
    assert _time(result, "output_sent", stage="input") == arrived
    assert forwarded - arrived == pytest.approx(task.input_size / (1000e6 / 8), rel=1e-6)
    assert _time(result, "start", stage="gaussian_pyramid") == pytest.approx(forwarded)
    # tracking (on a) waits for scale_space_extrema's keypoints from b
    back = _time(result, "output_received", stage="scale_space_extrema")
    assert _time(result, "start", stage="tracking") >= back
    assert result.metrics.completed == 1


def test_many_split_tasks_all_complete_deterministically(costs):
    cluster = paper_cluster(nodes=3)
    tasks = paper_workload(60, tasks=30, seed=1)
    ids = cluster.node_ids
    plan = {"dog_pyramid": ids[1], "tube_extraction": ids[2], "face_encoding": ids[1],
            "face_distance": ids[2]}
    first = _run(costs, cluster, tasks, Plan(ids[0], plan))
    again = _run(costs, cluster, tasks, Plan(ids[0], plan))
    assert first.metrics.completed == 30 and first.events == again.events
    assert sum(e.kind == "output_received" for e in first.events) > 0


@pytest.mark.parametrize("plan, message", [
    ({"face_detection": "a"}, "every stage"),
    ({"face_detection": "a", "face_landmarks": "a", "face_encoding": "zz",
      "face_distance": "a", "face_compare": "a"}, "not nodes of this cluster"),
    ({"face_detection": "b", "face_landmarks": "a", "face_encoding": "a",
      "face_distance": "a", "face_compare": "a"}, "first stage"),
], ids=["missing-stages", "unknown-node", "first-stage-elsewhere"])
def test_bad_stage_plans_are_refused(costs, plan, message):
    class Fixed(Policy):
        name = "fixed"

        def decide(self, observation):
            return Decision("a", "bad", stage_nodes=plan)

    with pytest.raises(ValueError, match=message):
        _run(costs, _two(), [Task("t", "face_recognition", 1000)], Fixed())


def test_a_split_with_the_locality_axis_is_refused(costs):
    with pytest.raises(ValueError, match="locality"):
        _run(costs, _two(), [Task("t", "face_recognition", 1000)],
             Plan("a", {"face_compare": "b"}), locality=LocalityConfig())


def test_each_node_counts_its_part_and_a_finished_part_leaves(costs):
    seen = []

    class Watch(Plan):
        def decide(self, observation):
            seen.append({n.node_id: (n.queue_depth, round(n.backlog_s, 6))
                         for n in observation.nodes})
            return super().decide(observation)

    tasks = [Task("t", "face_recognition", 2_000_000, arrival_s=0.0),
             Task("u", "face_recognition", 2_000_000, arrival_s=0.05),   # t running on a
             Task("v", "face_recognition", 2_000_000, arrival_s=100.0)]  # all done
    result = _run(costs, _two(), tasks, Watch("a", {"face_compare": "b"}))
    assert result.metrics.completed == 3
    depth_a, backlog_a = seen[1]["a"]
    depth_b, backlog_b = seen[1]["b"]
    assert depth_a == 1 and depth_b == 1                 # t's two parts, one per node
    spec_b = _two().nodes[1]
    assert backlog_b == pytest.approx(costs.stage_best_ms("face_compare", 2_000_000, spec_b)
                                      / 1000.0, abs=1e-6)
    assert backlog_a > backlog_b
    assert seen[2] == {"a": (0, 0.0), "b": (0, 0.0)}


def test_output_sizes_come_from_measured_then_assumed_and_bad_entries_are_refused(costs):
    import doctest

    import workload.stage_output as stage_output
    raw = {"stage_output": {"measured": {"face_detection": 0.5},
                            "assumed_fraction": {"default": 2.0, "face_detection": 1.0,
                                                 "face_landmarks": 0.1}}}
    fractions = stage_output_fractions(raw)
    assert fractions["face_detection"] == 0.5          # measured wins
    assert fractions["face_landmarks"] == 0.1          # assumed
    assert fractions["tracking"] == 2.0                # the assumed default
    for bad, message in [({}, "no stage_output"),
                         ({"stage_output": {"assumed_fraction": {}}}, "default"),
                         ({"stage_output": {"assumed_fraction": {"default": -1}}}, "default"),
                         ({"stage_output": {"measured": {"tracking": float("nan")},
                                            "assumed_fraction": {"default": 1}}},
                          "measured.tracking")]:
        with pytest.raises(ValueError, match=message):
            stage_output_fractions(bad)
    assert doctest.testmod(stage_output).failed == 0


def test_split_outputs_share_a_rack_link_with_the_other_transfers(costs):
    """Both axes on: a split task's stage output also crosses the shared rack link of its
    nodes, so a narrow rack link slows it where a wide one does not; every task completes."""
    from simulator.shared_links import SharedLink, SharedLinksConfig
    tasks = [Task(f"t{i}", "face_recognition", 2_000_000) for i in range(3)]
    plan = {"face_landmarks": "b", "face_encoding": "b", "face_distance": "b",
            "face_compare": "b"}
    times = {}
    for name, mbps in (("wide", 1e6), ("narrow", 20.0)):
        rack = SharedLinksConfig((SharedLink("rack", ("a", "b"), mbps),))
        result = _run(costs, _two(), tasks, Plan("a", plan), shared_links=rack)
        assert result.metrics.completed == 3
        times[name] = max(_time(result, "output_received", task=t.task_id,
                                stage="face_detection") for t in tasks)
    assert times["narrow"] > times["wide"]
