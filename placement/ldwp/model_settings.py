"""What a model file's metadata says its network is, checked against the file's arrays.

Both loaders (the torch agent's ``LDWPPolicy.from_file`` and the router's torch-free
``NumpyLDWPPolicy``) read a file's settings through :func:`read_model_settings`, so they accept
and refuse the same files: unknown values, combinations the agent cannot build, and metadata
that describes another network than the arrays hold (e.g. ``residual`` edited from "scaled" to
"additive": the last layer writes two log-factors, the additive network one Q-value) are refused
with :class:`~placement.ldwp.modelfile.ModelFileError` before a decision is made with them.

Example::

    >>> from placement.ldwp.modelfile import load_model                   # doctest: +SKIP
    >>> layers, metadata = load_model("ldwp.spmodel")                      # doctest: +SKIP
    >>> read_model_settings(layers, metadata).kind                         # doctest: +SKIP
    'node_scoring'
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement.ldwp.features import model_task_encoding, node_row_size, paper_vector_size
from placement.ldwp.modelfile import ModelFileError, check_layout
from placement.ldwp.settings import LDWPSettings

__all__ = ["ModelSettings", "read_model_settings", "KINDS", "MAX_MODEL_NODES"]

KINDS = ("paper", "node_scoring")
#: a paper-layout model lists its nodes; more than this is not a cluster but a hostile header
MAX_MODEL_NODES = 4096


@dataclass(frozen=True)
class ModelSettings:
    """The model-defining settings of a file, validated."""

    kind: str
    q_prior: str
    residual: str
    spec_features: bool
    task_encoding: str
    nodes: tuple[str, ...] | None

    @property
    def outputs_per_row(self) -> int:
        """What a node_scoring network writes per node: two log-factors for the scaled
        residual, one Q-value (or additive correction) otherwise."""
        return 2 if (self.q_prior == "completion" and self.residual == "scaled") else 1


def _choice(settings: dict, key: str, default, allowed: tuple) -> object:
    value = settings.get(key, default)
    if value not in allowed:
        raise ModelFileError(f"unknown {key}={value!r} in the model metadata (one of {allowed})")
    return value


def read_model_settings(layers: list[tuple[np.ndarray, np.ndarray]], metadata: dict,
                        name: str = "model file") -> ModelSettings:
    """The file's settings, after checking that they are valid and that ``layers`` are the
    network they describe (input width, output width, hidden sizes)."""
    kind = metadata.get("kind")
    if kind not in KINDS:
        raise ModelFileError(f"unknown LDWP network kind {kind!r} in the model metadata")
    settings = metadata.get("settings", {})
    if not isinstance(settings, dict):
        raise ModelFileError("the model metadata's settings are not an object")
    q_prior = _choice(settings, "q_prior", "none", ("none", "completion"))
    residual = _choice(settings, "residual", "additive", ("additive", "scaled"))
    spec_features = _choice(settings, "spec_features", False, (False, True))
    task_encoding = model_task_encoding(metadata)
    if kind == "paper" and (q_prior != "none" or spec_features or task_encoding != "catalog"):
        raise ModelFileError("a paper-layout model has no q_prior, spec features or hashed task "
                             "types; the metadata says otherwise")
    nodes = metadata.get("nodes")
    if nodes is not None:
        if not isinstance(nodes, list) or not 0 < len(nodes) <= MAX_MODEL_NODES or \
                not all(isinstance(n, str) and n for n in nodes):
            raise ModelFileError("the model metadata's nodes must be a list of node ids")
        nodes = tuple(nodes)
    hidden = settings.get("hidden_sizes")
    if hidden is not None and (not isinstance(hidden, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in hidden)):
        raise ModelFileError(f"invalid hidden_sizes {hidden!r} in the model metadata")
    try:  # every setting, by the same rules the torch agent builds with (placement.ldwp.settings)
        LDWPSettings(**{**settings, "network": kind, "q_prior": q_prior, "residual": residual,
                        "spec_features": spec_features, "task_encoding": task_encoding,
                        **({"hidden_sizes": tuple(hidden)} if hidden is not None else {})})
    except (TypeError, ValueError) as exc:   # an unknown key, a value out of its range
        raise ModelFileError(f"{name} has settings this streamplace cannot build: "
                             f"{str(exc)[:300]}") from None
    parsed = ModelSettings(kind, q_prior, residual, spec_features, task_encoding, nodes)
    if kind == "paper":
        if nodes is None:
            raise ModelFileError("a paper-layout model must list the nodes it was built for")
        check_layout(layers, kind, paper_vector_size(len(nodes)), len(nodes), hidden, name)
    else:
        check_layout(layers, kind, 2 * node_row_size(task_encoding, spec_features),
                     parsed.outputs_per_row, hidden, name)
    return parsed
