"""The shared array container (workload.arrayfile): a round trip, and every damaged or forged
file refused with its reason; the LDWP model files written on top of it stay byte-identical."""

from __future__ import annotations

import doctest
import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest

import workload.arrayfile as arrayfile_module
from workload.arrayfile import (DIGEST_BYTES, MAX_DIMENSION, ArrayFileError, load_arrays,
                                read_arrays, write_arrays)

MAGIC = b"SPTEST01"
SHIPPED_LDWP = Path(__file__).resolve().parents[2] / "placement" / "models" / \
    "ldwp_residual_paper.spm"


def _arrays() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    return [("embedding", rng.normal(size=(5, 3))), ("bias", rng.normal(size=4)),
            ("kernel", rng.normal(size=(2, 1, 3, 2)))]


def _good() -> bytes:
    return write_arrays(None, _arrays(), {"kind": "test", "seeds": [1, 2]}, MAGIC)


def _split(data: bytes) -> tuple[dict, bytes]:
    (length,) = struct.unpack("<Q", data[8:16])
    return json.loads(data[16:16 + length]), data[16 + length:-DIGEST_BYTES]


def _forge(data: bytes, edit_header=None, body: bytes | None = None, raw_header=None) -> bytes:
    """What a forger who also recomputes the digest writes: only the other checks catch it."""
    header, old_body = _split(data)
    if edit_header:
        edit_header(header)
    encoded = raw_header if raw_header is not None else json.dumps(header,
                                                                   sort_keys=True).encode()
    content = MAGIC + struct.pack("<Q", len(encoded)) + encoded + (
        old_body if body is None else body)
    return content + hashlib.sha256(content).digest()


def test_arrays_and_metadata_round_trip_through_bytes_and_files(tmp_path):
    path = tmp_path / "a.bin"
    data = write_arrays(path, _arrays(), {"kind": "test", "seeds": [1, 2]}, MAGIC)
    assert path.read_bytes() == data
    for arrays, metadata in (read_arrays(data, "bytes", MAGIC), load_arrays(path, MAGIC)):
        assert metadata == {"kind": "test", "seeds": [1, 2]}
        assert [n for n, _ in arrays] == ["embedding", "bias", "kernel"]
        for (_, got), (_, want) in zip(arrays, _arrays()):
            assert got.dtype == np.float32 and got.flags.writeable
            np.testing.assert_array_equal(got, want.astype(np.float32))
    # deterministic bytes: the same inputs give the same file (the digest never varies)
    assert write_arrays(None, _arrays(), {"seeds": [1, 2], "kind": "test"}, MAGIC) == data


@pytest.mark.parametrize("damage,message", [
    (lambda d: d[:20] + bytes([d[20] ^ 1]) + d[21:], "SHA-256"),        # a header byte
    (lambda d: d[:-40] + bytes([d[-40] ^ 1]) + d[-39:], "SHA-256"),     # a body byte
    (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "SHA-256"),                 # the digest
    (lambda d: d[:-1], "SHA-256"),                                      # truncated at the end
    (lambda d: d + b"\0", "SHA-256"),                                   # padded
    (lambda d: d[:30], "truncated"),                                    # inside the header
    (lambda d: b"", "magic"),
    (lambda d: b"SPMODEL2" + d[8:], "bad magic"),                       # another file kind
    (lambda d: d[:8] + struct.pack("<Q", 1 << 40) + d[16:], "header length"),
    (lambda d: d[:8] + struct.pack("<Q", len(d)) + d[16:], "header length"),
])
def test_damaged_bytes_are_refused_with_a_reason(damage, message):
    with pytest.raises(ArrayFileError, match=message):
        read_arrays(damage(_good()), "damaged", MAGIC)


def _set_entry(index, key, value):
    return lambda h: h["arrays"][index].__setitem__(key, value)


@pytest.mark.parametrize("edit,message", [
    (_set_entry(1, "offset", 60 + 4), "must start at byte 60"),        # a gap
    (_set_entry(1, "offset", 0), "must start at byte 60"),             # an overlap
    (_set_entry(0, "bytes", 56), "must start at byte 0 and hold 60"),  # a lie about a length
    (_set_entry(0, "shape", [0, 3]), "invalid shape"),
    (_set_entry(0, "shape", [5, -3]), "invalid shape"),
    (_set_entry(0, "shape", [True, 3]), "invalid shape"),
    (_set_entry(0, "shape", [5.0, 3]), "invalid shape"),
    (_set_entry(0, "shape", []), "invalid shape"),
    (_set_entry(0, "shape", [1, 1, 1, 1, 15]), "invalid shape"),
    (_set_entry(0, "shape", [MAX_DIMENSION + 1, 3]), "invalid shape"),
    (_set_entry(0, "shape", [2 ** 16] * 4), "must start at byte 0"),   # 2^64 values: no overflow
    (_set_entry(1, "name", "embedding"), "appears twice"),
    (_set_entry(1, "name", ""), "invalid name"),
    (_set_entry(1, "name", 7), "invalid name"),
    (lambda h: h["arrays"][0].__setitem__("dtype", "float64"), "exactly the keys"),
    (lambda h: h.__setitem__("arrays", h["arrays"][:-1]), "belong to no array"),
    (lambda h: h.__setitem__("arrays", {"embedding": 1}), "must be a list"),
    (lambda h: h.__setitem__("format_version", 2), "format version 2"),
    (lambda h: h.__setitem__("metadata", [1]), "metadata is not an object"),
    (lambda h: h.__setitem__("body_bytes", h["body_bytes"] - 4), "truncated or padded"),
    (lambda h: h.__setitem__("body_bytes", True), "truncated or padded"),
    (lambda h: h.__setitem__("compressed", True), "exactly the keys"),
])
def test_forged_tables_and_headers_are_refused_despite_a_valid_digest(edit, message):
    with pytest.raises(ArrayFileError, match=message):
        read_arrays(_forge(_good(), edit), "forged", MAGIC)


@pytest.mark.parametrize("raw,message", [
    (b"[1, 2]", "not an object"),
    (b"{\"format_version\": 1", "corrupted header"),
    (b"\xff\xfe{}", "corrupted header"),
    (b"[" * 100_000 + b"]" * 100_000, "corrupted header|nested"),
])
def test_headers_that_are_not_json_objects_are_refused(raw, message):
    with pytest.raises(ArrayFileError, match=message):
        read_arrays(_forge(_good(), raw_header=raw), "forged", MAGIC)


def test_bytes_past_the_last_array_belong_to_no_array():
    header, body = _split(_good())
    forged = _forge(_good(), lambda h: h.__setitem__("body_bytes", len(body) + 4),
                    body=body + b"\0" * 4)
    with pytest.raises(ArrayFileError, match="4 bytes of the weights belong to no array"):
        read_arrays(forged, "forged", MAGIC)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_arrays_are_written_but_never_read(bad):
    arrays = _arrays()
    arrays[2][1][0, 0, 1, 1] = bad
    data = write_arrays(None, arrays, {}, MAGIC)   # the writer does not judge values
    with pytest.raises(ArrayFileError, match="kernel holds non-finite values"):
        read_arrays(data, "poisoned", MAGIC)


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_in_the_metadata_are_refused_unless_the_caller_opts_out(token):
    raw = _split(_good())[0]
    encoded = json.dumps(raw, sort_keys=True).replace('"seeds": [1, 2]',
                                                      f'"seeds": [1, {token}]').encode()
    forged = _forge(_good(), raw_header=encoded)
    with pytest.raises(ArrayFileError, match="non-finite number"):
        read_arrays(forged, "forged", MAGIC)
    _, metadata = read_arrays(forged, "forged", MAGIC, finite_metadata=False)
    assert not np.isfinite(metadata["seeds"][1])


def test_oversize_files_are_refused_before_they_are_read(tmp_path):
    with pytest.raises(ArrayFileError, match="over the 100-byte limit for a test file"):
        read_arrays(_good(), "big", MAGIC, max_file_bytes=100, kind="test file")
    path = tmp_path / "huge.bin"
    with open(path, "wb") as handle:
        handle.write(MAGIC)
        handle.truncate(2_000_001)   # sparse: no real disk use
    with pytest.raises(ArrayFileError, match="limit"):
        load_arrays(path, MAGIC, max_file_bytes=2_000_000)
    with pytest.raises(ArrayFileError, match="cannot read"):
        load_arrays(tmp_path / "missing.bin", MAGIC)


def test_bounds_and_hooks_are_the_callers():
    with pytest.raises(ArrayFileError, match="header length"):
        read_arrays(_good(), "x", MAGIC, max_header_bytes=10)
    with pytest.raises(ArrayFileError, match="embedding has an invalid shape"):
        read_arrays(_good(), "x", MAGIC, max_dimension=4)
    with pytest.raises(ArrayFileError, match="kernel has an invalid shape"):
        read_arrays(_good(), "x", MAGIC, max_dims=2)
    with pytest.raises(ArrayFileError, match="x: no kernels here"):
        read_arrays(_good(), "x", MAGIC,
                    check_names=lambda names: "no kernels here" if "kernel" in names else None)

    class Mine(ArrayFileError):
        pass

    with pytest.raises(Mine, match="bad magic"):
        read_arrays(b"PICKLE!!" + _good()[8:], "x", MAGIC, error=Mine)


@pytest.mark.parametrize("arrays,metadata,message", [
    ([("a", np.ones(2)), ("a", np.ones(2))], {}, "unique"),
    ([("", np.ones(2))], {}, "unique"),
    ([("a", np.float32(1.0))], {}, "non-empty dimensions"),
    ([("a", np.ones((2, 0)))], {}, "non-empty dimensions"),
    ([("a", np.ones((1,) * 5))], {}, "non-empty dimensions"),
    ([("a", np.array(["x"]))], {}, "not numeric"),
    ([("a", np.ones(2))], {"when": object()}, "not JSON"),
    ([("a", np.ones(2))], [], "must be a dict"),
])
def test_the_writer_refuses_what_no_reader_could_accept(arrays, metadata, message):
    with pytest.raises(ArrayFileError, match=message):
        write_arrays(None, arrays, metadata, MAGIC)
    with pytest.raises(ArrayFileError, match="magic"):
        write_arrays(None, [], {}, b"SHORT")


def test_the_shipped_ldwp_model_is_byte_identical_when_saved_again(tmp_path):
    from placement.ldwp.modelfile import MAGIC as LDWP_MAGIC
    from placement.ldwp.modelfile import ModelFileError, load_model, save_model

    assert issubclass(ModelFileError, ArrayFileError) and issubclass(ModelFileError, ValueError)
    original = SHIPPED_LDWP.read_bytes()
    layers, metadata = load_model(SHIPPED_LDWP)
    again = save_model(tmp_path / "again.spm", layers, metadata).read_bytes()
    assert hashlib.sha256(again).hexdigest() == hashlib.sha256(original).hexdigest()
    assert again == original
    # the generic reader sees the same arrays the LDWP reader pairs into layers
    arrays, generic_metadata = read_arrays(original, "shipped", LDWP_MAGIC, format_version=2)
    assert generic_metadata == metadata and len(arrays) == 2 * len(layers)
    np.testing.assert_array_equal(arrays[-1][1], layers[-1][1])


def test_the_module_examples_run():
    assert doctest.testmod(arrayfile_module, optionflags=doctest.ELLIPSIS).failed == 0
