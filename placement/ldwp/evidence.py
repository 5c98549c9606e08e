"""How much a residual LDWP model knows about a node and task type: its trust in its correction.

The residual LDWP variant decides with Q = prior (MCT's estimated completion) + a learned
correction. A correction learned on some node types says nothing reliable about a node type it
never saw: a node three times faster than any in training, a GPU model it never met, no GPU at
all. So the correction is trusted only as far as the model has evidence for that kind of node
and task type::

    evidence(row) = sum over recorded (node signature s, task type a) of
                    count(s, a) * exp(-(|spec(row) - s| / bandwidth)^2)   for a = the row's type
    trust(row)    = evidence / (evidence + evidence_half)

and the decision uses, per node, the correction pooled by :func:`pooled_correction`::

    T = max over the decision's nodes of trust
    pooled = sum_j trust_j * correction_j / sum_j trust_j
    used_i = trust_i * correction_i + (T - trust_i) * pooled         (0 when T = 0)

(the scaled residual's log-factors g, h; the additive one's correction). With no evidence for
any node the model decides exactly as its prior, MCT; with plenty for all it decides as
trained; where every node has the same trust this is ``trust * correction``, as before
2026-12-06. A node the model has no evidence for gets the trusted nodes' mean correction, not
none: why (measured 2026-12-06): the corrections the shipped model learned on the paper cluster
are large and mostly common to every node (the prior underestimates how long work waits), so a
node decided on its bare prior looked several times cheaper than the nodes beside it. One
V100 node (never seen in training) added to the paper cluster put LDWP 16.5% behind MCT (12.9%
ahead, pooled), with no more tasks sent to the V100 than MCT sent (docs/results-simulator.md,
"Trained models
that ship"; ``benchmarks/trust_pooling.py``). Shrinking an unknown node's correction toward
the others' (partial pooling) instead of toward zero keeps every node's Q on one scale.
Training is unchanged (the network fits the whole correction); every example the agent learns
from is recorded here, so online learning on a new cluster raises the trust of its nodes as
outcomes come in.

A node's signature is its static spec columns in the encoded row (``node_spec_features``:
cores, GPUs, GPU memory, host memory, CPU speed, mean GPU speed, all scaled to about [0, 1]);
the task type is the row's type code (catalog one-hot index, or the hashed code). Models without
spec columns key evidence by task type only.

The table travels in the model file's metadata (``"evidence"``), bounded and validated on load
(finite, non-negative counts; at most ``MAX_SIGNATURES`` entries): a hostile file cannot make a
router trust a correction it has no evidence for beyond what its counts say.

Example::

    >>> import numpy as np
    >>> evidence = Evidence(spec_columns=np.arange(2, 4), type_columns=np.arange(0, 2))
    >>> seen = np.array([1.0, 0.0, 0.3, 0.5]); unseen = np.array([1.0, 0.0, 0.9, 0.5])
    >>> for _ in range(50):
    ...     evidence.record(seen)
    >>> [round(float(t), 2) for t in evidence.trust(np.stack([seen, unseen]))]
    [0.5, 0.0]
"""

from __future__ import annotations

import math

import numpy as np

from placement.ldwp.features import APPS, NODE_ROW_SIZE, NODE_SPEC_SIZE, TYPE_HASH_SIZE

__all__ = ["Evidence", "EvidenceError", "pooled_correction", "pooling_matrix",
           "per_node_correction",
           "trusted_correction", "TRUST_RULES", "MAX_SIGNATURES", "EVIDENCE_HALF",
           "BANDWIDTH", "BANDWIDTH_RANGE", "EVIDENCE_HALF_RANGE", "evidence_columns",
           "model_evidence"]

#: examples of a (node signature, task type) at which the correction gets half weight
EVIDENCE_HALF = 50.0
#: distance in the scaled spec columns at which a recorded signature's evidence falls to 1/e:
#: 0.05 tells apart 4 and 8 cores, 8 and 16 GB of GPU memory, CPU speed 1 and 1.1
BANDWIDTH = 0.05
#: plausible settings, what a model file may say (outside them: refused): a bandwidth over 1 calls
#: every node in the scaled [0, 1] columns seen, one far under the rounding (``DIGITS``) no node
#: ever; and squaring a huge one overflowed on every decision
BANDWIDTH_RANGE = (1e-4, 1.0)
EVIDENCE_HALF_RANGE = (1e-3, 1e9)
#: most (signature, type) entries kept (a model file listing more is refused)
MAX_SIGNATURES = 4096
#: most examples one entry may claim (about 30 years of one task a second)
MAX_COUNT = 1e9
DIGITS = 4  # signatures are rounded so float noise does not split one node type in two


def pooled_correction(correction: np.ndarray, trust: np.ndarray) -> np.ndarray:
    """The learned correction each node's decision uses (module docstring): ``correction``
    (M, C), one row per node of one decision; ``trust`` (M,) in [0, 1]. A new float64 array.

    >>> pooled_correction(np.array([[2.0], [4.0], [9.0]]), np.array([1.0, 1.0, 0.0]))[:, 0]
    array([2., 4., 3.])
    >>> pooled_correction(np.array([[2.0], [4.0]]), np.array([0.5, 0.5]))[:, 0]
    array([1., 2.])
    >>> pooled_correction(np.array([[2.0], [4.0]]), np.zeros(2))[:, 0]
    array([0., 0.])
    """
    correction = np.asarray(correction, dtype=np.float64)
    trust = np.asarray(trust, dtype=np.float64)
    top = float(trust.max()) if trust.size else 0.0
    if not top > 0.0:
        return np.zeros_like(correction)
    if float(trust.min()) == top:   # one trust for all (a cluster of one node type): no pooling
        return top * correction
    pooled = (trust @ correction) / trust.sum()
    return trust[:, None] * correction + (top - trust)[:, None] * pooled[None, :]


def pooling_matrix(trust: np.ndarray) -> np.ndarray:
    """The (M, M) matrix ``P`` with ``P @ correction == pooled_correction(correction, trust)``
    (up to float rounding): the pooling is linear in the correction, and ``trust`` is fixed per
    (node set, task type) for one model, so the router's numpy path builds ``P`` once and then
    pools with one product instead of about ten small numpy calls per decision.

    >>> pooling_matrix(np.array([1.0, 1.0, 0.0])) @ np.array([[2.0], [4.0], [9.0]])
    array([[2.],
           [4.],
           [3.]])
    """
    trust = np.asarray(trust, dtype=np.float64)
    top = float(trust.max()) if trust.size else 0.0
    if not top > 0.0:
        return np.zeros((trust.size, trust.size))
    if float(trust.min()) == top:
        return top * np.eye(trust.size)
    # row i: trust_i at i, plus (top - trust_i) times the trust-weighted mean of every row
    return np.diag(trust) + np.outer(top - trust, trust / trust.sum())


def per_node_correction(correction: np.ndarray, trust: np.ndarray) -> np.ndarray:
    """Each node's own correction times its own trust: the rule before 2026-12-06, still the one
    a learning agent acts on by default (``LDWPSettings.learning_trust_rule``), because the
    shipped files were trained with it and must rebuild bit for bit.

    >>> per_node_correction(np.array([[2.0], [4.0], [9.0]]), np.array([1.0, 1.0, 0.0]))[:, 0]
    array([2., 4., 0.])
    """
    correction = np.asarray(correction, dtype=np.float64)
    return np.asarray(trust, dtype=np.float64)[:, None] * correction


#: how a decision weighs its nodes' learned corrections by their trust
TRUST_RULES = {"pooled": pooled_correction, "per_node": per_node_correction}


def trusted_correction(correction: np.ndarray, trust: np.ndarray,
                       rule: str = "pooled") -> np.ndarray:
    """The correction each node's decision uses under ``rule`` (a :data:`TRUST_RULES` name)."""
    try:
        return TRUST_RULES[rule](correction, trust)
    except KeyError:
        raise ValueError(f"trust rule must be one of {sorted(TRUST_RULES)}, got {rule!r}") \
            from None


class EvidenceError(ValueError):
    """A model file's evidence table is malformed or implausible."""


class Evidence:
    """Counts of learned examples per (node signature, task type), and the trust they give."""

    def __init__(self, spec_columns: np.ndarray | None, type_columns: np.ndarray,
                 evidence_half: float = EVIDENCE_HALF, bandwidth: float = BANDWIDTH) -> None:
        low, high = EVIDENCE_HALF_RANGE
        if not (math.isfinite(evidence_half) and low <= evidence_half <= high):
            raise ValueError(f"evidence_half must be a number in [{low:g}, {high:g}], got "
                             f"{evidence_half!r}")
        low, high = BANDWIDTH_RANGE
        if not (math.isfinite(bandwidth) and low <= bandwidth <= high):
            raise ValueError(f"bandwidth must be a number in [{low:g}, {high:g}], got "
                             f"{bandwidth!r}")
        self.spec_columns, self.type_columns = spec_columns, type_columns
        self.evidence_half, self.bandwidth = float(evidence_half), float(bandwidth)
        self.counts: dict[tuple[tuple[float, ...], tuple[float, ...]], float] = {}
        self._arrays = None  # (signatures (K, S), type codes (K, T), counts (K,)) for trust()

    # -- keys -------------------------------------------------------------------------------
    def _key(self, row: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
        spec = () if self.spec_columns is None else \
            tuple(round(float(v), DIGITS) for v in row[self.spec_columns])
        return spec, tuple(round(float(v), DIGITS) for v in row[self.type_columns])

    # -- learning ---------------------------------------------------------------------------
    def record(self, row: np.ndarray, weight: float = 1.0) -> None:
        """One learned example on the node and task type of ``row`` (an encoded node row)."""
        if not np.all(np.isfinite(row)):
            return  # never count what cannot have been learned from
        key = self._key(row)
        if key not in self.counts and len(self.counts) >= MAX_SIGNATURES:
            return  # bounded: a flood of distinct node types stops adding entries
        self.counts[key] = min(MAX_COUNT, self.counts.get(key, 0.0) + weight)
        self._arrays = None

    # -- deciding ---------------------------------------------------------------------------
    def trust(self, rows: np.ndarray) -> np.ndarray:
        """Per row, the weight in [0, 1] of the learned correction (0: the prior alone)."""
        if not self.counts:
            return np.zeros(len(rows))
        if self._arrays is None:
            keys = list(self.counts)
            self._arrays = (np.array([k[0] for k in keys], dtype=np.float64).reshape(len(keys), -1),
                            np.array([k[1] for k in keys], dtype=np.float64),
                            np.array([self.counts[k] for k in keys], dtype=np.float64))
        signatures, types, counts = self._arrays
        row_types = np.round(np.asarray(rows[:, self.type_columns], dtype=np.float64), DIGITS)
        same_type = np.all(np.abs(row_types[:, None, :] - types[None, :, :]) < 1e-6, axis=2)
        if self.spec_columns is None:
            weights = same_type.astype(np.float64)
        else:
            specs = np.asarray(rows[:, self.spec_columns], dtype=np.float64)
            distance2 = np.sum((specs[:, None, :] - signatures[None, :, :]) ** 2, axis=2)
            weights = np.exp(-distance2 / self.bandwidth ** 2) * same_type
        evidence = np.nan_to_num(weights @ counts, nan=0.0)
        return evidence / (evidence + self.evidence_half)

    # -- model files ------------------------------------------------------------------------
    def to_metadata(self) -> dict:
        return {"evidence_half": self.evidence_half, "bandwidth": self.bandwidth,
                "entries": [[list(spec), list(code), count]
                            for (spec, code), count in sorted(self.counts.items())]}

    @classmethod
    def from_metadata(cls, data, spec_columns: np.ndarray | None,
                      type_columns: np.ndarray) -> "Evidence":
        """The table a model file carries; :class:`EvidenceError` for anything malformed."""
        spec_size = 0 if spec_columns is None else len(spec_columns)
        type_size = len(type_columns)
        if not isinstance(data, dict):
            raise EvidenceError("evidence must be a mapping")
        entries = data.get("entries")
        if not isinstance(entries, list) or len(entries) > MAX_SIGNATURES:
            raise EvidenceError(f"evidence entries must be a list of at most {MAX_SIGNATURES}")
        try:
            evidence = cls(spec_columns, type_columns, float(data.get("evidence_half")),
                           float(data.get("bandwidth")))
        except (TypeError, ValueError) as exc:
            raise EvidenceError(f"evidence settings: {exc}") from None
        for entry in entries:
            if not (isinstance(entry, list) and len(entry) == 3):
                raise EvidenceError("each evidence entry is [spec, type code, count]")
            spec, code, count = entry
            if not (isinstance(spec, list) and len(spec) == spec_size
                    and isinstance(code, list) and len(code) == type_size):
                raise EvidenceError(f"an evidence entry's signature has the wrong size "
                                    f"({len(spec) if isinstance(spec, list) else '?'} spec, "
                                    f"{len(code) if isinstance(code, list) else '?'} type)")
            numbers = [*spec, *code, count]
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                       and math.isfinite(v) for v in numbers):
                raise EvidenceError("evidence entries must hold finite numbers")
            if not 0 <= count <= MAX_COUNT or any(abs(v) > 1e3 for v in [*spec, *code]):
                raise EvidenceError(f"implausible evidence entry {entry!r}"[:200])
            key = (tuple(round(float(v), DIGITS) for v in spec),
                   tuple(round(float(v), DIGITS) for v in code))
            evidence.counts[key] = float(count)
        return evidence


def evidence_columns(task_encoding: str, spec_features: bool) -> tuple[np.ndarray | None,
                                                                       np.ndarray]:
    """(spec columns or None, type columns) of a ``node_rows`` row of this encoding."""
    hashed = TYPE_HASH_SIZE if task_encoding == "hashed" else 0
    types = np.r_[0:len(APPS), NODE_ROW_SIZE:NODE_ROW_SIZE + hashed]
    spec = np.arange(NODE_ROW_SIZE + hashed, NODE_ROW_SIZE + hashed + NODE_SPEC_SIZE) \
        if spec_features else None
    return spec, types


def model_evidence(metadata: dict, task_encoding: str, spec_features: bool,
                   evidence_half: float = EVIDENCE_HALF,
                   bandwidth: float = BANDWIDTH) -> "Evidence":
    """The evidence table of a model file's metadata; an empty one (the prior alone, until the
    agent learns) when the file has none; :class:`EvidenceError` when it is malformed."""
    spec, types = evidence_columns(task_encoding, spec_features)
    data = metadata.get("evidence")
    if data is None:
        return Evidence(spec, types, evidence_half, bandwidth)
    return Evidence.from_metadata(data, spec, types)
