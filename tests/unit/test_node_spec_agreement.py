"""The hook's routers and the placement service see each cluster-spec node the same way.

Found by reading both conversions side by side (2026-12-07): the service's cluster
(``placement.service.learner.to_cluster_spec``) gave a TaskManager its GPUs (as the
configured ``gpu_model``) and its task heap + managed memory, while the routers' cluster
(``RouterNode.spec``) dropped the GPUs and said 16 GB for every node. On a GPU host
(``gpu-host.yaml``) the routers then divided a node's backlog over its cores alone, estimated
GPU stages at CPU speed, and a model the service trained with spec features read other node
features at the routers than it learned on. On the emulated hosts (``hosts.yaml``) the routers
read a node's feedback byte rates as fractions of its shaped links (8 Mbps for tm_a) and the
service as fractions of 1,000 Mbps, so the link utilisations a model was trained on were about
125 times smaller than those it decided on. Now both use ``workload.model.taskmanager_node``,
with the links of ``TaskManagerSpec.cost_model_links``.
"""

from __future__ import annotations

import pytest

from placement.ldwp.features import node_spec_features
from placement.service.learner import to_cluster_spec
from placement.service.settings import ServiceSettings
from pyflink_jobs.hook import HookSettings, nodes_from_cluster_spec
from pyflink_jobs.router import Router, RouterNode, RouterSettings
from workload.cluster_spec import load_cluster_spec, shipped_spec_names
from workload.estimates import CostModel
from workload.model import taskmanager_node


def _view(node) -> tuple:
    """What the cost model and the node features read of a node (slots aside: the routers'
    are the plan's executor instances)."""
    return (node.node_id, node.cpu_cores, node.host_memory_gb, node.cpu_speed,
            tuple((g.model, g.memory_gb, g.speed) for g in node.gpus), node.uplink_mbps,
            node.downlink_mbps)


@pytest.mark.parametrize("spec", sorted(shipped_spec_names()))
@pytest.mark.parametrize("gpu_model", ["t4", "v100", "h100:9.5"])
def test_routers_and_service_read_every_shipped_spec_alike(spec, gpu_model):
    service = to_cluster_spec(load_cluster_spec(spec), gpu_model)
    routers = Router(RouterSettings(nodes=nodes_from_cluster_spec(spec, gpu_model),
                                    policy="mct")).cluster
    assert [_view(n) for n in routers.nodes] == [_view(n) for n in service.nodes]
    assert [node_spec_features(n) for n in routers.nodes] == \
        [node_spec_features(n) for n in service.nodes]


def test_a_gpu_host_counts_its_gpus_as_units_and_runs_gpu_stages_faster():
    nodes = {n.node_id: n for n in nodes_from_cluster_spec("gpu-host")}
    assert (nodes["tm_gpu2"].gpus, nodes["tm_cpu"].gpus) == (2, 0)
    cluster = {n.node_id: n for n in Router(RouterSettings(nodes=list(nodes.values()),
                                                           policy="mct")).cluster.nodes}
    gpu2, cpu = cluster["tm_gpu2"], cluster["tm_cpu"]
    assert gpu2.cpu_cores + len(gpu2.gpus) == 8 and cpu.cpu_cores + len(cpu.gpus) == 4
    costs = CostModel(colocation=None)
    # the same app per core: a node with GPUs finishes it sooner than one without (before,
    # both were CPU-only in the routers' eyes and the 6-core node only had more cores)
    with_gpus = costs.task_time_coefficients(gpu2)
    without = costs.task_time_coefficients(taskmanager_node("tm_gpu2", 6, memory_gb=3.0))
    app = "face_recognition"
    assert with_gpus[app][1] < without[app][1]


@pytest.mark.parametrize("bad", ["h100-unknown", "", 5, None])
def test_an_unknown_gpu_model_is_refused_by_all_three_alike(bad):
    """The hook, the service and a router node with GPUs apply one check: one message for a
    name (pydantic refuses a value that is not a string before the check runs)."""
    messages = []
    for make in (lambda: HookSettings(gpu_model=bad), lambda: ServiceSettings(gpu_model=bad),
                 lambda: RouterNode("tm_x", gpus=1, gpu_model=bad)):
        with pytest.raises(ValueError, match="gpu_model") as caught:
            make()
        messages.append(str(caught.value))
    if isinstance(bad, str):
        hook, service, router = messages
        assert "must be one of the calibration's GPU models" in hook
        assert hook in service and hook in router   # pydantic and RouterNode add a prefix


@pytest.mark.parametrize("bad", ["h100", "h100:", "h100:fast", "h100:0", "h100:-2",
                                 "h100:inf", "h100:nan", "h100:1e9", ":5", "a b:3", "x" * 41,
                                 "h100:9.5:1"])
def test_a_gpu_model_neither_calibrated_nor_with_a_speed_is_refused_by_all_three(bad):
    for make in (lambda: HookSettings(gpu_model=bad), lambda: ServiceSettings(gpu_model=bad),
                 lambda: RouterNode("tm_x", gpus=1, gpu_model=bad)):
        with pytest.raises(ValueError, match="<model>:<speed>"):
            make()


def test_an_uncalibrated_gpu_with_its_speed_is_priced_alike_at_the_routers_and_the_service():
    """An H100 the calibration does not know, given its speed: the hook's routers and the
    service build the same node (that GPU at that speed), and the cost model times it by the
    speed (the reference GPU's profile scaled), so twice the speed halves a GPU stage."""
    from simulator.from_spec import node_from_taskmanager
    from workload.model import GpuSpec
    router = RouterNode("tm_gpu", cpu_cores=4, gpus=2, memory_gb=1.0, gpu_model="h100:9.5")
    spec = load_cluster_spec("gpu-host")
    service = to_cluster_spec(spec, ServiceSettings(gpu_model="h100:9.5").gpu_model)
    with_gpus = next(n for n in service.nodes if n.gpus)
    assert router.spec().gpus == (GpuSpec("h100", 16.0, 9.5),) * 2
    assert set(with_gpus.gpus) == {GpuSpec("h100", 16.0, 9.5)}
    costs = CostModel(colocation=None)
    stage = "face_detection"
    assert costs.gpu_ms(stage, 10**6, "h100", 19.0) == pytest.approx(
        costs.gpu_ms(stage, 10**6, "h100", 9.5) / 2)
    simulated = node_from_taskmanager(next(tm for tm in spec.taskmanagers if tm.gpu_ids),
                                      gpu_model="h100:9.5")
    assert {(g.model, g.speed) for g in simulated.gpus} == {("h100", 9.5)}


@pytest.mark.parametrize("known", ["t4", "v100"])
def test_a_calibrated_gpu_model_is_taken_by_all_three(known):
    assert HookSettings(gpu_model=known).gpu_model == known
    assert ServiceSettings(gpu_model=known).gpu_model == known
    assert RouterNode("tm_x", gpus=1, gpu_model=known).spec().gpus[0].model == known


@pytest.mark.parametrize("field, value", [
    ("gpus", -1), ("gpus", 2.5), ("gpus", True), ("gpus", 10**6), ("gpus", "2"),
    ("link_mbps", 0.0), ("link_mbps", float("nan")), ("uplink_mbps", -1.0),
    ("memory_gb", -1.0), ("memory_gb", float("inf")), ("cpu_cores", float("nan")),
    ("work_multiplier", float("nan")), ("node_id", 7),
])
def test_a_node_with_an_impossible_number_is_refused_where_it_is_made(field, value):
    """At the job's submission (a user's ``HookSettings(nodes=[...])``), not in the router's
    ``open()`` on a TaskManager, where it failed the job again at every restart."""
    values = {"node_id": "tm_x", "gpus": 1, field: value}
    with pytest.raises(ValueError, match="RouterNode"):
        RouterNode(**values)


def test_a_node_with_gpus_of_an_unknown_model_is_refused():
    with pytest.raises(ValueError, match="gpu_model"):
        RouterNode("tm_x", gpus=1, gpu_model="h900")
    assert RouterNode("tm_x", gpu_model="h900").spec().gpus == ()   # no GPU: nothing to time


def test_the_gpu_model_reaches_the_routers_from_the_environment():
    settings = HookSettings.from_env({"STREAMPLACE_HOOK_GPU_MODEL": "v100",
                                      "STREAMPLACE_HOOK_CLUSTER_SPEC": "gpu-host"})
    assert {n.gpu_model for n in settings.resolved_nodes()} == {"v100"}


# -- TaskManagers no spec describes: what REST says of their GPUs and memory ------------------
def _rest_entry(node_id, gpus=None, heap=None, managed=None, cores=4):
    """One entry of ``GET /taskmanagers`` as Flink 2.2 answers it (checked on the local
    cluster: ``totalResource`` memory in MB; Flink's GPU plugin adds a ``gpu`` resource)."""
    total = {"cpuCores": float(cores), "extendedResources": {node_id: 2.0}}
    if gpus is not None:
        total["extendedResources"]["gpu"] = gpus
    if heap is not None:
        total["taskHeapMemory"] = heap
    if managed is not None:
        total["managedMemory"] = managed
    return {"id": node_id, "slotsNumber": 2, "totalResource": total,
            "hardware": {"cpuCores": cores}}


REGISTERED = {"taskmanagers": [_rest_entry("edge_gpu", gpus=2.0, heap=1024, managed=2048),
                               _rest_entry("edge_cpu", heap=512, managed=512, cores=8)]}


def test_the_hook_and_the_service_read_a_live_cluster_alike():
    """A cluster of TaskManagers the default spec does not name: the hook places on them
    (``fit_nodes_to_cluster``) and a service on the default spec serves them
    (``spec_of_live_cluster``); both now read their GPUs (Flink's ``gpu`` resource) and
    memory from REST the same way, where before both saw cores only."""
    from placement.service.app import spec_of_live_cluster
    from placement.service.flink_rest import FlinkRestClient
    from pyflink_jobs.live_cluster import fit_nodes_to_cluster, live_taskmanagers_from

    live = live_taskmanagers_from(REGISTERED)
    nodes, _ = fit_nodes_to_cluster(nodes_from_cluster_spec("default"), live, "pinned",
                                    chosen=False, gpu_model="v100")
    routers = Router(RouterSettings(nodes=nodes, policy="mct")).cluster

    client = FlinkRestClient("http://127.0.0.1:9")
    client.get = lambda path: REGISTERED   # the REST answer, without a JobManager
    spec, note = spec_of_live_cluster(load_cluster_spec("default"), client.taskmanagers())
    assert "GPUs" in note
    service = to_cluster_spec(spec, "v100")
    assert [_view(n) for n in routers.nodes] == [_view(n) for n in service.nodes]
    gpu_node = {n.node_id: n for n in service.nodes}["edge_gpu"]
    assert (len(gpu_node.gpus), gpu_node.host_memory_gb) == (2, 3.0)


HOSTILE_ENTRIES = [
    _rest_entry("edge_a", gpus=float("nan"), heap=float("inf"), managed=256, cores=2.5),
    _rest_entry("edge_b", gpus=10**400, heap=-1, managed=10**400, cores=10**9),
    {**_rest_entry("edge_c", gpus="2"), "hardware": "eight", "slotsNumber": float("nan")},
    {**_rest_entry("edge_d"), "totalResource": {"extendedResources": {"edge_d": -3.0,
                                                                      "gpu": True}}},
]


def test_the_hook_and_the_service_read_hostile_taskmanagers_alike():
    """One reading of REST (``flink_rest.registered_taskmanager``) for both: garbled, huge and
    negative numbers give the same cores, GPUs, memory and own resource to the hook's
    LiveTaskManagers and to the service's plan and spec."""
    from placement.service.app import spec_of_live_cluster, unlisted_capacities
    from placement.service.flink_rest import FlinkRestClient
    from pyflink_jobs.live_cluster import live_taskmanagers_from

    answer = {"taskmanagers": HOSTILE_ENTRIES}
    hook = {tm.node_id: tm for tm in live_taskmanagers_from(answer)}
    client = FlinkRestClient("http://127.0.0.1:9")
    client.get = lambda path: answer
    listed = client.taskmanagers()
    plan = {c.node_id: c for c in unlisted_capacities(listed, ["tm_a"])}
    spec, _ = spec_of_live_cluster(load_cluster_spec("default"), listed)
    served = {tm.id: tm for tm in spec.taskmanagers}
    assert set(hook) == set(plan) == set(served) == {"edge_a", "edge_b", "edge_c", "edge_d"}
    for node, tm in hook.items():
        assert tm.cpu_cores == plan[node].cores == served[node].cpu_cores
        assert tm.gpus == len(served[node].gpu_ids)
        assert tm.memory_gb == pytest.approx(
            (served[node].task_heap_mb + served[node].managed_mb) / 1024)
    assert (hook["edge_a"].cpu_cores, hook["edge_b"].cpu_cores, hook["edge_c"].cpu_cores) == (
        2, 4096, 1)
    assert hook["edge_b"].gpus == 1024 and hook["edge_d"].gpus == 0
    assert hook["edge_d"].own_resource == 0.0 and plan["edge_d"].slots == 2   # its task slots
    assert plan["edge_c"].slots == 2   # its own resource (2.0), not its garbled slot count


@pytest.mark.parametrize("gpus, heap, managed, expected", [
    (None, None, None, (0, 0.5)),   # REST says nothing: the spec's 256 + 256 MB (the service's)
    (1.0, 256, 256, (1, 0.5)),
    (2.7, 256, 256, (2, 0.5)),                     # a fractional amount: whole GPUs
    (float("nan"), float("inf"), 256, (0, 0.5)),   # not finite: nothing believed
    (-4.0, -1, 256, (0, (64 + 256) / 1024)),        # below the bounds: clamped
    (10**400, 10**400, 10**400, (1024, 2 * 16 * 1024 * 1024 / 1024)),   # past them: clamped
    ("2", "256", 256, (0, 0.5)), (True, True, 256, (0, 0.5)),           # not numbers
])
def test_registered_gpus_and_memory_are_bounded(gpus, heap, managed, expected):
    from pyflink_jobs.live_cluster import live_taskmanagers_from
    (tm,) = live_taskmanagers_from({"taskmanagers": [_rest_entry("edge_1", gpus, heap,
                                                                 managed)]})
    assert (tm.gpus, tm.memory_gb) == expected


@pytest.mark.parametrize("spec", ["hosts", "default"])
def test_one_report_is_one_node_state_at_the_routers_and_in_the_service(spec):
    """The same NodeFeedback: the node state a router decides on and the one the service
    trains on (link utilisations included) are equal."""
    from placement.service.examples import FeedbackExamples
    from placement.measured_costs import MeasuredCosts
    cluster = to_cluster_spec(load_cluster_spec(spec))
    router = Router(RouterSettings(nodes=nodes_from_cluster_spec(spec), policy="mct"))
    examples = FeedbackExamples(cluster, MeasuredCosts(cluster))
    report = {"node_id": "tm_a", "emitted_at_ms": 1_700_000_000_000, "cpu_util": 0.4,
              "uplink_bytes_per_s": 250_000.0, "downlink_bytes_per_s": 500_000.0,
              "queue_depth": 1, "in_flight": 1, "completed": [], "sequence": 0}
    router.on_feedback(report)
    examples.take([report])
    at_router = router.reported_state("tm_a")
    in_service = examples.history.latest("tm_a", 1_700_000_000_000)
    assert (at_router.uplink_util, at_router.downlink_util) == \
        (in_service.uplink_util, in_service.downlink_util)
    if spec == "hosts":   # tm_a's links are shaped to 8 Mbps: 0.25 MB/s is a quarter of it
        assert at_router.uplink_util == pytest.approx(0.25)
