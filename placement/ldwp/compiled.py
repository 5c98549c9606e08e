"""The router's decision for node_scoring models compiled with numba: one call per decision.

Why: at 11 nodes the numpy fast path (``placement.ldwp.inference.FastNodeRows`` +
``NumpyLDWPPolicy.fast_q``) spends most of its time in about thirty numpy calls of a
microsecond or more each, not in arithmetic (issue 14, item 6: p99 <= 50 us per decision).
:func:`node_scoring_q` does the same encoding and the same network in one compiled function:
clamping, the log columns, the relative-speed column, the context mean, the layers (their matrix
products through numba's ``np.dot``, i.e. BLAS from scipy), the evidence weights and the residual
prior. The numbers equal the numpy path's up to float rounding of reordered sums (about 1e-15;
``tests/unit/test_decision_fast_path.py`` runs every test on both paths: Q-values to 1e-9 of a
float64 reference, rows equal to the shared float32 encoding).

numba is a well-kept compiler for exactly this (numeric Python loops); a hand-written C extension
would need a build step in every install. It is optional: without numba (or scipy, which numba's
``np.dot`` needs), or with ``STREAMPLACE_JIT=0`` in the environment, :func:`compiled_scorer`
answers None and the policy keeps the numpy path. numba is imported on first use, not with this
module. A compile or call that fails once switches
that policy back to numpy for good (:class:`CompiledNodeScoring`), so a missing LLVM feature can
cost speed, never a decision.

Example::

    >>> scorer = compiled_scorer(policy)                    # doctest: +SKIP
    >>> rows, q, best, runner = scorer.q_values(numbers, alone, template, size_feature,
    ...                                         units, trust)  # doctest: +SKIP
"""

from __future__ import annotations

import builtins
import logging
import math
import os
import sys

import numpy as np

__all__ = ["JIT_ENV", "jit_available", "compiled_scorer", "CompiledNodeScoring",
           "RESIDUAL_MODES", "decision_path"]

log = logging.getLogger(__name__)

#: environment variable: "0" turns the compiled path off (the numpy path decides)
JIT_ENV = "STREAMPLACE_JIT"
#: what the network's output means (``q_prior`` / ``residual`` in the model's settings)
RESIDUAL_MODES = {"plain": 0, "additive": 1, "scaled": 2}

#: numba's module once imported (None: not yet tried; False: not installed). Imported on the
#: first compiled_scorer call, not with this module: numba and scipy take about 0.7 s to import,
#: which a router that decides with another policy should not pay.
_numba = None


def _import_numba():
    global _numba
    if _numba is None:
        _print_findable()
        try:  # optional: numba and scipy (numba's np.dot calls scipy's BLAS)
            import numba
            import scipy.linalg  # noqa: F401  (numba needs it importable for np.dot)
            _numba = numba
        except Exception as exc:  # noqa: BLE001 - not installed, or refusing this interpreter
            if not isinstance(exc, ImportError):
                log.warning("numba did not import (%s: %s); numpy decides",
                            type(exc).__name__, exc)
            _numba = False
    return _numba or None


def _print_findable() -> None:
    """PyFlink's Python worker replaces ``builtins.print`` with a function of its module
    ``beam_sdk_worker_main`` that the module does not hold as an attribute; numba's import
    looks each typed builtin up in its ``__module__`` and fails with AttributeError. Make the
    replacement findable there (it changes nothing else)."""
    replaced = builtins.print
    module = sys.modules.get(getattr(replaced, "__module__", None) or "builtins")
    if module is not None and not hasattr(module, "print"):
        setattr(module, "print", replaced)


#: Columns of a node row that change from one task to the next: the task's size column, then
#: the node's first ``CHANGING_NODE_COLUMNS`` numbers (six utilisations, queue depth, backlog,
#: estimate, completion, relative speed). The rest of a row is the template's.
CHANGING_NODE_COLUMNS = 11


def jit_available() -> bool:
    """True when numba (and scipy) import and ``STREAMPLACE_JIT`` is not "0"."""
    return os.environ.get(JIT_ENV, "1").strip() != "0" and _import_numba() is not None


def _node_scoring_q(numbers, fixed, slope, size, size_feature, template, units, own, context,
                    base, weights, biases, trust, fparams, iparams):
    """(rows, Q, best, runner-up) for one observation; mirrors FastNodeRows.encode +
    NumpyLDWPPolicy.fast_q, and the decision's argmax (the first of equal Q-values, as
    ``list.index(max(...))``; the runner-up likewise among the others, -1 with one node).

    ``numbers`` (M, 9): each node's six utilisations, queue depth, backlog, speed factor
    (overwritten); ``fixed + slope * size`` (M,): the task's estimated seconds alone on each
    node (a learned cost model's estimates come as ``fixed``, with zero slopes); ``template``
    (M, width): the node set's and task type's constant columns; ``units`` (M,): parallel units;
    ``own``/``context`` (width, H1): the first layer split; ``base`` (M, H1): the first layer on
    the template alone, context and bias included (``CompiledNodeScoring.template_part``);
    ``weights``/``biases``: the later layers; ``trust`` (M,) or empty: the evidence weights
    (pooled over the nodes as ``placement.ldwp.evidence.pooled_correction`` does);
    ``fparams``: the clamps low (9) and high (9), the log divisors (4), the completion scale;
    ``iparams``: the size column, the first node column, the mode (RESIDUAL_MODES). (Packed:
    numba's dispatcher takes about 60 ns per argument, and the decision is measured in µs.)

    Only the size column and a node's first CHANGING_NODE_COLUMNS columns change from one task
    to the next; the rest of a row (type, spec, "exists") is the template's, whose share of the
    first layer is ``base``: the first layer reads those columns per task, not the whole row."""
    m, read = numbers.shape
    width = template.shape[1]
    size_column, first_column, mode = iparams[0], iparams[1], iparams[2]
    # numba does not check indices: refuse any shape the writes below would overrun
    if read != 9 or fparams.shape[0] != 2 * read + 5 or iparams.shape[0] != 3 or \
            fixed.shape[0] < m or slope.shape[0] < m or units.shape[0] < m or \
            template.shape[0] != m or \
            (trust.shape[0] and trust.shape[0] < m) or \
            width < first_column + CHANGING_NODE_COLUMNS + 1 or \
            size_column >= width or own.shape[0] != width or context.shape[0] != width or \
            context.shape[1] != own.shape[1] or base.shape[0] != m or \
            base.shape[1] != own.shape[1]:
        raise ValueError("the compiled decision got inputs of inconsistent shapes")
    low, high = fparams[:read], fparams[read:2 * read]
    log_divisors, completion_scale = fparams[2 * read:2 * read + 4], fparams[2 * read + 4]
    rows = template.copy()
    wait_estimate = np.empty((m, 2))
    fastest = np.inf
    for i in range(m):
        numbers[i, 8] *= fixed[i] + slope[i] * size   # speed factor x estimate alone
        for c in range(read):
            v = numbers[i, c]
            if not v >= low[c]:            # NaN reads as the lower bound (np.fmax)
                v = low[c]
            elif v > high[c]:
                v = high[c]
            rows[i, first_column + c] = v
        wait = rows[i, first_column + 7] / units[i]
        estimate = rows[i, first_column + 8]
        wait_estimate[i, 0] = wait
        wait_estimate[i, 1] = estimate
        rows[i, first_column + 9] = wait + estimate
        for c in range(4):                 # queue depth, backlog, estimate, completion
            column = first_column + 6 + c
            rows[i, column] = math.log1p(rows[i, column]) / log_divisors[c]
        rows[i, size_column] = size_feature
        if estimate > 0.0 and estimate < fastest:
            fastest = estimate
    if fastest < np.inf:                   # relative speed: 0 where the estimate is unknown
        for i in range(m):
            if wait_estimate[i, 1] > 0.0:
                rows[i, first_column + 10] = fastest / wait_estimate[i, 1]
    width1 = own.shape[1]
    hidden = base.copy()
    shared = np.zeros(width1)                # the context term, the same for every node
    for v in range(CHANGING_NODE_COLUMNS + 1):   # the size column, then the node's numbers
        column = size_column if v == 0 else first_column + v - 1
        mean = 0.0
        for i in range(m):
            x = rows[i, column]
            mean += x
            if x != 0.0:
                for j in range(width1):
                    hidden[i, j] += x * own[column, j]
        mean /= m
        if mean != 0.0:
            for j in range(width1):
                shared[j] += mean * context[column, j]
    for i in range(m):
        for j in range(width1):
            hidden[i, j] += shared[j]
    for layer in range(len(weights)):
        for i in range(m):
            for j in range(hidden.shape[1]):
                if hidden[i, j] < 0.0:
                    hidden[i, j] = 0.0
        hidden = np.dot(hidden, weights[layer])
        bias = biases[layer]
        for i in range(m):
            for j in range(hidden.shape[1]):
                hidden[i, j] += bias[j]
    # the correction each node uses, pooled over the nodes by their trust
    # (placement.ldwp.evidence.pooled_correction): top * own where every trust is the same
    top, total = 1.0, 0.0
    pooled_g, pooled_h = 0.0, 0.0
    if trust.shape[0]:
        top = 0.0
        for i in range(m):
            if trust[i] > top:
                top = trust[i]
            total += trust[i]
            pooled_g += trust[i] * hidden[i, 0]
            if mode == 2:
                pooled_h += trust[i] * hidden[i, 1]
        if total > 0.0:
            pooled_g /= total
            pooled_h /= total
    q = np.empty(m)
    for i in range(m):
        weight = trust[i] if trust.shape[0] else 1.0
        spare = top - weight if top > 0.0 else 0.0   # 0 when every node has the same trust
        if mode == 2:
            g = hidden[i, 0] * weight + spare * pooled_g
            h = hidden[i, 1] * weight + spare * pooled_h
            q[i] = -math.log1p(math.exp(g) * wait_estimate[i, 0]
                               + math.exp(h) * wait_estimate[i, 1])
        elif mode == 1:
            q[i] = hidden[i, 0] * weight + spare * pooled_g \
                - completion_scale * rows[i, first_column + 9]
        else:
            q[i] = hidden[i, 0]
    best, runner = 0, -1
    for i in range(1, m):
        if q[i] > q[best]:
            best = i
    for i in range(m):
        if i != best and (runner < 0 or q[i] > q[runner]):
            runner = i
    return rows, q, best, runner


#: the compiled _node_scoring_q, made on first use (numba compiles it on its first call, or loads
#: it from its cache: cache=True, so a new Python worker does not compile again; it keeps the
#: GIL, see _kernel)
_KERNEL = None


def _kernel():
    global _KERNEL
    if _KERNEL is None:
        # nogil=False on purpose: the kernel takes about 11 us, and giving the GIL up for it
        # means taking it back from whichever thread got it (PyFlink's gRPC threads, the model
        # refresher), which may keep it for the whole switch interval (5 ms). Measured with one
        # busy thread beside the router: decision p99 5.3 ms with nogil=True, 1.0 ms without.
        _KERNEL = _import_numba().njit(cache=True, nogil=False)(_node_scoring_q)
    return _KERNEL


class CompiledNodeScoring:
    """One node_scoring model's weights laid out for :func:`_node_scoring_q`.

    ``layers``: (weight (in, out), bias) per layer in float64, as NumpyLDWPPolicy keeps them;
    ``row_size``: the node row's width; ``mode``: a key of RESIDUAL_MODES.
    """

    def __init__(self, layers, row_size: int, mode: str, constants: dict):
        (first, first_bias), tail = layers[0], layers[1:]
        self.own = np.ascontiguousarray(first[:row_size])
        self.context = np.ascontiguousarray(first[row_size:])
        self.first_bias = np.ascontiguousarray(first_bias)
        # numba takes a tuple of equal-typed arrays (one compiled signature for any depth)
        self.weights = tuple(np.ascontiguousarray(w) for w, _ in tail)
        self.biases = tuple(np.ascontiguousarray(b) for _, b in tail)
        if not self.weights:
            raise ValueError("the compiled path needs at least one hidden layer")
        self.mode = RESIDUAL_MODES[mode]
        self.constants = constants
        c = constants
        self.fparams = np.concatenate([np.asarray(c["low"], dtype=np.float64),
                                       np.asarray(c["high"], dtype=np.float64),
                                       np.asarray(c["log_divisors"], dtype=np.float64),
                                       [float(c["completion_scale"])]])
        self.iparams = np.array([c["size_column"], c["first_column"], self.mode], dtype=np.int64)
        self.failed: str | None = None   # why the compiled path was given up, if it was

    def template_part(self, template: np.ndarray) -> np.ndarray | None:
        """The first layer on ``template`` alone (M, H1): ``template @ own``, plus the template's
        mean through ``context`` and the bias (the varying columns read as 0); None when it
        cannot be computed (the reason in ``failed``). Fixed per node set and task type for
        this model, so a caller keeps it (:meth:`q_values`'s ``base``)."""
        c = self.constants
        try:
            if np.ndim(template) != 2 or np.shape(template)[1] != self.own.shape[0]:
                raise ValueError("the compiled decision got inputs of inconsistent shapes")
            fixed = np.array(template, dtype=np.float64)
            fixed[:, c["size_column"]] = 0.0
            fixed[:, c["first_column"]:c["first_column"] + CHANGING_NODE_COLUMNS] = 0.0
            return fixed @ self.own + (fixed.mean(axis=0) @ self.context + self.first_bias)
        except Exception as exc:  # noqa: BLE001 - the numpy path decides instead
            self.failed = f"{type(exc).__name__}: {exc}"
            return None

    def q_values(self, numbers, alone, template, size_feature, units, trust, base=None,
                 slope=None, size=0.0):
        """(rows, Q, best, runner-up) or None when the compiled call failed (the reason in
        ``failed``); best and runner-up are node indices (``_node_scoring_q``);
        ``alone``: the task's estimated seconds alone per node, or with ``slope`` its fixed
        part (the estimate is ``alone + slope * size``, computed in the kernel); ``base``:
        :meth:`template_part` of ``template`` (computed here when not given)."""
        if base is None:
            base = self.template_part(template)
            if base is None:
                return None
        try:
            return _kernel()(numbers, alone, _zeros(len(alone)) if slope is None else slope,
                             float(size), size_feature, template, units, self.own,
                             self.context, base, self.weights, self.biases,
                             _NO_TRUST if trust is None else trust, self.fparams, self.iparams)
        except Exception as exc:  # noqa: BLE001 - any compile/runtime failure: use numpy
            self.failed = f"{type(exc).__name__}: {exc}"
            return None


_NO_TRUST = np.empty(0)
_ZEROS: dict[int, np.ndarray] = {}


def _zeros(length: int) -> np.ndarray:
    """A zero slope per node, one per length (the kernel never writes it; not marked read
    only, which numba would compile as another signature)."""
    zeros = _ZEROS.get(length)
    if zeros is None:
        zeros = _ZEROS[length] = np.zeros(length)
    return zeros


def compiled_scorer(layers, row_size: int, q_prior: str | None, residual: str | None,
                    constants: dict) -> CompiledNodeScoring | None:
    """A :class:`CompiledNodeScoring` for a node_scoring model, or None where the compiled
    path does not apply (numba missing or turned off, no hidden layer, or an output layout it
    does not know)."""
    if len(layers) < 2 or not jit_available():
        return None
    if q_prior != "completion":
        mode = "plain"
    elif residual == "scaled":
        mode = "scaled"
    else:
        mode = "additive"
    out = layers[-1][0].shape[1]
    if (mode == "scaled" and out != 2) or (mode != "scaled" and out < 1):
        return None
    try:
        _kernel()   # numba refuses cache=True where no cache folder is writable, for one
    except Exception as exc:  # noqa: BLE001 - any refusal: the numpy path decides
        log.warning("the compiled decision is off (%s: %s); numpy decides", type(exc).__name__,
                    exc)
        return None
    return CompiledNodeScoring(layers, row_size, mode, constants)


def decision_path(policy) -> str:
    """Which path ``policy.decide`` takes, for stats and benchmarks: "compiled", "numpy", or
    "numpy (compiled failed: <why>)" (any policy: those without a compiled path say numpy)."""
    scorer = getattr(policy, "compiled", None)
    if scorer is None:
        return "numpy"
    return "compiled" if scorer.failed is None else f"numpy (compiled failed: {scorer.failed})"


def warm_up() -> str:
    """Compile the kernel once on a tiny input, so numba's cache holds it and every router
    process after this loads it (about 0.4 s) instead of compiling (seconds of CPU, on a
    machine that is also running the job). ``make install`` runs this. Returns what happened."""
    if not jit_available():
        return "numba is not available or STREAMPLACE_JIT=0: routers decide on the numpy path"
    width = 13   # the size column, then a node's 12 columns from column 1
    layers = [(np.zeros((2 * width, 2)), np.zeros(2)), (np.zeros((2, 2)), np.zeros(2))]
    constants = {"size_column": 0, "first_column": 1, "low": np.zeros(9), "high": np.ones(9),
                 "log_divisors": np.ones(4), "completion_scale": 10.0}
    scorer = compiled_scorer(layers, width, "completion", "scaled", constants)
    answer = None if scorer is None else scorer.q_values(
        np.zeros((1, 9)), np.ones(1), np.zeros((1, width)), 0.0, np.ones(1), None)
    if answer is None:
        reason = scorer.failed if scorer is not None else "the compiler refused"
        return f"the compiled decision is off ({reason}): routers decide on the numpy path"
    return "the compiled decision is ready (numba's cache holds it)"


if __name__ == "__main__":   # python -m placement.ldwp.compiled: never fails an install
    try:
        print(warm_up())
    except Exception as exc:  # noqa: BLE001
        print(f"the compiled decision is off ({type(exc).__name__}: {exc})")
