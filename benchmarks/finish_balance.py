"""How far a run's placement was from the best split of its own measured paces.

For every measured run in a recorded feedback file (the TaskEvent benchmark's tasks are named
``<run tag>-run-<i>``), from each task's span (its router's decision to its end,
``finished_at_ms - queue_ms - service_ms``):

- the makespan: from the run's first decision to its last finish;
- each node's tasks and when it finished its last one;
- the **balanced makespan**: if every node had kept its own pace in that run (its tasks over the
  time to its last finish) and all had finished together, ``tasks / sum(paces)``; and the
  **headroom**, ``1 - balanced / makespan``: how much sooner a better split of the same work
  could have finished, at those paces (a rough bound: a node's pace changes with the mix it
  gets, and the lead before the first finish is in every node's time).

    python -m benchmarks.finish_balance \\
        --feedback benchmarks/results/replay/hosts_2026-12-05_payload_router-tm_b/feedback.jsonl.gz \\
        --runs benchmarks/results/flink_e2e_hosts-payload_router-tm_b.json

``--runs`` (the benchmark's JSON) names each run by its variant; writes
``benchmarks/results/finish_balance_<feedback folder>.json``.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from benchmarks._common import description, write_result
from benchmarks.replay_decisions import read_feedback
from workload.feedback import timing_latency

__all__ = ["run_spans", "balance", "main"]


def run_spans(records: list[dict]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """run tag -> node -> the (decided, finished) ms spans of its measured tasks; timings
    without usable numbers are skipped."""
    runs: dict = defaultdict(lambda: defaultdict(list))
    for record in records:
        node = record.get("node_id")
        for timing in record.get("completed") or ():
            fields = timing_latency(timing)
            if fields is None or "-run-" not in fields[0]:
                continue   # unusable, or a warm-up task or another job's
            task_id, latency, finished = fields
            runs[task_id.rsplit("-run-", 1)[0]][node].append((finished - latency, finished))
    return {run: dict(nodes) for run, nodes in runs.items()}


def balance(nodes: dict[str, list[tuple[float, float]]]) -> dict:
    """Makespan, each node's tasks and last finish (s from the run's first decision), the
    balanced makespan and the headroom (see the module docstring)."""
    start = min(decided for spans in nodes.values() for decided, _ in spans)
    ends = {n: (max(f for _, f in spans) - start) / 1000.0 for n, spans in nodes.items()}
    counts = {n: len(spans) for n, spans in nodes.items()}
    makespan = max(ends.values())
    paces = sum(counts[n] / ends[n] for n in nodes if ends[n] > 0)
    balanced = sum(counts.values()) / paces if paces else None
    return {"tasks": sum(counts.values()), "makespan_s": makespan,
            "nodes": {n: {"tasks": counts[n], "last_finish_s": ends[n]} for n in sorted(nodes)},
            "balanced_makespan_s": balanced,
            "headroom": (1.0 - balanced / makespan) if balanced and makespan > 0 else None}


def _variants(path: Path | None) -> dict[str, str]:
    """run tag -> variant label, from the benchmark's JSON: a run's tag is ``b<start>-<i>``,
    ``i`` its place in :func:`benchmarks.flink_e2e.run_plan` of the JSON's rounds (a plan of
    a full invocation, not of ``--only`` checks), and the training run's ``train<start>``."""
    if path is None:
        return {}
    from benchmarks.flink_e2e import run_plan
    document = json.loads(path.read_text())
    rounds = document.get("rounds") or 0
    first = min((row.get("seed", 100) - 100 for row in document.get("runs", [])), default=0)
    names = {f"-{i}": variant[0] for i, (_, variant) in enumerate(run_plan(first, rounds))}
    names["train"] = "training run (LDWP, not measured)"
    return names


def _variant(run: str, names: dict[str, str]) -> str | None:
    """The label of run tag ``run`` (``b1796511174-4`` or ``train1796511174``)."""
    if run.startswith("train"):
        return names.get("train")
    return names.get("-" + run.rsplit("-", 1)[-1]) if "-" in run else None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--feedback", type=Path, required=True,
                        help="NodeFeedback JSON lines (.gz ok)")
    parser.add_argument("--runs", type=Path, default=None,
                        help="the benchmark's JSON, to name each run by its variant")
    args = parser.parse_args(argv)
    variants = _variants(args.runs)
    rows = []
    for run, nodes in run_spans(read_feedback(args.feedback)).items():
        row = {"run": run, "variant": _variant(run, variants), **balance(nodes)}
        rows.append(row)
        ends = " ".join(f"{n}:{v['tasks']}@{v['last_finish_s']:.1f}"
                        for n, v in row["nodes"].items())
        print(f"{run:26s} {row['variant'] or '':28s} {row['tasks']} tasks, makespan "
              f"{row['makespan_s']:5.1f} s, ends {ends}, balanced "
              f"{row['balanced_makespan_s']:5.1f} s (headroom {row['headroom']:.0%})")
    write_result(f"finish_balance_{args.feedback.parent.name}",
                 {"feedback": str(args.feedback), "rows": rows})


if __name__ == "__main__":
    main()
