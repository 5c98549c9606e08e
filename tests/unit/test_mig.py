"""The MIG and batching axes of the simulator (simulator/mig.py): off by default (identical event
logs), a partition exposes one unit per slice (speed g/7, the slice's memory, isolated from the
other slices, a busy slice counting g/7 of a GPU), batches of one stage type finish after
t(1)(1 + beta(n - 1)), mixed groups stay bounded, and bad partitions raise clear errors."""

from __future__ import annotations

import doctest

import pytest

from simulator import SimulationConfig, Simulator, mig as mig_module
from simulator.mig import MigCatalog, batch_beta, batch_rate, parse_partition
from simulator.runtime import build_node
from simulator.scenarios import DEFAULT_MIG_PARTITION, paper_cluster, paper_mig_cluster
from simulator.scenarios import paper_workload
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel, load_calibration
from workload.model import (Assignment, ClusterSpec, Decision, GpuSpec, NodeScheduler, NodeSpec,
                            Policy, Task)

A100 = GpuSpec("a100", 40)
SIZE = 1_000_000
BETA = 0.25  # calibration.yaml batching.beta


class FirstNode(Policy):
    name = "first"

    def decide(self, observation):
        return Decision(observation.node_ids[0], "always the first node")


class FirstFit(NodeScheduler):
    """Ready order, first unit with room that can run the stage (GPUs listed first); with
    ``max_batch`` a GPU only takes stages of the type already on it (a batch)."""

    name = "first-fit"

    def __init__(self, max_batch=None):
        if max_batch is not None:
            self.max_batch = max_batch

    def assign(self, ready, units, now_s):
        room = {u.unit_id: u.capacity - len(u.running) for u in units}
        types = {u.unit_id: set(u.running) for u in units}
        batching = getattr(self, "max_batch", None) not in (None, 1, "8", True)
        order = sorted(units, key=lambda u: u.kind != "gpu")
        out = []
        for stage in ready:
            for unit in order:
                if batching and unit.kind == "gpu" and not types[unit.unit_id] <= {stage.stage}:
                    continue
                if room[unit.unit_id] > 0 and (unit.kind == "cpu" or stage.gpu_capable):
                    room[unit.unit_id] -= 1
                    types[unit.unit_id].add(stage.stage)
                    out.append(Assignment(stage, unit.unit_id, "first fit"))
                    break
        return out


@pytest.fixture(scope="module")
def costs():
    return CostModel()


@pytest.fixture(scope="module")
def catalog():
    return MigCatalog.from_calibration(load_calibration())


def _sim(costs, **config):
    return Simulator(costs, SimulationConfig(service_noise_sigma=0.0, result_fraction=0.0,
                                             **config))


def _node(partition=None, cores=1, gpus=(A100,)):
    labels = (f"mig={partition}",) if partition else ()
    return NodeSpec("g", cores, 64, gpus=gpus, labels=labels)


def _durations(events, stage):
    starts = {(e.task_id, e.unit): e.time for e in events if e.kind == "start" and e.stage == stage}
    return {(e.task_id, e.unit): e.time - starts[(e.task_id, e.unit)]
            for e in events if e.kind == "finish" and e.stage == stage}


# -- off by default ------------------------------------------------------------------------------
def test_off_by_default_the_event_log_is_unchanged(costs):
    """No mig= label and no max_batch >= 2: every unit as before and the same event log."""
    cluster = paper_cluster(nodes=3)
    tasks = paper_workload(30, tasks=40, seed=3)
    plain = _sim(costs).run(FirstNode(), FirstFit(), cluster, tasks, seed=5)
    for max_batch in (1, "8", True):  # asking for batches of 1 (or not an int) is not batching
        asked = _sim(costs).run(FirstNode(), FirstFit(max_batch), cluster, tasks, seed=5)
        assert asked.events == plain.events and asked.metrics == plain.metrics
    node = build_node(cluster.nodes[0], costs, 2)
    gpus = [u for u in node.units if u.is_gpu]
    assert [u.view.unit_id for u in gpus] == [f"gpu:{i}" for i in range(len(gpus))]
    assert {u.compute_fraction for u in gpus} == {1} and {u.view.mig_profile for u in gpus} == {""}


def test_one_whole_gpu_slice_runs_exactly_like_the_unpartitioned_gpu(costs):
    """7g.40gb is the whole A100 (speed 7/7, 40 GB): the same times, only the unit's name."""
    tasks = [Task(f"t{i}", "face_recognition", SIZE, arrival_s=0.5 * i) for i in range(4)]
    whole = _sim(costs).run(FirstNode(), FirstFit(), ClusterSpec((_node(),)), tasks, 1)
    sliced = _sim(costs).run(FirstNode(), FirstFit(), ClusterSpec((_node("7g.40gb"),)), tasks, 1)
    rename = {"gpu:0/mig0:7g.40gb": "gpu:0"}
    assert [(e.time, e.kind, e.task_id, e.stage, rename.get(e.unit, e.unit))
            for e in sliced.events] == [(e.time, e.kind, e.task_id, e.stage, e.unit)
                                        for e in whole.events]


# -- a partitioned node ------------------------------------------------------------------------
def test_a_partition_exposes_one_unit_per_slice(costs):
    node = build_node(_node(DEFAULT_MIG_PARTITION, cores=2), costs, 2)
    gpus = [u for u in node.units if u.is_gpu]
    assert [u.view.unit_id for u in gpus] == ["gpu:0/mig0:3g.20gb", "gpu:0/mig1:2g.10gb",
                                              "gpu:0/mig2:1g.5gb", "gpu:0/mig3:1g.5gb"]
    assert [u.memory_mb for u in gpus] == [20480, 10240, 5120, 5120]
    assert [u.view.speed for u in gpus] == pytest.approx([4.46 * g / 7 for g in (3, 2, 1, 1)])
    assert {u.view.model for u in gpus} == {"a100"} and {u.view.capacity for u in gpus} == {2}
    assert [u.view.mig_profile for u in gpus] == ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]


@pytest.mark.parametrize("profile,g", [("1g.5gb", 1), ("2g.10gb", 2), ("3g.20gb", 3),
                                       ("4g.20gb", 4), ("7g.40gb", 7)])
def test_a_stage_on_a_g_slice_takes_the_whole_gpu_time_over_g_sevenths(costs, profile, g):
    task = Task("t1", "face_recognition", SIZE)
    events = _sim(costs).run(FirstNode(), FirstFit(), ClusterSpec((_node(profile),)), [task],
                             0).events
    whole_s = costs.gpu_ms("face_detection", SIZE, "a100") / 1000.0
    (took,) = _durations(events, "face_detection").values()
    assert took == pytest.approx(whole_s / (g / 7), abs=1e-6)


def test_slices_do_not_slow_each_other_down(costs):
    """Two stages on two 1g slices each take their alone time; on one whole GPU they co-run."""
    tasks = [Task(f"t{i}", "face_recognition", SIZE) for i in range(2)]
    sliced = _sim(costs, gpu_max_corun=1).run(  # one stage per slice: the second slice is used
        FirstNode(), FirstFit(), ClusterSpec((_node("1g.5gb,1g.5gb"),)), tasks, 0).events
    durations = _durations(sliced, "face_detection")
    assert {unit for _, unit in durations} == {"gpu:0/mig0:1g.5gb", "gpu:0/mig1:1g.5gb"}
    alone_s = costs.gpu_ms("face_detection", SIZE, "a100") / 1000.0 * 7
    assert list(durations.values()) == pytest.approx([alone_s, alone_s], abs=1e-6)


def test_a_stage_too_big_for_every_slice_of_its_node_runs_on_a_core(costs):
    """No unit of the node could hold it even alone: it is CPU work there from the start (a
    scheduler that only launches what fits would otherwise keep it waiting for ever); on the
    whole GPU it fits and runs there."""
    size = 700_000_000
    assert 5 * 1024 < costs.gpu_memory_mb("face_detection", size) < 40 * 1024

    class GpuOnceThenCore(FirstFit):  # a stage that failed on the GPU goes to the core
        def __init__(self):
            self.tried = set()

        def assign(self, ready, units, now_s):
            out = []
            for a in super().assign(ready, units, now_s):
                key = (a.stage.task_id, a.stage.stage)
                if a.unit_id.startswith("gpu") and key in self.tried:
                    a = Assignment(a.stage, "cpu:0", "failed on the gpu") \
                        if not any(x.unit_id == "cpu:0" for x in out) else None
                self.tried.add(key)
                out += [a] if a else []
            return out

    tasks = [Task("t1", "face_recognition", size)]
    sliced = _sim(costs).run(FirstNode(), GpuOnceThenCore(), ClusterSpec((_node("1g.5gb"),)),
                             tasks, 0)
    whole = _sim(costs).run(FirstNode(), FirstFit(), ClusterSpec((_node(),)), tasks, 0)
    starts = {e.stage: e.unit for e in sliced.events if e.kind == "start"}
    assert sliced.metrics.oom_failures == 0 and sliced.metrics.completed == 1
    assert starts["face_detection"].startswith("cpu")
    assert whole.metrics.oom_failures == 0 and whole.metrics.completed == 1
    assert {e.stage: e.unit for e in whole.events
            if e.kind == "start"}["face_detection"].startswith("gpu")


def test_a_busy_slice_counts_its_fraction_of_a_gpu(costs):
    task = Task("t1", "face_recognition", SIZE)
    result = _sim(costs).run(FirstNode(), FirstFit(), ClusterSpec((_node("1g.5gb"),)), [task], 0)
    busy = sum(_durations(result.events, s.name).get(("t1", "gpu:0/mig0:1g.5gb"), 0.0)
               for s in APPLICATIONS["face_recognition"].stages)
    assert result.metrics.gpu_utilisation == pytest.approx(
        busy / 7 / result.metrics.makespan_s, rel=1e-6)


def test_mig_cluster_swaps_the_p4x4_nodes_for_partitioned_a100s():
    base, swapped = paper_cluster(), paper_mig_cluster()
    assert [n.node_id for n in base.nodes] == [n.node_id for n in swapped.nodes]
    changed = [n for n in swapped.nodes if f"mig={DEFAULT_MIG_PARTITION}" in n.labels]
    assert len(changed) == 3 and {n.gpus for n in changed} == {(GpuSpec("a100", 40.0, 4.46),)}
    assert [n for n in swapped.nodes if n not in changed] == \
        [n for n in base.nodes if not n.node_id.startswith("p4x4")]
    with pytest.raises(ValueError, match="no node type"):
        paper_mig_cluster(replaced="h100x8")


# -- batching ------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 4])
def test_a_batch_of_one_stage_type_finishes_after_t1_times_one_plus_beta_n_minus_1(costs, n):
    tasks = [Task(f"t{i}", "face_recognition", SIZE) for i in range(n)]
    events = _sim(costs).run(FirstNode(), FirstFit(max_batch=4),
                             ClusterSpec((_node("3g.20gb"),)), tasks, 0).events
    durations = _durations(events, "face_detection")
    assert len({unit for _, unit in durations}) == 1 and len(durations) == n
    alone_s = costs.gpu_ms("face_detection", SIZE, "a100") / 1000.0 * 7 / 3
    assert list(durations.values()) == pytest.approx([alone_s * (1 + BETA * (n - 1))] * n,
                                                     abs=1e-6)


def test_batching_raises_the_upper_bound_by_the_largest_batch_gain(costs):
    cluster = ClusterSpec((_node(),))
    tasks = [Task(f"t{i}", "face_recognition", SIZE) for i in range(40)]  # no arrival bound
    sim = Simulator(costs)
    plain, batched = sim.upper_bound_per_min(cluster, tasks), \
        sim.upper_bound_per_min(cluster, tasks, max_batch=8)
    assert batched > plain


def test_mixed_stage_types_beyond_the_corun_limit_are_refused(costs):
    class Crowd(NodeScheduler):
        name = "crowd"
        max_batch = 4

        def assign(self, ready, units, now_s):
            gpu = next(u for u in units if u.kind == "gpu")
            return [Assignment(s, gpu.unit_id, "all on the gpu") for s in ready
                    if s.gpu_capable][:3]

    tasks = [Task("a", "face_recognition", SIZE), Task("b", "video_synopsis", SIZE),
             Task("c", "intrusion_detection", SIZE)]
    with pytest.raises(ValueError, match="mixed types"):
        _sim(costs).run(FirstNode(), Crowd(), ClusterSpec((_node(),)), tasks, 0)


def test_batch_rate_and_beta_guard():
    assert batch_rate(1, 0.3) == 1.0 and batch_rate(8, 1.0) == pytest.approx(1 / 8)
    assert batch_beta(load_calibration()) == BETA
    for bad in (0, 1.5, float("nan"), True, "0.2", None):
        with pytest.raises(ValueError, match=r"batching.beta must be a number in \(0, 1\]"):
            batch_beta(type("C", (), {"raw": {"batching": {"beta": {"value": bad}}}})())


# -- validation ----------------------------------------------------------------------------------
@pytest.mark.parametrize("model,text,message", [
    ("a100", "8g.40gb", "unknown MIG profile '8g.40gb' for a100; known: 1g.5gb"),
    ("a100", "3g.20gb,3g.20gb,3g.20gb", "3 x 3g.20gb, but one a100 holds at most 2"),
    ("a100", "4g.20gb,2g.10gb,2g.10gb", "uses 8 compute slices; a a100 has 7"),
    ("a100", "3g.20gb,3g.20gb,1g.5gb", "needs 45 GB; the a100 has 40 GB"),
    ("v100", "1g.5gb", "'v100' is not MIG-capable; MIG models in the calibration: \\['a100'\\]"),
    ("a100", "", "must be profile names separated by commas"),
    ("a100", "3g.20gb,,1g.5gb", "must be profile names separated by commas"),
])
def test_bad_partitions_raise(catalog, model, text, message):
    with pytest.raises(ValueError, match=message):
        parse_partition(model, text, catalog)


@pytest.mark.parametrize("text", ["3g.20gb,2g.10gb,1g.5gb,1g.5gb", "4g.20gb,3g.20gb",
                                  "1g.5gb," * 6 + "1g.5gb", "2g.10gb,2g.10gb,2g.10gb,1g.5gb",
                                  "7g.40gb", "1g.5gb"])
def test_good_partitions_parse(catalog, text):
    profiles = parse_partition("a100", text, catalog, 40)
    assert sum(p.compute_slices for p in profiles) <= 7
    assert sum(p.memory_gb for p in profiles) <= 40


@pytest.mark.parametrize("node,message", [
    (NodeSpec("n", 1, 8, gpus=(GpuSpec("k80", 12),), labels=("mig=1g.5gb",)),
     "'k80' is not MIG-capable"),
    (NodeSpec("n", 1, 8, labels=("mig=1g.5gb",)), "needs GPUs to partition"),
    (NodeSpec("n", 1, 8, gpus=(A100,), labels=("mig=1g.5gb", "mig=7g.40gb")),
     "more than one 'mig=' label"),
    (NodeSpec("n", 1, 8, gpus=(GpuSpec("a100", 20),), labels=("mig=3g.20gb,3g.20gb",)),
     "needs 40 GB; the a100 has 20 GB"),
])
def test_bad_mig_nodes_are_refused_when_the_run_builds_them(costs, node, message):
    with pytest.raises(ValueError, match=message):
        _sim(costs).run(FirstNode(), FirstFit(), ClusterSpec((node,)),
                        [Task("t", "face_recognition", SIZE)], 0)


def test_docstring_examples_run():
    assert doctest.testmod(mig_module).failed == 0


@pytest.mark.parametrize("scheduler", ["fcfs", "heft", "mct"])
def test_schedulers_that_know_nothing_of_mig_keep_working_on_the_mig_cluster(scheduler):
    from interference.schedulers import make_node_scheduler
    from placement.policies import make_policy
    from simulator.scenarios import paper_costs
    costs, cluster = paper_costs(), paper_mig_cluster()
    tasks = paper_workload(60, tasks=30, seed=2)
    result = Simulator(costs).run(make_policy("mct", cluster, costs), make_node_scheduler(
        scheduler, costs), cluster, tasks, seed=2)
    assert result.metrics.completed == 30
    assert any("/mig" in e.unit for e in result.events if e.kind == "start")


def test_a_busy_slice_draws_its_share_of_the_gpus_dynamic_power(costs):
    """Energy on a partitioned GPU: each slice's busy time costs g/7 of the A100's dynamic
    power; the GPU's idle power is counted once (one physical GPU)."""
    from simulator.energy import PowerModel, energy_report
    power = PowerModel.from_calibration(costs.calibration)
    cluster = ClusterSpec((_node("3g.20gb,1g.5gb"),))
    tasks = [Task(f"t{i}", "face_recognition", SIZE) for i in range(2)]
    result = _sim(costs, gpu_max_corun=1).run(FirstNode(), FirstFit(), cluster, tasks, 0)
    report = energy_report(result, cluster, power)
    a100 = power.gpus["a100"]
    dynamic = a100.dynamic_w(None, power.dvfs_exponent)
    busy_by_unit: dict[str, float] = {}
    for interval in report.intervals:
        if interval.kind == "busy":
            busy_by_unit[interval.unit] = busy_by_unit.get(interval.unit, 0.0) + interval.joules
    for unit, g in (("gpu:0/mig0:3g.20gb", 3), ("gpu:0/mig1:1g.5gb", 1)):
        busy_s = sum(e.time for e in result.events if e.kind == "finish" and e.unit == unit) \
            - sum(e.time for e in result.events if e.kind == "start" and e.unit == unit)
        assert busy_s > 0 and busy_by_unit[unit] == pytest.approx(dynamic * g / 7 * busy_s)
    idle_units = {i.unit for i in report.intervals if i.kind == "idle"}
    assert {u for u in idle_units if u.startswith("gpu")} == {"gpu:0"}
    with pytest.raises(ValueError, match="not a MIG slice"):
        power.unit_share(cluster.nodes[0], "gpu:0/mig0:9g.99gb")
