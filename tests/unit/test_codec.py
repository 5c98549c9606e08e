"""The Avro contract without a JVM: round trips, wire layout, evolution, garbage input."""

from __future__ import annotations

import copy
import json
import random
from importlib import resources

import pytest

from workload.codec import RECORD_NAMES, Codec, CodecError, decode, encode, schema_fingerprint

TASK_EVENT = {"task_id": "täsk-001 🎥", "app_id": "face_recognition", "input_size": 1 << 20,
              "submitted_at_ms": 1_764_500_000_000, "source": "alibaba-genai",
              "expected_work_ms": 812.5, "attributes": {"model": "sd-1.5", "steps": "20"}}
TASK_RESULT = {"task_id": "t-2", "app_id": "video_synopsis", "node_id": "tm_b", "status": "FAILED",
               "submitted_at_ms": 1, "started_at_ms": 2, "finished_at_ms": 3,
               "stage_timings": [{"stage": "gmm_background", "unit": "gpu:1",
                                  "started_at_ms": 2, "finished_at_ms": 3}],
               "output_digest": "", "error": "CUDA out of memory"}
NODE_FEEDBACK = {"node_id": "tm_a", "emitted_at_ms": 10, "sequence": 7, "cpu_util": 0.5,
                 "gpu_util": 0.0, "host_mem_util": 0.25, "gpu_mem_util": 0.0,
                 "uplink_bytes_per_s": 1e6, "downlink_bytes_per_s": 2.5e5, "queue_depth": 3,
                 "in_flight": 2, "backpressure": 0.1, "completed": []}
DEAD_LETTER = {"source_topic": "tasks", "partition": 2, "offset": 12345, "reason": "bad marker",
               "raw": b"\x00\xff garbage", "failed_at_ms": 99, "stage": "decode"}
EXAMPLES = {"TaskEvent": TASK_EVENT, "TaskResult": TASK_RESULT, "NodeFeedback": NODE_FEEDBACK,
            "DeadLetter": DEAD_LETTER}


@pytest.mark.parametrize("name", RECORD_NAMES)
def test_round_trip(name):
    assert decode(name, encode(name, EXAMPLES[name])) == EXAMPLES[name]


def test_defaults_fill_optional_fields():
    minimal = {"task_id": "t", "app_id": "a", "input_size": 1, "submitted_at_ms": 0}
    assert decode("TaskEvent", encode("TaskEvent", minimal)) == {
        **minimal, "source": "", "expected_work_ms": None, "attributes": {}}


def test_single_object_encoding_layout():
    data = encode("TaskEvent", TASK_EVENT)
    assert data[:2] == b"\xc3\x01"
    schema = json.loads((resources.files("workload") / "schemas" / "task_event.avsc").read_text())
    assert data[2:10] == schema_fingerprint(schema)


def test_fingerprint_matches_the_avro_specification():
    # The Avro spec's CRC-64-AVRO of the schema "int" is 0x7275d51a3f395c8f, written LE.
    assert schema_fingerprint("int") == (0x7275D51A3F395C8F).to_bytes(8, "little")


@pytest.mark.parametrize("name,file", [("TaskEvent", "task_event.avsc"),
                                       ("TaskResult", "task_result.avsc"),
                                       ("NodeFeedback", "node_feedback.avsc"),
                                       ("DeadLetter", "dead_letter.avsc")])
def test_shipped_schema_files_parse_and_are_named(name, file):
    schema = json.loads((resources.files("workload") / "schemas" / file).read_text())
    assert schema["name"] == name and schema["namespace"] == "io.streamplace"


def _task_event_schema() -> dict:
    return json.loads((resources.files("workload") / "schemas" / "task_event.avsc").read_text())


def test_new_writer_old_reader_keeps_known_fields():
    """A producer on a newer schema (one optional field appended) must not break old readers."""
    v2 = _task_event_schema()
    v2["fields"].append({"name": "priority", "type": ["null", "int"], "default": None})
    newer = Codec(reader_schemas={"TaskEvent": v2})
    data = newer.encode("TaskEvent", {**TASK_EVENT, "priority": 5})
    old_reader = Codec()
    assert old_reader.decode("TaskEvent", data) == TASK_EVENT
    assert old_reader.unknown_writer_reads == 1


def test_old_writer_new_reader_gets_defaults():
    v0 = _task_event_schema()
    v0["fields"] = [f for f in v0["fields"] if f["name"] != "attributes"]
    old_writer = Codec(reader_schemas={"TaskEvent": v0})
    record = {k: v for k, v in TASK_EVENT.items() if k != "attributes"}
    data = old_writer.encode("TaskEvent", record)
    reader = Codec(extra_writer_schemas={"TaskEvent": [v0]})
    assert reader.decode("TaskEvent", data) == {**record, "attributes": {}}
    assert reader.unknown_writer_reads == 0


def _garbage() -> dict[str, bytes]:
    rng = random.Random(5)
    good = encode("TaskEvent", TASK_EVENT)
    return {
        "empty": b"",
        "json": json.dumps({"task_id": "x"}).encode(),
        "random": bytes(rng.getrandbits(8) for _ in range(64)),
        "marker only": b"\xc3\x01",
        "truncated header": good[:6],
        "truncated body": good[:-4],
        "trailing bytes": good + b"\x00\x01",
        "unknown schema, junk body": b"\xc3\x01" + bytes(8) + b"\x02",
    }


@pytest.mark.parametrize("kind", list(_garbage()))
def test_garbage_raises_codec_error(kind):
    with pytest.raises(CodecError) as info:
        decode("TaskEvent", _garbage()[kind])
    assert "TaskEvent" in str(info.value) or "marker" in str(info.value)


def test_missing_required_field_is_named():
    record = copy.deepcopy(TASK_EVENT)
    del record["input_size"]
    with pytest.raises(CodecError, match="input_size"):
        encode("TaskEvent", record)


def test_wrong_type_is_named():
    with pytest.raises(CodecError, match="input_size"):
        encode("TaskEvent", {**TASK_EVENT, "input_size": "large"})


def test_unknown_record_type():
    with pytest.raises(CodecError, match="unknown record type"):
        encode("Task", TASK_EVENT)


def test_codec_does_not_import_heavy_modules():
    import subprocess
    import sys
    code = ("import sys, workload.codec; "
            "print(sorted(m for m in ('torch', 'pyflink', 'confluent_kafka') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
