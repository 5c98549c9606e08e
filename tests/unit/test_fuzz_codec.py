"""Property-based fuzzing of the Avro codec (Hypothesis; bounded and derandomized, so every run
tries the same inputs and a failure reproduces; the whole file takes about 15 s on one core).

- Any record built from the schemas' field types (ints and longs at their bounds, NaN, infinite
  and negative-zero doubles, any Unicode, optional fields left out) round-trips to the byte, and
  the reference implementation (Apache ``avro``) reads the same record from the body.
- Anything else given to ``encode`` (a value of the wrong type or out of range, a lone surrogate,
  a missing or unknown field, not a dict) is refused with :class:`CodecError`, or (a value the
  type accepts, e.g. 3 for a double) encodes a record that decodes and re-encodes to the same
  bytes.
- ``decode`` of arbitrary bytes; of arbitrary bodies behind every known fingerprint, another
  type's and an unknown one; of bodies shaped like the schema with hostile parts (huge varints,
  lying lengths and counts, bad indexes, broken UTF-8); of valid messages mutated (bit flips,
  truncation, appended or deleted bytes, huge varints written in) returns a record of the schema
  or raises :class:`CodecError`: never another exception, never a hang (timeouts).
- ``max_message_bytes`` holds for any input and limit, as bytes, bytearray or memoryview.

An Avro int read from a varint beyond 32 bits is refused (it once was returned as is:
``test_an_int_field_beyond_32_bits_is_refused``).
"""

from __future__ import annotations

import io
import json
import math
import re

import avro.io
import avro.schema
import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from workload.codec import (HEADER_SIZE, MARKER, RECORD_NAMES, Codec, CodecError, default_codec,
                            load_schema, schema_fingerprint)

CODEC = default_codec()
SCHEMAS = {name: load_schema(name) for name in RECORD_NAMES}
INT_RANGE = (-(1 << 31), (1 << 31) - 1)
LONG_RANGE = (-(1 << 63), (1 << 63) - 1)
# Every writer fingerprint the codec resolves, per record type (current, defaulted prefixes,
# schemas/history/), and a fingerprint no record type has.
KNOWN = {name: sorted(CODEC.known_fingerprints(name)) for name in RECORD_NAMES}
UNKNOWN_FP = bytes(8)
assert all(UNKNOWN_FP not in fps for fps in KNOWN.values())


def bounded(max_examples: int):
    """Deterministic, bounded runs: the same examples everywhere, no example database, no
    deadline (a shared CI core must not turn a slow example into a failure)."""
    return settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


# -- values of an Avro schema ---------------------------------------------------------------------
SHORT = 4  # items of arrays and maps, characters of strings: enough to nest, small and fast
TEXT = st.text(max_size=SHORT)  # any Unicode scalar value (no lone surrogates: UTF-8 has none)
DOUBLES = st.floats(allow_nan=True, allow_infinity=True)  # NaN, +-inf, -0.0, subnormals


def _named(schema, names: dict) -> None:
    """Register the named types (records, enums) defined inside ``schema``."""
    if isinstance(schema, dict):
        if schema.get("type") in ("record", "enum", "fixed"):
            names[schema["name"]] = schema
        for field in schema.get("fields", ()):
            _named(field["type"], names)
        for key in ("items", "values"):
            if key in schema:
                _named(schema[key], names)
    elif isinstance(schema, list):
        for branch in schema:
            _named(branch, names)


def values(schema, names: dict, omit_defaults: bool = True) -> st.SearchStrategy:
    """Valid Python values of an Avro ``schema`` (record fields with a default are sometimes
    left out when ``omit_defaults``)."""
    if isinstance(schema, list):
        return st.one_of([values(s, names, omit_defaults) for s in schema])
    if isinstance(schema, str):
        primitive = {"null": st.none(), "boolean": st.booleans(),
                     "int": st.integers(*INT_RANGE), "long": st.integers(*LONG_RANGE),
                     "float": st.floats(width=32), "double": DOUBLES,
                     "string": TEXT, "bytes": st.binary(max_size=3 * SHORT)}
        if schema in primitive:
            return primitive[schema]
        return values(names[schema.split(".")[-1]], names, omit_defaults)
    kind = schema["type"]
    if kind == "record":
        required, optional = {}, {}
        for field in schema["fields"]:
            strategy = values(field["type"], names, omit_defaults)
            (optional if omit_defaults and "default" in field else required)[field["name"]] = \
                strategy
        return st.fixed_dictionaries(required, optional=optional)
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "array":
        return st.lists(values(schema["items"], names, omit_defaults), max_size=SHORT)
    if kind == "map":
        return st.dictionaries(TEXT, values(schema["values"], names, omit_defaults),
                               max_size=SHORT)
    return values(kind, names, omit_defaults)  # {"type": "long"} and the like


NAMES: dict = {}  # the named types of the four schemas (TaskTiming, TaskStatus, ...)
for _schema in SCHEMAS.values():
    _named(_schema, NAMES)
_RECORDS: dict[tuple[str, bool], st.SearchStrategy] = {}


def records(name: str, omit_defaults: bool = True) -> st.SearchStrategy:
    """Valid records of type ``name`` (built once: building strategies is not free)."""
    if (name, omit_defaults) not in _RECORDS:
        _RECORDS[name, omit_defaults] = values(SCHEMAS[name], NAMES, omit_defaults)
    return _RECORDS[name, omit_defaults]


def with_defaults(schema, value, names: dict):
    """``value`` as a reader returns it: record fields left out filled with their defaults."""
    if isinstance(schema, str) and schema in names:
        schema = names[schema]
    if isinstance(schema, dict):
        kind = schema["type"]
        if kind == "record":
            return {f["name"]: with_defaults(f["type"], value[f["name"]], names)
                    if f["name"] in value else f["default"] for f in schema["fields"]}
        if kind == "array":
            return [with_defaults(schema["items"], v, names) for v in value]
        if kind == "map":
            return {k: with_defaults(schema["values"], v, names) for k, v in value.items()}
    return value  # (no union of these schemas has a record branch)


def same(a, b) -> bool:
    """Equal, with NaN equal to NaN and -0.0 told from 0.0, types included (1 is not 1.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def ints_out_of_range(schema, value, names: dict, where: str = "") -> list[str]:
    """Fields of Avro type int whose value is outside 32 bits (see
    test_an_int_field_beyond_32_bits_is_refused)."""
    if isinstance(schema, str):
        if schema == "int" and isinstance(value, int) and not (
                INT_RANGE[0] <= value <= INT_RANGE[1]):
            return [f"{where}={value}"]
        if schema in names:
            return ints_out_of_range(names[schema], value, names, where)
        return []
    if isinstance(schema, list):
        return [p for s in schema for p in ints_out_of_range(s, value, names, where)]
    kind = schema["type"]
    if kind == "record" and isinstance(value, dict):
        return [p for f in schema["fields"] if f["name"] in value
                for p in ints_out_of_range(f["type"], value[f["name"]], names,
                                           f"{where}.{f['name']}")]
    if kind == "array" and isinstance(value, list):
        return [p for i, v in enumerate(value)
                for p in ints_out_of_range(schema["items"], v, names, f"{where}[{i}]")]
    if kind == "map" and isinstance(value, dict):
        return [p for k, v in value.items()
                for p in ints_out_of_range(schema["values"], v, names, f"{where}[{k!r}]")]
    if kind in ("int", "long"):
        return ints_out_of_range(kind, value, names, where)
    return []


def assert_decoded_is_a_record(name: str, data: bytes, record) -> None:
    """What ``decode`` returned is a record of the current schema: a dict that ``encode``
    accepts and that round-trips; read with the current writer schema, re-encoding it is no
    longer than the message (the reader invented nothing)."""
    assert isinstance(record, dict)
    assert list(record) == [f["name"] for f in SCHEMAS[name]["fields"]]
    assert not ints_out_of_range(SCHEMAS[name], record, NAMES), record
    again = CODEC.encode(name, record)   # whatever decode returns, encode accepts
    assert same(CODEC.decode(name, again), record)
    if data[2:HEADER_SIZE] == CODEC.fingerprint(name):
        assert len(again) <= len(data)


def decode_or_codec_error(name: str, data):
    """``decode`` of ``data``: the record, or None when it raised CodecError (any other
    exception fails the test)."""
    try:
        record = CODEC.decode(name, data)
    except CodecError as exc:
        note(f"CodecError: {exc}")
        assert str(exc)  # says what is wrong
        return None
    assert_decoded_is_a_record(name, bytes(data), record)
    return record


# -- round trips ----------------------------------------------------------------------------------
AVRO_READERS = {name: avro.io.DatumReader(avro.schema.parse(json.dumps(schema)))
                for name, schema in SCHEMAS.items()}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", RECORD_NAMES)
@bounded(100)
@given(data=st.data())
def test_any_record_of_the_schema_round_trips(name, data):
    record = data.draw(records(name), label="record")
    message = CODEC.encode(name, record)
    assert message[:HEADER_SIZE] == MARKER + schema_fingerprint(SCHEMAS[name])
    decoded = CODEC.decode(name, message)
    assert same(decoded, with_defaults(SCHEMAS[name], record, NAMES))
    assert CODEC.encode(name, decoded) == message  # canonical: the same bytes again
    # The reference implementation (Apache avro) reads the same record from the whole body.
    body = io.BytesIO(message[HEADER_SIZE:])
    assert same(AVRO_READERS[name].read(avro.io.BinaryDecoder(body)), decoded)
    assert body.tell() == len(message) - HEADER_SIZE


@pytest.mark.parametrize("bound", ["lower", "upper"])
@pytest.mark.parametrize("name", RECORD_NAMES)
def test_every_number_at_its_bounds_round_trips(name, bound):
    """Every int and long field at its lower or upper bound at once, doubles at -inf or NaN,
    strings with NUL and U+10FFFF (Hypothesis reaches these too; this pins them)."""
    record = extreme(SCHEMAS[name], 0 if bound == "lower" else 1)
    assert same(CODEC.decode(name, CODEC.encode(name, record)), record)


def extreme(schema, bound: int):
    """A value of ``schema`` at the ``bound`` (0: lower, 1: upper) end of every type."""
    schema = NAMES.get(schema, schema) if isinstance(schema, str) else schema
    if isinstance(schema, list):  # a union: its non-null branch
        return extreme(next(branch for branch in schema if branch != "null"), bound)
    kind = schema["type"] if isinstance(schema, dict) else schema
    if kind == "record":
        return {f["name"]: extreme(f["type"], bound) for f in schema["fields"]}
    if kind == "array":
        return [extreme(schema["items"], bound)] * 2
    if kind == "map":
        return dict.fromkeys(["", "\U0010ffff"], extreme(schema["values"], bound))
    if kind == "enum":
        return schema["symbols"][-bound]
    return {"int": INT_RANGE[bound], "long": LONG_RANGE[bound],
            "double": (-math.inf, math.nan)[bound], "string": ("", "\x00\U0010ffff")[bound],
            "bytes": (b"", bytes(range(256)))[bound]}[kind]


# -- encode refuses what is not a record ----------------------------------------------------------
ANY_TEXT = st.text(st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=SHORT)
JUNK = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=1 << 62),
              st.integers(max_value=-(1 << 62)), st.floats(), ANY_TEXT, st.binary(max_size=8),
              st.just(bytearray(b"ab")), st.just(memoryview(b"ab")), st.just(object())),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.one_of(ANY_TEXT, st.integers()), inner,
                                            max_size=3)),
    max_leaves=6)


def inner_paths(value, path=()) -> list[tuple]:
    """Paths to every value inside a record (record fields, array items, map values)."""
    paths = []
    items = value.items() if isinstance(value, dict) else (
        enumerate(value) if isinstance(value, list) else ())
    for key, item in items:
        paths += [path + (key,), *inner_paths(item, path + (key,))]
    return paths


def _set(value, path, new):
    if not path:
        return new
    copy_ = list(value) if isinstance(value, list) else dict(value)
    copy_[path[0]] = _set(value[path[0]], path[1:], new)
    return copy_


def _drop(value, path):
    if len(path) == 1:
        copy_ = list(value) if isinstance(value, list) else dict(value)
        del copy_[path[0]]
        return copy_
    copy_ = list(value) if isinstance(value, list) else dict(value)
    copy_[path[0]] = _drop(value[path[0]], path[1:])
    return copy_


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", RECORD_NAMES)
@bounded(100)
@given(data=st.data())
def test_encode_refuses_anything_else_with_codec_error(name, data):
    """A valid record with one value replaced by junk, one field dropped or one added: encode
    raises CodecError, or (junk the type accepts, e.g. 3 for a double) writes a message that
    decodes to a record which encodes to the very same bytes."""
    record = data.draw(records(name), label="record")
    paths = inner_paths(record)
    how = data.draw(st.sampled_from(["replace", "drop", "add", "whole"]), label="how")
    if how == "replace":
        path = data.draw(st.sampled_from(paths), label="path")
        record = _set(record, path, data.draw(JUNK, label="junk"))
    elif how == "drop":
        path = data.draw(st.sampled_from(paths), label="path")
        record = _drop(record, path)
    elif how == "add":
        record = {**record, data.draw(ANY_TEXT, label="field"): data.draw(JUNK, label="junk")}
    else:
        record = data.draw(JUNK, label="junk")
    try:
        message = CODEC.encode(name, record)
    except CodecError as exc:
        assert f"cannot encode {name}" in str(exc)
        return
    decoded = CODEC.decode(name, message)
    assert CODEC.encode(name, decoded) == message


@pytest.mark.parametrize("name", RECORD_NAMES)
@bounded(40)
@given(data=st.data())
def test_a_lone_surrogate_in_any_string_is_refused(name, data):
    """UTF-8 cannot carry U+D800..U+DFFF: any string value or map key holding one is a
    CodecError, never a UnicodeEncodeError."""
    record = data.draw(records(name, omit_defaults=False), label="record")
    strings = [p for p in inner_paths(record)
               if isinstance(_get(record, p), str) and p != ENUM_PATHS.get(name)]
    assume(strings)
    path = data.draw(st.sampled_from(strings), label="path")
    surrogate = data.draw(st.characters(categories=["Cs"]), label="surrogate")
    with pytest.raises(CodecError, match="surrogates not allowed"):
        CODEC.encode(name, _set(record, path, _get(record, path) + surrogate))
    if name == "TaskEvent":  # the one map
        with pytest.raises(CodecError, match="surrogates not allowed"):
            CODEC.encode(name, {**record, "attributes": {f"k{surrogate}": "v"}})


ENUM_PATHS = {"TaskResult": ("status",)}  # strings that are enum symbols (no free text)


def _get(value, path):
    for key in path:
        value = value[key]
    return value


# -- decode: arbitrary and mutated bytes ----------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", RECORD_NAMES)
@bounded(150)
@given(data=st.binary(max_size=64))
def test_decode_of_arbitrary_bytes_is_a_record_or_codec_error(name, data):
    decode_or_codec_error(name, data)


def zigzag(n: int) -> bytes:
    """Avro's zig-zag varint of ``n`` (any size: longer than 10 bytes when beyond 64 bits)."""
    u = (n << 1) if n >= 0 else ((-n) << 1) - 1
    out = bytearray()
    while True:
        byte, u = u & 0x7F, u >> 7
        out.append(byte | (0x80 if u else 0))
        if not u:
            return bytes(out)


HUGE = st.one_of(st.sampled_from([1 << 31, (1 << 31) - 1, -(1 << 31) - 1, 1 << 32, 1 << 62,
                                  (1 << 63) - 1, -(1 << 63), 1 << 63, 1 << 64, 1 << 70,
                                  -(1 << 70), (1 << 31) * 7]),
                 st.integers(min_value=-(1 << 72), max_value=1 << 72))


def headers(name: str) -> st.SearchStrategy:
    """The 10-byte header of a message: a fingerprint this type knows, another type's, an
    unknown one, or a broken marker."""
    others = [fp for other in RECORD_NAMES if other != name for fp in KNOWN[other]]
    return st.one_of(
        st.sampled_from(KNOWN[name]).map(lambda fp: MARKER + fp),
        st.sampled_from(others).map(lambda fp: MARKER + fp),
        st.just(MARKER + UNKNOWN_FP),
        st.binary(min_size=HEADER_SIZE, max_size=HEADER_SIZE))


def _blocks(item: st.SearchStrategy) -> st.SearchStrategy:
    """An Avro array/map body: blocks of items (a count, or a negative count and a byte size),
    then the 0 terminator; sometimes a lying count or no terminator."""
    block = st.lists(item, max_size=3).flatmap(lambda items: mostly(
        st.just(zigzag(len(items)) + b"".join(items)),
        st.just(zigzag(-len(items)) + zigzag(sum(map(len, items))) + b"".join(items)),
        HUGE.map(lambda count: zigzag(count) + b"".join(items))))
    return st.tuples(st.lists(block, max_size=2), mostly(st.just(b"\x00"), st.just(b""))).map(
        lambda parts: b"".join(parts[0]) + parts[1])


def mostly(first: st.SearchStrategy, *others: st.SearchStrategy) -> st.SearchStrategy:
    """``first`` more often than each of ``others`` (four times as often)."""
    return st.one_of(first, first, first, first, *others)


_SHAPED: dict[str, st.SearchStrategy] = {}


def shaped(schema) -> st.SearchStrategy:
    """:func:`shaped_body`, built once per schema (building strategies is not free)."""
    key = json.dumps(schema, sort_keys=True)
    if key not in _SHAPED:
        _SHAPED[key] = shaped_body(schema)
    return _SHAPED[key]


def shaped_body(schema) -> st.SearchStrategy:
    """Bytes shaped like an Avro body of ``schema``, every part valid or hostile: varints small,
    at and beyond the int and long bounds; any 8 bytes for a double; lengths that lie; broken
    UTF-8; union and enum indexes out of range; array and map blocks that lie. Far more of these
    parse deep (and some to the end) than random bytes do."""
    schema = NAMES.get(schema, schema) if isinstance(schema, str) else schema
    number = mostly(st.integers(-3, 3) | st.integers(*INT_RANGE), st.integers(*LONG_RANGE),
                    HUGE).map(zigzag)
    if isinstance(schema, list):
        index = mostly(st.integers(0, len(schema) - 1), st.sampled_from([-1, len(schema)]))
        return index.flatmap(lambda i: st.tuples(
            st.just(zigzag(i)), shaped(schema[i]) if 0 <= i < len(schema) else
            st.binary(max_size=4)).map(b"".join))
    kind = schema["type"] if isinstance(schema, dict) else schema
    if kind == "record":
        return st.tuples(*[shaped(f["type"]) for f in schema["fields"]]).map(b"".join)
    if kind in ("array", "map"):
        item = shaped(schema["items"]) if kind == "array" else st.tuples(
            shaped("string"), shaped(schema["values"])).map(b"".join)
        return _blocks(item)
    if kind == "enum":
        symbols = len(schema["symbols"])
        return mostly(st.integers(0, symbols - 1), st.sampled_from([-1, symbols])).map(zigzag)
    if kind in ("int", "long"):
        return number
    if kind == "double":
        return st.binary(min_size=8, max_size=8)
    if kind == "null":
        return st.just(b"")
    content = mostly(st.text(max_size=SHORT).map(str.encode), st.binary(max_size=SHORT)) \
        if kind == "string" else st.binary(max_size=SHORT)  # (any bytes: UTF-8 or not)
    return mostly(content.map(lambda b: zigzag(len(b)) + b),
                  st.tuples(number, content).map(b"".join))  # a length that may lie


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", RECORD_NAMES)
@bounded(150)
@given(data=st.data())
def test_decode_of_arbitrary_bodies_is_a_record_or_codec_error(name, data):
    """Arbitrary bodies behind every kind of header: each known writer schema (current, older
    prefixes, history), another record type's, an unknown one (read with the current schema)."""
    header = data.draw(headers(name), label="header")
    record = decode_or_codec_error(name, header + data.draw(st.binary(max_size=200), "body"))
    if record is not None:
        assert header[:2] == MARKER and header[2:] not in (
            fp for other in RECORD_NAMES if other != name for fp in KNOWN[other])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", RECORD_NAMES)
@bounded(200)
@given(data=st.data())
def test_decode_of_schema_shaped_bodies_is_a_record_or_codec_error(name, data):
    """Bodies shaped like the schema, each part valid or hostile (:func:`shaped`), behind the
    current fingerprint, or an unknown one with trailing bytes (a newer writer's fields)."""
    current = MARKER + CODEC.fingerprint(name)
    message = data.draw(mostly(
        st.tuples(st.just(current), shaped(SCHEMAS[name])),
        st.tuples(st.just(MARKER + UNKNOWN_FP), shaped(SCHEMAS[name]), st.binary(max_size=8)),
    ).map(b"".join), label="message")
    decode_or_codec_error(name, message)


# (kind, whether the position is in the body, position, argument)
POSITION = (st.booleans(), st.integers(min_value=0))
MUTATION = st.one_of(
    st.tuples(st.just("flip"), *POSITION, st.integers(0, 7)),
    st.tuples(st.just("set"), *POSITION, st.integers(0, 255)),
    st.tuples(st.just("truncate"), *POSITION, st.none()),
    st.tuples(st.just("append"), *POSITION, st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("delete"), *POSITION, st.integers(1, 8)),
    # a huge length, count, index or number written over, or in front of, the bytes there
    st.tuples(st.just("overwrite_varint"), *POSITION, HUGE),
    st.tuples(st.just("insert_varint"), *POSITION, HUGE))


def mutate(message: bytes, mutations) -> bytes:
    data = bytearray(message)
    for kind, in_body, position, arg in mutations:
        if not data:
            break
        at = (HEADER_SIZE + position % (len(data) - HEADER_SIZE)
              if in_body and len(data) > HEADER_SIZE else position % len(data))
        if kind == "flip":
            data[at] ^= 1 << arg
        elif kind == "set":
            data[at] = arg
        elif kind == "truncate":
            del data[at:]
        elif kind == "append":
            data += arg
        elif kind == "delete":
            del data[at:at + arg]
        elif kind == "overwrite_varint":
            varint = zigzag(arg)
            data[at:at + len(varint)] = varint
        elif kind == "insert_varint":
            data[at:at] = zigzag(arg)
    return bytes(data)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", RECORD_NAMES)
@bounded(150)
@given(data=st.data())
def test_decode_of_mutated_messages_is_a_record_or_codec_error(name, data):
    message = CODEC.encode(name, data.draw(records(name), label="record"))
    mutations = data.draw(st.lists(MUTATION, min_size=1, max_size=4), label="mutations")
    mutated = mutate(message, mutations)
    note(f"mutated: {mutated!r}")
    decode_or_codec_error(name, mutated)


@pytest.mark.parametrize("name", RECORD_NAMES)
@bounded(40)
@given(data=st.data())
def test_every_truncation_and_trailing_byte_is_refused(name, data):
    """A valid message cut anywhere, or followed by anything, is a CodecError (a known writer's
    message is read to its last byte)."""
    message = CODEC.encode(name, data.draw(records(name), label="record"))
    cut = data.draw(st.integers(0, len(message) - 1), label="cut")
    with pytest.raises(CodecError):
        CODEC.decode(name, message[:cut])
    extra = data.draw(st.binary(min_size=1, max_size=8), label="extra")
    with pytest.raises(CodecError, match=f"{len(extra)} trailing bytes"):
        CODEC.decode(name, message + extra)


@bounded(150)
@given(record_name=st.one_of(st.sampled_from(RECORD_NAMES), ANY_TEXT),
       data=st.one_of(st.binary(max_size=16), st.none(), ANY_TEXT, st.integers(),
                      st.lists(st.integers(0, 255), max_size=4)))
def test_decode_refuses_unknown_record_types_and_non_bytes(record_name, data):
    if record_name in RECORD_NAMES and isinstance(data, bytes):
        decode_or_codec_error(record_name, data)
        return
    with pytest.raises(CodecError):
        CODEC.decode(record_name, data)


# -- the size limit -------------------------------------------------------------------------------
SIZED = Codec()  # its max_message_bytes is set per example (a public attribute)
FORMS = {"bytes": bytes, "bytearray": bytearray, "memoryview": memoryview,
         "memoryview of ints": lambda b: memoryview(b + bytes(-len(b) % 4)).cast("I")}


@pytest.mark.timeout(60)
@bounded(150)
@given(data=st.data())
def test_the_size_limit_holds_for_any_input(data):
    """A message longer than max_message_bytes is refused as such, whatever it holds (valid,
    followed by junk, random; as bytes, bytearray or memoryview); one within the limit is never
    refused for its size, and a valid one decodes."""
    name = data.draw(st.sampled_from(RECORD_NAMES), label="name")
    valid = CODEC.encode(name, data.draw(records(name), label="record"))
    message = data.draw(st.one_of(
        st.just(valid),
        st.binary(min_size=1, max_size=64).map(lambda junk: valid + junk),
        st.binary(max_size=len(valid) + 64)), label="message")
    form = data.draw(st.sampled_from(sorted(FORMS)), label="form")
    given_ = FORMS[form](message)
    size = given_.nbytes if isinstance(given_, memoryview) else len(given_)
    limit = data.draw(st.one_of(
        st.integers(HEADER_SIZE, max(HEADER_SIZE, size + 2)),
        st.sampled_from([HEADER_SIZE, max(HEADER_SIZE, size - 1), max(HEADER_SIZE, size)])),
        label="limit")
    SIZED.max_message_bytes = limit
    over = re.compile(f"message of {size:,} bytes is over the {limit:,}-byte limit")
    if size > limit:
        with pytest.raises(CodecError, match=over):
            SIZED.decode(name, given_)
        return
    try:
        decoded = SIZED.decode(name, given_)
    except CodecError as exc:
        assert not over.search(str(exc))
        assert message != valid or form == "memoryview of ints"  # its padding broke it
        return
    if message == valid:
        assert same(decoded, CODEC.decode(name, valid))


# -- a gap the fuzzing found, closed ------------------------------------------------------------
def test_an_int_field_beyond_32_bits_is_refused():
    """decode once returned DeadLetter.partition = 2**40 (an int read from a wide varint): a
    record its own encode refuses and Java's BinaryDecoder rejects."""
    record = {"source_topic": "tasks", "partition": 1, "offset": 2, "reason": "r", "raw": b"",
              "failed_at_ms": 3, "stage": "decode"}
    message = CODEC.encode("DeadLetter", record)
    header, body = message[:HEADER_SIZE], message[HEADER_SIZE:]
    topic = zigzag(len(b"tasks")) + b"tasks"
    assert body.startswith(topic + zigzag(1))
    wide = header + topic + zigzag(1 << 40) + body[len(topic) + 1:]
    with pytest.raises(CodecError, match="out of its field's range"):
        CODEC.decode("DeadLetter", wide)
