"""GPU check of the IAWP executor (prepared for a GPU machine; one run takes a few minutes):

1. the operators' real pairwise interference on one GPU: every pair of GPU-capable stage types
   runs concurrently on two CUDA streams (one Python thread each) for ``--pair-s`` seconds;
   each one's rate over its rate alone is the normalised-throughput matrix (the quantity the
   Gavel table and the slowdown model hold);
2. the executor (``NodeExecutor``, GPUs and all CPU cores) on a mixed task stream, FCFS vs IAWP
   (paper rules) vs IAWP slowdown-aware, in alternating order: tasks/s, p50/p99 latency, where
   the stages ran, NVML GPU utilisation and node power sampled every 0.1 s, energy per task
   from the product's feedback path (the executor's snapshot -> ``FeedbackPublisher`` every
   0.5 s -> each record's ``completed_energy_j``, one entry per completed task), and the
   co-run slowdowns learned;
3. a user's operator, example (b) (``examples/text_inference``: tokenize -> torch classifier on
   the GPU -> label) in the ``OperatorExecutor`` with dynamic batching on and off
   (``benchmarks.operator_batching``): records/s, p99, mean model batch, NVML GPU utilisation.

    python -m benchmarks.gpu_check            # about 4-6 minutes on one GPU
    python -m benchmarks.gpu_check --quick    # about 1-2 minutes

Writes ``$OUT/gpu_check.json`` and ``.png`` when ``$OUT`` is set, else
``benchmarks/results/gpu_check.*``; prints a summary. Without CUDA it says so and exits with
status 2.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

from benchmarks._common import RESULTS, description, git_commit, machine

#: (label, scheduler name, settings)
VARIANTS = (("FCFS", "fcfs", {}), ("IAWP (paper rules)", "iawp", {}),
            ("IAWP slowdown-aware (ours)", "iawp", {"interference": "slowdown"}))


def _gpu_stage_inputs(size: int, device: str) -> dict[str, tuple]:
    """(app, frames, dependency outputs) per GPU-capable stage type, from one real task."""
    from workload.apps.registry import run_stage, stage_order, task_frames
    from workload.catalog import APPLICATIONS
    found: dict[str, tuple] = {}
    for app in APPLICATIONS.values():
        frames = task_frames(app.app_id, size, seed=0, device=device)
        outputs = {}
        for name in stage_order(app):
            stage = app.stage(name)
            inputs = {d: outputs[d] for d in stage.deps}
            outputs[name] = run_stage(name, frames, inputs)
            if stage.gpu_capable and name not in found:
                found[name] = (app.app_id, frames, inputs)
    return found


def _rates(stages: list[str], inputs: dict, seconds: float) -> list[float]:
    """Run each stage in its own thread and stream, together, for ``seconds``; ops/s each."""
    import torch
    from workload.apps.registry import run_stage
    barrier = threading.Barrier(len(stages))
    rates = [0.0] * len(stages)
    errors: list[BaseException] = []

    def loop(i: int, name: str) -> None:
        _, frames, deps = inputs[name]
        stream = torch.cuda.Stream()
        try:
            with torch.cuda.stream(stream):
                barrier.wait()
                start, count = time.perf_counter(), 0
                while time.perf_counter() - start < seconds:
                    run_stage(name, frames, deps)
                    count += 1
                stream.synchronize()
                rates[i] = count / (time.perf_counter() - start)
        except BaseException as exc:  # noqa: BLE001 - reported as a missing rate
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=loop, args=(i, s)) for i, s in enumerate(stages)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{stages}: {errors[0]!r}")
    return rates


def pairwise(size: int, seconds: float, progress) -> dict:
    import torch
    inputs = _gpu_stage_inputs(size, "cuda:0")
    names = sorted(inputs)
    for name in names:  # warm every kernel once on a side stream
        _rates([name], inputs, 0.05)
    alone = {name: _rates([name], inputs, seconds)[0] for name in names}
    matrix = {a: {} for a in names}
    failures = []
    for a, b in itertools.combinations_with_replacement(names, 2):
        try:
            ra, rb = _rates([a, b], inputs, seconds)
            matrix[a][b] = ra / alone[a]
            matrix[b][a] = rb / alone[b]
        except RuntimeError as exc:  # e.g. out of memory: the pair cannot co-run
            failures.append(str(exc))
            torch.cuda.empty_cache()
        progress.update()
    return {"size": size, "seconds_per_measurement": seconds, "stages": names,
            "alone_ops_per_s": alone, "normalised_throughput": matrix, "failures": failures}


def _num(value) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _feedback_task(feedback, task: tuple, future) -> None:
    """Report one finished task to the feedback publisher, as the Flink executor function does
    (routed here, at its start: only routed tasks are reported)."""
    from pyflink_jobs.feedback import FinishedTask
    from pyflink_jobs.routed import DecisionContext, RoutedRecord
    if future.exception() is not None:
        return
    outcome = future.result()
    event = {"task_id": task[0], "app_id": task[1], "input_size": task[2]}
    feedback.task_finished(FinishedTask.from_task_outcome(event, outcome), RoutedRecord(
        task[0], task[1], task[2], "gpu-check", outcome.started_at_ms, DecisionContext(), event),
        bytes_in=0, bytes_out=0)


def _energy(reports: list[dict], samples: list[tuple], refused: int) -> dict:
    """Node power (telemetry samples) and energy per task (the feedback records) of one run."""
    # completed_energy_j: one entry per completed task, same order (-1: not reported)
    energies = [j for r in reports if len(r["completed_energy_j"]) == len(r["completed"])
                for j in r["completed_energy_j"] if j >= 0]
    watts = [s[2] for s in samples if s[2] >= 0]
    return {"power_w_mean": statistics.fmean(watts) if watts else None,
            "power_w_max": max(watts, default=None),
            "power_sources": sorted({r["power_source"] for r in reports}),
            "gpu_power_readings_refused": refused,
            "tasks_with_energy": len(energies),
            "tasks_reported": sum(len(r["completed"]) for r in reports),
            "energy_j_per_task_mean": statistics.fmean(energies) if energies else None,
            "energy_j_total": sum(energies)}


def executor_runs(tasks: int, repeats: int, max_in_flight: int, budget_s: float,
                  progress) -> dict:
    from benchmarks.executor import make_stream, percentile
    from interference.executor import ExecutorSettings, NodeExecutor, NodeTelemetry
    from interference.schedulers import make_node_scheduler
    from pyflink_jobs.feedback import FeedbackPublisher
    from workload.estimates import CostModel
    costs = CostModel()
    stream = make_stream(tasks)
    runs, learned, started = [], {}, time.perf_counter()
    for repeat in range(repeats):
        for label, name, settings in (VARIANTS if repeat % 2 == 0 else VARIANTS[::-1]):
            if time.perf_counter() - started > budget_s:
                runs.append({"scheduler": label, "repeat": repeat, "skipped": "time budget"})
                continue
            config = ExecutorSettings(node_id="gpu-check", scheduler=name, use_gpu="always",
                                      max_in_flight=max_in_flight)
            scheduler = make_node_scheduler(name, costs, **settings)
            with NodeExecutor(config, scheduler=scheduler, costs=costs) as node, \
                    NodeTelemetry(min_interval_s=0.0) as telemetry:
                for i, app in enumerate(sorted({a for _, a, _ in stream}) * 2):  # warm-up
                    node.submit(f"warm-{i}", app, 36_864).result()
                samples, stop = [], threading.Event()
                feedback = FeedbackPublisher("gpu-check", node.snapshot)
                reports = [feedback.build_record()]  # the first power reading

                def sample():
                    ticks = 0
                    while not stop.wait(0.1):
                        s = telemetry.sample()
                        samples.append((s["gpu_util"], s["gpu_mem_util"], s["power_w"]))
                        ticks += 1
                        if ticks % 5 == 0:  # FeedbackPublisher's default interval, 0.5 s
                            reports.append(feedback.build_record())

                sampler = threading.Thread(target=sample)
                sampler.start()
                t0 = time.perf_counter()
                futures = []
                for task in stream:
                    futures.append(node.submit(*task))
                    futures[-1].add_done_callback(
                        lambda f, t=task: _feedback_task(feedback, t, f))
                outcomes = [f.result() for f in futures]
                wall = time.perf_counter() - t0
                stop.set()
                sampler.join()
                reports.append(feedback.build_record())
                energy = _energy(reports, samples,
                                 node.telemetry.power_ignored + telemetry.power_ignored)
                for key, value in node.learned_slowdowns().items():
                    if key[2] == "gpu":
                        total = learned.setdefault(f"{key[0]} | {'+'.join(key[1])}", [0.0, 0])
                        total[0] += value["mean_rate"] * value["count"]
                        total[1] += value["count"]
                observed = getattr(node.scheduler, "observed", 0)
            ok = [o for o in outcomes if o.status == "OK"]
            units: dict[str, int] = {}
            for o in ok:
                for r in o.stages:
                    kind = r.unit.split(":")[0]
                    units[kind] = units.get(kind, 0) + 1
            latencies = [o.queue_ms + o.service_ms for o in ok]
            runs.append({"scheduler": label, "repeat": repeat, "tasks": len(outcomes),
                         "failed": len(outcomes) - len(ok),
                         "first_error": next((o.error for o in outcomes if o.error), None),
                         "tasks_per_s": len(ok) / wall, "wall_s": wall,
                         "latency_p50_ms": percentile(latencies, 50) if ok else None,
                         "latency_p99_ms": percentile(latencies, 99) if ok else None,
                         "gpu_util_mean": statistics.fmean(s[0] for s in samples) if samples else 0,
                         "gpu_mem_util_max": max((s[1] for s in samples), default=0.0),
                         "stages_per_unit_kind": units, "corun_observations": observed,
                         **energy})
            progress.update()
    summary = []
    for label, _, _ in VARIANTS:
        group = [r for r in runs if r["scheduler"] == label and "skipped" not in r]
        if group:
            summary.append({"scheduler": label, "runs": len(group), **{
                m: statistics.fmean(v) if (v := [r[m] for r in group if r[m] is not None])
                else None for m in ("tasks_per_s", "latency_p50_ms", "latency_p99_ms",
                                    "gpu_util_mean", "power_w_mean", "energy_j_per_task_mean")}})
    gpu_learned = sorted(({"pair": k, "mean_rate": t / n, "count": n}
                          for k, (t, n) in learned.items()), key=lambda r: -r["count"])
    return {"tasks": tasks, "repeats": repeats, "max_in_flight": max_in_flight,
            "summary": summary, "runs": runs, "learned_gpu_slowdowns": gpu_learned}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--size", type=int, default=1 << 20, help="clip pixels for the pairs")
    parser.add_argument("--pair-s", type=float, default=None, help="seconds per measurement")
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--max-in-flight", type=int, default=32)
    parser.add_argument("--budget-s", type=float, default=330.0,
                        help="stop starting new runs after this many seconds (whole script)")
    args = parser.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible to torch (torch.cuda.is_available() is False, "
              f"torch {torch.__version__}); this check needs a GPU machine. Nothing measured.",
              file=sys.stderr)
        return 2
    from tqdm import tqdm
    started = time.perf_counter()
    pair_s = args.pair_s or (0.2 if args.quick else 0.5)
    tasks = args.tasks or (150 if args.quick else 400)
    repeats = args.repeats or (1 if args.quick else 2)
    props = torch.cuda.get_device_properties(0)
    device = {"name": props.name, "memory_gb": round(props.total_memory / 2**30, 1),
              "count": torch.cuda.device_count(), "torch": torch.__version__,
              "cuda": torch.version.cuda}
    print(f"gpu_check on {device}", flush=True)
    from workload.catalog import APPLICATIONS
    gpu_stages = len({s.name for app in APPLICATIONS.values() for s in app.stages
                      if s.gpu_capable})
    with tqdm(total=gpu_stages * (gpu_stages + 1) // 2, desc="stage pairs",
              mininterval=2.0) as progress:
        pairs = pairwise(args.size, pair_s, progress)
    remaining = args.budget_s - (time.perf_counter() - started)
    with tqdm(total=repeats * len(VARIANTS), desc="executor runs") as progress:
        execution = executor_runs(tasks, repeats, args.max_in_flight, remaining, progress)
    from benchmarks import operator_batching
    records = operator_batching.reviews(800 if args.quick else 3000, seed=7)
    batching = {}
    for label, on in (("batching on", True), ("batching off", False), ("batching on ", True)):
        run = operator_batching.one_run(on, records, workers=0)
        run.pop("outputs")
        batching.setdefault(label.strip(), []).append(run)
        print(f"example (b) {label.strip():12s} {run['records_per_s']:.1f} records/s  p99 "
              f"{run['p99_ms']:.1f} ms  GPU util {run['gpu_util_mean']}  model batch "
              f"{run['model_stage']}", flush=True)
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    document = {"benchmark": "gpu_check", "operator_batching": batching, "command": " ".join([Path(sys.executable).name]
                                                              + sys.argv),
                "git_commit": git_commit(), "machine": machine(), "device": device,
                "wall_s": time.perf_counter() - started, "pairs": pairs, "executor": execution}
    (out / "gpu_check.json").write_text(json.dumps(document, indent=2) + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    names = pairs["stages"]
    grid = np.array([[pairs["normalised_throughput"][a].get(b, np.nan) for b in names]
                     for a in names])
    fig, axes = plt.subplots(1, 2, figsize=(15, 6))
    image = axes[0].imshow(grid, vmin=0, vmax=1.2, cmap="viridis")
    axes[0].set_xticks(range(len(names)), names, rotation=70, fontsize=7)
    axes[0].set_yticks(range(len(names)), names, fontsize=7)
    axes[0].set_title(f"normalised throughput of row next to column ({device['name']})",
                      fontsize=9)
    fig.colorbar(image, ax=axes[0])
    summary = execution["summary"]
    axes[1].barh([s["scheduler"] for s in summary], [s["tasks_per_s"] for s in summary],
                 color=["tab:gray", "tab:blue", "tab:green"][:len(summary)])
    for i, s in enumerate(summary):
        axes[1].text(s["tasks_per_s"], i, f" GPU util {s['gpu_util_mean']:.2f}, "
                     f"p99 {s['latency_p99_ms']:.0f} ms", va="center", fontsize=8)
    axes[1].set_title("executor tasks/s (mean over runs)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "gpu_check.png", dpi=110)

    print(f"wrote {out / 'gpu_check.json'} ({document['wall_s']:.0f} s)")
    rows = [(a, b, grid[i, j]) for i, a in enumerate(names) for j, b in enumerate(names)
            if not np.isnan(grid[i, j])]
    rows.sort(key=lambda r: r[2])
    print("most interfering pairs (row's throughput next to column, 1 = unaffected):")
    for a, b, v in rows[:8]:
        print(f"  {a:22s} next to {b:22s} {v:.2f}")
    if pairs["failures"]:
        print(f"pairs that failed: {len(pairs['failures'])}, first: {pairs['failures'][0]}")
    for s in summary:
        print(f"{s['scheduler']:28s} tasks/s {s['tasks_per_s']:.1f}  p50 "
              f"{s['latency_p50_ms']:.0f} ms  p99 {s['latency_p99_ms']:.0f} ms  GPU util "
              f"{s['gpu_util_mean']:.2f}  node power {_num(s['power_w_mean'])} W  "
              f"energy/task {_num(s['energy_j_per_task_mean'])} J")
    for r in execution["runs"]:
        if "skipped" not in r:
            print(f"  {r['scheduler']} run {r['repeat']}: power from {r['power_sources']}, "
                  f"{r['tasks_with_energy']}/{r['tasks_reported']} tasks with energy, "
                  f"{r['gpu_power_readings_refused']} GPU power readings refused")
    for r in execution["runs"]:
        if r.get("failed"):
            print(f"  {r['scheduler']} run {r['repeat']}: {r['failed']} failed: {r['first_error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
