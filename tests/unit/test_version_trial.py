"""The version trial (placement.service.version_trial, placement.service.trial_serving): a
learned version serves for good only after it drained faster than the version before it, in
alternating windows on the cluster itself."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from placement.service.version_trial import (CANDIDATE, CHAMPION, TrialSettings, TrialVerdict,
                                             TrialWindow, VersionTrial, window_arm)

CHAMPION_BYTES, CANDIDATE_BYTES = b"champion-file", b"candidate-file"


def run_trial(window_costs_ms: list[tuple[float, float]], settings: TrialSettings,
              first_version: int = 7) -> tuple[TrialVerdict, list[TrialWindow]]:
    """Feed a trial ``settings.window_tasks`` tasks per window, each with its window's outcome
    (pairs of (candidate ms, champion ms)); returns the verdict and the windows asked for."""
    trial = VersionTrial(CHAMPION_BYTES, settings)
    trial.start(first_version, CANDIDATE_BYTES)
    version, windows = first_version, []
    outcomes = [window_costs_ms[i // 2][0 if window_arm(i) == CANDIDATE else 1]
                for i in range(2 * len(window_costs_ms))]
    for index, outcome in enumerate(outcomes):
        for _ in range(settings.window_tasks):
            trial.observe(version, outcome)
        step = trial.next_step()
        if index + 1 < len(outcomes) and not isinstance(step, TrialVerdict):  # (or early)
            assert isinstance(step, TrialWindow) and step.index == index + 1
            windows.append(step)
            version += 1
            trial.window_published(version)
        else:
            assert isinstance(step, TrialVerdict)
            assert not trial.running
            return step, windows
    raise AssertionError("no verdict")


# (name, per pair (candidate ms, champion ms), promoted, wins)
def test_a_load_that_rises_through_the_trial_promotes_no_candidate():
    """Every window costs more than the one before (a burst filling the nodes) and the two
    arms are the same: with the candidate always first it won every pair; now half."""
    trial = VersionTrial(CHAMPION_BYTES, TrialSettings(window_tasks=1, pairs=4, min_wins=3))
    trial.start(0, CANDIDATE_BYTES)
    for window in range(8):
        trial.observe(window, 100.0 * (window + 1))
        step = trial.next_step()
        if isinstance(step, TrialWindow):
            trial.window_published(window + 1)
    assert isinstance(step, TrialVerdict) and not step.promoted and step.wins == 2


# ... and the windows published after the first (7: all four pairs; 3: refused after two pairs,
# when it could no longer win 3)
SCENARIOS = [
    ("faster in every pair", [(100, 200), (150, 300), (90, 120), (100, 110)], True, 4, 7),
    ("faster in 3 of 4 and on average", [(100, 200), (150, 300), (90, 120), (130, 110)], True, 3,
     7),
    ("faster in 2 of 4", [(100, 200), (150, 300), (140, 120), (130, 110)], False, 2, 7),
    ("3 of 4 but slower on average", [(100, 110), (100, 110), (100, 110), (9000, 100)], False, 3,
     7),
    ("level everywhere (ties keep the champion)", [(100, 100)] * 4, False, 0, 3),
    ("slower in every pair", [(300, 200)] * 4, False, 0, 3),
    ("slower in the first two, faster after", [(300, 200)] * 2 + [(100, 200)] * 2, False, 0, 3),
    ("one loss, then faster", [(300, 200)] + [(100, 200)] * 3, True, 3, 7),
]


@pytest.mark.parametrize("name,pairs,promoted,wins,published", SCENARIOS,
                         ids=[s[0] for s in SCENARIOS])
def test_verdict_scenarios(name, pairs, promoted, wins, published):
    verdict, windows = run_trial(pairs, TrialSettings(window_tasks=3, pairs=4, min_wins=3))
    assert verdict.promoted is promoted and verdict.wins == wins
    assert verdict.candidate_version == 7
    assert verdict.data == (CANDIDATE_BYTES if promoted else CHAMPION_BYTES)
    # the candidate first in even pairs, second in odd ones (a rising load favours neither)
    assert [w.arm for w in windows] == [CHAMPION, CHAMPION, CANDIDATE, CANDIDATE, CHAMPION,
                                        CHAMPION, CANDIDATE][:published]
    assert len(windows) == published
    assert ("could no longer win" in verdict.reason) is (published < 7)
    assert all(w.data == (CANDIDATE_BYTES if w.arm == CANDIDATE else CHAMPION_BYTES)
               for w in windows)
    assert ("promoted" if promoted else "refused") in verdict.reason


def test_the_mean_difference_is_in_log_one_plus_seconds():
    verdict, _ = run_trial([(1000, 3000)], TrialSettings(window_tasks=2, pairs=1, min_wins=1))
    assert verdict.mean_difference == pytest.approx(math.log(2.0) - math.log(4.0))


def test_a_promoted_candidate_is_the_next_trials_champion():
    trial = VersionTrial(CHAMPION_BYTES, TrialSettings(window_tasks=1, pairs=1, min_wins=1))
    trial.start(3, CANDIDATE_BYTES)
    trial.observe(3, 10.0)
    assert isinstance(trial.next_step(), TrialWindow)
    trial.window_published(4)
    trial.observe(4, 500.0)
    assert trial.next_step().promoted
    assert trial.champion == CANDIDATE_BYTES and (trial.promoted, trial.refused) == (1, 0)
    trial.start(5, b"x")
    with pytest.raises(RuntimeError, match="already running"):
        trial.start(6, b"y")


def test_late_tasks_count_for_the_window_that_decided_them():
    """Routers refresh every few seconds: tasks the candidate's version decided after the
    champion's window was published are the candidate's, not the champion's."""
    trial = VersionTrial(CHAMPION_BYTES, TrialSettings(window_tasks=2, pairs=1, min_wins=1))
    trial.start(10, CANDIDATE_BYTES)
    trial.observe(10, 100.0)
    trial.observe(10, 100.0)
    assert isinstance(trial.next_step(), TrialWindow)
    assert trial.next_step() is None          # waits for the version it asked for
    trial.window_published(11)
    for _ in range(5):
        trial.observe(10, 100.0)              # late: still the candidate's window
    assert trial.next_step() is None          # the champion's window has none yet
    trial.observe(11, 5000.0)
    trial.observe(11, 5000.0)
    verdict = trial.next_step()
    assert verdict.promoted and verdict.wins == 1


@pytest.mark.parametrize("version,outcome", [
    (None, 100.0), (-1, 100.0), (99, 100.0), (True, 100.0), ("10", 100.0),
    (10, float("nan")), (10, float("inf")), (10, -5.0), (10, "fast")])
def test_tasks_outside_the_trial_or_with_broken_outcomes_teach_it_nothing(version, outcome):
    trial = VersionTrial(CHAMPION_BYTES, TrialSettings(window_tasks=1, pairs=1, min_wins=1,
                                                       stall_tasks=3))
    trial.start(10, CANDIDATE_BYTES)
    trial.observe(version, outcome)
    assert trial.next_step() is None and trial.running
    trial.observe(version, outcome)
    trial.observe(version, outcome)
    verdict = trial.next_step()               # the third stalls it
    assert not verdict.promoted and "abandoned" in verdict.reason
    assert trial.abandoned == 1 and trial.champion == CHAMPION_BYTES


def test_settings_are_checked():
    with pytest.raises(ValueError, match="min_wins"):
        TrialSettings(pairs=2, min_wins=3)
    for bad in ({"window_tasks": 0}, {"pairs": True}, {"stall_tasks": 1.5}, {"min_wins": 0}):
        with pytest.raises(ValueError):
            TrialSettings(**bad)


# -- on a model store ------------------------------------------------------------------------
@dataclass(frozen=True)
class Judged:
    """What TrialServing reads of a TrainingExample."""

    decided_by_version: int
    latency_ms: float


def _model_bytes(tmp_path, seed: int) -> bytes:
    from test_model_gate import CLUSTER
    from placement.ldwp.agent import LDWPPolicy
    from placement.measured_costs import MeasuredCosts
    from placement.service.learner import learning_settings
    path = tmp_path / f"m{seed}.spmodel"
    LDWPPolicy(CLUSTER, MeasuredCosts(CLUSTER), learning_settings({"seed": seed})).save(path)
    return path.read_bytes()


def _serve(tmp_path, candidate_ms: float, champion_ms: float):
    """A one-pair trial on a real store: (serving, store, candidate entry, verdict)."""
    from placement.service.store import ModelStore
    from placement.service.trial_serving import TrialServing
    store = ModelStore(tmp_path / "store")
    champion, candidate = _model_bytes(tmp_path, 1), _model_bytes(tmp_path, 2)
    serving = TrialServing(store, champion, TrialSettings(window_tasks=2, pairs=1, min_wins=1))
    entry = store.publish(lambda path, _v: path.write_bytes(candidate),
                          {"trained_on_records": 900, "trial_arm": CANDIDATE})
    serving.start(entry, candidate)
    assert serving.running and serving.serving == CANDIDATE
    verdict = None
    for version, ms in ((1, candidate_ms), (1, candidate_ms), (2, champion_ms),
                        (2, champion_ms)):
        verdict = serving.observe(Judged(version, ms)) or verdict
    return serving, store, (champion, candidate), verdict


def test_a_refused_candidate_leaves_the_champions_copy_serving(tmp_path):
    serving, store, (champion, candidate), verdict = _serve(tmp_path, 900.0, 100.0)
    assert not verdict.promoted and not serving.running
    versions = store.versions()
    assert [v.get("trial_arm") for v in versions] == [CANDIDATE, CHAMPION]
    assert store.read_bytes(2) == champion     # the window that serves on: the prior's file
    assert versions[1]["copy_of"] is None and versions[1]["trial_of"] == 1
    assert versions[1]["trained_on_records"] == 0 and versions[1]["trial_window"] == 1
    assert serving.wait_factor == 2 and serving.stats()["refused"] == 1
    assert serving.stats()["champion_version"] is None


def test_a_promoted_candidate_serves_as_the_new_champion(tmp_path):
    serving, store, (champion, candidate), verdict = _serve(tmp_path, 100.0, 900.0)
    assert verdict.promoted
    versions = store.versions()
    assert [v.get("trial_arm") for v in versions] == [CANDIDATE, CHAMPION, CHAMPION]
    assert store.read_bytes(3) == candidate and versions[2]["copy_of"] == 1
    assert versions[2]["trained_on_records"] == 900 and "promoted" in versions[2]["trial_verdict"]
    assert serving.wait_factor == 1 and serving.stats()["champion_version"] == 1


def test_a_restart_in_the_middle_of_a_trial_is_seen(tmp_path):
    from placement.service.trial_serving import champion_of_store
    serving, store, _, _ = _serve(tmp_path, 900.0, 100.0)
    assert champion_of_store(store) == (store.versions()[1], False)
    store.publish(lambda path, _v: path.write_bytes(store.read_bytes(1)),
                  {"trial_arm": CANDIDATE})
    entry, interrupted = champion_of_store(store)
    assert interrupted and entry["version"] == 2


# -- in the learner --------------------------------------------------------------------------
def _routers_and_learner(tmp_path, candidate_ms: float, champion_ms: float, reports: int):
    """A learner with a two-pair trial, fed by routers that decide with its newest version: tasks
    a candidate's file decided take ``candidate_ms``, others ``champion_ms``. Returns the
    learner and, per report, the version serving."""
    from test_model_gate import CLUSTER, NODES
    from placement.service.burst_check import BurstCheck
    from placement.service.learner import OnlineLearner
    from placement.service.store import ModelStore
    learner = OnlineLearner(CLUSTER, ModelStore(tmp_path), {"hidden_sizes": (16, 8),
                                                            "learning_starts": 4},
                            min_records_first_version=60, publish_every=60, judge="latency",
                            burst_check=BurstCheck(min_tasks=1, tolerance=float("inf")),
                            trial=TrialSettings(window_tasks=20, pairs=2, min_wins=2),
                            publish_prior=False)   # the prior as the trial's starting file
    serving, t0 = [], 1_700_000_000_000
    for r in range(reports):
        latest = learner.store.latest()
        version = -1 if latest is None else latest["version"]
        arm = None if latest is None else latest.get("trial_arm")
        # a candidate's copy carries the candidate's weights: its tasks are as slow
        ms = candidate_ms if arm == CANDIDATE else champion_ms
        node = NODES[r % 3]
        at = t0 + 1_000 * r
        timings = [{"task_id": f"r{r}-{i}", "app_id": "resize", "input_size": 2_048,
                    "queue_ms": 1.0, "service_ms": ms - 1.0, "finished_at_ms": at - 10 * i}
                   for i in range(10)]
        learner.take([{"node_id": node, "emitted_at_ms": at, "cpu_util": 0.5, "gpu_util": 0.0,
                       "host_mem_util": 0.5, "gpu_mem_util": 0.0, "uplink_bytes_per_s": 1e5,
                       "downlink_bytes_per_s": 1e5, "queue_depth": 0, "in_flight": 1,
                       "completed": timings, "sequence": r,
                       "routed_model_version": [version] * len(timings)}])
        learner.train_pending()
        serving.append(version)
    return learner, serving


def test_the_learner_serves_the_prior_again_after_a_slower_candidate(tmp_path):
    learner, serving = _routers_and_learner(tmp_path, candidate_ms=900.0, champion_ms=100.0,
                                            reports=22)
    versions = learner.store.versions()
    arms = [(v.get("trial_arm"), v.get("copy_of")) for v in versions]
    # candidate (v1), the prior's copy; it lost the first of two pairs and needed both:
    # refused there, and the prior's copy, already serving, serves on
    assert arms == [(CANDIDATE, None), (CHAMPION, None)]
    stats = learner.trials.stats()
    assert stats["refused"] == 1 and stats["promoted"] == 0
    assert "refused" in stats["last_verdict"] and "could no longer win" in stats["last_verdict"]
    # no candidate while one is on trial, and twice publish_every after a refusal
    assert len(versions) == 2 and serving[-1] == 2


def test_the_learner_promotes_a_faster_candidate(tmp_path):
    learner, _ = _routers_and_learner(tmp_path, candidate_ms=100.0, champion_ms=900.0,
                                      reports=22)
    versions = learner.store.versions()
    assert [v.get("trial_arm") for v in versions[:5]] == [CANDIDATE, CHAMPION, CHAMPION,
                                                          CANDIDATE, CHAMPION]
    assert versions[4]["copy_of"] == 1 and versions[4]["trained_on_records"] == 60
    assert learner.store.read_bytes(5) == learner.store.read_bytes(1)
    assert learner.trials.stats()["promoted"] == 1
    # the next candidate came publish_every later, and is on trial: no other meanwhile
    assert learner.trials.running and versions[-1]["trial_arm"] == CANDIDATE
    assert learner.publish() is None and learner.store.versions() == versions


def test_the_version_a_timing_names_is_read_only_when_a_service_could_have_published_it():
    """``routed_model_version`` crosses a boundary: anything but an int in [0, 2**53] reads as
    -1 (no window of any trial), and the timing is learned from as before."""
    from test_model_gate import CLUSTER
    from placement.service.examples import FeedbackExamples
    from placement.measured_costs import MeasuredCosts
    examples = FeedbackExamples(CLUSTER, MeasuredCosts(CLUSTER), judge="latency")
    named = [3, -5, True, 2**60, 1e300, "7", None, 0]
    at = 1_700_000_000_000
    timings = [{"task_id": f"v{i}", "app_id": "resize", "input_size": 100, "queue_ms": 1.0,
                "service_ms": 10.0, "finished_at_ms": at - i} for i in range(len(named))]
    assert examples.take([{"node_id": "tm_a", "emitted_at_ms": at, "completed": timings,
                           "sequence": 1, "routed_model_version": named}]) == len(named)
    got = [examples.pop().decided_by_version for _ in named]
    assert got == [3, -1, -1, -1, -1, -1, -1, 0]
    # none said (a writer before the field): no window; the tasks are still learned
    assert examples.take([{"node_id": "tm_b", "emitted_at_ms": at, "completed": timings[:2],
                           "sequence": 2, "routed_model_version": []}]) == 2
    assert [examples.pop().decided_by_version for _ in range(2)] == [-1, -1]


def test_a_service_restarted_mid_trial_serves_the_champion_again(tmp_path):
    """The newest stored version is a candidate on trial (the service stopped during its
    trial): the restarted learner's trial publishes a copy of the newest non-candidate."""
    from placement.service.store import ModelStore
    from placement.service.trial_serving import trial_serving_for
    serving, store, (champion, candidate), _ = _serve(tmp_path, 900.0, 100.0)   # v1, v2
    store.publish(lambda path, _v: path.write_bytes(candidate),
                  {"trained_on_records": 1500, "trial_arm": CANDIDATE})        # v3, on trial
    restarted = trial_serving_for(store, TrialSettings(), starting_file=lambda: b"never read")
    latest = store.latest()
    assert latest["version"] == 4 and latest["trial_arm"] == CHAMPION
    assert latest["copy_of"] == 2 and store.read_bytes(4) == champion
    assert "interrupted the trial of version 3" in latest["trial_verdict"]
    assert not restarted.running and restarted.trial.champion == champion
    # an empty store: the learner's own starting weights are the champion, nothing published
    empty = ModelStore(tmp_path / "empty")
    fresh = trial_serving_for(empty, TrialSettings(), starting_file=lambda: b"prior-file")
    assert fresh.trial.champion == b"prior-file" and empty.latest() is None
