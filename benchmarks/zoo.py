"""The zoo: every placement system, old and new, on the same simulated work.

Every cluster policy and node scheduler streamplace has (the generic baselines, the paper's
Random / ETC / PATS, ten related GPU-cluster systems adapted to streaming stages (part 1), ten
more on energy, carbon, tenants, deadlines, batching, link contention and splitting a task's
stages over nodes (part 2: PowerFlow, GreenFlow, HiveD, GAI, EDF-DVFS, vGPU fair, ElasticBatch,
SJF-BCO, Pipe-Torch, IoT-Partition; the zoo's clusters have no MIG GPU, so ElasticBatch only
batches here), and our LDWP + IAWP from the shipped model file, plus the LDWP variant trained with an
energy-aware reward, ``benchmarks/energy_ldwp.py``) runs on identical tasks
for each seed, each task with a tenant, a priority and a deadline (``benchmarks.zoo_metrics``;
systems that do not read them run exactly as before):

- the paper's setting (11 workers of the paper's node types, the three applications in equal mix,
  1,500 tasks): saturated, and Poisson arrivals over a sweep of rates;
- the Alibaba-derived cluster (16 GPU nodes from the v2023 inventory) under the real Alibaba
  GenAI arrival process, time-compressed to 60 and 120 tasks/min.

Five evaluation seeds (never used to train or tune anything), mean and 95% Student-t interval:
throughput, p99 latency, GPU utilisation, useful GPU work per busy GPU-second, OOMs, and
(part 2, ``benchmarks/zoo_metrics.py`` says how each is computed) energy per completed task
(J), grams CO2 per task, Jain's fairness across tenants (of slowdown) and the deadline miss rate.
Two checks of the comparison itself are recorded: no system above the upper bound, and one
repeated run per system giving identical metrics (determinism per seed). Every cluster rule is
also timed inside the Flink router object (11 nodes, 5,000 decisions, completions fed back):
p50 / p99 per decision.

    python -m benchmarks.zoo               # default sweep (about 45 minutes on 2 cores)
    python -m benchmarks.zoo --full        # the paper's whole arrival sweep (10-60 tasks/min)
    python -m benchmarks.zoo --quick       # 300 tasks, 2 seeds: a smoke run (a few minutes)

Writes benchmarks/results/zoo.json (zoo-quick.json with --quick), a PNG beside it, and prints the
README table.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from benchmarks._common import RESULTS, bar_with_ci, description, git_commit, write_result
from benchmarks.baselines import EVALUATION_SEEDS, PAIRS
from benchmarks.zoo_metrics import (PART2_METRICS, describe_part2, same_value,
                                     summarise_metric)

#: (label, cluster policy, node scheduler, family). Node-level systems run under MCT (as the
#: paper runs PATS); cluster-level ones with FCFS on the node (as the other cluster baselines),
#: and where a system decides both levels, with its own pair. "ldwp" is the shipped model file.
RELATED = (
    ("Vapor", "mct", "vapor", "related"),
    ("SJF-BSBF", "mct", "sjf_bsbf", "related"),
    ("SchedTune", "mct", "schedtune", "related"),
    ("GPU fractions", "mct", "gpu_share", "related"),
    ("Opportunistic", "mct", "opportunistic", "related"),
    ("Liquid+FCFS", "liquid", "fcfs", "related"),
    ("PlacementAware+FCFS", "placement_aware", "fcfs", "related"),
    ("DelayLocality+FCFS", "delay_locality", "fcfs", "related"),
    ("DualAgent", "dual_agent", "dual_agent_order", "related"),
    ("LeastSimilar+CommAware", "least_similar", "comm_aware", "related"),
)
#: Part 2 (issue 17), the same pairing rule: cluster-level systems with FCFS on the node,
#: node-level ones under MCT (the two stage-splitting systems: HEFT, see below). Budgets,
#: quotas and task lists: ``benchmarks.zoo_metrics``.
RELATED_2 = (
    ("PowerFlow+FCFS", "powerflow", "fcfs", "related2"),
    ("GreenFlow+FCFS", "greenflow", "fcfs", "related2"),
    ("HiveD+FCFS", "hived", "fcfs", "related2"),
    ("GAI+FCFS", "gai", "fcfs", "related2"),
    ("EDF-DVFS", "mct", "edf_dvfs", "related2"),
    ("vGPU fair", "mct", "vgpu_fair", "related2"),
    # its own pair: placement by link contention vs overhead, smallest task first on the node;
    # the zoo runs with the shared-links axis off, so it sees each node's own link only
    ("SJF-BCO", "sjf_bco", "sjf_bco_order", "related2"),
    # Stage splits over nodes (simulator.stage_split); under HEFT, so that set beside MCT+HEFT
    # only the cluster rule (whole task vs split) differs.
    ("Pipe-Torch", "pipe_torch", "heft", "related2"),
    ("IoT-Partition", "iot_partition", "heft", "related2"),
    ("ElasticBatch", "mct", "elastic_batch", "related2"),
)
OURS = (
    ("LDWP+IAWP (ours)", "ldwp", "iawp", "ours"),
    ("LDWP+HEFT (ours)", "ldwp", "heft", "ours"),
    ("LDWP-energy+HEFT (ours)", "ldwp_energy", "heft", "ours"),
)
#: LDWP rows: zoo policy name -> shipped model name (``placement.ldwp.shipped``); "ldwp" reads
#: the ``--model`` file instead when one is given (default: the shipped residual one).
LDWP_MODELS = {"ldwp": "residual", "ldwp_energy": "energy"}
SYSTEMS = tuple((label, policy, scheduler, "oracle" if policy == "oracle" else "baseline")
                for label, policy, scheduler in PAIRS) + RELATED + RELATED_2 + OURS
METRICS = ("throughput_per_min", "latency_p99_s", "gpu_utilisation",
           "useful_gpu_work_per_gpu_second", "oom_failures", "upper_bound_per_min")
DEFAULT_SWEEP = (10, 30, 50)
#: The setting whose part-2 metrics the README table shows (all settings are in the JSON): a
#: Poisson rate under capacity, since in the saturated setting every task arrives in the first
#: minutes and nearly every deadline is missed by every system.
PART2_TABLE_SETTING = ("paper", 30)
#: Headers of the part-2 columns of the README table.
PART2_COLUMNS = (("energy_per_task_j", "J/task", 0), ("g_co2_per_task", "g CO2/task", 3),
                 ("jain_fairness", "Jain (slowdown)", 3),
                 ("deadline_miss_rate", "deadline miss rate", 3))


def _scenario(name: str, rate, tasks: int, seed: int):
    from simulator.scenarios import (alibaba_cluster, alibaba_workload, paper_cluster,
                                     paper_costs, paper_workload, saturated_workload)
    costs = paper_costs()
    if name == "paper":
        workload = (saturated_workload(tasks, seed=seed) if rate is None
                    else paper_workload(rate, tasks, seed=seed))
        return costs, paper_cluster(), workload
    return costs, alibaba_cluster(16, seed=0), alibaba_workload(tasks, seed=seed,
                                                                target_rate_per_min=rate)


def run_one(job: tuple) -> dict:
    """One (scenario, rate, system, seed) run; module level so worker processes can run it.

    The workload gets tenants, priorities and deadlines (``zoo_metrics.with_slo``, from the seed)
    and part 2's systems their settings from it; the part-1 metrics, then the part-2 ones
    (``zoo_metrics.run_metrics``). A power-based system on a cluster with a GPU model that has
    no power entry is skipped: every metric None, ``skipped`` says why."""
    scenario, rate, label, policy_name, scheduler_name, seed, tasks, model = job[:8]
    # a 9th entry: the manager queue's limit (SimulationConfig.max_dispatched_per_node)
    manager_limit = job[8] if len(job) > 8 else None
    import torch
    torch.set_num_threads(1)
    from benchmarks import zoo_metrics as part2
    from interference.schedulers import make_node_scheduler
    from placement.policies import make_policy
    from simulator import GreedyOracle, SimulationConfig, Simulator
    costs, cluster, workload = _scenario(scenario, rate, tasks, seed)
    workload = part2.with_slo(workload, costs, seed)
    power, power_why = part2.power_model(costs)
    problem = part2.power_problem(cluster, power, power_why)
    row = {"scenario": scenario, "rate": rate, "system": label, "seed": seed}
    if problem and (policy_name in part2.POWER_POLICIES
                    or scheduler_name in part2.POWER_SCHEDULERS):
        return {**row, "wall_s": 0.0, **dict.fromkeys(METRICS + PART2_METRICS),
                "skipped": f"{label} needs power figures: {problem}", "part2_notes": problem}
    settings = {}
    if policy_name == "oracle":
        policy = GreedyOracle()
    elif policy_name in LDWP_MODELS:
        from placement.ldwp.agent import LDWPPolicy
        from placement.ldwp.shipped import shipped_model
        path = model if policy_name == "ldwp" else shipped_model(LDWP_MODELS[policy_name])
        policy = LDWPPolicy.from_file(path, cluster, costs)
    else:
        settings = part2.policy_settings(policy_name, cluster, costs, workload, power)
        policy = make_policy(policy_name, cluster, costs, seed=seed, **settings)
    scheduler = make_node_scheduler(scheduler_name, costs, seed=seed,
                                    **part2.scheduler_settings(scheduler_name, workload, power))
    started = time.perf_counter()
    result = Simulator(costs, SimulationConfig(
        record_events=True, max_dispatched_per_node=manager_limit)).run(
        policy, scheduler, cluster, workload, seed=seed)
    wall = time.perf_counter() - started
    m = result.metrics
    budget = {k: v for k, v in settings.items() if k in ("energy_budget_j", "carbon_budget_g")}
    return {**row, "wall_s": wall, **{k: getattr(m, k) for k in METRICS},
            **part2.run_metrics(result, cluster, costs, workload, power, power_why), **budget}


def router_latency(policy_name: str, decisions: int = 5000, nodes: int = 11) -> dict:
    """The Flink router's decision latency with this rule (no Flink: the same Router object the
    job runs, fed completions so learning rules learn): p50 / p99 microseconds per decision."""
    import random

    from pyflink_jobs.router import Router, RouterNode, RouterSettings
    clock = [1000.0]
    router = Router(RouterSettings(
        nodes=[RouterNode(f"tm_{i}", cpu_cores=2 + i % 3, work_multiplier=1.0 + i % 2)
               for i in range(nodes)], policy=policy_name, executor_capacity=10_000),
        clock=lambda: clock[0])
    rng = random.Random(7)
    apps = ("video_synopsis", "face_recognition", "intrusion_detection")
    sent: list[tuple[str, str]] = []
    for i in range(decisions):
        clock[0] += 0.01
        decision, _ = router.route_event({"task_id": f"t{i}", "app_id": apps[i % 3],
                                          "input_size": rng.randint(1_000, 1_000_000)})
        sent.append((f"t{i}", decision.node))
        if len(sent) >= 20:  # feedback as the executors send it: a batch of completions
            task_id, node = sent.pop(0)
            router.on_feedback({"node_id": node, "emitted_at_ms": int(clock[0] * 1000),
                                "completed": [{"task_id": task_id, "app_id": apps[0],
                                               "input_size": 4096, "queue_ms": 1.0,
                                               "service_ms": 50.0,
                                               "finished_at_ms": int(clock[0] * 1000)}]})
    return {"policy": policy_name, "nodes": nodes, "decisions": decisions,
            "p50_us": router.latency_percentile_us(50), "p99_us": router.latency_percentile_us(99)}


def summarise(runs: list[dict]) -> list[dict]:
    """Mean and 95% interval per (scenario, rate, system) over the seeds, for the part-1 and
    part-2 metrics; a metric None in some runs (skipped, or undefined) is summarised over the
    others (``n`` says how many), mean None when none has it."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["scenario"], run["rate"], run["system"]), []).append(run)
    rows = []
    for (scenario, rate, system), group in groups.items():
        row = {"scenario": scenario, "rate": rate, "system": system, "seeds": len(group)}
        for metric in METRICS + PART2_METRICS:
            row[metric] = summarise_metric([g.get(metric) for g in group])
        rows.append(row)
    return rows


def compass(runs: list[dict], repeats: list[dict]) -> dict:
    """The comparison's own checks: nothing above the upper bound (1% slack for the bound's
    rounding of stage times), and repeated runs identical (part-2 metrics too)."""
    above = [f"{r['system']} {r['scenario']} rate {r['rate']} seed {r['seed']}: "
             f"{r['throughput_per_min']:.1f} > {r['upper_bound_per_min']:.1f}"
             for r in runs if r["throughput_per_min"] is not None
             and r["throughput_per_min"] > 1.01 * r["upper_bound_per_min"]]
    first = {(r["scenario"], r["rate"], r["system"], r["seed"]): r for r in runs}
    differing = [f"{r['system']} seed {r['seed']}" for r in repeats
                 if any(not same_value(r.get(m), first[(r["scenario"], r["rate"], r["system"],
                                                          r["seed"])].get(m))
                        for m in METRICS + PART2_METRICS)]
    return {"above_upper_bound": above, "repeated_runs": len(repeats),
            "not_deterministic": differing}


def _cell(summary: dict | None, digits: int) -> str:
    if summary is None or summary.get("mean") is None:
        return "-"
    low, high = summary["ci95"]
    return f"{summary['mean']:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def readme_table(rows: list[dict], settings: list[tuple],
                 part2_setting: tuple = PART2_TABLE_SETTING) -> str:
    """Markdown: throughput (tasks/min, mean and CI) per system and setting, the best bold; then
    the part-2 metrics (energy, carbon, fairness, deadline misses) in ``part2_setting``
    ((scenario, rate); the first setting when it is not among ``settings``)."""
    systems = [s[0] for s in SYSTEMS]
    if not any((scenario, rate) == tuple(part2_setting) for _, scenario, rate in settings):
        part2_setting = (settings[0][1], settings[0][2]) if settings else part2_setting
    where = next((name for name, scenario, rate in settings
                  if (scenario, rate) == tuple(part2_setting)), "")
    header = ("| system | " + " | ".join(name for name, _, _ in settings) + " | "
              + " | ".join(f"{title}, {where}" for _, title, _ in PART2_COLUMNS) + " |")
    lines = [header, "|---" * (len(settings) + len(PART2_COLUMNS) + 1) + "|"]
    by = {(r["scenario"], r["rate"], r["system"]): r for r in rows}
    best = {}
    for _, scenario, rate in settings:
        cells = [by[(scenario, rate, s)]["throughput_per_min"]["mean"] for s in systems
                 if (scenario, rate, s) in by and not s.startswith("Oracle")]
        cells = [c for c in cells if c is not None]
        best[(scenario, rate)] = max(cells) if cells else None
    for system in systems:
        cells = []
        for _, scenario, rate in settings:
            row = by.get((scenario, rate, system))
            text = _cell(row and row["throughput_per_min"], 1)
            mean = row["throughput_per_min"]["mean"] if row else None
            bold = mean is not None and mean == best[(scenario, rate)]
            cells.append(f"**{text}**" if bold else text)
        row = by.get((*part2_setting, system))
        cells += [_cell(row and row.get(metric), digits) for metric, _, digits in PART2_COLUMNS]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _bars(ax, rows: list[dict], metric: str, title: str, colours: dict, family: dict) -> None:
    chosen = sorted((r for r in rows if r.get(metric, {}).get("mean") is not None),
                    key=lambda r: r[metric]["mean"])
    bar_with_ci(ax, [r["system"] for r in chosen], [r[metric]["mean"] for r in chosen],
                [r[metric]["ci95"] for r in chosen],
                [colours[family.get(r["system"], "baseline")] for r in chosen], horizontal=True)
    if metric == "throughput_per_min" and chosen:
        ax.axvline(chosen[0]["upper_bound_per_min"]["mean"], color="k", alpha=0.3,
                   linewidth=3, label="upper bound")
        ax.legend(fontsize=7)
    ax.set_title(title + " (95% CI)", fontsize=9)
    ax.tick_params(axis="y", labelsize=7)


def plot(rows: list[dict], path: Path, part2_setting: tuple = PART2_TABLE_SETTING) -> None:
    """Top row: the part-1 panels; bottom row: the part-2 metrics in ``part2_setting``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"baseline": "tab:gray", "related": "tab:blue", "related2": "tab:purple",
               "ours": "tab:red", "oracle": "tab:green"}
    family = {s[0]: s[3] for s in SYSTEMS}
    scenario2, rate2 = part2_setting
    where = f"{'Paper setting' if scenario2 == 'paper' else 'Alibaba cluster'}, " + (
        "saturated" if rate2 is None else f"{rate2}/min")
    panels = [("paper", None, "throughput_per_min", "Paper setting, saturated: tasks/min"),
              ("paper", None, "gpu_utilisation", "Paper setting, saturated: GPU utilisation"),
              ("paper", None, "latency_p99_s", "Paper setting, saturated: p99 latency (s)"),
              ("alibaba", 120, "throughput_per_min", "Alibaba cluster, 120/min: tasks/min"),
              (scenario2, rate2, "energy_per_task_j", f"{where}: energy per task (J)"),
              (scenario2, rate2, "g_co2_per_task", f"{where}: g CO2 per task"),
              (scenario2, rate2, "jain_fairness", f"{where}: Jain's index of tenant slowdowns"),
              (scenario2, rate2, "deadline_miss_rate", f"{where}: deadline miss rate")]
    fig, axes = plt.subplots(2, 4, figsize=(24, 18))
    for ax, (scenario, rate, metric, title) in zip(axes.flat, panels):
        _bars(ax, [r for r in rows if r["scenario"] == scenario and r["rate"] == rate],
              metric, title, colours, family)
    fig.suptitle("grey: generic baselines, blue: related systems (part 1), purple: related "
                 "systems (part 2), red: LDWP + IAWP, green: greedy oracle", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.98))  # room for the suptitle
    fig.savefig(path, dpi=100)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="300 tasks, 2 seeds")
    parser.add_argument("--full", action="store_true", help="the whole 10-60 tasks/min sweep")
    parser.add_argument("--model", type=Path, default=None,
                        help="LDWP model file (default: the shipped placement/models one)")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--only", default="",
                        help="comma-separated system labels: rerun just these and replace their "
                             "runs in the existing result file (e.g. after a new shipped model)")
    args = parser.parse_args(argv)
    from tqdm import tqdm

    from benchmarks.ship_models import SHIPPED_RESIDUAL
    from workload.estimates import load_calibration
    model = args.model or SHIPPED_RESIDUAL
    if not model.exists():
        raise SystemExit(f"no LDWP model at {model}: run `python -m benchmarks.ship_models`")
    setting = load_calibration().paper_setting
    sweep = list(setting["arrival_sweep_per_min"]) if args.full else list(DEFAULT_SWEEP)
    tasks, seeds = (300, EVALUATION_SEEDS[:2]) if args.quick else (int(setting["tasks"]),
                                                                    EVALUATION_SEEDS)
    settings = ([("paper saturated", "paper", None)]
                + [(f"paper {r}/min", "paper", r) for r in sweep]
                + [(f"Alibaba {r}/min", "alibaba", r) for r in (60, 120)])
    name = "zoo-quick" if args.quick else "zoo"
    only = [label.strip() for label in args.only.split(",") if label.strip()]
    unknown = sorted(set(only) - {s[0] for s in SYSTEMS})
    if unknown:
        raise SystemExit(f"unknown systems {unknown}; known: {[s[0] for s in SYSTEMS]}")
    chosen = [s for s in SYSTEMS if not only or s[0] in only]
    jobs = [(scenario, rate, label, policy, scheduler, seed, tasks, str(model))
            for _, scenario, rate in settings for label, policy, scheduler, _ in chosen
            for seed in seeds]
    # one repeat per system (first seed, saturated paper setting): determinism per seed
    repeat_jobs = [("paper", None, label, policy, scheduler, seeds[0], tasks, str(model))
                   for label, policy, scheduler, _ in chosen]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        runs = list(tqdm(pool.map(run_one, jobs), total=len(jobs), desc="zoo", unit="run",
                         disable=None))
        repeats = list(pool.map(run_one, repeat_jobs))
    from placement.policies import POLICIES
    latency = [] if only else [router_latency(policy) for policy in sorted(POLICIES)]
    wall = time.perf_counter() - started
    reruns = []
    if only:  # keep the other systems' runs (and repeats) from the existing result file
        import json
        previous = json.loads((RESULTS / f"{name}.json").read_text())
        runs = [r for r in previous["runs"] if r["system"] not in only] + runs
        repeats = [r for r in previous.get("repeats", []) if r["system"] not in only] + repeats
        latency = previous.get("router_latency", latency)
        reruns = previous.get("reruns", []) + [{"systems": only, "git_commit": git_commit(),
                                                "ldwp_model": model.name, "wall_s": wall,
                                                "compass_before": previous.get("compass")}]
        wall += previous.get("wall_s", 0.0)
    rows = summarise(runs)
    checks = compass(runs, repeats)
    table = readme_table(rows, settings)
    path = write_result(name, {
        "systems": [list(s) for s in SYSTEMS], "seeds": list(seeds), "tasks": tasks,
        "settings": [list(s) for s in settings], "ldwp_model": str(model.name),
        "wall_s": wall, "compass": checks, "router_latency": latency, "reruns": reruns,
        "part2": describe_part2(PART2_TABLE_SETTING), "summary": rows, "runs": runs,
        "repeats": repeats, "readme_table": table})
    plot(rows, RESULTS / f"{name}.png")
    print(f"{len(runs)} runs in {wall:.0f} s; wrote {path}")
    print(f"compass: {len(checks['above_upper_bound'])} above the upper bound, "
          f"{len(checks['not_deterministic'])} not deterministic of {checks['repeated_runs']}")
    print(table)
    for row in latency:
        print(f"  router with {row['policy']:22s} p50 {row['p50_us']:7.1f} us  "
              f"p99 {row['p99_us']:7.1f} us")


if __name__ == "__main__":
    main()
