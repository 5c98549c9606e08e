"""LDWP model files: weights plus metadata, never pickle, refused when truncated or tampered.

Layout (one file, format version 2): the array file of :mod:`workload.arrayfile` with magic
``b"SPMODEL2"``: 8-byte little-endian header length, a UTF-8 JSON header, the raw little-endian
float32 arrays back to back, then a 32-byte SHA-256 of everything before it (magic, header and
weights). The generic checks (size, digest, header, table, finiteness) live there; this module
adds what makes the arrays an MLP. The header holds the metadata (network kind, observation
layout, node ids, hidden sizes, training-data hash, ...) and, per array, its name, shape, offset
and length.

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
but is one more dependency for a few dozen lines of code); the NCF completion models ship in
the same container (:mod:`interference.ncf.modelfile`, their own magic). Format 1 files (digest
over the weights only) are refused with a message saying how to get a new file.

Example::

    save_model(path, layers, {"kind": "node_scoring", "nodes": ["tm_a", "tm_b"]})
    layers, metadata = load_model(path)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from workload.arrayfile import (ArrayFileError, check_size, file_bytes, read_arrays,
                                read_bounded, write_arrays)

__all__ = ["save_model", "load_model", "parse_model", "check_layout", "ModelFileError",
           "MAGIC", "FORMAT_VERSION", "MAX_FILE_BYTES"]

MAGIC = b"SPMODEL2"
_OLD_MAGIC = b"SPMODEL1"
FORMAT_VERSION = 2
#: what the size messages call these files ("over the ...-byte limit for a model file")
_KIND = "model file"
#: a model file larger than this is refused before it is read (LDWP networks are ~100 KB; the
#: bound keeps a hostile download or file from taking the router's memory)
MAX_FILE_BYTES = 64 << 20
#: the JSON header's bound (metadata is a few KB)
MAX_HEADER_BYTES = 1 << 20
#: the widest layer accepted (hidden sizes are hundreds)
MAX_LAYER_WIDTH = 1 << 16


class ModelFileError(ArrayFileError):
    """A model file that cannot be trusted or read, with the reason (an
    :class:`~workload.arrayfile.ArrayFileError`, so a ``ValueError`` as before)."""


def save_model(path: str | Path, layers: list[tuple[np.ndarray, np.ndarray]],
               metadata: dict) -> Path:
    """Write ``layers`` ((weight, bias) pairs, first layer first) and ``metadata``; returns the
    path. Values are not judged here: a NaN weight is written, and refused by the loaders."""
    named = []
    for i, (weight, bias) in enumerate(layers):
        named += [(f"layer{i}.weight", weight), (f"layer{i}.bias", bias)]
    write_arrays(path, named, metadata, MAGIC, format_version=FORMAT_VERSION,
                 error=ModelFileError)
    return Path(path)


def load_model(path: str | Path) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict]:
    """(layers, metadata) of the model file at ``path``; :class:`ModelFileError` when it is
    not a sound model file (see the module docstring for every check)."""
    return parse_model(read_bounded(path, _KIND, MAX_FILE_BYTES, ModelFileError), str(path))


def parse_model(data: bytes, name: str = "model file"
                ) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict]:
    """:func:`load_model` for bytes (a download); ``name`` is used in error messages."""
    data = file_bytes(data, name, ModelFileError)   # checked before the magic is read here
    check_size(len(data), name, _KIND, MAX_FILE_BYTES, ModelFileError)
    if data[:8] == _OLD_MAGIC:
        raise ModelFileError(f"{name} is a format 1 model file, whose digest does not cover its "
                             "header; this streamplace reads format 2: re-train it or re-save "
                             "it with the streamplace that wrote it (LDWPPolicy.save)")
    # finite_metadata=False: metadata carries training statistics (losses, errors) that were
    # never required finite; the loaders check each setting they use (model_settings.py)
    arrays, metadata = read_arrays(
        data, name, MAGIC, kind=_KIND, format_version=FORMAT_VERSION,
        max_file_bytes=MAX_FILE_BYTES, max_header_bytes=MAX_HEADER_BYTES,
        max_dimension=MAX_LAYER_WIDTH, max_dims=2, finite_metadata=False,
        check_names=_layer_names_problem, error=ModelFileError)
    return _pair_layers([array for _, array in arrays], name), metadata


def _layer_names_problem(names: list[str]) -> str | None:
    """Why the table's names are not ``layer0.weight, layer0.bias, layer1.weight, ...``."""
    if not names or len(names) % 2:
        return "the array table must list a weight and a bias per layer"
    for index, found in enumerate(names):
        expected = f"layer{index // 2}.{'bias' if index % 2 else 'weight'}"
        if found != expected:
            return f"array {index} should be {expected}"
    return None


def _pair_layers(arrays: list[np.ndarray], name: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight, bias) pairs, checked: each weight 2-D with a bias as long as its rows, each
    layer reading what the previous one writes."""
    layers: list[tuple[np.ndarray, np.ndarray]] = []
    for i in range(len(arrays) // 2):
        weight, bias = arrays[2 * i], arrays[2 * i + 1]
        for array, suffix, dims in ((weight, "weight", 2), (bias, "bias", 1)):
            if array.ndim != dims:
                raise ModelFileError(f"{name}: array layer{i}.{suffix} has an invalid shape "
                                     f"{list(array.shape)!r}")
        if bias.shape[0] != weight.shape[0]:
            raise ModelFileError(f"{name}: layer{i}.bias has {bias.shape[0]} values for "
                                 f"{weight.shape[0]} outputs")
        if layers and layers[-1][0].shape[0] != weight.shape[1]:
            raise ModelFileError(f"{name}: layer{i} reads {weight.shape[1]} inputs, layer{i - 1} "
                                 f"writes {layers[-1][0].shape[0]}")
        layers.append((weight, bias))
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
