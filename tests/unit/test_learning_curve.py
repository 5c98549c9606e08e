"""The online learner's learning curve read back from a real ModelStore, and the placement
drift between a benchmark's LDWP runs (issue 13, item 4: online learning that does not
oscillate), on small hand-written tables."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.learning_curve import learning_curve, main, placement_drift
from placement.ldwp.modelfile import save_model
from placement.service.store import ModelStore


def _tiny_model(path, version) -> None:
    """A one-layer model file the store accepts (the curve never reads the weights)."""
    save_model(path, [(np.ones((1, 2), np.float32), np.zeros(1, np.float32))],
               {"version": version})


def _publish(store: ModelStore, version_records: int, error: float, loss: float) -> None:
    store.publish(_tiny_model,
                  {"trained_on_records": version_records, "held_back_error": error,
                   "loss": loss, "gate": f"held-back error {error}", "new_records": 500})


def test_the_curve_has_one_row_per_version_in_order(tmp_path):
    store = ModelStore(tmp_path / "models")
    for records, error, loss in ((200, 0.09, 0.7), (700, 0.06, 0.12), (1200, 0.05, 0.1)):
        _publish(store, records, error, loss)
    curve = learning_curve(tmp_path / "models")
    assert [row["version"] for row in curve] == [1, 2, 3]
    assert [row["trained_on_records"] for row in curve] == [200, 700, 1200]
    assert [row["held_back_error"] for row in curve] == [0.09, 0.06, 0.05]
    assert "sha256" not in curve[0]   # only the curve's fields


def test_a_folder_without_a_store_gives_no_curve(tmp_path):
    assert learning_curve(tmp_path) == []
    assert not (tmp_path / "index.json").exists()   # reading never creates a store


@pytest.mark.parametrize("shares,shifts", [
    ([{"a": 10, "b": 0}, {"a": 10, "b": 0}], [0.0]),
    ([{"a": 10, "b": 0}, {"a": 0, "b": 10}], [1.0]),
    ([{"a": 3, "b": 1}, {"a": 1, "b": 3}, {"a": 1, "b": 3}], [0.5, 0.0]),
    ([{"a": 4}, {"b": 2, "a": 2}], [0.5]),          # a node missing from one run counts as 0
    ([{"a": 1}], []),
], ids=["same", "disjoint", "three-runs", "missing-node", "one-run"])
def test_drift_is_half_the_l1_distance_between_consecutive_runs(shares, shifts):
    runs = [{"variant": "ldwp", "per_node": s, "router": {"streamplace_model_version": i}}
            for i, s in enumerate(shares)]
    runs.insert(1, {"variant": "mct", "per_node": {"a": 0, "b": 99}})   # other variants ignored
    drift = placement_drift(runs, "ldwp")
    assert drift["shifts"] == pytest.approx(shifts)
    assert drift["max_shift"] == (max(shifts) if shifts else None)
    assert drift["model_versions"] == list(range(len(shares)))


def test_the_command_writes_json_and_png_and_refuses_an_empty_folder(tmp_path, monkeypatch):
    import benchmarks.learning_curve as module
    monkeypatch.setattr(module, "RESULTS", tmp_path)
    monkeypatch.setattr("benchmarks._common.RESULTS", tmp_path)
    store = ModelStore(tmp_path / "models")
    _publish(store, 200, 0.1, 0.5)
    _publish(store, 700, 0.08, 0.2)
    runs = tmp_path / "bench.json"
    runs.write_text(json.dumps({"runs": [
        {"variant": module.LDWP_VARIANT, "per_node": {"a": 5, "b": 5}},
        {"variant": module.LDWP_VARIANT, "per_node": {"a": 9, "b": 1}}]}))
    main([str(tmp_path / "models"), "--runs", str(runs), "--out", "curve"])
    written = json.loads((tmp_path / "curve.json").read_text())
    assert len(written["learning_curve"]) == 2
    assert written["placement_drift"]["max_shift"] == pytest.approx(0.4)
    assert (tmp_path / "curve.png").stat().st_size > 0
    with pytest.raises(SystemExit):
        main([str(tmp_path / "empty")])
