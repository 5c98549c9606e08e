"""The Flink router's brain without Flink: node view, in-flight counts, model swaps, fallback."""

from __future__ import annotations

import numpy as np
import pytest

from placement.ldwp.agent import LDWPPolicy, LDWPSettings
from placement.ldwp.inference import NumpyLDWPPolicy
from placement.ldwp.modelfile import ModelFileError
from pyflink_jobs.feedback import FeedbackPublisher, FinishedTask
from pyflink_jobs.routed import DecisionContext, RoutedRecord
from pyflink_jobs.hook import HookSettings, StreamplaceHook, nodes_from_cluster_spec
from pyflink_jobs.router import ModelRefresher, Router, RouterNode, RouterSettings
from workload.model import NodeState, Observation, Task

NODES = [RouterNode("tm_a", cpu_cores=2), RouterNode("tm_b", cpu_cores=1),
         RouterNode("tm_c", cpu_cores=1, work_multiplier=2.0)]


class FakeClock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def event(i, app="video_synopsis"):
    return {"task_id": f"t{i}", "app_id": app, "input_size": 4096}


def feedback(node, completed=(), cpu=0.0, at_ms=1_000_000):
    return {"node_id": node, "emitted_at_ms": at_ms, "cpu_util": cpu, "gpu_util": 0.0,
            "host_mem_util": 0.1, "gpu_mem_util": 0.0, "uplink_bytes_per_s": 0.0,
            "downlink_bytes_per_s": 0.0, "queue_depth": 0, "in_flight": 0,
            "completed": [{"task_id": t, "app_id": "video_synopsis", "input_size": 4096,
                           "queue_ms": 1.0, "service_ms": 2.0, "finished_at_ms": at_ms}
                          for t in completed], "sequence": at_ms}


def make_router(policy="least_outstanding", **kw):
    return Router(RouterSettings(nodes=NODES, policy=policy, **kw), clock=FakeClock())


# Scenario table (HiveD style): in-flight counts before the decision -> the expected node.
LEAST_OUTSTANDING_CASES = [
    ("all idle: first node", {}, "tm_a"),
    ("tm_a busy: next idle", {"tm_a": 1}, "tm_b"),
    ("a and b busy: tm_c", {"tm_a": 1, "tm_b": 1}, "tm_c"),
    ("everyone one: first again", {"tm_a": 1, "tm_b": 1, "tm_c": 1}, "tm_a"),
    ("b has fewest", {"tm_a": 3, "tm_b": 1, "tm_c": 2}, "tm_b"),
]


@pytest.mark.parametrize("name,in_flight,expected", LEAST_OUTSTANDING_CASES,
                         ids=[c[0] for c in LEAST_OUTSTANDING_CASES])
def test_least_outstanding_counts_the_routers_own_in_flight_tasks(name, in_flight, expected):
    router = make_router()
    i = 0
    for node, count in in_flight.items():
        for _ in range(count):
            # force the placement to build the in-flight counts of the scenario
            router.ledger.add(f"pre{i}", node, now=1000.0, work_s=0.0)
            i += 1
    decision = router.decide_event(event(99))
    assert decision.node == expected, decision.reason
    assert router.in_flight()[expected] == in_flight.get(expected, 0) + 1


def test_feedback_retires_completed_tasks_once_and_duplicates_are_harmless():
    router = make_router()
    nodes = [router.decide_event(event(i)).node for i in range(6)]
    assert nodes == ["tm_a", "tm_b", "tm_c", "tm_a", "tm_b", "tm_c"]
    router.on_feedback(feedback("tm_a", completed=["t0", "t3"]))
    router.on_feedback(feedback("tm_a", completed=["t0", "t3"]))  # at-least-once duplicate
    router.on_feedback(feedback("tm_b", completed=["unknown-task"]))
    assert router.in_flight() == {"tm_a": 0, "tm_b": 2, "tm_c": 2}
    assert router.decide_event(event(7)).node == "tm_a"


def test_a_report_retires_only_the_reporting_nodes_own_tasks():
    """A forged (or confused) report from tm_a naming tm_b's and tm_c's tasks must not empty
    their queues in the router's view: least-outstanding would then pile work on them."""
    router = make_router()
    nodes = [router.decide_event(event(i)).node for i in range(6)]
    assert nodes == ["tm_a", "tm_b", "tm_c", "tm_a", "tm_b", "tm_c"]
    router.on_feedback(feedback("tm_a", completed=["t1", "t2", "t4", "t5", "t0"]))
    assert router.in_flight() == {"tm_a": 1, "tm_b": 2, "tm_c": 2}   # only t0 retired
    assert router.speeds.samples("tm_a") == 1          # and only t0's timing was learned
    router.on_feedback(feedback("tm_a", completed=["elsewhere-1"]))  # not this router's task:
    assert router.speeds.samples("tm_a") == 2          # a sample of tm_a, as before
    assert router.decide_event(event(7)).node == "tm_a"
    router.on_feedback(feedback("tm_b", completed=["t1"]))           # its own: retired
    assert router.in_flight() == {"tm_a": 2, "tm_b": 1, "tm_c": 2}


def test_full_nodes_are_avoided_until_every_queue_is_full():
    router = make_router(policy="round_robin", executor_capacity=1)
    # capacity 1 x 1 instance: after three tasks every node is full; round-robin would go on
    # cycling, so the fourth still gets a node (backpressure is Flink's job), but while some
    # node has room the full ones are skipped.
    first = [router.decide_event(event(i)).node for i in range(3)]
    assert sorted(first) == ["tm_a", "tm_b", "tm_c"]
    router.on_feedback(feedback("tm_b", completed=[f"t{first.index('tm_b')}"]))
    assert router.decide_event(event(10)).node == "tm_b"
    assert router.full_skips >= 2
    assert router.decide_event(event(11)).node in ("tm_a", "tm_b", "tm_c")


def test_with_every_queue_full_the_decision_still_sees_the_reported_utilisations():
    # A router running ahead of its executors has every queue full nearly always; its model
    # was trained on rows with the feedback's utilisations, so those must not turn to zeros.
    router = make_router(policy="round_robin", executor_capacity=1)
    router.on_feedback(feedback("tm_b", cpu=0.7))
    for i in range(3):
        router.decide_event(event(i))
    observation = router.observation(Task("x", "video_synopsis", 1))
    assert [n.queue_depth for n in observation.nodes] == [1, 1, 1]     # all full
    assert [n.cpu_util for n in observation.nodes] == [0.0, 0.7, 0.0]
    assert observation.nodes[1].host_mem_util == pytest.approx(0.1)


def test_a_replayed_task_id_is_counted_once():
    router = make_router()
    router.decide_event(event(1))
    router.decide_event(event(1))
    assert sum(router.in_flight().values()) == 1
    assert sum(router.routed.values()) == 2  # both decisions are still counted as routed


def test_in_flight_entries_expire_when_feedback_never_arrives():
    clock = FakeClock()
    router = Router(RouterSettings(nodes=NODES, policy="least_outstanding",
                                   in_flight_timeout_s=10.0), clock=clock)
    router.decide_event(event(1))
    clock.now += 11.0
    router.decide_event(event(2))
    assert sum(router.in_flight().values()) == 1


def test_feedback_updates_the_utilisation_the_policy_sees():
    router = make_router(policy="least_loaded")
    router.on_feedback(feedback("tm_a", cpu=0.9))
    router.on_feedback(feedback("tm_b", cpu=0.5))
    router.on_feedback(feedback("tm_c", cpu=0.1))
    assert router.decide_event(event(1)).node == "tm_c"
    obs = router.observation(Task("x", "video_synopsis", 1))
    assert [round(n.cpu_util, 2) for n in obs.nodes] == [0.9, 0.5, 0.1]


def test_feedback_from_nodes_outside_the_plan_is_ignored():
    router = make_router()
    router.on_feedback(feedback("tm_z", cpu=1.0))
    assert set(router.observation(Task("x", "video_synopsis", 1)).node_ids) == \
        {"tm_a", "tm_b", "tm_c"}


def test_a_report_of_a_node_outside_the_plan_retires_none_of_its_tasks():
    # another job's executor on the same feedback topic, or a forged report, must not make
    # a busy node look free
    router = make_router()
    assert router.decide_event(event(0)).node == "tm_a"
    router.on_feedback(feedback("tm_z", completed=["t0"]))
    assert router.in_flight()["tm_a"] == 1
    router.on_feedback(feedback("tm_a", completed=["t0"]))
    assert router.in_flight()["tm_a"] == 0


# -- LDWP models on the router -------------------------------------------------------------

def _agent(network="node_scoring", seed=3):
    router = make_router()
    settings = LDWPSettings(network=network, seed=seed, hidden_sizes=(16, 8))
    return router.cluster, LDWPPolicy(router.cluster, settings=settings)


RESIDUAL = {"q_prior": "completion", "residual": "scaled"}
NUMPY_AGREEMENT_CASES = {
    "node_scoring": ("node_scoring", {}),
    "paper": ("paper", {}),
    "residual scaled (the service's default)": ("node_scoring", RESIDUAL),
    "residual additive": ("node_scoring", {"q_prior": "completion"}),
    "residual with spec features": ("node_scoring", {**RESIDUAL, "spec_features": True}),
}


@pytest.mark.parametrize("case", list(NUMPY_AGREEMENT_CASES))
def test_numpy_policy_agrees_with_the_torch_agent(tmp_path, case):
    network, extra = NUMPY_AGREEMENT_CASES[case]
    router = make_router()
    cluster = router.cluster
    agent = LDWPPolicy(cluster, settings=LDWPSettings(network=network, seed=3,
                                                      hidden_sizes=(16, 8), **extra))
    if extra:  # the residual head starts at zero (= MCT); give it something to disagree with
        import torch
        with torch.no_grad():
            for parameter in agent.q_network.parameters():
                parameter.add_(0.3 * torch.randn_like(parameter))
        agent._numpy_layers = None
    path = tmp_path / "m.spmodel"
    agent.save(path)
    policy = NumpyLDWPPolicy.from_file(path, cluster)
    rng = np.random.default_rng(0)
    for i in range(20):
        states = tuple(NodeState(n, cpu_util=float(rng.random()), gpu_util=float(rng.random()),
                                 queue_depth=int(rng.integers(0, 9)),
                                 backlog_s=float(rng.random() * 3),
                                 speed_factor=float(rng.uniform(0.5, 4.0)))
                       for n in cluster.node_ids)
        obs = Observation(Task(f"t{i}", ["video_synopsis", "face_recognition"][i % 2],
                               int(rng.integers(1000, 10**6))), states, 0.0)
        expected = agent.q_values(agent.encode(obs))
        got = policy.q_values(policy.encode(obs))
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
        assert policy.decide(obs).node == cluster.node_ids[int(np.argmax(expected))]


def _untrained_residual_model() -> bytes:
    """The service's default network before it learned anything: exactly MCT."""
    import tempfile
    from pathlib import Path
    router = make_router()
    agent = LDWPPolicy(router.cluster, settings=LDWPSettings(
        network="node_scoring", hidden_sizes=(16, 8), latency_transform="log", gamma=0.0,
        **RESIDUAL))
    with tempfile.TemporaryDirectory() as tmp:
        agent.save(Path(tmp) / "m.spmodel")
        return (Path(tmp) / "m.spmodel").read_bytes()


def test_router_counts_the_estimated_work_it_sent_and_retires_it_on_completion():
    router = make_router(policy="mct")
    first, context = router.route_event(event(1))
    estimate = router.speeds.estimate_s(first.node, "video_synopsis", 4096)
    assert estimate > 0
    assert router.backlog_s()[first.node] == pytest.approx(estimate)
    assert context == DecisionContext(queue=0, backlog_ms=0.0, speed=1.0)
    router.on_feedback(feedback(first.node, completed=["t1"]))
    assert router.backlog_s()[first.node] == pytest.approx(0.0)


def _slow_feedback(node, factor, n=8, start=0):
    """Feedback of ``n`` finished tasks of ``node`` that took ``factor`` x the estimate."""
    router = make_router()
    estimate = router.speeds.estimate_s(node, "video_synopsis", 4096)
    record = feedback(node, completed=[f"x{start + i}" for i in range(n)])
    for timing in record["completed"]:
        timing["service_ms"] = factor * estimate * 1000.0
    return record


# Scenario table: tm_a and tm_b have the same spec (1 core, full speed; tm_c does its work
# twice); the feedback says how much slower than the estimate each really works -> where MCT at
# measured speeds and the untrained residual LDWP model (the same rule) send a burst of 11 equal
# tasks. With e the estimate and f a node's slowdown, the k-th task there completes at k*e*f, so
# the burst goes to the 11 smallest of {k * f} (ties in node order; the cases avoid a tie between
# tm_c, whose estimate is only about 2e, and another node at the 11th place).
MEASURED_SPEED_CASES = [
    # a: 1,2,3,4,5 b: 1,2,3,4 c: 2,4
    ("spec speeds: a and b alike, c half", {}, {"tm_a": 5, "tm_b": 4, "tm_c": 2}),
    # a: 1..7, b: 4, c: 2,4,6
    ("b shares its core: 4x slower", {"tm_b": 4.0}, {"tm_a": 7, "tm_b": 1, "tm_c": 3}),
    # a: 1..8, b: 3,6, c (2 x 3): 6
    ("b and c both 3x slower", {"tm_b": 3.0, "tm_c": 3.0}, {"tm_a": 8, "tm_b": 2, "tm_c": 1}),
]


@pytest.mark.parametrize("policy", ["mct", "ldwp"])
@pytest.mark.parametrize("name,factors,expected", MEASURED_SPEED_CASES,
                         ids=[c[0] for c in MEASURED_SPEED_CASES])
def test_measured_speeds_shift_the_share_of_a_burst(policy, name, factors, expected):
    nodes = [RouterNode("tm_a"), RouterNode("tm_b"), RouterNode("tm_c", work_multiplier=2.0)]
    router = Router(RouterSettings(nodes=nodes, policy=policy, executor_capacity=1000,
                                   initial_model=_untrained_residual_model()
                                   if policy == "ldwp" else None), clock=FakeClock())
    before = {n: router.speeds.estimate_s(n, "video_synopsis", 4096) for n in router.node_ids}
    for i, (node, factor) in enumerate(factors.items()):
        router.on_feedback(_slow_feedback(node, factor, start=100 * i))
    # the measured work times (placement.measured_costs) carry each node's slowdown
    assert {n: round(router.speeds.estimate_s(n, "video_synopsis", 4096) / before[n], 3)
            for n in router.node_ids} == {n: factors.get(n, 1.0) for n in router.node_ids}
    for i in range(11):  # a burst, no completions in between: only the estimates decide
        router.decide_event(event(i))
    assert router.routed == expected


def test_the_routers_numbers_for_a_decision_reach_the_feedback():
    router = make_router(policy="mct")
    router.on_feedback(_slow_feedback("tm_a", 2.0))
    router.decide_event(event(1))
    decision, context = router.route_event(event(2))
    node = decision.node
    publisher = FeedbackPublisher(node, lambda: {}, producer=None, clock=FakeClock(100.0))
    publisher.task_finished(finished(event(2), Outcome(1.0, 20.0, 100_000)),
                            routed(event(2), node, 99_000, context), bytes_in=1, bytes_out=1)
    record = publisher.build_record()
    assert record["routed_speed_factor"] == [pytest.approx(router.speeds.factor(node))]
    assert record["routed_backlog_ms"] == [pytest.approx(context.backlog_ms)]
    assert record["routed_queue"] == [context.queue]


def test_paper_model_refuses_other_nodes(tmp_path):
    cluster, agent = _agent("paper")
    agent.save(tmp_path / "m.spmodel")
    policy = NumpyLDWPPolicy.from_file(tmp_path / "m.spmodel", cluster)
    obs = Observation(Task("t", "video_synopsis", 5), (NodeState("tm_a"), NodeState("tm_b")), 0)
    with pytest.raises(ValueError, match="transfer it first"):
        policy.decide(obs)


class FakeService:
    """Stands in for the HTTP client (the service itself is tested against Kafka elsewhere)."""

    def __init__(self):
        self.versions: dict[int, bytes] = {}
        self.down = False

    def latest(self):
        if self.down:
            raise ConnectionError("service unreachable")
        return {"version": max(self.versions)} if self.versions else None

    def download(self, version):
        return self.versions[version]


def test_a_router_function_starts_on_the_services_model_before_its_first_record(tmp_path):
    from pyflink_jobs.router_function import start_refresher
    _, agent = _agent(seed=1)
    agent.save(tmp_path / "v1")
    service = FakeService()
    service.versions[1] = (tmp_path / "v1").read_bytes()
    router = Router(RouterSettings(nodes=NODES, policy="ldwp"), clock=FakeClock())
    refresher = start_refresher(router, service, interval_s=60.0)
    try:
        assert router.model_version == 1 and refresher.installed == 1   # before any record
        assert router.decide_event(event(0)).reason.startswith("LDWP")
        assert router.fallback_decisions == 0 and refresher.is_alive()
    finally:
        refresher.stop()
    service.down = True   # unreachable: the router starts on its fallback, the thread retries
    down = Router(RouterSettings(nodes=NODES, policy="ldwp"), clock=FakeClock())
    refresher = start_refresher(down, service, interval_s=60.0)
    try:
        assert down.model_version is None and refresher.failures == 1 and refresher.is_alive()
        assert down.policy.name == "least_loaded"
    finally:
        refresher.stop()


def test_router_uses_the_fallback_then_swaps_in_new_models_and_survives_outages(tmp_path):
    router = Router(RouterSettings(nodes=NODES, policy="ldwp"), clock=FakeClock())
    assert router.policy.name == "least_loaded"
    router.decide_event(event(0))
    assert router.fallback_decisions == 1
    assert router.stats()["decision_path"] == "numpy"    # the fallback rule has no compiled path

    cluster, agent = _agent(seed=1)
    agent.save(tmp_path / "v1")
    service = FakeService()
    service.versions[1] = (tmp_path / "v1").read_bytes()
    refresher = ModelRefresher(router, service, interval_s=0.01)
    assert refresher.poll_once() is True
    assert router.model_version == 1 and router.policy.name == "ldwp-node_scoring"
    assert refresher.poll_once() is False  # nothing newer
    table = router.model_policy.coefficients
    assert set(table) == {"tm_a", "tm_b", "tm_c"}
    service.versions[2] = service.versions[1]
    assert refresher.poll_once() is True and router.model_version == 2
    assert router.model_policy.coefficients == table  # a swap reuses the fitted table
    service.versions.pop(2)
    router.model_version = 1

    service.down = True
    assert refresher.poll_once() is False and refresher.failures == 1
    assert router.decide_event(event(1)).reason.startswith("LDWP")  # keeps the last model
    from placement.ldwp.compiled import jit_available
    assert router.stats()["decision_path"] == ("compiled" if jit_available() else "numpy")

    service.down = False
    data = bytearray((tmp_path / "v1").read_bytes())
    data[-3] ^= 0xFF  # a tampered download
    service.versions[2] = bytes(data)
    assert refresher.poll_once() is False
    assert "SHA-256" in refresher.last_error and router.model_version == 1
    with pytest.raises(ModelFileError):
        router.install_model(bytes(data))
    assert refresher.refused == 1 and 2 in refresher.refused_versions


def test_a_poisoned_model_version_is_refused_once_and_the_last_good_one_kept(tmp_path):
    """A version with NaN weights (a poisoned learner, an old install) would send every task to
    the first node (argmax over NaN): the router refuses it, keeps its model, and does not
    download that version again."""
    from placement.ldwp.modelfile import load_model, save_model
    router = Router(RouterSettings(nodes=NODES, policy="ldwp"), clock=FakeClock())
    _cluster, agent = _agent(seed=1)
    agent.save(tmp_path / "v1")
    layers, metadata = load_model(tmp_path / "v1")
    layers[0][0][0, 0] = float("nan")
    save_model(tmp_path / "v2", layers, metadata)   # a well-formed file holding a NaN
    service = FakeService()
    service.versions[1] = (tmp_path / "v1").read_bytes()
    refresher = ModelRefresher(router, service, interval_s=0.01)
    assert refresher.poll_once() is True
    good = router.model_policy
    service.versions[2] = (tmp_path / "v2").read_bytes()
    downloads = []
    service.download = lambda v: downloads.append(v) or service.versions[v]
    assert refresher.poll_once() is False and refresher.poll_once() is False
    assert downloads == [2]                          # refused once, never fetched again
    assert refresher.refused == 1 and "non-finite" in refresher.last_error
    assert router.model_version == 1 and router.model_policy is good
    assert router.decide_event(event(0)).reason.startswith("LDWP: highest Q")


# -- feedback records ----------------------------------------------------------------------

class Outcome:
    """An executor outcome whose stages ran back to back at the end of its service time for
    ``work_ms`` in all (two stages), the rest of the service time waiting for the unit."""

    def __init__(self, queue_ms, service_ms, finished, work_ms=None):
        from interference.executor import StageRecord
        self.queue_ms, self.service_ms, self.finished_at_ms = queue_ms, service_ms, finished
        work = int(service_ms if work_ms is None else work_ms)
        half = work // 2
        self.stages = [StageRecord("a", "cpu:0", finished - work, finished - work + half, 1),
                       StageRecord("b", "cpu:0", finished - work + half, finished, 1)]


def finished(event_, outcome):
    return FinishedTask.from_task_outcome(event_, outcome)


def routed(event_, node, at_ms, context=DecisionContext()):
    return RoutedRecord(event_["task_id"], event_["app_id"], event_["input_size"], node, at_ms,
                        context, event_)


def test_a_hosts_measured_link_rates_win_over_the_records_own_bytes():
    clock = FakeClock(100.0)
    snap = {"cpu_util": 0.5, "uplink_bytes_per_s": 4.5e6, "downlink_bytes_per_s": 30_000.0}
    publisher = FeedbackPublisher("tm_c", lambda: snap, producer=None, clock=clock, instance=1)
    publisher.task_finished(finished(event(1), Outcome(3.0, 40.0, 100_000)),
                            routed(event(1), "tm_c", 99_900), bytes_in=100, bytes_out=50)
    clock.now = 102.0
    record = publisher.build_record()
    assert (record["uplink_bytes_per_s"], record["downlink_bytes_per_s"]) == (4.5e6, 30_000.0)


def test_uneven_links_are_read_against_their_own_capacities():
    router = Router(RouterSettings(nodes=[RouterNode("tm_c", cpu_cores=1, link_mbps=80.0,
                                                     uplink_mbps=40.0)]))
    # 2.5 MB/s each way: 50% of a 40 Mbit/s uplink, 25% of an 80 Mbit/s downlink
    router.on_feedback({"node_id": "tm_c", "emitted_at_ms": 1, "uplink_bytes_per_s": 2.5e6,
                        "downlink_bytes_per_s": 2.5e6, "completed": []})
    state = router.reported_state("tm_c")
    assert (state.uplink_util, state.downlink_util) == pytest.approx((0.5, 0.25))


def test_feedback_publisher_reports_each_finished_task_once_with_rates():
    clock = FakeClock(100.0)
    snap = {"cpu_util": 0.5, "host_mem_util": 0.2, "in_flight": 3, "queue_depth": 1}
    publisher = FeedbackPublisher("tm_a", lambda: snap, producer=None, clock=clock, instance=1)
    publisher.task_finished(finished(event(1), Outcome(3.0, 40.0, 100_000, work_ms=25)),
                            routed(event(1), "tm_a", 99_900), bytes_in=100, bytes_out=50)
    publisher.task_finished(finished(event(2), Outcome(1.0, 20.0, 100_010)),
                            routed(event(2), "tm_a", 99_990), bytes_in=300, bytes_out=150)
    # not placed by a router: bytes count, the timing teaches placement nothing
    publisher.task_finished(finished(event(3), Outcome(1.0, 5.0, 100_020)), None,
                            bytes_in=0, bytes_out=0)
    clock.now = 102.0
    first = publisher.build_record()
    assert [t["task_id"] for t in first["completed"]] == ["t1", "t2"]
    # waiting counts from the routing decision: 100,000 - 99,900 - 40 ms of service
    assert first["completed"][0]["queue_ms"] == pytest.approx(60.0)
    # the node's speed is measured by the stages' run time, not by the waits between them
    assert first["completed"][0]["work_ms"] == pytest.approx(25.0)
    assert first["completed"][1]["work_ms"] == pytest.approx(20.0)
    assert first["downlink_bytes_per_s"] == pytest.approx(200.0)
    assert first["uplink_bytes_per_s"] == pytest.approx(100.0)
    assert (first["cpu_util"], first["in_flight"], first["queue_depth"]) == (0.5, 3, 1)
    assert first["sequence"] == 102_000 * 1000 + 1
    clock.now = 102.0  # same millisecond: the stamp and the sequence still grow
    second = publisher.build_record()
    assert second["completed"] == [] and second["sequence"] > first["sequence"]
    assert second["emitted_at_ms"] == first["emitted_at_ms"] + 1
    from workload.codec import decode, encode
    assert decode("NodeFeedback", encode("NodeFeedback", first))["completed"][1]["task_id"] == "t2"


def test_a_burst_of_timings_leaves_in_records_kafka_accepts_and_memory_stays_bounded(
        monkeypatch):
    from pyflink_jobs import feedback as feedback_module

    class Producer:
        def __init__(self):
            self.values = []

        def produce(self, topic, key, value, on_delivery):
            self.values.append(value)

        def poll(self, timeout):
            return 0

    clock = FakeClock(100.0)
    producer = Producer()
    publisher = FeedbackPublisher("tm_a", lambda: {"cpu_util": 0.5}, producer=producer,
                                  clock=clock)
    for i in range(2500):
        publisher.task_finished(finished(event(i), Outcome(1.0, 2.0, 100_000 + i)),
                                routed(event(i), "tm_a", 99_999), bytes_in=10, bytes_out=5)
    clock.now = 101.0
    last = publisher.emit()
    from workload.codec import decode
    records = [decode("NodeFeedback", v) for v in producer.values]
    assert [len(r["completed"]) for r in records] == [1000, 1000, 500]
    assert last["completed"] == records[-1]["completed"]
    ids = [t["task_id"] for r in records for t in r["completed"]]
    assert ids == [f"t{i}" for i in range(2500)]  # every timing once, in order
    assert all(len(v) < 1_000_000 for v in producer.values)
    # one node report repeated: the rates of the whole interval, never a zero for the rest
    assert {(r["downlink_bytes_per_s"], r["uplink_bytes_per_s"]) for r in records} == \
        {(25_000.0, 12_500.0)}
    stamps = [(r["emitted_at_ms"], r["sequence"]) for r in records]
    assert stamps == sorted(set(stamps)) and len({s for _, s in stamps}) == 3
    assert publisher.pending() == 0 and publisher.dropped_timings == 0
    # nothing can leave: at most MAX_PENDING_TIMINGS wait, the oldest dropped and counted
    monkeypatch.setattr(feedback_module, "MAX_PENDING_TIMINGS", 100)
    for i in range(130):
        publisher.task_finished(finished(event(i), Outcome(1.0, 2.0, 200_000 + i)),
                                routed(event(i), "tm_a", 199_999), bytes_in=0, bytes_out=0)
    assert publisher.pending() == 100 and publisher.dropped_timings == 30
    assert publisher.build_record()["completed"][0]["task_id"] == "t30"


# -- hook settings -------------------------------------------------------------------------

def test_hook_resolves_the_plan_against_the_cluster_spec():
    nodes = nodes_from_cluster_spec("default")
    assert [(n.node_id, n.cpu_cores, n.work_multiplier) for n in nodes] == \
        [("tm_a", 1, 1.0), ("tm_b", 1, 1.0), ("tm_c", 1, 2.0)]
    settings = HookSettings(plan={"tm_a": 2, "tm_b": 1, "tm_c": 0})
    resolved = settings.resolved_nodes()
    assert [(n.node_id, n.instances) for n in resolved] == [("tm_a", 2), ("tm_b", 1)]
    with pytest.raises(ValueError, match="lacks"):
        HookSettings(plan={"tm_x": 1}).resolved_nodes()
    with pytest.raises(ValueError, match="unknown policy"):
        StreamplaceHook.builder().policy("fastest-please").build()
    with pytest.raises(ValueError, match=">= 0"):
        StreamplaceHook.builder().plan({"tm_a": -1})


def test_feedback_reports_how_the_executor_batches_each_stage():
    from pyflink_jobs.feedback import stage_batches
    from workload.codec import decode, encode
    report = {"model": {"cpu": {"batch_size": 16, "batches": 40, "mean_inputs": 12.5,
                                "p50_ms": 2.0, "p99_ms": float("nan")}},
              "tokenize": {"cpu": {"batch_size": 1, "batches": 500, "mean_inputs": 1.0,
                                   "p50_ms": 0.1, "p99_ms": 0.3}}}
    snap = {"cpu_util": 0.4, "stage_batches": stage_batches(report)}
    publisher = FeedbackPublisher("tm_a", lambda: snap, producer=None, clock=FakeClock(100.0))
    record = decode("NodeFeedback", encode("NodeFeedback", publisher.build_record()))
    assert [(r["stage"], r["batch_size"], r["mean_inputs"]) for r in record["stage_batches"]] == \
        [("model", 16, 12.5), ("tokenize", 1, 1.0)]
    assert record["stage_batches"][0]["p99_ms"] == 0.0  # not finite: not published
    assert publisher.build_record()["stage_batches"] == record["stage_batches"]


def test_a_rule_that_learns_from_outcomes_hears_each_completion_once_with_its_latency():
    router = make_router(policy="mct")
    heard = []
    router.fixed_policy.observe_completion = lambda *args: heard.append(args)
    first, _ = router.route_event(event(1))
    router.clock.now += 2.5
    router.on_feedback(feedback(first.node, completed=["t1"]))
    router.on_feedback(feedback(first.node, completed=["t1"]))  # duplicate: not heard again
    router.on_feedback(feedback(first.node, completed=["never-sent"]))
    assert heard == [("t1", pytest.approx(2.5), first.node)]


# Router instances sharing the stream: each may fill its share of every executor's capacity.
CAPACITY_SHARE_CASES = [
    # (instances on the node, executor capacity, routers, in-flight one router may hold there)
    ("one router holds it all", 2, 16, 1, 32),
    ("two routers: half each", 2, 16, 2, 16),
    ("three routers round the share up", 1, 16, 3, 6),
    ("more routers than slots: one each", 1, 2, 5, 1),
]


@pytest.mark.parametrize("name,instances,capacity,routers,expected", CAPACITY_SHARE_CASES,
                         ids=[c[0] for c in CAPACITY_SHARE_CASES])
def test_each_router_instance_fills_only_its_share_of_the_executors(name, instances, capacity,
                                                                    routers, expected):
    settings = RouterSettings(nodes=[RouterNode("tm_a", instances=instances)],
                              executor_capacity=capacity, routers=routers, policy="round_robin")
    assert settings.capacity_share(settings.nodes[0]) == expected


def test_a_router_with_two_siblings_skips_a_node_once_its_share_is_full():
    nodes = [RouterNode("tm_a"), RouterNode("tm_b")]
    router = Router(RouterSettings(nodes=nodes, policy="round_robin", executor_capacity=4,
                                   routers=2), clock=FakeClock())
    # share 2 per node: the first four tasks alternate, then both are full (Flink's
    # backpressure takes over); a completion on tm_b opens exactly that node again
    first = [router.decide_event(event(i)).node for i in range(4)]
    assert sorted(first) == ["tm_a", "tm_a", "tm_b", "tm_b"]
    router.on_feedback(feedback("tm_b", completed=[f"t{first.index('tm_b')}"]))
    assert router.decide_event(event(10)).node == "tm_b"


@pytest.mark.parametrize("routers", [0, -1, 1.5, True, "2"])
def test_router_instances_must_be_a_positive_int(routers):
    with pytest.raises(ValueError, match="routers"):
        RouterSettings(nodes=NODES, routers=routers)


@pytest.mark.parametrize("value", [0, 65, 2.0, True])
def test_the_hooks_router_parallelism_is_checked_when_set(value):
    with pytest.raises(ValueError, match="router_parallelism"):
        HookSettings(router_parallelism=value)
    with pytest.raises(ValueError, match="router_parallelism"):
        StreamplaceHook.builder().router_parallelism(value)


def test_router_parallelism_reaches_every_router_instance_from_the_environment():
    settings = HookSettings.from_env({"STREAMPLACE_HOOK_ROUTER_PARALLELISM": "3"})
    assert settings.router_parallelism == 3
    hook = StreamplaceHook.builder().settings(settings).build()
    hook.nodes = nodes_from_cluster_spec("default")
    router_settings = hook.router_settings()
    assert router_settings.routers == 3
    node = router_settings.nodes[0]
    assert router_settings.capacity_share(node) == -(-node.instances * hook.settings.executor_capacity // 3)


class _FakeGroupBuilder:
    """Records what a slot sharing group is built with (PyFlink's builder needs a JVM)."""

    def __init__(self, name):
        self.made = {"name": name}

    def __getattr__(self, method):
        def call(*args):
            self.made[method] = args
            return self
        return call

    def build(self):
        return self.made


def _fake_groups(monkeypatch):
    import pyflink.datastream.slot_sharing_group as module
    monkeypatch.setattr(module.SlotSharingGroup, "builder", staticmethod(_FakeGroupBuilder))


def test_io_group_is_pinned_only_when_a_host_is_given(monkeypatch):
    from pyflink_jobs.flink_ops import executor_slot_sharing_group, io_slot_sharing_group
    _fake_groups(monkeypatch)
    assert "set_external_resource" not in io_slot_sharing_group()
    pinned = io_slot_sharing_group(host="tm_a")
    assert pinned["name"] == "default" and pinned["set_external_resource"] == ("tm_a", 1.0)
    # the same resource, one unit per slot, that pins an executor to its TaskManager
    assert executor_slot_sharing_group("tm_a")["set_external_resource"] == ("tm_a", 1.0)


@pytest.mark.parametrize("settings, error", [
    ({"router_host": "tm_a"}, None),
    ({"router_host": ""}, None),
    ({"router_host": "tm_z"}, "none of this job's nodes"),
    ({"router_host": "tm_a", "router_parallelism": 2}, "one router instance"),
    ({"router_host": "tm_a", "routing": "rest_partitioner"}, "routing='pinned'"),
])
def test_router_host_is_checked_against_the_jobs_nodes(settings, error):
    hook = StreamplaceHook.builder().settings(HookSettings(**settings)).build()
    hook.nodes = nodes_from_cluster_spec("default")
    if error is None:
        assert hook._router_host() == (settings["router_host"] or None)
    else:
        with pytest.raises(ValueError, match=error):
            hook._router_host()


def test_router_host_from_the_environment_and_the_builder():
    assert HookSettings.from_env({"STREAMPLACE_HOOK_ROUTER_HOST": "tm_b"}).router_host == "tm_b"
    hook = StreamplaceHook.builder().router_host("tm_c").build()
    assert hook.settings.router_host == "tm_c"


# A report whose completed entries are malformed (the Avro decoder rules these out; callers of
# on_feedback may not): bad entries are skipped one by one, the good ones and the node's
# numbers still count, and nothing raises.
MALFORMED_COMPLETED = [
    ("an entry without a task id", [{"work_ms": 5.0}]),
    ("None and a number", [None, 5]),
    ("a list as task id", [{"task_id": ["t0"]}]),
    ("completed as a dict", {"task_id": "t0"}),
    ("completed as text", "t0"),
]


@pytest.mark.parametrize("why,bad", MALFORMED_COMPLETED, ids=[r[0] for r in MALFORMED_COMPLETED])
def test_malformed_completed_entries_are_skipped_not_raised(why, bad):
    router = make_router()
    router.decide_event(event(0))
    node = next(n for n, c in router.in_flight().items() if c)
    report = feedback(node, completed=["t0"], cpu=0.9)
    report["completed"] = (bad + report["completed"]) if isinstance(bad, list) else bad
    router.on_feedback(report)
    assert router.reported_state(node).cpu_util == pytest.approx(0.9), why
    if isinstance(bad, list):   # the good entry after the bad ones still retires its task
        assert router.in_flight()[node] == 0, why


@pytest.mark.parametrize("node_id", [["tm_a"], {"tm_a": 1}, None, 7])
def test_a_report_whose_node_id_is_not_text_is_ignored(node_id):
    router = make_router()
    router.on_feedback(dict(feedback("tm_a", cpu=0.9), node_id=node_id))
    assert router.reported_state("tm_a").cpu_util == 0.0
    router.on_feedback(["not", "a", "report"])
    assert router.feedback_records == 2


def test_a_paper_layout_model_for_other_nodes_is_refused_at_install():
    from placement.ldwp.shipped import shipped_model
    router = make_router(policy="ldwp")
    data = shipped_model("paper").read_bytes()
    with pytest.raises(ModelFileError, match="transfer it first"):
        router.install_model(data, version=3)
    assert router.model_policy is None and router.model_version is None


def test_each_decision_says_which_service_version_made_it():
    """The service's version trial tells its arms apart by it (placement.service.version_trial):
    the installed version's number, -1 for the fallback rule and for a failing model."""
    router = make_router(policy="ldwp")
    _, context = router.route_event(event(1))
    assert context.model_version == -1                # no model yet: the fallback rule
    router.install_model(_untrained_residual_model(), version=5)
    _, context = router.route_event(event(2))
    assert context.model_version == 5

    class Broken:
        name = "broken"

        def decide(self, observation):
            raise RuntimeError("a bad model")
    router.model_policy = Broken()
    _, context = router.route_event(event(3))
    assert context.model_version == -1                # the fallback decided
