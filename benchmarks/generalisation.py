"""Does the shipped LDWP model generalise? Clusters it never trained on, seeds it never saw.

The shipped residual model (``placement/models/ldwp_residual_paper.spm``, trained on the paper
cluster's 11 P4/K80 nodes only) against its own prior (MCT), least-loaded and Random, all with
the HEFT node scheduler, on:

- ``two_cpu_3x``: two CPU-only nodes, one three times as fast (speeds never seen in training);
- ``five_mixed_unseen_gpu``: five nodes, one with a GPU type the calibration does not know
  ("a100" at spec speed 8), one V100 (never in training), one CPU-only;
- ``alibaba_17`` and ``alibaba_100``: 17 and 100 nodes sampled from Alibaba's GPU inventory;
- ``paper_training``: the training cluster itself (evaluation seeds only).

Saturated arrivals (throughput = what the cluster does flat out), 1,500 tasks, five evaluation
seeds (1001-1005; the model was trained on seeds 10-18 and tuned on 501-502), mean and 95%
Student-t interval. The goal (issue 14): LDWP's interval's lower end at or above MCT's mean on
every unseen cluster, and ahead of MCT on the training one.

    python -m benchmarks.generalisation [--quick] [--model FILE]

Writes benchmarks/results/generalisation.json (generalisation-quick.json) and a PNG beside it.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from benchmarks._common import RESULTS, write_result
from benchmarks.baselines import EVALUATION_SEEDS, confidence_interval

POLICIES = ("ldwp", "mct", "least_loaded", "random")
CLUSTERS = ("two_cpu_3x", "five_mixed_unseen_gpu", "alibaba_17", "alibaba_100",
            "paper_training")
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
    if name == "paper_training":
        return paper_cluster()
    raise ValueError(f"unknown cluster {name!r}; known: {', '.join(CLUSTERS)}")


def run_one(job: tuple) -> dict:
    cluster_name, policy_name, seed, tasks, model = job
    import torch
    torch.set_num_threads(1)
    from interference.schedulers import make_node_scheduler
    from placement.policies import make_policy
    from simulator import Simulator
    from simulator.scenarios import paper_costs, saturated_workload
    costs, cluster = paper_costs(), make_cluster(cluster_name)
    if policy_name == "ldwp":
        from placement.ldwp.agent import LDWPPolicy
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


def verdicts(rows: list[dict]) -> dict:
    """Per cluster: LDWP's throughput interval against MCT's mean (the issue's goal)."""
    by = {(r["cluster"], r["policy"]): r for r in rows}
    out = {}
    for cluster in dict.fromkeys(r["cluster"] for r in rows):
        ldwp, mct = by.get((cluster, "ldwp")), by.get((cluster, "mct"))
        if ldwp is None or mct is None:
            continue
        low = ldwp["throughput_per_min"]["ci95"][0]
        mct_mean = mct["throughput_per_min"]["mean"]
        ldwp_mean = ldwp["throughput_per_min"]["mean"]
        out[cluster] = {"ldwp_mean": ldwp_mean, "ldwp_ci_low": low, "mct_mean": mct_mean,
                        "change_vs_mct": ldwp_mean / mct_mean - 1.0,
                        "goal_met": (ldwp_mean > mct_mean) if cluster == "paper_training"
                        else low >= mct_mean}
    return out


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clusters = list(dict.fromkeys(r["cluster"] for r in rows))
    fig, axes = plt.subplots(1, len(clusters), figsize=(4 * len(clusters), 4))
    colours = {"ldwp": "tab:red", "mct": "tab:blue", "least_loaded": "tab:gray",
               "random": "tab:olive"}
    for ax, cluster in zip(axes, clusters):
        chosen = [r for p in POLICIES for r in rows if r["cluster"] == cluster and r["policy"] == p]
        means = [r["throughput_per_min"]["mean"] for r in chosen]
        errors = [[m - r["throughput_per_min"]["ci95"][0] for m, r in zip(means, chosen)],
                  [r["throughput_per_min"]["ci95"][1] - m for m, r in zip(means, chosen)]]
        ax.bar([r["policy"] for r in chosen], means, yerr=errors,
               color=[colours[r["policy"]] for r in chosen])
        ax.set_title(cluster, fontsize=9)
        ax.set_ylabel("saturated throughput (tasks/min)")
        ax.tick_params(axis="x", labelsize=7, rotation=30)
    fig.suptitle("shipped LDWP (red) vs its prior MCT (blue), least-loaded, Random: 95% CI over "
                 "5 unseen seeds", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 tasks, 2 seeds")
    parser.add_argument("--model", type=Path, default=None,
                        help="model file (default: the shipped residual model)")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args(argv)
    from tqdm import tqdm

    from placement.ldwp.shipped import shipped_model
    model = args.model or shipped_model()
    tasks, seeds = (300, EVALUATION_SEEDS[:2]) if args.quick else (1500, EVALUATION_SEEDS)
    jobs = [(cluster, policy, seed, tasks, str(model)) for cluster in CLUSTERS
            for policy in POLICIES for seed in seeds]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        runs = list(tqdm(pool.map(run_one, jobs), total=len(jobs), desc="generalisation",
                         unit="run", disable=None))
    rows = summarise(runs)
    checks = verdicts(rows)
    name = "generalisation-quick" if args.quick else "generalisation"
    path = write_result(name, {
        "model": model.name, "tasks": tasks, "seeds": list(seeds), "node_scheduler": "heft",
        "clusters": {c: [n.node_id for n in make_cluster(c).nodes] for c in CLUSTERS},
        "wall_s": time.perf_counter() - started, "verdicts": checks, "summary": rows,
        "runs": runs})
    plot(rows, RESULTS / f"{name}.png")
    print(f"{len(runs)} runs; wrote {path}")
    for cluster, v in checks.items():
        print(f"  {cluster:24s} LDWP {v['ldwp_mean']:6.1f} (CI low {v['ldwp_ci_low']:6.1f}) vs "
              f"MCT {v['mct_mean']:6.1f}: {100 * v['change_vs_mct']:+5.1f}%  "
              f"goal {'met' if v['goal_met'] else 'NOT met'}")


if __name__ == "__main__":
    main()
