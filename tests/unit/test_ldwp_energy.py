"""LDWP's energy-aware reward (``LDWPSettings.energy_weight``): its arithmetic on hand-made
completions, its validation, that the learner's joules are the energy report's, that it is off
by default (shipped files and runs unchanged), and the shipped ``ldwp_energy_paper.spm``."""

from __future__ import annotations

import math

import pytest
import torch

from placement.ldwp.agent import LDWPPolicy, LDWPSettings
from simulator.energy import PowerModel, energy_report, task_busy_energy_j
from workload.estimates import CostModel
from workload.model import (ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task,
                            Transition)

torch.set_num_threads(1)

#: a K80 node and a CPU-only node: the same stage costs very different joules on each
CLUSTER = ClusterSpec((NodeSpec("g", 2, 16, gpus=(GpuSpec("k80", 12),)), NodeSpec("c", 4, 16)))


@pytest.fixture(scope="module")
def costs():
    return CostModel()


@pytest.fixture(scope="module")
def power(costs):
    return PowerModel.from_calibration(costs.calibration)


def _agent(costs, **overrides) -> LDWPPolicy:
    settings = {"network": "node_scoring", "reward": "task_latency", "latency_transform": "log",
                "learning_starts": 10_000, "seed": 0, **overrides}
    return LDWPPolicy(CLUSTER, costs, LDWPSettings(**settings))


def _placed(agent: LDWPPolicy, task_id: str, arrival_s: float = 0.0) -> Observation:
    """Decide one task and hand the agent its (terminal) transition: the outcome is pending."""
    obs = Observation(Task(task_id, "face_recognition", 3_000_000, arrival_s),
                      (NodeState("g"), NodeState("c")), arrival_s)
    agent.decide(obs)
    agent.learn(Transition(obs, None, 0.0, None, done=True))
    return obs


def _reward(agent: LDWPPolicy) -> float:
    (item,) = agent.replay.items
    return item[2]


# -- the arithmetic ------------------------------------------------------------------------

# (stage runs reported at completion, node): the busy joules are dynamic watts x time share
# (cpu core 14.17 - 4.25 = 9.92 W; K80 150 - 25 = 125 W at its top clock, calibration.yaml)
RUNS = [
    ((("detect", "gpu:0", 2.0),), "g"),
    ((("decode", "cpu:0", 2.0), ("detect", "gpu:0", 2.0)), "g"),
    ((("decode", "cpu:0", 2.0), ("detect", "cpu:1", 2.0)), "c"),
]


@pytest.mark.parametrize("runs,node", RUNS)
@pytest.mark.parametrize("weight", [0.1, 1.0, 5.0])
def test_reward_is_the_latency_reward_minus_lambda_times_joules_over_the_scale(
        costs, power, runs, node, weight):
    agent = _agent(costs, energy_weight=weight, energy_scale_j=500.0)
    _placed(agent, "t1")
    agent.observe_stage_runs("t1", node, runs)
    agent.observe_completion("t1", 9.0, node)
    joules = task_busy_energy_j(CLUSTER.nodes[0 if node == "g" else 1], runs, power)
    assert _reward(agent) == pytest.approx(-math.log1p(9.0) - weight * joules / 500.0)


def test_more_energy_gives_a_lower_reward_at_the_same_latency(costs):
    rewards = []
    for seconds in (0.5, 1.0, 4.0):
        agent = _agent(costs, energy_weight=1.0)
        _placed(agent, "t1")
        agent.observe_stage_runs("t1", "g", (("detect", "gpu:0", seconds),))
        agent.observe_completion("t1", 3.0, "g")
        rewards.append(_reward(agent))
    assert rewards[0] > rewards[1] > rewards[2]
    # 125 W x 0.5 s per step of the K80's busy time, over the 1000 J scale
    assert rewards[0] - rewards[1] == pytest.approx(125.0 * 0.5 / 1000.0)


@pytest.mark.parametrize("reward", ["task_latency", "drain_time"])
def test_lambda_zero_is_the_latency_reward_exactly(costs, reward):
    plain, zero = _agent(costs, reward=reward), _agent(costs, reward=reward, energy_weight=0.0)
    for agent in (plain, zero):
        _placed(agent, "t1")
        agent.observe_stage_runs("t1", "g", (("detect", "gpu:0", 3.0),))  # ignored at 0
        agent.observe_completion("t1", 7.0, "g")
    assert _reward(zero) == _reward(plain) == -math.log1p(7.0)
    assert not zero.outcomes.energy_j and not zero.outcomes.latency_parts


def test_drain_time_joins_the_energy_term_whichever_outcome_comes_first(costs):
    # Two tasks on one node; t2 completes first, which judges t1's drain before t1's own
    # energy is known: t1's reward waits for it, t2's is complete at once.
    cluster = ClusterSpec((NodeSpec("c", 4, 16),))
    agent = LDWPPolicy(cluster, costs, LDWPSettings(
        network="node_scoring", reward="drain_time", latency_transform="linear",
        latency_scale_s=1.0, learning_starts=10_000, energy_weight=1.0, seed=0))
    t1, t2 = (Task(f"t{i}", "face_recognition", 3_000_000, 5.0 * (i - 1)) for i in (1, 2))
    work = agent.outcomes.task_work_s(t1, "c")
    o1 = Observation(t1, (NodeState("c"),), 0.0)
    o2 = Observation(t2, (NodeState("c", queue_depth=1, backlog_s=work),), 5.0)
    agent.decide(o1)
    agent.decide(o2)
    agent.learn(Transition(o1, None, 0.0, o2))
    agent.learn(Transition(o2, None, 0.0, None, done=True))
    agent.observe_stage_runs("t2", "c", (("decode", "cpu:0", 10.0),))     # 99.2 J
    agent.observe_completion("t2", 20.0, "c")   # at 25: t1's drain is reached, t1 not done
    assert len(agent.replay.items) == 0 and set(agent.outcomes.latency_parts) == {"t1"}
    agent.observe_stage_runs("t1", "c", (("decode", "cpu:1", 20.0),))     # 198.4 J
    assert [item[2] for item in agent.replay.items] == [pytest.approx(-25.0 - 0.1984)]
    agent.observe_completion("t1", 40.0, "c")   # at 40: t2's drain (both works) is reached
    assert sorted(item[2] for item in agent.replay.items) == [
        pytest.approx(-35.0 - 0.0992), pytest.approx(-25.0 - 0.1984)]
    assert not agent.outcomes.latency_parts and not agent.outcomes.energy_j


def test_nothing_is_learned_from_completions_while_not_training(costs):
    agent = _agent(costs, energy_weight=1.0)
    agent.training = False
    agent.observe_stage_runs("t1", "g", (("detect", "gpu:0", 1.0),))
    assert not agent.outcomes.energy_j and not agent.replay.items


# -- validation --------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides,match", [
    ({"energy_weight": -0.1}, "energy_weight must be a finite number >= 0"),
    ({"energy_weight": math.nan}, "energy_weight must be a finite number >= 0"),
    ({"energy_weight": math.inf}, "energy_weight must be a finite number >= 0"),
    ({"energy_weight": True}, "energy_weight must be a finite number >= 0"),
    ({"energy_weight": "1"}, "energy_weight must be a finite number >= 0"),
    ({"energy_scale_j": 0.0}, "energy_scale_j must be > 0"),
    ({"energy_scale_j": -5.0}, "energy_scale_j must be a finite number >= 0"),
    ({"energy_scale_j": math.inf}, "energy_scale_j must be a finite number >= 0"),
    ({"energy_weight": 0.5, "reward": "throughput_change"}, "needs an outcome reward"),
])
def test_bad_energy_settings_are_refused(overrides, match):
    with pytest.raises(ValueError, match=match):
        LDWPSettings(**overrides)


def test_energy_is_off_by_default():
    settings = LDWPSettings()
    assert settings.energy_weight == 0.0 and settings.energy_scale_j == 1000.0
    LDWPSettings(reward="throughput_change", energy_weight=0.0)  # off: any reward


def test_a_bad_stage_time_share_is_refused(costs, power):
    with pytest.raises(ValueError, match="finite number >= 0"):
        task_busy_energy_j(CLUSTER.nodes[0], [("detect", "gpu:0", -1.0)], power)
    with pytest.raises(ValueError, match="no unit 'gpu:3'"):
        task_busy_energy_j(CLUSTER.nodes[0], [("detect", "gpu:3", 1.0)], power)


# -- the learner's joules are the energy report's ------------------------------------------------

class _Recorder:
    """Wraps a policy and keeps what the simulator reports at each completion."""

    def __init__(self, inner):
        self.inner, self.name, self.runs = inner, inner.name, {}

    def decide(self, observation):
        return self.inner.decide(observation)

    def learn(self, transition):
        self.inner.learn(transition)

    def observe_stage_runs(self, task_id, node_id, stage_runs):
        self.runs[task_id] = (node_id, stage_runs)


def test_reported_stage_shares_price_to_the_energy_reports_busy_joules(costs, power):
    # saturated paper cluster: GPUs run stages side by side, so the 1/k split matters
    from interference.schedulers import make_node_scheduler
    from placement.policies import make_policy
    from simulator import Simulator
    from simulator.scenarios import paper_cluster, saturated_workload
    cluster = paper_cluster()
    recorder = _Recorder(make_policy("mct", cluster, costs))
    result = Simulator(costs).run(recorder, make_node_scheduler("heft", costs, seed=3), cluster,
                                  saturated_workload(60, seed=3), seed=3)
    report = energy_report(result, cluster, power)
    assert set(recorder.runs) == set(report.completed) and len(report.completed) == 60
    nodes = {n.node_id: n for n in cluster.nodes}
    shared = 0
    for task_id, (node_id, runs) in recorder.runs.items():
        ours = task_busy_energy_j(nodes[node_id], runs, power)
        assert ours == pytest.approx(report.per_task[task_id].busy_j, rel=1e-9, abs=1e-9)
        ends = {(e.stage, e.unit): e.time for e in result.events
                if e.task_id == task_id and e.kind == "finish"}
        starts = {(e.stage, e.unit): e.time for e in result.events
                  if e.task_id == task_id and e.kind == "start"}
        shared += sum(share < ends[(s, u)] - starts[(s, u)] - 1e-9 for s, u, share in runs)
    assert shared > 0  # some stage did share its unit (the split is exercised)


# -- off by default: runs and shipped files unchanged ------------------------------------------

def _residual_run(costs, weight, report_stages=True):
    from benchmarks.ldwp import _agent as residual_agent
    from interference.schedulers import make_node_scheduler
    from simulator import Simulator
    from simulator.scenarios import paper_cluster, saturated_workload
    cluster = paper_cluster()
    agent = residual_agent("residual", cluster, costs, seed=0, energy_weight=weight,
                           learning_starts=20, batch_size=8)
    if not report_stages:
        agent.observe_stage_runs = None  # what the engine saw before the hook existed
    result = Simulator(costs).run(agent, make_node_scheduler("heft", costs, seed=5), cluster,
                                  saturated_workload(80, seed=5), seed=5)
    return agent, result


def test_with_the_weight_at_zero_a_learning_run_is_as_before_the_hook():
    from simulator.scenarios import paper_costs
    costs = paper_costs()
    with_hook, result = _residual_run(costs, 0.0)
    without, before = _residual_run(costs, 0.0, report_stages=False)
    assert result.events == before.events
    assert [i[2] for i in with_hook.replay.items] == [i[2] for i in without.replay.items]
    assert with_hook.updates == without.updates > 0
    for a, b in zip(with_hook.q_network.parameters(), without.q_network.parameters()):
        assert torch.equal(a, b)
    energetic, _ = _residual_run(costs, 1.0)   # on: the same outcomes now cost their joules
    ours = [i[2] for i in energetic.replay.items]
    assert len(ours) == len(with_hook.replay.items)
    assert sum(ours) < sum(i[2] for i in with_hook.replay.items)


def test_a_file_header_names_the_energy_settings_only_when_the_term_is_on(costs, tmp_path):
    # off: the header is the one files had before the setting existed (rebuilt files match)
    assert "energy_weight" not in _agent(costs).metadata()["settings"]
    on = _agent(costs, energy_weight=0.2, energy_scale_j=400.0)
    on.save(tmp_path / "on.spm")
    loaded = LDWPPolicy.from_file(tmp_path / "on.spm", CLUSTER, costs)
    assert (loaded.settings.energy_weight, loaded.settings.energy_scale_j) == (0.2, 400.0)


@pytest.mark.parametrize("name", ["residual", "size_agnostic", "paper"])
def test_existing_shipped_files_load_with_the_energy_term_off(name):
    from placement.ldwp.modelfile import load_model
    from placement.ldwp.shipped import shipped_model
    from simulator.scenarios import paper_cluster, paper_costs
    _, meta = load_model(shipped_model(name))
    assert "energy_weight" not in meta["settings"]       # written before the setting existed
    agent = LDWPPolicy.from_file(shipped_model(name), paper_cluster(), paper_costs())
    assert agent.settings.energy_weight == 0.0


# -- the shipped energy model ------------------------------------------------------------------

def _observations(n: int):
    import random

    from simulator.scenarios import paper_cluster
    rng = random.Random(11)
    ids = paper_cluster().node_ids
    apps = ("video_synopsis", "face_recognition", "intrusion_detection")
    for i in range(n):
        nodes = tuple(NodeState(nid, cpu_util=rng.random(), gpu_util=rng.random(),
                                queue_depth=rng.randrange(6), backlog_s=rng.random() * 60)
                      for nid in ids)
        yield Observation(Task(f"t{i}", apps[i % 3], rng.randrange(10**5, 10**7), 0.0),
                          nodes, 0.0)


def test_the_shipped_energy_model_loads_names_its_seeds_and_decides_deterministically():
    from benchmarks.baselines import EVALUATION_SEEDS
    from benchmarks.ship_models import episodes_of
    from benchmarks.energy_ldwp import ENERGY_SCALE_J, ENERGY_WEIGHT
    from benchmarks.ldwp import TUNING_SEEDS
    from placement.ldwp.modelfile import load_model
    from placement.ldwp.shipped import shipped_model
    from simulator.scenarios import paper_cluster, paper_costs
    path = shipped_model("energy")
    _, meta = load_model(path)
    assert meta["command"] == "python -m benchmarks.ship_models --models energy"
    assert meta["settings"]["energy_weight"] == ENERGY_WEIGHT > 0
    assert meta["settings"]["energy_scale_j"] == ENERGY_SCALE_J
    assert meta["training_seeds"] == [10, 10 + episodes_of("energy")]
    assert meta["tuning_seeds"] == list(TUNING_SEEDS)
    assert not set(meta["tuning_seeds"]) & set(EVALUATION_SEEDS)
    first, second = (LDWPPolicy.from_file(path, paper_cluster(), paper_costs())
                     for _ in range(2))
    assert not first.training
    for obs in _observations(30):
        a, b = first.decide(obs), second.decide(obs)
        assert (a.node, a.reason) == (b.node, b.reason)


def test_the_zoo_row_runs_the_energy_file_not_the_residual_one(monkeypatch):
    from benchmarks import zoo
    loaded = []
    real = LDWPPolicy.from_file.__func__

    def spy(cls, path, *args, **kwargs):
        loaded.append(str(path))
        return real(cls, path, *args, **kwargs)
    monkeypatch.setattr(LDWPPolicy, "from_file", classmethod(spy))
    assert ("LDWP-energy+HEFT (ours)", "ldwp_energy", "heft", "ours") in zoo.SYSTEMS
    row = zoo.run_one(("paper", None, "LDWP-energy+HEFT (ours)", "ldwp_energy", "heft", 3, 30,
                       "residual.spm"))
    assert loaded and loaded[-1].endswith("ldwp_energy_paper.spm")
    assert row["throughput_per_min"] > 0 and row["energy_per_task_j"] > 0
