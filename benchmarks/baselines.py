"""Every baseline (cluster policy, node scheduler) pair on identical simulated work.

Scenarios:
- the paper's setting: 11 workers of the paper's node types, the three applications in equal
  mix, 1,500 tasks, Poisson arrivals swept over 10-60 tasks/min, plus a saturated run;
- an Alibaba-derived cluster (16 GPU nodes sampled from the v2023 inventory) fed by the real
  Alibaba GenAI request arrival process (bursty), time-compressed to a target mean rate.

Each pair runs on the same tasks for every seed; results report the mean and a 95% confidence
interval (Student t) over the seeds, beside the upper bound and the greedy oracle. These seeds
(EVALUATION_SEEDS) are for evaluation only: learned policies must be trained and tuned on
others.

    python -m benchmarks.baselines            # full run (a few minutes on 2 cores)
    python -m benchmarks.baselines --quick    # reduced run

Writes benchmarks/results/baselines.json (baselines-quick.json with --quick) and a PNG beside it.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor

from benchmarks._common import RESULTS, description, write_result

EVALUATION_SEEDS = (1001, 1002, 1003, 1004, 1005)

#: (label, cluster policy, node scheduler). The first three are the paper's baselines.
PAIRS = (
    ("Random", "random", "fcfs"),
    ("ETC", "mct", "mct"),
    ("PATS", "mct", "pats"),
    ("RoundRobin+FCFS", "round_robin", "fcfs"),
    ("WeightedRR+FCFS", "weighted_round_robin", "fcfs"),
    ("LeastLoaded+FCFS", "least_loaded", "fcfs"),
    ("LeastOutstanding+FCFS", "least_outstanding", "fcfs"),
    ("MET+FCFS", "met", "fcfs"),
    ("FlinkSlotFilling+FCFS", "flink_slot_filling", "fcfs"),
    ("FlinkTasks+FCFS", "flink_tasks_balance", "fcfs"),
    ("Kubernetes+FCFS", "kubernetes", "fcfs"),
    ("MCT+HEFT", "mct", "heft"),
    ("MCT+Mystic", "mct", "mystic"),
    ("LeastOutstanding+PATS", "least_outstanding", "pats"),
    ("Oracle+MCT", "oracle", "mct"),
    ("Oracle+PATS", "oracle", "pats"),
)
PAPER_PAIRS = ("Random", "ETC", "PATS")
METRICS = ("throughput_per_min", "gpu_utilisation", "latency_p99_s", "latency_p50_s",
           "mean_wait_s", "load_balancing_degree", "useful_gpu_work_per_gpu_second",
           "cpu_utilisation", "oom_failures", "upper_bound_per_min")


def _scenario(name: str, rate: float | None, tasks: int, seed: int):
    from simulator.scenarios import (alibaba_cluster, alibaba_workload, paper_cluster,
                                     paper_costs, paper_workload, saturated_workload)
    costs = paper_costs()
    if name == "paper":
        workload = (saturated_workload(tasks, seed=seed) if rate is None
                    else paper_workload(rate, tasks, seed=seed))
        return costs, paper_cluster(), workload
    if name == "alibaba":
        return costs, alibaba_cluster(16, seed=0), alibaba_workload(tasks, seed=seed,
                                                                    target_rate_per_min=rate)
    raise ValueError(name)


def run_one(job: tuple) -> dict:
    """One (scenario, rate, pair, seed) run; module level so worker processes can run it."""
    scenario, rate, label, policy_name, scheduler_name, seed, tasks = job
    from interference.schedulers import make_node_scheduler
    from placement.policies import make_policy
    from simulator import GreedyOracle, Simulator
    costs, cluster, workload = _scenario(scenario, rate, tasks, seed)
    policy = (GreedyOracle() if policy_name == "oracle"
              else make_policy(policy_name, cluster, costs, seed=seed))
    scheduler = make_node_scheduler(scheduler_name, costs, seed=seed)
    started = time.perf_counter()
    result = Simulator(costs).run(policy, scheduler, cluster, workload, seed=seed)
    wall = time.perf_counter() - started
    m = result.metrics
    return {"scenario": scenario, "rate": rate, "pair": label, "seed": seed,
            "wall_s": wall, "events": len(result.events),
            **{k: getattr(m, k) for k in METRICS}}


def confidence_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% Student-t interval."""
    from scipy import stats
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def summarise(runs: list[dict], key: str = "pair", metrics=METRICS) -> list[dict]:
    """Mean and 95% interval of each metric per (scenario, rate, ``key``) over the seeds."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["scenario"], run["rate"], run[key]), []).append(run)
    rows = []
    for (scenario, rate, name), group in groups.items():
        row = {"scenario": scenario, "rate": rate, key: name, "seeds": len(group)}
        for metric in metrics:
            mean, low, high = confidence_interval([g[metric] for g in group])
            row[metric] = {"mean": mean, "ci95": [low, high]}
        rows.append(row)
    return rows


def plot(rows: list[dict], rates: list, path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    paper = [r for r in rows if r["scenario"] == "paper"]
    pairs = list(dict.fromkeys(r["pair"] for r in paper))
    swept = [r for r in rates if r is not None]
    for pair in pairs:
        series = sorted((r for r in paper if r["pair"] == pair and r["rate"] is not None),
                        key=lambda r: r["rate"])
        style = "-" if pair in PAPER_PAIRS else ("--" if pair.startswith("Oracle") else ":")
        axes[0].plot([r["rate"] for r in series],
                     [r["throughput_per_min"]["mean"] for r in series], style, marker="o",
                     markersize=3, label=pair, linewidth=2 if pair in PAPER_PAIRS else 1)
    if swept:
        bound = [next(r for r in paper if r["rate"] == rate)["upper_bound_per_min"]["mean"]
                 for rate in swept]
        axes[0].plot(swept, bound, "k-", linewidth=3, alpha=0.3, label="upper bound")
    axes[0].set_xlabel("arrival rate (tasks/min)")
    axes[0].set_ylabel("throughput (tasks/min)")
    axes[0].set_title("Paper setting: throughput vs arrival rate")
    axes[0].legend(fontsize=6, ncol=2)
    saturated = sorted((r for r in paper if r["rate"] is None),
                       key=lambda r: r["throughput_per_min"]["mean"])
    for ax, metric, title in ((axes[1], "throughput_per_min", "Saturated: throughput (tasks/min)"),
                              (axes[2], "gpu_utilisation", "Saturated: GPU utilisation")):
        means = [r[metric]["mean"] for r in saturated]
        errors = [[m - r[metric]["ci95"][0] for m, r in zip(means, saturated)],
                  [r[metric]["ci95"][1] - m for m, r in zip(means, saturated)]]
        colors = ["tab:red" if r["pair"] in PAPER_PAIRS else
                  ("tab:green" if r["pair"].startswith("Oracle") else "tab:gray")
                  for r in saturated]
        ax.barh([r["pair"] for r in saturated], means, xerr=errors, color=colors)
        ax.set_title(title + " (95% CI)")
        ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="fewer tasks, seeds and rates")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args(argv)
    from tqdm import tqdm

    from workload.estimates import load_calibration
    setting = load_calibration().paper_setting
    if args.quick:
        tasks, seeds, rates = 300, EVALUATION_SEEDS[:2], [20, 50, None]
        alibaba_rates = [60]
    else:
        tasks, seeds = int(setting["tasks"]), EVALUATION_SEEDS
        rates = list(setting["arrival_sweep_per_min"]) + [None]
        alibaba_rates = [60, 120]
    jobs = [("paper", rate, label, policy, scheduler, seed, tasks)
            for rate in rates for label, policy, scheduler in PAIRS for seed in seeds]
    jobs += [("alibaba", rate, label, policy, scheduler, seed, tasks)
             for rate in alibaba_rates for label, policy, scheduler in PAIRS for seed in seeds]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        runs = list(tqdm(pool.map(run_one, jobs, chunksize=2), total=len(jobs),
                         desc="simulations", unit="run"))
    wall = time.perf_counter() - started
    rows = summarise(runs)
    simulated_tasks = sum(tasks for _ in runs)
    name = "baselines-quick" if args.quick else "baselines"
    path = write_result(name, {
        "scenarios": {
            "paper": {"cluster": "simulator.scenarios.paper_cluster()", "tasks": tasks,
                      "rates_per_min": rates, "saturated_rate_per_min":
                          setting["saturated_rate_per_min"], "work_scale": setting["work_scale"]},
            "alibaba": {"cluster": "alibaba_cluster(16, seed=0)", "tasks": tasks,
                        "rates_per_min": alibaba_rates,
                        "arrivals": "Alibaba GenAI v2026 request times, time-compressed"}},
        "seeds": list(seeds), "pairs": [list(p) for p in PAIRS],
        "wall_s": wall, "simulated_tasks_per_wall_second":
            simulated_tasks / sum(r["wall_s"] for r in runs),
        "summary": rows, "runs": runs})
    plot(rows, rates, RESULTS / f"{name}.png")
    print(f"{len(runs)} runs in {wall:.0f} s; wrote {path}")
    for scenario, scenario_rates in (("paper", rates), ("alibaba", alibaba_rates)):
        for rate in scenario_rates:
            print(f"\n{scenario}, {'saturated' if rate is None else f'{rate} tasks/min'}")
            for row in sorted((r for r in rows if r["scenario"] == scenario and r["rate"] == rate),
                              key=lambda r: -r["throughput_per_min"]["mean"]):
                t = row["throughput_per_min"]
                print(f"  {row['pair']:24s} {t['mean']:7.1f} [{t['ci95'][0]:6.1f}, "
                      f"{t['ci95'][1]:6.1f}] tasks/min  gpu {row['gpu_utilisation']['mean']:.2f}"
                      f"  p99 {row['latency_p99_s']['mean']:7.0f} s  lb "
                      f"{row['load_balancing_degree']['mean']:.3f}  ub "
                      f"{row['upper_bound_per_min']['mean']:.0f}")


if __name__ == "__main__":
    main()
