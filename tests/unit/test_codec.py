"""The Avro contract without a JVM: round trips, wire layout, evolution, garbage input."""

from __future__ import annotations

import copy
import io
import json
import logging
import random
import re
import subprocess
import sys
from pathlib import Path

import fastavro
import pytest

import workload
import workload.codec as codec_module
from workload.codec import (HEADER_SIZE, MARKER, RECORD_NAMES, Codec, CodecError, decode, encode,
                            load_schema, schema_fingerprint)

TASK_EVENT = {"task_id": "täsk-001 🎥", "app_id": "face_recognition", "input_size": 1 << 40,
              "submitted_at_ms": 1_764_500_000_000, "source": "alibaba-genai/ノード",
              "expected_work_ms": 812.5, "attributes": {"model": "sd-1.5", "ключ": "значение"},
              "payload": b"SPCL\x01\x00\x01\x00\x00\x00\x04\xff\xd8\xff\xd9"}
TASK_RESULT = {"task_id": "t-2", "app_id": "video_synopsis", "node_id": "tm_b-7f3a",
               "status": "FAILED", "submitted_at_ms": 1_764_500_000_000,
               "started_at_ms": 1_764_500_000_120, "finished_at_ms": 1_764_500_001_900,
               "stage_timings": [{"stage": "decode", "unit": "cpu:0",
                                  "started_at_ms": 1_764_500_000_120,
                                  "finished_at_ms": 1_764_500_000_300},
                                 {"stage": "gmm_background", "unit": "gpu:1",
                                  "started_at_ms": 1_764_500_000_300,
                                  "finished_at_ms": 1_764_500_001_900}],
               "output_digest": "", "error": "CUDA out of memory (été)", "routed_to": "tm_b",
               "output": '{"app_id": "video_synopsis", "tubes": 3, "note": "é"}'}
NODE_FEEDBACK = {"node_id": "tm_a", "emitted_at_ms": 1_764_500_000_000, "cpu_util": 0.5,
                 "gpu_util": 0.0, "host_mem_util": 0.25, "gpu_mem_util": 1.0,
                 "uplink_bytes_per_s": 1.25e6, "downlink_bytes_per_s": 2.5e5, "queue_depth": 3,
                 "in_flight": 2, "backpressure": 0.1,
                 "completed": [{"task_id": "t-1", "app_id": "face_recognition",
                                "input_size": 921_600, "queue_ms": 12.5, "service_ms": 80.25,
                                "finished_at_ms": 1_764_499_999_990, "work_ms": 61.0}],
                 "sequence": 7, "routed_queue": [3],
                 "routed_backlog_ms": [120.5], "routed_speed_factor": [1.8],
                 "stage_batches": [{"stage": "model", "unit_kind": "gpu", "batch_size": 16,
                                    "batches": 40, "mean_inputs": 12.5, "p99_ms": 4.25}],
                 "power_w": 215.5, "power_source": "nvml+cpu-estimate",
                 "completed_energy_j": [9.125], "completed_tenant": ["team-a"],
                 "completed_deadline_met": [1],
                 "learning_refused": {"batch:non-finite": 2, "alone:implausible": 1},
                 "routed_model_version": [12]}
DEAD_LETTER = {"source_topic": "tasks", "partition": 2, "offset": 12_345_678_901,
               "reason": "not an Avro single-object message", "raw": b"\x00\xff{\"x\": 1}",
               "failed_at_ms": 1_764_500_000_000, "stage": "decode"}
EXAMPLES = {"TaskEvent": TASK_EVENT, "TaskResult": TASK_RESULT, "NodeFeedback": NODE_FEEDBACK,
            "DeadLetter": DEAD_LETTER}
BIG_PAYLOAD = bytes(range(256)) * 1024  # 256 KiB: more than a clip of the largest task
# Edge cases: empty arrays, maps and strings, null unions, OK enum, extreme numbers.
EDGE_CASES = [
    ("TaskEvent", {**TASK_EVENT, "task_id": "", "input_size": 0, "source": "",
                   "expected_work_ms": None, "attributes": {}, "payload": None}),
    ("TaskEvent", {**TASK_EVENT, "payload": b""}),
    ("TaskEvent", {**TASK_EVENT, "payload": BIG_PAYLOAD}),
    ("TaskEvent", {**TASK_EVENT, "input_size": -(1 << 63), "submitted_at_ms": (1 << 63) - 1}),
    ("TaskResult", {**TASK_RESULT, "status": "OK", "stage_timings": [], "error": None,
                    "output_digest": "9f86d081884c7d65", "output": None}),
    ("TaskResult", {**TASK_RESULT, "output": ""}),
    ("NodeFeedback", {**NODE_FEEDBACK, "completed": [], "queue_depth": 0, "in_flight": 0,
                      "backpressure": 0.0}),
    ("DeadLetter", {**DEAD_LETTER, "raw": b"", "partition": -1, "offset": -1, "reason": ""}),
]
FILES = {"TaskEvent": "task_event.avsc", "TaskResult": "task_result.avsc",
         "NodeFeedback": "node_feedback.avsc", "DeadLetter": "dead_letter.avsc"}


@pytest.mark.parametrize("name", RECORD_NAMES)
def test_round_trip(name):
    data = encode(name, EXAMPLES[name])
    assert isinstance(data, bytes)
    assert decode(name, data) == EXAMPLES[name]


@pytest.mark.parametrize("name,record", EDGE_CASES, ids=[n for n, _ in EDGE_CASES])
def test_round_trip_edge_cases(name, record):
    assert decode(name, encode(name, record)) == record


def test_defaults_fill_optional_fields():
    minimal = {"task_id": "t", "app_id": "a", "input_size": 1, "submitted_at_ms": 0}
    assert decode("TaskEvent", encode("TaskEvent", minimal)) == {
        **minimal, "source": "", "expected_work_ms": None, "attributes": {}, "payload": None}
    result = {k: v for k, v in TASK_RESULT.items()
              if k not in ("stage_timings", "output_digest", "error", "routed_to", "output")}
    assert decode("TaskResult", encode("TaskResult", result)) == {
        **result, "stage_timings": [], "output_digest": "", "error": None, "routed_to": "",
        "output": None}


APPENDED_FEEDBACK_FIELDS = ("routed_queue", "routed_backlog_ms", "routed_speed_factor",
                            "stage_batches")
#: appended at the end of the record for issue 17, with their defaults (the release before
#: them: node_feedback.v2.avsc, a named release and a defaulted prefix of the current schema):
#: power and energy, then each task's tenant and whether it met its deadline, then what the
#: node's learners refused (workload/refusals.py), then the service's model version that
#: decided each task (placement/service/version_trial.py)
POWER_FIELDS = {"power_w": -1.0, "power_source": "", "completed_energy_j": [],
                "completed_tenant": [], "completed_deadline_met": [], "learning_refused": {},
                "routed_model_version": []}


def _before_energy(record: dict) -> dict:
    """``record`` as a writer on v2 (before power_w / power_source / completed_energy_j)
    wrote it."""
    return {k: v for k, v in record.items() if k not in POWER_FIELDS}


def _energy_not_reported(record: dict) -> dict:
    """``record`` as the current reader returns it from a writer before energy."""
    return {**record, **POWER_FIELDS}


@pytest.mark.parametrize("kept", range(len(APPENDED_FEEDBACK_FIELDS)))
def test_feedback_written_before_the_routed_fields_existed_still_decodes(kept):
    """Each appended routed_* field has a default: a record written by an older schema (the
    release before energy, v2, with the first ``kept`` of them) decodes with the missing ones
    empty, and energy and power not reported."""
    dropped = APPENDED_FEEDBACK_FIELDS[kept:]
    older = _history("node_feedback", "v2")
    older["fields"] = [f for f in older["fields"] if f["name"] not in dropped]
    old_record = {k: v for k, v in _before_energy(NODE_FEEDBACK).items() if k not in dropped}
    data = Codec(reader_schemas={"NodeFeedback": older}).encode("NodeFeedback", old_record)
    codec = Codec()
    assert codec.decode("NodeFeedback", data) == _energy_not_reported(
        {**old_record, **{name: [] for name in dropped}})
    assert codec.unknown_writer_reads == 0


@pytest.mark.parametrize("kept", range(len(POWER_FIELDS)))
def test_feedback_without_the_trailing_power_fields_decodes_them_as_not_reported(kept):
    """power_w / power_source / completed_energy_j were appended with defaults: the current
    schema without the last of them is a defaulted prefix (a known writer), its records read
    -1 / "" / []."""
    dropped = list(POWER_FIELDS)[kept:]
    older = load_schema("NodeFeedback")
    older["fields"] = [f for f in older["fields"] if f["name"] not in dropped]
    old_record = {k: v for k, v in NODE_FEEDBACK.items() if k not in dropped}
    data = Codec(reader_schemas={"NodeFeedback": older}).encode("NodeFeedback", old_record)
    codec = Codec()
    assert codec.decode("NodeFeedback", data) == {
        **old_record, **{k: POWER_FIELDS[k] for k in dropped}}
    assert codec.unknown_writer_reads == 0


def test_the_energy_fields_are_appended_after_the_v2_release():
    """The current schema is node_feedback.v2.avsc (every field and nested record unchanged)
    plus power_w, power_source and completed_energy_j at the end; nothing was added inside
    TaskTiming, so v2 is a prefix both ways (docs/avro.md rule 1)."""
    v2 = _history("node_feedback", "v2")
    current = load_schema("NodeFeedback")
    assert current["fields"][:len(v2["fields"])] == v2["fields"]
    assert [f["name"] for f in current["fields"][len(v2["fields"]):]] == list(POWER_FIELDS)
    assert {f["name"]: f["default"] for f in current["fields"][len(v2["fields"]):]} == \
        POWER_FIELDS
    energy = next(f for f in current["fields"] if f["name"] == "completed_energy_j")
    assert energy["type"] == {"type": "array", "items": "double"}
    assert schema_fingerprint(v2) in Codec().known_fingerprints("NodeFeedback")
    record = {**NODE_FEEDBACK, **POWER_FIELDS}
    assert decode("NodeFeedback", encode("NodeFeedback", record)) == record


NEW_FEEDBACK_SCENARIOS = [
    # (name, record written by the current schema)
    ("one task with energy", NODE_FEEDBACK),
    ("no task", {**NODE_FEEDBACK, "completed": [], "routed_queue": [], "routed_backlog_ms": [],
                 "routed_speed_factor": [], "completed_energy_j": []}),
    ("three tasks, one not reported", {
        **NODE_FEEDBACK,
        "completed": [{**NODE_FEEDBACK["completed"][0], "task_id": f"t-{i}",
                       "work_ms": 10.0 * i, "input_size": 1 << (10 + i)} for i in range(3)],
        "routed_queue": [0, 1, -1], "routed_backlog_ms": [0.0, 12.5, -1.0],
        "routed_speed_factor": [1.0, 0.5, -1.0], "completed_energy_j": [0.0, -1.0, 1e6]}),
    ("power not reported, no batching", {
        **NODE_FEEDBACK, "stage_batches": [], "power_w": -1.0, "power_source": "",
        "completed_energy_j": [-1.0]}),
    ("200 tasks", {
        **NODE_FEEDBACK,
        "completed": [{**NODE_FEEDBACK["completed"][0], "task_id": f"t-{i}"}
                      for i in range(200)],
        "routed_queue": list(range(200)), "routed_backlog_ms": [float(i) for i in range(200)],
        "routed_speed_factor": [1.0] * 200,
        "completed_energy_j": [0.5 * i for i in range(200)]}),
]


@pytest.mark.parametrize("record", [s[1] for s in NEW_FEEDBACK_SCENARIOS],
                         ids=[s[0] for s in NEW_FEEDBACK_SCENARIOS])
def test_a_reader_of_v2_decodes_new_feedback_with_every_old_field_equal(record):
    """A router or placement service still on v2 reads records of an upgraded executor: the
    new writer is unknown to it, so it reads the body with v2 (docs/avro.md "Unknown"), gets
    every v2 field exactly, and leaves the appended power and energy bytes unread. And the
    current reader gets the record back whole."""
    old_reader = Codec(reader_schemas={"NodeFeedback": _history("node_feedback", "v2")})
    data = encode("NodeFeedback", record)
    assert old_reader.decode("NodeFeedback", data) == _before_energy(record)
    assert old_reader.unknown_writer_reads == 1  # counted, not refused
    assert decode("NodeFeedback", data) == record


def test_a_field_added_inside_task_timing_would_break_a_v2_reader():
    """Why completed_energy_j is a top-level array: the same number as a field of TaskTiming
    (what a first draft did) shifts every byte after the first timing, so a v2 reader that
    has never seen that writer refuses (or misreads) every record that lists a task."""
    nested = load_schema("NodeFeedback")
    nested["fields"] = [f for f in nested["fields"] if f["name"] != "completed_energy_j"]
    timing = next(f for f in nested["fields"] if f["name"] == "completed")["type"]["items"]
    timing["fields"].append({"name": "energy_j", "type": "double", "default": -1.0})
    record = {k: v for k, v in NODE_FEEDBACK.items() if k != "completed_energy_j"}
    record["completed"] = [{**t, "energy_j": 9.125} for t in record["completed"]]
    data = Codec(reader_schemas={"NodeFeedback": nested}).encode("NodeFeedback", record)
    old_reader = Codec(reader_schemas={"NodeFeedback": _history("node_feedback", "v2")})
    try:
        got = old_reader.decode("NodeFeedback", data)
    except CodecError:
        got = None
    assert got != _before_energy(NODE_FEEDBACK)


@pytest.mark.parametrize("dropped", [(), ("routed_queue",)])
def test_timings_written_before_work_ms_existed_decode_as_not_reported(dropped):
    """work_ms was added inside the nested TaskTiming: not a prefix, so the release before it
    is kept as schemas/history/node_feedback.v1.avsc; it and its own defaulted prefix (the
    release before routed_queue) decode with work_ms = -1 and the newer fields empty."""
    older = _history("node_feedback")
    older["fields"] = [f for f in older["fields"] if f["name"] not in dropped]
    new_fields = ("routed_queue", "routed_backlog_ms", "routed_speed_factor", "stage_batches")
    old_record = {k: v for k, v in NODE_FEEDBACK.items() if k not in new_fields}
    old_record.update({k: NODE_FEEDBACK[k] for k in ("routed_queue",) if k not in dropped})
    old_record = {k: v for k, v in old_record.items() if k not in POWER_FIELDS}
    old_record["completed"] = [{k: v for k, v in t.items() if k != "work_ms"}
                               for t in NODE_FEEDBACK["completed"]]
    data = Codec(reader_schemas={"NodeFeedback": older}).encode("NodeFeedback", old_record)
    codec = Codec()
    decoded = codec.decode("NodeFeedback", data)
    assert codec.unknown_writer_reads == 0  # a known writer, resolved, not guessed
    assert decoded["completed"][0]["work_ms"] == -1.0
    assert {k: decoded[k] for k in POWER_FIELDS} == POWER_FIELDS
    assert decoded["routed_backlog_ms"] == [] and decoded["routed_speed_factor"] == []
    assert decoded["routed_queue"] == ([] if dropped else [3]) and decoded["stage_batches"] == []


def test_results_written_before_routed_to_existed_still_decode():
    """routed_to (then output) were appended to TaskResult with defaults: the older schema is a
    defaulted prefix of the current one, so its records decode with routed_to = "" and no
    output."""
    older = load_schema("TaskResult")
    older["fields"] = [f for f in older["fields"] if f["name"] not in ("routed_to", "output")]
    writer = Codec(reader_schemas={"TaskResult": older})
    old_record = {k: v for k, v in TASK_RESULT.items() if k not in ("routed_to", "output")}
    data = writer.encode("TaskResult", old_record)
    assert data[2:HEADER_SIZE] == schema_fingerprint(older)
    assert decode("TaskResult", data) == {**old_record, "routed_to": "", "output": None}


def _history(stem: str, version: str = "v1") -> dict:
    return json.loads((Path(workload.__file__).parent / "schemas" / "history" /
                       f"{stem}.{version}.avsc").read_text())


@pytest.mark.parametrize("name,stem,new_field", [("TaskEvent", "task_event", "payload"),
                                                 ("TaskResult", "task_result", "output")])
def test_records_of_the_release_before_payload_and_output_decode(name, stem, new_field):
    """task_event.v1 / task_result.v1 are the releases before payload / output: their records
    are read by a known writer schema (not guessed) and come back with the new field null."""
    v1 = _history(stem)
    assert [f["name"] for f in v1["fields"]] == [
        f["name"] for f in load_schema(name)["fields"] if f["name"] != new_field]
    old_record = {k: v for k, v in EXAMPLES[name].items() if k != new_field}
    data = Codec(reader_schemas={name: v1}).encode(name, old_record)
    codec = Codec()
    assert data[2:HEADER_SIZE] in codec.known_fingerprints(name)
    assert codec.decode(name, data) == {**old_record, new_field: None}
    assert codec.unknown_writer_reads == 0


@pytest.mark.parametrize("name,stem,new_field", [("TaskEvent", "task_event", "payload"),
                                                 ("TaskResult", "task_result", "output")])
def test_a_reader_of_the_release_before_skips_payload_and_output(name, stem, new_field):
    """An executor or consumer not yet upgraded reads new records (new_field set, even a
    256 KiB payload) with its own schema: every field it knows, the new one left unread."""
    record = ({**TASK_EVENT, "payload": BIG_PAYLOAD} if name == "TaskEvent"
              else TASK_RESULT)
    old_reader = Codec(reader_schemas={name: _history(stem)})
    assert old_reader.decode(name, encode(name, record)) == {
        k: v for k, v in record.items() if k != new_field}
    assert old_reader.unknown_writer_reads == 1


def test_decode_accepts_bytearray_and_memoryview():
    data = encode("TaskEvent", TASK_EVENT)
    assert decode("TaskEvent", bytearray(data)) == TASK_EVENT
    assert decode("TaskEvent", memoryview(data)) == TASK_EVENT


# --- wire format -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", RECORD_NAMES)
def test_single_object_encoding_layout(name):
    data = encode(name, EXAMPLES[name])
    assert data[:2] == MARKER == b"\xc3\x01"
    assert data[2:HEADER_SIZE] == schema_fingerprint(load_schema(name))
    # The rest is the plain Avro binary body: any schemaless reader gets the record back.
    body = fastavro.schemaless_reader(io.BytesIO(data[HEADER_SIZE:]),
                                      fastavro.parse_schema(load_schema(name)))
    assert body == EXAMPLES[name]


def test_fingerprints_of_the_four_records_differ():
    assert len({schema_fingerprint(load_schema(n)) for n in RECORD_NAMES}) == 4


# Java SchemaNormalization.parsingFingerprint64 values (signed longs) of primitive schemas, as
# listed in the Avro project's share/test/data/schema-tests.txt.
SPEC_FINGERPRINTS = {"null": 7195948357588979594, "int": 8247732601305521295,
                     "long": -3434872931120570953, "string": -8142146995180207161,
                     "bytes": 5746618253357095269, "double": -8181574048448539266}


@pytest.mark.parametrize("schema,expected", SPEC_FINGERPRINTS.items())
def test_fingerprint_matches_the_avro_specification(schema, expected):
    assert schema_fingerprint(schema) == expected.to_bytes(8, "little", signed=True)
    assert schema_fingerprint("int").hex() == "8f5c393f1ad57572"  # 0x7275d51a3f395c8f, LE


@pytest.mark.parametrize("name", RECORD_NAMES)
def test_interoperates_with_the_reference_avro_implementation(name):
    """The Apache `avro` package computes the same fingerprint and canonical form, reads our
    body and writes the identical bytes (what Java's BinaryMessageEncoder does too)."""
    avro_schema = pytest.importorskip("avro.schema")
    avro_io = pytest.importorskip("avro.io")
    schema = avro_schema.parse(json.dumps(load_schema(name)))
    assert schema.fingerprint("CRC-64-AVRO") == schema_fingerprint(load_schema(name))
    data = encode(name, EXAMPLES[name])
    read = avro_io.DatumReader(schema).read(avro_io.BinaryDecoder(io.BytesIO(data[HEADER_SIZE:])))
    assert read == EXAMPLES[name]
    out = io.BytesIO()
    avro_io.DatumWriter(schema).write(EXAMPLES[name], avro_io.BinaryEncoder(out))
    assert data[HEADER_SIZE:] == out.getvalue()


@pytest.mark.parametrize("name", RECORD_NAMES)
def test_shipped_schema_files_parse_and_are_named(name):
    from importlib import resources
    text = (resources.files("workload") / "schemas" / FILES[name]).read_text(encoding="utf-8")
    schema = json.loads(text)
    assert schema["type"] == "record"
    assert schema["name"] == name and schema["namespace"] == "io.streamplace"
    parsed = fastavro.parse_schema(schema)
    assert parsed["name"] == f"io.streamplace.{name}"
    assert all(f["name"] == f["name"].lower() for f in schema["fields"])  # snake_case
    assert load_schema(name) == schema


def test_every_shipped_schema_is_a_record_name():
    from importlib import resources
    shipped = {p.name for p in (resources.files("workload") / "schemas").iterdir()
               if p.name.endswith(".avsc")}
    assert shipped == set(FILES.values())
    assert set(RECORD_NAMES) == set(FILES)


# --- evolution ---------------------------------------------------------------------------------

def _v2_task_event() -> dict:
    v2 = load_schema("TaskEvent")
    v2["fields"].append({"name": "priority", "type": ["null", "int"], "default": None})
    return v2


def test_new_writer_old_reader_keeps_known_fields(caplog):
    """A producer on a newer schema (one optional field appended) must not break old readers:
    they read the known fields with their own schema and count the unknown writer."""
    newer = Codec(reader_schemas={"TaskEvent": _v2_task_event()})
    data = newer.encode("TaskEvent", {**TASK_EVENT, "priority": 5})
    assert newer.decode("TaskEvent", data) == {**TASK_EVENT, "priority": 5}
    assert data[2:HEADER_SIZE] != schema_fingerprint(load_schema("TaskEvent"))
    old_reader = Codec()
    with caplog.at_level(logging.WARNING, logger="workload.codec"):
        assert old_reader.decode("TaskEvent", data) == TASK_EVENT
        assert old_reader.decode("TaskEvent", data) == TASK_EVENT
    assert old_reader.unknown_writer_reads == 2
    fp = f"0x{int.from_bytes(data[2:HEADER_SIZE], 'little'):016x}"
    assert old_reader.unknown_writer_fingerprints == {("TaskEvent", fp): 2}
    assert len([r for r in caplog.records if fp in r.getMessage()]) == 1  # once, not per record
    # The newer writer's messages with the new field left at its default decode the same way.
    assert old_reader.decode("TaskEvent", newer.encode("TaskEvent", TASK_EVENT)) == TASK_EVENT


def test_old_writer_new_reader_gets_defaults():
    """An older producer whose schema lacks the trailing optional field(s): the reader knows
    its fingerprint (a defaulted prefix of the current schema) and fills in the defaults."""
    reader = Codec()
    for dropped in (1, 2, 3):
        v0 = load_schema("TaskEvent")
        v0["fields"] = v0["fields"][:-dropped]
        old_writer = Codec(reader_schemas={"TaskEvent": v0})
        record = {f["name"]: TASK_EVENT[f["name"]] for f in v0["fields"]}
        data = old_writer.encode("TaskEvent", record)
        assert data[2:HEADER_SIZE] in reader.known_fingerprints("TaskEvent")
        assert reader.decode("TaskEvent", data) == {
            **{"source": "", "expected_work_ms": None, "attributes": {}, "payload": None},
            **record}
    assert reader.unknown_writer_reads == 0


def _task_result_with_richer_stage_timing() -> dict:
    """A future TaskResult whose nested StageTiming gained an optional field: the old writer
    schema is then not a prefix of the new one and must be kept in schemas/history/."""
    v2 = load_schema("TaskResult")
    stage = next(f for f in v2["fields"] if f["name"] == "stage_timings")
    stage["type"]["items"]["fields"].append(
        {"name": "device_ms", "type": ["null", "double"], "default": None})
    return v2


def test_history_schema_resolves_a_nested_change(tmp_path, monkeypatch):
    v2 = _task_result_with_richer_stage_timing()
    data = encode("TaskResult", TASK_RESULT)  # written with the shipped (older) schema
    expected = copy.deepcopy(TASK_RESULT)
    for timing in expected["stage_timings"]:
        timing["device_ms"] = None
    # Given explicitly ...
    reader = Codec(reader_schemas={"TaskResult": v2},
                   extra_writer_schemas={"TaskResult": [load_schema("TaskResult")]})
    assert reader.decode("TaskResult", data) == expected
    # ... or found in schemas/history/ next to the current files.
    schemas = tmp_path / "schemas"
    (schemas / "history").mkdir(parents=True)
    for name, file in FILES.items():
        (schemas / file).write_text(json.dumps(v2 if name == "TaskResult" else load_schema(name)))
    (schemas / "history" / "task_result.v1.avsc").write_text(json.dumps(load_schema("TaskResult")))
    monkeypatch.setattr(codec_module, "_schemas_dir", lambda: schemas)
    from_history = Codec()
    assert schema_fingerprint(load_schema("TaskResult")) in from_history.known_fingerprints(
        "TaskResult")
    assert from_history.decode("TaskResult", data) == expected
    assert from_history.unknown_writer_reads == 0


def test_message_of_another_record_type_is_named():
    data = encode("TaskResult", TASK_RESULT)
    with pytest.raises(CodecError, match="is a TaskResult, not a TaskEvent"):
        decode("TaskEvent", data)


# --- garbage in, CodecError out ----------------------------------------------------------------

def _garbage() -> dict[str, tuple[str, object, str]]:
    """kind -> (record name, input, a phrase the message must contain)."""
    rng = random.Random(5)
    good = encode("TaskEvent", TASK_EVENT)
    header = good[:HEADER_SIZE]
    result_header = encode("TaskResult", TASK_RESULT)[:HEADER_SIZE]
    result_body = encode("TaskResult", TASK_RESULT)[HEADER_SIZE:]
    # TaskResult body: 3 strings then the enum index; zig-zag 2*7 = index 7 is out of range.
    strings = b"".join(bytes([2 * len(s)]) + s for s in (b"t", b"a", b"n"))
    return {
        "empty": ("TaskEvent", b"", "empty message"),
        "json": ("TaskEvent", json.dumps({"task_id": "x"}).encode(), "0x7b22"),
        "random": ("TaskEvent", bytes([0x17]) + bytes(rng.getrandbits(8) for _ in range(63)),
                   "C3 01 marker"),
        "wrong marker": ("TaskEvent", b"\xc3\x00" + good[2:], "0xc300"),
        "marker only": ("TaskEvent", MARKER, "shorter than the 10-byte header"),
        "truncated header": ("TaskEvent", good[:6], "shorter than the 10-byte header"),
        "header only": ("TaskEvent", header, "truncated TaskEvent body after 0 bytes"),
        "truncated body": ("TaskEvent", good[:-4], "truncated TaskEvent body"),
        "trailing bytes": ("TaskEvent", good + b"\x00\x01", "2 trailing bytes"),
        "unknown schema, junk body": ("TaskEvent", MARKER + bytes(8) + b"\x02",
                                      "unknown writer schema fingerprint 0x0000000000000000"),
        "bad enum index": ("TaskResult", result_header + strings + b"\x0e" + result_body[10:],
                           "does not decode"),
        "bad union index": ("TaskEvent", header + b"\x02t\x02a\x02\x00\x00\x0a",
                            "does not decode"),
        "invalid utf-8": ("TaskEvent", header + b"\x04\xff\xfe\x02a\x02\x00\x00\x00\x00",
                          "does not decode"),
        "huge length": ("TaskEvent", header + b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f",
                        "truncated TaskEvent body"),
        # payload (union index 1 = bytes) declaring 2 GiB and carrying 3 bytes
        "huge payload length": ("TaskEvent", header + b"\x02t\x02a\x02\x00\x00\x00\x00\x02"
                                b"\xfe\xff\xff\xff\x0fabc", "truncated TaskEvent body"),
        "str input": ("TaskEvent", good.decode("latin-1"), "expected bytes, got str"),
        "None input": ("TaskEvent", None, "expected bytes, got NoneType"),
    }


@pytest.mark.parametrize("kind", list(_garbage()))
def test_garbage_raises_codec_error(kind):
    name, data, phrase = _garbage()[kind]
    with pytest.raises(CodecError) as info:
        decode(name, data)
    assert phrase in str(info.value)


@pytest.mark.parametrize("name", RECORD_NAMES)
def test_every_truncation_raises_codec_error(name):
    data = encode(name, EXAMPLES[name])
    for cut in range(len(data)):
        with pytest.raises(CodecError):
            decode(name, data[:cut])


def test_mutated_messages_raise_only_codec_error():
    rng = random.Random(11)
    good = encode("TaskResult", TASK_RESULT)
    decoded = rejected = 0
    for _ in range(3000):
        data = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.getrandbits(8)
        try:
            assert isinstance(decode("TaskResult", bytes(data)), dict)
            decoded += 1
        except CodecError:
            rejected += 1
    assert rejected > 0 and decoded + rejected == 3000


# --- size limit --------------------------------------------------------------------------------

def test_messages_over_the_size_limit_are_refused_before_reading():
    data = encode("TaskEvent", {**TASK_EVENT, "payload": bytes(100_000)})
    small = Codec(max_message_bytes=len(data) - 1)
    for form in (data, bytearray(data), memoryview(data)):
        with pytest.raises(CodecError, match=f"TaskEvent message of {len(data):,} bytes is over "
                                             f"the {len(data) - 1:,}-byte limit"):
            small.decode("TaskEvent", form)
    assert Codec(max_message_bytes=len(data)).decode("TaskEvent", data)["payload"] == bytes(100_000)
    # The default bound is far above any real record (a 256 KiB payload decodes) ...
    assert decode("TaskEvent", encode("TaskEvent", {**TASK_EVENT, "payload": BIG_PAYLOAD}))
    assert codec_module.DEFAULT_MAX_MESSAGE_BYTES == 8 << 20
    # ... and refuses a 9 MiB message without parsing it.
    huge = encode("TaskEvent", {**TASK_EVENT, "payload": bytes(9 << 20)})
    with pytest.raises(CodecError, match="over the 8,388,608-byte limit"):
        decode("TaskEvent", huge)
    with pytest.raises(ValueError, match="at least the 10-byte header"):
        Codec(max_message_bytes=4)


# --- encoding errors ---------------------------------------------------------------------------

def test_missing_required_field_is_named():
    record = copy.deepcopy(TASK_EVENT)
    del record["input_size"]
    with pytest.raises(CodecError, match="required field 'input_size' is missing"):
        encode("TaskEvent", record)


@pytest.mark.parametrize("name,field,value,phrase", [
    ("TaskEvent", "input_size", "large", "expected long"),
    ("TaskEvent", "input_size", 1.5, "expected long"),  # fastavro alone would write 1
    ("TaskEvent", "input_size", 1 << 64, "expected long"),
    ("TaskEvent", "expected_work_ms", "slow", "expected null or double"),
    ("TaskEvent", "attributes", {"steps": 20}, "expected string"),
    ("NodeFeedback", "queue_depth", 1 << 31, "expected int"),  # Java would reject it
    ("TaskResult", "status", "MAYBE", "expected one of ['OK', 'FAILED']"),
    ("DeadLetter", "raw", "text", "expected bytes"),
    ("TaskEvent", "payload", "jpeg", "expected null or bytes"),
    ("TaskResult", "output", {"tubes": 3}, "expected null or string"),
])
def test_wrong_type_is_named(name, field, value, phrase):
    pattern = f"field '{name}\\.{field}' is .*{re.escape(phrase)}"
    with pytest.raises(CodecError, match=pattern) as info:
        encode(name, {**EXAMPLES[name], field: value})
    assert f"cannot encode {name}" in str(info.value)


def test_nested_record_problem_is_named():
    bad = copy.deepcopy(TASK_RESULT)
    del bad["stage_timings"][0]["unit"]
    with pytest.raises(CodecError, match="StageTiming.unit"):
        encode("TaskResult", bad)


def test_unknown_field_is_named():
    with pytest.raises(CodecError, match="input_sise"):
        encode("TaskEvent", {**TASK_EVENT, "input_sise": 3})


def test_non_dict_and_unknown_record_type():
    with pytest.raises(CodecError, match="expected a dict, got list"):
        encode("TaskEvent", [TASK_EVENT])
    with pytest.raises(CodecError, match="unknown record type 'Task'"):
        encode("Task", TASK_EVENT)
    with pytest.raises(CodecError, match="unknown record type 'Task'"):
        decode("Task", encode("TaskEvent", TASK_EVENT))


def test_codec_does_not_import_heavy_modules():
    code = ("import sys, workload.codec; "
            "print(sorted(m for m in ('torch', 'pyflink', 'confluent_kafka') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
