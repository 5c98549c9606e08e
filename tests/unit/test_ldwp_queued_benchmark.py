"""benchmarks/ldwp_queued.py: its paired gains on hand-written run tables, and training behind
the manager queue on a tiny plan (the queue really holds tasks back during training)."""

from __future__ import annotations

import pytest

from benchmarks.ldwp_queued import paired_gain


def _run(system, seed, throughput):
    return {"system": system, "seed": seed, "throughput_per_min": throughput}


def test_a_paired_gain_is_per_seed_and_skips_a_seed_the_other_lacks():
    runs = [_run("A", 1, 11.0), _run("B", 1, 10.0), _run("A", 2, 24.0), _run("B", 2, 20.0),
            _run("A", 3, 99.0)]
    gain = paired_gain(runs, "A", "B")
    assert gain["per_seed"] == pytest.approx([0.1, 0.2])
    assert gain["mean"] == pytest.approx(0.15)
    assert gain["ci95"][0] < 0.15 < gain["ci95"][1]


def test_training_episodes_run_behind_the_queue(monkeypatch, tmp_path):
    import simulator.engine as engine
    from benchmarks import ldwp_queued
    limits = []
    original = engine.Simulator.__init__

    def spy(self, costs, config=None, *args, **kwargs):
        limits.append(None if config is None else config.max_dispatched_per_node)
        original(self, costs, config, *args, **kwargs)

    monkeypatch.setattr(engine.Simulator, "__init__", spy)
    out = tmp_path / "queued.spm"
    report = ldwp_queued.train(limit=2, episodes=1, tasks=40, out=out)
    # the episode's simulator and every checkpoint's (before and after the episode) at limit 2
    assert limits and set(limits) == {2}
    assert out.exists() and report["chosen_episode"] in (0, 1)
    from placement.ldwp.modelfile import load_model
    _, metadata = load_model(out)
    assert metadata["training_manager_limit"] == 2
