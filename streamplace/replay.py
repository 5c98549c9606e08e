"""Replaying a real request trace into the tasks topic, time-compressed.

The default trace is the Alibaba GenAI serving trace (Stable-Diffusion requests with their
arrival times and execution times; ``docs/data.md`` says where to get it). Without the data
folder the built-in generator makes requests of the same shape, and the replay says so.

Each request becomes one TaskEvent:

- ``app_id``: one of the three video-analytics applications, chosen by the request's model id
  (a stable hash: the same model always maps to the same application, as one service serves one
  model), or by its kind when it has no model id;
- ``input_size``: pixels of the task's clip, from the request's work: ``steps x images``
  (defaults 30 x 1) scaled into 20,000-200,000 pixels (the trace's median request lands near
  60,000), so heavier requests become heavier tasks;
- ``expected_work_ms``: the trace's recorded execution time;
- ``source``: ``alibaba-genai:<request id>`` (or ``generated:...``);
- ``payload`` (on by default, ``payloads=False`` for light records): the task's real clip, frames
  cut from real photographs with ``frame_shape(input_size)`` pixels, grey JPEG at quality 80,
  seeded by the request (``workload.apps.registry.task_payload``), so the executors run the
  apps on real images. Over the replay's 20,000-200,000 pixels a record is 9-70 KB (median
  23 KB, mean 33 KB on the Alibaba trace's first 1,200 requests), about 1.5 MB/s at the demo's
  45 tasks/s. The clips are made before the replay starts (about 8 ms of CPU per request, on
  ``PAYLOAD_THREADS`` threads), so sending keeps the trace's timing.

Arrival gaps are compressed so the replay runs at ``rate`` tasks per second on average; bursts and
lulls of the trace keep their shape.

Example::

    events, where = trace_events("alibaba-genai", limit=1200, rate=40.0)  # with clips
    replay_events(config, events)                # sends each at its compressed time
    light, _ = trace_events("alibaba-genai", limit=1200, payloads=False)  # no clips
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from workload.catalog import app_ids

__all__ = ["TimedEvent", "trace_events", "replay_events", "TRACES", "request_to_event",
           "PAYLOAD_QUALITY"]

TRACES = ("alibaba-genai", "synthetic")
#: JPEG quality of the replayed clips (``workload.apps.images.DEFAULT_QUALITY``).
PAYLOAD_QUALITY = 80
#: Threads that make the clips before a replay starts.
PAYLOAD_THREADS = min(8, os.cpu_count() or 1)
MIN_PIXELS, MAX_PIXELS = 20_000, 200_000


@dataclass(frozen=True)
class TimedEvent:
    at_s: float    # seconds after the replay starts
    event: dict


def _stable_index(text: str, n: int) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little") % n


def request_to_event(request, prefix: str, source: str, payload: bool = False,
                     quality: int = PAYLOAD_QUALITY) -> dict:
    """A TaskEvent (dict) for one trace request (see the module docstring for the mapping);
    with ``payload``, carrying its real clip as JPEG at ``quality``."""
    apps = app_ids()
    key = request.model_id or request.kind or request.request_id
    work = (request.steps or 30) * (request.images or 1)
    # 30 steps x 1 image -> 60,000 pixels; linear in work, clipped to the operators' range.
    pixels = int(min(MAX_PIXELS, max(MIN_PIXELS, 2_000 * work)))
    event = {"task_id": f"{prefix}-{request.request_id}",
             "app_id": apps[_stable_index(key, len(apps))],
             "input_size": pixels, "submitted_at_ms": 0,
             "source": f"{source}:{request.request_id}",
             "expected_work_ms": request.exec_time_ms,
             "attributes": {k: str(v) for k, v in (("kind", request.kind),
                                                   ("model_id", request.model_id)) if v}}
    if payload:
        from workload.apps.registry import task_payload  # torch: only when clips are wanted
        # Seeded by the request (the event's source), not the task id: a re-run with another
        # prefix replays the same pictures.
        event["payload"] = task_payload(event["app_id"], pixels, event["source"],
                                        quality=quality)
    return event


def trace_events(trace: str = "alibaba-genai", data_dir=None, limit: int | None = 1200,
                 rate: float = 40.0, skip: int = 0, prefix: str = "replay",
                 seed: int = 0, payloads: bool = True,
                 quality: int = PAYLOAD_QUALITY) -> tuple[list[TimedEvent], str]:
    """The first ``limit`` requests of ``trace`` (after ``skip``) as timed TaskEvents at a mean
    of ``rate`` per second; also returns where they came from, in words. ``payloads`` attaches
    each task's real clip (JPEG at ``quality``; module docstring); ``False`` gives light
    records."""
    if trace not in TRACES:
        raise ValueError(f"unknown trace {trace!r}; known: {', '.join(TRACES)}")
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    if trace == "alibaba-genai":
        from workload.traces import load_or_generate_genai
        loaded = load_or_generate_genai(data_dir, seed=seed)
        requests = list(loaded.requests)[skip:]
        real = not loaded.source.startswith("generated")
        where = (f"Alibaba GenAI requests from {loaded.source}" if real else
                 f"no Alibaba GenAI data found ({loaded.source}); using the built-in generator")
        source = "alibaba-genai" if real else "generated"
    else:
        from workload.traces.generators import generate_requests
        requests = list(generate_requests((limit or 1000) + skip, seed=seed,
                                          style="genai").requests)[skip:]
        where, source = "built-in GenAI-like generator", "generated"
    if limit is not None:
        requests = requests[:limit]
    if not requests:
        raise ValueError(f"the {trace} trace has no requests after skipping {skip}")
    first = requests[0].arrival_s
    span = requests[-1].arrival_s - first
    target = len(requests) / rate
    factor = span / target if span > 0 else 1.0
    events = [TimedEvent((r.arrival_s - first) / factor if span > 0 else i / rate,
                         request_to_event(r, prefix, source))
              for i, r in enumerate(requests)]
    if payloads:
        _attach_payloads(events, quality)
    clips = (f", each with a JPEG clip (mean {_mean_payload(events) / 1000:.0f} KB)"
             if payloads else " (light records, no clips)")
    return events, (f"{where}; {len(events)} requests compressed {factor:,.0f}x to "
                    f"{rate:g}/s{clips}")


def _attach_payloads(events: list[TimedEvent], quality: int) -> None:
    """Each event's clip, made on a few threads (JPEG encoding and numpy release the GIL):
    about 8 ms of CPU per request, so 1,200 requests take 10 s on one core."""
    from workload.apps.registry import task_payload

    def clip(event: dict) -> bytes:
        # the same seed as request_to_event(payload=True): the request, not the task id
        return task_payload(event["app_id"], event["input_size"], event["source"],
                            quality=quality)

    with ThreadPoolExecutor(max_workers=PAYLOAD_THREADS) as pool:
        for timed, payload in zip(events, pool.map(clip, (e.event for e in events))):
            timed.event["payload"] = payload


def _mean_payload(events: list[TimedEvent]) -> float:
    return sum(len(e.event.get("payload") or b"") for e in events) / max(1, len(events))


def replay_events(config, events: list[TimedEvent], progress: Callable[[int], None] | None = None,
                  clock=time.monotonic, sleep=time.sleep) -> dict:
    """Send each event at its time (``submitted_at_ms`` stamped when sent); returns counts.
    Delivery failures are counted and reported, never ignored."""
    from confluent_kafka import Producer

    from workload.codec import encode
    errors: list[str] = []
    delivered = 0

    def on_delivery(err, msg):
        nonlocal delivered
        if err is not None:
            errors.append(str(err))
        else:
            delivered += 1

    producer = Producer({"bootstrap.servers": config.kafka.bootstrap_servers,
                         "linger.ms": 5, "compression.type": "lz4", "acks": "all",
                         "enable.idempotence": True})
    start = clock()
    try:
        for event in events:
            wait = start + event.at_s - clock()
            if wait > 0:
                sleep(wait)
            record = dict(event.event, submitted_at_ms=int(time.time() * 1000))
            producer.produce(config.job.topic_tasks, key=record["task_id"].encode(),
                             value=encode("TaskEvent", record), on_delivery=on_delivery)
            producer.poll(0)
            if progress is not None:
                progress(1)
    finally:
        remaining = producer.flush(30)
    if remaining:
        errors.append(f"{remaining} records still undelivered after 30 s: is the broker at "
                      f"{config.kafka.bootstrap_servers} running? (streamplace kafka status)")
    return {"sent": len(events), "delivered": delivered, "errors": errors,
            "wall_s": clock() - start}
