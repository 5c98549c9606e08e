"""Observation encodings for LDWP, without torch (the router encodes on its hot path).

Two layouts:

- ``paper_vector``: the paper's x_t = (TID, TSize, S_1, ..., S_M) with TID one-hot over the known
  applications, TSize as log(1 + pixels) / 20, and the six per-node numbers: a vector of
  ``len(apps) + 1 + 6 M``. Its size depends on M, which is why the paper's network must be
  re-shaped (transfer learning) when nodes join or leave.
- ``node_rows``: one row per node with the task's features, that node's six numbers, its queue
  depth and backlog, and what the cost model expects of this task there; a network with
  shared weights scores each row, so one model serves any number of nodes (our size-agnostic
  variant).

Task types (TID). Users place their own operators, so a task type is any string. Two encodings
(``task_encoding``, recorded in a model's settings; a model file without it is "catalog"):

- ``"catalog"`` (the paper's, and every model file written before types were open): one-hot
  over the built-in apps (``APPS``); any other type encodes as all zeros ("not a built-in
  app"), which keeps such models working (finite Q-values) but blind to the type's identity.
- ``"hashed"`` (node_rows only): the same one-hot columns, then ``TYPE_HASH_SIZE`` more columns
  holding a fixed code of the type string (:func:`type_code`: BLAKE2b, not Python's salted
  ``hash()``, so a router and the service in other processes agree). The built-in apps keep
  their one-hot and zeros there, so their rows are exactly the catalog rows plus zero columns;
  any other type gets its own code and zeros in the one-hot. Columns come after the catalog
  row (``NODE_ROW_SIZE``), before the spec columns, so every column index of the catalog
  layout (``ESTIMATE_COLUMN``, ``COMPLETION_COLUMN``) holds in both.

What the network learns about a type's cost does not need the code: the estimate columns come
from the cost model, and a learned one (``placement.measured_costs.MeasuredCosts``) estimates
any type (:func:`task_estimates`).

Example::

    >>> from workload.model import NodeState, Observation, Task
    >>> obs = Observation(Task("t", "video_synopsis", 10**6), (NodeState("a"), NodeState("b")), 0)
    >>> paper_vector(obs).shape, node_rows(obs).shape
    ((16,), (2, 16))
    >>> node_rows(obs, task_encoding="hashed").shape, node_row_size("hashed", spec_features=True)
    ((2, 24), 30)
"""

from __future__ import annotations

import hashlib
import math
from functools import lru_cache

import numpy as np

from workload.catalog import app_ids
from workload.estimates import gpu_spec_speed
from workload.model import NODE_STATE_FIELDS, Observation

__all__ = ["paper_vector", "paper_vector_size", "node_rows", "NODE_ROW_SIZE", "APPS",
           "COMPLETION_COLUMN", "ESTIMATE_COLUMN", "COMPLETION_SCALE", "NODE_SPEC_SIZE",
           "node_spec_features", "completion_prior", "scaled_completion_q", "TASK_ENCODINGS",
           "TYPE_HASH_SIZE", "type_code", "node_row_size", "task_estimates",
           "task_encoding_metadata", "model_task_encoding", "is_live_costs",
           "task_size_feature", "MAX_ENCODED_SIZE", "RAW_LOW", "RAW_HIGH"]

APPS = app_ids()
#: task one-hot + log TSize + six node numbers + queue depth + backlog + estimated time +
#: estimated completion + relative speed + 1 (bias-like constant: "this node exists").
NODE_ROW_SIZE = len(APPS) + 1 + len(NODE_STATE_FIELDS) + 6
#: the column of node_rows holding log1p(estimated completion s) / COMPLETION_SCALE, where the
#: estimated completion is the MCT rule's score: backlog / parallel units + task estimate.
COMPLETION_COLUMN = len(APPS) + 1 + len(NODE_STATE_FIELDS) + 3
#: the column holding log1p(estimated task seconds alone on the node) / COMPLETION_SCALE.
ESTIMATE_COLUMN = COMPLETION_COLUMN - 1
COMPLETION_SCALE = 10.0
#: optional static columns per node (``spec_features``): what the node is, so a shared network
#: can tell apart node types that the public estimate treats alike (same GPU model, fewer GPUs).
NODE_SPEC_SIZE = 6
#: task type encodings (module docstring): "catalog" one-hot, "hashed" one-hot + type code
TASK_ENCODINGS = ("catalog", "hashed")
#: columns of the hashed type code. 8 numbers of 16 bits each: two distinct types collide
#: (same code) with probability about 2**-128, and a few dozen types stay far apart.
TYPE_HASH_SIZE = 8
#: Bounds of the raw per-node numbers node_rows reads (utilisations 0-5, queue depth, backlog
#: seconds, estimated seconds times speed, parallel units). Inputs come from feedback and
#: records that may be hostile: clamping here keeps every encoded row finite and in the range
#: training saw, so no single record can push a Q-value to NaN (issue: a negative size made
#: the service's loss NaN). NaN reads as the lower bound.
RAW_LOW = np.array([0.0] * 6 + [0.0, 0.0, 0.0, 1.0])
RAW_HIGH = np.array([1.0] * 6 + [1e6, 1e7, 1e7, 1e4])
#: the largest task size the encoding distinguishes (log1p(1e15) / 20 = 1.73)
MAX_ENCODED_SIZE = 1e15
#: type strings longer than this are not kept in the code cache (memory stays bounded when a
#: user function returns long or ever-new strings); their code is computed each time
_CACHED_TYPE_CHARS = 256


def node_row_size(task_encoding: str = "catalog", spec_features: bool = False) -> int:
    """Columns of a ``node_rows`` row for this encoding, with or without spec columns."""
    if task_encoding not in TASK_ENCODINGS:
        raise ValueError(f"task_encoding must be one of {TASK_ENCODINGS}, got {task_encoding!r}")
    return (NODE_ROW_SIZE + (TYPE_HASH_SIZE if task_encoding == "hashed" else 0)
            + (NODE_SPEC_SIZE if spec_features else 0))


def model_task_encoding(metadata: dict) -> str:
    """The task encoding a model file was written with ("catalog" when it does not say: files
    from before types were open), checked against this streamplace's columns; raises
    ModelFileError when they would mean something else (other built-in apps, other code)."""
    from placement.ldwp.modelfile import ModelFileError
    # The metadata comes from a file: every part is checked for its type before it is read
    if not isinstance(metadata, dict):
        raise ModelFileError("the model metadata is not an object")
    settings = metadata.get("settings") or {}
    if not isinstance(settings, dict):
        raise ModelFileError("the model metadata's settings are not an object")
    encoding = settings.get("task_encoding", "catalog")
    if not isinstance(encoding, str) or encoding not in TASK_ENCODINGS:
        raise ModelFileError(f"unknown task_encoding {repr(encoding)[:80]} in the model "
                             f"metadata (one of {TASK_ENCODINGS})")
    recorded = metadata.get("task_types")
    if recorded is not None:
        if not isinstance(recorded, dict):
            raise ModelFileError(f"the model metadata's task_types must be an object, got "
                                 f"{type(recorded).__name__}")
        expected = task_encoding_metadata(encoding)
        if recorded.get("catalog") != expected["catalog"] or \
                recorded.get("hash_size", 0) != expected["hash_size"]:
            # repr cut: the header may hold a megabyte here, the message stays a line
            raise ModelFileError(f"the model's task type columns ({repr(recorded)[:300]}) "
                                 f"differ from this streamplace's ({expected})")
    return encoding


def task_encoding_metadata(task_encoding: str) -> dict:
    """What a model file records about its type columns (checked when it is loaded)."""
    return {"encoding": task_encoding, "catalog": list(APPS),
            "hash": "blake2b-16bit" if task_encoding == "hashed" else None,
            "hash_size": TYPE_HASH_SIZE if task_encoding == "hashed" else 0}


@lru_cache(maxsize=4096)
def _cached_code(task_type: str) -> tuple[float, ...]:
    return _code(task_type)


def _code(task_type: str) -> tuple[float, ...]:
    digest = hashlib.blake2b(task_type.encode("utf-8", "surrogatepass"),
                             digest_size=2 * TYPE_HASH_SIZE, person=b"streamplace-tid").digest()
    return tuple(int.from_bytes(digest[2 * i:2 * i + 2], "little") / 32767.5 - 1.0
                 for i in range(TYPE_HASH_SIZE))


def type_code(task_type: str) -> tuple[float, ...]:
    """The hashed encoding's columns for ``task_type``: zeros for a built-in app (its one-hot
    says it), else ``TYPE_HASH_SIZE`` numbers in [-1, 1] from its BLAKE2b digest, the same in
    every process and Python version."""
    if not isinstance(task_type, str):
        task_type = str(task_type)
    if task_type in APPS:
        return (0.0,) * TYPE_HASH_SIZE
    if len(task_type) <= _CACHED_TYPE_CHARS:
        return _cached_code(task_type)
    return _code(task_type)


def is_live_costs(costs) -> bool:
    """Whether ``costs`` estimates any type live (``estimates_s``: MeasuredCosts), as opposed
    to a static per-app table (``CostModel.task_time_coefficients``)."""
    return callable(getattr(costs, "estimates_s", None))


def task_estimates(observation: Observation, table: dict, live=None
                   ) -> tuple[dict[str, float], dict[str, int]]:
    """(estimates_s, units) for ``node_rows``, for the observed nodes that ``table`` knows.

    ``table[node] = ({type: (fixed_s, per_unit_s)}, parallel units)``. With ``live`` (a cost
    model with ``estimates_s(nodes, type, size)``, e.g. MeasuredCosts) every estimate comes
    from it, for any type; else from the table, 0 (unknown) for a type it lacks. One function
    for the torch agent and the numpy policy, so both encode alike."""
    task = observation.task
    known = [n for n in observation.node_ids if n in table]
    units = {n: table[n][1] for n in known}
    if live is not None:
        return live.estimates_s(known, task.app_id, task.input_size), units
    estimates = {}
    for node_id in known:
        fixed, slope = table[node_id][0].get(task.app_id, (0.0, 0.0))
        estimates[node_id] = fixed + slope * task.input_size
    return estimates, units


def node_spec_features(spec) -> tuple[float, ...]:
    """(log cores, GPUs, log GPU memory, log host memory, CPU speed, mean GPU speed), scaled
    to about [0, 1]."""
    gpus = spec.gpus
    return (np.log1p(spec.cpu_cores) / 3.0, len(gpus) / 4.0,
            np.log1p(sum(g.memory_gb for g in gpus)) / 5.0, np.log1p(spec.host_memory_gb) / 5.0,
            float(spec.cpu_speed),
            float(np.mean([gpu_spec_speed(g) for g in gpus])) if gpus else 0.0)


def task_size_feature(size) -> float:
    """The TSize column: log(1 + pixels) / 20, sizes clamped to [0, MAX_ENCODED_SIZE] (NaN and
    anything not a number read as 0). One function for every encoder (the router's fast path
    in ``placement.ldwp.inference`` included), so they cannot drift apart.

    >>> round(task_size_feature(10**6), 4), task_size_feature(float("nan")), task_size_feature("x")
    (0.6908, 0.0, 0.0)
    """
    # max() with 0 first turns NaN into 0; min() caps infinity and huge sizes
    size = min(MAX_ENCODED_SIZE, max(0.0, float(size))) if isinstance(size, (int, float)) else 0.0
    return math.log1p(size) / 20.0


def _task_features(observation: Observation) -> list[float]:
    one_hot = [1.0 if a == observation.task.app_id else 0.0 for a in APPS]
    return one_hot + [task_size_feature(observation.task.input_size)]


def paper_vector_size(nodes: int) -> int:
    return len(APPS) + 1 + len(NODE_STATE_FIELDS) * nodes


def paper_vector(observation: Observation) -> np.ndarray:
    values = _task_features(observation)
    for node in observation.nodes:
        values.extend(node.paper_features())
    vector = np.asarray(values, dtype=np.float64)
    # the six numbers per node are fractions: clamp them as node_rows does (NaN -> 0)
    np.clip(np.nan_to_num(vector[len(APPS) + 1:], copy=False, nan=0.0), 0.0, 1.0,
            out=vector[len(APPS) + 1:])
    return vector.astype(np.float32)


def node_rows(observation: Observation, estimates_s: dict[str, float] | None = None,
              units: dict[str, int] | None = None,
              spec_rows: dict[str, tuple] | None = None,
              task_encoding: str = "catalog") -> np.ndarray:
    """(M, node_row_size(task_encoding, spec_rows is not None)) features.
    ``estimates_s[node]``: the cost model's estimate of this task's
    time alone on that node; ``units[node]``: its parallel units (cores + GPUs). Missing
    entries count as unknown (0) so the encoding still works without a cost model. Each node's
    estimate is multiplied by its ``speed_factor`` (measured; 1.0 in the simulator), and
    ``backlog_s`` is taken as already measured-speed work (the router counts it that way).
    With ``task_encoding="hashed"``, TYPE_HASH_SIZE columns of :func:`type_code` follow the
    catalog row. With ``spec_rows`` (node -> ``node_spec_features``), NODE_SPEC_SIZE more
    columns follow (zeros for a node without one).
    Vectorised: this runs once per routed record."""
    estimates_s = estimates_s or {}
    units = units or {}
    nodes = observation.nodes
    m = len(nodes)
    hashed = TYPE_HASH_SIZE if task_encoding == "hashed" else 0
    rows = np.empty((m, node_row_size(task_encoding, spec_rows is not None)), dtype=np.float32)
    task = _task_features(observation)
    width = len(task)
    rows[:, :width] = task
    raw = np.array([(n.cpu_util, n.gpu_util, n.host_mem_util, n.gpu_mem_util, n.uplink_util,
                     n.downlink_util, n.queue_depth, n.backlog_s,
                     estimates_s.get(n.node_id, 0.0) * n.speed_factor,
                     units.get(n.node_id, 1)) for n in nodes],
                   dtype=np.float64).reshape(m, 10)
    np.clip(np.nan_to_num(raw, copy=False, nan=0.0), RAW_LOW, RAW_HIGH, out=raw)
    rows[:, width:width + 6] = raw[:, :6]
    estimate = raw[:, 8]  # the public estimate times the node's measured speed factor
    wait = raw[:, 7] / np.maximum(1.0, raw[:, 9])
    known = estimate[estimate > 0]
    fastest = known.min() if known.size else 0.0
    rows[:, width + 6] = np.log1p(raw[:, 6]) / 5.0
    rows[:, width + 7] = np.log1p(raw[:, 7]) / 10.0
    rows[:, width + 8] = np.log1p(estimate) / 10.0
    rows[:, width + 9] = np.log1p(wait + estimate) / COMPLETION_SCALE
    with np.errstate(divide="ignore", invalid="ignore"):
        rows[:, width + 10] = np.where(estimate > 0, fastest / estimate, 0.0)
    rows[:, width + 11] = 1.0
    if hashed:
        rows[:, NODE_ROW_SIZE:NODE_ROW_SIZE + hashed] = type_code(observation.task.app_id)
    if spec_rows is not None:
        blank = (0.0,) * NODE_SPEC_SIZE
        rows[:, NODE_ROW_SIZE + hashed:] = [spec_rows.get(n.node_id, blank) for n in nodes]
    return rows


def completion_prior(rows):
    """-log(1 + estimated completion seconds) per node row (torch or numpy): the node_rows
    column holds log1p(completion) / COMPLETION_SCALE. argmax of this prior = the MCT rule."""
    return -COMPLETION_SCALE * rows[..., COMPLETION_COLUMN]


def scaled_completion_q(rows, factors, lib=np):
    """-log(1 + exp(g) * wait + exp(h) * estimate), wait and estimate recovered from the rows'
    log1p columns; ``factors[..., 0] = g``, ``factors[..., 1] = h`` (numpy, or torch via
    ``lib``). Here, not with the networks, so the torch-free router can run it."""
    estimate = lib.expm1(COMPLETION_SCALE * rows[..., ESTIMATE_COLUMN])
    wait = lib.expm1(COMPLETION_SCALE * rows[..., COMPLETION_COLUMN]) - estimate
    wait = lib.maximum(wait, 0.0 * wait)
    return -lib.log1p(lib.exp(factors[..., 0]) * wait + lib.exp(factors[..., 1]) * estimate)
