"""The shipped residual model's recipe: episodes of several burst lengths, a checkpoint that
must not lose to its prior (MCT) on any of them, and the benchmark that judges it."""

from __future__ import annotations

import pytest

from benchmarks import ldwp as ldwp_bench
from benchmarks.burst_lengths import changes
from benchmarks.ldwp import episode_lengths, prior_ratio_check


@pytest.mark.parametrize("tasks, episodes, expected", [
    (1500, 3, [1500, 1500, 1500]),
    ((600, 300, 150), 4, [600, 300, 150, 600]),
    ((600, 300), 1, [600]),
    ((50,), 2, [50, 50]),
    (10, 0, []),
])
def test_episode_lengths_repeat_the_pattern_over_the_episodes(tasks, episodes, expected):
    assert episode_lengths(tasks, episodes) == expected


@pytest.mark.parametrize("tasks", [(), (600, 0), (-1,), 0, (300, 1.5), ("300",)])
def test_episode_lengths_refuse_what_is_not_a_positive_count(tasks):
    with pytest.raises(ValueError, match="positive ints"):
        episode_lengths(tasks, 2)


def test_the_untrained_residual_agent_is_mct_so_its_ratio_to_the_prior_is_one(monkeypatch):
    monkeypatch.setattr(ldwp_bench, "PRIOR_CHECK_BURSTS", {12: (501,), 24: (502, 503)})
    monkeypatch.setattr(ldwp_bench, "_PRIOR_THROUGHPUT", {})
    costs, cluster = ldwp_bench._setup()
    agent = ldwp_bench._agent("residual", cluster, costs, seed=0)
    score, record = prior_ratio_check(agent, 1500, None)
    assert score == pytest.approx(1.0, abs=1e-12)
    assert set(record["tuning_ratio_to_prior"]) == {"12", "24"}
    assert record["tuning_throughput_per_min"] > 0
    assert agent.training  # judged greedy, handed back as it was


def test_a_checkpoint_scores_its_worst_burst_not_its_best(monkeypatch):
    monkeypatch.setattr(ldwp_bench, "PRIOR_CHECK_BURSTS", {10: (1,), 20: (2,), 30: (3,)})
    monkeypatch.setattr(ldwp_bench, "_PRIOR_THROUGHPUT", {(10, (1,)): 10.0, (20, (2,)): 10.0,
                                                          (30, (3,)): 10.0})
    served = iter([12.0, 9.0, 11.0])  # ahead of MCT on two bursts, behind on one
    monkeypatch.setattr(ldwp_bench, "_saturated_throughput",
                        lambda agent, scheduler, seeds, tasks: next(served))
    score, record = prior_ratio_check(object(), 1500, None)
    assert score == pytest.approx(0.9)
    assert record["tuning_ratio_to_prior"] == pytest.approx({"10": 1.2, "20": 0.9, "30": 1.1})
    assert record["tuning_throughput_per_min"] == 11.0  # the longest burst's


def test_changes_are_per_seed_over_mct_on_the_same_burst():
    runs = [{"policy": p, "tasks": n, "seed": s, "throughput_per_min": v}
            for p, n, s, v in [("mct", 300, 1, 50.0), ("m.spm", 300, 1, 55.0),
                               ("mct", 300, 2, 40.0), ("m.spm", 300, 2, 38.0),
                               ("mct", 600, 1, 99.0), ("m.spm", 600, 1, 1.0)]]
    c = changes(runs, "m.spm", 300)
    assert c["per_seed"] == pytest.approx([0.1, -0.05])
    assert c["mean"] == pytest.approx(0.025) and c["worst"] == pytest.approx(-0.05)
    assert c["ci95"][0] < c["mean"] < c["ci95"][1]


def test_the_training_data_hash_tells_burst_patterns_apart():
    from benchmarks.ship_models import training_data_hash
    assert training_data_hash("residual", 2, (60, 30)) != training_data_hash("residual", 2, 60)
    assert training_data_hash("residual", 1, (60, 30)) == training_data_hash("residual", 1, 60)


def test_the_shipped_model_is_not_behind_its_prior_on_a_short_burst_of_unused_seeds():
    """The outside probe's case (300 tasks, where the model trained on 1,500-task bursts lost
    19-26% to MCT), on seeds no training, tuning or choice of recipe used. A guard with room for
    noise, not the measurement: that is ``benchmarks.burst_lengths``."""
    from benchmarks.burst_lengths import run_one
    from placement.ldwp.shipped import shipped_model
    from workload.estimates import CostModel
    model = str(shipped_model("residual"))
    ratios = [run_one((model, 300, seed))["throughput_per_min"]
              / run_one(("mct", 300, seed))["throughput_per_min"] for seed in range(4001, 4005)]
    # The model trained where two stages sharing a GPU slow each other as Gavel measured. The
    # paper cluster's P4 and K80 speeds are the same without the Gavel file, but the co-run
    # slowdowns then come from a generated table (a similar median, 0.52 against 0.53 of a
    # stage's rate on a K80, another pattern per pair): a simulator it never saw, where its
    # corrections miss (measured 2026-12-07: mean 0.970, seeds 0.93-1.02; 1.005 with the
    # file), so the guard is looser there: no collapse, not parity.
    trained_here = CostModel().colocation is not None
    assert sum(ratios) / len(ratios) >= (0.97 if trained_here else 0.95), ratios
    assert min(ratios) >= 0.9, ratios


@pytest.mark.parametrize("argv, says", [
    (["--seeds", "a-b"], "--seeds / --lengths"),
    (["--seeds", "3001"], "at least 2 seeds"),
    (["--lengths", "0"], "burst lengths from 1"),
    (["--models", "no-such.spm"], "no such model file"),
    (["--models", "a.spm,b.spm", "--labels", "one"], "one name per --models file"),
])
def test_the_burst_benchmark_refuses_bad_arguments_before_running_anything(argv, says, capsys):
    from benchmarks.burst_lengths import main
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2 and says in capsys.readouterr().err


def test_the_burst_clusters_are_the_paper_node_types_at_other_sizes():
    from benchmarks.burst_lengths import make_cluster
    paper = make_cluster("paper")
    assert len(paper.nodes) == 11
    double = make_cluster("paper_x2")
    assert len(double.nodes) == 22 and len({n.node_id for n in double.nodes}) == 22
    assert [n.gpus for n in double.nodes[11:]] == [n.gpus for n in paper.nodes]
    assert [n.node_id for n in make_cluster("paper_first5").nodes] == \
        [f"{n.node_id}-0" for n in paper.nodes[:5]]
    assert len(make_cluster("paper_x6").nodes) == 66
    with pytest.raises(ValueError, match="unknown cluster"):
        make_cluster("paper_x3")


@pytest.mark.parametrize("worst, qualifies", [(0.96, True), (0.94, False)])
def test_an_energy_checkpoint_on_short_bursts_must_keep_the_floor_on_every_burst(
        monkeypatch, worst, qualifies):
    from benchmarks import energy_ldwp
    monkeypatch.setattr(energy_ldwp, "_tuning_run", lambda agent, rate, seed, tasks: (
        70.0 if rate is None else 29.0, 3000.0 if rate else 2500.0))
    monkeypatch.setattr(ldwp_bench, "prior_ratio_check", lambda agent, tasks, first: (
        worst, {"tuning_ratio_to_prior": {"150": worst, "300": 1.0, "1500": 1.1}}))

    class Agent:
        training = True
    score, record = energy_ldwp.energy_check(Agent(), (600, 300, 150), None)
    assert record["meets_throughput_floor"] is qualifies
    assert record["tuning_ratio_to_prior"]["150"] == worst
    assert score == (-3000.0 if qualifies else float("-inf"))
    assert Agent.training is True   # judged greedy, handed back as it was


def test_a_network_trained_with_checkpoints_keeps_the_best_one_the_pretrained_included(
        monkeypatch, tmp_path):
    """train_variant with a check (the size-agnostic file's recipe): saturated bursts of the
    pattern only, a score before the first episode and after each, and the file holds the
    best-scoring weights (here episode 1's) and says which."""
    import copy

    from placement.ldwp.modelfile import load_model
    monkeypatch.setattr(ldwp_bench, "DEMONSTRATION_TASKS", 40)
    network, settings = ldwp_bench.VARIANTS["node_scoring"]
    monkeypatch.setitem(ldwp_bench.VARIANTS, "node_scoring",
                        (network, {**settings, "learning_starts": 10}))   # learns in 30 tasks
    scores, seen = iter([0.5, 0.9, 0.7, 0.6]), []

    def scripted_check(agent, tasks, first):
        seen.append(copy.deepcopy(agent.q_network.state_dict()))
        return next(scores), {"tuning_throughput_per_min": 1.0}

    trained = ldwp_bench.train_variant(("node_scoring", True, 3, (30, 20), str(tmp_path)),
                                       check=scripted_check)
    assert [e["tasks"] for e in trained["learning"]] == [30, 20, 30]
    assert all(e["saturated"] for e in trained["learning"])
    assert trained["chosen_episode"] == 1 and len(trained["checkpoints"]) == 4
    _, meta = load_model(trained["model"])
    assert meta["checkpoint_episode"] == 1
    import torch

    from placement.ldwp.agent import LDWPPolicy
    costs, cluster = ldwp_bench._setup()
    weights = LDWPPolicy.from_file(trained["model"], cluster, costs).q_network.state_dict()
    assert all(torch.equal(weights[k], seen[1][k]) for k in weights)
    assert not all(torch.equal(weights[k], seen[2][k]) for k in weights)  # it kept learning


def test_the_energy_sweep_trains_each_lambda_as_the_shipped_file_is_trained(monkeypatch, tmp_path):
    """``--sweep`` without --episodes/--tasks: the shipped file's episodes and short bursts, and
    a checkpoint after every episode (as ``ship_models``), so its chosen lambda's file can ship."""
    from benchmarks import energy_ldwp
    from benchmarks.ship_models import episodes_of, tasks_of
    asked = {}
    monkeypatch.setattr(energy_ldwp, "sweep", lambda episodes, tasks, workers, keep: asked.update(
        episodes=episodes, tasks=tasks) or tmp_path / "sweep.json")
    energy_ldwp.main(["--sweep"])
    assert asked == {"episodes": episodes_of("energy"), "tasks": tasks_of("energy")}
    calls = []
    monkeypatch.setattr(energy_ldwp, "train_energy",
                        lambda job, check_every=None: calls.append(check_every) or {})
    energy_ldwp._train_every_episode(("residual_energy",))
    assert calls == [1]
