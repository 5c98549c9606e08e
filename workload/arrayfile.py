"""Array files: named float32 arrays plus JSON metadata, never pickle, refused when damaged.

The container every learned model of streamplace ships in (LDWP networks:
:mod:`placement.ldwp.modelfile`; NCF completion models: :mod:`interference.ncf.modelfile`).
Each of those picks its own magic bytes and format version and checks what the arrays mean;
everything that does not depend on the model lives here.

Layout: ``magic`` (8 bytes), the header's length (8-byte little-endian unsigned), a UTF-8 JSON
header ``{"arrays": [...], "body_bytes": n, "format_version": v, "metadata": {...}}`` (keys
sorted), the raw little-endian float32 arrays back to back (the body), then a 32-byte SHA-256
of everything before it. Each array table entry is ``{"bytes", "name", "offset", "shape"}``.

Reading checks, before a single value is used:

- the size (at most ``max_file_bytes``: a hostile download must not take the reader's memory),
  the magic, the header length (at most ``max_header_bytes``, inside the file);
- the digest over magic, header length, header *and* body: an edited setting or a shifted
  offset fails it just like a flipped weight byte;
- the header: JSON, an object with exactly the four keys, the expected ``format_version``,
  ``metadata`` an object, ``body_bytes`` the body's true length, and (unless the caller opts
  out) no non-finite number anywhere in it (``NaN``, ``Infinity``, ``1e999``);
- the array table: array names unique strings of 1 to :data:`MAX_NAME_CHARS` characters, each
  shape a list of 1 to ``max_dims`` positive ints each at most ``max_dimension``, the arrays
  back to back from byte 0 (no gap, no overlap) covering the body exactly;
- every value finite (a NaN weight routes everything to the first node, or predicts NaN).

Writing does not judge the values (it writes a NaN array, so that tests and tools can make the
files a reader must refuse); it refuses only what cannot be written as an array file at all.
The digest is not a signature: whoever can write the file can write a matching digest.

Example::

    >>> import numpy as np
    >>> data = write_arrays(None, [("w", np.ones((2, 3)))], {"kind": "demo"}, b"SPDEMO01")
    >>> arrays, metadata = read_arrays(data, "demo file", b"SPDEMO01")
    >>> arrays[0][0], arrays[0][1].shape, metadata
    ('w', (2, 3), {'kind': 'demo'})
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

__all__ = ["ArrayFileError", "write_arrays", "read_arrays", "load_arrays", "read_bounded",
           "check_size", "file_bytes", "MAGIC_BYTES", "PREFIX_BYTES", "DIGEST_BYTES",
           "MAX_FILE_BYTES", "MAX_HEADER_BYTES", "MAX_DIMENSION", "MAX_DIMS", "MAX_ARRAYS", "MAX_NAME_CHARS"]

#: every magic is this long (the header length follows it)
MAGIC_BYTES = 8
#: magic + the 8-byte header length
PREFIX_BYTES = MAGIC_BYTES + 8
#: a SHA-256 digest closes the file
DIGEST_BYTES = 32
#: default file bound (the models are KB to a few MB; the bound keeps a hostile file small)
MAX_FILE_BYTES = 64 << 20
#: default header bound (metadata is KB; an NCF header holds its observed matrix)
MAX_HEADER_BYTES = 1 << 20
#: default bound on each dimension of an array (layer widths and matrix sides are hundreds)
MAX_DIMENSION = 1 << 16
#: most dimensions an array may have (weights are 2-D, biases 1-D; 4 leaves room for kernels)
MAX_DIMS = 4
#: most arrays in one file (a network has tens of tensors)
MAX_ARRAYS = 4096
#: longest array name (state_dict keys such as ``prior.network.mlp.0.weight``)
MAX_NAME_CHARS = 256
#: the only array type: little-endian float32 (what the networks compute in)
_DTYPE = "<f4"
_HEADER_KEYS = {"arrays", "body_bytes", "format_version", "metadata"}
_ENTRY_KEYS = {"bytes", "name", "offset", "shape"}


class ArrayFileError(ValueError):
    """An array file that cannot be trusted or read, with the reason."""


def check_size(size: int, name: str, kind: str = "array file",
               max_file_bytes: int = MAX_FILE_BYTES,
               error: type[ArrayFileError] = ArrayFileError) -> None:
    """Raise ``error`` when ``size`` bytes is over the bound for a ``kind``.

    Example::

        >>> check_size(10, "m.bin", max_file_bytes=100)   # fine: returns None
    """
    if size > max_file_bytes:
        raise error(f"{name} is {size:,} bytes, over the {max_file_bytes:,}-byte limit for a "
                    f"{kind}")


def file_bytes(data, name: str, error: type[ArrayFileError] = ArrayFileError) -> bytes:
    """``data`` as ``bytes`` (a bytearray or memoryview copied); ``error`` for anything else
    (None, a str: a caller's mistake, told as the file's).

    Example::

        >>> file_bytes(bytearray(b"ab"), "m.bin")
        b'ab'
    """
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise error(f"{name}: expected the file's bytes, got {type(data).__name__}")


def write_arrays(path: str | Path | None, named_arrays: list[tuple[str, np.ndarray]],
                 metadata: dict, magic: bytes, *, format_version: int = 1,
                 error: type[ArrayFileError] = ArrayFileError) -> bytes:
    """The array file's bytes (written to ``path`` unless it is None).

    Arrays are stored as little-endian float32 in the order given. Raises ``error`` for what no
    reader could accept (a duplicate or empty name, a 0-d or empty array, a bad magic); values
    are not judged here (readers refuse non-finite ones).

    Example::

        >>> data = write_arrays(None, [("b", np.zeros(2))], {}, b"SPDEMO01")
        >>> data[:8], len(data) > 32
        (b'SPDEMO01', True)
    """
    _check_magic(magic, error)
    if not isinstance(metadata, dict):
        raise error(f"metadata must be a dict, got {type(metadata).__name__}")
    chunks, entries, offset, seen = [], [], 0, set()
    for name, array in named_arrays:
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS or name in seen:
            raise error(f"array name {name!r} must be a unique string of 1 to "
                        f"{MAX_NAME_CHARS} characters")
        seen.add(name)
        try:
            data = np.ascontiguousarray(array, dtype=_DTYPE)
        except (TypeError, ValueError) as exc:
            raise error(f"array {name} is not numeric: {exc}") from None
        shape = list(np.shape(array))
        if not 1 <= len(shape) <= MAX_DIMS or 0 in shape:
            raise error(f"array {name} has shape {tuple(shape)}: an array file holds arrays "
                        f"of 1 to {MAX_DIMS} non-empty dimensions")
        raw = data.tobytes()
        # key order does not matter (sort_keys); these are the LDWP format 2 keys, byte for byte
        entries.append({"name": name, "shape": shape, "offset": offset, "bytes": len(raw)})
        chunks.append(raw)
        offset += len(raw)
    body = b"".join(chunks)
    header = {"format_version": format_version, "metadata": metadata, "arrays": entries,
              "body_bytes": len(body)}
    try:
        encoded = json.dumps(header, sort_keys=True).encode()
    except (TypeError, ValueError) as exc:
        raise error(f"metadata is not JSON: {exc}") from None
    content = magic + struct.pack("<Q", len(encoded)) + encoded + body
    content += hashlib.sha256(content).digest()
    if path is not None:
        Path(path).write_bytes(content)
    return content


def read_bounded(path: str | Path, kind: str = "array file",
                 max_file_bytes: int = MAX_FILE_BYTES,
                 error: type[ArrayFileError] = ArrayFileError) -> bytes:
    """The bytes of the file at ``path``, refused before reading when over the bound (and
    never more than the bound read, should the file grow meanwhile).

    Example::

        data = read_bounded("model.spm", "model file", 64 << 20)
    """
    path = Path(path)
    try:
        check_size(path.stat().st_size, str(path), kind, max_file_bytes, error)
        with open(path, "rb") as handle:
            data = handle.read(max_file_bytes + 1)
    except OSError as exc:
        raise error(f"cannot read {kind} {path}: {exc}") from None
    check_size(len(data), str(path), kind, max_file_bytes, error)
    return data


def load_arrays(path: str | Path, magic: bytes, **options
                ) -> tuple[list[tuple[str, np.ndarray]], dict]:
    """:func:`read_arrays` of the file at ``path`` (same options), size-checked before reading.

    Example::

        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "demo.bin")
        >>> _ = write_arrays(p, [("w", np.eye(2))], {}, b"SPDEMO01")
        >>> load_arrays(p, b"SPDEMO01")[0][0][1].tolist()
        [[1.0, 0.0], [0.0, 1.0]]
    """
    data = read_bounded(path, options.get("kind", "array file"),
                        options.get("max_file_bytes", MAX_FILE_BYTES),
                        options.get("error", ArrayFileError))
    return read_arrays(data, str(path), magic, **options)


def read_arrays(data: bytes, name: str, magic: bytes, *, kind: str = "array file",
                format_version: int = 1, max_file_bytes: int = MAX_FILE_BYTES,
                max_header_bytes: int = MAX_HEADER_BYTES, max_dimension: int = MAX_DIMENSION,
                max_dims: int = MAX_DIMS, finite_metadata: bool = True,
                check_names: Callable[[list[str]], str | None] | None = None,
                error: type[ArrayFileError] = ArrayFileError
                ) -> tuple[list[tuple[str, np.ndarray]], dict]:
    """``([(name, float32 array), ...], metadata)`` of an array file's bytes, after every
    check of the module docstring; ``error`` (default :class:`ArrayFileError`) otherwise.

    ``name`` names the file in messages, ``kind`` what it should be ("model file").
    ``check_names(names)`` may return a reason to refuse the table's names (checked after the
    names are unique strings, before shapes and offsets: "layer0.weight first"). With
    ``finite_metadata=False`` non-finite numbers in the metadata are left to the caller.

    Example::

        >>> try:
        ...     read_arrays(b"PICKLE!!", "x", b"SPDEMO01")
        ... except ArrayFileError as exc:
        ...     print(exc)
        x is not a streamplace array file (bad magic bytes)
    """
    _check_magic(magic, error)
    data = file_bytes(data, name, error)
    check_size(len(data), name, kind, max_file_bytes, error)
    if data[:MAGIC_BYTES] != magic:
        raise error(f"{name} is not a streamplace {kind} (bad magic bytes)")
    if len(data) < PREFIX_BYTES + DIGEST_BYTES:
        raise error(f"{name} is truncated inside its header")
    (header_len,) = struct.unpack("<Q", data[MAGIC_BYTES:PREFIX_BYTES])
    if header_len > max_header_bytes or PREFIX_BYTES + header_len + DIGEST_BYTES > len(data):
        raise error(f"{name} is truncated or its header length is wrong: header says "
                    f"{header_len} bytes, file has {len(data) - PREFIX_BYTES}")
    content, digest = data[:-DIGEST_BYTES], data[-DIGEST_BYTES:]
    if hashlib.sha256(content).digest() != digest:
        raise error(f"{name} failed its SHA-256 check: the header or the weights were "
                    "modified, or the file is truncated")
    header = _parse_header(content[PREFIX_BYTES:PREFIX_BYTES + header_len], name,
                           finite_metadata, error)
    if header.get("format_version") != format_version:
        raise error(f"{name} has format version {header.get('format_version')}; this "
                    f"streamplace reads version {format_version}")
    if set(header) != _HEADER_KEYS:
        raise error(f"{name}: the header must have exactly the keys {sorted(_HEADER_KEYS)}, "
                    f"it has {sorted(header)}")
    metadata = header["metadata"]
    if not isinstance(metadata, dict):
        raise error(f"{name}: the header's metadata is not an object")
    body = content[PREFIX_BYTES + header_len:]
    body_bytes = header["body_bytes"]
    if not _is_int(body_bytes) or len(body) != body_bytes:
        raise error(f"{name} is truncated or padded: weights are {len(body)} bytes, header "
                    f"says {body_bytes}")
    return _read_table(header["arrays"], body, name, max_dimension, max_dims, check_names,
                       error), metadata


def _check_magic(magic: bytes, error: type[ArrayFileError]) -> None:
    if not isinstance(magic, bytes) or len(magic) != MAGIC_BYTES:
        raise error(f"a magic is {MAGIC_BYTES} bytes, got {magic!r}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_header(raw: bytes, name: str, finite: bool, error: type[ArrayFileError]) -> dict:
    """The JSON header as a dict; non-finite numbers refused when ``finite``."""
    def refuse(token: str):
        raise error(f"{name}: its header holds a non-finite number ({token}): refused")

    def number(token: str) -> float:
        value = float(token)
        if not math.isfinite(value):   # "1e999" parses to infinity
            refuse(token)
        return value

    hooks = {"parse_constant": refuse, "parse_float": number} if finite else {}
    try:
        header = json.loads(raw, **hooks)
    except error:   # refuse() above: already the reason
        raise
    except RecursionError:   # "[[[[..." a megabyte deep
        raise error(f"{name} has a corrupted header: nested too deeply") from None
    except ValueError as exc:
        # JSONDecodeError, UnicodeDecodeError, and the plain ValueError of an integer of more
        # than 4300 digits (Python's int/str conversion limit): all a corrupted header
        raise error(f"{name} has a corrupted header: {str(exc)[:200]}") from None
    if not isinstance(header, dict):
        raise error(f"{name} has format version None; its header is not an object")
    return header


def _read_table(entries, body: bytes, name: str, max_dimension: int, max_dims: int,
                check_names, error: type[ArrayFileError]) -> list[tuple[str, np.ndarray]]:
    """The arrays the table describes, after checking it is a table write_arrays writes."""
    if not isinstance(entries, list) or len(entries) > MAX_ARRAYS:
        raise error(f"{name}: the array table must be a list of at most {MAX_ARRAYS} arrays")
    names: list[str] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or set(entry) != _ENTRY_KEYS:
            raise error(f"{name}: array {i} must be an object with exactly the keys "
                        f"{sorted(_ENTRY_KEYS)}")
        array_name = entry["name"]
        if not isinstance(array_name, str) or not 0 < len(array_name) <= MAX_NAME_CHARS:
            raise error(f"{name}: array {i} has an invalid name {array_name!r} (a string of 1 "
                        f"to {MAX_NAME_CHARS} characters)")
        if array_name in names:
            raise error(f"{name}: array name {array_name!r} appears twice in the table")
        names.append(array_name)
    if check_names is not None and (reason := check_names(names)):
        raise error(f"{name}: {reason}")
    arrays, offset = [], 0
    for array_name, entry in zip(names, entries):
        shape = entry["shape"]
        if not isinstance(shape, list) or not 1 <= len(shape) <= max_dims or not all(
                _is_int(d) and 0 < d <= max_dimension for d in shape):
            raise error(f"{name}: array {array_name} has an invalid shape {shape!r}")
        length = 4 * math.prod(shape)   # Python ints: no overflow for hostile shapes
        if entry["offset"] != offset or entry["bytes"] != length:
            raise error(f"{name}: array {array_name} must start at byte {offset} and hold "
                        f"{length} bytes (table says {entry['offset']}, {entry['bytes']})")
        raw = body[offset:offset + length]
        if len(raw) != length:
            raise error(f"{name}: array {array_name} runs past the weights")
        array = np.frombuffer(raw, dtype=_DTYPE).reshape(shape).astype(np.float32)
        if not np.isfinite(array).all():
            raise error(f"{name}: array {array_name} holds non-finite values (NaN or "
                        "infinity): refused")
        arrays.append((array_name, array))
        offset += length
    if offset != len(body):
        raise error(f"{name}: {len(body) - offset} bytes of the weights belong to no array")
    return arrays
