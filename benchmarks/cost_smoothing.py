"""How fast should the measured work times forget? MCT's burst on two recorded runs.

    python -m benchmarks.cost_smoothing

Why: on the emulated hosts MCT at measured speeds and LDWP's prior both decide from
:class:`placement.measured_costs.MeasuredCosts`, one exponentially weighted fit per (task type,
node). Its ``smoothing`` was 0.05, about the last 20 tasks. A text review takes 3-10 ms of work,
but on a host whose CPU quota throttles it (tm_b: 0.35 core) one in a few tasks waits out a
throttled period, so 20 tasks are a noisy sample: at the end of the 2026-12-03 run the fits said
tm_b (5.5 ms) was faster than tm_c (6.2 ms) while tm_b drained 128 tasks/s and tm_c 164, and
the router sent tm_b a third of a burst. Fewer, steadier decisions need a longer memory.

What it does: for each recorded run (NodeFeedback JSON lines: the run's feedback topic, dumped
with ``benchmarks/replay_decisions.py --from-topic``) and each smoothing, a router with policy
MCT hears the first 30%, 40%, ..., 100% of the records and decides a burst of ``--burst``
tasks at each of those points (``replay_split``); each split is judged by the run's measured
drain rates (``busy_rates``: seconds the busiest node needs for its share). References: the
split in proportion to the drain rates (the best a router could do with those rates) and
round-robin's equal split.

Hold-out: the default was chosen on the first run (``hosts_2026-12-03``) only; the second
(``hosts_2026-12-03b``, recorded in a later session with the burst check on) was looked at
afterwards. Writes ``benchmarks/results/cost_smoothing.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from benchmarks._common import RESULTS, write_result
from benchmarks.replay_decisions import busy_rates, drain_s, read_feedback, replay_split
from placement.measured_costs import COST_SMOOTHING

__all__ = ["main", "burst_drains"]

REPLAYS = RESULTS / "replay"
#: (folder under benchmarks/results/replay, role)
RUNS = (("hosts_2026-12-03", "tuned on"), ("hosts_2026-12-03b", "held out"))
SMOOTHINGS = (0.05, 0.02, 0.01, 0.005, 0.002)
#: the points in a run (fractions of its records) where a burst is decided
CUTS = tuple(i / 10 for i in range(3, 11))


def burst_drains(records: list[dict], smoothing: float, burst: int, spec: str = "hosts",
                 rates: dict | None = None, cuts=CUTS) -> list[float | None]:
    """MCT's burst drain time (s) at each of ``cuts`` with ``smoothing``, judged by ``rates``
    (default: the drain rates measured over all of ``records``)."""
    rates = busy_rates(records) if rates is None else rates
    return [drain_s(replay_split(records[:max(1, int(len(records) * cut))], None, spec, burst,
                                 cost_smoothing=smoothing), rates) for cut in cuts]


def _summary(drains: list[float | None]) -> dict:
    known = [d for d in drains if d is not None]
    return {"drain_s": drains, "mean_s": statistics.fmean(known) if known else None,
            "worst_s": max(known) if known else None}


def _plot(runs: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(runs), figsize=(5.2 * len(runs), 3.8), squeeze=False)
    for ax, (name, run) in zip(axes[0], runs.items()):
        xs = [row["smoothing"] for row in run["rows"]]
        ax.plot(xs, [row["mean_s"] for row in run["rows"]], "o-", label="MCT, mean over cuts")
        ax.plot(xs, [row["worst_s"] for row in run["rows"]], "v:", label="MCT, worst cut")
        ax.axhline(run["rate_proportional_s"], color="green", ls="--",
                   label="split by drain rates")
        ax.axhline(run["round_robin_s"], color="grey", ls="--", label="round-robin")
        ax.axvline(COST_SMOOTHING, color="black", lw=0.8)
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.set_xlabel("MeasuredCosts smoothing (log)")
        ax.set_ylabel(f"seconds to drain a {run['burst']}-task burst")
        ax.set_title(f"{name} ({run['role']})", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--replays", type=Path, default=REPLAYS,
                        help="folder holding the recorded runs' folders")
    args = parser.parse_args(argv)
    if args.burst < 1:
        parser.error("--burst must be at least 1")
    runs = {}
    for name, role in RUNS:
        path = args.replays / name / "feedback.jsonl.gz"
        if not path.is_file():
            raise SystemExit(f"{path}: missing (the recorded runs ship in the repository)")
        records = read_feedback(path)
        rates = busy_rates(records)
        total = sum(rates.values())
        share = {n: args.burst * r / total for n, r in rates.items()}
        equal = {n: args.burst / len(rates) for n in rates}
        rows = []
        for smoothing in SMOOTHINGS:
            row = {"smoothing": smoothing,
                   **_summary(burst_drains(records, smoothing, args.burst, rates=rates))}
            rows.append(row)
            print(f"{name}: smoothing {smoothing}: mean {row['mean_s']:.2f} s, "
                  f"worst {row['worst_s']:.2f} s")
        runs[name] = {"role": role, "records": len(records), "burst": args.burst,
                      "busy_rates_per_s": rates, "rate_proportional_s": drain_s(share, rates),
                      "round_robin_s": drain_s(equal, rates), "rows": rows}
    default = {name: next(r for r in run["rows"] if r["smoothing"] == COST_SMOOTHING)
               for name, run in runs.items()}
    old = {name: run["rows"][0] for name, run in runs.items()}
    verdict = {name: {"default": COST_SMOOTHING, "mean_s": default[name]["mean_s"],
                      "old_default_mean_s": old[name]["mean_s"],
                      "change": default[name]["mean_s"] / old[name]["mean_s"] - 1.0}
               for name in runs}
    for name, v in verdict.items():
        print(f"{name} ({runs[name]['role']}): smoothing {COST_SMOOTHING} drains in "
              f"{v['mean_s']:.2f} s on average, {v['change']:+.1%} against 0.05")
    write_result("cost_smoothing", {"cuts": list(CUTS), "smoothings": list(SMOOTHINGS),
                                    "runs": runs, "verdict": verdict})
    _plot(runs, RESULTS / "cost_smoothing.png")
    return verdict


if __name__ == "__main__":
    main()
