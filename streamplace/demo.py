"""``streamplace demo`` (``make demo``): the main job end to end on embedded defaults.

Starts the broker and the 3-TaskManager cluster (unless they already run), submits the task
pipeline, streams synthetic tasks through Kafka with a progress bar, reads the exactly-once
results back (read_committed), prints a summary of what flowed, and stops what it started.
Ctrl-C stops everything it started as well.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter

from tqdm import tqdm

from streamplace.config import StreamplaceConfig
from streamplace.flink_cluster import FlinkCluster
from streamplace.jars import fetch_jars
from streamplace.jobs import submit_task_pipeline
from streamplace.kafka_broker import KafkaBroker
from streamplace.kafka_io import produce_task_events, read_topic, synthetic_task_events
from simulator.metrics import percentile
from streamplace.topics import ensure_topics

__all__ = ["run_demo"]

WARMUP_TASKS = 30


def run_demo(config: StreamplaceConfig, tasks: int | None = None, quick: bool = False,
             keep: bool = False) -> int:
    tasks = tasks or (1000 if quick else 5000)
    broker, cluster = KafkaBroker(config), FlinkCluster(config)
    started: list = []
    job_id = None
    wall = time.monotonic()
    try:
        print("[1/5] Java artifacts (Maven Central, cached after the first run)")
        fetch_jars(config)
        print("[2/5] Kafka broker")
        if not broker.status().running:
            broker.start()
            started.append(broker)
        ensure_topics(config)
        print(f"      {broker.status()}")
        print("[3/5] Flink cluster")
        if not cluster.status().jobmanager_running:
            started.append(cluster)
        t0 = time.monotonic()
        print(cluster.start())
        print(f"      cluster ready in {time.monotonic() - t0:.1f} s")
        print("[4/5] submitting the task pipeline")
        t0 = time.monotonic()
        job_id = submit_task_pipeline(config, cluster,
                                      executor_parallelism=len(cluster.spec.taskmanagers))
        cluster.wait_job_state(job_id, {"RUNNING"})
        print(f"      job {job_id} RUNNING after {time.monotonic() - t0:.1f} s")
        print(f"      Flink web UI (while the demo runs): "
              f"{config.flink.rest_url}/#/job/running/{job_id}/overview")
        run_id = f"demo{int(time.time())}"
        # Python workers start with the first records: warm them up so the summary measures the
        # running pipeline, not its start-up.
        warmup_id = run_id + "w"
        produce_task_events(config, synthetic_task_events(WARMUP_TASKS, seed=0, prefix=warmup_id))
        read_topic(config, config.job.topic_results, "TaskResult", expected=WARMUP_TASKS,
                   timeout_s=180, keep=lambda r: r["task_id"].startswith(warmup_id))
        print(f"      warm-up: {WARMUP_TASKS} tasks through the pipeline "
              f"{time.monotonic() - t0:.1f} s after submission")
        print(f"[5/5] streaming {tasks} tasks through Kafka -> Flink -> Kafka")
        t0 = time.monotonic()
        with tqdm(total=tasks, desc="produced ", unit="task") as bar:
            sent = produce_task_events(config, synthetic_task_events(tasks, seed=1,
                                                                     prefix=run_id + "-"),
                                       progress=bar)
        with tqdm(total=tasks, desc="committed", unit="task") as bar:
            report = read_topic(config, config.job.topic_results, "TaskResult", expected=tasks,
                                timeout_s=120 + tasks / 20, idle_s=60, progress=bar,
                                keep=lambda r: r["task_id"].startswith(run_id + "-"))
        elapsed = time.monotonic() - t0
        mine = report.records
        latencies = [r["finished_at_ms"] - r["submitted_at_ms"] for r in mine]
        per_node = Counter(r["node_id"] for r in mine)
        print("\nsummary")
        print(f"  tasks produced        {sent.delivered}")
        print(f"  results committed     {len(mine)} ({len({r['task_id'] for r in mine})} "
              "distinct task ids)")
        print(f"  throughput            {len(mine) / elapsed:.0f} tasks/s end to end "
              f"({elapsed:.1f} s)")
        print(f"  latency p50 / p99     {percentile(latencies, 50):.0f} / "
              f"{percentile(latencies, 99):.0f} ms (submit -> executed; commit adds up to "
              f"one checkpoint interval, {config.job.checkpoint_interval_ms} ms)")
        for node, count in sorted(per_node.items()):
            print(f"  executed on {node:10s} {count}")
        if latencies:
            print(f"  mean latency          {statistics.fmean(latencies):.0f} ms")
        print(f"  wall time             {time.monotonic() - wall:.1f} s")
        return 0 if len(mine) == tasks else 1
    finally:
        if job_id and not keep:
            cluster.cancel_job(job_id)
        if not keep:
            for service in reversed(started):
                service.stop()
            if started:
                print("stopped what the demo started" + (" (use --keep to leave it running)"))
