"""One NodeFeedback -> NodeState rule (workload.feedback), and both of its users agree on it.

Scenario table: a NodeFeedback record (normal, broken, hostile) -> the expected node numbers.
Each record goes through the router's path (``Router.on_feedback`` then ``reported_state``) and
the service learner's path (``OnlineLearner.take`` then its history's ``latest``): both must
give exactly the expected, bounded and finite state.
"""

from __future__ import annotations

import math

import pytest

from pyflink_jobs.router import Router, RouterNode, RouterSettings
from workload.feedback import (MAX_AGE_S, MAX_QUEUE_DEPTH, feedback_age_s,
                               feedback_emitted_at_ms, node_state_from_feedback)
from workload.model import ClusterSpec, NodeSpec, NodeState, Task

NOW_MS = 1_700_000_010_000
LINK_BYTES_PER_S = 1000.0 * 125_000.0   # the default 1 Gbit/s link


def record(node="tm_a", emitted=NOW_MS - 2_000, **fields):
    """A NodeFeedback record; ``emitted=None`` leaves ``emitted_at_ms`` out, a field given as
    ``...`` is left out too."""
    base = {"node_id": node, "emitted_at_ms": emitted, "cpu_util": 0.0, "gpu_util": 0.0,
            "host_mem_util": 0.0, "gpu_mem_util": 0.0, "uplink_bytes_per_s": 0.0,
            "downlink_bytes_per_s": 0.0, "queue_depth": 0, "in_flight": 0, "sequence": 1}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not ... and not (k == "emitted_at_ms"
                                                                    and v is None)}


def expected(age_s=2.0, **fields):
    return dict({"cpu_util": 0.0, "gpu_util": 0.0, "host_mem_util": 0.0, "gpu_mem_util": 0.0,
                 "uplink_util": 0.0, "downlink_util": 0.0, "queue_depth": 0, "age_s": age_s},
                **fields)


NAN, INF = float("nan"), float("inf")
MISSING = ...

# case -> (record fields, expected NodeState fields)
CASES = [
    ("normal", dict(cpu_util=0.5, gpu_util=0.25, host_mem_util=0.4, gpu_mem_util=0.1,
                    uplink_bytes_per_s=0.1 * LINK_BYTES_PER_S,
                    downlink_bytes_per_s=0.5 * LINK_BYTES_PER_S, queue_depth=2, in_flight=1),
     expected(cpu_util=0.5, gpu_util=0.25, host_mem_util=0.4, gpu_mem_util=0.1,
              uplink_util=0.1, downlink_util=0.5, queue_depth=3)),
    ("NaN readings are no measurement", dict(cpu_util=NAN, gpu_util=NAN, host_mem_util=0.3,
                                             uplink_bytes_per_s=NAN, queue_depth=NAN,
                                             in_flight=4),
     expected(host_mem_util=0.3, queue_depth=4)),
    ("infinite readings are no measurement", dict(cpu_util=INF, host_mem_util=-INF,
                                                  downlink_bytes_per_s=INF, in_flight=INF),
     expected()),
    ("negative values clamp to zero", dict(cpu_util=-0.5, gpu_mem_util=-1e9,
                                           uplink_bytes_per_s=-1e6, queue_depth=-5,
                                           in_flight=2),
     expected(queue_depth=2)),
    ("huge values clamp to the bound", dict(cpu_util=1e300, gpu_util=10**400, host_mem_util=1.5,
                                            queue_depth=10**12, in_flight=2**31 - 1),
     expected(cpu_util=1.0, gpu_util=1.0, host_mem_util=1.0, queue_depth=MAX_QUEUE_DEPTH)),
    ("missing fields read as not reported", dict(cpu_util=MISSING, gpu_util=MISSING,
                                                 host_mem_util=MISSING, gpu_mem_util=MISSING,
                                                 uplink_bytes_per_s=MISSING,
                                                 downlink_bytes_per_s=MISSING,
                                                 queue_depth=MISSING, in_flight=MISSING),
     expected()),
    ("wrong types read as not reported", dict(cpu_util="0.5", gpu_util=True, gpu_mem_util=None,
                                              queue_depth="3", in_flight=[1]),
     expected()),
    ("link rates over capacity are a full link", dict(
        uplink_bytes_per_s=4 * LINK_BYTES_PER_S, downlink_bytes_per_s=LINK_BYTES_PER_S),
     expected(uplink_util=1.0, downlink_util=1.0)),
    ("fractional counts are floored", dict(queue_depth=2.9, in_flight=0.5),
     expected(queue_depth=2)),
    ("no emission time: as stale as ages go", dict(emitted=None, cpu_util=0.2),
     expected(age_s=MAX_AGE_S, cpu_util=0.2)),
    ("NaN emission time: as stale as ages go", dict(emitted=NAN, cpu_util=0.2),
     expected(age_s=MAX_AGE_S, cpu_util=0.2)),
    ("a report from the future is fresh", dict(emitted=NOW_MS + 60_000, cpu_util=0.2),
     expected(age_s=0.0, cpu_util=0.2)),
    ("a report from long ago is capped", dict(emitted=1, cpu_util=0.2),
     expected(age_s=MAX_AGE_S, cpu_util=0.2)),
]
NODES = [f"n{i}" for i in range(len(CASES))]  # one node per case: histories do not mix


class FixedClock:
    def __call__(self) -> float:
        return NOW_MS / 1000.0


@pytest.fixture(scope="module")
def router():
    return Router(RouterSettings(nodes=[RouterNode(n) for n in NODES],
                                 policy="least_outstanding"), clock=FixedClock())


@pytest.fixture(scope="module")
def learner(tmp_path_factory):
    from placement.service.learner import OnlineLearner
    from placement.service.store import ModelStore
    cluster = ClusterSpec(tuple(NodeSpec(n, 1, 16.0) for n in NODES))
    return OnlineLearner(cluster, ModelStore(tmp_path_factory.mktemp("models")),
                         {"hidden_sizes": (16, 8), "seed": 0})


def _check_bounded(state: NodeState) -> None:
    for name in ("cpu_util", "gpu_util", "host_mem_util", "gpu_mem_util", "uplink_util",
                 "downlink_util"):
        value = getattr(state, name)
        assert math.isfinite(value) and 0.0 <= value <= 1.0, (name, value)
    assert isinstance(state.queue_depth, int) and 0 <= state.queue_depth <= MAX_QUEUE_DEPTH
    assert math.isfinite(state.age_s) and 0.0 <= state.age_s <= MAX_AGE_S


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c[0] for c in CASES])
def test_router_and_learner_see_the_same_clamped_state(router, learner, index):
    _, fields, want = CASES[index]
    node = NODES[index]
    rec = record(node, **fields)
    direct = node_state_from_feedback(rec, now_ms=NOW_MS)
    router.on_feedback(rec)
    from_router = router.reported_state(node)
    learner.take([rec])
    from_learner = learner.history.latest(node, now_ms=NOW_MS)
    got = {k: getattr(direct, k) for k in want}
    assert got == pytest.approx(want), got
    assert from_router == direct, (from_router, direct)
    assert from_learner == direct, (from_learner, direct)
    _check_bounded(direct)


def test_the_routers_observation_keeps_the_feedback_numbers_and_its_own_counts():
    router = Router(RouterSettings(nodes=[RouterNode("tm_a"), RouterNode("tm_b")],
                                   policy="least_outstanding"), clock=FixedClock())
    router.on_feedback(record("tm_a", cpu_util=0.7, queue_depth=9, in_flight=9))
    router.route(Task("t0", "video_synopsis", 64))
    observed = {s.node_id: s for s in router.observation(Task("t1", "video_synopsis", 64)).nodes}
    assert observed["tm_a"].cpu_util == 0.7 and observed["tm_a"].age_s == 2.0
    assert observed["tm_b"].age_s == 0.0  # never reported: a zero state, not a stale one
    assert [observed[n].queue_depth for n in ("tm_a", "tm_b")] == \
        [router.in_flight()[n] for n in ("tm_a", "tm_b")]  # its own counts, not the report's 18


def test_link_capacities_come_from_each_users_node_description(tmp_path):
    from placement.service.learner import OnlineLearner
    from placement.service.store import ModelStore
    rec = record("slow_link", uplink_bytes_per_s=0.25 * 100 * 125_000.0,
                 downlink_bytes_per_s=2 * 100 * 125_000.0)
    router = Router(RouterSettings(nodes=[RouterNode("slow_link", link_mbps=100.0)],
                                   policy="least_outstanding"), clock=FixedClock())
    router.on_feedback(rec)
    learner = OnlineLearner(ClusterSpec((NodeSpec("slow_link", 1, 16.0, uplink_mbps=100.0,
                                                  downlink_mbps=100.0),)),
                            ModelStore(tmp_path), {"hidden_sizes": (16, 8), "seed": 0})
    learner.take([rec])
    state = router.reported_state("slow_link")
    assert (state.uplink_util, state.downlink_util) == (0.25, 1.0)
    assert learner.history.latest("slow_link", now_ms=NOW_MS) == state


@pytest.mark.parametrize("capacity", [0.0, -100.0, float("nan"), float("inf"), "1000", True])
def test_a_link_capacity_that_is_not_a_positive_number_is_refused(capacity):
    with pytest.raises(ValueError, match="uplink_mbps"):
        node_state_from_feedback(record(), uplink_mbps=capacity)


@pytest.mark.parametrize("bad", [{}, {"node_id": 7}, {"node_id": None}])
def test_a_record_without_a_node_id_is_refused(bad):
    with pytest.raises(ValueError, match="node_id"):
        node_state_from_feedback(bad)


@pytest.mark.parametrize("emitted,want", [
    (1_700_000_000_123, 1_700_000_000_123), (1.5e12, 1_500_000_000_000), (-5, 0), (NAN, 0),
    (INF, 0), ("1700000000000", 0), (None, 0), (10**40, 2**63 - 1),
])
def test_emission_times_are_bounded_ints(emitted, want):
    assert feedback_emitted_at_ms({"emitted_at_ms": emitted}) == want


def test_ages_are_bounded_and_never_negative():
    assert feedback_age_s(1_000, 3_500) == 2.5
    assert feedback_age_s(5_000, 1_000) == 0.0
    assert feedback_age_s(0, 1e30) == MAX_AGE_S
    assert feedback_age_s(0, float("nan")) == MAX_AGE_S
