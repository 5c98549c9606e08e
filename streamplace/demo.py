"""``streamplace demo`` (``make demo``): Flink's default placement against the streamplace hook.

On a laptop-class machine, no GPU, no Docker:

1. fetches the jars, starts the Kafka broker, the 3-TaskManager cluster and the placement
   service (whatever is not already running);
2. replays a real trace through Kafka: the Alibaba GenAI requests from the data folder,
   time-compressed (``streamplace.replay``); the built-in generator when the data is
   absent, saying so. The trace is read (and a named data folder checked) before step 1: a bad
   folder or trace file is one line and exit 2, with nothing started;
3. runs the job twice on the same replay, with progress bars: once with Flink's default
   placement (unpinned IAWP executor instances fed round-robin, where Flink's slot allocation
   puts them), once with the hook (the LDWP router and one pinned IAWP executor per TaskManager,
   learning from the feedback of both runs through the service);
4. prints a comparison table and writes PNG plots (throughput over time, per-node load, latency
   distribution, model version over time) and a JSON beside them;
5. stops everything it started, also on Ctrl-C.

Each run uses its own topics, so re-running works and never mixes runs.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from tqdm import tqdm

from simulator.metrics import percentile
from streamplace.config import StreamplaceConfig
from streamplace.flink_cluster import FlinkCluster
from streamplace.jars import fetch_jars
from streamplace.jobs import submit_task_pipeline
from streamplace.kafka_broker import KafkaBroker
from streamplace.kafka_io import produce_task_events, read_topic, synthetic_task_events
from streamplace.topics import ensure_topics

__all__ = ["run_demo", "DEMO_VARIANTS"]

WARMUP_TASKS = 40
#: (label, pipeline settings). Both use the IAWP executor and 3 executor instances in all (the
#: hook's default plan on the default cluster: one per core): the difference is only where
#: tasks go.
DEMO_VARIANTS = (
    ("Flink default placement", {"placement": "rebalance", "executor": "iawp",
                                 "executor_parallelism": 3}),
    ("streamplace hook (LDWP + IAWP)", {"placement": "hook", "executor": "iawp",
                                        "policy": "ldwp"}),
)


def _copy_for_run(config: StreamplaceConfig, run_id: str) -> StreamplaceConfig:
    cfg = config.model_copy(deep=True)
    cfg.job.topic_tasks, cfg.job.topic_results = f"{run_id}-tasks", f"{run_id}-results"
    cfg.job.topic_dead_letter = f"{run_id}-dead-letter"
    return cfg


def _run_variant(config, cluster, label, settings, events, run_id, service, quick) -> dict:
    """Submit, warm up, replay ``events`` while reading results; returns the run's numbers."""
    from streamplace.replay import TimedEvent, replay_events
    cfg = _copy_for_run(config, run_id)
    ensure_topics(cfg)
    extra = dict(settings)
    if extra["placement"] == "hook":
        extra["service_url"] = service.url
    t0 = time.monotonic()
    job_id = submit_task_pipeline(cfg, cluster, group_id=f"{run_id}-job",
                                  transactional_id_prefix=run_id, executor_capacity=8,
                                  executor_timeout_s=600, **extra)
    try:
        cluster.wait_job_state(job_id, {"RUNNING"}, timeout_s=240)
        print(f"      job {job_id} RUNNING after {time.monotonic() - t0:.1f} s; web UI "
              f"{config.flink.rest_url}/#/job/running/{job_id}/overview")
        warm = list(synthetic_task_events(WARMUP_TASKS, seed=0, prefix=f"{run_id}-warm"))
        for event in warm:
            event["input_size"] = min(event["input_size"], 60_000)
        produce_task_events(cfg, warm)
        read_topic(cfg, cfg.job.topic_results, "TaskResult", expected=WARMUP_TASKS,
                   timeout_s=240, keep=lambda r: r["task_id"].startswith(f"{run_id}-warm"))
        print(f"      warm-up: {WARMUP_TASKS} tasks through the job "
              f"{time.monotonic() - t0:.1f} s after submission")
        mine = [TimedEvent(e.at_s, dict(e.event, task_id=f"{run_id}-{e.event['task_id']}"))
                for e in events]
        ids = {e.event["task_id"] for e in mine}
        versions: list[tuple[float, int | None]] = []
        result: dict = {}
        done = threading.Event()

        def read_results():
            with tqdm(total=len(mine), desc="      committed", unit="task", position=1,
                      leave=False) as bar:
                result["report"] = read_topic(cfg, cfg.job.topic_results, "TaskResult",
                                              expected=len(mine), timeout_s=900, idle_s=300,
                                              progress=bar, keep=lambda r: r["task_id"] in ids,
                                              stamp_seen=True)
            done.set()

        def watch_versions(start):
            from placement.service.client import PlacementClient
            client = PlacementClient(service.url)
            while not done.wait(1.0):
                try:
                    latest = client.latest()
                except Exception:  # noqa: BLE001 - the plot shows gaps
                    latest = None
                versions.append((time.time() - start, latest and latest["version"]))

        reader = threading.Thread(target=read_results, daemon=True)
        reader.start()
        sent_at = time.time()
        watcher = threading.Thread(target=watch_versions, args=(sent_at,), daemon=True)
        watcher.start()
        with tqdm(total=len(mine), desc="      replayed ", unit="task", position=0,
                  leave=False) as bar:
            sent = replay_events(cfg, mine, progress=bar.update)
        reader.join()
        watcher.join(timeout=5)
        records = result["report"].records
        return _summary(label, records, sent, sent_at, versions, quick)
    finally:
        cluster.cancel_job(job_id)


def _summary(label, records, sent, sent_at, versions, quick) -> dict:
    n = len(records)
    latencies = [r["finished_at_ms"] - r["submitted_at_ms"] for r in records]
    last_seen = max((r["_seen_s"] for r in records), default=sent_at)
    finished = sorted(r["finished_at_ms"] / 1000.0 - sent_at for r in records)
    per_second: Counter = Counter(int(t) for t in finished)
    node_load: dict[str, Counter] = {}
    for r in records:
        node_load.setdefault(r["node_id"], Counter())[int(r["finished_at_ms"] / 1000.0 -
                                                          sent_at)] += 1
    return {"variant": label, "sent": sent["sent"], "delivered": sent["delivered"],
            "results": n, "distinct": len({r["task_id"] for r in records}),
            "failed": sum(1 for r in records if r["status"] != "OK"),
            "throughput_per_s": n / max(1e-6, last_seen - sent_at),
            "latency_p50_ms": percentile(latencies, 50) if latencies else None,
            "latency_p99_ms": percentile(latencies, 99) if latencies else None,
            "latencies_ms": sorted(latencies),
            "per_node": dict(Counter(r["node_id"] for r in records)),
            "throughput_over_time": sorted(per_second.items()),
            "node_load_over_time": {k: sorted(v.items()) for k, v in node_load.items()},
            "model_versions": versions, "replay_wall_s": sent["wall_s"]}


def _table(rows: list[dict]) -> str:
    nodes = sorted({n for r in rows for n in r["per_node"]})
    head = (f"  {'placement':32s} {'results':>8s} {'tasks/s':>8s} {'p50 ms':>8s} {'p99 ms':>8s}  "
            + "  ".join(f"{n:>6s}" for n in nodes))
    lines = [head, "  " + "-" * (len(head) - 2)]
    for r in rows:
        p50 = f"{r['latency_p50_ms']:.0f}" if r["latency_p50_ms"] is not None else "-"
        p99 = f"{r['latency_p99_ms']:.0f}" if r["latency_p99_ms"] is not None else "-"
        lines.append(f"  {r['variant']:32s} {r['results']:>8d} {r['throughput_per_s']:>8.1f} "
                     f"{p50:>8s} {p99:>8s}  "
                     + "  ".join(f"{r['per_node'].get(n, 0):>6d}" for n in nodes))
    return "\n".join(lines)


def plot_demo(rows: list[dict], path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    colors = ("#c44e52", "#4c72b0")
    ax = axes[0][0]
    for row, color in zip(rows, colors):
        points = row["throughput_over_time"]
        ax.plot([p[0] for p in points], [p[1] for p in points], color=color,
                label=row["variant"])
    ax.set_xlabel("seconds since the replay started")
    ax.set_ylabel("tasks finished per second")
    ax.set_title("Throughput over time")
    ax.legend(fontsize=8)
    ax = axes[0][1]
    nodes = sorted({n for r in rows for n in r["per_node"]})
    width = 0.8 / max(1, len(rows))
    for i, (row, color) in enumerate(zip(rows, colors)):
        ax.bar([j + i * width for j in range(len(nodes))],
               [row["per_node"].get(n, 0) for n in nodes], width, color=color,
               label=row["variant"])
    ax.set_xticks([j + width * (len(rows) - 1) / 2 for j in range(len(nodes))], nodes)
    ax.set_ylabel("tasks executed")
    ax.set_title("Per-node load (tm_c does every unit of work twice)")
    ax.legend(fontsize=8)
    ax = axes[1][0]
    for row, color in zip(rows, colors):
        values = row["latencies_ms"]
        if values:
            ax.plot([v / 1000 for v in values], [(i + 1) / len(values) for i in
                                                 range(len(values))], color=color,
                    label=row["variant"])
    ax.set_xlabel("latency, submitted -> executed (s)")
    ax.set_ylabel("fraction of tasks")
    ax.set_title("Latency distribution")
    ax.legend(fontsize=8)
    ax = axes[1][1]
    for row, color in zip(rows, colors):
        points = [(t, v) for t, v in row["model_versions"] if v is not None]
        if points:
            ax.step([p[0] for p in points], [p[1] for p in points], where="post", color=color,
                    label=row["variant"])
    ax.set_xlabel("seconds since the replay started")
    ax.set_ylabel("newest model version at the service")
    ax.set_title("Model version over time")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def run_demo(config: StreamplaceConfig, tasks: int | None = None, quick: bool = False,
             keep: bool = False, trace: str = "alibaba-genai", rate: float | None = None,
             data_dir: str | None = None) -> int:
    from placement.service import PlacementService, ServiceSettings
    from streamplace.replay import trace_events
    from workload.traces.datadir import DataDirError, check_named_data_dir, describe_data_error

    tasks = tasks or (240 if quick else 1200)
    rate = rate or 45.0
    # The workload first: a bad data folder or trace file costs nothing, no service is started.
    print("[0/6] workload (read before anything is started)", flush=True)
    try:
        check_named_data_dir(data_dir, option="--data-dir")
        events, where = trace_events(trace, data_dir, tasks, rate)
    except (DataDirError, ValueError, OSError) as exc:
        print(f"streamplace demo: {describe_data_error(exc)}", file=sys.stderr)
        return 2
    print(f"      {where}")
    broker, cluster = KafkaBroker(config), FlinkCluster(config)
    started: list = []
    wall = time.monotonic()
    out_dir = config.home / "demo"
    try:
        print("[1/6] Java artifacts (Maven Central, cached after the first run)")
        fetch_jars(config)
        print("[2/6] Kafka broker")
        if not broker.status().running:
            broker.start()
            started.append(broker)
        ensure_topics(config)
        print(f"      {broker.status()}")
        print("[3/6] Flink cluster")
        if not cluster.status().jobmanager_running:
            started.append(cluster)
        print(cluster.start())
        print("[4/6] placement service")
        service = PlacementService(ServiceSettings(
            port=0, bootstrap_servers=config.kafka.bootstrap_servers,
            feedback_topic=config.job.topic_feedback, group_id=f"demo-service-{int(time.time())}",
            flink_rest_url=config.flink.rest_url, cluster_spec=config.flink.cluster_spec,
            model_dir=config.home / "models", publish_every=100 if quick else 300,
            min_records_first_version=60 if quick else 200))
        service.start()
        started.append(service)
        print(f"      {service.url} (models in {config.home / 'models'})")
        rows = []
        run_base = f"demo{int(time.time())}"
        for i, (label, settings) in enumerate(DEMO_VARIANTS):
            print(f"[{5 + i}/6] {label}: {len(events)} tasks at {rate:g}/s")
            rows.append(_run_variant(config, cluster, label, settings, events,
                                     f"{run_base}-{i}", service, quick))
            print(f"      {rows[-1]['results']} results, {rows[-1]['throughput_per_s']:.1f} "
                  f"tasks/s, per node {rows[-1]['per_node']}")
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "demo.json").write_text(json.dumps(
            {"workload": where, "tasks": tasks, "rate": rate, "runs": rows}, indent=1))
        png = plot_demo(rows, out_dir / "demo.png")
        print("\ncomparison (same replay, same cluster; latency = submitted -> executed)")
        print(_table(rows))
        base, ours = rows[0]["throughput_per_s"], rows[-1]["throughput_per_s"]
        print(f"\n  throughput, hook / Flink default: {ours / base:.2f}x")
        print(f"  plots: {png}\n  data:  {out_dir / 'demo.json'}")
        print(f"  wall time {time.monotonic() - wall:.0f} s")
        complete = all(r["results"] == r["distinct"] == len(events) for r in rows)
        if not complete:
            print("  some results are missing or duplicated: see the JSON")
        return 0 if complete else 1
    finally:
        if not keep:
            for part in reversed(started):
                try:
                    part.stop()
                except Exception as exc:  # noqa: BLE001 - stop the rest anyway
                    print(f"could not stop {part}: {exc}")
            if started:
                print("stopped what the demo started (use --keep to leave it running)")
