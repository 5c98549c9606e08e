"""Real throughput of the IAWP node executor on this machine's CPU cores: FCFS vs PATS vs IAWP
(the paper's rules, and our slowdown-aware variant) on one identical mixed task stream.

    python -m benchmarks.executor            # full: 600 tasks x 4 schedulers x 4 runs
    python -m benchmarks.executor --quick    # 150 tasks x 4 schedulers x 3 runs

Each run builds a fresh :class:`~interference.executor.NodeExecutor` (CPU units only), runs six
warm-up tasks one at a time (torch's first calls, and the alone times the slowdowns are
measured against), then feeds the stream as fast as it is admitted (``--max-in-flight`` tasks
at once). The stream is a fixed seeded sequence of the three applications with lognormal
input sizes (the synthetic generator's median 36k pixels, capped at 256k). Throughput counts
the tasks completed between the ``--warmup`` share of the stream and the last
``max_in_flight`` completions (ramp-up and drain excluded); latency is accepted -> finished.
Runs alternate the scheduler order, round by round. Also reported: tasks/s relative to the same
round's FCFS run (paired: on a shared machine the neighbours' load drifts between rounds), each
unit's busy fraction (a stage's operator running on it), the process's CPU use (CPU seconds /
wall seconds / units) and tasks per CPU-second of the process (efficiency, insensitive to CPU
taken by other processes), and the co-execution slowdowns the executor measured (rate = alone
time / elapsed; slowdown = 1 / rate), merged over all runs.

Writes benchmarks/results/executor.json (executor-quick.json with --quick) and a PNG beside it.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import threading
import time

from benchmarks._common import RESULTS, description, write_result
from benchmarks.baselines import confidence_interval

#: (label, scheduler name, settings)
VARIANTS = (("FCFS", "fcfs", {}), ("PATS", "pats", {}), ("IAWP (paper rules)", "iawp", {}),
            ("IAWP slowdown-aware (ours)", "iawp", {"interference": "slowdown"}))
METRICS = ("tasks_per_s", "tasks_per_s_vs_fcfs", "latency_p50_ms", "latency_p99_ms",
           "mean_busy", "process_cpu_util", "tasks_per_cpu_s")
SEED = 7
SIZE_CAP = 1 << 18


def make_stream(count: int, seed: int = SEED) -> list[tuple[str, str, int]]:
    """(task id, app id, input size): the applications drawn uniformly, sizes lognormal around
    the synthetic generator's median (e^10.5 = 36k pixels), floored at 4k and capped."""
    from workload.catalog import app_ids
    rng = random.Random(seed)
    apps = app_ids()
    return [(f"bench-{i:05d}", rng.choice(apps),
             int(min(SIZE_CAP, max(4096, rng.lognormvariate(10.5, 0.8))))) for i in range(count)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def run_one(label: str, name: str, settings: dict, stream, args, costs, progress) -> tuple:
    """One run of the stream through a fresh executor; (metrics row, learned slowdowns)."""
    from interference.executor import ExecutorSettings, NodeExecutor
    from interference.schedulers import make_node_scheduler
    scheduler = make_node_scheduler(name, costs, **settings)
    config = ExecutorSettings(node_id="bench", scheduler=name, cpu_workers=args.cpu_workers,
                              use_gpu="never", max_in_flight=args.max_in_flight)
    with NodeExecutor(config, scheduler=scheduler, costs=costs) as node:
        for i, app in enumerate(sorted({app for _, app, _ in stream}) * 2):
            warm = node.submit(f"warm-{i}", app, 36_864).result()
            assert warm.status == "OK", warm.error
        futures = []

        def feed():  # arrivals as fast as admitted: submit blocks while max_in_flight are in
            for task in stream:
                future = node.submit(*task)
                future.add_done_callback(lambda _: progress.update())
                futures.append(future)

        cpu0, wall0 = time.process_time(), time.perf_counter()
        feeder = threading.Thread(target=feed)
        feeder.start()
        feeder.join()
        outcomes = [f.result() for f in futures]
        cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
        learned = node.learned_slowdowns()
        units = [u.unit_id for u in node.units]
    failed = [o for o in outcomes if o.status != "OK"]
    if failed:
        raise RuntimeError(f"{label}: {len(failed)} tasks failed, first: {failed[0].error}")
    finished = sorted(o.finished_at_ms for o in outcomes)
    first = int(args.warmup * len(outcomes))
    last = len(outcomes) - args.max_in_flight - 1
    start_ms, end_ms = finished[first], finished[last]
    measured = [o for o in outcomes if start_ms < o.finished_at_ms <= end_ms]
    window_ms = end_ms - start_ms
    busy = {u: 0.0 for u in units}
    for outcome in outcomes:
        for record in outcome.stages:
            overlap = min(record.finished_at_ms, end_ms) - max(record.started_at_ms, start_ms)
            busy[record.unit] += max(0, overlap)
    latencies = [o.queue_ms + o.service_ms for o in measured]
    row = {"scheduler": label, "scheduler_name": name, "settings": settings,
           "tasks": len(outcomes), "measured_tasks": len(measured), "window_s": window_ms / 1e3,
           "tasks_per_s": len(measured) / (window_ms / 1e3),
           "latency_p50_ms": percentile(latencies, 50), "latency_p99_ms": percentile(latencies, 99),
           "service_p50_ms": percentile([o.service_ms for o in measured], 50),
           "busy": {u: b / window_ms for u, b in busy.items()},
           "mean_busy": statistics.fmean(b / window_ms for b in busy.values()),
           "process_cpu_util": cpu_s / wall_s / len(units), "wall_s": wall_s,
           "tasks_per_cpu_s": len(outcomes) / cpu_s,
           "stage_units": _stage_units(outcomes)}
    return row, learned


def _stage_units(outcomes) -> dict[str, int]:
    counts: dict[str, int] = {}
    for outcome in outcomes:
        for record in outcome.stages:
            counts[record.unit] = counts.get(record.unit, 0) + 1
    return counts


def merge_learned(all_learned: list[dict]) -> list[dict]:
    """Count-weighted mean rate per (stage, partners, kind) over runs."""
    merged: dict[tuple, list[float]] = {}
    for learned in all_learned:
        for key, value in learned.items():
            total = merged.setdefault(key, [0.0, 0])
            total[0] += value["mean_rate"] * value["count"]
            total[1] += value["count"]
    rows = [{"stage": s, "partners": list(p), "kind": k, "count": int(n),
             "mean_rate": t / n, "slowdown": n / t}
            for (s, p, k), (t, n) in merged.items() if n]
    return sorted(rows, key=lambda r: (-r["count"], r["stage"]))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tasks", type=int, default=None, help="stream length (default 600, "
                        "150 with --quick)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per scheduler "
                        "(default 4, 3 with --quick)")
    parser.add_argument("--max-in-flight", type=int, default=8)
    parser.add_argument("--cpu-workers", type=int, default=0, help="0: one per CPU in affinity")
    parser.add_argument("--warmup", type=float, default=0.1, help="share of the stream excluded "
                        "at the start")
    args = parser.parse_args(argv)
    tasks = args.tasks or (150 if args.quick else 600)
    args.repeats = args.repeats or (3 if args.quick else 4)
    if tasks <= args.max_in_flight + 10:
        parser.error("--tasks must exceed --max-in-flight by more than 10")
    from tqdm import tqdm

    from interference.executor.devices import cpu_count
    from workload.estimates import CostModel
    costs = CostModel()
    stream = make_stream(tasks)
    runs, learned = [], []
    started = time.perf_counter()
    with tqdm(total=tasks * args.repeats * len(VARIANTS), desc="tasks", unit="task",
              mininterval=2.0) as progress:
        for repeat in range(args.repeats):
            order = VARIANTS if repeat % 2 == 0 else VARIANTS[::-1]
            for label, name, settings in order:
                row, slowdowns = run_one(label, name, settings, stream, args, costs, progress)
                runs.append({"repeat": repeat, **row})
                learned.append(slowdowns)
            # Paired with the same round's FCFS run: neighbours' load on a shared machine
            # drifts between rounds more than within one.
            fcfs = next(r["tasks_per_s"] for r in runs[-len(VARIANTS):]
                        if r["scheduler_name"] == "fcfs")
            for r in runs[-len(VARIANTS):]:
                r["tasks_per_s_vs_fcfs"] = r["tasks_per_s"] / fcfs
    summary = []
    for label, name, _ in VARIANTS:
        group = [r for r in runs if r["scheduler"] == label]
        row = {"scheduler": label, "runs": len(group)}
        for metric in METRICS:
            mean, low, high = confidence_interval([g[metric] for g in group])
            row[metric] = {"mean": mean, "ci95": [low, high]}
        row["busy"] = {u: statistics.fmean(g["busy"][u] for g in group) for u in group[0]["busy"]}
        summary.append(row)
    slowdowns = merge_learned(learned)
    stream_apps = {app: sum(1 for _, a, _ in stream if a == app) for _, app, _ in stream}
    name = "executor-quick" if args.quick else "executor"
    path = write_result(name, {
        "seed": SEED, "tasks": tasks, "repeats": args.repeats,
        "max_in_flight": args.max_in_flight,
        "cpu_workers": args.cpu_workers or cpu_count(), "warmup_share": args.warmup,
        "stream": {"apps": stream_apps, "size_median": statistics.median(s for *_, s in stream),
                   "size_cap": SIZE_CAP},
        "wall_s": time.perf_counter() - started, "summary": summary,
        "learned_slowdowns": slowdowns, "runs": runs})

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 5, figsize=(22, 4.2),
                             gridspec_kw={"width_ratios": [1, 1, 1, 1, 1.5]})
    labels = [s["scheduler"] for s in summary]
    colors = ["tab:gray", "tab:gray", "tab:blue", "tab:green"]
    for ax, metric, title in zip(axes, ("tasks_per_s", "tasks_per_s_vs_fcfs", "latency_p99_ms",
                                         "tasks_per_cpu_s"),
                                 ("tasks/s (95% CI)", "tasks/s / same round's FCFS (95% CI)",
                                  "p99 latency, ms (95% CI)", "tasks per process CPU-second")):
        means = [s[metric]["mean"] for s in summary]
        errors = [m - s[metric]["ci95"][0] for m, s in zip(means, summary)]
        ax.barh(labels, means, xerr=errors, color=colors)
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
    top = [r for r in slowdowns if r["count"] >= 20][:12] or slowdowns[:12]
    ax = axes[4]
    ax.barh([f"{r['stage']} | {'+'.join(r['partners'])}"[:60] for r in top][::-1],
            [r["slowdown"] for r in top][::-1], color="tab:orange")
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_title("measured CPU co-execution slowdown (most observed pairs)", fontsize=9)
    ax.tick_params(axis="y", labelsize=6)
    fig.suptitle(f"NodeExecutor on {cpu_count()} CPU cores: {tasks} tasks, "
                 f"{args.repeats} runs each, max {args.max_in_flight} in flight", fontsize=10)
    fig.tight_layout()
    fig.savefig(RESULTS / f"{name}.png", dpi=110)
    print(f"wrote {path}")
    for row in summary:
        print(f"{row['scheduler']:28s} " + "  ".join(
            f"{m} {row[m]['mean']:.3g} [{row[m]['ci95'][0]:.3g}, {row[m]['ci95'][1]:.3g}]"
            for m in METRICS))
    print("most observed co-execution slowdowns (stage | partners: slowdown, count):")
    for r in slowdowns[:10]:
        print(f"  {r['stage']} | {'+'.join(r['partners'])} ({r['kind']}): "
              f"{r['slowdown']:.2f}x, n={r['count']}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
