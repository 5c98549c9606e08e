"""Simulator speed: exact mode on the paper setting, and fast mode at scale.

- exact mode: simulated tasks per wall second for the paper setting (1,500 tasks, 50/min,
  Random + FCFS and ETC), with events per second;
- fast mode: 1,000,000 tasks on 1,000 nodes sampled from the Alibaba inventory with the
  least-loaded policy (goal: 60 s or less on a 2-core machine).

    python -m benchmarks.simulator_speed [--quick]

Writes benchmarks/results/simulator_speed.json and .png.
"""

from __future__ import annotations

import argparse
import random
import time

from benchmarks._common import RESULTS, description, write_result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="100,000 tasks on 100 nodes")
    args = parser.parse_args(argv)
    from interference.schedulers import make_node_scheduler
    from placement.policies import make_policy
    from simulator import Simulator, paper_cluster, paper_workload
    from simulator.fast import FastSimulator
    from simulator.scenarios import alibaba_cluster, clip_sizes, paper_costs
    from workload.catalog import app_ids
    from workload.model import Task

    costs = paper_costs()
    cluster = paper_cluster()
    tasks = paper_workload(50, 1500, seed=1)
    exact = []
    for policy, scheduler in (("random", "fcfs"), ("mct", "mct")):
        started = time.perf_counter()
        result = Simulator(costs).run(make_policy(policy, cluster, costs, seed=1),
                                      make_node_scheduler(scheduler, costs), cluster, tasks, 1)
        wall = time.perf_counter() - started
        exact.append({"pair": f"{policy}+{scheduler}", "tasks": len(tasks), "wall_s": wall,
                      "tasks_per_wall_s": len(tasks) / wall,
                      "events_per_wall_s": len(result.events) / wall})
        print(f"exact {policy}+{scheduler}: {len(tasks) / wall:,.0f} tasks/s, "
              f"{len(result.events) / wall:,.0f} events/s")

    n_tasks, n_nodes = (100_000, 100) if args.quick else (1_000_000, 1_000)
    big = alibaba_cluster(n_nodes, seed=0)
    rng = random.Random(1)
    apps = app_ids()
    sizes = clip_sizes(n_tasks, rng)
    # Arrivals at about 80% of what least-loaded sustains on this cluster (measured once).
    rate = 0.8 * n_nodes
    now, workload = 0.0, []
    for i in range(n_tasks):
        now += rng.expovariate(rate)
        workload.append(Task(f"f{i}", apps[i % 3], sizes[i], now))
    policy = make_policy("least_loaded", big, costs)
    started = time.perf_counter()
    fast = FastSimulator(costs).run(policy, big, workload, seed=1)
    wall = time.perf_counter() - started
    print(f"fast: {n_tasks:,} tasks on {n_nodes:,} nodes with least_loaded in {wall:.1f} s "
          f"({n_tasks / wall:,.0f} tasks/s); p99 latency {fast.latency_p99_s:.1f} s")
    path = write_result("simulator_speed-quick" if args.quick else "simulator_speed", {
        "exact": exact,
        "fast": {"tasks": n_tasks, "nodes": n_nodes, "policy": "least_loaded",
                 "arrival_rate_per_s": rate, "wall_s": wall, "tasks_per_wall_s": n_tasks / wall,
                 "completed": fast.completed, "latency_p99_s": fast.latency_p99_s,
                 "load_balancing_degree": fast.load_balancing_degree},
        "goal": "fast mode: 1,000,000 tasks on 1,000 nodes in 60 s or less"})

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3))
    labels = [f"exact {e['pair']}" for e in exact] + [f"fast, {n_nodes} nodes"]
    values = [e["tasks_per_wall_s"] for e in exact] + [n_tasks / wall]
    ax.barh(labels, values, color=["tab:blue"] * len(exact) + ["tab:orange"])
    ax.set_xscale("log")
    ax.set_xlabel("simulated tasks per wall second (log)")
    ax.set_title("Simulator speed")
    fig.tight_layout()
    fig.savefig(RESULTS / ("simulator_speed-quick.png" if args.quick else "simulator_speed.png"),
                dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
