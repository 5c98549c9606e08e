"""Observation encodings for LDWP, without torch (the router encodes on its hot path).

Two layouts:

- ``paper_vector``: the paper's x_t = (TID, TSize, S_1, ..., S_M) with TID one-hot over the known
  applications, TSize as log(1 + pixels) / 20, and the six per-node numbers: a vector of
  ``len(apps) + 1 + 6 M``. Its size depends on M, which is why the paper's network must be
  re-shaped (transfer learning) when nodes join or leave.
- ``node_rows``: one row per node with the task's features, that node's six numbers, its queue
  depth and backlog, and what the public cost model expects of this task there; a network with
  shared weights scores each row, so one model serves any number of nodes (our size-agnostic
  variant).

Example::

    >>> from workload.model import NodeState, Observation, Task
    >>> obs = Observation(Task("t", "video_synopsis", 10**6), (NodeState("a"), NodeState("b")), 0)
    >>> paper_vector(obs).shape, node_rows(obs).shape
    ((16,), (2, 16))
"""

from __future__ import annotations

import math

import numpy as np

from workload.catalog import app_ids
from workload.model import NODE_STATE_FIELDS, Observation

__all__ = ["paper_vector", "paper_vector_size", "node_rows", "NODE_ROW_SIZE", "APPS",
           "COMPLETION_COLUMN", "ESTIMATE_COLUMN", "COMPLETION_SCALE", "NODE_SPEC_SIZE",
           "node_spec_features", "completion_prior", "scaled_completion_q"]

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


def node_spec_features(spec) -> tuple[float, ...]:
    """(log cores, GPUs, log GPU memory, log host memory, CPU speed, mean GPU speed), scaled
    to about [0, 1]."""
    gpus = spec.gpus
    return (np.log1p(spec.cpu_cores) / 3.0, len(gpus) / 4.0,
            np.log1p(sum(g.memory_gb for g in gpus)) / 5.0, np.log1p(spec.host_memory_gb) / 5.0,
            float(spec.cpu_speed),
            float(np.mean([g.speed for g in gpus])) if gpus else 0.0)


def _task_features(observation: Observation) -> list[float]:
    one_hot = [1.0 if a == observation.task.app_id else 0.0 for a in APPS]
    return one_hot + [math.log1p(max(0, observation.task.input_size)) / 20.0]


def paper_vector_size(nodes: int) -> int:
    return len(APPS) + 1 + len(NODE_STATE_FIELDS) * nodes


def paper_vector(observation: Observation) -> np.ndarray:
    values = _task_features(observation)
    for node in observation.nodes:
        values.extend(node.paper_features())
    return np.asarray(values, dtype=np.float32)


def node_rows(observation: Observation, estimates_s: dict[str, float] | None = None,
              units: dict[str, int] | None = None,
              spec_rows: dict[str, tuple] | None = None) -> np.ndarray:
    """(M, NODE_ROW_SIZE) features. ``estimates_s[node]``: the public estimate of this task's
    time alone on that node; ``units[node]``: its parallel units (cores + GPUs). Missing
    entries count as unknown (0) so the encoding still works without a cost model. Each node's
    estimate is multiplied by its ``speed_factor`` (measured; 1.0 in the simulator), and
    ``backlog_s`` is taken as already measured-speed work (the router counts it that way).
    With ``spec_rows`` (node -> ``node_spec_features``), NODE_SPEC_SIZE more columns follow
    (zeros for a node without one): (M, NODE_ROW_SIZE + NODE_SPEC_SIZE).
    Vectorised: this runs once per routed record."""
    estimates_s = estimates_s or {}
    units = units or {}
    nodes = observation.nodes
    m = len(nodes)
    extra = NODE_SPEC_SIZE if spec_rows is not None else 0
    rows = np.empty((m, NODE_ROW_SIZE + extra), dtype=np.float32)
    task = _task_features(observation)
    width = len(task)
    rows[:, :width] = task
    raw = np.array([(n.cpu_util, n.gpu_util, n.host_mem_util, n.gpu_mem_util, n.uplink_util,
                     n.downlink_util, n.queue_depth, n.backlog_s,
                     estimates_s.get(n.node_id, 0.0) * n.speed_factor,
                     units.get(n.node_id, 1)) for n in nodes],
                   dtype=np.float64).reshape(m, 10)
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
    if extra:
        blank = (0.0,) * NODE_SPEC_SIZE
        rows[:, NODE_ROW_SIZE:] = [spec_rows.get(n.node_id, blank) for n in nodes]
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
