"""Online learning with and without the burst check, replayed: the learning curve in decisions.

The placement service's learner (:class:`placement.service.learner.OnlineLearner`, the
service's defaults: its initial model, ``publish_every`` 300, first version after 200 records)
is trained offline on a recorded run's NodeFeedback, in emission order, twice per seed: with
the burst check (``placement.service.burst_check``: a version whose correction drains a burst
slower than its prior is refused) and without it (tolerance infinite). Every version either
learner publishes is then judged the same way (``benchmarks.replay_decisions``): a router that
heard the whole run splits a 2,000-task burst, and the split's drain time at the nodes' measured
rates is compared with the prior alone's and with round-robin's.

What it shows: whether online learning drifts (versions getting worse as training goes on)
and whether the check stops it, over several seeds (the learner's ``seed`` setting: network
initialisation, replay sampling), with the mean and the worst version per learner.

    python -m benchmarks.burst_check_replay [--seeds 0,1,2]

Reads benchmarks/results/replay/hosts_2026-12-03/ (the feedback and the service's versions of
the 2026-12-03 quick round set); writes benchmarks/results/burst_check_replay.json and a PNG.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
from pathlib import Path

from benchmarks._common import RESULTS, write_result
from benchmarks.replay_decisions import BURST, busy_rates, read_feedback, replay_split
from placement.service.burst_check import BurstCheck, drain_s

__all__ = ["train_offline", "judge_versions", "main"]

RUN = RESULTS / "replay" / "hosts_2026-12-03"
#: records handed to the learner at a time (the consumer polls about this many per batch)
TAKE = 6
#: a version "worse than its prior" drains the burst this much slower
WORSE = 0.05


def train_offline(records: list[dict], spec: str, store_dir: Path, seed: int,
                  check: bool) -> tuple[list[Path], int]:
    """Train the service's learner on ``records``; (its published model files, versions
    refused)."""
    from placement.service.learner import OnlineLearner
    from placement.service.settings import ServiceSettings
    from placement.service.store import ModelStore
    from workload.cluster_spec import load_cluster_spec
    settings = ServiceSettings()
    learner = OnlineLearner(load_cluster_spec(spec), ModelStore(store_dir, keep=10_000),
                            {**settings.learning, "seed": seed}, publish_every=300,
                            min_records_first_version=200,
                            initial_model=settings.initial_model,
                            burst_check=BurstCheck(tolerance=0.05 if check else math.inf))
    for start in range(0, len(records), TAKE):
        learner.take(records[start:start + TAKE])
        learner.train_pending()
    return sorted(store_dir.glob("v*.spmodel")), learner.models_rejected


def judge_versions(records: list[dict], files: list[Path], spec: str, burst: int,
                   rates: dict) -> list[dict]:
    """Per version: the trained and the prior-only split's drain time (replay_decisions)."""
    rows = []
    for path in files:
        data = path.read_bytes()
        trained = drain_s(replay_split(records, data, spec, burst, 1.0), rates)
        prior = drain_s(replay_split(records, data, spec, burst, 0.0), rates)
        rows.append({"version": int(path.stem.lstrip("v")), "drain_s": trained,
                     "prior_drain_s": prior})
    return rows


def _summary(rows: list[dict]) -> dict:
    drains = [r["drain_s"] for r in rows if r["drain_s"] is not None]
    worse = [r for r in rows if r["drain_s"] is not None and r["prior_drain_s"] is not None
             and r["drain_s"] > r["prior_drain_s"] * (1 + WORSE)]
    return {"versions": len(rows), "mean_drain_s": statistics.fmean(drains) if drains else None,
            "worst_drain_s": max(drains) if drains else None,
            "best_drain_s": min(drains) if drains else None,
            "worse_than_prior": len(worse)}


def _plot(results: dict, prior: float, round_robin: float, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, (seed, both) in enumerate(sorted(results.items())):
        for kind, style in (("with_check", "-"), ("without_check", ":")):
            rows = both[kind]["rows"]
            ax.plot([r["version"] for r in rows], [r["drain_s"] for r in rows], style,
                    marker="o" if kind == "with_check" else ".", color=f"C{i}",
                    label=f"seed {seed}, {kind.replace('_', ' ')}")
    ax.axhline(prior, color="k", lw=1, ls="--", label="the prior alone (MCT, learned costs)")
    ax.axhline(round_robin, color="grey", lw=1, label="round-robin's equal split")
    ax.set_xlabel("published model version")
    ax.set_ylabel("drain time of a 2,000-task burst (s)")
    ax.set_title("Online learning on a recorded run: each published version's decisions")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, default=RUN, help="a folder with feedback.jsonl.gz")
    parser.add_argument("--spec", default="hosts")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--burst", type=int, default=BURST)
    args = parser.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--seeds must be integers separated by commas, got {args.seeds!r}")
    if not seeds or args.burst < 1:
        parser.error("need at least one seed and --burst >= 1")
    records = read_feedback(args.run / "feedback.jsonl.gz")
    if not records:
        raise SystemExit(f"{args.run}: no feedback records")
    rates = busy_rates(records)
    nodes = sorted(rates)
    equal = {n: args.burst // len(nodes) + (i < args.burst % len(nodes))
             for i, n in enumerate(nodes)}
    results = {}
    prior = None
    for seed in seeds:
        results[seed] = {}
        for kind, check in (("with_check", True), ("without_check", False)):
            with tempfile.TemporaryDirectory() as tmp:
                files, refused = train_offline(records, args.spec, Path(tmp), seed, check)
                rows = judge_versions(records, files, args.spec, args.burst, rates)
            prior = rows[0]["prior_drain_s"] if rows else prior
            results[seed][kind] = {"refused": refused, "rows": rows, "summary": _summary(rows)}
            s = results[seed][kind]["summary"]
            print(f"seed {seed} {kind:13s}: {s['versions']} versions, {refused} refused, "
                  f"drain mean {s['mean_drain_s']:.2f} s, worst {s['worst_drain_s']:.2f} s, "
                  f"{s['worse_than_prior']} worse than the prior by more than {WORSE:.0%}")
    round_robin = drain_s(equal, rates)
    print(f"the prior alone: {prior:.2f} s; round-robin: {round_robin:.2f} s")
    overall = {kind: {"mean_drain_s": statistics.fmean(
        results[s][kind]["summary"]["mean_drain_s"] for s in seeds),
        "worst_drain_s": max(results[s][kind]["summary"]["worst_drain_s"] for s in seeds),
        "worse_than_prior": sum(results[s][kind]["summary"]["worse_than_prior"] for s in seeds),
        "versions": sum(results[s][kind]["summary"]["versions"] for s in seeds)}
        for kind in ("with_check", "without_check")}
    write_result("burst_check_replay", {
        "run": str(args.run), "records": len(records), "spec": args.spec, "burst": args.burst,
        "seeds": seeds, "busy_rates_per_s": rates, "prior_drain_s": prior,
        "round_robin_drain_s": round_robin, "overall": overall,
        "per_seed": {str(s): v for s, v in results.items()}})
    _plot(results, prior, round_robin, RESULTS / "burst_check_replay.png")
    return overall


if __name__ == "__main__":
    main()
