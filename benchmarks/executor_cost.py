"""What example (b)'s operator costs per review in the IAWP executor, outside Flink, against the
plain map: CPU a review per thread, and reviews a second.

On the real engines example (b)'s hooked job spent 1.9-2.2 ms of Python CPU a review against the
plain job's 0.9 (docs/results-engines.md, "Is it the service or its learned versions?"), and on
this 2-core
machine that CPU, not the placement, bounds it. This isolates the executor: the operator of
``examples/text_inference/hooked_job.py`` (``[tokenize, TextNet, to_label]``) in an
:class:`~interference.executor.OperatorExecutor` with one CPU unit, 32 records in flight (the
hook's ``executor_capacity``), the records submitted from an asyncio loop as PyFlink's async
operator does; and the plain job's ``Classify.map`` on the same reviews in a loop. Variants:

- ``plain map``: ``Classify.map`` per review (tokenize, the model on one review, label);
- ``executor``: the executor as the hook runs it (batching and call groups on);
- ``executor, no call groups``: per-record stages get one input per call
  (``OperatorExecutorSettings.call_groups=False``, the behaviour before 2026-12-06);
- ``executor, batching off``: every stage call gets one input (the benchmarks' ablation).

Each round runs every variant once on the same reviews, in rotating order, after a warm-up;
CPU is this process's (``time.process_time``) over the measured part, split per thread from
``/proc/self/task`` (Linux; elsewhere the split is left out).

    python -m benchmarks.executor_cost [--reviews 3000] [--rounds 5]

Writes ``benchmarks/results/executor_cost.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time

from benchmarks._common import RESULTS, bar_with_ci, description, write_result

__all__ = ["VARIANTS", "measure_plain", "measure_executor", "main"]

VARIANTS = ("plain map", "executor", "executor, no call groups", "executor, batching off")
#: records in flight in the executor: the hook's executor_capacity
IN_FLIGHT = 32


def _thread_cpu_s() -> dict[int, tuple[str, float]]:
    """Thread id -> (name, user + system CPU seconds), from /proc (empty elsewhere)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:   # the thread ended meanwhile
            continue
        out[int(tid)] = (_thread_name(int(tid)), (int(fields[11]) + int(fields[12])) / tick)
    return out


def _thread_name(tid: int) -> str:
    for thread in threading.enumerate():
        if thread.native_id == tid:
            # numbered lanes and pools read as one kind of thread
            return thread.name.rstrip("0123456789_").rstrip("-") or thread.name
    return "other"


def _per_thread_us(before: dict, after: dict, reviews: int) -> dict[str, float]:
    totals: dict[str, float] = {}
    for tid, (name, cpu) in after.items():
        spent = cpu - before.get(tid, (name, 0.0))[1]
        totals[name] = totals.get(name, 0.0) + spent
    return {name: round(1e6 * s / reviews, 1) for name, s in sorted(totals.items()) if s > 0}


def measure_plain(lines: list[str]) -> dict:
    """The plain job's map over ``lines``, one review at a time."""
    from examples.text_inference.hooked_job import Classify
    classify = Classify()
    classify.open(None)
    for line in lines[:50]:   # warm-up: torch's first calls
        classify.map(line)
    cpu, wall = time.process_time(), time.perf_counter()
    for line in lines:
        classify.map(line)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"cpu_us_per_review": 1e6 * cpu / len(lines), "reviews_per_s": len(lines) / wall}


def measure_executor(lines: list[str], **settings) -> dict:
    """``lines`` through an OperatorExecutor with ``settings`` (OperatorExecutorSettings)."""
    from examples.text_inference.hooked_job import TextNet, to_label, tokenize
    from interference.executor import OperatorExecutorSettings, operator_executor_for
    executor = operator_executor_for([tokenize, TextNet, to_label], OperatorExecutorSettings(
        node_id="bench", cpu_workers=1, use_gpu="never", **settings))
    try:
        _submit_all(executor, lines[:300], "warm")
        before, cpu, wall = _thread_cpu_s(), time.process_time(), time.perf_counter()
        outcomes = _submit_all(executor, lines, "r")
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        after = _thread_cpu_s()
        report = executor.batch_report()
    finally:
        executor.close()
    failed = [o.error for o in outcomes if o.status != "OK"]
    if failed:
        raise RuntimeError(f"{len(failed)} reviews failed in the executor, e.g. {failed[0]}")
    return {"cpu_us_per_review": 1e6 * cpu / len(lines), "reviews_per_s": len(lines) / wall,
            "thread_cpu_us_per_review": _per_thread_us(before, after, len(lines)),
            "stage_calls": {stage: {"calls": kinds["cpu"]["batches"],
                                    "mean_inputs": round(kinds["cpu"]["mean_inputs"], 2)}
                            for stage, kinds in report.items() if "cpu" in kinds}}


def _submit_all(executor, lines: list[str], prefix: str) -> list:
    async def run_all():
        slots = asyncio.Semaphore(IN_FLIGHT)

        async def one(i: int, line: str):
            async with slots:
                return await executor.run(f"{prefix}{i}", line, len(line))
        return await asyncio.gather(*(one(i, line) for i, line in enumerate(lines)))
    return asyncio.run(run_all())


def confidence(values: list[float]) -> dict:
    from scipy import stats
    mean = statistics.fmean(values)
    if len(values) < 2:
        return {"mean": mean, "ci95": [mean, mean], "runs": values}
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return {"mean": mean, "ci95": [mean - half, mean + half], "runs": values}


def run_variant(variant: str, lines: list[str]) -> dict:
    if variant == "plain map":
        return measure_plain(lines)
    settings = {"executor": {}, "executor, no call groups": {"call_groups": False},
                "executor, batching off": {"batching": False}}[variant]
    return measure_executor(lines, **settings)


def plot(summary: list[dict], path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    labels = [s["variant"] for s in summary]
    for ax, key, title in ((axes[0], "cpu_us_per_review", "CPU a review (µs), lower is better"),
                           (axes[1], "reviews_per_s", "reviews a second, higher is better")):
        bar_with_ci(ax, labels, [s[key]["mean"] for s in summary],
                    [s[key]["ci95"] for s in summary],
                    colours=["tab:gray", "tab:green", "tab:orange", "tab:red"],
                    horizontal=True)
        ax.set_title(title)
        ax.invert_yaxis()
    fig.suptitle("Example (b)'s operator in the IAWP executor (1 CPU unit, 32 in flight) "
                 "against the plain map, outside Flink (mean, 95% CI)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--reviews", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if args.reviews < 100 or args.rounds < 1:
        parser.error("need --reviews >= 100 and --rounds >= 1")
    import torch
    torch.set_num_threads(1)   # as the hook's CPU units and the plain job's map
    from benchmarks.flink_e2e_examples import records_for
    lines = [r.decode() for r in records_for("text_inference", args.reviews, seed=1,
                                             prefix="review")]
    rows = []
    for round_ in range(args.rounds):
        order = VARIANTS[round_ % len(VARIANTS):] + VARIANTS[:round_ % len(VARIANTS)]
        for variant in order:
            row = {"variant": variant, "round": round_, **run_variant(variant, lines)}
            rows.append(row)
            print(f"round {round_ + 1}/{args.rounds} {variant:28s} "
                  f"{row['cpu_us_per_review']:7.0f} us CPU a review, "
                  f"{row['reviews_per_s']:7.0f} reviews/s", flush=True)
    summary = [{"variant": v,
                "cpu_us_per_review": confidence([r["cpu_us_per_review"] for r in rows
                                                 if r["variant"] == v]),
                "reviews_per_s": confidence([r["reviews_per_s"] for r in rows
                                             if r["variant"] == v])} for v in VARIANTS]
    path = write_result("executor_cost", {"reviews": args.reviews, "rounds": args.rounds,
                                          "in_flight": IN_FLIGHT, "cpu_units": 1,
                                          "summary": summary, "runs": rows})
    plot(summary, RESULTS / "executor_cost.png")
    for s in summary:
        cpu, rate = s["cpu_us_per_review"], s["reviews_per_s"]
        print(f"  {s['variant']:28s} {cpu['mean']:7.0f} us [{cpu['ci95'][0]:.0f}, "
              f"{cpu['ci95'][1]:.0f}]  {rate['mean']:7.0f} reviews/s [{rate['ci95'][0]:.0f}, "
              f"{rate['ci95'][1]:.0f}]")
    print(f"wrote {path}")
    return {"path": str(path), "summary": summary}


if __name__ == "__main__":
    main()
