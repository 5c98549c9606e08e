"""Does the shipped LDWP model generalise? Clusters it never trained on, seeds it never saw.

The shipped residual model (``placement/models/ldwp_residual_paper.spm``, trained on the paper
cluster's 11 P4/K80 nodes only) against its own prior (MCT), least-loaded and Random, all with
the HEFT node scheduler; beside them the two other shipped LDWP networks: ``size_agnostic``
(zero-shot: the same weights on any cluster) and ``paper_transferred`` (the paper's network,
one output per node: moved to the cluster by ``placement.ldwp.transfer``, each new node
starting as the training node most like it, then fine-tuned online for one episode of
FINE_TUNE_TASKS tasks on a training seed, then frozen); and ``mct_drain``, MCT at drain
rates measured online (``placement.policies.mct_drain``, its default settings: chosen on the
paper cluster's tuning seeds), a rule and not a model, with its paired change over MCT. On:

- ``two_cpu_3x``: two CPU-only nodes, one three times as fast (speeds never seen in training);
- ``five_mixed_unseen_gpu``: five nodes, one with a GPU type never seen in training ("a100" at
  spec speed 8; calibrated since the MIG axis, with the reference GPU's co-location, so it runs
  exactly as it did uncalibrated), one V100 (never in training), one CPU-only;
- ``alibaba_17`` and ``alibaba_100``: 17 and 100 nodes sampled from Alibaba's GPU inventory;
- ``paper_plus_unseen_v100``: the training cluster and one node of a type it never saw (8
  cores, 64 GB, one V100). Added 2026-12-06: here the trust rule before pooling
  (``placement.ldwp.evidence``) put LDWP 16.7% behind MCT on these seeds (found with them; the
  pooled rule has no setting that was tuned);
- ``paper_training``: the training cluster itself (evaluation seeds only).

Saturated arrivals (throughput = what the cluster does flat out), 1,500 tasks, five evaluation
seeds (1001-1005; the model was trained on training seeds 11-22 and tuned on 501-506), mean and 95%
Student-t interval. The goal (issue 14): LDWP's interval's lower end at or above MCT's mean on
every unseen cluster, and ahead of MCT on the training one.

    python -m benchmarks.generalisation [--quick] [--model FILE]

Writes benchmarks/results/generalisation.json (generalisation-quick.json) and a PNG beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from benchmarks._common import RESULTS, bar_with_ci, description, write_result
from benchmarks.baselines import EVALUATION_SEEDS, confidence_interval

POLICIES = ("ldwp", "mct", "mct_drain", "least_loaded", "random", "size_agnostic",
            "paper_transferred")
#: the fine-tuning episode of the transferred paper network (a training seed, never evaluated)
FINE_TUNE_TASKS, FINE_TUNE_SEED = 1500, 150
CLUSTERS = ("two_cpu_3x", "five_mixed_unseen_gpu", "alibaba_17", "alibaba_100",
            "paper_plus_unseen_v100", "paper_training")
METRICS = ("throughput_per_min", "latency_p99_s", "gpu_utilisation")


def make_cluster(name: str):
    """The named evaluation cluster (see the module docstring)."""
    from simulator.scenarios import alibaba_cluster, paper_cluster
    from workload.model import ClusterSpec, GpuSpec, NodeSpec
    if name == "two_cpu_3x":
        return ClusterSpec((NodeSpec("cpu_slow", 8, 32), NodeSpec("cpu_fast", 8, 32,
                                                                  cpu_speed=3.0)), name=name)
    if name == "five_mixed_unseen_gpu":
        return ClusterSpec((
            NodeSpec("k80x2", 8, 32, gpus=(GpuSpec("k80", 12),) * 2),
            NodeSpec("p4x1", 4, 16, gpus=(GpuSpec("p4", 8),)),
            NodeSpec("v100x1", 8, 64, gpus=(GpuSpec("v100", 16),)),
            NodeSpec("a100x1", 8, 64, gpus=(GpuSpec("a100", 40, 8.0),)),
            NodeSpec("cpu16", 16, 64)), name=name)
    if name == "alibaba_17":
        return alibaba_cluster(17, seed=3)
    if name == "alibaba_100":
        return alibaba_cluster(100, seed=4)
    if name == "paper_plus_unseen_v100":
        base = paper_cluster()
        return ClusterSpec(base.nodes + (NodeSpec("v100-new", 8, 64, gpus=(GpuSpec("v100", 16),)),),
                           name=name)
    if name == "paper_training":
        return paper_cluster()
    raise ValueError(f"unknown cluster {name!r}; known: {', '.join(CLUSTERS)}")


def run_one(job: tuple) -> dict:
    cluster_name, policy_name, seed, tasks, model = job
    import torch
    torch.set_num_threads(1)
    from interference.schedulers import make_node_scheduler
    from placement.ldwp.agent import LDWPPolicy
    from placement.ldwp.shipped import shipped_model
    from placement.policies import make_policy
    from simulator import Simulator
    from simulator.scenarios import paper_costs, saturated_workload
    costs, cluster = paper_costs(), make_cluster(cluster_name)
    if policy_name == "ldwp":
        policy = LDWPPolicy.from_file(model, cluster, costs)
    elif policy_name == "size_agnostic":
        policy = LDWPPolicy.from_file(shipped_model("size_agnostic"), cluster, costs)
    elif policy_name == "paper_transferred":  # fine-tuned once per cluster (fine_tune)
        policy = LDWPPolicy.from_file(model, cluster, costs)
    else:
        policy = make_policy(policy_name, cluster, costs, seed=seed)
    started = time.perf_counter()
    result = Simulator(costs).run(policy, make_node_scheduler("heft", costs, seed=seed), cluster,
                                  saturated_workload(tasks, seed=seed), seed=seed)
    shares: dict[str, int] = {}
    for _, decision in result.decisions:
        shares[decision.node] = shares.get(decision.node, 0) + 1
    m = result.metrics
    return {"cluster": cluster_name, "policy": policy_name, "seed": seed,
            "wall_s": time.perf_counter() - started, "decisions_per_node": shares,
            **{k: getattr(m, k) for k in METRICS}}


def fine_tune(job: tuple) -> tuple[str, str, float]:
    """The shipped paper network moved to ``cluster_name`` and fine-tuned there (see the module
    docstring); saved under ``out_dir``. Returns (cluster, model path, seconds)."""
    cluster_name, out_dir = job
    import torch
    torch.set_num_threads(1)
    from interference.schedulers import make_node_scheduler
    from placement.ldwp.agent import LDWPPolicy
    from placement.ldwp.shipped import shipped_model
    from placement.ldwp.transfer import transfer
    from simulator import Simulator
    from simulator.scenarios import paper_cluster, paper_costs, saturated_workload
    costs, cluster, training_cluster = paper_costs(), make_cluster(cluster_name), paper_cluster()
    started = time.perf_counter()
    agent = LDWPPolicy.from_file(shipped_model("paper"), training_cluster, costs)
    if list(cluster.node_ids) != list(training_cluster.node_ids):
        agent = transfer(agent, cluster)
        agent.training = True
        Simulator(costs).run(agent, make_node_scheduler("heft", costs, seed=FINE_TUNE_SEED),
                             cluster, saturated_workload(FINE_TUNE_TASKS, seed=FINE_TUNE_SEED),
                             seed=FINE_TUNE_SEED)
    path = Path(out_dir) / f"paper-{cluster_name}.spm"
    agent.save(path, fine_tuned_on=f"{cluster_name}, saturated seed {FINE_TUNE_SEED}")
    return cluster_name, str(path), time.perf_counter() - started


def summarise(runs: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["cluster"], run["policy"]), []).append(run)
    rows = []
    for (cluster, policy), group in groups.items():
        row = {"cluster": cluster, "policy": policy, "seeds": len(group)}
        for metric in METRICS:
            mean, low, high = confidence_interval([g[metric] for g in group])
            row[metric] = {"mean": mean, "ci95": [low, high]}
        rows.append(row)
    return rows


LEARNED = ("ldwp", "size_agnostic", "paper_transferred")
#: the policies whose verdict (paired change over MCT) is given: the learned ones, and the
#: rule at measured drain rates
BESIDE_MCT = (*LEARNED, "mct_drain")


def verdicts(rows: list[dict], runs: list[dict]) -> dict:
    """Per cluster and learned model: its throughput against MCT's (its prior / teacher).

    ``goal_met`` is the issue's goal for the residual model: its interval's lower end at or
    above MCT's mean on an unseen cluster, its mean above MCT's on the training one.
    ``paired_change`` is the per-seed change over MCT on the same tasks, with its interval
    (the sharper test: both see identical work)."""
    by = {(r["cluster"], r["policy"]): r for r in rows}
    per_seed = {(r["cluster"], r["policy"], r["seed"]): r["throughput_per_min"] for r in runs}
    out: dict[str, dict] = {}
    for cluster in dict.fromkeys(r["cluster"] for r in rows):
        mct = by.get((cluster, "mct"))
        if mct is None:
            continue
        mct_mean = mct["throughput_per_min"]["mean"]
        for policy in BESIDE_MCT:
            row = by.get((cluster, policy))
            if row is None:
                continue
            mean, low = row["throughput_per_min"]["mean"], row["throughput_per_min"]["ci95"][0]
            seeds = sorted(s for (c, p, s) in per_seed if c == cluster and p == policy)
            changes = [per_seed[(cluster, policy, s)] / per_seed[(cluster, "mct", s)] - 1.0
                       for s in seeds if (cluster, "mct", s) in per_seed]
            c_mean, c_low, c_high = confidence_interval(changes)
            verdict = {"mean": mean, "ci_low": low, "mct_mean": mct_mean,
                       "change_vs_mct": mean / mct_mean - 1.0,
                       "paired_change": {"mean": c_mean, "ci95": [c_low, c_high]}}
            if policy == "ldwp":
                verdict["goal_met"] = (mean > mct_mean if cluster == "paper_training"
                                       else low >= mct_mean)
            out.setdefault(cluster, {})[policy] = verdict
    return out


def merge_reused(documents: list[tuple[str, dict]], tasks: int, seeds: list[int],
                 rerun: list[str], keep_all: bool) -> tuple[list[dict], dict[str, float | None]]:
    """The runs kept from earlier result files, and each kept cluster's fine-tuning wall time.

    ``documents`` are ``(name, result document)`` in ``--reuse`` order; the first file holding a
    (cluster, policy, seed) run wins. ``keep_all`` (``--reuse`` given) keeps every run; without
    it only the runs of policies not in ``rerun`` are kept (``--only``). The fine-tuning wall
    time of a cluster is taken from the file whose ``paper_transferred`` runs of it are kept,
    since that file's fine-tuning made the model those runs used (None where that file did not
    record it). Raises ValueError naming a file made with other tasks or seeds.

    Example::

        >>> doc = {"tasks": 300, "seeds": [1], "fine_tune": {"wall_s": {"a": 20.0}},
        ...        "runs": [{"cluster": "a", "policy": "paper_transferred", "seed": 1}]}
        >>> kept, walls = merge_reused([("g.json", doc)], 300, [1], ["mct"], keep_all=False)
        >>> len(kept), walls
        (1, {'a': 20.0})
    """
    kept: list[dict] = []
    walls: dict[str, float | None] = {}
    for name, document in documents:
        if document["tasks"] != tasks or document["seeds"] != list(seeds):
            raise ValueError(f"{name} has other tasks or seeds than this run")
        done = {(r["cluster"], r["policy"], r["seed"]) for r in kept}
        taken = [r for r in document["runs"]
                 if (r["cluster"], r["policy"], r["seed"]) not in done
                 and (keep_all or r["policy"] not in rerun)]
        recorded = (document.get("fine_tune") or {}).get("wall_s")
        for cluster in dict.fromkeys(r["cluster"] for r in taken
                                     if r["policy"] == "paper_transferred"):
            if cluster not in walls:
                walls[cluster] = recorded.get(cluster) if isinstance(recorded, dict) else None
        kept += taken
    return kept, walls


def fine_tune_walls(reused: dict[str, float | None], tuned: dict[str, float],
                    ran: set[str]) -> dict[str, float | None] | None:
    """Per cluster, the wall time of the fine-tuning whose model its ``paper_transferred`` runs
    used: this run's (``tuned``) where this run evaluated it (``ran``), else the reused file's
    (``reused``, from :func:`merge_reused`); in ``CLUSTERS`` order, None when there is none.

    Example::

        >>> fine_tune_walls({"alibaba_17": 20.0}, {"alibaba_17": 9.0, "two_cpu_3x": 3.0},
        ...                 ran={"two_cpu_3x"})
        {'two_cpu_3x': 3.0, 'alibaba_17': 20.0}
    """
    walls = {**reused, **{c: w for c, w in tuned.items() if c in ran}}
    return {c: walls[c] for c in CLUSTERS if c in walls} or None


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clusters = list(dict.fromkeys(r["cluster"] for r in rows))
    fig, axes = plt.subplots(1, len(clusters), figsize=(4 * len(clusters), 4), squeeze=False)
    axes = axes[0]
    colours = {"ldwp": "tab:red", "mct": "tab:blue", "mct_drain": "tab:cyan",
               "least_loaded": "tab:gray",
               "random": "tab:olive", "size_agnostic": "tab:orange",
               "paper_transferred": "tab:purple"}
    for ax, cluster in zip(axes, clusters):
        chosen = [r for p in POLICIES for r in rows if r["cluster"] == cluster and r["policy"] == p]
        bar_with_ci(ax, [r["policy"] for r in chosen],
                    [r["throughput_per_min"]["mean"] for r in chosen],
                    [r["throughput_per_min"]["ci95"] for r in chosen],
                    [colours[r["policy"]] for r in chosen])
        ax.set_title(cluster, fontsize=9)
        ax.set_ylabel("saturated throughput (tasks/min)")
        ax.tick_params(axis="x", labelsize=7, rotation=30)
    fig.suptitle("shipped LDWP (red) vs its prior MCT (blue), least-loaded, Random: 95% CI over "
                 "5 unseen seeds", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="300 tasks, 2 seeds")
    parser.add_argument("--model", type=Path, default=None,
                        help="model file (default: the shipped residual model)")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--only", default=None,
                        help="comma-separated policies to re-run; the others' runs are kept "
                             "from the existing result file (same tasks and seeds)")
    parser.add_argument("--reuse", default=None,
                        help="comma-separated result files whose runs (same tasks and seeds) "
                             "are kept instead of re-run; with --only the default is the "
                             "result file itself")
    parser.add_argument("--clusters", default=",".join(CLUSTERS),
                        help=f"comma-separated, from {', '.join(CLUSTERS)}")
    parser.add_argument("--name", default=None, help="result file name (default: "
                        "generalisation, or generalisation-quick)")
    args = parser.parse_args(argv)
    from tqdm import tqdm

    from placement.ldwp.shipped import shipped_model
    model = args.model or shipped_model()
    tasks, seeds = (300, EVALUATION_SEEDS[:2]) if args.quick else (1500, EVALUATION_SEEDS)
    name = args.name or ("generalisation-quick" if args.quick else "generalisation")
    policies, previous = list(POLICIES), {}
    if args.only:
        policies = [p.strip() for p in args.only.split(",") if p.strip()]
        if not policies or set(policies) - set(POLICIES):
            parser.error(f"--only takes policies from {', '.join(POLICIES)}")
    clusters = [c.strip() for c in args.clusters.split(",") if c.strip()]
    if not clusters or set(clusters) - set(CLUSTERS):
        parser.error(f"--clusters takes clusters from {', '.join(CLUSTERS)}")
    reuse = ([Path(f) for f in args.reuse.split(",") if f and f != "none"] if args.reuse
             else [RESULTS / f"{name}.json"] if args.only else [])
    documents = [(str(source), json.loads(source.read_text())) for source in reuse]
    try:
        kept, reused_walls = merge_reused(documents, tasks, list(seeds), policies,
                                          keep_all=bool(args.reuse))
    except ValueError as error:
        parser.error(str(error))
    if documents:
        previous = documents[-1][1]
    done = {(r["cluster"], r["policy"], r["seed"]) for r in kept}
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool, \
            tempfile.TemporaryDirectory(prefix="generalisation-") as tmp:
        todo = [(cluster, policy, seed) for cluster in clusters for policy in policies
                for seed in seeds if (cluster, policy, seed) not in done]
        tuned = ({c: (path, wall) for c, path, wall in pool.map(
            fine_tune, [(c, tmp) for c in clusters])}
            if any(p == "paper_transferred" for _, p, _ in todo) else {})
        jobs = [(cluster, policy, seed, tasks,
                 tuned[cluster][0] if policy == "paper_transferred" else str(model))
                for cluster, policy, seed in todo]
        runs = kept + list(tqdm(pool.map(run_one, jobs), total=len(jobs),
                                desc="generalisation", unit="run", disable=None))
    runs.sort(key=lambda r: (CLUSTERS.index(r["cluster"]), POLICIES.index(r["policy"]),
                             r["seed"]))
    rows = summarise(runs)
    checks = verdicts(rows, runs)
    fine_tune_wall = fine_tune_walls(reused_walls, {c: w for c, (_, w) in tuned.items()},
                                     {c for c, p, _ in todo if p == "paper_transferred"})
    path = write_result(name, {
        "model": model.name, "tasks": tasks, "seeds": list(seeds), "node_scheduler": "heft",
        "clusters": {c: [n.node_id for n in make_cluster(c).nodes] for c in CLUSTERS},
        "fine_tune": {"tasks": FINE_TUNE_TASKS, "seed": FINE_TUNE_SEED,
                      "wall_s": fine_tune_wall},
        "wall_s": time.perf_counter() - started,
        "reused": {"files": [str(f.name) for f in reuse], "runs": len(kept),
                   "last_git_commit": previous.get("git_commit")} if reuse else None,
        "verdicts": checks, "summary": rows,
        "runs": runs})
    plot(rows, RESULTS / f"{name}.png")
    print(f"{len(runs)} runs; wrote {path}")
    for cluster, by_policy in checks.items():
        for policy, v in by_policy.items():
            paired = v["paired_change"]
            print(f"  {cluster:22s} {policy:18s} {v['mean']:6.1f} (CI low {v['ci_low']:6.1f}) vs "
                  f"MCT {v['mct_mean']:6.1f}: {100 * paired['mean']:+5.1f}% "
                  f"[{100 * paired['ci95'][0]:+.1f}, {100 * paired['ci95'][1]:+.1f}] per seed"
                  + (f"  goal {'met' if v['goal_met'] else 'NOT met'}" if "goal_met" in v
                     else ""))


if __name__ == "__main__":
    main()
