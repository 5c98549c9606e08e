"""Trace replay: requests -> TaskEvents, time compression, the generator fallback."""

from __future__ import annotations

import pytest

from streamplace.kafka_io import synthetic_task_events
from streamplace.replay import MAX_PIXELS, MIN_PIXELS, request_to_event, trace_events
from workload.catalog import app_ids
from workload.codec import decode, encode
from workload.traces.records import InferenceRequest


def test_requests_become_valid_task_events_with_a_stable_application_per_model():
    a = InferenceRequest("lora-7", 0.0, "TXT_2_IMG", exec_time_ms=5000.0, steps=30, images=1,
                         model_id="M0003")
    b = InferenceRequest("lora-8", 1.0, "IMG_2_IMG", steps=200, images=4, model_id="M0003")
    ea, eb = request_to_event(a, "r", "alibaba-genai"), request_to_event(b, "r", "alibaba-genai")
    assert ea["app_id"] == eb["app_id"] in app_ids()
    assert ea["input_size"] == 60_000 and eb["input_size"] == MAX_PIXELS
    assert ea["expected_work_ms"] == 5000.0 and ea["source"] == "alibaba-genai:lora-7"
    assert decode("TaskEvent", encode("TaskEvent", ea))["task_id"] == "r-lora-7"
    tiny = request_to_event(InferenceRequest("x", 0.0, "k", steps=1), "r", "s")
    assert tiny["input_size"] == MIN_PIXELS


def test_generator_fallback_says_so_and_compression_hits_the_rate(tmp_path):
    events, where = trace_events("alibaba-genai", data_dir=tmp_path / "missing", limit=200,
                                 rate=50.0, payloads=False)
    assert "built-in generator" in where and "light records" in where
    assert all("payload" not in e.event for e in events)
    assert len(events) == 200 and events[0].at_s == 0.0
    assert events[-1].at_s == pytest.approx(200 / 50.0)
    assert all(b.at_s >= a.at_s for a, b in zip(events, events[1:]))
    assert len({e.event["task_id"] for e in events}) == 200


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="unknown trace"):
        trace_events("netflix")
    with pytest.raises(ValueError, match="rate must be positive"):
        trace_events("synthetic", rate=0)


def _check_clip(event: dict) -> int:
    """The event's payload is a clip of its task's size; returns the encoded record's bytes."""
    from workload.apps.frames import frame_shape
    from workload.apps.images import inspect_clip
    info = inspect_clip(event["payload"])
    assert (info.frames, info.height, info.width) == frame_shape(event["input_size"])
    assert info.format == "JPEG"
    data = encode("TaskEvent", event)
    assert decode("TaskEvent", data)["payload"] == event["payload"]
    return len(data)


def test_replayed_tasks_carry_real_clips_by_default(tmp_path):
    events, where = trace_events("alibaba-genai", data_dir=tmp_path / "missing", limit=12,
                                 rate=50.0)
    assert "each with a JPEG clip" in where
    sizes = [_check_clip(e.event) for e in events]
    # 20,000-200,000 pixels of grey JPEG at quality 80: tens of KB, far under Kafka's 1 MB.
    assert 3_000 < min(sizes) and max(sizes) < 100_000
    # The clip follows the request, not the task-id prefix: re-runs replay the same pictures.
    again, _ = trace_events("alibaba-genai", data_dir=tmp_path / "missing", limit=12, rate=50.0,
                            prefix="other")
    assert [e.event["payload"] for e in again] == [e.event["payload"] for e in events]
    assert len({e.event["payload"] for e in events}) == len(events)


def test_a_single_request_gets_the_same_clip_as_in_a_trace():
    request = InferenceRequest("lora-7", 0.0, "TXT_2_IMG", steps=30, images=1, model_id="M3")
    event = request_to_event(request, "r", "alibaba-genai", payload=True)
    assert _check_clip(event) < 60_000
    assert "payload" not in request_to_event(request, "r", "alibaba-genai")
    low = request_to_event(request, "r", "alibaba-genai", payload=True, quality=30)
    assert len(low["payload"]) < len(event["payload"])


def test_synthetic_events_are_light_unless_asked_for_clips():
    light = list(synthetic_task_events(6, seed=2))
    assert all("payload" not in e for e in light)
    assert max(len(encode("TaskEvent", e)) for e in light) < 200
    heavy = list(synthetic_task_events(6, seed=2, payloads=True))
    same = ("task_id", "app_id", "input_size")  # the clip changes nothing else
    assert [[e[k] for k in same] for e in heavy] == [[e[k] for k in same] for e in light]
    assert max(_check_clip(e) for e in heavy) < 500_000
