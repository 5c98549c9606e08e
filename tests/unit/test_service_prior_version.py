"""The service's starting version (``service.publish_prior``, the default): an empty store gets
the untrained starting weights (the prior: MCT's completion estimate at the learned costs) as
version 1, so routers and ``/decide`` use LDWP from the first task instead of their fallback
rule (least-loaded), which on the emulated hosts sent the 0.35-core host 218 of 330 clips
(benchmarks/flink_e2e_examples.py, example (c), 2026-12-06)."""

from __future__ import annotations

import pytest

from placement.ldwp.modelfile import load_model
from placement.ldwp.networks import export_layers
from placement.service.learner import PRIOR_SOURCE, OnlineLearner
from placement.service.store import ModelStore
from placement.service.version_trial import TrialSettings

from test_service import PROBE_TASKS, SPEC, client_for, make_service, synthetic_feedback


def _learner(model_dir, **kwargs) -> OnlineLearner:
    return OnlineLearner(SPEC, ModelStore(model_dir), min_records_first_version=200,
                         publish_every=200, **kwargs)


def test_an_empty_store_starts_with_the_prior_as_version_1(tmp_path):
    service = make_service(tmp_path, publish_prior=True)
    versions = service.store.versions()
    assert [v["version"] for v in versions] == [1]
    prior = versions[0]
    assert prior["source"] == PRIOR_SOURCE
    assert prior["trained_on_records"] == 0 and prior["training_data_hash"] == ""
    assert prior["nodes"] == list(service.learner.cluster.node_ids)
    load_model(service.store.path(1))        # a file a router loads
    # and /decide uses it from the first task: the model, not the fallback rule
    decisions = client_for(service).post("/decide", json={"tasks": PROBE_TASKS[:3]}).json()
    assert {d["policy"] for d in decisions} == {"ldwp v1"}


def test_the_prior_is_the_agent_it_was_saved_from(tmp_path):
    """Its layers are the learner's starting weights, bit for bit (the correction is zero, so
    it decides as MCT at the learned costs: tests/unit/test_service.py)."""
    import numpy as np
    learner = _learner(tmp_path / "models")
    stored, _metadata = learner.store.load(1)
    for (weight, bias), (w, b) in zip(stored, export_layers(learner.agent.q_network)):
        assert np.array_equal(weight, w) and np.array_equal(bias, b)


@pytest.mark.parametrize("publish_prior, initial, source", [
    (True, False, PRIOR_SOURCE),          # the default: the prior is version 1
    (False, False, None),                 # opted out: no model until a learned version
    (True, True, "initial model"),        # a user's initial model is version 1 instead
])
def test_what_an_empty_store_starts_with(tmp_path, publish_prior, initial, source):
    initial_model = None
    if initial:   # a sound model file: the prior another store published
        initial_model = tmp_path / "initial.spmodel"
        initial_model.write_bytes(_learner(tmp_path / "elsewhere").store.read_bytes(1))
    learner = _learner(tmp_path / "models", publish_prior=publish_prior,
                       initial_model=initial_model)
    versions = learner.store.versions()
    if source is None:
        assert versions == []
    else:
        assert len(versions) == 1 and source in versions[0]["source"]


def test_a_restart_resumes_from_the_prior_and_publishes_nothing_more(tmp_path):
    first = _learner(tmp_path / "models")
    again = _learner(tmp_path / "models")
    assert [v["version"] for v in again.store.versions()] == [1]
    assert again.records_trained == 0
    assert first.store.latest()["sha256"] == again.store.latest()["sha256"]


def test_the_first_learned_version_follows_the_prior(tmp_path, passing_burst_check):
    """Without the trial it is version 2, trained on the records since the start; with it,
    version 2 is the candidate and the prior (version 1) the champion it is tried against."""
    for trial in (None, TrialSettings(window_tasks=50)):
        learner = _learner(tmp_path / ("trial" if trial else "plain"), trial=trial)
        learner.burst_check = passing_burst_check
        learner.take(synthetic_feedback(400))
        learner.train_pending()
        latest = learner.store.latest()
        assert latest["version"] == 2 and latest["trained_on_records"] >= 200
        if trial is not None:
            assert latest["trial_arm"] == "candidate"
            assert learner.trials.champion_entry["version"] == 1
            assert learner.trials.trial.champion == learner.store.read_bytes(1)
