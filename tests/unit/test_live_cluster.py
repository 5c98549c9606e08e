"""pyflink_jobs/live_cluster.py: the hook checks its nodes against the TaskManagers the job's
cluster really runs (scenario tables on hand-written lists; REST answers from a real local HTTP
server, hostile ones included; and the hook built on a real PyFlink environment whose
configuration points at that server, as ``flink run`` points a job at its cluster)."""

from __future__ import annotations

import json

import pytest

from pyflink_jobs.hook import HookSettings, StreamplaceHook
from pyflink_jobs.live_cluster import (MAX_LIVE_TASKMANAGERS, LiveTaskManager,
                                       fit_nodes_to_cluster, job_rest_url,
                                       live_taskmanagers_from, read_live_taskmanagers)
from pyflink_jobs.router import RouterNode

SPEC = [RouterNode("tm_a", cpu_cores=1), RouterNode("tm_b", cpu_cores=1),
        RouterNode("tm_c", cpu_cores=1, work_multiplier=2.0)]


def _tm(node_id, own=4.0, cores=2):
    return LiveTaskManager(node_id, own, cores)


# (case, live TaskManagers, routing, chosen, expected node ids or the error's words, note's words)
FIT_CASES = [
    ("REST not read", None, "pinned", False, ["tm_a", "tm_b", "tm_c"], ""),
    ("nothing registered yet", [], "pinned", False, ["tm_a", "tm_b", "tm_c"], ""),
    ("the spec's cluster", [_tm("tm_a"), _tm("tm_b"), _tm("tm_c")], "pinned", False,
     ["tm_a", "tm_b", "tm_c"], ""),
    ("one still starting", [_tm("tm_a"), _tm("tm_b")], "pinned", True,
     ["tm_a", "tm_b", "tm_c"], "['tm_c']"),
    ("another cluster, spec not chosen", [_tm("tm_w"), _tm("tm_x", 2.0, 8)], "pinned", False,
     ["tm_w", "tm_x"], "instead"),
    ("another cluster, spec chosen", [_tm("tm_w"), _tm("tm_x")], "pinned", True,
     ValueError("none of them"), ""),
    ("no own resources (a foreign cluster)", [_tm("f00d", 0.0), _tm("beef", 0.0)], "pinned",
     False, ValueError("rest_partitioner"), ""),
    ("an own resource below 1", [_tm("tm_w", 0.5)], "pinned", False,
     ValueError("amount >= 1"), ""),
    ("rest_partitioner needs ids only", [_tm("f00d", 0.0)], "rest_partitioner", False,
     ["f00d"], "instead"),
    ("Flink's generated ids", [_tm("127.0.0.1:40123-2f5e1a", 4.0)], "rest_partitioner", False,
     ValueError("registered: 127.0.0.1:40123-2f5e1a"), ""),
    ("ids of the spec without their resource", [_tm("tm_a", 0.0), _tm("tm_b", 0.0)], "pinned",
     False, ValueError("registered: tm_a (resource 0)"), ""),
]


@pytest.mark.parametrize("case, live, routing, chosen, expected, note_words", FIT_CASES,
                         ids=[c[0] for c in FIT_CASES])
def test_the_nodes_fit_the_live_cluster(case, live, routing, chosen, expected, note_words):
    if isinstance(expected, Exception):
        with pytest.raises(ValueError, match=str(expected).replace("(", r"\(")
                           .replace(")", r"\)").replace("[", r"\[")):
            fit_nodes_to_cluster(SPEC, live, routing, chosen)
        return
    nodes, note = fit_nodes_to_cluster(SPEC, live, routing, chosen)
    assert [n.node_id for n in nodes] == expected
    assert (note_words in note) if note_words else note == ""


@pytest.mark.parametrize("live, error", [
    ([LiveTaskManager(n, 2.0, 1, 1.0) for n in ("tm_a", "tm_b", "tm_c")], None),
    ([LiveTaskManager("tm_a", 2.0, 1, 1.0), LiveTaskManager("tm_b", 2.0, 1, 0.0),
      LiveTaskManager("tm_c", 2.0, 1, 0.5)], "['tm_b', 'tm_c'] have none"),
    ([LiveTaskManager(n, 2.0, 1, 0.0) for n in ("edge_1", "edge_2")], "['edge_1', 'edge_2']"),
])
def test_colocated_routers_need_their_resource_on_every_node(live, error):
    """routing="colocated" pins a router to each node with one unit of streamplace_router:
    a node without it would leave a router waiting for a slot forever."""
    if error is None:
        nodes, _ = fit_nodes_to_cluster(SPEC, live, "colocated", chosen=False)
        assert [n.node_id for n in nodes] == ["tm_a", "tm_b", "tm_c"]
        return
    with pytest.raises(ValueError, match=r"streamplace_router.*" + error.replace("[", r"\[")
                       .replace("]", r"\]")):
        fit_nodes_to_cluster(SPEC, live, "colocated", chosen=False)
    fit_nodes_to_cluster(SPEC, live, "pinned", chosen=False)   # pinned routers need none


def test_colocated_routers_count_the_nodes_taken_from_the_cluster():
    settings = HookSettings(routing="colocated")
    live = [LiveTaskManager(f"edge_{i}", 2.0, 1, 1.0) for i in range(1, 5)]
    nodes = settings.resolved_nodes(live)
    assert len(nodes) == 4 and settings.router_instances(nodes) == 4
    assert settings.operator_instances(nodes) == 4 + 4     # routers, then executors
    assert settings.router_instances() == 3                # the spec's, without the cluster


def test_nodes_taken_from_the_cluster_carry_its_cores_and_one_instance_each():
    nodes, _ = fit_nodes_to_cluster(SPEC, [_tm("tm_w", 4.0, 8), _tm("tm_x", 1.0, 1)],
                                    "pinned", chosen=False)
    assert [(n.node_id, n.cpu_cores, n.instances, n.work_multiplier) for n in nodes] == \
        [("tm_w", 8, 1, 1.0), ("tm_x", 1, 1, 1.0)]


def _answer(*entries):
    return {"taskmanagers": list(entries)}


def _entry(node_id, own=4.0, cores=2, **extra):
    entry = {"id": node_id, "slotsNumber": 4,
             "totalResource": {"cpuCores": 4.0, "extendedResources": {node_id: own}},
             "hardware": {"cpuCores": cores}}
    entry.update(extra)
    return entry


def test_rest_answers_become_live_taskmanagers_sorted_by_id():
    colocated = _entry("tm_a")
    colocated["totalResource"]["extendedResources"]["streamplace_router"] = 1.0
    live = live_taskmanagers_from(_answer(_entry("tm_b", 2.0, 1), colocated))
    assert live == [LiveTaskManager("tm_a", 4.0, 2, 1.0), LiveTaskManager("tm_b", 2.0, 1, 0.0)]


@pytest.mark.parametrize("answer, expected", [
    ([], None), ("taskmanagers", None), ({}, None), ({"taskmanagers": {"tm_a": 1}}, None),
    (_answer("tm_a"), None),                                   # an entry that is not an object
    (_answer({"id": 7}), None), (_answer({"id": ""}), None), (_answer({"id": "x" * 201}), None),
    (_answer(_entry("tm_a"), _entry("tm_a")), None),           # the same id twice
    ({"taskmanagers": [_entry(f"tm{i}") for i in range(MAX_LIVE_TASKMANAGERS + 1)]}, None),
    # odd values inside an entry are the cautious value, not a failure
    (_answer({"id": "tm_a"}), [LiveTaskManager("tm_a", 0.0, 1)]),
    (_answer(_entry("tm_a", own=float("nan"), cores=float("inf"))),
     [LiveTaskManager("tm_a", 0.0, 1)]),
    (_answer(_entry("tm_a", own=True, cores="8")), [LiveTaskManager("tm_a", 0.0, 1)]),
    (_answer(_entry("tm_a", own=-3.0, cores=10**9)), [LiveTaskManager("tm_a", 0.0, 4096)]),
    # an integer past a float's range (JSON allows it) clamps instead of raising OverflowError
    (_answer(_entry("tm_a", own=10**400, cores=-10**400)),
     [LiveTaskManager("tm_a", 1.7976931348623157e308, 1)]),
    (_answer({"id": "tm_a", "totalResource": [], "hardware": None}),
     [LiveTaskManager("tm_a", 0.0, 1)]),
], ids=lambda v: str(v)[:40])
def test_hostile_or_odd_rest_answers(answer, expected):
    assert live_taskmanagers_from(answer) == expected


def test_read_from_a_real_http_server(jobmanager):
    jobmanager.routes[("GET", "/taskmanagers")] = (
        200, json.dumps(_answer(_entry("tm_w"), _entry("tm_x", 0.0))).encode())
    assert read_live_taskmanagers(jobmanager.url) == [LiveTaskManager("tm_w", 4.0, 2),
                                                      LiveTaskManager("tm_x", 0.0, 2)]
    jobmanager.routes[("GET", "/taskmanagers")] = (200, b"<html>a proxy</html>")
    assert read_live_taskmanagers(jobmanager.url) is None
    jobmanager.routes[("GET", "/taskmanagers")] = (200, b'{"taskmanagers": [1, 2]}')
    assert read_live_taskmanagers(jobmanager.url) is None
    jobmanager.routes[("GET", "/taskmanagers")] = (500, b'{"errors": ["boom"]}')
    assert read_live_taskmanagers(jobmanager.url) is None


def test_an_address_where_nothing_answers_changes_nothing():
    import socket
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    assert read_live_taskmanagers(f"http://127.0.0.1:{port}", timeout_s=0.5) is None
    assert read_live_taskmanagers("not a url") is None


class _NoJvm:
    """A stand-in environment: no configuration can be read from it."""


def test_the_rest_address_comes_from_the_job_else_only_an_explicit_one():
    assert job_rest_url(_NoJvm()) == ""
    assert job_rest_url(_NoJvm(), "http://jm:9081") == "http://jm:9081"


def _remote_env(port: int):
    """A real PyFlink environment configured as ``flink run`` configures a job's: a remote
    target and the cluster's REST address."""
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.util.java_utils import get_j_env_configuration
    env = StreamExecutionEnvironment.get_execution_environment()
    # a script's own environment is local whatever it is given; flink run's is remote
    config = get_j_env_configuration(env._j_stream_execution_environment)
    config.setString("execution.target", "remote")
    config.setString("rest.address", "127.0.0.1")
    config.setString("rest.port", str(port))
    return env


#: The hooks built here read the feedback topic on the routers' own threads, so the job has no
#: Kafka source and needs no connector jar to be built (it is never run here).
def _lines(env):
    from pyflink.common import Types
    return env.from_collection(["a", "b"], type_info=Types.STRING())


def test_the_hook_places_on_the_jobs_own_cluster_when_the_spec_was_not_chosen(jobmanager):
    jobmanager.routes[("GET", "/taskmanagers")] = (
        200, json.dumps(_answer(_entry("worker_1"), _entry("worker_2", 2.0, 4))).encode())
    env = _remote_env(jobmanager.server_address[1])
    assert job_rest_url(env) == jobmanager.url
    from pyflink.common import Types
    hook = StreamplaceHook(HookSettings(router_feedback="topic"))
    hook.apply(env, _lines(env), str.upper, output_type=Types.STRING())
    assert [(n.node_id, n.cpu_cores) for n in hook.nodes] == [("worker_1", 2), ("worker_2", 4)]
    assert ("GET", "/taskmanagers", b"") in jobmanager.seen


def test_the_hook_refuses_a_chosen_spec_that_is_not_the_jobs_cluster(jobmanager):
    jobmanager.routes[("GET", "/taskmanagers")] = (
        200, json.dumps(_answer(_entry("worker_1"))).encode())
    env = _remote_env(jobmanager.server_address[1])
    from pyflink.common import Types
    hook = StreamplaceHook(HookSettings(cluster_spec="hosts", router_feedback="topic"))
    with pytest.raises(ValueError, match="cluster spec 'hosts'.*registered: worker_1"):
        hook.apply(env, _lines(env), str.upper, output_type=Types.STRING())


def test_the_hook_keeps_the_spec_on_its_own_cluster_and_when_rest_is_down(jobmanager):
    jobmanager.routes[("GET", "/taskmanagers")] = (
        200, json.dumps(_answer(*(_entry(n) for n in ("tm_a", "tm_b", "tm_c")))).encode())
    env = _remote_env(jobmanager.server_address[1])
    from pyflink.common import Types
    hook = StreamplaceHook(HookSettings(router_feedback="topic"))
    hook.apply(env, _lines(env), str.upper, output_type=Types.STRING())
    assert [n.node_id for n in hook.nodes] == ["tm_a", "tm_b", "tm_c"]
    assert hook.nodes[2].work_multiplier == 2.0        # the spec's own description kept
    jobmanager.routes.clear()                          # every path 404 now
    env = _remote_env(jobmanager.server_address[1])
    hook = StreamplaceHook(HookSettings(router_feedback="topic"))
    hook.apply(env, _lines(env), str.upper, output_type=Types.STRING())
    assert [n.node_id for n in hook.nodes] == ["tm_a", "tm_b", "tm_c"]


def test_a_service_plan_for_other_nodes_is_not_used(jobmanager, caplog):
    """The placement service's plan names its own spec's nodes; on the job's cluster it gives
    way to one executor each (a plan the user wrote still has to name known nodes)."""
    jobmanager.routes[("GET", "/plan")] = (200, json.dumps(
        {"nodes": {"tm_a": 2, "tm_b": 1}}).encode())
    live = [_tm("worker_1"), _tm("worker_2")]
    settings = HookSettings(service_url=jobmanager.url)
    nodes = settings.resolved_nodes(live)
    assert [(n.node_id, n.instances) for n in nodes] == [("worker_1", 1), ("worker_2", 1)]
    assert "plan names nodes this job lacks" in caplog.text
    with pytest.raises(ValueError, match="plan names nodes"):
        HookSettings(plan={"tm_a": 2}).resolved_nodes(live)


def test_a_service_plan_naming_more_nodes_than_the_job_has_gives_the_jobs_their_counts(
        jobmanager, caplog):
    """A service whose plan also names nodes this job lacks (planned from another spec, or
    a TaskManager the job does not use): the job's own nodes keep their planned counts."""
    jobmanager.routes[("GET", "/plan")] = (200, json.dumps(
        {"nodes": {"worker_1": 3, "tm_a": 2}}).encode())
    live = [_tm("worker_1"), _tm("worker_2")]
    nodes = HookSettings(service_url=jobmanager.url).resolved_nodes(live)
    assert [(n.node_id, n.instances) for n in nodes] == [("worker_1", 3), ("worker_2", 1)]
    assert "['tm_a']" in caplog.text


# (case, spec node ids, live TaskManagers, expected retired -> host)
RETIRE_CASES = [
    ("REST not read", ["tm_a", "tm_b", "tm_c"], None, {}),
    ("nothing registered yet", ["tm_a", "tm_b", "tm_c"], [], {}),
    ("all there", ["tm_a", "tm_b", "tm_c"], [_tm("tm_a"), _tm("tm_b"), _tm("tm_c")], {}),
    ("tm_c missing", ["tm_a", "tm_b", "tm_c"], [_tm("tm_a"), _tm("tm_b")], {"tm_c": "tm_a"}),
    ("two missing, round robin", ["tm_a", "tm_b", "tm_c", "tm_d"],
     [_tm("tm_b"), _tm("tm_d")], {"tm_a": "tm_b", "tm_c": "tm_d"}),
    ("registered without its own resource counts as missing", ["tm_a", "tm_b"],
     [_tm("tm_a"), _tm("tm_b", own=0.0)], {"tm_b": "tm_a"}),
    ("none of the spec's: not this rule's (fit_nodes_to_cluster's)", ["tm_a", "tm_b"],
     [_tm("worker_1")], {}),
]


@pytest.mark.parametrize("case, spec_ids, live, expected", RETIRE_CASES,
                         ids=[c[0] for c in RETIRE_CASES])
def test_the_default_specs_missing_nodes_are_retired_onto_registered_ones(case, spec_ids, live,
                                                                         expected):
    from pyflink_jobs.live_cluster import retire_unregistered
    assert retire_unregistered(spec_ids, live) == expected


def test_the_hook_runs_on_the_default_specs_nodes_a_cluster_has(jobmanager, caplog):
    """A cluster of tm_a and tm_b, plain `flink run`, the default spec: before, tm_c's pinned
    executor waited for a slot forever and nothing came out; now it is retired onto tm_a (its
    uid kept, fed nothing) and the job places on tm_a and tm_b. A chosen spec still waits."""
    jobmanager.routes[("GET", "/taskmanagers")] = (
        200, json.dumps(_answer(_entry("tm_a"), _entry("tm_b"))).encode())
    from pyflink.common import Types
    env = _remote_env(jobmanager.server_address[1])
    hook = StreamplaceHook(HookSettings(router_feedback="topic"))
    hook.apply(env, _lines(env), str.upper, output_type=Types.STRING())
    assert [n.node_id for n in hook.nodes] == ["tm_a", "tm_b"]
    assert hook.settings.retired == {"tm_c": "tm_a"}
    assert "retired onto" in caplog.text
    env = _remote_env(jobmanager.server_address[1])
    chosen = StreamplaceHook(HookSettings(cluster_spec="hosts", router_feedback="topic"))
    chosen.apply(env, _lines(env), str.upper, output_type=Types.STRING())
    assert [n.node_id for n in chosen.nodes] == ["tm_a", "tm_b", "tm_c"]
    assert chosen.settings.retired == {}
