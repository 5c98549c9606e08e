"""SJF-BCO against MCT and least-outstanding with the shared-links axis ON (a small cluster).

The zoo runs with shared links off; this is the setting SJF-BCO was built for: the paper's first
six workers (Gigabit links, ``paper_cluster(nodes=6)``) in two racks of three, each rack behind
one shared uplink of ``shared_links.oversubscribed_uplink_mbps`` (1 GbE, 3:1 oversubscribed; an
assumption, calibration.yaml), the paper's workload at a few Poisson rates, a few seeds.

Systems: SJF-BCO (its own pair, and its placement with FCFS to separate the node ordering),
SJF-BCO told no shared links (as in the zoo: its own node links only), MCT + FCFS and
least-outstanding + FCFS. Each run: throughput, p50 and p99 latency, mean input transfer time.

    python -m benchmarks.shared_links [--quick] [--seeds 1 2] [--rates 10 15 60] [--tasks 200]

Writes benchmarks/results/shared_links.json (no plot: a table of a few numbers).
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks._common import description, write_result

#: (label, policy, node scheduler, whether the policy is told the shared links)
SYSTEMS = (
    ("SJF-BCO", "sjf_bco", "sjf_bco_order", True),
    ("SJF-BCO placement+FCFS", "sjf_bco", "fcfs", True),
    ("SJF-BCO own links only", "sjf_bco", "sjf_bco_order", False),
    ("MCT+FCFS", "mct", "fcfs", False),
    ("LeastOutstanding+FCFS", "least_outstanding", "fcfs", False),
)
RACK_SIZE = 3


def racked_cluster(nodes: int = 6):
    """``paper_cluster(nodes)`` with ``rack=r<i // RACK_SIZE>`` labels added."""
    import dataclasses

    from simulator import paper_cluster
    from workload.model import ClusterSpec
    base = paper_cluster(nodes=nodes)
    return ClusterSpec(tuple(dataclasses.replace(n, labels=(*n.labels, f"rack=r{i // RACK_SIZE}"))
                             for i, n in enumerate(base.nodes)), name="paper-racked")


def run_one(label: str, policy_name: str, scheduler_name: str, told: bool, rate: float,
            tasks: int, seed: int) -> dict:
    from interference.schedulers import make_node_scheduler
    from placement.policies import make_policy
    from simulator import SharedLinksConfig, SimulationConfig, Simulator, paper_workload
    from simulator.scenarios import paper_costs
    costs = paper_costs()
    cluster = racked_cluster()
    shared = SharedLinksConfig.from_labels(cluster, SharedLinksConfig.capacity_from_calibration(
        costs.calibration, "oversubscribed_uplink_mbps"))
    settings = {"shared_links": shared} if told else {}
    policy = make_policy(policy_name, cluster, costs, seed=seed, **settings)
    scheduler = make_node_scheduler(scheduler_name, costs, seed=seed)
    workload = paper_workload(rate, tasks, seed=seed)
    started = time.perf_counter()
    result = Simulator(costs, SimulationConfig(shared_links=shared)).run(
        policy, scheduler, cluster, workload, seed=seed)
    received, decided = {}, {}
    for e in result.events:
        if e.kind == "decide":
            decided[e.task_id] = e.time
        elif e.kind == "input_received":
            received[e.task_id] = e.time - decided[e.task_id]
    m = result.metrics
    return {"system": label, "rate": rate, "seed": seed, "tasks": tasks,
            "throughput_per_min": m.throughput_per_min, "latency_p50_s": m.latency_p50_s,
            "latency_p99_s": m.latency_p99_s,
            "input_transfer_mean_s": statistics.fmean(received.values()),
            "wall_s": time.perf_counter() - started}


def summarise(runs: list[dict]) -> list[dict]:
    rows = []
    keys = ("throughput_per_min", "latency_p50_s", "latency_p99_s", "input_transfer_mean_s")
    for rate in sorted({r["rate"] for r in runs}):
        for label, *_ in SYSTEMS:
            mine = [r for r in runs if r["rate"] == rate and r["system"] == label]
            if mine:
                rows.append({"system": label, "rate": rate, "seeds": len(mine),
                             **{k: statistics.fmean(r[k] for r in mine) for k in keys}})
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="150 tasks, seeds 1 2, rate 60")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rates", type=float, nargs="+", default=[10.0, 15.0, 60.0])
    parser.add_argument("--tasks", type=int, default=200)
    args = parser.parse_args(argv)
    if args.quick:
        args.tasks, args.rates = 150, [60.0]
    runs = [run_one(label, policy, scheduler, told, rate, args.tasks, seed)
            for rate in args.rates for seed in args.seeds
            for label, policy, scheduler, told in SYSTEMS]
    rows = summarise(runs)
    for row in rows:
        print(f"{row['rate']:>5g}/min  {row['system']:<24} {row['throughput_per_min']:7.2f}/min  "
              f"p50 {row['latency_p50_s']:7.1f} s  p99 {row['latency_p99_s']:7.1f} s  "
              f"input {row['input_transfer_mean_s']:5.2f} s")
    write_result("shared_links", {"quick": args.quick, "seeds": args.seeds, "rates": args.rates,
                                  "tasks": args.tasks, "cluster": "paper_cluster(6), racks of 3",
                                  "summary": rows, "runs": runs})


if __name__ == "__main__":
    main()
