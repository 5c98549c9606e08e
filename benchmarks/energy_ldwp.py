"""LDWP with an energy-aware reward, against PowerFlow, GreenFlow, MCT and the residual LDWP.

The variant is the shipped residual LDWP (``benchmarks.ldwp`` VARIANTS["residual"]: the MCT
prior plus a learned correction, drain_time reward, log seconds, gamma 0) with
``LDWPSettings.energy_weight`` = lambda > 0: each outcome reward loses lambda x the task's busy
joules / :data:`ENERGY_SCALE_J` (``placement.ldwp.agent``; the joules come from the task's stage
timings at completion, priced by ``simulator.energy.task_busy_energy_j``). Same network, same
training episodes and TRAINING seeds as the shipped residual model; lambda and the checkpoint
are chosen on TUNING_SEEDS only (never ``benchmarks.baselines.EVALUATION_SEEDS``):

- checkpoint / lambda rule (:func:`energy_check`): the lowest mean energy per task (J,
  ``simulator.energy.energy_report``, the zoo's accounting) at :data:`TUNING_RATE` tasks/min
  among those whose mean saturated throughput keeps at least :data:`THROUGHPUT_FLOOR` of the
  untrained agent's (= MCT's); episode 0 always qualifies, so an agent that saves nothing ships
  as MCT rather than as a slower one. Trained on short bursts (``tasks`` a pattern, as the
  shipped residual file since 2026-12-05), the floor holds on every burst length of
  ``benchmarks.ldwp.PRIOR_CHECK_BURSTS`` (the worst ratio to MCT, ``prior_ratio_check``) and
  the energy is measured on :data:`ENERGY_CHECK_TASKS` tasks: trained on 1,500-task bursts
  alone, the file made 36% less than MCT on 300-task bursts.

    python -m benchmarks.energy_ldwp --sweep   # train each lambda of ENERGY_SWEEP (12 min)
    python -m benchmarks.ship_models --models energy   # ship lambda = ENERGY_WEIGHT
    python -m benchmarks.energy_ldwp           # the comparison (~25 min, loaded 2 cores)

The comparison runs ``benchmarks.zoo.run_one`` (tenants, deadlines, part-2 budgets and metrics
exactly as the zoo) on the paper setting at 30 tasks/min (the zoo's part-2 table setting) and
saturated, 1,500 tasks, the 5 evaluation seeds, for :data:`SYSTEMS`: mean and 95% CI of
throughput, energy per task, g CO2 per task and p99 latency. Writes
benchmarks/results/energy_ldwp.json and .png (the sweep: energy_ldwp_sweep.json).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from benchmarks._common import RESULTS, description, write_result

__all__ = ["ENERGY_SCALE_J", "ENERGY_SWEEP", "ENERGY_WEIGHT", "THROUGHPUT_FLOOR", "TUNING_RATE",
           "SYSTEMS", "SETTINGS", "energy_overrides", "energy_check", "train_energy", "sweep",
           "compare", "paired_changes"]

#: Joules worth one unit of reward at lambda 1. ASSUMPTION: about one task's busy energy on
#: the paper cluster (mean ~2,000 J, 200-9,000 J, residual LDWP + HEFT, tuning seed 501); at
#: lambda 1, 1,000 J cost as much reward as a drain time e times longer (log-seconds reward).
ENERGY_SCALE_J = 1000.0
#: lambdas tried on the tuning seeds (``--sweep``)
ENERGY_SWEEP = (0.1, 0.3, 1.0)
#: the lambda of the shipped ``ldwp_energy_paper.spm``, chosen by the sweep (see docs/ldwp.md)
ENERGY_WEIGHT = 0.1
#: share of the untrained agent's saturated tuning throughput a checkpoint must keep
THROUGHPUT_FLOOR = 0.95
#: arrival rate (tasks/min) at which tuning measures energy: the zoo's part-2 table setting
TUNING_RATE = 30
#: tasks of the paced tuning runs that measure a checkpoint's energy, when training on a pattern
ENERGY_CHECK_TASKS = 1500
#: (label, zoo policy, node scheduler): "ldwp" = the shipped residual file, "ldwp_energy" = ours
SYSTEMS = (("LDWP-energy+HEFT (ours)", "ldwp_energy", "heft"),
           ("LDWP+HEFT (ours)", "ldwp", "heft"),
           ("PowerFlow+FCFS", "powerflow", "fcfs"),
           ("GreenFlow+FCFS", "greenflow", "fcfs"),
           ("MCT+HEFT", "mct", "heft"))
#: (name, scenario, rate): the zoo's part-2 table setting and saturated
SETTINGS = (("paper 30/min", "paper", 30), ("paper saturated", "paper", None))
METRICS = (("throughput_per_min", "tasks/min"), ("energy_per_task_j", "J per task"),
           ("g_co2_per_task", "g CO2 per task"), ("latency_p99_s", "p99 latency (s)"))


def energy_overrides(weight: float) -> dict:
    """Settings on top of the residual variant's for the energy-aware one."""
    return {"energy_weight": float(weight), "energy_scale_j": ENERGY_SCALE_J}


def _tuning_run(agent, rate, seed: int, tasks: int) -> tuple[float, float]:
    """(throughput, energy per completed task) of one greedy run on a tuning seed."""
    from benchmarks.ldwp import _setup, simulate
    from simulator.energy import PowerModel, energy_report
    costs, cluster = _setup()
    result = simulate(agent, costs, cluster, tasks, seed, rate=rate, record_events=True)
    report = energy_report(result, cluster, PowerModel.from_calibration(costs.calibration))
    return result.metrics.throughput_per_min, report.joules_per_completed_task or 0.0


def energy_check(agent, tasks, first: dict | None) -> tuple[float, dict]:
    """A checkpoint's score on TUNING_SEEDS (higher is better): minus its mean energy per task
    at TUNING_RATE, or -inf when its saturated throughput is under THROUGHPUT_FLOOR x episode
    0's (``first``; None: this is episode 0) or, with ``tasks`` a pattern (short bursts), under
    THROUGHPUT_FLOOR x MCT's on any burst length (``benchmarks.ldwp.prior_ratio_check``)."""
    from benchmarks.ldwp import PRIOR_CHECK_BURSTS, TUNING_SEEDS, prior_ratio_check
    bursts = not isinstance(tasks, int)
    measured = ENERGY_CHECK_TASKS if bursts else tasks
    training, agent.training = agent.training, False
    paced = [_tuning_run(agent, TUNING_RATE, s, measured) for s in TUNING_SEEDS]
    record = {f"tuning_{TUNING_RATE}_energy_per_task_j": statistics.fmean(e for _, e in paced)}
    if bursts:  # its saturated runs include the measured length on the tuning seeds
        if PRIOR_CHECK_BURSTS.get(measured) != TUNING_SEEDS:
            raise ValueError(f"ENERGY_CHECK_TASKS ({measured}) must be a burst of "
                             "PRIOR_CHECK_BURSTS on TUNING_SEEDS")
        worst, ratios = prior_ratio_check(agent, tasks, first)
        record.update(ratios)
        record["meets_throughput_floor"] = worst >= THROUGHPUT_FLOOR
    else:
        saturated = [_tuning_run(agent, None, s, measured) for s in TUNING_SEEDS]
        record["tuning_throughput_per_min"] = statistics.fmean(t for t, _ in saturated)
        record["tuning_saturated_energy_per_task_j"] = statistics.fmean(e for _, e in saturated)
        floor = THROUGHPUT_FLOOR * (first or record)["tuning_throughput_per_min"]
        record["meets_throughput_floor"] = record["tuning_throughput_per_min"] >= floor
    agent.training = training
    score = (-record[f"tuning_{TUNING_RATE}_energy_per_task_j"]
             if record["meets_throughput_floor"] else float("-inf"))
    return score, record


def train_energy(job: tuple, check=None, check_every: int | None = None) -> dict:
    """``benchmarks.ldwp.train_variant`` for "residual_energy": the residual training with
    lambda (``job[6]``, default ENERGY_WEIGHT) and ``check`` (default :func:`energy_check`)
    choosing the checkpoint (every ``check_every`` episodes; default
    ``benchmarks.ldwp.RESIDUAL_CHECK``)."""
    from benchmarks.ldwp import RESIDUAL_CHECK, train_residual
    weight = job[6] if len(job) > 6 else ENERGY_WEIGHT
    trained = train_residual(job[:6], overrides=energy_overrides(weight),
                             check=check or energy_check,
                             check_every=check_every or RESIDUAL_CHECK)
    return {**trained, "energy_weight": weight}


def sweep(episodes: int, tasks, workers: int, keep: Path | None = None) -> Path:
    """Train every lambda of ENERGY_SWEEP as the shipped file is trained (``tasks`` per episode:
    a count or a pattern of short bursts; a checkpoint after every episode); pick the one whose
    chosen checkpoint has the lowest tuning energy at TUNING_RATE (all chosen checkpoints meet
    the floor by construction).
    ``keep``: a folder for each lambda's model file (``energy_w<lambda>.spm``, with the header
    ``ship_models --models energy`` writes, so the chosen one can be shipped as it is)."""
    from benchmarks.ldwp import TUNING_SEEDS
    from benchmarks.ship_models import ship_metadata
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="energy-sweep-") as tmp:
        jobs = [("residual_energy", True, episodes, tasks, str(Path(tmp) / f"w{w}"),
                 ship_metadata("energy", episodes), w) for w in ENERGY_SWEEP]
        for job in jobs:
            Path(job[4]).mkdir()
        with ProcessPoolExecutor(max_workers=workers) as pool:
            trained = list(pool.map(_train_every_episode, jobs))
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            for t in trained:
                shutil.copyfile(t["model"], keep / f"energy_w{t['energy_weight']}.spm")
    rows = []
    key = f"tuning_{TUNING_RATE}_energy_per_task_j"
    for t in trained:
        chosen = next(c for c in t["checkpoints"] if c["episode"] == t["chosen_episode"])
        rows.append({"energy_weight": t["energy_weight"], "chosen_episode": t["chosen_episode"],
                     "chosen": chosen, "checkpoints": t["checkpoints"],
                     "learning": t["learning"]})
    best = min(rows, key=lambda r: (r["chosen"][key], r["energy_weight"]))
    return write_result("energy_ldwp_sweep", {
        "episodes": episodes, "tasks": tasks, "tuning_seeds": list(TUNING_SEEDS),
        "energy_scale_j": ENERGY_SCALE_J, "throughput_floor": THROUGHPUT_FLOOR,
        "tuning_rate": TUNING_RATE, "rule": energy_check.__doc__.split("\n")[0],
        "chosen_energy_weight": best["energy_weight"], "rows": rows,
        "wall_s": time.perf_counter() - started})


def _train_every_episode(job: tuple) -> dict:
    """:func:`train_energy` with a checkpoint after every episode, as ``ship_models``."""
    return train_energy(job, check_every=1)


def compare(tasks: int, seeds, workers: int, only: list[str] | None = None
            ) -> tuple[Path, list[dict]]:
    """Every system of SYSTEMS in every setting of SETTINGS on ``seeds``, through the zoo's
    ``run_one`` (its tenants, budgets and metrics); JSON and PNG in benchmarks/results/.
    ``only``: run just these labels and keep the other systems' runs from the existing file."""
    from benchmarks.ship_models import SHIPPED_RESIDUAL
    from benchmarks.zoo import run_one, summarise
    from benchmarks.zoo_metrics import describe_part2
    chosen = [s for s in SYSTEMS if not only or s[0] in only]
    jobs = [(scenario, rate, label, policy, scheduler, seed, tasks, str(SHIPPED_RESIDUAL))
            for _, scenario, rate in SETTINGS for label, policy, scheduler in chosen
            for seed in seeds]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        runs = list(pool.map(run_one, jobs))
    wall = time.perf_counter() - started
    if only and (RESULTS / "energy_ldwp.json").is_file():
        import json
        previous = json.loads((RESULTS / "energy_ldwp.json").read_text())
        runs = [r for r in previous["runs"] if r["system"] not in only] + runs
        wall += previous.get("wall_s", 0.0)
    rows = summarise(runs)
    path = write_result("energy_ldwp", {
        "systems": [list(s) for s in SYSTEMS], "settings": [list(s) for s in SETTINGS],
        "seeds": list(seeds), "tasks": tasks, "energy_weight": ENERGY_WEIGHT,
        "energy_scale_j": ENERGY_SCALE_J, "part2": describe_part2(("paper", 30)),
        "wall_s": wall, "summary": rows,
        "paired_change_of_ours": paired_changes(runs), "runs": runs})
    if {s[0] for s in SYSTEMS} <= {r["system"] for r in runs}:
        plot(rows, path.with_suffix(".png"))
    return path, rows


def paired_changes(runs: list[dict], ours: str = SYSTEMS[0][0]) -> list[dict]:
    """Per setting, other system and metric: mean and 95% CI over the seeds of ours / other - 1
    (the same seed's workload for both, so seed-to-seed spread cancels)."""
    from benchmarks.zoo_metrics import summarise_metric
    by = {(r["scenario"], r["rate"], r["system"], r["seed"]): r for r in runs}
    out = []
    for _, scenario, rate in SETTINGS:
        for label, _, _ in SYSTEMS[1:]:
            row = {"scenario": scenario, "rate": rate, "ours": ours, "other": label}
            for metric, _ in METRICS:
                ratios = []
                for (sc, rt, system, seed), mine in by.items():
                    other = by.get((sc, rt, label, seed))
                    if (sc, rt, system) != (scenario, rate, ours) or other is None:
                        continue
                    if mine.get(metric) is not None and other.get(metric):
                        ratios.append(mine[metric] / other[metric] - 1.0)
                row[metric] = summarise_metric(ratios)
            out.append(row)
    return out


def plot(rows: list[dict], path: Path) -> None:
    """One panel per (setting, metric), a bar per system with its 95% interval."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks._common import bar_with_ci
    colours = {"ldwp_energy": "tab:red", "ldwp": "tab:orange", "powerflow": "tab:purple",
               "greenflow": "tab:green", "mct": "tab:gray"}
    policy = {label: p for label, p, _ in SYSTEMS}
    fig, axes = plt.subplots(len(SETTINGS), len(METRICS), figsize=(5 * len(METRICS),
                                                                    4 * len(SETTINGS)))
    for row_axes, (name, scenario, rate) in zip(axes, SETTINGS):
        chosen = [r for r in rows if r["scenario"] == scenario and r["rate"] == rate]
        chosen.sort(key=lambda r: [s[0] for s in SYSTEMS].index(r["system"]))
        for ax, (metric, unit) in zip(row_axes, METRICS):
            kept = [r for r in chosen if r[metric]["mean"] is not None]
            bar_with_ci(ax, [r["system"] for r in kept], [r[metric]["mean"] for r in kept],
                        [r[metric]["ci95"] for r in kept],
                        [colours[policy[r["system"]]] for r in kept], horizontal=True)
            ax.set_title(f"{name}: {unit} (95% CI)", fontsize=9)
            ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _print(rows: list[dict]) -> None:
    for name, scenario, rate in SETTINGS:
        print(f"## {name}")
        for label, _, _ in SYSTEMS:
            row = next((r for r in rows if (r["scenario"], r["rate"], r["system"])
                        == (scenario, rate, label)), None)
            if row is None:
                continue
            cells = []
            for metric, unit in METRICS:
                s = row[metric]
                cells.append("-" if s["mean"] is None else
                             f"{unit} {s['mean']:.3f} [{s['ci95'][0]:.3f}, {s['ci95'][1]:.3f}]")
            print(f"  {label:26s} " + "; ".join(cells))


def main(argv=None) -> None:
    from benchmarks.baselines import EVALUATION_SEEDS
    from benchmarks.ship_models import TASKS, episodes_of, tasks_of
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--sweep", action="store_true",
                        help="train every lambda of ENERGY_SWEEP on the tuning seeds instead")
    parser.add_argument("--episodes", type=int, default=None,
                        help="training episodes per lambda (--sweep; default: the shipped "
                             "file's)")
    parser.add_argument("--tasks", type=int, default=None,
                        help=f"tasks per run (default {TASKS}); with --sweep, per training "
                             "episode (default: the shipped file's short bursts)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", default="",
                        help="comma-separated labels: run just these, keep the others' runs "
                             "from the existing result file")
    parser.add_argument("--keep", type=Path, default=None,
                        help="--sweep: keep each lambda's model file in this folder")
    args = parser.parse_args(argv)
    if args.sweep:
        path = sweep(args.episodes or episodes_of("energy"), args.tasks or tasks_of("energy"),
                     args.workers, args.keep)
        print(f"wrote {path}")
        return
    only = [label.strip() for label in args.only.split(",") if label.strip()]
    unknown = sorted(set(only) - {s[0] for s in SYSTEMS})
    if unknown:
        raise SystemExit(f"unknown systems {unknown}; known: {[s[0] for s in SYSTEMS]}")
    path, rows = compare(args.tasks or TASKS, EVALUATION_SEEDS, args.workers, only)
    print(f"wrote {path}")
    _print(rows)
    import json
    for row in json.loads(path.read_text())["paired_change_of_ours"]:
        cells = [f"{metric} {100 * row[metric]['mean']:+.1f}% [{100 * row[metric]['ci95'][0]:+.1f}"
                 f", {100 * row[metric]['ci95'][1]:+.1f}]" for metric, _ in METRICS
                 if row[metric]["mean"] is not None]
        print(f"  ours vs {row['other']} ({row['rate'] or 'saturated'}): " + "; ".join(cells))


if __name__ == "__main__":
    main()
