"""LDWP inference without torch: what the Flink router runs on its hot path.

:class:`NumpyLDWPPolicy` reads a model file (``placement.ldwp.modelfile``: weights plus metadata,
never pickle) and answers :meth:`decide` with the same Q-values as the torch agent
(:class:`placement.ldwp.agent.LDWPPolicy` with ``use_numpy=True``; a test checks they agree). It
never imports torch (about 2-3 s and hundreds of MB per Python worker), and it never learns:
learning happens in the placement service, which publishes new model files that the router
swaps in with :meth:`NumpyLDWPPolicy.from_bytes`.

Both observation layouts work, and the residual variants (``q_prior="completion"``, additive
or ``residual="scaled"``; settings read from the model metadata):

- ``node_rows`` (the size-agnostic network): any nodes; a node that the model's cluster spec
  does not know gets an unknown (0) cost estimate, as in the torch agent.
- ``paper_vector``: the nodes must be exactly the ones the model was built for, in order.

Any task type (a user's operator, not only the built-in apps): the type columns follow the
model's ``task_encoding`` (``placement.ldwp.features``; files without one are "catalog", where
an unknown type is all zeros), and the estimate columns come from ``costs``: with a learned
``MeasuredCosts`` every type's estimate is read from it live on each decision (so the model's
MCT prior explores and follows what the nodes measure); with a ``CostModel`` from the per-app
table fitted once (``coefficients``), 0 (unknown) for a type the table lacks.

Two paths, one answer (issue 14, item 6: p99 <= 50 us per decision on 11 nodes):

- :meth:`NumpyLDWPPolicy.encode` + :meth:`NumpyLDWPPolicy.q_values`: the shared encoding
  (``features.node_rows``, float32, exactly the torch agent's) and a plain forward pass.
- :meth:`NumpyLDWPPolicy.decide` (via :meth:`NumpyLDWPPolicy.fast_q_values`): what the router
  runs. :class:`FastNodeRows` encodes the same numbers in float64 with everything that depends
  only on the node set (spec columns, parallel units, the cost table's per-type coefficients,
  the type columns) built once and cached, reads each node's numbers with one C-level getter,
  and the network runs in float64. Its rows round to exactly ``node_rows`` (a test checks it
  bit for bit); its Q-values differ from the float32 path by float rounding only.
- On node_scoring models, :meth:`NumpyLDWPPolicy.decide` first tries the compiled path
  (``placement.ldwp.compiled``, numba): the same encoding and network in one call, about half
  the time at 11 nodes; the numpy path above when numba is missing or ``STREAMPLACE_JIT=0``.

Example::

    >>> policy = NumpyLDWPPolicy.from_file("ldwp.spmodel", cluster)        # doctest: +SKIP
    >>> policy.decide(observation).reason                                  # doctest: +SKIP
    'LDWP: highest Q -0.412 on tm_a, next tm_b -0.530'
"""

from __future__ import annotations

import hashlib
import math
from itertools import chain
from operator import attrgetter
from pathlib import Path

import numpy as np

from placement.ldwp.features import (APPS, COMPLETION_SCALE, NODE_ROW_SIZE, NODE_SPEC_SIZE,
                                     RAW_HIGH, RAW_LOW, TYPE_HASH_SIZE, completion_prior,
                                     is_live_costs, node_row_size, node_rows,
                                     node_spec_features, paper_vector, scaled_completion_q,
                                     task_estimates, task_size_feature, type_code)
from placement.ldwp.compiled import compiled_scorer
from placement.ldwp.evidence import (BANDWIDTH, EVIDENCE_HALF, EvidenceError, model_evidence,
                                     pooled_correction, pooling_matrix)
from placement.ldwp.model_settings import read_model_settings
from placement.ldwp.modelfile import ModelFileError, load_model, parse_model
from workload.estimates import CostModel
from workload.model import NODE_STATE_FIELDS, ClusterSpec, Decision, Observation, Policy

__all__ = ["NumpyLDWPPolicy", "FastNodeRows", "load_model_bytes", "NODE_SET_CACHE_SIZE",
           "TASK_TYPE_CACHE_SIZE", "ESTIMATE_CACHE_SIZE"]

#: Distinct observed node sets (ordered id tuples) whose constant columns the fast path keeps.
#: A router sees its whole cluster, or a subset while some queues are full. Beyond this the
#: oldest is dropped (FIFO). Worst case with the two limits below: about 1 MB per set of 100
#: nodes (32 row templates of 24 KB, 256 estimate vectors of 0.8 KB), 0.1 MB per set of 11.
NODE_SET_CACHE_SIZE = 16
#: Task types per node set whose row template (type columns) and cost coefficients are kept.
#: Users may send ever-new type strings: beyond this the oldest is dropped (FIFO), not grown.
TASK_TYPE_CACHE_SIZE = 32
#: (type, size) pairs per node set whose per-node cost-table estimates (the MCT prior's
#: seconds alone on each node) are kept; streams of equal-sized records (frames, fixed clips)
#: hit it. Never used with a learned cost model, whose estimates change as nodes report.
ESTIMATE_CACHE_SIZE = 256

_NODE_ID = attrgetter("node_id")
#: every NodeState number a node_rows row reads, in RAW_LOW's order (the speed factor where
#: the estimate goes: it becomes speed x estimate); one C call per node, not ten reads
_NODE_NUMBERS = attrgetter(*NODE_STATE_FIELDS, "queue_depth", "backlog_s", "speed_factor")
_NODE_UTILS = attrgetter(*NODE_STATE_FIELDS)
_READ = len(NODE_STATE_FIELDS) + 3
_LOW, _HIGH = RAW_LOW[:_READ].copy(), RAW_HIGH[:_READ].copy()
_APP_COLUMN = {app: i for i, app in enumerate(APPS)}
_SIZE_COLUMN = len(APPS)          # log TSize; the node's own columns follow
_FIRST = len(APPS) + 1
_ONE_COLUMN = NODE_ROW_SIZE - 1   # 1.0 in every row ("this node exists")
#: the divisors of the log1p columns (queue depth, backlog, estimate, completion), as in
#: features.node_rows (divided, not multiplied by a reciprocal: the same rounding)
_LOG_DIVISORS = np.array([5.0, 10.0, 10.0, COMPLETION_SCALE])
#: the column layout the compiled path (placement.ldwp.compiled) writes, from this module's
_COMPILED_CONSTANTS = {"size_column": _SIZE_COLUMN, "first_column": _FIRST, "low": _LOW,
                       "high": _HIGH, "log_divisors": _LOG_DIVISORS,
                       "completion_scale": COMPLETION_SCALE}


def load_model_bytes(data: bytes) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict]:
    """:func:`load_model` for bytes (a download); the same checks, the same errors."""
    return parse_model(data, "downloaded model file")


def _bias_carrying(layers: list[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    """Each (weight (in, out), bias) as one matrix that reads one more input, a 1, and adds
    the bias in the product itself: ``[[W, 0], [bias, 1]]`` (its extra output, again 1, carries
    the next layer's bias; ReLU keeps it 1), the last layer ``[[W], [bias]]``. Fewer numpy
    calls per decision, the same function.

    >>> _bias_carrying([(np.ones((2, 3)), np.zeros(3)), (np.ones((3, 1)), np.ones(1))])[0]
    array([[1., 1., 1., 0.],
           [1., 1., 1., 0.],
           [0., 0., 0., 1.]])
    """
    fused = []
    for i, (weight, bias) in enumerate(layers):
        if i and weight.shape[0] != layers[i - 1][0].shape[1]:
            raise ModelFileError(f"layer {i + 1} reads {weight.shape[0]} numbers; the layer "
                                 f"before writes {layers[i - 1][0].shape[1]}")
        carry = 0 if i == len(layers) - 1 else 1
        matrix = np.zeros((weight.shape[0] + 1, weight.shape[1] + carry))
        matrix[:-1, :weight.shape[1]], matrix[-1, :weight.shape[1]] = weight, bias
        matrix[-1, weight.shape[1]:] = 1.0
        fused.append(matrix)
    return fused


def _fuse_node_scoring(layers: list[tuple[np.ndarray, np.ndarray]], row_size: int):
    """The node_scoring MLP rearranged for the hot path: the same function in fewer numpy calls.

    ``layers``: (weight (in, out), bias) in float64. Returns ``(first, split, rest)``:
    ``rows @ first`` gives in its first ``split`` columns ``rows @ own + bias`` (the bias rides
    on the node_rows column that is 1 in every row) and, with hidden layers, a column of ones
    (the next bias's carrier, :func:`_bias_carrying`); in the rest ``rows @ context``, whose mean
    over the nodes is the context term ([row, mean] @ W == row @ own + mean @ context). Float64
    keeps the reordered sums within about 1e-15 of the plain pass (``q_values``).

    >>> w1, w2 = np.ones((2 * NODE_ROW_SIZE, 3)), np.ones((3, 1))
    >>> first, split, rest = _fuse_node_scoring([(w1, np.zeros(3)), (w2, np.zeros(1))],
    ...                                         NODE_ROW_SIZE)
    >>> first.shape, split, [r.shape for r in rest]
    ((16, 7), 4, [(4, 1)])
    """
    (weight, bias), tail = layers[0], layers[1:]
    own, context = weight[:row_size], weight[row_size:]
    width, carry = own.shape[1], 1 if tail else 0
    first = np.zeros((row_size, width + carry + width))
    first[:, :width] = own
    first[_ONE_COLUMN, :width] += bias
    first[_ONE_COLUMN, width:width + carry] = 1.0
    first[:, width + carry:] = context
    if tail and tail[0][0].shape[0] != width:
        raise ModelFileError(f"layer 2 reads {tail[0][0].shape[0]} numbers; layer 1 writes "
                             f"{width}")
    return first, width + carry, _bias_carrying(tail)


def _fused_q(fused, encoded: tuple, kind: str, q_prior: str, residual: str,
             trust: np.ndarray | None, pool: np.ndarray | None = None) -> np.ndarray:
    """Q per node (float64) of a network in its fused form (``kind`` "paper":
    :func:`_bias_carrying`'s matrices, "node_scoring": :func:`_fuse_node_scoring`'s triple) on
    ``NumpyLDWPPolicy.fast_encode``'s output, then the residual's prior (``q_prior``,
    ``residual``); ``trust`` per node weights the learned correction. What
    ``NumpyLDWPPolicy.fast_q`` runs: it needs the model alone, none of a policy's caches.
    ``pool``: ``trust``'s :func:`~placement.ldwp.evidence.pooling_matrix`, when the caller keeps
    one (the same pooling in one product)."""
    if kind == "paper":
        hidden = encoded[1]
        for i, weight in enumerate(fused):
            if i:
                np.maximum(hidden, 0.0, out=hidden)
            hidden = hidden @ weight
        return hidden
    _, rows, costs, mean_weights = encoded
    first, split, rest = fused
    both = rows @ first
    out = both[:, :split]
    out[:, :both.shape[1] - split] += mean_weights @ both[:, split:]   # the context term
    for weight in rest:
        np.maximum(out, 0.0, out=out)
        out = out @ weight
    if q_prior != "completion":
        return out[:, 0]
    if pool is not None:
        out = pool @ out
    elif trust is not None:
        out = pooled_correction(out, trust)
    if residual == "additive":
        return out[:, 0] + completion_prior(rows)
    # -log(1 + e^g wait + e^h estimate) from the exact wait and estimate (the shared path
    # recovers them from the rows' log1p columns: the same numbers up to rounding)
    np.exp(out, out=out)
    np.multiply(out, costs, out=out)
    q = np.add.reduce(out, axis=1)
    np.log1p(q, out=q)
    return np.negative(q, out=q)


def _pool_of(cache: dict, key: tuple, trust: np.ndarray) -> np.ndarray:
    """``trust``'s pooling matrix for (node ids, task type) ``key``, built once per key."""
    pool = cache.get(key)
    if pool is None:   # the key holds the node ids, so a kept matrix has trust's size
        pool = _remember(cache, key, pooling_matrix(trust), TASK_TYPE_CACHE_SIZE)
    return pool


def _remember(cache: dict, key, value, limit: int):
    """cache[key] = value, dropping the oldest entry first when full (bounded memory). Safe
    when two threads decide at once: at worst an entry is built twice or dropped early.

    >>> cache = {}
    >>> [_remember(cache, k, k * k, limit=2) for k in (1, 2, 3)], cache
    ([1, 4, 9], {2: 4, 3: 9})
    """
    if len(cache) >= limit:
        try:
            cache.pop(next(iter(cache)), None)
        except (RuntimeError, StopIteration):  # another thread changed it meanwhile
            pass
    cache[key] = value
    return value


def _decide_without_model(kind: str, state: np.ndarray, q: np.ndarray, ids) -> Decision:
    """A decision when the network gives a non-finite Q (finite weights can still overflow
    on extreme inputs): never argmax over NaN (it picks the first node every time), but the
    MCT rule the residual model starts from, or the best finite Q of a paper network."""
    if kind == "node_scoring":
        scores, rule = completion_prior(state).astype(np.float64), "MCT prior"
    else:
        scores, rule = q.astype(np.float64), "best finite Q"
    # what is still not finite scores as "never": a finite number, so the reply stays JSON
    scores = np.where(np.isfinite(scores), scores, -1e30)
    index = int(np.argmax(scores))
    return Decision(ids[index], f"LDWP gave non-finite Q-values; {rule}: {ids[index]}",
                    {n: float(v) for n, v in zip(ids, scores)})


def _decision(ids, q: np.ndarray, state: np.ndarray, best: int | None, runner: int | None,
              kind: str) -> Decision:
    """The Decision for Q-values ``q`` over ``ids``: the highest (the first of equals, as
    np.argmax), with the runner-up in its reason; ``best``/``runner`` when the compiled call
    already found them."""
    scores = q.tolist()
    # one sum answers "all finite?" (a sum of finite Q-values can only overflow when they
    # are near 1e308; then the exact check decides)
    if not math.isfinite(sum(scores)) and not np.isfinite(q).all():
        return _decide_without_model(kind, state, q, ids)
    if best is None:
        best = scores.index(max(scores))
        runner = -1
        if len(scores) > 1:
            others = scores.copy()
            others[best] = -math.inf
            runner = others.index(max(others))
    text = f", next {ids[runner]} {scores[runner]:.3f}" if runner >= 0 else ""
    return Decision(ids[best], f"LDWP: highest Q {scores[best]:.3f} on {ids[best]}{text}",
                    dict(zip(ids, scores)))


class _NodeSet:
    """What never changes for one observed node set: (parallel units, 1) per node, the known
    nodes, the base template (spec and constant columns), 1/M per node (the mean's weights)."""

    __slots__ = ("divisors", "units", "known", "base", "mean_weights", "types", "estimates")

    def __init__(self, divisors, known, base):
        self.divisors, self.known, self.base = divisors, known, base
        self.units = np.ascontiguousarray(divisors[:, 0])
        self.mean_weights = np.full(len(base), 1.0 / len(base))
        self.types: dict = {}
        self.estimates: dict = {}


class FastNodeRows:
    """``features.node_rows`` for the router's hot path, in float64, with what depends only on
    the node set computed once: every number equals node_rows' before its float32 rounding.

    ``coefficients[node] = ({type: (fixed_s, per_unit_s)}, parallel units)`` (the policy's
    table); ``spec_rows[node]`` the spec columns (or None: no spec columns); ``live`` a learned
    cost model asked on each call (its estimates are never cached).

    Example::

        >>> fast = FastNodeRows(policy.coefficients, spec_rows, "catalog")   # doctest: +SKIP
        >>> ids, rows, costs, mean_weights = fast.encode(observation)         # doctest: +SKIP
        >>> (rows.astype("float32") == policy.encode(observation)).all()     # doctest: +SKIP
        True
    """

    def __init__(self, coefficients: dict, spec_rows: dict | None, task_encoding: str,
                 live=None):
        self.coefficients, self.spec_rows, self.live = coefficients, spec_rows, live
        self.hashed = TYPE_HASH_SIZE if task_encoding == "hashed" else 0
        self.width = node_row_size(task_encoding, spec_rows is not None)
        self._node_sets: dict[tuple, _NodeSet] = {}
        self.estimate_hits = 0   # how often the (type, size) cache answered (benchmarks say)

    def encode(self, observation: Observation):
        """(node ids, rows (M, width) float64, costs (M, 2), 1/M per node): ``costs[:, 0]``
        is each node's backlog over its parallel units (the wait) and ``costs[:, 1]`` the
        task's estimated seconds there times the node's speed factor, both clamped as in
        node_rows (the scaled residual's Q reads them without recovering them from logs)."""
        ids, node_set, template, alone, numbers, size = self.inputs(observation)
        estimate = numbers[:, 8]         # the speed factor, times the estimate alone:
        np.multiply(estimate, alone, out=estimate)
        # fmax/fmin, not clip: NaN reads as the lower bound (node_rows: nan_to_num, then clip)
        np.fmax(numbers, _LOW, out=numbers)
        np.fmin(numbers, _HIGH, out=numbers)
        rows = template.copy()
        rows[:, _SIZE_COLUMN] = task_size_feature(size)
        # utilisations as they are; queue depth, backlog, estimate, completion as log1p / scale
        rows[:, _FIRST:_FIRST + _READ] = numbers
        costs = numbers[:, 7:9]          # backlog / units, estimate / 1: (wait, estimate)
        np.divide(costs, node_set.divisors, out=costs)
        np.add(costs[:, 0], estimate, out=rows[:, _FIRST + 9])
        logs = rows[:, _FIRST + 6:_FIRST + 10]
        np.divide(np.log1p(logs, out=logs), _LOG_DIVISORS, out=logs)
        # relative speed: the fastest known estimate over this node's (0 where unknown)
        known = estimate > 0.0
        fastest = np.minimum.reduce(estimate, where=known, initial=np.inf)
        if fastest < np.inf:
            np.divide(fastest, estimate, out=rows[:, _FIRST + 10], where=known)
        return ids, rows, costs, node_set.mean_weights

    def inputs(self, observation: Observation) -> tuple:
        """What :meth:`encode` starts from: (node ids, the node set's constants, the task
        type's row template, the task's estimated seconds alone per node, each node's raw
        numbers (M, 9) float64, the size)."""
        ids, node_set, template, fixed, slope, numbers, size = self._gather(observation)
        alone = self._estimates(node_set, ids, observation.task.app_id, size, fixed, slope)
        return ids, node_set, template, alone, numbers, size

    def compiled_inputs(self, observation: Observation) -> tuple:
        """What the compiled path (``placement.ldwp.compiled``) starts from: :meth:`inputs`
        with the estimate alone left as (fixed part, slope per unit of size) for the kernel to
        finish (``fixed + slope * size``: the numbers :meth:`inputs` computes, without its
        cache or a numpy call). A learned cost model's estimates, or a size that is not a
        plain number, come finished: the slope is then None."""
        ids, node_set, template, fixed, slope, numbers, size = self._gather(observation)
        if self.live is not None or type(size) not in (int, float) or not -1e300 < size < 1e300:
            fixed = self._estimates(node_set, ids, observation.task.app_id, size, fixed, slope)
            slope = None
        return ids, node_set, template, fixed, slope, numbers, size

    def _gather(self, observation: Observation) -> tuple:
        """(ids, node set, template, fixed parts, slopes (None with a learned cost model),
        raw numbers, size): what both inputs share."""
        nodes = observation.nodes
        ids = tuple(map(_NODE_ID, nodes))
        m = len(ids)
        if not m:
            raise ValueError("an observation needs at least one node")
        node_set = self._node_sets.get(ids) or self._node_set(ids)
        task = observation.task
        app, size = task.app_id, task.input_size
        template, fixed, slope = node_set.types.get(app) or self._task_type(node_set, ids, app)
        try:
            numbers = np.fromiter(chain.from_iterable(map(_NODE_NUMBERS, nodes)), np.float64,
                                  m * _READ).reshape(m, _READ)
        except (TypeError, ValueError):  # None, numeric strings: as node_rows' np.array reads
            numbers = np.array(list(map(_NODE_NUMBERS, nodes)), dtype=np.float64)
        return ids, node_set, template, fixed, slope, numbers, size

    def _estimates(self, node_set: _NodeSet, ids, app: str, size, fixed, slope) -> np.ndarray:
        if self.live is not None:
            get = self.live.estimates_s(node_set.known, app, size).get
            return np.array([get(n, 0.0) for n in ids], dtype=np.float64)
        cacheable = type(size) is int
        if cacheable:
            cached = node_set.estimates.get((app, size))
            if cached is not None:
                self.estimate_hits += 1
                return cached
        alone = fixed + slope * size
        if cacheable:
            _remember(node_set.estimates, (app, size), alone, ESTIMATE_CACHE_SIZE)
        return alone

    def _node_set(self, ids: tuple) -> _NodeSet:
        table = self.coefficients
        units = np.array([table[n][1] if n in table else 1 for n in ids], dtype=np.float64)
        np.fmin(np.fmax(units, RAW_LOW[9], out=units), RAW_HIGH[9], out=units)
        divisors = np.stack([units, np.ones_like(units)], axis=1)
        base = np.zeros((len(ids), self.width))
        base[:, _FIRST + 11] = 1.0       # "this node exists"
        if self.spec_rows is not None:
            blank = (0.0,) * NODE_SPEC_SIZE
            base[:, NODE_ROW_SIZE + self.hashed:] = [self.spec_rows.get(n, blank) for n in ids]
        known = tuple(n for n in ids if n in table)
        return _remember(self._node_sets, ids, _NodeSet(divisors, known, base),
                         NODE_SET_CACHE_SIZE)

    def _task_type(self, node_set: _NodeSet, ids: tuple, app: str) -> tuple:
        template = node_set.base.copy()
        if app in _APP_COLUMN:
            template[:, _APP_COLUMN[app]] = 1.0
        if self.hashed:
            template[:, NODE_ROW_SIZE:NODE_ROW_SIZE + self.hashed] = type_code(app)
        fixed = slope = None
        if self.live is None:
            table, none = self.coefficients, (0.0, 0.0)
            pairs = [table[n][0].get(app, none) if n in table else none for n in ids]
            fixed = np.array([p[0] for p in pairs], dtype=np.float64)
            slope = np.array([p[1] for p in pairs], dtype=np.float64)
        return _remember(node_set.types, app, (template, fixed, slope), TASK_TYPE_CACHE_SIZE)


def _paper_input(templates: dict, observation: Observation, m: int) -> np.ndarray:
    """The paper network's input x = (one-hot, TSize, six fractions per node, 1: the biases'
    carrier), from a per-type template kept in ``templates``."""
    task = observation.task
    key = task.app_id if task.app_id in _APP_COLUMN else None   # None: any other type
    template = templates.get(key)
    if template is None:  # at most one per built-in app, and one for all other types
        template = np.zeros(_FIRST + len(NODE_STATE_FIELDS) * m + 1)
        template[-1] = 1.0
        if key is not None:
            template[_APP_COLUMN[key]] = 1.0
        templates[key] = template
    x = template.copy()
    x[_SIZE_COLUMN] = task_size_feature(task.input_size)
    utils = x[_FIRST:-1]   # fractions; NaN reads as 0, as in paper_vector
    utils[:] = list(chain.from_iterable(map(_NODE_UTILS, observation.nodes)))
    np.fmin(np.fmax(utils, 0.0, out=utils), 1.0, out=utils)
    return x


class NumpyLDWPPolicy(Policy):
    """A frozen LDWP Q-network evaluated with numpy (greedy: no exploration on the router).

    Example::

        >>> policy = NumpyLDWPPolicy.from_file("ldwp.spm", cluster, costs)     # doctest: +SKIP
        >>> ids, q, _ = policy.fast_q_values(observation)                      # doctest: +SKIP
        >>> policy.decide(observation).node == ids[int(q.argmax())]            # doctest: +SKIP
        True
    """

    def __init__(self, layers: list[tuple[np.ndarray, np.ndarray]], metadata: dict,
                 cluster: ClusterSpec | None = None, costs=None,
                 coefficients: dict | None = None):
        """``costs``: a CostModel (default: the calibration's) or a MeasuredCosts (estimates
        read live, any task type); ``coefficients``: a previous policy's table to reuse."""
        # Validated against the arrays: a file whose settings were edited to mean another
        # network (e.g. residual scaled -> additive) is refused here, not misread.
        model = read_model_settings(layers, metadata)
        if not all(np.isfinite(w).all() and np.isfinite(b).all() for w, b in layers):
            raise ModelFileError("the model holds non-finite weights (NaN or infinity): refused")
        kind = model.kind
        self.kind = kind
        self.metadata = dict(metadata)
        # The residual variants (docs/ldwp.md): the network's output corrects MCT's completion
        # estimate, additively or as two per-node log-factors.
        self.q_prior, self.residual = model.q_prior, model.residual
        self.spec_features = model.spec_features
        self.task_encoding = model.task_encoding
        self._spec_rows = ({spec.node_id: node_spec_features(spec) for spec in cluster.nodes}
                           if self.spec_features and cluster is not None else None)
        if self.spec_features and self._spec_rows is None:
            raise ModelFileError("this model reads node spec features: give it the cluster")
        self.version = metadata.get("version")
        self.name = f"ldwp-{kind}"
        self.cluster = cluster
        self.costs = costs
        # float64 (the files hold float32): decide must match a float64 reference to 1e-9
        # (tests/unit/test_decision_fast_path.py), which float32 products cannot; at 11 nodes
        # the time goes to numpy calls more than to the multiply-adds.
        self._layers = [(np.ascontiguousarray(w.T, dtype=np.float64), b.astype(np.float64))
                        for w, b in layers]
        self._paper_nodes = model.nodes if kind == "paper" else None
        if cluster is not None:  # refused here, as the torch loader does, not at decide()
            try:
                self.check_nodes(cluster.node_ids)
            except ValueError as exc:
                raise ModelFileError(str(exc)) from None
        if kind == "node_scoring":
            # [row, mean] @ W1.T == row @ W1a.T + mean @ W1b.T: split once so the hot path never
            # builds the concatenated (M, 2F) matrix.
            first = self._layers[0][0]
            half = node_row_size(self.task_encoding, self.spec_features)
            self._own, self._context = first[:half], first[half:]
            self._fused = _fuse_node_scoring(self._layers, half)
            # the same encoding and network in one numba call (None: numpy decides)
            self.compiled = compiled_scorer(self._layers, half, self.q_prior, self.residual,
                                            _COMPILED_CONSTANTS)
        else:
            self.compiled = None
            self._fused, self._paper_templates = _bias_carrying(self._layers), {}
        # Per node: ({app: (fixed_s, per_pixel_s)}, parallel units). Fitting them walks every
        # application's DAG; a router that swaps models every few seconds passes the previous
        # model's table (``coefficients``) so a swap costs no fitting.
        # A learned cost model (``live``) is asked on every decision instead: its per-app
        # tables stay empty and only the units are kept.
        self.live = costs if is_live_costs(costs) else None
        self.coefficients: dict[str, tuple[dict, int]] = dict(coefficients or {})
        if kind == "node_scoring" and cluster is not None and not self.coefficients:
            costs = costs or CostModel(colocation=None)
            for spec in cluster.nodes:
                self.coefficients[spec.node_id] = (
                    {} if self.live is not None else costs.task_time_coefficients(spec),
                    spec.cpu_cores + len(spec.gpus))
        self.fast_rows = (FastNodeRows(self.coefficients, self._spec_rows, self.task_encoding,
                                       self.live) if kind == "node_scoring" else None)
        # How far each decision trusts the learned correction (placement.ldwp.evidence): the
        # same table and rule as the torch agent; None where the file has no prior or says
        # "full" trust. Per (node set, task type) the weights are fixed for this model.
        self.evidence = None
        settings = metadata.get("settings") or {}
        if self.q_prior == "completion" and settings.get("correction_trust",
                                                           "evidence") != "full":
            try:
                self.evidence = model_evidence(
                    metadata, self.task_encoding, self.spec_features,
                    float(settings.get("evidence_half", EVIDENCE_HALF)),
                    float(settings.get("evidence_bandwidth", BANDWIDTH)))
            except (EvidenceError, TypeError, ValueError) as exc:
                raise ModelFileError(f"the model's evidence table: {exc}") from None
        self._trust_cache: dict[tuple, np.ndarray] = {}
        self._pool_cache: dict[tuple, np.ndarray] = {}   # the same, as pooling matrices
        # How much of the learned correction decisions use, on top of the evidence weights
        # (set_correction_scale): 1 as trained, 0 the prior alone (an ablation, a replay).
        self.correction_scale = 1.0
        # the compiled path's, per (ids, type): (the first layer on the template, trust)
        self._template_parts: dict[tuple, tuple] = {}
        self.digest = hashlib.sha256(b"".join(w.tobytes() + b.tobytes() for w, b in layers)
                                     ).hexdigest()[:12]

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | Path, cluster: ClusterSpec | None = None,
                  costs=None) -> "NumpyLDWPPolicy":
        layers, metadata = load_model(path)
        return cls(layers, metadata, cluster, costs)

    @classmethod
    def from_bytes(cls, data: bytes, cluster: ClusterSpec | None = None, costs=None,
                   coefficients: dict | None = None) -> "NumpyLDWPPolicy":
        layers, metadata = load_model_bytes(data)
        return cls(layers, metadata, cluster, costs, coefficients)

    # -- the shared path: the torch agent's encoding, a plain forward pass --------------------
    def encode(self, observation: Observation) -> np.ndarray:
        """The network input exactly as the torch agent encodes it (float32)."""
        if self.kind == "paper":
            self._check_paper_nodes(observation.node_ids)
            return paper_vector(observation)
        estimates, units = task_estimates(observation, self.coefficients, self.live)
        return node_rows(observation, estimates, units, self._spec_rows, self.task_encoding)

    def q_values(self, state: np.ndarray) -> np.ndarray:
        """Q per node for an encoded ``state`` (from :meth:`encode`), computed in float64."""
        state = np.asarray(state, dtype=np.float64)
        if self.kind != "node_scoring":
            return self._forward(state[None, :], self._layers[0][0])[0]
        out = self._forward(state, self._own, state.mean(axis=0) @ self._context)
        if self.q_prior != "completion":
            return out[:, 0]
        if self.evidence is not None:
            out = pooled_correction(out, self.evidence.trust(state))
        if self.residual == "scaled":
            return scaled_completion_q(state, out)
        return out[:, 0] + completion_prior(state)

    def _forward(self, x: np.ndarray, first: np.ndarray, context=0.0) -> np.ndarray:
        """The MLP (ReLU between layers); ``context`` is added before the first bias."""
        hidden = x @ first
        hidden += context + self._layers[0][1]
        for weight_t, bias in self._layers[1:]:
            np.maximum(hidden, 0.0, out=hidden)
            hidden = hidden @ weight_t
            hidden += bias
        return hidden

    def check_nodes(self, ids) -> None:
        """ValueError when this model cannot decide for nodes ``ids`` (in order): a
        paper-layout model built for other nodes; any nodes do for the node-scoring ones."""
        if self.kind == "paper":
            self._check_paper_nodes(ids)

    def _check_paper_nodes(self, ids) -> None:
        if tuple(ids) != self._paper_nodes:
            raise ValueError(f"this paper-layout model was built for nodes "
                             f"{list(self._paper_nodes)} and sees {list(ids)}; transfer it first")

    # -- the router's path ------------------------------------------------------------------
    def fast_q_values(self, observation: Observation) -> tuple[tuple, np.ndarray, np.ndarray]:
        """(node ids, Q-values, network input) for ``observation``: what :meth:`decide` uses.
        The same Q-values as ``q_values(encode(observation))`` up to float rounding; a task
        type that is not a string (never sent by the router) takes that plain path."""
        return self._answer(observation)[:3]

    def _answer(self, observation: Observation) -> tuple:
        """:meth:`fast_q_values`, then the best node's and the runner-up's indices when the
        compiled call found them (None, None otherwise)."""
        if type(observation.task.app_id) is not str:
            state = self.encode(observation)
            return observation.node_ids, self.q_values(state), state, None, None
        if self.compiled is not None and self.compiled.failed is None:
            ids, node_set, template, fixed, slope, numbers, size = \
                self.fast_rows.compiled_inputs(observation)
            key = (ids, observation.task.app_id)   # what stays fixed: node set and task type
            fixed_part = self._template_parts.get(key)
            if fixed_part is None:  # the first layer on the template, and the trust weights
                base = self.compiled.template_part(template)   # None: it failed, numpy decides
                fixed_part = (base, self._trust(key, observation))
                if base is not None:
                    _remember(self._template_parts, key, fixed_part, TASK_TYPE_CACHE_SIZE)
            base, trust = fixed_part
            answer = None if base is None else self.compiled.q_values(
                numbers, fixed, template, task_size_feature(size), node_set.units, trust, base,
                slope, size if slope is not None else 0.0)
            if answer is not None:
                rows, q, best, runner = answer
                return ids, q, rows, best, runner
        encoded = self.fast_encode(observation)
        state = encoded[1] if self.kind == "node_scoring" else encoded[1][:-1]
        key = (encoded[0], observation.task.app_id)
        trust = self._trust(key, observation, state)
        pool = None if trust is None else _pool_of(self._pool_cache, key, trust)
        return (encoded[0], _fused_q(self._fused, encoded, self.kind, self.q_prior,
                                     self.residual, trust, pool), state, None, None)

    def set_correction_scale(self, scale: float) -> None:
        """Decide with ``scale`` times the learned correction (times its evidence weights):
        1.0 as trained, 0.0 the prior alone. Only for models with a prior (residual)."""
        if self.q_prior != "completion":
            raise ValueError("only a residual model (q_prior 'completion') has a correction")
        if not (isinstance(scale, (int, float)) and math.isfinite(scale) and 0.0 <= scale <= 1.0):
            raise ValueError(f"the correction scale must be in [0, 1], got {scale!r}")
        self.correction_scale = float(scale)
        self._trust_cache.clear()
        self._pool_cache.clear()
        self._template_parts.clear()   # holds the trust weights beside the template part

    def _trust(self, key: tuple, observation: Observation, state=None) -> np.ndarray | None:
        """The evidence weights per node (placement.ldwp.evidence) times the correction scale,
        or None (full trust): fixed per ``key`` (node ids, task type) for this model, so
        computed once (from ``state``, or encoded here)."""
        if self.evidence is None and self.correction_scale == 1.0:
            return None
        trust = self._trust_cache.get(key)
        if trust is None:
            if self.evidence is None:
                weights = np.ones(len(key[0]))
            else:
                if state is None:
                    encoded = self.fast_encode(observation)
                    state = encoded[1] if self.kind == "node_scoring" else encoded[1][:-1]
                weights = self.evidence.trust(state)
            trust = _remember(self._trust_cache, key, weights * self.correction_scale,
                              TASK_TYPE_CACHE_SIZE)
        return trust

    def fast_encode(self, observation: Observation) -> tuple:
        """The input of :meth:`fast_q` (node ids first, then the arrays): node_scoring
        ``FastNodeRows.encode``; paper (ids, x) with x = (one-hot, TSize, six fractions per
        node, 1: the biases' carrier). Never modified by fast_q, so it can be reused."""
        if self.kind == "node_scoring":
            return self.fast_rows.encode(observation)
        ids = tuple(map(_NODE_ID, observation.nodes))
        self._check_paper_nodes(ids)
        return ids, _paper_input(self._paper_templates, observation, len(ids))

    def fast_q(self, encoded: tuple, trust: np.ndarray | None = None) -> np.ndarray:
        """Q per node (float64) from :meth:`fast_encode`'s output: the network, then the
        residual's prior, with the biases folded into the products (:func:`_bias_carrying`);
        ``trust`` (per node, placement.ldwp.evidence) weights the learned correction."""
        return _fused_q(self._fused, encoded, self.kind, self.q_prior, self.residual, trust)

    def decide(self, observation: Observation) -> Decision:
        return _decision(*self._answer(observation), self.kind)
