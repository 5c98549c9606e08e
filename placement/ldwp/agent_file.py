"""The torch LDWP agent's side of its model file: the header a trained agent writes, and what
rebuilding one from a file reads, checks and restores.

Separate from :mod:`placement.ldwp.agent` (the DQN itself: acting and learning) because it is
about the file format: header keys as older files have them, the settings checked against the
file's arrays (:mod:`placement.ldwp.model_settings`, shared with the router's numpy loader),
and the :class:`~placement.ldwp.modelfile.ModelFileError` a broken file gets. It reads the
agent's settings and networks by attribute and imports nothing from ``placement.ldwp.agent``.
"""

from __future__ import annotations

from dataclasses import asdict

from placement.ldwp.evidence import EvidenceError, model_evidence
from placement.ldwp.features import task_encoding_metadata
from placement.ldwp.model_settings import ModelSettings, read_model_settings
from placement.ldwp.modelfile import ModelFileError, load_model
from placement.ldwp.networks import load_layers

__all__ = ["agent_metadata", "correction_evidence", "read_agent_file", "restore_trained_state"]


def agent_metadata(settings, node_ids, updates: int, evidence) -> dict:
    """The model file header of an agent with ``settings`` (``LDWPSettings``) on the nodes
    ``node_ids`` after ``updates`` training steps; ``evidence``: its evidence table, or None."""
    header = asdict(settings)
    header["hidden_sizes"] = list(settings.hidden_sizes)
    if settings.energy_weight == 0:  # off: the header files had before the setting
        for key in ("energy_weight", "energy_scale_j"):
            header.pop(key)
    if settings.learning_trust_rule == "per_node":  # the default: as files before the setting
        header.pop("learning_trust_rule")
    return {"kind": settings.network, "nodes": list(node_ids),
            "settings": header, "updates": updates,
            "task_types": task_encoding_metadata(settings.task_encoding),
            **({"evidence": evidence.to_metadata()} if evidence is not None else {}),
            "observation": "paper_vector" if settings.network == "paper" else "node_rows"}


def correction_evidence(settings, metadata: dict | None = None):
    """The table of examples learned per (node signature, task type) that decides how far an
    agent with ``settings`` trusts its learned correction (placement.ldwp.evidence): empty,
    or read from a model file's ``metadata``. None without a prior or with full trust."""
    s = settings
    if s.q_prior == "none" or s.network != "node_scoring" or s.correction_trust == "full":
        return None
    return model_evidence(metadata or {}, s.task_encoding, s.spec_features,
                          s.evidence_half, s.evidence_bandwidth)


def read_agent_file(path) -> tuple[list, dict, ModelSettings, dict]:
    """A model file's (layers, metadata, checked settings, ``LDWPSettings`` keyword
    arguments): the settings are checked against the arrays as the router's numpy loader
    checks them, and the network's own fields are taken from that check."""
    layers, metadata = load_model(path)
    model = read_model_settings(layers, metadata, str(path))
    settings = dict(metadata.get("settings") or {})
    settings.update(network=model.kind, q_prior=model.q_prior, residual=model.residual,
                    spec_features=model.spec_features, task_encoding=model.task_encoding)
    if "hidden_sizes" in settings:
        settings["hidden_sizes"] = tuple(settings["hidden_sizes"])
    return layers, metadata, model, settings


def restore_trained_state(agent, layers: list, metadata: dict, model: ModelSettings,
                          path) -> None:
    """Give an agent just built from :func:`read_agent_file`'s settings the file's weights
    (both networks), evidence table and update count. ModelFileError for a paper network
    built for other nodes, or weights or evidence that do not fit the agent."""
    if agent.settings.network == "paper" and list(agent.cluster.node_ids) != list(model.nodes):
        raise ModelFileError(f"{path} is a paper-layout model for nodes {list(model.nodes)}"
                             "; transfer it to this cluster first")
    try:
        load_layers(agent.q_network, layers)
    except ValueError as exc:
        raise ModelFileError(f"{path} {exc}") from None
    agent.target_network.load_state_dict(agent.q_network.state_dict())
    try:
        agent.evidence = correction_evidence(agent.settings, metadata)
    except EvidenceError as exc:
        raise ModelFileError(f"{path}: {exc}") from None
    updates = metadata.get("updates", 0)
    agent.updates = updates if isinstance(updates, int) and updates >= 0 else 0
