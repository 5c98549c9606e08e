"""What every fault scenario does: run the hooked task pipeline on a paced stream of tasks,
break something while it runs, and measure what that cost.

- A producer thread sends the tasks at a fixed rate (librdkafka buffers and retries through a
  broker outage: ``message.timeout.ms`` is 5 minutes).
- A reader thread reads the results topic with ``isolation.level=read_committed`` from the
  beginning, stamping when each result became visible (``_seen_s``).
- ``inject()`` breaks something and returns ``(fault_started, fault_ended)`` in epoch seconds,
  and optionally a new job id (a resubmitted job).

Figures, per scenario:

- ``exactly_once``: every task id once, none missing, none extra, all OK;
- ``committed_gap_s``: the longest time between two consecutive visible results from the fault
  on (results of a transactional sink become visible at checkpoints, so a second or two is the
  floor with 1 s checkpoints);
- ``recovery_s``: from the end of the fault to the first result that became visible after it;
- ``drain_s``: from the end of the fault to the last result.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from streamplace.cluster_health import heal_cluster
from streamplace.jobs import submit_task_pipeline
from streamplace.kafka_io import read_topic, synthetic_task_events
from streamplace.topics import ensure_topics
from workload.codec import encode

PLAN = {"tm_a": 1, "tm_b": 1, "tm_c": 1}
MAX_INPUT = 60_000  # tasks of 5-40 ms on 2 cores


def events(count: int, seed: int, prefix: str) -> list[dict]:
    out = list(synthetic_task_events(count, seed=seed, prefix=prefix))
    for e in out:
        e["input_size"] = min(e["input_size"], MAX_INPUT)
    return out


def scenario_config(config, name: str):
    """A copy of ``config`` with topics of this scenario's own (created)."""
    cfg = config.model_copy(deep=True)
    cfg.job.topic_tasks, cfg.job.topic_results = f"{name}-tasks", f"{name}-results"
    cfg.job.topic_dead_letter, cfg.job.topic_feedback = f"{name}-dead", f"{name}-feedback"
    ensure_topics(cfg)
    return cfg


#: Seconds a scenario waits for the previous one's slots to be released: beyond Flink's
#: task cancellation timeout (180 s), after which a TaskManager whose task would not cancel
#: kills itself, and heal_cluster starts it again.
IDLE_TIMEOUT_S = 240.0


def wait_until_idle(cluster, timeout_s: float = IDLE_TIMEOUT_S) -> None:
    """Every TaskManager running, registered and with all its slots free: a scenario must not
    start while the previous scenario's cancelled job still holds a slot (a restored job would
    then find no room on that node)."""
    deadline = time.monotonic() + timeout_s
    while True:
        heal_cluster(cluster)
        tms = cluster.status().taskmanagers
        if all(tm.slots_total is not None and tm.slots_free == tm.slots_total for tm in tms):
            return
        if time.monotonic() > deadline:
            held = [(t.node_id, t.slots_free, t.slots_total) for t in tms]
            raise AssertionError(f"slots still held {timeout_s:.0f} s after the previous "
                                 f"scenario (node, free, total): {held}")
        time.sleep(2.0)


def submit(cfg, cluster, name: str, restore_from: str | None = None,
           wait_checkpoint: bool = True, **overrides) -> str:
    """The hooked task pipeline (IAWP executors, one per TaskManager) for scenario ``name``;
    returns once it is RUNNING (and, with ``wait_checkpoint``, has completed a checkpoint)."""
    settings = dict(placement="hook", executor="iawp", policy="least_outstanding",
                    plan=",".join(f"{k}={v}" for k, v in PLAN.items()),
                    topic_feedback=cfg.job.topic_feedback, group_id=f"{name}-pipeline",
                    transactional_id_prefix=name, executor_capacity=8)
    settings.update(overrides)
    if restore_from is None:
        wait_until_idle(cluster)
        job_id = submit_task_pipeline(cfg, cluster, **settings)
    else:
        from pathlib import Path

        import pyflink_jobs.task_pipeline as pipeline
        from streamplace.jobs import task_pipeline_args
        job_id = cluster.submit_python_job(Path(pipeline.__file__),
                                           task_pipeline_args(cfg, **settings),
                                           restore_from=restore_from)
    cluster.wait_job_state(job_id, {"RUNNING"}, timeout_s=180)
    if wait_checkpoint:
        wait_for_checkpoint(cluster, job_id)
    return job_id


def wait_for_checkpoint(cluster, job_id: str, timeout_s: float = 240.0) -> None:
    """Until the job completed a checkpoint: a RUNNING job's Python workers may still be
    starting, and a fault before the first checkpoint tests nothing but a fresh start."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        counts = (cluster._get(f"/jobs/{job_id}/checkpoints") or {}).get("counts") or {}
        if counts.get("completed", 0) >= 1:
            return
        time.sleep(1.0)
    raise AssertionError(f"job {job_id} completed no checkpoint within {timeout_s:.0f} s")


class PacedProducer(threading.Thread):
    """Sends ``payloads`` at ``rate_per_s``; ``delivered``/``errors`` after ``join``."""

    def __init__(self, cfg, topic: str, payloads: list[bytes], rate_per_s: float):
        super().__init__(daemon=True, name="paced-producer")
        self.cfg, self.topic, self.payloads, self.rate = cfg, topic, payloads, rate_per_s
        self.delivered, self.errors = 0, []
        self.stop = threading.Event()  # set by a scenario that failed: stop sending

    def run(self) -> None:
        from confluent_kafka import Producer
        producer = Producer({"bootstrap.servers": self.cfg.kafka.bootstrap_servers,
                             "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                             "message.timeout.ms": 300_000, "log_level": 2})

        def on_delivery(err, _msg):
            if err is None:
                self.delivered += 1
            else:
                self.errors.append(str(err))

        began = time.monotonic()
        for i, payload in enumerate(self.payloads):
            if self.stop.is_set():
                break
            wait = began + i / self.rate - time.monotonic()
            if wait > 0:  # sleep, not poll(wait): poll returns at the first delivery report
                time.sleep(wait)
            while True:
                try:
                    producer.produce(self.topic, value=payload, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        remaining = producer.flush(5 if self.stop.is_set() else 300)
        if remaining:
            self.errors.append(f"{remaining} messages not delivered")


@dataclass
class FaultRun:
    """What a scenario measured (see the module docstring)."""

    sent: list[dict]
    results: list[dict]
    fault_started: float
    fault_ended: float
    job_id: str
    extra: dict = field(default_factory=dict)

    @property
    def ids(self) -> list[str]:
        return [r["task_id"] for r in self.results]

    def exactly_once(self) -> bool:
        ids = self.ids
        return len(ids) == len(set(ids)) and set(ids) == {e["task_id"] for e in self.sent} \
            and all(r["status"] == "OK" for r in self.results)

    def figures(self) -> dict:
        seen = sorted(r["_seen_s"] for r in self.results)
        after_fault = [t for t in seen if t >= self.fault_started]
        before = [t for t in seen if t < self.fault_started]
        marks = ([before[-1]] if before else [self.fault_started]) + after_fault
        gap = max((b - a for a, b in zip(marks, marks[1:])), default=0.0)
        first_after = next((t for t in seen if t > self.fault_ended), None)
        ids = self.ids
        return {"tasks": len(self.sent), "results": len(ids),
                "duplicates": len(ids) - len(set(ids)),
                "missing": len({e["task_id"] for e in self.sent} - set(ids)),
                "exactly_once": self.exactly_once(),
                "fault_s": round(self.fault_ended - self.fault_started, 1),
                "committed_gap_s": round(gap, 1),
                "recovery_s": None if first_after is None
                else round(first_after - self.fault_ended, 1),
                "drain_s": round(seen[-1] - self.fault_ended, 1) if seen else None,
                **self.extra}


#: A pace the pipeline sustains on 2 cores (about 13 tasks/s flat out with the IAWP executors),
#: so that what a scenario measures is its fault, not a backlog (the no-fault control scenario
#: shows what the pipeline does by itself).
RATE_PER_S, TASKS, FAULT_AFTER_S = 8.0, 480, 15.0


def run_with_fault(cfg, cluster, name: str, inject, tasks: int = TASKS,
                   rate_per_s: float = RATE_PER_S, fault_after_s: float = FAULT_AFTER_S,
                   seed: int = 1,
                   job_id: str | None = None, sent: list[dict] | None = None,
                   **submit_overrides) -> FaultRun:
    """Submit the job (unless ``job_id``), stream ``tasks`` (or the events ``sent``) at
    ``rate_per_s``, call ``inject(job_id)`` after ``fault_after_s``, wait for every result
    (or 10 minutes)."""
    sent = sent if sent is not None else events(tasks, seed, name)
    tasks = len(sent)
    job_id = job_id or submit(cfg, cluster, name, **submit_overrides)
    box: dict = {}
    stop_reading = threading.Event()
    reader = threading.Thread(target=lambda: box.setdefault("report", read_topic(
        cfg, cfg.job.topic_results, "TaskResult", expected=tasks, timeout_s=600, settle_s=8,
        stamp_seen=True, stop=stop_reading)), daemon=True, name="results-reader")
    reader.start()
    producer = PacedProducer(cfg, cfg.job.topic_tasks,
                             [encode("TaskEvent", e) for e in sent], rate_per_s)
    producer.start()
    time.sleep(fault_after_s)
    try:
        outcome = inject(job_id)
    except BaseException:
        # A failed scenario must not leave a producer and a consumer running into the next
        # scenario (or into the broker's shutdown, where they log refused connections)
        producer.stop.set()
        stop_reading.set()
        producer.join(30)
        reader.join(30)
        raise
    started, ended = outcome[:2]
    if len(outcome) > 2 and outcome[2]:
        job_id = outcome[2]
    producer.join(400)
    reader.join(660)
    assert not producer.errors, producer.errors[:3]
    assert producer.delivered == tasks
    report = box["report"]
    return FaultRun(sent, report.records, started, ended, job_id)
