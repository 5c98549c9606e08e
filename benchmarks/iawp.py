"""IAWP (the paper's rules, and our slowdown-aware variant) against FCFS, PATS and HEFT, under
the same cluster policy (MCT/ETC), on the frozen paper scenarios and evaluation seeds.

    python -m benchmarks.iawp [--quick]

Reports GPU utilisation beside throughput, p99 latency and useful work per GPU-second, as the
benchmark rules ask, with 95% intervals over the seeds. Writes benchmarks/results/iawp.json and
a PNG beside it.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor

from benchmarks._common import RESULTS, description, write_result
from benchmarks.baselines import EVALUATION_SEEDS, confidence_interval

SCHEDULERS = (("FCFS", "fcfs", {}), ("PATS", "pats", {}), ("HEFT", "heft", {}),
              ("IAWP (paper rules)", "iawp", {}),
              ("IAWP slowdown-aware (ours)", "iawp", {"interference": "slowdown"}))
METRICS = ("throughput_per_min", "gpu_utilisation", "latency_p99_s",
           "useful_gpu_work_per_gpu_second", "oom_failures")


def run_one(job: tuple) -> dict:
    label, name, settings, rate, seed, tasks = job
    import torch
    torch.set_num_threads(1)
    from interference.schedulers import make_node_scheduler
    from placement.policies import make_policy
    from simulator import Simulator
    from simulator.scenarios import paper_cluster, paper_costs, paper_workload, saturated_workload
    costs, cluster = paper_costs(), paper_cluster()
    workload = (saturated_workload(tasks, seed=seed) if rate is None
                else paper_workload(rate, tasks, seed=seed))
    scheduler = make_node_scheduler(name, costs, seed=seed, **settings)
    started = time.perf_counter()
    m = Simulator(costs).run(make_policy("mct", cluster, costs, seed=seed), scheduler, cluster,
                             workload, seed=seed).metrics
    return {"scheduler": label, "rate": rate, "seed": seed, "wall_s": time.perf_counter() - started,
            "corun_observations": getattr(scheduler, "observed", 0),
            **{k: getattr(m, k) for k in METRICS}}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args(argv)
    from tqdm import tqdm
    tasks, seeds = (300, EVALUATION_SEEDS[:2]) if args.quick else (1500, EVALUATION_SEEDS)
    rates = [50, None]
    jobs = [(label, name, settings, rate, seed, tasks) for label, name, settings in SCHEDULERS
            for rate in rates for seed in seeds]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        runs = list(tqdm(pool.map(run_one, jobs), total=len(jobs), desc="simulations", unit="run"))
    summary = []
    for label, _, _ in SCHEDULERS:
        for rate in rates:
            group = [r for r in runs if r["scheduler"] == label and r["rate"] == rate]
            row = {"scheduler": label, "rate": rate}
            for metric in METRICS:
                mean, low, high = confidence_interval([g[metric] for g in group])
                row[metric] = {"mean": mean, "ci95": [low, high]}
            summary.append(row)
    name = "iawp-quick" if args.quick else "iawp"
    path = write_result(name, {"cluster_policy": "mct", "tasks": tasks, "seeds": list(seeds),
                               "rates": rates, "wall_s": time.perf_counter() - started,
                               "summary": summary, "runs": runs})

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 3, figsize=(16, 7))
    for r, rate in enumerate(rates):
        rows = [s for s in summary if s["rate"] == rate]
        for c, metric in enumerate(("throughput_per_min", "gpu_utilisation", "latency_p99_s")):
            ax = axes[r][c]
            means = [x[metric]["mean"] for x in rows]
            errors = [m - x[metric]["ci95"][0] for m, x in zip(means, rows)]
            ax.barh([x["scheduler"] for x in rows], means, xerr=errors,
                    color=["tab:gray"] * 3 + ["tab:blue", "tab:green"])
            ax.set_title(f"{metric} ({'saturated' if rate is None else f'{rate}/min'}, 95% CI)",
                         fontsize=9)
            ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / f"{name}.png", dpi=110)
    print(f"wrote {path}")
    for row in summary:
        print(f"{row['scheduler']:28s} {'sat' if row['rate'] is None else row['rate']!s:>4} "
              + "  ".join(f"{m} {row[m]['mean']:.3f}" for m in METRICS))


if __name__ == "__main__":
    main()
