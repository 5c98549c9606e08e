"""Trace replay: requests -> TaskEvents, time compression, the generator fallback."""

from __future__ import annotations

import pytest

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
                                 rate=50.0)
    assert "built-in generator" in where
    assert len(events) == 200 and events[0].at_s == 0.0
    assert events[-1].at_s == pytest.approx(200 / 50.0)
    assert all(b.at_s >= a.at_s for a, b in zip(events, events[1:]))
    assert len({e.event["task_id"] for e in events}) == 200


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="unknown trace"):
        trace_events("netflix")
    with pytest.raises(ValueError, match="rate must be positive"):
        trace_events("synthetic", rate=0)
