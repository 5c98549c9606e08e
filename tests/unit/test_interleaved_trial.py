"""The interleaved version trial (placement.service.interleaved_trial and its router side,
pyflink_jobs.model_trial): a candidate decides a fixed share of the tasks beside the champion,
and is promoted only if its tasks drained faster than the champion's of the same period."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from placement.service.interleaved_trial import (InterleavedTrial, TrialStage,
                                                 in_candidate_share)
from placement.service.version_trial import CANDIDATE, CHAMPION, TrialSettings, TrialVerdict

CHAMPION_BYTES, CANDIDATE_BYTES = b"champion-file", b"candidate-file"
CANDIDATE_V, CHAMPION_V, COPY_V = 9, 4, 11


def run_blocks(block_costs_ms: list[tuple[float, float]], settings: TrialSettings,
               champion_per_candidate: int = 9) -> tuple[TrialVerdict, int]:
    """Feed each block ``window_tasks`` candidate tasks, each followed by
    ``champion_per_candidate`` champion tasks, with the block's (candidate ms, champion ms);
    returns the verdict and the blocks it took."""
    trial = InterleavedTrial(CHAMPION_BYTES, settings)
    trial.start(CANDIDATE_V, CANDIDATE_BYTES, champion_version=CHAMPION_V)
    for block, (candidate_ms, champion_ms) in enumerate(block_costs_ms):
        for _ in range(settings.window_tasks):
            trial.observe(CANDIDATE_V, candidate_ms)
            for _ in range(champion_per_candidate):
                trial.observe(CHAMPION_V, champion_ms)
            step = trial.next_step()
            if step is not None:
                assert isinstance(step, TrialVerdict) and not trial.running
                return step, block + 1
    raise AssertionError("no verdict")


# (name, per block (candidate ms, champion ms), promoted, wins, blocks it took)
SCENARIOS = [
    ("faster in every block", [(100, 200), (150, 300), (90, 120), (100, 110)], True, 4, 4),
    ("faster in 3 of 4 and on average", [(100, 200), (150, 300), (90, 120), (130, 110)], True,
     3, 4),
    ("faster in 2 of 4", [(100, 200), (150, 300), (140, 120), (130, 110)], False, 2, 4),
    ("3 of 4 but slower on average", [(100, 110)] * 3 + [(9000, 100)], False, 3, 4),
    ("level (ties keep the champion)", [(100, 100)] * 4, False, 0, 2),
    ("slower in every block: stopped after two", [(300, 200)] * 4, False, 0, 2),
    ("one loss, then faster", [(300, 200)] + [(100, 200)] * 3, True, 3, 4),
]


@pytest.mark.parametrize("name,blocks,promoted,wins,took", SCENARIOS,
                         ids=[s[0] for s in SCENARIOS])
def test_verdict_scenarios(name, blocks, promoted, wins, took):
    verdict, used = run_blocks(blocks, TrialSettings(window_tasks=3, pairs=4, min_wins=3,
                                                     share=0.1))
    assert (verdict.promoted, verdict.wins, used) == (promoted, wins, took)
    assert verdict.candidate_version == CANDIDATE_V
    assert verdict.data == (CANDIDATE_BYTES if promoted else CHAMPION_BYTES)
    assert ("could no longer win" in verdict.reason) is (took < 4)


def test_the_difference_is_in_log_one_plus_seconds_per_arm_mean():
    verdict, _ = run_blocks([(1000, 3000)], TrialSettings(window_tasks=2, pairs=1, min_wins=1,
                                                          share=0.5), champion_per_candidate=3)
    assert verdict.mean_difference == pytest.approx(math.log(2.0) - math.log(4.0))


def test_champion_tasks_count_from_the_candidates_first_judged_task_on():
    """Tasks the champion decided before the routers installed the candidate are judged first:
    they are another period's, and a load that was lighter then must not make the champion
    look cheaper."""
    trial = InterleavedTrial(CHAMPION_BYTES, TrialSettings(window_tasks=2, pairs=1, min_wins=1,
                                                           share=0.2))
    trial.start(CANDIDATE_V, CANDIDATE_BYTES, champion_version=CHAMPION_V)
    for _ in range(50):
        trial.observe(CHAMPION_V, 1.0)             # before: very cheap, not counted
    assert trial.block_counts() == [(0, 0)] and trial.next_step() is None
    for _ in range(2):
        trial.observe(CANDIDATE_V, 500.0)
        trial.observe(CHAMPION_V, 900.0)
    verdict = trial.next_step()
    assert verdict.promoted and verdict.mean_difference < 0


def test_a_block_closes_only_with_enough_tasks_of_both_arms():
    trial = InterleavedTrial(CHAMPION_BYTES, TrialSettings(window_tasks=3, pairs=1, min_wins=1,
                                                           share=0.5))
    trial.start(CANDIDATE_V, CANDIDATE_BYTES, champion_version=CHAMPION_V)
    for _ in range(10):
        trial.observe(CANDIDATE_V, 10.0)
    trial.observe(CHAMPION_V, 50.0)
    assert trial.next_step() is None and trial.block_counts() == [(10, 1)]
    trial.observe(CHAMPION_V, 50.0)
    trial.observe(CHAMPION_V, 50.0)
    assert trial.next_step().promoted


@pytest.mark.parametrize("version,outcome", [
    (None, 100.0), (-1, 100.0), (99, 100.0), (True, 100.0), ("9", 100.0),
    (CANDIDATE_V, float("nan")), (CANDIDATE_V, float("inf")), (CANDIDATE_V, -5.0),
    (CANDIDATE_V, "fast"), (CANDIDATE_V, True)])
def test_tasks_outside_the_trial_or_with_broken_outcomes_teach_it_nothing(version, outcome):
    trial = InterleavedTrial(CHAMPION_BYTES, TrialSettings(window_tasks=1, pairs=1, min_wins=1,
                                                           stall_tasks=3, share=0.1))
    trial.start(CANDIDATE_V, CANDIDATE_BYTES, champion_version=CHAMPION_V)
    for _ in range(2):
        trial.observe(version, outcome)
        assert trial.next_step() is None and trial.running
    assert trial.block_counts() == [(0, 0)]
    trial.observe(version, outcome)
    verdict = trial.next_step()                    # the third stalls it
    assert not verdict.promoted and "abandoned" in verdict.reason and trial.abandoned == 1


def test_routers_on_another_champion_do_not_keep_a_candidate_on_trial_for_ever():
    """The candidate's tasks come in, but the other decisions carry a version that is not the
    champion's (a router on another store): abandoned, not served at its share for good."""
    trial = InterleavedTrial(CHAMPION_BYTES, TrialSettings(window_tasks=1, pairs=1, min_wins=1,
                                                           stall_tasks=20, share=0.1))
    trial.start(CANDIDATE_V, CANDIDATE_BYTES, champion_version=CHAMPION_V)
    verdict = None
    for i in range(100):
        trial.observe(CANDIDATE_V if i % 10 == 0 else 77, 100.0)
        verdict = verdict or trial.next_step()
    assert verdict is not None and "no task of champion version 4" in verdict.reason
    assert not verdict.promoted and trial.abandoned == 1


def test_settings_and_start_are_checked():
    for bad in (0, 0.0, -0.1, 1.5, float("nan"), True, "0.1"):
        with pytest.raises(ValueError, match="share"):
            TrialSettings(share=bad)
    with pytest.raises(ValueError, match="below 1"):
        InterleavedTrial(CHAMPION_BYTES, TrialSettings(share=1.0))
    trial = InterleavedTrial(CHAMPION_BYTES)
    assert trial.settings.share == 0.1
    with pytest.raises(ValueError, match="both version 4"):
        trial.start(4, CANDIDATE_BYTES, champion_version=4)


# -- the confirmation stage -------------------------------------------------------------------
def feed_blocks(trial: InterleavedTrial, candidate_version: int,
                block_costs_ms: list[tuple[float, float]], window_tasks: int):
    """One stage's blocks (as :func:`run_blocks`, one champion task per candidate task);
    returns the first step the trial asks for and the blocks it took."""
    for block, (candidate_ms, champion_ms) in enumerate(block_costs_ms):
        for _ in range(window_tasks):
            trial.observe(candidate_version, candidate_ms)
            trial.observe(CHAMPION_V, champion_ms)
            step = trial.next_step()
            if step is not None:
                return step, block + 1
    raise AssertionError("no step")


WIN, LOSS = [(100, 200)] * 4, [(300, 200)] * 4
# (name, first stage's blocks, confirmation's blocks or None, confirmed?, promoted)
STAGE_SCENARIOS = [
    ("wins at both shares: promoted", WIN, WIN, True, True),
    ("wins at a tenth, loses at a half: refused", WIN, LOSS, True, False),
    ("wins at a tenth, 2 of 4 at a half: refused", WIN,
     [(100, 200), (300, 200), (100, 200), (300, 200)], True, False),
    ("loses at a tenth: refused, never confirmed", LOSS, None, False, False),
]


@pytest.mark.parametrize("name,first,second,confirmed,promoted", STAGE_SCENARIOS,
                         ids=[s[0] for s in STAGE_SCENARIOS])
def test_a_candidate_is_promoted_only_after_winning_at_the_larger_share(name, first, second,
                                                                         confirmed, promoted):
    settings = TrialSettings(window_tasks=3, pairs=4, min_wins=3, share=0.1,
                             confirm_share=0.5)
    trial = InterleavedTrial(CHAMPION_BYTES, settings)
    trial.start(CANDIDATE_V, CANDIDATE_BYTES, champion_version=CHAMPION_V)
    step, _ = feed_blocks(trial, CANDIDATE_V, first, 3)
    assert isinstance(step, TrialStage) is confirmed
    if confirmed:
        assert (step.stage, step.share, step.data) == (1, 0.5, CANDIDATE_BYTES)
        assert trial.running and trial.promoted == 0 and trial.share == 0.5
        assert trial.next_step() is None            # nothing until the copy serves
        trial.stage_published(COPY_V)
        assert trial.block_counts() == [(0, 0)] * 4
        step, _ = feed_blocks(trial, COPY_V, second, 3)
    assert isinstance(step, TrialVerdict) and not trial.running
    assert step.promoted is promoted and step.candidate_version == CANDIDATE_V
    assert step.data == (CANDIDATE_BYTES if promoted else CHAMPION_BYTES)
    assert ("then at a share of 0.5" in step.reason) is confirmed
    assert step.reason.startswith("at a share of 0.1")


def test_in_the_confirmation_stage_only_the_copys_tasks_are_the_candidates():
    """The first stage's tasks still finishing (version 9) and tasks judged while the copy is
    not yet served count as neither arm: the copy is judged at its own share's load."""
    trial = InterleavedTrial(CHAMPION_BYTES, TrialSettings(window_tasks=2, pairs=1, min_wins=1,
                                                           share=0.1, confirm_share=0.5))
    trial.start(CANDIDATE_V, CANDIDATE_BYTES, champion_version=CHAMPION_V)
    step, _ = feed_blocks(trial, CANDIDATE_V, [(100, 200)], 2)
    assert isinstance(step, TrialStage)
    trial.observe(COPY_V, 1.0)                     # before the trial knows the copy's number
    trial.stage_published(COPY_V)
    for _ in range(5):
        trial.observe(CANDIDATE_V, 1.0)            # the first stage's, very cheap
    trial.observe(CHAMPION_V, 200.0)   # and the champion's count from the copy's first on
    assert trial.block_counts() == [(0, 0)] and trial.next_step() is None
    for _ in range(2):
        trial.observe(COPY_V, 900.0)
        trial.observe(CHAMPION_V, 200.0)
    verdict = trial.next_step()
    assert not verdict.promoted and verdict.mean_difference > 0


def test_the_confirmation_settings_are_checked():
    for bad in (0.05, 0.1, 1.0, 1.5, -0.5, float("nan"), True, "0.5"):
        with pytest.raises(ValueError, match="confirm_share"):
            TrialSettings(share=0.1, confirm_share=bad)
    with pytest.raises(ValueError, match="confirm_share"):
        TrialSettings(share=1.0, confirm_share=0.5)   # windows decide every task already
    trial = InterleavedTrial(CHAMPION_BYTES, TrialSettings(window_tasks=1, pairs=1, min_wins=1,
                                                           share=0.1, confirm_share=0.5))
    trial.start(CANDIDATE_V, CANDIDATE_BYTES, champion_version=CHAMPION_V)
    assert isinstance(feed_blocks(trial, CANDIDATE_V, [(1, 2)], 1)[0], TrialStage)
    for taken in (CHAMPION_V, CANDIDATE_V):
        with pytest.raises(ValueError, match="confirmation copy"):
            trial.stage_published(taken)


def test_the_services_settings_give_the_confirmation_stage():
    from placement.service.settings import ServiceSettings
    assert ServiceSettings().version_trial().confirm_share == 0.5
    assert ServiceSettings(trial_share=0.6).version_trial().confirm_share == 0.0
    assert ServiceSettings(trial_share=1.0).version_trial().confirm_share == 0.0
    assert ServiceSettings(trial_confirm_share=0).version_trial().confirm_share == 0.0
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ValueError):
            ServiceSettings(trial_confirm_share=bad)


def test_the_share_is_a_deterministic_hash_of_the_task_id():
    ids = [f"review-{i:06d}" for i in range(20_000)]
    tenth = [t for t in ids if in_candidate_share(t, 0.1)]
    assert 0.09 <= len(tenth) / len(ids) <= 0.11
    # a smaller share is a subset of a larger one: the same tasks, fewer of them
    assert set(t for t in ids if in_candidate_share(t, 0.05)) <= set(tenth)
    assert not any(in_candidate_share(t, 0.0) for t in ids[:100])
    assert all(in_candidate_share(t, 1.0) for t in ids[:100])
    assert in_candidate_share("\udcff odd", 0.5) in (True, False)   # a lone surrogate


# -- on a model store and in the learner -----------------------------------------------------
@dataclass(frozen=True)
class Judged:
    decided_by_version: int
    latency_ms: float


def _learner(tmp_path, share: float = 0.25, confirm_share: float = 0.0):
    from test_model_gate import CLUSTER
    from placement.service.burst_check import BurstCheck
    from placement.service.learner import OnlineLearner
    from placement.service.store import ModelStore
    return OnlineLearner(CLUSTER, ModelStore(tmp_path), {"hidden_sizes": (16, 8),
                                                         "learning_starts": 4},
                         min_records_first_version=60, publish_every=60, judge="latency",
                         burst_check=BurstCheck(min_tasks=1, tolerance=float("inf")),
                         trial=TrialSettings(window_tasks=20, pairs=2, min_wins=2, share=share,
                                             confirm_share=confirm_share))


def _feed(learner, candidate_ms: float, champion_ms: float, reports: int) -> list[int]:
    """Routers that do what the service's newest entry asks (the candidate decides its share
    of the task ids): returns how many tasks each version decided, per report."""
    from test_model_gate import NODES
    from placement.service.interleaved_trial import candidate_trial
    t0, decided = 1_700_000_000_000, []
    for r in range(reports):
        latest = learner.store.latest()
        trial = candidate_trial(latest)
        versions, timings = [], []
        for i in range(10):
            task_id = f"r{r}-{i}"
            on_candidate = trial is not None and in_candidate_share(task_id, trial.share)
            version = latest["version"] if trial is None or on_candidate \
                else trial.champion_version
            ms = candidate_ms if on_candidate else champion_ms
            versions.append(version)
            timings.append({"task_id": task_id, "app_id": "resize", "input_size": 2_048,
                            "queue_ms": 1.0, "service_ms": ms - 1.0,
                            "finished_at_ms": t0 + 1_000 * r - 10 * i})
        learner.take([{"node_id": NODES[r % 3], "emitted_at_ms": t0 + 1_000 * r,
                       "cpu_util": 0.5, "gpu_util": 0.0, "host_mem_util": 0.5,
                       "gpu_mem_util": 0.0, "uplink_bytes_per_s": 1e5,
                       "downlink_bytes_per_s": 1e5, "queue_depth": 0, "in_flight": 1,
                       "completed": timings, "sequence": r, "routed_model_version": versions}])
        learner.train_pending()
        decided.extend(versions)
    return decided


@pytest.mark.parametrize("candidate_ms,champion_ms,promoted", [(100.0, 900.0, True),
                                                                (900.0, 100.0, False)])
def test_the_learner_runs_an_interleaved_trial(tmp_path, candidate_ms, champion_ms, promoted):
    learner = _learner(tmp_path)
    decided = _feed(learner, candidate_ms, champion_ms, reports=40)
    versions = learner.store.versions()
    # the prior as version 1, the candidate (v2) with its share and champion, then only the
    # verdict's copy: no windows
    assert versions[1]["trial_arm"] == CANDIDATE
    assert (versions[1]["trial_share"], versions[1]["trial_champion"]) == (0.25, 1)
    assert versions[2]["trial_arm"] == CHAMPION and versions[2]["trial_of"] == 2
    assert versions[2]["copy_of"] == (2 if promoted else 1)
    stats = learner.trials.stats()
    assert stats["promoted" if promoted else "refused"] >= 1
    assert stats["champion_serving_version"] == max(
        v["version"] for v in versions if v.get("trial_arm") == CHAMPION)
    # while on trial, the candidate decided about its share of the tasks, not all of them
    first, last = decided.index(2), len(decided) - decided[::-1].index(2)
    on_trial = decided[first:last]
    assert 0.15 <= on_trial.count(2) / len(on_trial) <= 0.35
    if len(versions) > 3:   # the next candidate is tried against the copy that serves
        assert versions[3]["trial_champion"] == 3


@pytest.mark.parametrize("candidate_ms,champion_ms,promoted", [(100.0, 900.0, True),
                                                                (900.0, 100.0, False)])
def test_the_learner_confirms_a_winner_at_the_larger_share(tmp_path, candidate_ms, champion_ms,
                                                            promoted):
    learner = _learner(tmp_path, confirm_share=0.6)
    decided = _feed(learner, candidate_ms, champion_ms, reports=60)
    versions = learner.store.versions()
    if promoted:   # the candidate (v2), its confirmation copy (v3), then the verdict's copy
        copy = versions[2]
        assert (copy["trial_arm"], copy["trial_stage"], copy["copy_of"]) == (CANDIDATE, 1, 2)
        assert (copy["trial_share"], copy["trial_champion"]) == (0.6, 1)
        assert versions[3]["trial_arm"] == CHAMPION and versions[3]["copy_of"] == 2
        first, last = decided.index(3), len(decided) - decided[::-1].index(3)
        on_copy = decided[first:last]
        assert 0.45 <= on_copy.count(3) / len(on_copy) <= 0.75
        assert "then at a share of 0.6" in learner.trials.stats()["last_verdict"]
    else:          # refused at its first share: never confirmed
        assert versions[2]["trial_arm"] == CHAMPION and versions[2]["copy_of"] == 1
        assert all(v.get("trial_stage") is None for v in versions)
    stats = learner.trials.stats()
    assert stats["promoted" if promoted else "refused"] >= 1
    assert (stats["share"], stats["confirm_share"]) == (0.25, 0.6)
