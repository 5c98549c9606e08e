"""benchmarks/online_loop.py: the service's learner closed in the simulator. Every completion
reaches the learner as a NodeFeedback timing, routers switch to the versions it publishes,
runs are deterministic per seed, and the prior-only variant never switches."""

from __future__ import annotations

import logging

import pytest

from benchmarks.online_loop import VARIANTS, paired_against, run_variant, summarise


@pytest.fixture(autouse=True)
def _quiet_learner():
    logging.getLogger("placement.service").setLevel(logging.ERROR)
    yield
    logging.getLogger("placement.service").setLevel(logging.NOTSET)


def test_the_online_variant_learns_from_every_completion_and_uses_its_versions():
    """Without the version trial, each version that passes the checks is used as published."""
    rows = run_variant(VARIANTS[2], "hosts", 120, 3, 0, work_scale=4.0, publish_every=100,
                       records="payload", first_version=200, trial_window=0)
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert all(sum(r["per_node"].values()) == 120 for r in rows)
    assert all(sum(sum(n.values()) for n in r["per_app_node"].values()) == 120 for r in rows)
    # the first version comes after 200 records (the end of round 1): round 2 is decided by it
    assert rows[0]["version_at_start"] is None and rows[2]["version_at_start"] is not None
    assert rows[-1]["versions_published"] >= 2
    assert rows == run_variant(VARIANTS[2], "hosts", 120, 3, 0, work_scale=4.0,
                               publish_every=100, records="payload",
                               first_version=200, trial_window=0)   # deterministic


def test_with_the_version_trial_routers_alternate_candidate_and_champion_windows():
    """The service's default: version 1 is the prior (published at start: the routers take
    it after their first round), the first learned version is a candidate; each window is a
    version of its own, and the routers decide each round with the newest one (a round is
    decided within its first second, so here a window is a round)."""
    rows = run_variant(VARIANTS[2], "hosts", 120, 6, 0, work_scale=4.0, publish_every=100,
                       records="payload", first_version=200, trial_window=100, trial_share=1.0)
    used = [r["version_at_start"] for r in rows]
    assert used[:2] == [None, 1] and used[2:] == [2, 3, 4, 5]   # one window per round
    trials = rows[-1]["trials"]
    assert trials["trials"] == 1 and trials["running"] and trials["serving"] == "candidate"
    assert trials["champion_version"] == 1       # the prior
    assert rows[-1]["versions_published"] == 6   # after the last round's feedback: window 4


def test_with_the_interleaved_trial_the_candidate_decides_its_share_beside_the_prior():
    """The service's default trial: the candidate (version 2) is installed beside the prior
    (version 1) and decides its share of each round's task ids; no window versions."""
    rows = run_variant(VARIANTS[2], "hosts", 120, 6, 0, work_scale=4.0, publish_every=100,
                       records="payload", first_version=200, trial_window=20, trial_share=0.25)
    assert [r["version_at_start"] for r in rows][:2] == [None, 1]
    on_trial = [r for r in rows if r["candidate_at_start"] is not None]
    assert on_trial and all(r["version_at_start"] == 1 for r in on_trial)
    assert on_trial[0]["candidate_at_start"] == 2
    trials = rows[-1]["trials"]
    assert trials["share"] == 0.25 and trials["trials"] >= 1
    # per trial: the candidate, its confirmation copy (trial_stage 1) and the verdict
    assert rows[-1]["versions_published"] <= 2 + 3 * trials["trials"]
    assert rows == run_variant(VARIANTS[2], "hosts", 120, 6, 0, work_scale=4.0,
                               publish_every=100, records="payload", first_version=200,
                               trial_window=20, trial_share=0.25)   # deterministic


def test_the_prior_variant_learns_costs_but_never_switches_model():
    rows = run_variant(VARIANTS[1], "hosts", 120, 2, 1, work_scale=4.0, publish_every=100,
                       records="payload", first_version=200)
    assert all(r["version_at_start"] is None and r["version_at_end"] is None for r in rows)
    last = rows[-1]   # the learner ran and judged a version; its versions unused
    assert last["versions_published"] is not None or last["versions_refused"] + \
        last["versions_held"] > 0


def test_the_summary_pairs_each_round_with_the_same_seed_and_round_of_the_baseline():
    rows = [{"variant": v, "seed": s, "round": k, "throughput_per_s": value}
            for v, values in ((VARIANTS[0], (10.0, 20.0, 10.0, 20.0)),
                              (VARIANTS[2], (10.0, 18.0, 12.0, 22.0)))
            for (s, k), value in zip(((0, 0), (0, 1), (1, 0), (1, 1)), values)]
    paired = paired_against(rows, VARIANTS[2], VARIANTS[0])
    assert paired["n"] == 2                       # round 0 is left out: nothing learned yet
    assert paired["mean"] == pytest.approx(0.0)   # -10% and +10%
    rounds = {(s["variant"], s["round"]): s["throughput_per_s"]["mean"]
              for s in summarise(rows)}
    assert rounds[(VARIANTS[2], 1)] == pytest.approx(20.0)


def test_a_zero_correction_scale_decides_as_the_prior_does():
    """With none of the learned correction applied, the learning variant's routers decide as
    the prior-only variant's (same seed, same learned costs)."""
    online = run_variant(VARIANTS[2], "hosts", 120, 3, 0, work_scale=4.0, publish_every=100,
                         records="payload", correction_scale=0.0, first_version=200)
    prior = run_variant(VARIANTS[1], "hosts", 120, 3, 0, work_scale=4.0, publish_every=100,
                        records="payload", first_version=200)
    assert online[2]["version_at_start"] is not None      # a version decided round 2 ...
    assert [r["per_app_node"] for r in online] == [r["per_app_node"] for r in prior]


@pytest.mark.parametrize("argv", [["--learning", '{"bogus": 1}'], ["--learning", "[1]"],
                                  ["--learning", '{"learning_rate": -1}'],
                                  ["--spec", "nosuch"], ["--correction-scale", "2"],
                                  ["--burst-tolerance", "nan"], ["--seeds", "a"]])
def test_bad_arguments_are_refused_before_any_run(argv):
    from benchmarks.online_loop import main
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
