"""Where the paper setting's throughput goes: how evenly the nodes' queues end.

    python -m benchmarks.tail_balance          # about 6.5 minutes on 2 cores

Saturated, the paper setting's 1,500 tasks all arrive (and are all placed) in the first ~225 s,
and the cluster then drains its queues until ~1,000 s: throughput is 1,500 over the time the
*last* node finishes. This benchmark splits that into two parts, on the tuning seeds (never the
evaluation seeds), for MCT+HEFT and the shipped residual LDWP+HEFT:

- **efficiency**: the mean of the nodes' last completion times (how much work the placement
  made, and how well it fits each node);
- **balance**: how far the last node ends after that mean. ``even_ending_per_min`` is the
  throughput had every node ended at the mean: what a perfectly balanced ending of the same
  placement's work would give. It is not a bound any policy is known to reach: decisions are
  made before most of the work's true times are seen.

It also asks how much of the imbalance a better drain estimate removes, with two calibrations
by a fixed-point iteration on three training seeds, then run on the tuning seeds:

- MCT with a fixed drain rate per node (``mct_drain``'s ``rates``): a node that ended late gets
  a lower rate, ``rate *= (mean end / its end) ** CALIBRATION_STEP``;
- the shipped LDWP seeing each node's backlog times a factor per node
  (:class:`ScaledBacklog`): a node that ended late looks busier,
  ``factor *= (its end / mean end) ** CALIBRATION_STEP``.

Both aim at the imbalance that is the same on every run (a node type the estimates get wrong);
what is left differs from run to run (which tasks, how long each really took), and no fixed
table can remove it: every task is placed before most of the work's true times are seen. (When
this was written, a 1-2% change of one node's entry moved single runs by a few tasks/min either
way: docs/results-simulator.md, "Where the missing 4% is".)

Why this exists: issue 14 asks for +30% over the mean of Random / ETC / PATS (about 87 tasks/min
on the evaluation seeds); the shipped LDWP makes about 84. The JSON says whether the gap is in
efficiency or in balance. Writes ``benchmarks/results/tail_balance.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections import defaultdict

from benchmarks._common import RESULTS, description, write_result
from benchmarks.ldwp import TRAINING_SEEDS, TUNING_SEEDS, _setup, simulate

__all__ = ["node_ends", "run_row", "calibrate_drain_rates", "calibrate_backlog_factors",
           "ScaledBacklog", "main"]

TASKS = 1500
#: seeds the drain rates are calibrated on (training seeds: LDWP's own online episodes use
#: TRAINING_SEEDS from the 11th on, so this is no new information)
CALIBRATION_SEEDS = TRAINING_SEEDS[10:13]
CALIBRATION_ROUNDS = 8
#: the exponent of each round's correction (1 would jump straight to the last round's ratio and
#: oscillate between rounds; 0.8 settled in 3-5 rounds when this was written)
CALIBRATION_STEP = 0.8


def node_ends(result) -> dict[str, float]:
    """Per node, the time of its last event in the run's log (its last stage's end)."""
    ends: dict[str, float] = defaultdict(float)
    for event in result.events:
        if event.node:
            ends[event.node] = max(ends[event.node], event.time)
    return dict(ends)


def run_row(label: str, policy, costs, cluster, seed: int, tasks: int = TASKS) -> dict:
    """One saturated run: throughput, each node's tasks and end, and the even-ending figure."""
    result = simulate(policy, costs, cluster, tasks, seed, record_events=True)
    metrics, ends = result.metrics, node_ends(result)
    first = min(e.time for e in result.events)
    mean_end = statistics.fmean(ends.values())
    return {"system": label, "seed": seed, "throughput_per_min": metrics.throughput_per_min,
            "completed": metrics.completed, "first_event_s": first,
            "node_end_s": ends, "node_tasks": dict(metrics.per_node_tasks),
            "mean_end_s": mean_end, "last_end_s": max(ends.values()),
            "end_spread_s": max(ends.values()) - min(ends.values()),
            "even_ending_per_min": 60.0 * metrics.completed / (mean_end - first)}


class ScaledBacklog:
    """A policy that sees every node's backlog times its ``factors`` entry (1 for nodes not
    listed): the LDWP calibration's view of "this node drains slower than estimated"."""

    def __init__(self, policy, factors: dict[str, float]):
        self.policy, self.factors = policy, dict(factors)
        self.name = f"{policy.name}_scaled_backlog"

    def decide(self, observation):
        from workload.model import Observation
        nodes = tuple(dataclasses.replace(n, backlog_s=n.backlog_s *
                                          self.factors.get(n.node_id, 1.0))
                      for n in observation.nodes)
        return self.policy.decide(Observation(observation.task, nodes, observation.now_s))

    def __getattr__(self, name: str):
        # what the simulator asks of a policy beyond decide (feedback hooks) is the policy's
        return getattr(self.__dict__["policy"], name)


def calibrate_backlog_factors(policy, costs, cluster, seeds=CALIBRATION_SEEDS,
                              rounds: int = CALIBRATION_ROUNDS, step: float = CALIBRATION_STEP,
                              tasks: int = TASKS):
    """Per node, the factor on its backlog (:class:`ScaledBacklog` around ``policy``) moved
    each round toward equal node ends on ``seeds`` (a node that ended late looks busier).
    Returns (the best round's factors, one record per round)."""
    return _calibrate({n: 1.0 for n in cluster.node_ids}, "factors", step,
                      lambda factors: ScaledBacklog(policy, factors), costs, cluster, seeds,
                      rounds, tasks)


def calibrate_drain_rates(costs, cluster, seeds=CALIBRATION_SEEDS,
                          rounds: int = CALIBRATION_ROUNDS, step: float = CALIBRATION_STEP,
                          tasks: int = TASKS):
    """Fixed drain rates for ``mct_drain``, from its unit counts, moved each round toward
    equal node ends on ``seeds`` (a node that ended late drains slower). Returns (the best
    round's rates, one record per round)."""
    from placement.policies.mct import parallel_units
    from placement.policies.mct_drain import MeasuredDrainMCTPolicy
    return _calibrate({n.node_id: float(parallel_units(n)) for n in cluster.nodes}, "rates",
                      -step, lambda rates: MeasuredDrainMCTPolicy(cluster, costs, rates=rates),
                      costs, cluster, seeds, rounds, tasks)


def _calibrate(table: dict, key: str, exponent: float, policy_of, costs, cluster, seeds,
               rounds: int, tasks: int):
    """The fixed-point iteration both calibrations run: each round, every node's entry times
    (its mean end / all nodes' mean end) ** ``exponent``. Returns (the best round's table,
    one record per round, the table under ``key``)."""
    history = []
    for round_ in range(rounds):
        rows = [run_row("calibration", policy_of(table), costs, cluster, s, tasks)
                for s in seeds]
        ends = {n: statistics.fmean(r["node_end_s"][n] for r in rows) for n in table}
        mean = statistics.fmean(ends.values())
        history.append({"round": round_, key: dict(table),
                        "throughput_per_min": statistics.fmean(r["throughput_per_min"]
                                                               for r in rows),
                        "end_spread_s": max(ends.values()) - min(ends.values())})
        table = {n: v * (ends[n] / mean) ** exponent for n, v in table.items()}
    return _best_round(history, key), history


def _best_round(history: list[dict], key: str) -> dict:
    """The table of the round with the highest throughput on the calibration seeds (the last
    update is never measured, and the rounds do not settle: a 1-2% change of one node's table
    entry moves a run's throughput by a few tasks/min either way)."""
    return max(history, key=lambda h: h["throughput_per_min"])[key]


def plot(rows: list[dict], path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    systems = list(dict.fromkeys(r["system"] for r in rows))
    seeds = sorted({r["seed"] for r in rows})
    figure, axes = plt.subplots(1, len(seeds), figsize=(6 * len(seeds), 4.5), squeeze=False)
    for ax, seed in zip(axes[0], seeds):
        nodes = list(next(r for r in rows if r["seed"] == seed)["node_end_s"])
        width = 0.8 / len(systems)
        for k, system in enumerate(systems):
            row = next(r for r in rows if r["seed"] == seed and r["system"] == system)
            ax.bar([i + k * width for i in range(len(nodes))],
                   [row["node_end_s"][n] for n in nodes], width,
                   label=f"{system} ({row['throughput_per_min']:.1f}/min, even ending "
                         f"{row['even_ending_per_min']:.1f})")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(nodes))], nodes, rotation=60,
                      ha="right", fontsize=7)
        ax.set_ylim(bottom=min(min(r["node_end_s"].values()) for r in rows) * 0.9)
        ax.set_ylabel("node's last completion (s)")
        ax.set_title(f"tuning seed {seed}, {TASKS} tasks saturated")
        ax.legend(fontsize=7, loc="lower left")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    from placement.ldwp.agent import LDWPPolicy
    from placement.ldwp.shipped import shipped_model
    from placement.policies import make_policy
    from placement.policies.mct_drain import MeasuredDrainMCTPolicy
    started = time.perf_counter()
    costs, cluster = _setup()
    rates, history = calibrate_drain_rates(costs, cluster)
    agent = LDWPPolicy.from_file(shipped_model("residual"), cluster, costs)
    agent.training = False
    factors, factor_history = calibrate_backlog_factors(agent, costs, cluster)
    rows = []
    for seed in TUNING_SEEDS:
        rows.append(run_row("MCT+HEFT", make_policy("mct", cluster, costs), costs, cluster,
                            seed))
        rows.append(run_row("MCT at calibrated drain rates+HEFT",
                            MeasuredDrainMCTPolicy(cluster, costs, rates=rates), costs, cluster,
                            seed))
        rows.append(run_row("LDWP (shipped residual)+HEFT", agent, costs, cluster, seed))
        rows.append(run_row("LDWP at calibrated backlog factors+HEFT",
                            ScaledBacklog(agent, factors), costs, cluster, seed))
    summary = {}
    for system in dict.fromkeys(r["system"] for r in rows):
        mine = [r for r in rows if r["system"] == system]
        summary[system] = {key: statistics.fmean(r[key] for r in mine)
                           for key in ("throughput_per_min", "even_ending_per_min",
                                       "mean_end_s", "last_end_s", "end_spread_s")}
    path = write_result("tail_balance", {
        "tasks": TASKS, "tuning_seeds": list(TUNING_SEEDS),
        "calibration_seeds": list(CALIBRATION_SEEDS), "calibration_step": CALIBRATION_STEP,
        "calibrated_rates": rates, "calibration": history,
        "calibrated_backlog_factors": factors, "backlog_calibration": factor_history,
        "summary": summary, "rows": rows,
        "wall_s": time.perf_counter() - started})
    plot(rows, RESULTS / "tail_balance.png")
    for system, values in summary.items():
        print(f"{system:40s} {values['throughput_per_min']:6.1f} tasks/min, even ending "
              f"{values['even_ending_per_min']:6.1f}, node ends {values['mean_end_s']:.0f} s "
              f"mean, last {values['last_end_s']:.0f} s")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
