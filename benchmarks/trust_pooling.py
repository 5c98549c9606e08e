"""How LDWP's trust rule changes its decisions: the pooled correction against the rule before it.

The residual LDWP weights its learned correction by the evidence it has for each node and task
type (``placement.ldwp.evidence``). Until 2026-12-06 each node's correction was scaled by its
own trust alone, so a node without evidence was decided on its bare prior beside nodes whose
(large, mostly common) correction said every wait is several times longer than the prior
thinks; since then the correction is pooled (``pooled_correction``): a node with less evidence
is pulled toward the trusted nodes' mean correction. This runs the shipped residual model both
ways on the same tasks, paired per seed, with MCT (its prior) beside them:

- ``per-node`` (the rule before): ``trust_i * correction_i``;
- ``pooled`` (the rule the code runs): see ``placement.ldwp.evidence``.

The rule before is the frozen agent's ``trust_rule = "per_node"`` for its runs
(``placement.ldwp.evidence.TRUST_RULES``): the model file, the tasks and everything else are
the same.

Clusters: the generalisation benchmark's (``benchmarks.generalisation.make_cluster``), the
training cluster included; HEFT on every node, saturated arrivals, 1,500 tasks, the evaluation
seeds (1001-1005) by default.

    python -m benchmarks.trust_pooling [--quick] [--seeds 2001-2005] [--clusters a,b]

Writes benchmarks/results/trust_pooling.json (``--name``) and a PNG beside it.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor

from benchmarks._common import RESULTS, description, write_result
from benchmarks.baselines import EVALUATION_SEEDS, confidence_interval
from benchmarks.burst_lengths import parse_seeds
from benchmarks.generalisation import CLUSTERS, make_cluster

__all__ = ["RULES", "run_one", "summarise", "main"]

#: the trust rules compared, and MCT (the prior) on the same tasks
RULES = ("pooled", "per-node", "mct")


def run_one(job: tuple) -> dict:
    """One (cluster, rule, seed) run: throughput (tasks/min) and decisions per node."""
    cluster_name, rule, seed, tasks = job
    import torch
    torch.set_num_threads(1)
    from interference.schedulers import make_node_scheduler
    from placement.ldwp.agent import LDWPPolicy
    from placement.ldwp.shipped import shipped_model
    from placement.policies import make_policy
    from simulator import Simulator
    from simulator.scenarios import paper_costs, saturated_workload
    costs, cluster = paper_costs(), make_cluster(cluster_name)
    policy = (make_policy("mct", cluster, costs, seed=seed) if rule == "mct"
              else LDWPPolicy.from_file(shipped_model("residual"), cluster, costs))
    started = time.perf_counter()
    if rule == "per-node":   # the rule before 2026-12-06: each node's own trust
        policy.trust_rule = "per_node"
    result = Simulator(costs).run(policy, make_node_scheduler("heft", costs, seed=seed),
                                  cluster, saturated_workload(tasks, seed=seed), seed=seed)
    shares: dict[str, int] = {}
    for _, decision in result.decisions:
        shares[decision.node] = shares.get(decision.node, 0) + 1
    return {"cluster": cluster_name, "rule": rule, "seed": seed,
            "throughput_per_min": result.metrics.throughput_per_min,
            "decisions_per_node": shares, "wall_s": time.perf_counter() - started}


def summarise(runs: list[dict]) -> list[dict]:
    """Per cluster and rule: mean and 95% CI of throughput, and the paired change over MCT
    (per seed, then mean and CI)."""
    rows = []
    for cluster in dict.fromkeys(r["cluster"] for r in runs):
        mct = {r["seed"]: r["throughput_per_min"] for r in runs
               if r["cluster"] == cluster and r["rule"] == "mct"}
        for rule in RULES:
            mine = {r["seed"]: r["throughput_per_min"] for r in runs
                    if r["cluster"] == cluster and r["rule"] == rule}
            if not mine:
                continue
            mean, low, high = confidence_interval(list(mine.values()))
            row = {"cluster": cluster, "rule": rule, "throughput_per_min":
                   {"mean": mean, "ci95": [low, high], "runs": [mine[s] for s in sorted(mine)]}}
            paired = [mine[s] / mct[s] - 1.0 for s in sorted(mine) if s in mct and mct[s] > 0]
            if rule != "mct" and len(paired) > 1:
                change, c_low, c_high = confidence_interval(paired)
                row["change_vs_mct"] = {"mean": change, "ci95": [c_low, c_high],
                                        "runs": paired}
            rows.append(row)
    return rows


def plot(rows: list[dict], path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    clusters = list(dict.fromkeys(r["cluster"] for r in rows))
    fig, ax = plt.subplots(figsize=(9, 0.8 + 0.7 * len(clusters)))
    for offset, rule, colour in ((-0.2, "pooled", "tab:green"), (0.2, "per-node", "tab:red")):
        values, errors = [], [[], []]
        for cluster in clusters:
            row = next((r for r in rows if r["cluster"] == cluster and r["rule"] == rule
                        and "change_vs_mct" in r), None)
            change = row["change_vs_mct"] if row else {"mean": 0.0, "ci95": [0.0, 0.0]}
            values.append(100 * change["mean"])
            errors[0].append(100 * (change["mean"] - change["ci95"][0]))
            errors[1].append(100 * (change["ci95"][1] - change["mean"]))
        ax.barh([i + offset for i in range(len(clusters))], values, height=0.4, xerr=errors,
                color=colour, label=f"LDWP, {rule} trust")
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(clusters)), clusters)
    ax.set_xlabel("throughput change over MCT (%, paired per seed, mean and 95% CI)")
    ax.set_title("LDWP's trust rule: pooled correction vs each node's own")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="300 tasks, 2 seeds")
    parser.add_argument("--seeds", default=None, help="e.g. 2001-2005 or 1001,1002 "
                        "(default: the evaluation seeds 1001-1005)")
    parser.add_argument("--clusters", default=",".join(CLUSTERS),
                        help=f"comma-separated, from {', '.join(CLUSTERS)}")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--name", default=None)
    args = parser.parse_args(argv)
    from tqdm import tqdm
    clusters = [c.strip() for c in args.clusters.split(",") if c.strip()]
    if not clusters or set(clusters) - set(CLUSTERS):
        parser.error(f"--clusters takes clusters from {', '.join(CLUSTERS)}")
    try:
        seeds = parse_seeds(args.seeds) if args.seeds else EVALUATION_SEEDS
    except ValueError:
        parser.error(f"--seeds: {args.seeds!r} is not a range (2001-2005) or a list")
    if args.quick:
        seeds = seeds[:2]
    tasks = 300 if args.quick else 1500
    name = args.name or ("trust_pooling-quick" if args.quick else "trust_pooling")
    jobs = [(c, rule, s, tasks) for c in clusters for rule in RULES for s in seeds]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        runs = list(tqdm(pool.map(run_one, jobs), total=len(jobs), desc="trust pooling",
                         unit="run", disable=None))
    rows = summarise(runs)
    path = write_result(name, {"tasks": tasks, "seeds": list(seeds), "node_scheduler": "heft",
                               "model": "placement/models/ldwp_residual_paper.spm",
                               "wall_s": time.perf_counter() - started,
                               "summary": rows, "runs": runs})
    plot(rows, RESULTS / f"{name}.png")
    print(f"{len(runs)} runs; wrote {path}")
    for row in rows:
        change = row.get("change_vs_mct")
        note = (f"  {100 * change['mean']:+5.1f}% [{100 * change['ci95'][0]:+.1f}, "
                f"{100 * change['ci95'][1]:+.1f}] over MCT" if change else "")
        print(f"  {row['cluster']:24s} {row['rule']:9s} "
              f"{row['throughput_per_min']['mean']:6.1f} tasks/min{note}")


if __name__ == "__main__":
    main()
