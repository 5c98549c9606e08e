"""Hostile model files: whatever is wrong with an LDWP or NCF file (forged with a valid digest,
so only the content checks can catch it), the loaders raise their own error type with a
reason, never AttributeError, TypeError, plain ValueError or RuntimeError; and the placement
service neither answers 500 on /decide nor crashes at start-up because of such a file."""

from __future__ import annotations

import hashlib
import json
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest

from interference.ncf.modelfile import MAGIC as NCF_MAGIC
from interference.ncf.modelfile import CompletionModelFileError, parse_completion_model
from placement.ldwp.agent import LDWPPolicy, LDWPSettings
from placement.ldwp.inference import NumpyLDWPPolicy
from placement.ldwp.modelfile import MAGIC, ModelFileError, parse_model
from placement.service.app import PlacementService
from placement.service.settings import ServiceSettings
from streamplace.cluster_spec import LocalClusterSpec
from workload.estimates import CostModel
from workload.model import ClusterSpec, NodeSpec

with warnings.catch_warnings():  # starlette asks for httpx2; httpx works (FastAPI's docs)
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ClusterSpec((NodeSpec("tm_a", 2, 8.0), NodeSpec("tm_b", 1, 8.0),
                       NodeSpec("tm_c", 1, 8.0)))
COSTS = CostModel(colocation=None)
SPEC = LocalClusterSpec.model_validate({"taskmanagers": [
    {"id": "tm_a", "cpu_cores": 2, "slots": 4}, {"id": "tm_b", "cpu_cores": 1, "slots": 2},
    {"id": "tm_c", "cpu_cores": 1, "slots": 2}]})
HUGE_INT = "7" * 5000   # over Python's 4300-digit int/str conversion limit


def _split(data: bytes) -> tuple[str, bytes]:
    (length,) = struct.unpack("<Q", data[8:16])
    return data[16:16 + length].decode(), data[16 + length:-32]


def _build(magic: bytes, header: str, body: bytes) -> bytes:
    """A file with this header text and body and a matching digest (a forger's file)."""
    encoded = header.encode()
    content = magic + struct.pack("<Q", len(encoded)) + encoded + body
    return content + hashlib.sha256(content).digest()


def _edit(data: bytes, magic: bytes, edit) -> bytes:
    header, body = _split(data)
    parsed = json.loads(header)
    edit(parsed["metadata"])
    return _build(magic, json.dumps(parsed, sort_keys=True), body)


def _raw_edit(data: bytes, magic: bytes, edit) -> bytes:
    """The file with ``edit(header text)`` applied to its header text (for what JSON dumps
    cannot write, such as a 5000-digit integer)."""
    header, body = _split(data)
    return _build(magic, edit(header), body)


@pytest.fixture(scope="module")
def ldwp_file(tmp_path_factory) -> bytes:
    agent = LDWPPolicy(CLUSTER, COSTS, LDWPSettings(network="node_scoring", hidden_sizes=(8, 4),
                                                    seed=1))
    path = tmp_path_factory.mktemp("ldwp") / "m.spmodel"
    agent.save(path)
    return path.read_bytes()


def _set(key, value):
    return lambda metadata: metadata.__setitem__(key, value)


def _add_huge_int(header: str) -> str:
    return header.replace('"metadata": {', '"metadata": {"zz": %s, ' % HUGE_INT, 1)


# -- LDWP ---------------------------------------------------------------------------------------
LDWP_CASES = [
    # (label, forge(bytes) -> bytes, a word of the reason)
    ("task_types a list", lambda d: _edit(d, MAGIC, _set("task_types", [1, 2])), "task_types"),
    ("task_types a string", lambda d: _edit(d, MAGIC, _set("task_types", "x")), "task_types"),
    ("task_types a number", lambda d: _edit(d, MAGIC, _set("task_types", 5)), "task_types"),
    ("task_types other columns", lambda d: _edit(d, MAGIC, _set("task_types", {"catalog": ["x"]})),
     "differ"),
    ("task_encoding a list", lambda d: _edit(
        d, MAGIC, lambda m: m["settings"].__setitem__("task_encoding", ["hashed"])),
     "task_encoding"),
    ("a 5000-digit int in the header", lambda d: _raw_edit(d, MAGIC, _add_huge_int),
     "corrupted header"),
    ("a 5000-digit version", lambda d: _raw_edit(
        d, MAGIC, lambda h: h.replace('"metadata": {', '"metadata": {"version": %s, ' % HUGE_INT,
                                      1)), "4300 digits"),
]


@pytest.mark.parametrize("loader", ["numpy bytes", "torch file"])
@pytest.mark.parametrize("label,forge,reason", LDWP_CASES, ids=[c[0] for c in LDWP_CASES])
def test_forged_ldwp_files_raise_model_file_error(ldwp_file, tmp_path, loader, label, forge,
                                                  reason):
    data = forge(ldwp_file)
    with pytest.raises(ModelFileError, match=reason):
        if loader == "numpy bytes":
            NumpyLDWPPolicy.from_bytes(data, CLUSTER, COSTS)
        else:
            path = tmp_path / "forged.spmodel"
            path.write_bytes(data)
            LDWPPolicy.from_file(path, CLUSTER, COSTS)


@pytest.mark.parametrize("data,reason", [(None, "NoneType"), ("SPMODEL2xxxx", "str"),
                                         (12, "int")])
def test_model_bytes_of_the_wrong_type_raise_model_file_error(data, reason):
    with pytest.raises(ModelFileError, match=reason):
        parse_model(data)


def test_a_sound_ldwp_file_still_loads_from_bytes_bytearray_and_memoryview(ldwp_file):
    for data in (ldwp_file, bytearray(ldwp_file), memoryview(ldwp_file)):
        policy = NumpyLDWPPolicy.from_bytes(data, CLUSTER, COSTS)
        assert policy.kind == "node_scoring"


# -- NCF ----------------------------------------------------------------------------------------
MF = ROOT / "interference" / "models" / "matrix_factorization_k80.spncf"
PAPER = ROOT / "interference" / "models" / "paper_ncf_k80.spncf"


def _setting(key, value):
    return lambda data: _edit(data, NCF_MAGIC, lambda m: m["settings"].__setitem__(key, value))


NCF_CASES = [
    # (label, shipped file, forge, a word of the reason)
    ("MF clip of one value", MF, _setting("clip", [1]), "clip"),
    ("MF clip reversed", MF, _setting("clip", [1.0, 0.0]), "low < high"),
    ("MF negative init_std", MF, _setting("init_std", -1), "init_std"),
    ("MF huge init_std", MF, _setting("init_std", 1e308), "init_std"),
    ("MF negative l2", MF, _setting("l2", -1.0), "l2"),
    ("MF huge learning rate", MF, _setting("learning_rate", 1e308), "learning_rate"),
    ("MF negative online rate", MF, _setting("online_learning_rate", -1.0),
     "online_learning_rate"),
    ("MF validation share 5", MF, _setting("validation_share", 5.0), "validation_share"),
    ("MF endless online steps", MF, _setting("online_steps", 2 ** 31 - 1), "online_steps"),
    ("paper huge online rate", PAPER, _setting("online_learning_rate", 1e308),
     "online_learning_rate"),
    ("paper huge prior weight candidate", PAPER, _setting("prior_weight_candidates", [1e300]),
     "prior_weight_candidates"),
    ("MF 5000-digit int", MF, lambda d: _raw_edit(d, NCF_MAGIC, _add_huge_int),
     "corrupted header"),
    ("paper 5000-digit int", PAPER, lambda d: _raw_edit(d, NCF_MAGIC, _add_huge_int),
     "4300 digits"),
]


@pytest.mark.parametrize("label,path,forge,reason", NCF_CASES, ids=[c[0] for c in NCF_CASES])
def test_forged_ncf_files_raise_completion_model_file_error(label, path, forge, reason):
    with pytest.raises(CompletionModelFileError, match=reason):
        parse_completion_model(forge(path.read_bytes()), "forged")


def test_an_error_rebuilding_the_model_is_refused_with_its_reason(monkeypatch):
    """A failure no check foresaw (here torch refusing a setting) is still the file's error."""
    from interference.ncf.matrix_factorization import MatrixFactorization

    def broken(self, *shape, output_bias):
        raise RuntimeError("normal expects std >= 0.0")
    monkeypatch.setattr(MatrixFactorization, "build_network", broken)
    with pytest.raises(CompletionModelFileError, match="cannot be rebuilt.*RuntimeError"):
        parse_completion_model(MF.read_bytes(), "mf")


@pytest.mark.parametrize("path", [MF, PAPER], ids=["matrix_factorization", "paper_ncf"])
def test_the_shipped_ncf_files_still_load(path):
    model, _ = parse_completion_model(path.read_bytes(), path.name)
    assert np.isfinite(model.complete()).all()


# -- the service --------------------------------------------------------------------------------
def _service(tmp_path, **settings) -> PlacementService:
    values = {"model_dir": tmp_path / "models", "consume_feedback": False,
              "flink_rest_url": "http://127.0.0.1:9", "flink_timeout_s": 0.2, "port": 0,
              "publish_prior": False, **settings}   # no starting version
    return PlacementService(ServiceSettings(**values), SPEC)


TASK = {"task_id": "t1", "app_id": "face_recognition", "input_size": 40_000}


def _raise(exc):
    def loader(*_args, **_kwargs):
        raise exc
    return loader


@pytest.mark.parametrize("label,break_loader,reason", [
    ("task_types a list (now ModelFileError)", None, "task_types"),
    ("the loader raises AttributeError", _raise(AttributeError("'list' has no 'get'")),
     "AttributeError"),
    ("the loader raises KeyError", _raise(KeyError("settings")), "KeyError"),
])
def test_a_stored_model_that_fails_to_load_is_refused_and_the_fallback_serves(
        ldwp_file, tmp_path, monkeypatch, caplog, label, break_loader, reason):
    service = _service(tmp_path)
    forged = tmp_path / "forged.spmodel"
    forged.write_bytes(_edit(ldwp_file, MAGIC, _set("task_types", [1, 2])) if break_loader is None
                       else ldwp_file)
    service.store.publish_file(forged)   # the store checks the array file only
    calls = []
    real = LDWPPolicy.from_file

    def counted(*args, **kwargs):
        calls.append(args[0])
        return (break_loader or real)(*args, **kwargs)
    monkeypatch.setattr(LDWPPolicy, "from_file", staticmethod(counted))
    client = TestClient(service.app)
    with caplog.at_level("ERROR", logger="placement.service.app"):
        for _ in range(3):
            response = client.post("/decide", json={"tasks": [TASK]})
            assert response.status_code == 200, response.text
            assert "fallback" in response.json()[0]["reason"]
    assert len(calls) == 1                     # refused once, not re-read on every request
    assert service.serving.refused_version == 1
    assert any(reason in record.getMessage() for record in caplog.records)


def test_a_sound_stored_model_serves(ldwp_file, tmp_path):
    service = _service(tmp_path)
    sound = tmp_path / "sound.spmodel"
    sound.write_bytes(ldwp_file)
    service.store.publish_file(sound)
    response = TestClient(service.app).post("/decide", json={"tasks": [TASK]})
    assert response.status_code == 200 and "fallback" not in response.json()[0]["reason"]
    assert service.serving.version == 1


@pytest.mark.parametrize("label,content,reason", [
    ("task_types a list", "forged", "task_types"),
    ("not a model file", b"not a model at all", "bad magic"),
])
def test_a_bad_initial_model_fails_start_up_with_a_model_file_error(
        ldwp_file, tmp_path, label, content, reason):
    path = tmp_path / "initial.spmodel"
    path.write_bytes(_edit(ldwp_file, MAGIC, _set("task_types", [1, 2])) if content == "forged"
                     else content)
    with pytest.raises(ModelFileError, match=f"initial model {path}.*{reason}"):
        _service(tmp_path, initial_model=path)


def test_a_sound_initial_model_is_published(ldwp_file, tmp_path):
    path = tmp_path / "initial.spmodel"
    path.write_bytes(ldwp_file)
    service = _service(tmp_path, initial_model=path)
    assert service.store.latest()["version"] == 1
