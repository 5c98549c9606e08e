"""The Avro contract's codec: single-object encoded records, read and written with fastavro.

Wire format (Avro specification, "Single object encoding"): the two marker bytes ``C3 01``, the
8-byte little-endian CRC-64-AVRO fingerprint of the writer schema's Parsing Canonical Form, then
the Avro binary body. Java's ``BinaryMessageEncoder`` / ``BinaryMessageDecoder`` write and read
the same bytes, so JVM code needs no schema registry either.

Records (``workload/schemas/*.avsc``, namespace ``io.streamplace``): ``TaskEvent``,
``TaskResult``, ``NodeFeedback``, ``DeadLetter``.

Evolution (docs/avro.md): fields are only ever appended at the END of a record, each with a
default. A reader therefore knows these writer schemas for each record type, all resolved to its
current schema by fastavro's schema resolution:

* its current schema;
* every prefix of it that drops trailing fields with defaults (what an older writer that
  followed the rule used), so an old writer's missing fields come back as their defaults;
* every released version kept under ``workload/schemas/history/`` (``task_event.v1.avsc`` ...)
  and its own defaulted prefixes, and any ``extra_writer_schemas`` given to :class:`Codec`.

A fingerprint it does not know (a NEWER writer) is decoded with the reader's own current schema:
safe under the append-only rule, because the known fields come first and the appended ones are
trailing bytes left unread. Such reads are counted in :attr:`Codec.unknown_writer_reads` (and
per fingerprint in :attr:`Codec.unknown_writer_fingerprints`), with one log line per new
fingerprint rather than one per record.

Every problem with the bytes (empty, wrong marker, truncated, trailing junk, a message of another
record type, a body that does not decode, a message over the size limit) raises
:class:`CodecError`, never a bare ``IndexError``/``EOFError``/``StopIteration``.

Size: :meth:`Codec.decode` refuses a message longer than ``max_message_bytes``
(:data:`DEFAULT_MAX_MESSAGE_BYTES`) before reading it, which also bounds the one field that
carries bulk data, TaskEvent's ``payload`` (an encoded clip; ``workload.apps.images`` bounds what
is inside it). Encoding is not bounded here: the Kafka producer refuses an over-sized message
itself, and a DeadLetter must be able to carry whatever bytes were refused.

Why fastavro rather than the ``avro`` package: its C-accelerated schemaless reader and writer
are several times faster, and decoding sits on the per-record path (docs/avro.md has numbers).

Example::

    >>> from workload.codec import encode, decode
    >>> data = encode("TaskEvent", {"task_id": "t1", "app_id": "face_recognition",
    ...                             "input_size": 4096, "submitted_at_ms": 0})
    >>> data[:2]
    b'\\xc3\\x01'
    >>> event = decode("TaskEvent", data)
    >>> event["input_size"], event["source"], event["expected_work_ms"]
    (4096, '', None)
"""

from __future__ import annotations

import io
import json
import logging
from collections import Counter
from importlib import resources

import fastavro
from fastavro.schema import fingerprint as _fingerprint_hex
from fastavro.schema import to_parsing_canonical_form
from fastavro.validation import ValidationError, validate

__all__ = ["CodecError", "Codec", "RECORD_NAMES", "MARKER", "HEADER_SIZE",
           "DEFAULT_MAX_MESSAGE_BYTES", "encode", "decode", "default_codec", "load_schema",
           "schema_fingerprint"]

log = logging.getLogger(__name__)

MARKER = b"\xc3\x01"
"""The two bytes every single-object encoded message starts with."""
HEADER_SIZE = 10
"""Marker (2 bytes) + CRC-64-AVRO fingerprint of the writer schema (8 bytes, little-endian)."""
DEFAULT_MAX_MESSAGE_BYTES = 8 << 20
#: Distinct unknown writer fingerprints counted one by one; the rest under OTHER_FINGERPRINTS
MAX_UNKNOWN_FINGERPRINTS = 256
OTHER_FINGERPRINTS = "others"
"""The longest message :meth:`Codec.decode` reads (8 MiB): eight times Kafka's default
``message.max.bytes`` (1 MiB), so nothing a default topic delivers is refused, while a corrupt or
hostile message cannot make a reader copy and parse hundreds of megabytes. A TaskEvent with a
payload (a real clip) is 5-70 KB at the replay's sizes, about 240 KB at the largest synthetic size
(``workload.apps.images``)."""
SCHEMA_FILES = {"TaskEvent": "task_event.avsc", "TaskResult": "task_result.avsc",
                "NodeFeedback": "node_feedback.avsc", "DeadLetter": "dead_letter.avsc"}
RECORD_NAMES = tuple(SCHEMA_FILES)
_NAMESPACE_PREFIX = "io.streamplace."
# What a malformed body can make fastavro raise (EOFError: truncated; IndexError: enum or union
# index out of range; UnicodeDecodeError (a ValueError): broken UTF-8; OverflowError/MemoryError:
# absurd lengths or counts).
_READ_ERRORS = (EOFError, StopIteration, IndexError, KeyError, ValueError, TypeError,
                OverflowError, MemoryError)
_WRITE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OverflowError)


class CodecError(ValueError):
    """Bytes that are not a valid record of the expected type, or a record that cannot be
    encoded; the message says what is wrong and, for records, which field."""


def _schemas_dir():
    return resources.files("workload") / "schemas"


def load_schema(record_name: str) -> dict:
    """The shipped current schema of ``record_name`` as plain JSON (a dict).

    >>> load_schema("TaskEvent")["namespace"]
    'io.streamplace'
    """
    try:
        filename = SCHEMA_FILES[record_name]
    except KeyError:
        raise CodecError(f"unknown record type {record_name!r}; expected one of "
                         f"{', '.join(RECORD_NAMES)}") from None
    return json.loads((_schemas_dir() / filename).read_text(encoding="utf-8"))


def schema_fingerprint(schema) -> bytes:
    """CRC-64-AVRO of the schema's Parsing Canonical Form, as the 8 little-endian bytes that
    follow the marker on the wire (Java: ``SchemaNormalization.parsingFingerprint64``, written
    little-endian). ``schema`` is the schema's JSON as a dict, list or str.

    >>> schema_fingerprint("int").hex()   # the Avro spec's 0x7275d51a3f395c8f, little-endian
    '8f5c393f1ad57572'
    """
    # fastavro's fingerprint() returns the CRC-64-AVRO bytes in wire (little-endian) order.
    return bytes.fromhex(_fingerprint_hex(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


def _fp_text(fp: bytes) -> str:
    """A fingerprint as the conventional 64-bit number (what Java prints), e.g. 0x7275d51a..."""
    return f"0x{int.from_bytes(fp, 'little'):016x}"


def _history_schemas(record_name: str) -> list[dict]:
    """Released earlier versions: ``schemas/history/<stem>.<version>.avsc``."""
    folder = _schemas_dir() / "history"
    if not folder.is_dir():
        return []
    stem = SCHEMA_FILES[record_name].removesuffix(".avsc")
    return [json.loads(f.read_text(encoding="utf-8"))
            for f in sorted(folder.iterdir(), key=lambda p: p.name)
            if f.name.startswith(stem + ".") and f.name.endswith(".avsc")]


def _defaulted_prefixes(schema: dict) -> list[dict]:
    """The schema without its last 1, 2, ... fields, for as long as the dropped ones all have
    defaults: exactly what an older writer that followed the append-only rule used."""
    fields = schema["fields"]
    prefixes = []
    k = len(fields)
    while k > 0 and "default" in fields[k - 1]:
        k -= 1
        prefixes.append({**schema, "fields": fields[:k]})
    return prefixes


class Codec:
    """Encoder/decoder for the four streamplace records; schemas are parsed once, here.

    ``reader_schemas`` replaces the shipped current schema of a record type (tests use it to
    play an older or newer writer); ``extra_writer_schemas`` adds writer schemas this reader
    should resolve, next to the shipped ``schemas/history/`` versions; ``max_message_bytes``
    bounds what :meth:`decode` reads (:data:`DEFAULT_MAX_MESSAGE_BYTES`).

    >>> codec = Codec()
    >>> data = codec.encode("DeadLetter", {"source_topic": "tasks", "partition": 0, "offset": 7,
    ...                                    "reason": "bad marker", "raw": b"{}",
    ...                                    "failed_at_ms": 1, "stage": "decode"})
    >>> codec.decode("DeadLetter", data)["raw"]
    b'{}'
    >>> codec.unknown_writer_reads
    0
    """

    def __init__(self, reader_schemas: dict[str, dict] | None = None,
                 extra_writer_schemas: dict[str, list[dict]] | None = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES):
        if max_message_bytes < HEADER_SIZE:
            raise ValueError(f"max_message_bytes must be at least the {HEADER_SIZE}-byte "
                             f"header, got {max_message_bytes}")
        self.max_message_bytes = int(max_message_bytes)
        """Longer messages are refused by :meth:`decode` before they are read."""
        self.unknown_writer_reads = 0
        """Messages decoded with the current schema because their writer was unknown."""
        self.unknown_writer_fingerprints: Counter[tuple[str, str]] = Counter()
        """(record name, fingerprint) -> how many such messages were decoded."""
        self._schemas: dict[str, dict] = {}
        self._int_schemas: dict[int, bool] = {}  # id(parsed schema) -> has an Avro int
        self._headers: dict[str, bytes] = {}
        # record name -> writer fingerprint -> (writer schema, reader schema or None when same)
        self._readers: dict[str, dict[bytes, tuple[dict, dict | None]]] = {}
        self._owner: dict[bytes, str] = {}  # any known fingerprint -> its record type
        for name in RECORD_NAMES:
            raw = (reader_schemas or {}).get(name) or load_schema(name)
            if raw.get("name") != name:
                raise CodecError(f"the schema given for {name} is named {raw.get('name')!r}")
            parsed = fastavro.parse_schema(raw)  # keeps fastavro's "parsed" hint: no re-parse
            current = schema_fingerprint(raw)
            self._schemas[name] = parsed
            self._headers[name] = MARKER + current
            readers = {current: (parsed, None)}
            # a released version's own defaulted prefixes are its still older writers
            history = [w for h in _history_schemas(name) for w in [h, *_defaulted_prefixes(h)]]
            writers = (_defaulted_prefixes(raw) + history
                       + list((extra_writer_schemas or {}).get(name, ())))
            for writer in writers:
                fp = schema_fingerprint(writer)
                if fp not in readers:
                    readers[fp] = (fastavro.parse_schema(writer), parsed)
            self._readers[name] = readers
            for fp in readers:
                self._owner.setdefault(fp, name)

    def _check_name(self, record_name: str) -> dict:
        try:
            return self._schemas[record_name]
        except KeyError:
            raise CodecError(f"unknown record type {record_name!r}; expected one of "
                             f"{', '.join(RECORD_NAMES)}") from None

    def schema(self, record_name: str) -> dict:
        """The parsed current (reader and writer) schema of ``record_name``."""
        return self._check_name(record_name)

    def fingerprint(self, record_name: str) -> bytes:
        """The 8 wire bytes identifying this codec's current schema of ``record_name``."""
        self._check_name(record_name)
        return self._headers[record_name][2:]

    def known_fingerprints(self, record_name: str) -> frozenset[bytes]:
        """Every writer fingerprint this codec resolves for ``record_name``."""
        self._check_name(record_name)
        return frozenset(self._readers[record_name])

    def encode(self, record_name: str, record: dict) -> bytes:
        """``record`` (a dict; fields with defaults may be left out) as a single-object
        encoded message. Raises :class:`CodecError` naming a missing, unknown or mistyped
        field."""
        schema = self._check_name(record_name)
        if not isinstance(record, dict):
            raise CodecError(f"cannot encode {record_name}: expected a dict, got "
                             f"{type(record).__name__}")
        # fastavro's writer silently truncates 1.5 to a long and writes ints beyond 32 bits
        # into an Avro int (which Java then rejects): validate first (about 2 us).
        if not validate(record, schema, raise_errors=False):
            raise CodecError(f"cannot encode {record_name}: {_explain(schema, record)}")
        buffer = io.BytesIO()
        buffer.write(self._headers[record_name])
        try:
            fastavro.schemaless_writer(buffer, schema, record, strict_allow_default=True)
        except _WRITE_ERRORS as exc:  # e.g. a field the schema does not have
            raise CodecError(f"cannot encode {record_name}: {exc}") from None
        return buffer.getvalue()

    def decode(self, record_name: str, data: bytes) -> dict:
        """The record in ``data`` (bytes, bytearray or memoryview) as a dict, in the current
        schema (missing fields filled with defaults). Raises :class:`CodecError`, also for a
        message longer than ``max_message_bytes``."""
        readers = self._readers.get(record_name)
        if readers is None:
            self._check_name(record_name)
        if type(data) is not bytes:
            if not isinstance(data, (bytearray, memoryview)):
                raise CodecError(f"cannot decode {record_name}: expected bytes, got "
                                 f"{type(data).__name__}")
            size = data.nbytes if isinstance(data, memoryview) else len(data)
            if size > self.max_message_bytes:  # before copying it
                raise self._too_long(record_name, size)
            data = bytes(data)
        elif len(data) > self.max_message_bytes:
            raise self._too_long(record_name, len(data))
        if data[:2] != MARKER:
            head = f"0x{data[:2].hex()}" if data else "(empty message)"
            raise CodecError(f"not an Avro single-object message: first bytes {head} are not "
                             f"the C3 01 marker (expected a {record_name})")
        if len(data) < HEADER_SIZE:
            raise CodecError(f"truncated {record_name} message: {len(data)} bytes, shorter than "
                             f"the {HEADER_SIZE}-byte header")
        fp = data[2:HEADER_SIZE]
        entry = readers.get(fp)
        known = entry is not None
        if not known:
            other = self._owner.get(fp)
            if other is not None:
                raise CodecError(f"message is a {other}, not a {record_name} (writer schema "
                                 f"fingerprint {_fp_text(fp)})")
            entry = (self._schemas[record_name], None)
        body = io.BytesIO(data)
        body.seek(HEADER_SIZE)
        try:
            record = fastavro.schemaless_reader(body, entry[0], entry[1])
        except _READ_ERRORS as exc:
            size = len(data) - HEADER_SIZE
            writer = ("its writer schema" if known else
                      f"the current schema (unknown writer schema fingerprint {_fp_text(fp)})")
            if isinstance(exc, EOFError):
                raise CodecError(f"truncated {record_name} body after {size} bytes: it ends "
                                 f"before the record does, read with {writer}") from None
            raise CodecError(f"{record_name} body of {size} bytes does not decode with "
                             f"{writer}: {type(exc).__name__}: {exc}") from None
        if known:
            if body.tell() != len(data):
                raise CodecError(f"{record_name} message has {len(data) - body.tell()} trailing "
                                 f"bytes after the record body")
        else:
            self._count_unknown(record_name, fp)
        # fastavro reads an Avro int from any varint (2**40 for a partition): what its own
        # encode would refuse, and Java's decoder rejects, is refused here too. Only schemas
        # with int fields pay for the check (TaskEvent and TaskResult have none).
        if _has_int(entry[0], self._int_schemas) and not validate(record, entry[0], raise_errors=False):
            raise CodecError(f"{record_name} body holds a value out of its field's range: "
                             f"{_explain(entry[0], record)}")
        return record

    def _too_long(self, record_name: str, size: int) -> CodecError:
        return CodecError(f"{record_name} message of {size:,} bytes is over the "
                          f"{self.max_message_bytes:,}-byte limit (Codec max_message_bytes); "
                          "not read")

    def _count_unknown(self, record_name: str, fp: bytes) -> None:
        key = (record_name, _fp_text(fp))
        counts = self.unknown_writer_fingerprints
        if key not in counts:
            if len(counts) >= MAX_UNKNOWN_FINGERPRINTS:
                # hostile or broken writers can send a new fingerprint with every message:
                # past the bound they are counted together (and logged once), so neither the
                # counter nor the log grows with them
                key = (record_name, OTHER_FINGERPRINTS)
                if key in counts:
                    counts[key] += 1
                    self.unknown_writer_reads += 1
                    return
            log.warning("%s written with unknown schema fingerprint %s: read with the current "
                        "schema, newer trailing fields ignored (counted in "
                        "Codec.unknown_writer_reads, logged once)", record_name, key[1])
        counts[key] += 1
        self.unknown_writer_reads += 1


def _has_int(schema, cache: dict) -> bool:
    """Whether a parsed schema has an Avro int anywhere; ``cache`` (the codec's own, so a
    schema object outlives its entry) is keyed by the schema object's id."""
    key = id(schema)
    known = cache.get(key)
    if known is None:
        known = cache[key] = '"int"' in json.dumps(schema, default=str)
    return known


def _explain(schema: dict, record: dict) -> str:
    """Name the missing or mistyped fields, for a useful error message."""
    missing = [f["name"] for f in schema["fields"] if f["name"] not in record
               and "default" not in f]
    if missing:
        return "required field " + ", ".join(repr(m) for m in missing) + " is missing"
    try:
        validate(record, schema, raise_errors=True)
    except ValidationError as exc:
        problems: dict[str, tuple[str, list[str]]] = {}  # field -> (value shown, expected types)
        for error in getattr(exc, "errors", ()):
            field, shown, expected = _describe(error)
            problems.setdefault(field, (shown, []))[1].append(expected)
        if problems:
            return "; ".join(f"field {field!r} is {shown}, expected {' or '.join(expected)}"
                             for field, (shown, expected) in problems.items())
        return str(exc)
    return "record does not match the schema"


def _describe(error) -> tuple[str, str, str]:
    """A fastavro ValidationErrorData as (field, value shown, expected type)."""
    field = str(getattr(error, "field", "?")).replace(_NAMESPACE_PREFIX, "")
    expected = getattr(error, "schema", "?")
    if isinstance(expected, dict):
        expected = (f"one of {expected['symbols']}" if expected.get("type") == "enum"
                    else expected.get("name") or expected.get("type"))
    expected = str(expected).replace(_NAMESPACE_PREFIX, "")
    datum = getattr(error, "datum", None)
    shown = repr(datum)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return field, f"{shown} ({type(datum).__name__})", expected


_DEFAULT: Codec | None = None


def default_codec() -> Codec:
    """The process-wide :class:`Codec` on the shipped schemas (built on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Codec()
    return _DEFAULT


def encode(record_name: str, record: dict) -> bytes:
    """:meth:`Codec.encode` with the shipped schemas."""
    return default_codec().encode(record_name, record)


def decode(record_name: str, data: bytes) -> dict:
    """:meth:`Codec.decode` with the shipped schemas."""
    return default_codec().decode(record_name, data)
