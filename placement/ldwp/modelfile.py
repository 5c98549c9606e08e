"""LDWP model files: weights plus metadata, never pickle, refused when truncated or tampered.

Layout (one file): ``b"SPMODEL1"`` magic, 8-byte little-endian header length, a UTF-8 JSON
header, then the raw little-endian float32 arrays back to back. The header holds the metadata
(format version, network kind, observation layout, node ids, hidden sizes, training-data hash,
...) and, per array, its name, shape, offset and length, plus the SHA-256 of everything after the
header. Loading checks the magic, the lengths and the digest before reading a single weight, and
only ever builds numpy arrays from bytes (``numpy.frombuffer``): nothing in the file can run code.

We chose this small format over torch.save (pickle) and over safetensors (which would be fine,
but is one more dependency for twelve lines of code).

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

__all__ = ["save_model", "load_model", "ModelFileError", "FORMAT_VERSION"]

MAGIC = b"SPMODEL1"
FORMAT_VERSION = 1


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
              "body_sha256": hashlib.sha256(body).hexdigest(), "body_bytes": len(body)}
    encoded = json.dumps(header, sort_keys=True).encode()
    path = Path(path)
    path.write_bytes(MAGIC + struct.pack("<Q", len(encoded)) + encoded + body)
    return path


def load_model(path: str | Path) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict]:
    path = Path(path)
    data = path.read_bytes()
    if data[:8] != MAGIC:
        raise ModelFileError(f"{path} is not a streamplace model file (bad magic bytes)")
    if len(data) < 16:
        raise ModelFileError(f"{path} is truncated inside its header")
    (header_len,) = struct.unpack("<Q", data[8:16])
    if 16 + header_len > len(data):
        raise ModelFileError(f"{path} is truncated: header says {header_len} bytes, file has "
                             f"{len(data) - 16}")
    try:
        header = json.loads(data[16:16 + header_len])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFileError(f"{path} has a corrupted header: {exc}") from None
    if header.get("format_version") != FORMAT_VERSION:
        raise ModelFileError(f"{path} has format version {header.get('format_version')}; this "
                             f"streamplace reads version {FORMAT_VERSION}")
    body = data[16 + header_len:]
    if len(body) != header.get("body_bytes"):
        raise ModelFileError(f"{path} is truncated or padded: weights are {len(body)} bytes, "
                             f"header says {header.get('body_bytes')}")
    if hashlib.sha256(body).hexdigest() != header.get("body_sha256"):
        raise ModelFileError(f"{path} failed its SHA-256 check: the weights were modified")
    arrays = {}
    for entry in header["arrays"]:
        raw = body[entry["offset"]:entry["offset"] + entry["bytes"]]
        count = int(np.prod(entry["shape"])) if entry["shape"] else 1
        if len(raw) != 4 * count:
            raise ModelFileError(f"{path}: array {entry['name']} has the wrong length")
        arrays[entry["name"]] = np.frombuffer(raw, dtype="<f4").reshape(entry["shape"]).copy()
    layers = []
    i = 0
    while f"layer{i}.weight" in arrays:
        layers.append((arrays[f"layer{i}.weight"], arrays[f"layer{i}.bias"]))
        i += 1
    return layers, header["metadata"]
