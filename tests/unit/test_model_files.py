"""Model files a careless or hostile hand has touched: the digest covers header and weights,
the array table must be the one save_model writes, weights must be finite, and both loaders
(torch agent, numpy router) check the settings against the arrays, refusing the same files."""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import pytest

from placement.ldwp.agent import LDWPPolicy, LDWPSettings
from placement.ldwp.inference import NumpyLDWPPolicy, load_model_bytes
from placement.ldwp.modelfile import (MAGIC, MAX_FILE_BYTES, ModelFileError, load_model,
                                      save_model)
from workload.estimates import CostModel
from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task

CLUSTER = ClusterSpec((NodeSpec("tm_a", 2, 8.0), NodeSpec("tm_b", 2, 8.0, cpu_speed=0.5)))
COSTS = CostModel(colocation=None)
SCALED = LDWPSettings(network="node_scoring", hidden_sizes=(8, 4), q_prior="completion",
                      residual="scaled", seed=1)


def _observation() -> Observation:
    nodes = (NodeState("tm_a", queue_depth=3, backlog_s=2.0), NodeState("tm_b"))
    return Observation(Task("t1", "face_recognition", 200_000), nodes, 0.0)


def _saved(tmp_path, settings=SCALED, name="m.spmodel"):
    agent = LDWPPolicy(CLUSTER, COSTS, settings)
    with __import__("torch").no_grad():  # a trained-looking model: not all-zero residuals
        for p in agent.q_network.parameters():
            p.add_(0.05)
    path = tmp_path / name
    agent.save(path)
    return path


def _split(data: bytes) -> tuple[dict, bytes]:
    (length,) = struct.unpack("<Q", data[8:16])
    return json.loads(data[16:16 + length]), data[16 + length:-32]


def _rewrite(path, edit_header=None, body=None, fix_digest=True) -> None:
    """Edit a file's header (and/or body) as a hand would; with ``fix_digest`` the forger
    also recomputes the SHA-256 so only the semantic checks can catch it."""
    header, old_body = _split(path.read_bytes())
    if edit_header:
        edit_header(header)
    encoded = json.dumps(header, sort_keys=True).encode()
    content = MAGIC + struct.pack("<Q", len(encoded)) + encoded + (body if body is not None
                                                                   else old_body)
    digest = hashlib.sha256(content).digest() if fix_digest else path.read_bytes()[-32:]
    path.write_bytes(content + digest)


LOADERS = {
    "numpy router": lambda path: NumpyLDWPPolicy.from_file(path, CLUSTER, COSTS),
    "torch agent": lambda path: LDWPPolicy.from_file(path, CLUSTER, COSTS),
    "downloaded bytes": lambda path: NumpyLDWPPolicy.from_bytes(path.read_bytes(), CLUSTER,
                                                                COSTS),
}


def _set_setting(key, value):
    return lambda h: h["metadata"]["settings"].__setitem__(key, value)


def _shift_offset(header):
    header["arrays"][1]["offset"] += 4


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("edit,fix_digest,message", [
    # the tester's cases: a setting edited in the header, an array offset shifted
    (_set_setting("residual", "additive"), False, "SHA-256"),
    (_set_setting("q_prior", "none"), False, "SHA-256"),
    (_shift_offset, False, "SHA-256"),
    # the same edits by someone who also rewrote the digest: the layout checks catch them
    (_set_setting("residual", "additive"), True, "outputs"),
    (_set_setting("q_prior", "none"), True, "outputs"),
    (_shift_offset, True, "must start at byte"),
    (_set_setting("hidden_sizes", [16, 4]), True, "hidden layers"),
    (_set_setting("task_encoding", "hashed"), True, "columns"),
    (_set_setting("residual", "quadratic"), True, "unknown residual"),
    (lambda h: h["metadata"].__setitem__("kind", "transformer"), True, "kind"),
    (lambda h: h["metadata"].__setitem__("settings", "scaled"), True, "not an object"),
    (lambda h: h.__setitem__("metadata", []), True, "metadata is not an object"),
    (lambda h: h["arrays"][0].__setitem__("shape", [-1, 40]), True, "invalid shape"),
    (lambda h: h["arrays"][0].__setitem__("shape", [True, 40]), True, "invalid shape"),
    (lambda h: h["arrays"][2].__setitem__("name", "layer7.weight"), True, "should be"),
    (lambda h: h.__setitem__("arrays", h["arrays"][:-1]), True, "weight and a bias"),
    (lambda h: h.__setitem__("format_version", 1), True, "format version"),
])
def test_edited_model_files_are_refused_by_every_loader(tmp_path, loader, edit, fix_digest,
                                                        message):
    path = _saved(tmp_path)
    LOADERS[loader](path)  # the intact file loads
    _rewrite(path, edit, fix_digest=fix_digest)
    with pytest.raises(ModelFileError, match=message):
        LOADERS[loader](path)


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("key, value", [
    # what an outside probe found the numpy loader took and the torch loader refused
    ("evidence_half", "NaN"), ("correction_trust", "bogus"), ("seed", "x"),
    ("replay_capacity", 10**12),
    # numbers no agent is built with, refused by both the same way
    ("gamma", 5.0), ("learning_rate", -1.0), ("batch_size", 0), ("buffer_size", 10**12),
    ("evidence_bandwidth", 1e200), ("double_q", "yes"), ("seed", -1),
])
def test_settings_the_agent_cannot_be_built_with_are_refused_by_every_loader(tmp_path, loader,
                                                                           key, value):
    path = _saved(tmp_path)
    _rewrite(path, _set_setting(key, float("nan") if value == "NaN" else value))
    with pytest.raises(ModelFileError, match="cannot build"):
        LOADERS[loader](path)


@pytest.mark.parametrize("loader", LOADERS)
def test_non_finite_weights_are_refused(tmp_path, loader):
    path = _saved(tmp_path)
    header, body = _split(path.read_bytes())
    values = np.frombuffer(body, dtype="<f4").copy()
    values[3] = np.nan
    _rewrite(path, body=values.tobytes())
    with pytest.raises(ModelFileError, match="non-finite"):
        LOADERS[loader](path)


def test_a_model_built_in_code_with_nan_weights_is_refused_by_the_router():
    agent = LDWPPolicy(CLUSTER, COSTS, SCALED)
    from placement.ldwp.networks import export_layers
    layers = export_layers(agent.q_network)
    layers[0][0][0, 0] = np.inf
    with pytest.raises(ModelFileError, match="non-finite"):
        NumpyLDWPPolicy(layers, agent.metadata(), CLUSTER, COSTS)


@pytest.mark.parametrize("damage,message", [
    (lambda d: b"SPMODEL1" + d[8:], "format 1"),
    (lambda d: d[:8] + struct.pack("<Q", 1 << 40) + d[16:], "header length"),
    (lambda d: d + b"\0", "SHA-256"),
    (lambda d: d[:-1], "SHA-256"),
    (lambda d: d[:30], "truncated"),
    (lambda d: b"", "magic"),
])
def test_damaged_bytes_are_refused_with_a_reason(tmp_path, damage, message):
    data = _saved(tmp_path).read_bytes()
    with pytest.raises(ModelFileError, match=message):
        load_model_bytes(damage(data))


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.spmodel"
    with open(path, "wb") as fh:
        fh.write(MAGIC)
        fh.truncate(MAX_FILE_BYTES + 1)  # sparse: no real disk use
    with pytest.raises(ModelFileError, match="limit"):
        load_model(path)


def test_the_header_is_covered_by_the_digest_byte_for_byte(tmp_path):
    path = _saved(tmp_path)
    data = bytearray(path.read_bytes())
    data[40] ^= 0x01  # one bit inside the JSON header
    path.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="SHA-256"):
        load_model(path)


def test_a_saved_model_round_trips_through_both_loaders_with_the_same_decisions(tmp_path):
    path = _saved(tmp_path)
    numpy_policy = NumpyLDWPPolicy.from_file(path, CLUSTER, COSTS)
    torch_policy = LDWPPolicy.from_file(path, CLUSTER, COSTS)
    obs = _observation()
    np.testing.assert_allclose(numpy_policy.q_values(numpy_policy.encode(obs)),
                               torch_policy.q_values(torch_policy.encode(obs)), rtol=1e-5,
                               atol=1e-6)
    layers, _ = load_model(path)
    save_model(tmp_path / "again.spmodel", layers, load_model(path)[1])
    assert load_model(tmp_path / "again.spmodel")[1] == load_model(path)[1]


def test_non_finite_q_values_fall_back_to_the_mct_prior_not_the_first_node():
    import dataclasses
    # full trust: the overflowing correction is used whatever the evidence (tests/unit/
    # test_evidence.py checks that no evidence gives the prior)
    agent = LDWPPolicy(CLUSTER, COSTS, dataclasses.replace(SCALED, correction_trust="full"))
    from placement.ldwp.networks import export_layers
    layers = [(w.copy(), b.copy()) for w, b in export_layers(agent.q_network)]
    layers[0] = (np.full_like(layers[0][0], 3e38), layers[0][1])  # finite, overflows to inf
    layers[-1] = (np.full_like(layers[-1][0], 3e38), layers[-1][1])
    policy = NumpyLDWPPolicy(layers, agent.metadata(), CLUSTER, COSTS)
    obs = _observation()   # tm_a has a backlog, tm_b is idle but half as fast
    assert not np.isfinite(policy.q_values(policy.encode(obs))).all()
    decision = policy.decide(obs)
    mct = NumpyLDWPPolicy(export_layers(agent.q_network), agent.metadata(), CLUSTER,
                          COSTS).decide(obs)  # the untrained scaled residual is MCT
    assert decision.node == mct.node == "tm_b"
    assert "non-finite" in decision.reason
    assert all(np.isfinite(v) for v in decision.scores.values())
