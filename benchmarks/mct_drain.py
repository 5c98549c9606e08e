"""MCT at measured drain rates against the paper's ETC (MCT), on the simulated paper setting.

    python -m benchmarks.mct_drain [--quick]

Why: on the paper setting (11 P4/K80 nodes, saturated), MCT spreads each node's backlog over its
unit count, and its 2-GPU nodes finish minutes after its 4-GPU ones. ``mct_drain``
(``placement/policies/mct_drain.py``) divides the backlog by the node's drain rate instead.

Three ways of knowing the rates, each paired with HEFT on the nodes (the node scheduler the
shipped LDWP uses), 1,500 tasks:

- ``MCT+HEFT``: the unit count (the paper's ETC rule with HEFT);
- ``MCT-drain (online)+HEFT``: learned online from the observations (DrainRateMeter); its two
  settings (``prior_s``, ``half_life_s``) are chosen on the TUNING seeds only (501, 502), from
  :data:`PRIOR_GRID` x :data:`HALF_LIFE_GRID`;
- ``MCT-drain (measured)+HEFT``: fixed rates measured on one earlier run (MCT+HEFT on tuning
  seed 501: each node's estimated work over the time it took to finish it), what a drain-rate
  table learned before deployment could give.

Evaluated on the five evaluation seeds (1001-1005), 95% Student-t intervals, the change against
MCT+HEFT paired per seed; where ``benchmarks/results/paper_setting.json`` holds the paper's
baselines on the same seeds, the gain over their mean too. Writes
benchmarks/results/mct_drain.json (``mct_drain-quick.json``) and a PNG beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from concurrent.futures import ProcessPoolExecutor

from benchmarks._common import RESULTS, bar_with_ci, description, write_result
from benchmarks.baselines import EVALUATION_SEEDS, confidence_interval
from benchmarks.ldwp import TUNING_SEEDS

#: the online meter's settings tried on the tuning seeds
PRIOR_GRID = (10.0, 50.0, 200.0, 800.0, 3200.0)
HALF_LIFE_GRID = (120.0, math.inf)
TASKS = 1500
NODE_SCHEDULER = "heft"
PAPER_BASELINES = ("Random", "ETC", "PATS")


def run(job: tuple) -> dict:
    """One run: (label, policy name, policy settings, seed, tasks, record events)."""
    label, policy_name, settings, seed, tasks, record = job
    from interference.schedulers import make_node_scheduler
    from placement.policies import make_policy
    from simulator import SimulationConfig, Simulator
    from simulator.scenarios import paper_cluster, paper_costs, saturated_workload
    costs, cluster = paper_costs(), paper_cluster()
    workload = saturated_workload(tasks, seed=seed)
    policy = make_policy(policy_name, cluster, costs, seed=seed, **settings)
    scheduler = make_node_scheduler(NODE_SCHEDULER, costs, seed=seed)
    result = Simulator(costs, SimulationConfig(record_events=record)).run(
        policy, scheduler, cluster, workload, seed=seed)
    row = {"system": label, "seed": seed, "settings": _jsonable(settings),
           "throughput_per_min": result.metrics.throughput_per_min,
           "gpu_utilisation": result.metrics.gpu_utilisation}
    if record:
        row["measured_rates"] = measured_rates(result, workload, cluster, costs)
    return row


def _jsonable(settings: dict) -> dict:
    return {k: (str(v) if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in settings.items()}


def measured_rates(result, workload, cluster, costs) -> dict[str, float]:
    """Per node: the estimated work (seconds) of the tasks it was given over the time from the
    first arrival to its last completion."""
    tasks = {t.task_id: t for t in workload}
    specs = {n.node_id: n for n in cluster.nodes}
    work = dict.fromkeys(specs, 0.0)
    for task_id, decision in result.decisions:
        work[decision.node] += costs.task_work_ms(tasks[task_id], specs[decision.node]) / 1000
    first = min(t.arrival_s for t in workload)
    last = dict.fromkeys(specs, first)
    for event in result.events:
        if event.kind == "complete" and event.node in last:
            last[event.node] = max(last[event.node], event.time)
    return {n: work[n] / (last[n] - first) for n in specs if last[n] > first and work[n] > 0}


def _mean(rows, label, seeds):
    return statistics.fmean(r["throughput_per_min"] for r in rows
                            if r["system"] == label and r["seed"] in seeds)


def summarise(rows: list[dict], labels, seeds, paper_runs: list[dict]) -> list[dict]:
    by = {(r["system"], r["seed"]): r for r in rows}
    paper = {(r["system"], r["seed"]): r["throughput_per_min"] for r in paper_runs
             if r.get("scenario", "paper") == "paper" and r.get("rate") is None}
    out = []
    for label in labels:
        line = {"system": label}
        for metric in ("throughput_per_min", "gpu_utilisation"):
            mean, low, high = confidence_interval([by[(label, s)][metric] for s in seeds])
            line[metric] = {"mean": mean, "ci95": [low, high]}
        paired = [by[(label, s)]["throughput_per_min"] / by[("MCT+HEFT", s)]
                  ["throughput_per_min"] - 1 for s in seeds]
        mean, low, high = confidence_interval(paired)
        line["change_vs_mct_heft"] = {"mean": mean, "ci95": [low, high], "per_seed": paired}
        if all((b, s) in paper for b in PAPER_BASELINES for s in seeds):
            gains = [by[(label, s)]["throughput_per_min"]
                     / statistics.fmean(paper[(b, s)] for b in PAPER_BASELINES) - 1
                     for s in seeds]
            mean, low, high = confidence_interval(gains)
            line["gain_over_paper_baselines_mean"] = {"mean": mean, "ci95": [low, high]}
        out.append(line)
    return out


def plot(summary: list[dict], path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4))
    bar_with_ci(ax, [s["system"] for s in summary],
                [s["throughput_per_min"]["mean"] for s in summary],
                [s["throughput_per_min"]["ci95"] for s in summary])
    ax.set_ylabel("throughput (tasks/min)")
    ax.set_title("paper setting, saturated, HEFT on the nodes, evaluation seeds, 95% CI",
                 fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true",
                        help="300 tasks, 2 evaluation seeds, 2 grid points (a smoke run)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    from tqdm import tqdm
    tasks = 300 if args.quick else TASKS
    seeds = EVALUATION_SEEDS[:2] if args.quick else EVALUATION_SEEDS
    grid = [{"prior_s": p, "half_life_s": h} for p in PRIOR_GRID for h in HALF_LIFE_GRID]
    if args.quick:
        grid = grid[:2]
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        def many(jobs, desc):
            return list(tqdm(pool.map(run, jobs), total=len(jobs), desc=desc, unit="run",
                             disable=None))
        tuning = many([("MCT+HEFT", "mct", {}, s, tasks, s == TUNING_SEEDS[0])
                       for s in TUNING_SEEDS]
                      + [(f"grid {i}", "mct_drain", g, s, tasks, False)
                         for i, g in enumerate(grid) for s in TUNING_SEEDS], "tuning seeds")
        scores = {i: _mean(tuning, f"grid {i}", TUNING_SEEDS) for i in range(len(grid))}
        chosen = grid[max(scores, key=scores.get)]
        rates = next(r["measured_rates"] for r in tuning if "measured_rates" in r)
        systems = [("MCT+HEFT", "mct", {}), ("MCT-drain (online)+HEFT", "mct_drain", chosen),
                   ("MCT-drain (measured)+HEFT", "mct_drain", {"rates": rates})]
        evaluation = many([(label, name, settings, s, tasks, False)
                           for label, name, settings in systems for s in seeds],
                          "evaluation seeds")
    paper_file = RESULTS / "paper_setting.json"
    paper_runs = json.loads(paper_file.read_text()).get("runs", []) \
        if paper_file.exists() and not args.quick else []
    summary = summarise(evaluation, [s[0] for s in systems], seeds, paper_runs)
    name = "mct_drain-quick" if args.quick else "mct_drain"
    write_result(name, {
        "tasks": tasks, "node_scheduler": NODE_SCHEDULER, "tuning_seeds": list(TUNING_SEEDS),
        "evaluation_seeds": list(seeds),
        "tuning": {"grid": [_jsonable(g) for g in grid],
                   "throughput_per_min": {str(i): v for i, v in scores.items()},
                   "mct_heft": _mean(tuning, "MCT+HEFT", TUNING_SEEDS),
                   "chosen": _jsonable(chosen)},
        "measured_rates": {"from": f"MCT+HEFT on tuning seed {TUNING_SEEDS[0]}",
                           "rates": rates},
        "paper_baselines_from": str(paper_file.name) if paper_runs else None,
        "wall_s": time.perf_counter() - started, "summary": summary,
        "runs": tuning + evaluation})
    plot(summary, RESULTS / f"{name}.png")
    for line in summary:
        change = line["change_vs_mct_heft"]
        print(f"{line['system']:28s} {line['throughput_per_min']['mean']:6.1f} tasks/min, "
              f"vs MCT+HEFT {change['mean']:+.1%} [{change['ci95'][0]:+.1%}, "
              f"{change['ci95'][1]:+.1%}]")


if __name__ == "__main__":
    main()
