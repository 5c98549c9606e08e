"""Poisoned learning: hostile timings are refused before they teach anything, a diverged or
implausible candidate is never published (the learner rolls back to its last good weights),
and a service never resumes from a damaged version."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch

from placement.ldwp.modelfile import load_model, save_model
from placement.ldwp.networks import export_layers
from placement.service.learner import OnlineLearner, cluster_fingerprint
from placement.service.metrics import ServiceMetrics
from placement.service.model_gate import PublishGate
from placement.service.store import ModelStore
from workload.catalog import app_ids
from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task

torch.set_num_threads(1)

NODES = ("tm_a", "tm_b", "tm_c")
FAST = "tm_b"
CLUSTER = ClusterSpec(tuple(NodeSpec(n, 2, 8.0) for n in NODES))


def feedback(n_tasks: int, seed: int = 0, prefix: str = "t", hostile: dict | None = None,
             hostile_at: int = 300) -> list[dict]:
    """NodeFeedback of ``n_tasks`` tasks at random over NODES (FAST about 5x faster), one
    report per node per second; with ``hostile``, task ``hostile_at``'s timing is overwritten
    with those fields (what a careless or hostile producer sends)."""
    rng, apps = random.Random(seed), app_ids()
    per_node: dict[str, list[tuple[int, dict]]] = {n: [] for n in NODES}
    for i in range(n_tasks):
        node = rng.choice(NODES)
        service = (200.0 if node == FAST else 1000.0) * rng.uniform(0.8, 1.2)
        queue = 50.0 * rng.uniform(0.5, 1.5)
        timing = {"task_id": f"{prefix}-{i:06d}", "app_id": apps[i % len(apps)],
                  "input_size": int(rng.lognormvariate(10.5, 0.5)), "queue_ms": queue,
                  "service_ms": service, "finished_at_ms": int(1.7e12 + i * 50 + queue + service)}
        second = timing["finished_at_ms"] // 1000   # its report, whatever the fields say
        if hostile is not None and i == hostile_at:
            timing.update(hostile)
        per_node[node].append((second, timing))
    reports = []
    for node, timings in per_node.items():
        windows: dict[int, list[dict]] = {}
        for second, timing in timings:
            windows.setdefault(second, []).append(timing)
        for sequence, (second, done) in enumerate(sorted(windows.items())):
            reports.append({"node_id": node, "emitted_at_ms": (second + 1) * 1000,
                            "cpu_util": 0.4, "gpu_util": 0.0, "host_mem_util": 0.5,
                            "gpu_mem_util": 0.0, "uplink_bytes_per_s": 1e5,
                            "downlink_bytes_per_s": 1e6, "queue_depth": 1, "in_flight": 1,
                            "backpressure": 0.0, "completed": done, "sequence": sequence})
    reports.sort(key=lambda r: (r["emitted_at_ms"], r["node_id"]))
    return reports


def learner(tmp_path, **kwargs) -> OnlineLearner:
    kwargs.setdefault("min_records_first_version", 150)
    kwargs.setdefault("publish_every", 150)
    return OnlineLearner(CLUSTER, ModelStore(tmp_path / "models"), metrics=ServiceMetrics(),
                         **kwargs, publish_prior=False)


def published_weights(store: ModelStore) -> list[str]:
    return [v["sha256"] for v in store.versions()]


def all_finite(store: ModelStore) -> bool:
    return all(np.isfinite(w).all() and np.isfinite(b).all()
               for v in store.versions() for w, b in store.load(v["version"])[0])


# The tester's record (-873,743,342 pixels) and its relatives: each must be refused before it
# reaches training, so the published versions are bit-for-bit those of the clean stream.
HOSTILE = {
    "negative size": {"input_size": -873_743_342},
    "huge size": {"input_size": 10**18},
    "float size": {"input_size": 1e300},
    "bool size": {"input_size": True},
    "NaN queue": {"queue_ms": float("nan")},
    "infinite service": {"service_ms": float("inf")},
    "negative service": {"service_ms": -5.0},
    "a year of latency": {"service_ms": 3.15e10},
    "NaN finish": {"finished_at_ms": float("nan")},
    "size as text": {"input_size": "1e9"},
    "type not a string": {"app_id": 42},
}


@pytest.fixture(scope="module")
def without_the_record(tmp_path_factory):
    """Versions published from the clean stream without task t-000300 (the one the hostile
    cases overwrite): what "nothing changed" must equal."""
    skipped = learner(tmp_path_factory.mktemp("skipped"))
    skipped.take([{**r, "completed": [t for t in r["completed"] if t["task_id"] != "t-000300"]}
                  for r in feedback(330)])
    skipped.train_pending()
    return published_weights(skipped.store)


@pytest.mark.parametrize("kind", HOSTILE)
def test_one_hostile_timing_changes_no_published_weight(tmp_path, without_the_record, kind):
    poisoned = learner(tmp_path)
    poisoned.take(feedback(330, hostile=HOSTILE[kind]))
    poisoned.train_pending()
    assert poisoned.timings_rejected == 1
    assert poisoned.models_rejected == 0
    assert all_finite(poisoned.store)
    assert len(without_the_record) == 2
    assert published_weights(poisoned.store) == without_the_record
    metrics = poisoned.metrics.render().decode()
    assert 'streamplace_service_learning_rejections_total{kind="timing"} 1.0' in metrics


def _break(agent, how: str) -> None:
    with torch.no_grad():
        last = [m for m in agent.q_network.modules() if isinstance(m, torch.nn.Linear)][-1]
        if how == "nan":
            last.weight[0, 0] = float("nan")
        elif how == "diverged":
            last.bias.fill_(5e3)        # finite, but Q-values far beyond any reward
        else:
            last.bias.fill_(-3.0)       # plausible range, far worse than the last good fit


@pytest.mark.parametrize("how,reason", [("nan", "non-finite weights"),
                                        ("diverged", "non-finite Q-values|implausible"),
                                        ("worse", "held-back error")])
def test_a_bad_candidate_is_not_published_and_the_learner_rolls_back(tmp_path, how, reason):
    learn = learner(tmp_path)
    learn.take(feedback(480))
    learn.train_pending()
    versions = learn.store.versions()
    good = copy.deepcopy(learn.agent.q_network.state_dict())
    assert learn.gate.held_back >= learn.gate.min_holdout
    _break(learn.agent, how)
    assert learn.publish() is None
    assert learn.store.versions() == versions            # nothing published
    assert learn.models_rejected == 1 and re_search(reason, learn.gate.last_verdict.reason)
    restored = learn.agent.q_network.state_dict()
    assert all(torch.equal(restored[k], good[k]) for k in good)   # the last good weights
    assert all(torch.equal(learn.agent.target_network.state_dict()[k], good[k]) for k in good)
    assert not learn.agent.replay.items                   # what led there is not replayed
    metrics = learn.metrics.render().decode()
    assert 'streamplace_service_learning_rejections_total{kind="model"} 1.0' in metrics
    learn.take(feedback(400, seed=9, prefix="u"))          # and it keeps learning (the next
    #                                                        check after twice publish_every)
    learn.train_pending()
    assert all_finite(learn.store) and learn.store.latest()["version"] > versions[-1]["version"]


def re_search(pattern: str, text: str) -> bool:
    import re
    return re.search(pattern, text) is not None


def test_a_nan_training_loss_rolls_back_at_once(tmp_path, monkeypatch):
    learn = learner(tmp_path)
    learn.take(feedback(200))
    learn.train_pending()
    good = learn.store.load()[0]  # the last good version: the newest published one
    original = learn.agent._train_step

    def diverging_step():
        original()
        _break(learn.agent, "nan")
        learn.agent.losses[-1] = float("nan")

    monkeypatch.setattr(learn.agent, "_train_step", diverging_step)
    learn.take(feedback(8, seed=5, prefix="v"))   # a training step every 4th record
    learn.train_pending()
    assert learn.models_rejected >= 1
    assert all(torch.isfinite(p).all() for p in learn.agent.q_network.parameters())
    for (w, b), (w_good, b_good) in zip(export_layers(learn.agent.q_network), good):
        np.testing.assert_array_equal(w, w_good)
        np.testing.assert_array_equal(b, b_good)


def test_a_service_never_resumes_from_a_damaged_newest_version(tmp_path, caplog):
    first = learner(tmp_path)
    first.take(feedback(160))
    first.train_pending()
    assert first.store.latest()["version"] == 1
    # a version with NaN weights written by an older install (no gate): same folder, next name
    layers = [(w.copy(), b.copy()) for w, b in export_layers(first.agent.q_network)]
    layers[0][0][0, 0] = np.nan
    save_model(tmp_path / "models" / "v000002.spmodel", layers, load_model(
        tmp_path / "models" / "v000001.spmodel")[1])
    resumed = learner(tmp_path)
    assert resumed.records_trained == first.records_trained
    assert all(torch.isfinite(p).all() for p in resumed.agent.q_network.parameters())
    assert "ignoring" in caplog.text or "not resuming" in caplog.text


def test_gate_settings_are_validated():
    with pytest.raises(ValueError):
        PublishGate(holdout_every=1)
    with pytest.raises(ValueError):
        PublishGate(max_error_ratio=0.5)


def test_a_service_resumes_its_own_clusters_model_and_not_another_clusters(tmp_path, caplog):
    first = learner(tmp_path)
    first.take(feedback(160))
    first.train_pending()
    assert first.store.latest()["cluster_fingerprint"] == cluster_fingerprint(CLUSTER)
    assert learner(tmp_path).records_trained == first.records_trained   # same cluster: resumes
    # the same node names on other hardware: its learned corrections do not apply
    other = ClusterSpec(tuple(NodeSpec(n, 4, 8.0, cpu_speed=0.5) for n in NODES))
    assert cluster_fingerprint(other) != cluster_fingerprint(CLUSTER)
    fresh = OnlineLearner(other, ModelStore(tmp_path / "models"), publish_every=50,
                          min_records_first_version=50, publish_prior=False)
    assert fresh.records_trained == 0
    assert "trained for another cluster" in caplog.text


def test_published_versions_carry_the_evidence_of_what_the_service_learned(tmp_path):
    # Without it a router trusts none of the learned correction (evidence 0: the prior alone),
    # whatever the service learned.
    learn = learner(tmp_path)
    learn.take(feedback(160))
    learn.train_pending()
    _, metadata = load_model(learn.store.path(learn.store.latest()["version"]))
    entries = metadata["evidence"]["entries"]
    assert entries, "a published version must count the examples it learned from"
    assert sum(count for _, _, count in entries) == pytest.approx(learn.records_trained)
    assert learn.agent.evidence.trust(np.stack([
        learn.agent.encode(Observation(Task("t", "video_synopsis", 4096),
                                       tuple(NodeState(n) for n in NODES), 0.0))[0]])).max() > 0
