"""LDWP model files against their prior (MCT) on saturated bursts of every length.

    python -m benchmarks.burst_lengths                              # the shipped residual model
    python -m benchmarks.burst_lengths --models A.spm,B.spm --seeds 3001-3010
    python -m benchmarks.burst_lengths --cluster paper_x2 --name burst_lengths-paper_x2

The simulated paper cluster (11 P4/K80 nodes, HEFT on every node, as
``benchmarks.paper_setting``), saturated arrivals: a burst of N tasks arrives within a few
seconds per hundred tasks, and throughput is N over the time until the last one completes. A
cluster policy decides each task when it arrives and never moves it, so the length of the burst
changes what a good decision is: a node loaded early is only made up for by later tasks.
Per burst length and model: its throughput over MCT's on the same tasks, per seed, with the
mean and a 95% Student-t interval over the seeds. The default seeds (3001-3010) were never used
to train, tune or choose a model. ``--cluster`` runs the same on clusters of the paper's node
types at other sizes (:data:`CLUSTERS`): the model learned its correction per node type, so
these test whether it carries to more or fewer nodes of those types.

Writes benchmarks/results/burst_lengths.json and a PNG beside it.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from benchmarks._common import RESULTS, description, write_result
from benchmarks.baselines import confidence_interval

#: tasks per burst
LENGTHS = (150, 300, 600, 1000, 1500)
#: seeds never used to train, tune or choose a shipped model
SEEDS = tuple(range(3001, 3011))
#: name -> (the paper cluster's nodes repeated this many times, or None, then the first this many)
CLUSTERS = {"paper": (1, None), "paper_x2": (2, None), "paper_x6": (6, None),
            "paper_first5": (1, 5)}

__all__ = ["LENGTHS", "SEEDS", "CLUSTERS", "make_cluster", "run_one", "changes",
           "parse_seeds", "main"]


def make_cluster(name: str):
    """The paper cluster (11 P4/K80 nodes), repeated or cut as :data:`CLUSTERS` says."""
    import dataclasses

    from simulator.scenarios import paper_cluster
    from workload.model import ClusterSpec
    if name not in CLUSTERS:
        raise ValueError(f"unknown cluster {name!r}; known: {', '.join(CLUSTERS)}")
    copies, first = CLUSTERS[name]
    base = paper_cluster()
    if copies == 1 and first is None:
        return base
    nodes = tuple(dataclasses.replace(node, node_id=f"{node.node_id}-{copy}")
                  for copy in range(copies) for node in base.nodes)
    return ClusterSpec(nodes[:first] if first else nodes, name=name)


def run_one(job: tuple) -> dict:
    """One (policy, burst length, seed[, cluster]) run; ``policy`` is "mct" or a model file's
    path; the cluster is "paper" unless named."""
    policy_name, tasks, seed = job[:3]
    cluster_name = job[3] if len(job) > 3 else "paper"
    import torch
    torch.set_num_threads(1)
    from benchmarks.ldwp import simulate
    from placement.ldwp.agent import LDWPPolicy
    from placement.policies import make_policy
    from simulator.scenarios import paper_costs
    costs, cluster = paper_costs(), make_cluster(cluster_name)
    policy = (make_policy("mct", cluster, costs) if policy_name == "mct"
              else LDWPPolicy.from_file(policy_name, cluster, costs))
    metrics = simulate(policy, costs, cluster, tasks, seed).metrics
    return {"policy": policy_name, "cluster": cluster_name, "tasks": tasks, "seed": seed,
            "throughput_per_min": metrics.throughput_per_min}


def changes(runs: list[dict], policy: str, tasks: int) -> dict:
    """``policy``'s throughput over MCT's on the same seed and burst, minus 1: per seed, the
    mean and its 95% interval."""
    by = {(r["policy"], r["tasks"], r["seed"]): r["throughput_per_min"] for r in runs}
    seeds = sorted(s for (p, n, s) in by if p == policy and n == tasks)
    values = [by[(policy, tasks, s)] / by[("mct", tasks, s)] - 1.0 for s in seeds]
    mean, low, high = confidence_interval(values)
    return {"mean": mean, "ci95": [low, high], "worst": min(values), "per_seed": values}


def plot(summary: list[dict], path: Path, cluster: str = "paper") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    fig, ax = plt.subplots(figsize=(7, 4))
    for model in dict.fromkeys(row["model"] for row in summary):
        rows = [r for r in summary if r["model"] == model]
        x = [r["tasks"] for r in rows]
        line, = ax.plot(x, [100 * r["change"]["mean"] for r in rows], marker="o", label=model)
        ax.fill_between(x, [100 * r["change"]["ci95"][0] for r in rows],
                        [100 * r["change"]["ci95"][1] for r in rows], alpha=0.2,
                        color=line.get_color())
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xticks(sorted({r["tasks"] for r in summary}),
                  [str(n) for n in sorted({r["tasks"] for r in summary})])
    ax.set_xlabel("tasks in the saturated burst")
    ax.set_ylabel("throughput over MCT's (%)")
    ax.set_title(f"LDWP over its prior (MCT), {cluster} cluster + HEFT, 95% CI over seeds",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def parse_seeds(text: str) -> tuple[int, ...]:
    """Seeds from a range (``3001-3010``) or a comma-separated list (``5,7``); ValueError
    for anything else."""
    if "-" in text:
        first, last = (int(part) for part in text.split("-", 1))
        return tuple(range(first, last + 1))
    return tuple(int(part) for part in text.split(",") if part.strip())


def main(argv=None) -> None:
    from tqdm import tqdm

    from placement.ldwp.shipped import shipped_model
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--models", default="",
                        help="comma-separated model files (default: the shipped residual model)")
    parser.add_argument("--labels", default="",
                        help="comma-separated names for --models in the table and plot")
    parser.add_argument("--seeds", default=f"{SEEDS[0]}-{SEEDS[-1]}",
                        help="seeds, 'first-last' or comma-separated")
    parser.add_argument("--lengths", default=",".join(str(n) for n in LENGTHS),
                        help="tasks per burst, comma-separated")
    parser.add_argument("--cluster", default="paper", choices=sorted(CLUSTERS),
                        help="the paper cluster or its node types at another size")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--name", default="burst_lengths", help="result file's name")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()] or [
        str(shipped_model("residual"))]
    labels = [x.strip() for x in args.labels.split(",") if x.strip()] or [
        Path(m).stem for m in models]
    if len(labels) != len(models):
        parser.error("--labels needs one name per --models file")
    missing = [m for m in models if not Path(m).is_file()]
    if missing:
        parser.error(f"no such model file: {', '.join(missing)}")
    try:
        seeds = parse_seeds(args.seeds)
        lengths = [int(n) for n in args.lengths.split(",") if n.strip()]
    except ValueError as error:
        parser.error(f"--seeds / --lengths: {error}")
    if len(seeds) < 2 or not lengths or min(lengths) < 1 or max(lengths) > 100_000:
        parser.error("need at least 2 seeds and burst lengths from 1 to 100,000 tasks")
    started = time.perf_counter()
    jobs = [(p, n, s, args.cluster) for p in ("mct", *models) for n in lengths for s in seeds]
    with ProcessPoolExecutor(args.workers) as pool:
        runs = list(tqdm(pool.map(run_one, jobs), total=len(jobs), desc="burst runs",
                         unit="run", disable=None))
    summary = []
    for model, label in zip(models, labels):
        for n in lengths:
            mct = statistics.fmean(r["throughput_per_min"] for r in runs
                                   if r["policy"] == "mct" and r["tasks"] == n)
            summary.append({"model": label, "tasks": n, "mct_throughput_per_min": mct,
                            "change": changes(runs, model, n)})
    files = {label: {"file": Path(m).name,
                     "sha256": hashlib.sha256(Path(m).read_bytes()).hexdigest()}
             for m, label in zip(models, labels)}
    path = write_result(args.name, {"models": files, "seeds": list(seeds),
                                    "cluster": args.cluster,
                                    "nodes": len(make_cluster(args.cluster).nodes),
                                    "lengths": lengths, "node_scheduler": "heft",
                                    "summary": summary, "runs": runs,
                                    "wall_s": time.perf_counter() - started})
    plot(summary, RESULTS / f"{args.name}.png", args.cluster)
    print(f"wrote {path}")
    for row in summary:
        c = row["change"]
        print(f"  {row['model']:24s} {row['tasks']:5d} tasks: {100 * c['mean']:+.1f}% "
              f"[{100 * c['ci95'][0]:+.1f}, {100 * c['ci95'][1]:+.1f}] over MCT "
              f"({row['mct_throughput_per_min']:.1f}/min), worst seed {100 * c['worst']:+.1f}%")


if __name__ == "__main__":
    main()
