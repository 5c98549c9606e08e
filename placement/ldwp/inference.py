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

Example::

    >>> policy = NumpyLDWPPolicy.from_file("ldwp.spmodel", cluster)        # doctest: +SKIP
    >>> policy.decide(observation).reason                                  # doctest: +SKIP
    'LDWP: highest Q -0.412 on tm_a, next tm_b -0.530'
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from placement.ldwp.features import (completion_prior, is_live_costs,
                                     node_row_size, node_rows, node_spec_features,
                                     paper_vector, scaled_completion_q, task_estimates)
from placement.ldwp.model_settings import read_model_settings
from placement.ldwp.modelfile import ModelFileError, load_model, parse_model
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, Observation, Policy

__all__ = ["NumpyLDWPPolicy", "load_model_bytes"]


def load_model_bytes(data: bytes) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict]:
    """:func:`load_model` for bytes (a download); the same checks, the same errors."""
    return parse_model(data, "downloaded model file")


class NumpyLDWPPolicy(Policy):
    """A frozen LDWP Q-network evaluated with numpy (greedy: no exploration on the router)."""

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
        self._layers = [(np.ascontiguousarray(w.T, dtype=np.float32), b.astype(np.float32))
                        for w, b in layers]
        if kind == "node_scoring":
            # [row, mean] @ W1.T == row @ W1a.T + mean @ W1b.T: split once so the hot path never
            # builds the concatenated (M, 2F) matrix.
            first = self._layers[0][0]
            half = node_row_size(self.task_encoding, self.spec_features)
            self._own, self._context = first[:half], first[half:]
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

    # -- inference --------------------------------------------------------------------------
    def encode(self, observation: Observation) -> np.ndarray:
        if self.kind == "paper":
            expected = self.metadata.get("nodes")
            if expected is not None and list(observation.node_ids) != list(expected):
                raise ValueError(f"this paper-layout model was built for nodes {expected} and "
                                 f"sees {list(observation.node_ids)}; transfer it first")
            return paper_vector(observation)
        estimates, units = task_estimates(observation, self.coefficients, self.live)
        return node_rows(observation, estimates, units, self._spec_rows, self.task_encoding)

    def q_values(self, state: np.ndarray) -> np.ndarray:
        layers = self._layers
        if self.kind == "node_scoring":
            hidden = state @ self._own + (state.mean(axis=0) @ self._context + layers[0][1])
            start = 1
        else:
            hidden = state[None, :] @ layers[0][0] + layers[0][1]
            start = 1
        for weight_t, bias in layers[start:]:
            np.maximum(hidden, 0.0, out=hidden)
            hidden = hidden @ weight_t + bias
        if self.kind != "node_scoring":
            return hidden[0]
        if self.q_prior == "completion":
            if self.residual == "scaled":
                return scaled_completion_q(state, hidden)
            return hidden[:, 0] + completion_prior(state)
        return hidden[:, 0]

    def decide(self, observation: Observation) -> Decision:
        state = self.encode(observation)
        q = self.q_values(state)
        ids = observation.node_ids
        if not np.isfinite(q).all():
            return self._decide_without_model(state, q, ids)
        index = int(np.argmax(q))
        if len(ids) > 1:
            ranked = np.argsort(-q)
            runner = f", next {ids[ranked[1]]} {q[ranked[1]]:.3f}"
        else:
            runner = ""
        return Decision(ids[index], f"LDWP: highest Q {q[index]:.3f} on {ids[index]}{runner}",
                        {n: float(v) for n, v in zip(ids, q)})

    def _decide_without_model(self, state: np.ndarray, q: np.ndarray, ids) -> Decision:
        """A decision when the network gives a non-finite Q (finite weights can still overflow
        on extreme inputs): never argmax over NaN (it picks the first node every time), but the
        MCT rule the residual model starts from, or the best finite Q of a paper network."""
        if self.kind == "node_scoring":
            scores, rule = completion_prior(state).astype(np.float64), "MCT prior"
        else:
            scores, rule = q.astype(np.float64), "best finite Q"
        # what is still not finite scores as "never": a finite number, so the reply stays JSON
        scores = np.where(np.isfinite(scores), scores, -1e30)
        index = int(np.argmax(scores))
        return Decision(ids[index], f"LDWP gave non-finite Q-values; {rule}: {ids[index]}",
                        {n: float(v) for n, v in zip(ids, scores)})
