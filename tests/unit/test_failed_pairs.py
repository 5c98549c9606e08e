"""interference.schedulers.failed_pairs and IAWP's use of it: a pair that failed to launch
together is held apart for a while, the hold doubles on repeated failures, is bounded, and a
measured co-run forgets it (scenario tables, hand-made units)."""

from __future__ import annotations

import math

import pytest

from interference.schedulers import make_node_scheduler
from interference.schedulers.failed_pairs import FailedPairs
from workload.model import ComputingUnit, Stage

# (name, [(event, stage, partner, time)], (stage, partners, at), held?)
SCENARIOS = [
    ("no failure: nothing held", [], ("a", ["b"], 0.0), False),
    ("held right after a failure", [("failed", "a", "b", 10.0)], ("a", ["b"], 11.0), True),
    ("held in the other order too", [("failed", "a", "b", 10.0)], ("b", ["a"], 11.0), True),
    ("only next to that partner", [("failed", "a", "b", 10.0)], ("a", ["c"], 11.0), False),
    ("held if any partner failed with it", [("failed", "a", "b", 10.0)],
     ("a", ["c", "b"], 11.0), True),
    ("released after the first hold (30 s)", [("failed", "a", "b", 10.0)],
     ("a", ["b"], 40.5), False),
    ("a second failure after it doubles the hold", [("failed", "a", "b", 10.0),
                                                     ("failed", "a", "b", 50.0)],
     ("a", ["b"], 105.0), True),
    ("... and releases after 60 s", [("failed", "a", "b", 10.0), ("failed", "a", "b", 50.0)],
     ("a", ["b"], 110.5), False),
    ("a failure inside the hold does not double it", [("failed", "a", "b", 10.0),
                                                       ("failed", "a", "b", 20.0)],
     ("a", ["b"], 40.5), False),
    ("a measured co-run forgets the pair", [("failed", "a", "b", 10.0),
                                            ("succeeded", "b", "a", 0.0)],
     ("a", ["b"], 11.0), False),
    ("another GPU model is not held", [("failed", "a", "b", 10.0)], ("a", ["b"], 11.0, "P4"),
     False),
    ("a failure with no clock is ignored", [("failed", "a", "b", math.nan)], ("a", ["b"], 1.0),
     False),
]


@pytest.mark.parametrize("name,events,query,held", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_failed_pairs_scenarios(name, events, query, held):
    pairs = FailedPairs()
    for event, stage, partner, at in events:
        if event == "failed":
            pairs.failed(stage, partner, "K80", at)
        else:
            pairs.succeeded(stage, partner, "K80")
    stage, partners, at = query[:3]
    model = query[3] if len(query) > 3 else "K80"
    assert pairs.held(stage, partners, model, at) is held


def test_the_hold_doubles_up_to_its_cap():
    pairs, now, holds = FailedPairs(first_hold_s=30.0, max_hold_s=100.0), 0.0, []
    for _ in range(5):
        pairs.failed("a", "b", "K80", now)
        release = now
        while pairs.held("a", ["b"], "K80", release):
            release += 1.0
        holds.append(release - now)
        now = release
    assert holds == [30.0, 60.0, 100.0, 100.0, 100.0]


def test_the_table_is_bounded_oldest_first():
    pairs = FailedPairs(max_pairs=3)
    for i in range(5):
        pairs.failed(f"s{i}", "p", "K80", 0.0)
    assert len(pairs) == 3
    assert not pairs.held("s0", ["p"], "K80", 1.0) and pairs.held("s4", ["p"], "K80", 1.0)


@pytest.mark.parametrize("first,cap,size", [(0.0, 10.0, 4), (20.0, 10.0, 4),
                                            (math.inf, math.inf, 4), (1.0, 10.0, 0)])
def test_implausible_settings_are_refused(first, cap, size):
    with pytest.raises(ValueError):
        FailedPairs(first, cap, size)


def _units(running):
    return [ComputingUnit("cpu:0", "cpu"),
            ComputingUnit("gpu:0", "gpu", model="k80", running=tuple(running), capacity=2,
                          memory_mb=12 * 1024)]


def _ready():
    return [Stage("t1", "face_recognition", "face_detection", 20_000_000, True, 0.0),
            Stage("t2", "video_synopsis", "frame_difference", 20_000_000, True, 0.0)]


def test_iawp_passes_over_a_stage_that_failed_next_to_what_runs():
    """The paper's rule launched the failing pair again at every instant; now the GPU takes
    the next queued stage, and after the hold the pair is tried again."""
    scheduler = make_node_scheduler("iawp")
    scheduler.assign([], _units(["face_encoding"]), 100.0)      # the scheduler's clock
    scheduler.observe_corun("face_detection", "face_encoding", "k80", 0.0)
    assert scheduler.observed == 1
    on_gpu = [a.stage.stage for a in scheduler.assign(_ready(), _units(["face_encoding"]), 101.0)
              if a.unit_id == "gpu:0"]
    assert on_gpu == ["frame_difference"]
    later = [a.stage.stage for a in scheduler.assign(_ready()[:1], _units(["face_encoding"]),
                                                     131.0) if a.unit_id == "gpu:0"]
    assert later == ["face_detection"]


def test_the_slowdown_variant_holds_the_pair_and_learns_it():
    scheduler = make_node_scheduler("iawp", interference="slowdown")
    scheduler.assign([], _units(["face_encoding"]), 100.0)
    scheduler.observe_corun("face_detection", "face_encoding", "k80", 0.0)
    assert scheduler.failed_pairs.held("face_detection", ["face_encoding"], "k80", 101.0)
    for now in (101.0, 131.0, 1000.0):   # held, then refused by the learned model
        got = scheduler.assign(_ready()[:1], _units(["face_encoding"]), now)
        assert all(a.unit_id != "gpu:0" for a in got)


@pytest.mark.parametrize("stage,partner,model,rate", [
    ("made_up", "face_encoding", "k80", 0.0), ("face_detection", "face_encoding", None, 0.0),
    ("face_detection", "face_encoding", "k" * 500, 0.0),
    ("face_detection", "face_encoding", "k80", False), ("face_detection", "face_encoding", "k80",
                                                         math.nan)])
def test_iawp_holds_nothing_on_a_refused_report(stage, partner, model, rate):
    scheduler = make_node_scheduler("iawp")
    scheduler.observe_corun(stage, partner, model, rate)
    assert len(scheduler.failed_pairs) == 0
    assert sum(scheduler.refused.values()) == 1 and scheduler.observed == 0
