"""Replay recorded feedback into a router and see how each model version would split a burst.

Why: a real-engine round on the emulated hosts takes 8-13 minutes and its throughput varies by
1.5x from run to run (round-robin measured 214-355 records/s on the same code), too noisy to
tell whether a learned correction helps. What a router does with a burst, though, is
deterministic given what it has heard: this replays a run's NodeFeedback records into a
:class:`pyflink_jobs.router.Router` with a model version installed (the router learns its
costs and node states from them, as in the job), then lets it decide a burst of ``--burst``
tasks with no completion in between (the router runs ahead of its executors in the job too),
once as trained and once with the correction off (``set_correction_scale(0)``: the prior alone,
MCT's completion estimate with the learned costs).

Each split is judged by the nodes' measured drain rates from the same feedback: for every pair
of consecutive reports of a node that both show work queued or in flight, the tasks it finished
over the seconds between them (``busy_rates``). A burst then takes ``max(count / rate)`` over
the nodes to drain; round-robin's equal split is the reference. On 2026-12-03 the replay
reproduced the real rounds' splits (LDWP + IAWP sent 994 of 2,000 to tm_c in the job; replayed,
version 15 sends 1,137) while the prior alone split 858 / 362 / 780, close to the rates.

Input: NodeFeedback records as JSON lines (``.jsonl`` or ``.jsonl.gz``), e.g. dumped from a
topic with ``--from-topic TOPIC --bootstrap HOST:PORT`` (at most ``MAX_RECORDS`` records, each
validated as the router validates feedback), and the model files (a service store's
``v*.spmodel``).

    python -m benchmarks.replay_decisions --feedback run.jsonl.gz \\
        --models .streamplace/bench/bx-models/<run>/ --spec hosts --name replay_hosts

Writes benchmarks/results/<name>.json and a PNG: per version, the burst's split with and
without the correction and the drain time each implies.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
from collections import Counter
from pathlib import Path

from benchmarks._common import RESULTS, write_result
from placement.measured_costs import COST_SMOOTHING
from placement.service.burst_check import drain_s

__all__ = ["read_feedback", "busy_rates", "drain_s", "replay_split", "main"]

#: most feedback records read (a run of 2,000-task rounds writes a few hundred)
MAX_RECORDS = 200_000
#: tasks in the burst each version decides (a quick round's size)
BURST = 2000


def read_feedback(path: Path) -> list[dict]:
    """NodeFeedback dicts from a JSON-lines file (gzip when it ends in .gz), by emission time;
    lines that are not a JSON object with a node_id and an emitted_at_ms are skipped."""
    opener = gzip.open if str(path).endswith(".gz") else open
    records = []
    with opener(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            if len(records) >= MAX_RECORDS:
                break
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("node_id"), str) and \
                    isinstance(record.get("emitted_at_ms"), int):
                records.append(record)
    records.sort(key=lambda r: r["emitted_at_ms"])
    return records


def busy_rates(records: list[dict]) -> dict[str, float]:
    """node -> tasks finished per second while it had work in the routers' view (from each
    task's decision to its end): the placement service's rule
    (:class:`placement.service.burst_check.DrainRates`) over every record."""
    from placement.service.burst_check import DrainRates
    rates = DrainRates(window=MAX_RECORDS)
    for record in records:
        rates.add(record)
    return rates.rates()


def replay_split(records: list[dict], model: bytes | None, spec: str, burst: int,
                 correction_scale: float = 1.0,
                 cost_smoothing: float | None = None) -> dict[str, int]:
    """The split of a ``burst`` by a router that heard ``records`` first (module docstring);
    ``model`` None: the router's fallback MCT-like rule is not used, MCT is.
    ``cost_smoothing``: the router's MeasuredCosts smoothing (None: its default)."""
    from pyflink_jobs.hook import nodes_from_cluster_spec
    from pyflink_jobs.router import Router, RouterSettings
    from workload.model import Task
    nodes = nodes_from_cluster_spec(spec)
    settings = RouterSettings(nodes=nodes, policy="ldwp" if model else "mct",
                              initial_model=model)
    router = Router(settings, clock=lambda: records[-1]["emitted_at_ms"] / 1000.0)
    if model is not None:
        router.model_policy.set_correction_scale(correction_scale)
    if cost_smoothing is not None:
        if not 0.0 < cost_smoothing <= 1.0:
            raise ValueError(f"cost_smoothing must be in (0, 1], got {cost_smoothing!r}")
        router.costs.smoothing = cost_smoothing   # read when a (type, node) fit is created
    for record in records:
        router.on_feedback(record)
    timings = [t for r in records for t in (r.get("completed") or ())]
    if not timings:
        raise SystemExit("the feedback holds no completed task to take task types from")
    task_type = Counter(t["app_id"] for t in timings).most_common(1)[0][0]
    sizes = [t["input_size"] for t in timings if t["app_id"] == task_type]
    for i in range(burst):
        router.route(Task(f"replay-{i}", task_type, sizes[i % len(sizes)]))
    return dict(router.routed)


def _dump_topic(topic: str, bootstrap: str, out: Path) -> Path:
    from confluent_kafka import Consumer, TopicPartition
    from workload.codec import CodecError, decode
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"replay-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    written, idle = 0, 0
    with gzip.open(out, "wt", encoding="utf-8") as sink:
        while idle < 5 and written < MAX_RECORDS:
            message = consumer.poll(1.0)
            if message is None or message.error():
                idle += 1
                continue
            try:
                sink.write(json.dumps(decode("NodeFeedback", message.value())) + "\n")
                written += 1
            except CodecError:
                continue
    consumer.close()
    print(f"dumped {written} NodeFeedback records of {topic} to {out}")
    return out


def _plot(rows: list[dict], nodes: list[str], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    x = list(range(len(rows)))
    labels = [f"v{r['version']}" for r in rows]
    for kind, style in (("trained", "-"), ("prior_only", "--")):
        for i, node in enumerate(nodes):  # one colour per node, dashed: the prior alone
            top.plot(x, [r[kind]["split"].get(node, 0) for r in rows], style, marker=".",
                     color=f"C{i}", label=f"{node} ({kind.replace('_', ' ')})")
        bottom.plot(x, [r[kind]["drain_s"] for r in rows], style, marker="o", color="k",
                    label=kind.replace("_", " "))
    bottom.axhline(rows[0]["round_robin_drain_s"], color="grey", lw=1,
                   label="round-robin's equal split")
    top.set_ylabel("tasks of the burst")
    bottom.set_ylabel("drain time at measured rates (s)")
    bottom.set_xticks(x, labels, rotation=45)
    top.legend(fontsize=7, ncol=2)
    bottom.legend(fontsize=7)
    top.set_title("How each model version splits the same burst (replayed feedback)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--feedback", type=Path, help="NodeFeedback JSON lines (.gz ok)")
    parser.add_argument("--from-topic", default="", help="dump this topic first (needs "
                        "--bootstrap); written to --feedback")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--models", type=Path, required=True,
                        help="a model file, or a folder of v*.spmodel (a service's store)")
    parser.add_argument("--spec", default="hosts", help="the cluster spec the run used")
    parser.add_argument("--burst", type=int, default=BURST)
    parser.add_argument("--name", default="replay_decisions")
    parser.add_argument("--cost-smoothing", type=float, default=COST_SMOOTHING,
                        help="the routers' MeasuredCosts smoothing (0.05 before 2026-12-03b)")
    args = parser.parse_args(argv)
    if args.burst < 1:
        parser.error("--burst must be at least 1")
    if not 0.0 < args.cost_smoothing <= 1.0:
        parser.error("--cost-smoothing must be in (0, 1]")
    if args.feedback is None:
        parser.error("--feedback is required (the file to read, or to write with --from-topic)")
    if args.from_topic:
        _dump_topic(args.from_topic, args.bootstrap, args.feedback)
    records = read_feedback(args.feedback)
    if not records:
        raise SystemExit(f"{args.feedback}: no NodeFeedback records")
    models = sorted(args.models.glob("v*.spmodel")) if args.models.is_dir() else [args.models]
    if not models:
        raise SystemExit(f"{args.models}: no model files")
    rates = busy_rates(records)
    nodes = sorted({r["node_id"] for r in records})
    equal = {n: args.burst // len(nodes) + (i < args.burst % len(nodes))
             for i, n in enumerate(nodes)}
    rows = []
    for path in models:
        data = path.read_bytes()
        row = {"model": path.name, "version": int(path.stem.lstrip("v") or 0)
               if path.stem.lstrip("v").isdigit() else len(rows),
               "round_robin_drain_s": drain_s(equal, rates)}
        for kind, scale in (("trained", 1.0), ("prior_only", 0.0)):
            split = replay_split(records, data, args.spec, args.burst, scale,
                                 args.cost_smoothing)
            row[kind] = {"split": split, "drain_s": drain_s(split, rates)}
        rows.append(row)
        print(f"{path.name}: trained {row['trained']['split']} "
              f"({_fmt(row['trained']['drain_s'])} s), prior only "
              f"{row['prior_only']['split']} ({_fmt(row['prior_only']['drain_s'])} s)")
    wins = sum(1 for r in rows if _lt(r["trained"]["drain_s"], r["prior_only"]["drain_s"]))
    summary = {"versions": len(rows), "trained_drains_faster_than_prior": wins,
               "busy_rates_per_s": rates, "round_robin_drain_s": drain_s(equal, rates)}
    print(f"the correction drains the burst faster than the prior alone in {wins} of "
          f"{len(rows)} versions; measured rates {({n: round(v, 1) for n, v in rates.items()})}")
    write_result(args.name, {"feedback": str(args.feedback), "records": len(records),
                             "spec": args.spec, "burst": args.burst,
                             "cost_smoothing": args.cost_smoothing, "summary": summary,
                             "rows": rows})
    _plot(rows, nodes, RESULTS / f"{args.name}.png")
    return summary


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _lt(a, b) -> bool:
    return a is not None and b is not None and math.isfinite(a) and a < b


if __name__ == "__main__":
    main()
