"""LDWP model files: weights plus metadata, never pickle, refused when truncated or tampered.

Layout (one file, format version 2): ``b"SPMODEL2"`` magic, 8-byte little-endian header length,
a UTF-8 JSON header, the raw little-endian float32 arrays back to back, then a 32-byte SHA-256
of everything before it (magic, header and weights). The header holds the metadata (network
kind, observation layout, node ids, hidden sizes, training-data hash, ...) and, per array, its
name, shape, offset and length.

Loading checks, before a single weight is used:

- the size (at most :data:`MAX_FILE_BYTES`), the magic and the lengths;
- the digest over header *and* weights: an edited setting (``residual``, ``q_prior``) or a
  shifted array offset fails it just like a flipped weight byte;
- the array table: ``layer0.weight, layer0.bias, layer1.weight, ...`` in order, back to back
  from offset 0 with no gap or overlap, each weight 2-D with its bias as long as its rows, and
  each layer reading what the previous one writes;
- every weight finite (a NaN model would route everything to the first node).

What the digest is for: a file damaged on disk or in transfer, or edited by hand, is refused.
It is not a signature: whoever can write the model folder can also write a matching digest, so
the model folder must be writable by the service only (the routers download over HTTP, checked
against the service's index of SHA-256s, with the service's bearer token). What the arrays mean
(their widths against the metadata's settings) is checked by :func:`check_layout`, which both
loaders call with the settings they run with.

We chose this small format over torch.save (pickle) and over safetensors (which would be fine,
but is one more dependency for a few dozen lines of code). Format 1 files (digest over the
weights only) are refused with a message saying how to get a new file.

Example::

    save_model(path, layers, {"kind": "node_scoring", "nodes": ["tm_a", "tm_b"]})
    layers, metadata = load_model(path)
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np

__all__ = ["save_model", "load_model", "parse_model", "check_layout", "ModelFileError",
           "FORMAT_VERSION", "MAX_FILE_BYTES"]

MAGIC = b"SPMODEL2"
_OLD_MAGIC = b"SPMODEL1"
FORMAT_VERSION = 2
_DIGEST_BYTES = 32
#: a model file larger than this is refused before it is read (LDWP networks are ~100 KB; the
#: bound keeps a hostile download or file from taking the router's memory)
MAX_FILE_BYTES = 64 << 20
#: the JSON header's bound (metadata is a few KB)
MAX_HEADER_BYTES = 1 << 20
#: the widest layer accepted (hidden sizes are hundreds)
MAX_LAYER_WIDTH = 1 << 16


class ModelFileError(ValueError):
    """A model file that cannot be trusted or read, with the reason."""


def save_model(path: str | Path, layers: list[tuple[np.ndarray, np.ndarray]],
               metadata: dict) -> Path:
    arrays, entries, offset = [], [], 0
    for i, (weight, bias) in enumerate(layers):
        for name, array in ((f"layer{i}.weight", weight), (f"layer{i}.bias", bias)):
            data = np.ascontiguousarray(array, dtype="<f4").tobytes()
            entries.append({"name": name, "shape": list(array.shape), "offset": offset,
                            "bytes": len(data)})
            arrays.append(data)
            offset += len(data)
    body = b"".join(arrays)
    header = {"format_version": FORMAT_VERSION, "metadata": metadata, "arrays": entries,
              "body_bytes": len(body)}
    encoded = json.dumps(header, sort_keys=True).encode()
    content = MAGIC + struct.pack("<Q", len(encoded)) + encoded + body
    path = Path(path)
    path.write_bytes(content + hashlib.sha256(content).digest())
    return path


def load_model(path: str | Path) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict]:
    """(layers, metadata) of the model file at ``path``; :class:`ModelFileError` when it is
    not a sound model file (see the module docstring for every check)."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {path}: {exc}") from None
    if size > MAX_FILE_BYTES:
        raise ModelFileError(f"{path} is {size:,} bytes, over the {MAX_FILE_BYTES:,}-byte "
                             "limit for a model file")
    return parse_model(path.read_bytes(), str(path))


def parse_model(data: bytes, name: str = "model file"
                ) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict]:
    """:func:`load_model` for bytes (a download); ``name`` is used in error messages."""
    if len(data) > MAX_FILE_BYTES:
        raise ModelFileError(f"{name} is {len(data):,} bytes, over the {MAX_FILE_BYTES:,}-byte "
                             "limit for a model file")
    if data[:8] == _OLD_MAGIC:
        raise ModelFileError(f"{name} is a format 1 model file, whose digest does not cover its "
                             "header; this streamplace reads format 2: re-train it or re-save "
                             "it with the streamplace that wrote it (LDWPPolicy.save)")
    if data[:8] != MAGIC:
        raise ModelFileError(f"{name} is not a streamplace model file (bad magic bytes)")
    if len(data) < 16 + _DIGEST_BYTES:
        raise ModelFileError(f"{name} is truncated inside its header")
    (header_len,) = struct.unpack("<Q", data[8:16])
    if header_len > MAX_HEADER_BYTES or 16 + header_len + _DIGEST_BYTES > len(data):
        raise ModelFileError(f"{name} is truncated or its header length is wrong: header says "
                             f"{header_len} bytes, file has {len(data) - 16}")
    content, digest = data[:-_DIGEST_BYTES], data[-_DIGEST_BYTES:]
    if hashlib.sha256(content).digest() != digest:
        raise ModelFileError(f"{name} failed its SHA-256 check: the header or the weights were "
                             "modified, or the file is truncated")
    try:
        header = json.loads(content[16:16 + header_len])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFileError(f"{name} has a corrupted header: {exc}") from None
    if not isinstance(header, dict) or header.get("format_version") != FORMAT_VERSION:
        raise ModelFileError(f"{name} has format version "
                             f"{header.get('format_version') if isinstance(header, dict) else None}"
                             f"; this streamplace reads version {FORMAT_VERSION}")
    metadata = header.get("metadata")
    if not isinstance(metadata, dict):
        raise ModelFileError(f"{name}: the header's metadata is not an object")
    body = content[16 + header_len:]
    if len(body) != header.get("body_bytes"):
        raise ModelFileError(f"{name} is truncated or padded: weights are {len(body)} bytes, "
                             f"header says {header.get('body_bytes')}")
    return _read_layers(header.get("arrays"), body, name), metadata


def _read_layers(entries, body: bytes, name: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """The layers the array table describes, after checking that it is the table save_model
    writes: names in order, arrays back to back covering the body, shapes that chain."""
    if not isinstance(entries, list) or not entries or len(entries) % 2:
        raise ModelFileError(f"{name}: the array table must list a weight and a bias per layer")
    layers, offset = [], 0
    for i in range(len(entries) // 2):
        pair = []
        for entry, suffix in zip(entries[2 * i:2 * i + 2], ("weight", "bias")):
            expected = f"layer{i}.{suffix}"
            if not isinstance(entry, dict) or entry.get("name") != expected:
                raise ModelFileError(f"{name}: array {2 * i + (suffix == 'bias')} should be "
                                     f"{expected}")
            shape = entry.get("shape")
            dims = 2 if suffix == "weight" else 1
            if not isinstance(shape, list) or len(shape) != dims or not all(
                    isinstance(d, int) and not isinstance(d, bool) and 0 < d <= MAX_LAYER_WIDTH
                    for d in shape):
                raise ModelFileError(f"{name}: array {expected} has an invalid shape {shape!r}")
            length = 4 * int(np.prod(shape))
            if entry.get("offset") != offset or entry.get("bytes") != length:
                raise ModelFileError(f"{name}: array {expected} must start at byte {offset} and "
                                     f"hold {length} bytes (table says {entry.get('offset')}, "
                                     f"{entry.get('bytes')})")
            raw = body[offset:offset + length]
            if len(raw) != length:
                raise ModelFileError(f"{name}: array {expected} runs past the weights")
            array = np.frombuffer(raw, dtype="<f4").reshape(shape).astype(np.float32)
            if not np.isfinite(array).all():
                raise ModelFileError(f"{name}: array {expected} holds non-finite values (NaN "
                                     "or infinity): refused")
            pair.append(array)
            offset += length
        weight, bias = pair
        if bias.shape[0] != weight.shape[0]:
            raise ModelFileError(f"{name}: layer{i}.bias has {bias.shape[0]} values for "
                                 f"{weight.shape[0]} outputs")
        if layers and layers[-1][0].shape[0] != weight.shape[1]:
            raise ModelFileError(f"{name}: layer{i} reads {weight.shape[1]} inputs, layer{i - 1} "
                                 f"writes {layers[-1][0].shape[0]}")
        layers.append((weight, bias))
    if offset != len(body):
        raise ModelFileError(f"{name}: {len(body) - offset} bytes of the weights belong to no "
                             "array")
    return layers


def check_layout(layers: list[tuple[np.ndarray, np.ndarray]], kind: str, input_width: int,
                 outputs: int, hidden_sizes=None, name: str = "model file") -> None:
    """Raise ModelFileError unless the layers are the network the settings describe: a first
    layer reading ``input_width`` columns, a last one writing ``outputs``, and (when given)
    the hidden sizes in between. Both loaders call it with the settings they run with, so a
    file whose metadata was changed to mean another network is refused, not misread."""
    if not layers:
        raise ModelFileError(f"{name} holds no layers")
    if layers[0][0].shape[1] != input_width:
        raise ModelFileError(f"{name}: the {kind} network reads {layers[0][0].shape[1]} "
                             f"columns; its settings give {input_width}")
    if layers[-1][0].shape[0] != outputs:
        raise ModelFileError(f"{name}: the {kind} network writes {layers[-1][0].shape[0]} "
                             f"outputs; its settings need {outputs}")
    if hidden_sizes is not None:
        hidden = [w.shape[0] for w, _ in layers[:-1]]
        if hidden != [int(h) for h in hidden_sizes]:
            raise ModelFileError(f"{name}: hidden layers are {hidden}, its settings say "
                                 f"{list(hidden_sizes)}")
