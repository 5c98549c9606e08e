"""One forged or freak work time must not decide where work goes (placement.measured_costs):
the first samples of a (type, node) pair are judged against their median before the pair is
trusted, and a trusted pair's estimate moves by at most half of itself per sample. Scenario
tables of hand-written samples; the placement loop is MCT on measured costs, as in a router."""

from __future__ import annotations

from collections import Counter

import pytest

from placement.measured_costs import AffineFit, MeasuredCosts
from placement.policies import make_policy
from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task

NODES = ("tm_a", "tm_b", "tm_c")
CLUSTER = ClusterSpec(tuple(NodeSpec(n, 2, 8.0) for n in NODES))
OP = "user_op"
TRUE_S = 0.1   # every node takes 0.1 s a record of this operator


# (name, samples in arrival order (size, seconds), the estimate at size 1,000 must lie in)
COLD_STARTS = [
    ("an hour claimed first", [(1_000, 3600.0), (1_000, TRUE_S), (1_000, TRUE_S)],
     (TRUE_S, 1.34 * TRUE_S)),
    ("a microsecond claimed first", [(1_000, 1e-6), (1_000, TRUE_S), (1_000, TRUE_S)],
     (0.82 * TRUE_S, TRUE_S)),
    ("an hour claimed last", [(1_000, TRUE_S), (1_000, TRUE_S), (1_000, 3600.0)],
     (TRUE_S, 1.34 * TRUE_S)),
    ("a huge size claimed with its hour", [(10**9, 3600.0), (1_000, TRUE_S), (2_000, TRUE_S)],
     (0.9 * TRUE_S, 1.1 * TRUE_S)),
    ("no outlier", [(1_000, TRUE_S)] * 3, (TRUE_S * 0.999, TRUE_S * 1.001)),
]


@pytest.mark.parametrize("name, samples, bounds", COLD_STARTS, ids=[c[0] for c in COLD_STARTS])
def test_one_bad_first_sample_leaves_the_trusted_fit_near_the_truth(name, samples, bounds):
    costs = MeasuredCosts(CLUSTER, min_samples=3)
    for size, seconds in samples:
        assert costs.observe("tm_a", OP, size, seconds)
    assert costs.samples("tm_a", OP) == 3
    low, high = bounds
    assert low <= costs.estimate_s("tm_a", OP, 1_000) <= high


def test_samples_that_follow_an_affine_law_are_never_clipped_at_the_start():
    """Sizes 1x to 300x apart, pure per-byte and fixed-plus-per-byte: the robust start keeps
    them exactly (the same fit as AffineFit on the raw samples)."""
    for law in (lambda s: 2e-6 * s, lambda s: 0.01 + 1e-6 * s):
        samples = [(1_000, law(1_000)), (300_000, law(300_000)), (30_000, law(30_000))]
        costs, fit = MeasuredCosts(CLUSTER, min_samples=3), AffineFit(costs_smoothing())
        for size, seconds in samples:
            costs.observe("tm_a", OP, size, seconds)
            fit.add(size, seconds)
        assert costs.trusted_line("tm_a", OP) == pytest.approx(fit.coefficients())


@pytest.mark.parametrize("forged", [(0, 1e-6), (0, 3600.0), (10**11, 3600.0), (10**11, 1e-6),
                                    (10_000, 1e-6)])
def test_one_record_at_a_far_size_does_not_reshape_the_estimates_at_other_sizes(forged):
    """20 records of size 1,000 (0.1 s each): one forged record at another size is learned
    as a sample of the constant the pair is, within half of it, at every size."""
    costs = MeasuredCosts(CLUSTER, min_samples=3)
    for _ in range(20):
        costs.observe("tm_a", OP, 1_000, TRUE_S)
    costs.observe("tm_a", OP, *forged)
    for size in (100, 1_000, 10_000):
        assert 0.5 * TRUE_S <= costs.estimate_s("tm_a", OP, size) <= 1.5 * TRUE_S, size


def test_a_real_shift_of_sizes_is_learned_from_its_second_record():
    """The same pair, then records 10x larger taking 10x longer (a law through the origin):
    the first is kept aside, the second brings both in, and the slope follows at once."""
    costs = MeasuredCosts(CLUSTER, min_samples=3)
    for _ in range(20):
        costs.observe("tm_a", OP, 1_000, TRUE_S)
    costs.observe("tm_a", OP, 10_000, 10 * TRUE_S)
    assert costs.estimate_s("tm_a", OP, 10_000) == pytest.approx(TRUE_S)   # one: aside
    costs.observe("tm_a", OP, 10_000, 10 * TRUE_S)
    assert costs.estimate_s("tm_a", OP, 10_000) == pytest.approx(10 * TRUE_S, rel=0.05)
    assert costs.estimate_s("tm_a", OP, 1_000) == pytest.approx(TRUE_S, rel=0.05)


def _varied_pair() -> MeasuredCosts:
    """A trusted pair whose sizes vary (500 to 1,450), 0.1 ms a size unit."""
    costs = MeasuredCosts(CLUSTER, min_samples=3)
    for i in range(20):
        costs.observe("tm_a", OP, 500 + 50 * i, 1e-4 * (500 + 50 * i))
    return costs


@pytest.mark.parametrize("forged", [(10_000, 3600.0), (10_000, 1e-6), (100_000, 3600.0),
                                    (10**11, 3600.0), (10**11, 1e-6), (0, 3600.0)])
def test_one_far_record_leaves_a_pair_whose_sizes_vary_where_it_was(forged):
    """On the old rule (hold a far record only while sizes had not varied) one record at 10x
    the sizes and an hour made every estimate 85x, one at 10^11 sizes 9x at size 100."""
    costs = _varied_pair()
    before = [costs.estimate_s("tm_a", OP, size) for size in (100, 1_000, 10_000)]
    costs.observe("tm_a", OP, *forged)
    after = [costs.estimate_s("tm_a", OP, size) for size in (100, 1_000, 10_000)]
    assert after == pytest.approx(before, rel=0.02)


def test_a_pair_whose_sizes_vary_follows_larger_records_from_the_second():
    costs = _varied_pair()
    costs.observe("tm_a", OP, 10_000, 1.0)
    costs.observe("tm_a", OP, 10_000, 1.0)
    assert costs.estimate_s("tm_a", OP, 10_000) == pytest.approx(1.0, rel=0.1)
    assert costs.estimate_s("tm_a", OP, 1_000) == pytest.approx(0.1, rel=0.1)


def test_records_inside_the_sizes_seen_are_learned_at_once():
    costs = _varied_pair()
    costs.observe("tm_a", OP, 1_400, 0.3)    # twice the law, at a size seen before
    assert costs.estimate_s("tm_a", OP, 1_400) > 1.02 * 0.14


def costs_smoothing() -> float:
    return MeasuredCosts(CLUSTER).smoothing


@pytest.mark.parametrize("trusted_samples, most", [(3, 1.5), (20, 1.5), (400, 1.06)])
def test_a_forged_sample_on_a_trusted_pair_moves_it_by_at_most_half(trusted_samples, most):
    costs = MeasuredCosts(CLUSTER, min_samples=3)
    for _ in range(trusted_samples):
        costs.observe("tm_a", OP, 1_000, TRUE_S)
    costs.observe("tm_a", OP, 1_000, 3600.0)
    assert TRUE_S < costs.estimate_s("tm_a", OP, 1_000) <= most * TRUE_S


def test_a_node_that_really_slows_down_is_still_followed():
    costs = MeasuredCosts(CLUSTER, min_samples=3, smoothing=0.05)
    for _ in range(50):
        costs.observe("tm_a", OP, 1_000, TRUE_S)
    for _ in range(100):   # 20x slower from now on (a noisy neighbour, a throttled host)
        costs.observe("tm_a", OP, 1_000, 20 * TRUE_S)
    assert costs.estimate_s("tm_a", OP, 1_000) == pytest.approx(20 * TRUE_S, rel=0.02)


def _route(costs, forged: dict | None, steps: int = 20) -> Counter:
    """MCT on measured costs, as a router runs it: three records arrive per step, each node
    finishes one queued record per step and reports its true time; a node's backlog is its
    queued records at the router's (non-exploring) estimate. ``forged``: one report
    (node -> seconds) that arrives before the first record."""
    policy = make_policy("mct", CLUSTER, costs=costs)
    for node, seconds in (forged or {}).items():
        costs.observe(node, OP, 1_000, seconds)
    chosen, queued = Counter(), Counter()
    for step in range(steps):
        for k in range(3):
            states = tuple(NodeState(node, queue_depth=queued[node], backlog_s=queued[node] *
                                     costs.estimate_s(node, OP, 1_000, explore=False))
                           for node in NODES)
            task = Task(f"t{step}-{k}", OP, 1_000)
            node = policy.decide(Observation(task, states, float(step))).node
            chosen[node] += 1
            queued[node] += 1
        for node in NODES:
            if queued[node]:
                queued[node] -= 1
                costs.observe(node, OP, 1_000, TRUE_S)
    return chosen


@pytest.mark.parametrize("forged", [{"tm_a": 3600.0}, {"tm_b": 1e-6}])
def test_one_forged_report_before_the_first_record_does_not_decide_where_work_goes(forged):
    honest = _route(MeasuredCosts(CLUSTER, min_samples=3), None)
    attacked = _route(MeasuredCosts(CLUSTER, min_samples=3), forged)
    node = next(iter(forged))
    assert min(honest.values()) >= 15, honest               # the honest run spreads the work
    assert abs(attacked[node] - honest[node]) <= 8, (honest, attacked)


def _route_heterogeneous(forged: dict | None, steps: int = 20) -> Counter:
    """MCT on measured costs, as a router runs it, on nodes of different true speeds (tm_c 5x
    slower): three records arrive per step, each node works 0.2 s per step and reports each
    finished record's true time. ``forged``: one report (node -> seconds) before the first."""
    true_s = {"tm_a": TRUE_S, "tm_b": TRUE_S, "tm_c": 5 * TRUE_S}
    costs = MeasuredCosts(CLUSTER, min_samples=3)
    policy = make_policy("mct", CLUSTER, costs=costs)
    for node, seconds in (forged or {}).items():
        costs.observe(node, OP, 1_000, seconds)
    chosen, queued, worked = Counter(), Counter(), Counter()
    for step in range(steps):
        for k in range(3):
            states = tuple(NodeState(node, queue_depth=queued[node], backlog_s=queued[node] *
                                     costs.estimate_s(node, OP, 1_000, explore=False))
                           for node in NODES)
            node = policy.decide(Observation(Task(f"t{step}-{k}", OP, 1_000), states,
                                             float(step))).node
            chosen[node] += 1
            queued[node] += 1
        for node in NODES:
            worked[node] += 0.2
            while queued[node] and worked[node] >= true_s[node]:
                worked[node] -= true_s[node]
                queued[node] -= 1
                costs.observe(node, OP, 1_000, true_s[node])
    return chosen


@pytest.mark.parametrize("forged_s", [1e-6, 1e-3, 0.02])
def test_one_forged_fast_report_sends_a_cold_router_no_more_work_to_a_slow_node(forged_s):
    """Before 2026-12-05 an untrusted pair's estimate was its own first sample: a forged
    microsecond for the 5x slower tm_c tripled its share of the first 60 records (3 -> 9) and
    queued them behind its real work. Now a pair's first samples move its estimate by at most
    half of what the fallback chain says without them, until ``min_samples`` make it its own."""
    honest = _route_heterogeneous(None)
    attacked = _route_heterogeneous({"tm_c": forged_s})
    assert honest["tm_c"] <= 4, honest                     # explored, then avoided
    assert attacked["tm_c"] <= honest["tm_c"] + 1, (honest, attacked)


# (name, samples on a new type's node (size, seconds), estimate bounds without exploration)
UNTRUSTED = [
    ("one forged microsecond", [(1_000, 1e-6)], (0.1 / 1.5, 0.1)),
    ("one forged hour", [(1_000, 3600.0)], (0.1, 0.1 * 1.5)),
    ("two honest 10 s samples", [(1_000, 10.0)] * 2, (0.1 * 2.0, 0.1 * 2.0)),
    ("three honest 10 s samples: trusted", [(1_000, 10.0)] * 3, (10.0, 10.0)),
]


@pytest.mark.parametrize("name, samples, bounds", UNTRUSTED, ids=[c[0] for c in UNTRUSTED])
def test_an_untrusted_pair_moves_from_its_fallback_by_its_evidence_only(name, samples, bounds):
    """Nothing known of the type elsewhere: the fallback is ``default_s`` (0.1 s on these
    speed-1 nodes); k samples move the estimate within ``1 + 0.5 k`` of it."""
    costs = MeasuredCosts(CLUSTER, min_samples=3)
    for size, seconds in samples:
        costs.observe("tm_a", OP, size, seconds)
    low, high = bounds
    assert low * 0.999 <= costs.estimate_s("tm_a", OP, 1_000, explore=False) <= high * 1.001


def test_the_fit_settings_set_on_measured_costs_are_the_ones_the_table_uses():
    """One copy of each setting: raising ``max_sample_influence`` and ``outlier_ratio`` on a
    MeasuredCosts lets a trusted pair follow a slower node at once (with the defaults it moves
    by at most half of itself per sample); lowering ``min_samples`` trusts a pair sooner."""
    def after_a_slowdown(**settings) -> float:
        costs = MeasuredCosts(CLUSTER, min_samples=3)
        for name, value in settings.items():
            setattr(costs, name, value)
        for _ in range(3):
            costs.observe("tm_a", OP, 1_000, TRUE_S)
        costs.observe("tm_a", OP, 1_000, 10 * TRUE_S)
        return costs.estimate_s("tm_a", OP, 1_000)

    damped = after_a_slowdown()
    followed = after_a_slowdown(max_sample_influence=10.0, outlier_ratio=100.0)
    assert damped < 2 * TRUE_S < followed
    costs = MeasuredCosts(CLUSTER, min_samples=3)
    costs.min_samples = 1
    costs.observe("tm_a", OP, 1_000, TRUE_S)
    assert costs.min_samples == 1 and costs.trusted_line("tm_a", OP) is not None
