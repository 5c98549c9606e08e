"""The shipped model files and the benchmarks that judge them: hand-written run tables."""

from __future__ import annotations

import pytest

from benchmarks.generalisation import make_cluster, verdicts
from benchmarks.paper_setting import gains


def _run(cluster, policy, seed, throughput):
    return {"cluster": cluster, "policy": policy, "seed": seed, "throughput_per_min": throughput}


def _row(cluster, policy, mean, low):
    return {"cluster": cluster, "policy": policy, "throughput_per_min": {"mean": mean,
                                                                         "ci95": [low, 0.0]}}


def test_paper_setting_gain_is_per_seed_over_the_mean_of_the_three_paper_baselines():
    runs = []
    for seed, (random, etc, pats, ours) in {1: (50, 70, 90, 84), 2: (40, 80, 60, 72)}.items():
        for system, value in (("Random", random), ("ETC", etc), ("PATS", pats),
                              ("LDWP+HEFT", ours)):
            runs.append({"system": system, "seed": seed, "throughput_per_min": value})
    g = gains(runs, "LDWP+HEFT", "throughput_per_min")
    assert g["per_seed"] == pytest.approx([84 / 70 - 1, 72 / 60 - 1])
    assert g["mean"] == pytest.approx(0.2)


@pytest.mark.parametrize("cluster, ldwp, mct, goal", [
    ("alibaba_17", [(100, 95)], [(98, 97)], False),          # interval's low end below MCT
    ("alibaba_17", [(100, 99)], [(98, 97)], True),
    ("paper_training", [(81, 70)], [(77, 75)], True),        # the training cluster: mean above
    ("paper_training", [(76, 75)], [(77, 75)], False),
])
def test_the_goal_is_the_interval_against_mct_on_unseen_clusters_and_the_mean_on_training(
        cluster, ldwp, mct, goal):
    rows = [_row(cluster, "ldwp", *ldwp[0]), _row(cluster, "mct", *mct[0])]
    runs = [_run(cluster, "ldwp", 1, 10.0), _run(cluster, "mct", 1, 8.0),
            _run(cluster, "ldwp", 2, 9.0), _run(cluster, "mct", 2, 10.0)]
    v = verdicts(rows, runs)[cluster]["ldwp"]
    assert v["goal_met"] is goal
    assert v["paired_change"]["mean"] == pytest.approx((10 / 8 + 9 / 10) / 2 - 1)


def test_verdicts_cover_every_learned_model_but_only_judge_the_residual_one():
    rows = [_row("x", p, 10.0, 9.0) for p in ("ldwp", "mct", "size_agnostic", "random")]
    runs = [_run("x", p, 1, 10.0) for p in ("ldwp", "mct", "size_agnostic")]
    v = verdicts(rows, runs)["x"]
    assert set(v) == {"ldwp", "size_agnostic"} and "goal_met" not in v["size_agnostic"]


def test_generalisation_clusters_are_the_ones_the_issue_names():
    assert [n.cpu_speed for n in make_cluster("two_cpu_3x").nodes] == [1.0, 3.0]
    assert len(make_cluster("alibaba_17").nodes) == 17
    assert len(make_cluster("alibaba_100").nodes) == 100
    five = make_cluster("five_mixed_unseen_gpu")
    assert {g.model for n in five.nodes for g in n.gpus} == {"k80", "p4", "v100", "a100"}
    plus = make_cluster("paper_plus_unseen_v100")   # the training cluster and one unseen type
    assert plus.node_ids[:-1] == make_cluster("paper_training").node_ids
    assert [g.model for g in plus.nodes[-1].gpus] == ["v100"]
    with pytest.raises(ValueError, match="unknown cluster"):
        make_cluster("nope")


def test_training_data_hash_is_reproducible_and_tells_models_apart():
    from benchmarks.ship_models import training_data_hash
    first = training_data_hash("residual", 2, 50)
    assert first == training_data_hash("residual", 2, 50)
    assert first != training_data_hash("residual", 3, 50)
    assert first != training_data_hash("paper", 2, 50)  # other workloads (unsaturated episodes)
    # the energy variant's checkpoints also see the tuning seeds at 30 tasks/min
    assert first != training_data_hash("residual_energy", 2, 50)
    assert len(first) == 64 and int(first, 16) >= 0


@pytest.mark.parametrize("model", ["matrix_factorization", "paper_ncf"])
@pytest.mark.parametrize("gpu", ["k80", "p100", "v100"])
def test_every_shipped_interference_model_loads_with_its_provenance(model, gpu):
    import numpy as np

    from interference.ncf.shipped import load_shipped_ncf
    fitted, meta = load_shipped_ncf(model, gpu)
    completed = fitted.complete()
    assert completed.shape == (len(meta["jobs"]), len(meta["jobs"]))
    assert np.isfinite(completed).all() and completed.min() > -0.5 and completed.max() < 1.5
    assert meta["command"] == "python -m benchmarks.ship_models --models ncf"
    assert meta["gpu_type"] == gpu and len(meta["training_data_sha256"]) == 64
    assert "/work/" not in meta["source"]  # no machine's path in a shipped file


def test_an_unknown_shipped_interference_model_names_what_ships():
    from interference.ncf.shipped import shipped_ncf_model
    with pytest.raises(ValueError, match="paper_ncf"):
        shipped_ncf_model("paper_ncf", "h100")


@pytest.mark.parametrize("name", ["residual", "size_agnostic", "paper", "energy"])
def test_every_shipped_ldwp_model_loads_and_names_how_to_rebuild_it(name):
    from benchmarks.ship_models import SHORT_BURSTS, episodes_of, ship_metadata
    from placement.ldwp.agent import LDWPPolicy
    from placement.ldwp.modelfile import load_model
    from placement.ldwp.shipped import shipped_model
    from simulator.scenarios import paper_cluster, paper_costs
    path = shipped_model(name)
    _, meta = load_model(path)
    assert meta["command"] == f"python -m benchmarks.ship_models --models {name}"
    assert meta["shipped_as"] == name and len(meta["training_data_sha256"]) == 64
    assert meta["training_seeds"] == [10, 10 + episodes_of(name)]
    # Every file says what it learned from, as computed today (all rebuilt 2026-12-05). They
    # were trained on the real Gavel table: where the data folder is missing the simulator runs
    # on a generated table, which the hash tells apart.
    from workload.traces.gavel import load_or_generate_colocation
    real_table = not load_or_generate_colocation().source.startswith("generated")
    computed = ship_metadata(name)["training_data_sha256"]
    assert (meta["training_data_sha256"] == computed) == real_table
    if name in SHORT_BURSTS:
        assert meta["episode_tasks"] == [600, 300, 150]
    assert path.stat().st_size < 512 * 1024   # small enough to ship in the wheel
    agent = LDWPPolicy.from_file(path, paper_cluster(), paper_costs())
    assert agent.settings.network == ("paper" if name == "paper" else "node_scoring")


def test_the_training_data_hash_names_the_data_not_the_folder_it_was_read_from(monkeypatch):
    """CI's checkout reads the same Gavel file from another folder: the same hash (the run of
    2026-12-05 failed on this when the table's ``source`` path went into the hash)."""
    import dataclasses

    import workload.traces.gavel as gavel
    from benchmarks.ship_models import training_data_hash
    table = gavel.load_or_generate_colocation()
    hashes = []
    for source in ("/work/shared/data/gavel/simulation_throughputs.json",
                   "/check/elsewhere/simulation_throughputs.json"):
        monkeypatch.setattr(gavel, "load_or_generate_colocation",
                            lambda source=source: dataclasses.replace(table, source=source))
        hashes.append(training_data_hash("node_scoring", 1, 10))
    doubled = {gpu: {job: 2 * value for job, value in jobs.items()}
               for gpu, jobs in table.isolated.items()}
    scaled = dataclasses.replace(table, isolated=doubled)
    monkeypatch.setattr(gavel, "load_or_generate_colocation", lambda: scaled)
    assert hashes[0] == hashes[1] != training_data_hash("node_scoring", 1, 10)


def test_the_shipped_interference_models_are_what_their_command_builds_today():
    """Seconds to rebuild: the files of 2026-12-02 had drifted from what the code built,
    unnoticed, until 2026-12-05. The same metadata and, where another torch build changed the
    last bits, a completion within the check's tolerances. With the real Gavel table only
    (without it the generated table gives other files, which their recorded data hash tells
    apart)."""
    from benchmarks.ship_models import check
    from interference.ncf.shipped import SHIPPED_GPU_TYPES, SHIPPED_NCF_MODELS, shipped_ncf_model
    from workload.traces.gavel import load_or_generate_colocation
    real_table = not load_or_generate_colocation().source.startswith("generated")
    every_file = sorted(str(shipped_ncf_model(m, g)) for m in SHIPPED_NCF_MODELS
                        for g in SHIPPED_GPU_TYPES)
    assert len(every_file) == 6
    checks = check(["ncf"])
    assert sorted(c.path for c in checks) == every_file
    assert sorted(c.path for c in checks if c.problem) == ([] if real_table else every_file)


def test_the_check_command_names_a_shipped_file_that_is_not_what_its_command_builds(
        monkeypatch, tmp_path, capsys):
    """``ship_models --check --models ncf``: passes on the shipped files, and names a file
    with one byte changed (exit 1). With the real Gavel table only (see above)."""
    import shutil

    import interference.ncf.shipped as shipped
    from benchmarks.ship_models import main
    from workload.traces.gavel import load_or_generate_colocation
    if load_or_generate_colocation().source.startswith("generated"):
        with pytest.raises(SystemExit):   # the generated table builds other files
            main(["--check", "--models", "ncf"])
        return
    main(["--check", "--models", "ncf"])
    assert "every checked file (ncf)" in capsys.readouterr().out
    edited = tmp_path / "paper_ncf_k80.spncf"
    shutil.copyfile(shipped.shipped_ncf_model("paper_ncf", "k80"), edited)
    data = bytearray(edited.read_bytes())
    data[-40] ^= 1
    edited.write_bytes(bytes(data))
    real = shipped.shipped_ncf_model
    monkeypatch.setattr(shipped, "shipped_ncf_model", lambda model, gpu: edited if (
        model, gpu) == ("paper_ncf", "k80") else real(model, gpu))
    with pytest.raises(SystemExit) as stop:
        main(["--check", "--models", "ncf"])
    assert stop.value.code == 1
    assert capsys.readouterr().out.strip().startswith(
        f"differs from its rebuild: {edited} (unreadable: ")


@pytest.mark.parametrize("argv", [
    ["--models", "residual", "--learning-trust-rule", "pooled"],            # no --out
    ["--models", "energy", "--learning-trust-rule", "pooled", "--out", "x.spm"],
    ["--models", "residual", "--learning-trust-rule", "median", "--out", "x.spm"],
])
def test_the_learning_rule_experiment_never_overwrites_a_shipped_file(argv):
    """Training while acting on another trust rule is an experiment: it needs an output file of
    its own, the residual model, and a rule that exists (argparse exits 2 before training)."""
    from benchmarks.ship_models import main
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2


def test_the_learning_rule_experiment_refuses_the_shipped_path():
    from benchmarks.ship_models import SHIPPED_RESIDUAL, main, ship
    with pytest.raises(SystemExit) as stop:
        main(["--models", "residual", "--learning-trust-rule", "pooled",
              "--out", str(SHIPPED_RESIDUAL)])
    assert stop.value.code == 2
    with pytest.raises(ValueError, match="experiment"):
        ship("energy", out=SHIPPED_RESIDUAL.with_name("x.spm"), learning_trust_rule="pooled")


def test_the_experiment_file_says_how_it_was_trained():
    """benchmarks/results/models/ldwp_residual_trained_pooled.spm (README: "Trained models that
    ship"): its header names the rule and the command that rebuilds it."""
    from pathlib import Path

    from placement.ldwp.modelfile import load_model
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "models" / \
        "ldwp_residual_trained_pooled.spm"
    _, metadata = load_model(path)
    assert metadata["settings"]["learning_trust_rule"] == "pooled"
    assert "--learning-trust-rule pooled" in metadata["command"]


def _fitted_matrix_factorization(path, shift: float = 0.0, seed_note: int = 0):
    """A small fitted matrix factorisation saved to ``path``, its first embedding moved by
    ``shift`` (the same metadata), recorded with ``seed_note``."""
    import numpy as np
    import torch

    from interference.ncf import make_completion_model
    from interference.ncf.modelfile import save_completion_model
    rng = np.random.default_rng(0)
    matrix = rng.uniform(0.2, 0.9, size=(6, 5))
    mask = rng.uniform(size=matrix.shape) < 0.7
    model = make_completion_model("matrix_factorization").fit(
        np.where(mask, matrix, np.nan), mask, seed=0)
    with torch.no_grad():
        next(model.network.parameters()).add_(shift)
    save_completion_model(path, model, {"seed": seed_note})
    return path.read_bytes()


@pytest.mark.parametrize("shift, seed_note, problem", [
    (0.0, 0, None),                  # the same model: nothing to say
    (1e-6, 0, None),                 # last bits, as another torch build gives
    (0.5, 0, "completion"),          # other weights under the same metadata
    (0.0, 1, "other metadata (metadata)"),   # another recorded seed
])
def test_a_rebuilt_interference_model_is_judged_by_its_metadata_and_completion(
        tmp_path, shift, seed_note, problem):
    from benchmarks.ship_models import ncf_rebuild_problem
    rebuilt = _fitted_matrix_factorization(tmp_path / "rebuilt.spncf")
    shipped = _fitted_matrix_factorization(tmp_path / "shipped.spncf", shift, seed_note)
    found = ncf_rebuild_problem(rebuilt, shipped)
    assert (found is None) if problem is None else found.startswith(problem)


def test_a_damaged_shipped_interference_model_is_named_unreadable(tmp_path):
    from benchmarks.ship_models import ncf_rebuild_problem
    rebuilt = _fitted_matrix_factorization(tmp_path / "rebuilt.spncf")
    damaged = bytearray(rebuilt)
    damaged[len(damaged) // 2] ^= 0x10
    assert ncf_rebuild_problem(rebuilt, bytes(damaged)).startswith("unreadable: ")
