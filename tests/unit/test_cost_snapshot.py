"""A new router starts from the service's measured work times (placement.cost_snapshot):
round trip, its own measurements win, hostile snapshots refused entry by entry, and a burst
split by measured speeds from the first record."""

from __future__ import annotations

import copy
import logging
import math

import pytest

from placement.cost_snapshot import MAX_FITS, cost_snapshot, seed_costs
from placement.measured_costs import MeasuredCosts
from pyflink_jobs.router import Router, RouterNode, RouterSettings
from pyflink_jobs.router_function import _seed_from_service
from workload.model import ClusterSpec, NodeSpec

NODES = ("tm_a", "tm_b", "tm_c")
CLUSTER = ClusterSpec(tuple(NodeSpec(n, 1, 8.0) for n in NODES))
#: seconds = fixed + per_unit * size per node: tm_b four times slower than tm_a, tm_c twice
TRUTH = {"tm_a": (0.002, 1e-6), "tm_b": (0.008, 4e-6), "tm_c": (0.004, 2e-6)}
SIZES = (1_000, 2_000, 4_000, 8_000, 3_000, 6_000)


def measured_service(types=("resize",)) -> MeasuredCosts:
    costs = MeasuredCosts(CLUSTER)
    for task_type in types:
        for node, (fixed, slope) in TRUTH.items():
            for size in SIZES:
                assert costs.observe(node, task_type, size, fixed + slope * size)
    return costs


def test_a_fresh_cost_model_adopts_every_fit_and_estimates_as_the_service():
    service, router = measured_service(), MeasuredCosts(CLUSTER)
    snapshot = cost_snapshot(service)
    assert len(snapshot["fits"]) == 3
    assert seed_costs(router, snapshot, NODES) == (3, [])
    for node in NODES:
        for size in (500, 5_000, 20_000):
            assert math.isclose(router.estimate_s(node, "resize", size, explore=False),
                                service.estimate_s(node, "resize", size, explore=False),
                                rel_tol=1e-6)
        assert router.samples(node, "resize") == router.min_samples   # trusted at once


def test_the_routers_own_measurements_win_and_other_nodes_are_left_out():
    router = MeasuredCosts(CLUSTER)
    for size in SIZES:
        router.observe("tm_b", "resize", size, 0.5)     # what this router measured itself
    adopted, reasons = seed_costs(router, cost_snapshot(measured_service()), ["tm_a", "tm_b"])
    assert adopted == 1                                   # tm_a only
    assert any("measured this pair itself" in r for r in reasons)
    assert any("not one of the router's nodes" in r for r in reasons)   # tm_c
    assert router.estimate_s("tm_b", "resize", 2_000, explore=False) == pytest.approx(0.5)


GOOD = {"task_type": "resize", "node": "tm_a", "fixed_s": 0.002, "per_unit_s": 1e-6,
        "mean_size": 4000.0, "samples": 40}
HOSTILE = [
    ("not an object", "junk", "not an object"),
    ("NaN fixed time", {**GOOD, "fixed_s": math.nan}, "finite numbers"),
    ("infinite slope", {**GOOD, "per_unit_s": math.inf}, "finite numbers"),
    ("negative size", {**GOOD, "mean_size": -1.0}, "finite numbers"),
    ("a string number", {**GOOD, "fixed_s": "0.1"}, "finite numbers"),
    ("a bool count", {**GOOD, "samples": True}, "samples"),
    ("zero count", {**GOOD, "samples": 0}, "samples"),
    ("unknown node", {**GOOD, "node": "tm_x"}, "not one of the router's nodes"),
    ("empty type", {**GOOD, "task_type": ""}, "task_type"),
    ("huge type name", {**GOOD, "task_type": "x" * 10_000}, "task_type"),
    ("a day per task", {**GOOD, "fixed_s": 86_400.0}, "fitted time"),
    ("zero time", {**GOOD, "fixed_s": 0.0, "per_unit_s": 0.0}, "fitted time"),
    ("size beyond the bound", {**GOOD, "mean_size": 1e15}, "bound"),
    # an int past a float's range at size 0 passed the time check, then float() overflowed
    # and the whole snapshot was lost
    ("a slope of 400 digits at size 0", {**GOOD, "per_unit_s": 10 ** 400, "mean_size": 0},
     "finite numbers"),
]


@pytest.mark.parametrize("name,entry,reason", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_fit_is_refused_with_a_reason_and_the_rest_adopted(name, entry, reason):
    router = MeasuredCosts(CLUSTER)
    good_b = {**GOOD, "node": "tm_b"}
    adopted, reasons = seed_costs(router, {"fits": [entry, good_b]}, NODES)
    assert adopted == 1 and len(reasons) == 1 and reason in reasons[0]
    assert router.samples("tm_a", "resize") == 0 and router.samples("tm_b", "resize") > 0
    estimate = router.estimate_s("tm_b", "resize", 4_000, explore=False)
    assert math.isfinite(estimate) and estimate == pytest.approx(0.006)


@pytest.mark.parametrize("snapshot", [None, [], {"fits": "x"}, {"other": []},
                                      {"fits": [GOOD] * (MAX_FITS + 1)}])
def test_a_malformed_snapshot_changes_nothing(snapshot):
    router = MeasuredCosts(CLUSTER)
    adopted, reasons = seed_costs(router, copy.deepcopy(snapshot), NODES)
    assert adopted == 0 and len(reasons) == 1 and router.version == 0


def test_a_snapshot_is_bounded_to_the_newest_types():
    service = measured_service(types=[f"type{i}" for i in range(4)])
    fits = cost_snapshot(service, limit=6)["fits"]
    assert len(fits) == 6 and {f["task_type"] for f in fits} == {"type2", "type3"}


def _burst(router: Router, n: int = 11) -> dict:
    for i in range(n):  # no completions in between: only the estimates decide
        router.decide_event({"task_id": f"t{i}", "app_id": "resize", "input_size": 4000})
    return dict(router.routed)


class _Service:
    """What RouterFunction.open asks of the placement client."""

    def __init__(self, snapshot=None, error: Exception | None = None):
        self.snapshot, self.error = snapshot, error

    def costs(self):
        if self.error is not None:
            raise self.error
        return self.snapshot


@pytest.mark.parametrize("policy", ["mct", "least_outstanding"])
def test_a_new_router_splits_its_first_burst_by_the_services_measurements(policy):
    nodes = [RouterNode(n) for n in NODES]   # the same spec: only measurements tell apart
    settings = RouterSettings(nodes=nodes, policy=policy, executor_capacity=1000)
    cold, warm = Router(settings), Router(settings)
    _seed_from_service(warm, _Service(cost_snapshot(measured_service())))
    assert warm.seeded_cost_fits == 3 and warm.stats()["seeded_cost_fits"] == 3
    if policy == "mct":
        # k-th task on a node completes at k x its time (1 : 4 : 2): the 11 smallest of
        # {1..8 x 1, 1..2 x 4, 1..4 x 2} with ties in node order -> 7 / 1 / 3
        assert _burst(warm) == {"tm_a": 7, "tm_b": 1, "tm_c": 3}
        assert _burst(cold, 12) == {"tm_a": 4, "tm_b": 4, "tm_c": 4}   # equal estimates
    else:  # a rule that reads no costs splits alike, seeded or not
        assert _burst(warm, 12) == _burst(cold, 12) == {"tm_a": 4, "tm_b": 4, "tm_c": 4}


def test_an_unreachable_service_leaves_the_router_on_its_prior(caplog):
    router = Router(RouterSettings(nodes=[RouterNode(n) for n in NODES], policy="mct"))
    before = router.costs.version
    with caplog.at_level(logging.WARNING):
        _seed_from_service(router, _Service(error=OSError("connection refused")))
        router.seed_costs({"fits": [{**GOOD, "fixed_s": math.nan}]})
    assert router.seeded_cost_fits == 0 and router.costs.version == before
    assert "no measured costs" in caplog.text and "refused" in caplog.text


def test_the_module_example_runs():
    import doctest

    import placement.cost_snapshot as module
    assert doctest.testmod(module).attempted > 0 and doctest.testmod(module).failed == 0
