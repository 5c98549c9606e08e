"""The Avro contract's codec: single-object encoded records, decoded with fastavro.

Wire format (Avro specification, "single object encoding"): the two marker bytes ``C3 01``, the
8-byte little-endian CRC-64-AVRO fingerprint of the writer schema's parsing canonical form, then
the Avro binary body. Java's ``BinaryMessageEncoder`` writes the same bytes, so JVM readers need
no schema registry either.

Evolution (see docs/avro.md): fields are only ever appended at the end of a record, each with a
default. A reader resolves every writer schema it ships (current and ``schemas/history/``) to its
current schema; a writer fingerprint it does not know is read with its own current schema, which
is safe under the append-only rule (the unknown trailing fields are left unread) and is counted
in ``Codec.unknown_writer_reads``.

Why fastavro rather than the ``avro`` package: its C-accelerated schemaless reader and writer are
several times faster, and decoding sits on the per-record path of the router (docs/avro.md has
the measurement).

Example::

    >>> data = encode("TaskEvent", {"task_id": "t1", "app_id": "face_recognition",
    ...                             "input_size": 4096, "submitted_at_ms": 0})
    >>> decode("TaskEvent", data)["input_size"]
    4096
"""

from __future__ import annotations

import io
import json
from importlib import resources

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

__all__ = ["CodecError", "Codec", "RECORD_NAMES", "encode", "decode", "default_codec"]

MARKER = b"\xc3\x01"
HEADER_SIZE = 10
SCHEMA_FILES = {"TaskEvent": "task_event.avsc", "TaskResult": "task_result.avsc",
                "NodeFeedback": "node_feedback.avsc", "DeadLetter": "dead_letter.avsc"}
RECORD_NAMES = tuple(SCHEMA_FILES)


class CodecError(ValueError):
    """Bytes that are not a valid record of the expected type, or a record that cannot be
    encoded; the message says what is wrong."""


def schema_fingerprint(schema) -> bytes:
    """CRC-64-AVRO of the parsing canonical form, as the 8 little-endian wire bytes."""
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


def _load_schema_text(relative: str) -> dict:
    return json.loads((resources.files("workload") / "schemas" / relative).read_text())


class Codec:
    """Encoder/decoder for the four streamplace records, schemas parsed once.

    ``extra_writer_schemas`` maps a record name to older (or newer) writer schemas this reader
    should resolve; the shipped ``schemas/history/`` files are added automatically.
    """

    def __init__(self, extra_writer_schemas: dict[str, list[dict]] | None = None,
                 reader_schemas: dict[str, dict] | None = None):
        self.unknown_writer_reads = 0
        self._schemas = {}
        self._fingerprints = {}
        self._writers: dict[str, dict[bytes, object]] = {}
        for name, filename in SCHEMA_FILES.items():
            raw = (reader_schemas or {}).get(name) or _load_schema_text(filename)
            parsed = fastavro.parse_schema(raw, _write_hint=False)
            self._schemas[name] = parsed
            self._fingerprints[name] = schema_fingerprint(raw)
            self._writers[name] = {self._fingerprints[name]: None}  # None: same as reader
            for old in self._history(filename) + list((extra_writer_schemas or {}).get(name, [])):
                self._writers[name][schema_fingerprint(old)] = fastavro.parse_schema(
                    old, _write_hint=False)

    @staticmethod
    def _history(filename: str) -> list[dict]:
        folder = resources.files("workload") / "schemas" / "history"
        stem = filename.removesuffix(".avsc")
        if not folder.is_dir():
            return []
        return [json.loads(f.read_text()) for f in sorted(folder.iterdir(), key=lambda p: p.name)
                if f.name.startswith(stem + ".") and f.name.endswith(".avsc")]

    def schema(self, record_name: str):
        try:
            return self._schemas[record_name]
        except KeyError:
            raise CodecError(f"unknown record type {record_name!r}; "
                             f"expected one of {RECORD_NAMES}") from None

    def fingerprint(self, record_name: str) -> bytes:
        self.schema(record_name)
        return self._fingerprints[record_name]

    def encode(self, record_name: str, record: dict) -> bytes:
        schema = self.schema(record_name)
        if not isinstance(record, dict):
            raise CodecError(f"{record_name} must be a dict, got {type(record).__name__}")
        buffer = io.BytesIO()
        buffer.write(MARKER + self._fingerprints[record_name])
        try:
            fastavro.schemaless_writer(buffer, schema, record, strict_allow_default=True)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise CodecError(f"cannot encode {record_name}: {_field_problem(schema, record)}"
                             f" ({type(exc).__name__}: {exc})") from None
        return buffer.getvalue()

    def decode(self, record_name: str, data: bytes) -> dict:
        schema = self.schema(record_name)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise CodecError(f"{record_name}: expected bytes, got {type(data).__name__}")
        data = bytes(data)
        if len(data) < HEADER_SIZE or data[:2] != MARKER:
            head = data[:2].hex() or "nothing"
            raise CodecError(f"not an Avro single-object message ({len(data)} bytes): first "
                             f"bytes 0x{head} are not the C3 01 marker" if data[:2] != MARKER
                             else f"{record_name}: message of {len(data)} bytes is shorter than "
                                  f"the {HEADER_SIZE}-byte header")
        writer = self._writers[record_name]
        fp = data[2:HEADER_SIZE]
        if fp in writer:
            writer_schema = writer[fp] or schema
        else:
            self.unknown_writer_reads += 1
            writer_schema = schema
        body = io.BytesIO(data[HEADER_SIZE:])
        try:
            record = fastavro.schemaless_reader(body, writer_schema, schema)
        except (EOFError, StopIteration, IndexError, ValueError, UnicodeDecodeError,
                OverflowError, MemoryError, TypeError) as exc:
            known = "known" if fp in writer else f"unknown (0x{fp.hex()})"
            raise CodecError(f"{record_name} body of {len(data) - HEADER_SIZE} bytes does not "
                             f"decode with the {known} writer schema: "
                             f"{type(exc).__name__}: {exc}") from None
        if fp in writer and body.tell() != len(data) - HEADER_SIZE:
            raise CodecError(f"{record_name}: {len(data) - HEADER_SIZE - body.tell()} trailing "
                             "bytes after the record body")
        return record


def _field_problem(schema, record: dict) -> str:
    """Name the first missing or wrongly typed field, for a useful error message."""
    for field in schema["fields"]:
        name = field["name"]
        if name not in record and "default" not in field:
            return f"required field {name!r} is missing"
        if name in record and not fastavro.validation.validate(
                record[name], field["type"], raise_errors=False):
            return f"field {name!r} has an invalid value {record[name]!r:.80}"
    return "record does not match the schema"


_DEFAULT: Codec | None = None


def default_codec() -> Codec:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Codec()
    return _DEFAULT


def encode(record_name: str, record: dict) -> bytes:
    """Encode with the shipped schemas (see :class:`Codec`)."""
    return default_codec().encode(record_name, record)


def decode(record_name: str, data: bytes) -> dict:
    """Decode with the shipped schemas (see :class:`Codec`)."""
    return default_codec().decode(record_name, data)
