"""ElasticBatch (batch size x MIG slice per stage type under a latency target): the defining
decision as the target loosens (a small batch on a big slice -> a big batch on a small slice),
memory bounding the batch, batch size only on a whole GPU, deadline-derived targets, a property
loop (no batch over its target or its unit's memory, the shared rules, determinism), a short run
on the MIG cluster, and guards."""

from __future__ import annotations

import doctest
import math
import random

import pytest

from interference.schedulers import elastic_batch as elastic_module
from interference.schedulers import make_node_scheduler, validate_assignments
from interference.schedulers.edf_dvfs import downstream_tail_ms
from interference.schedulers.elastic_batch import ElasticBatchScheduler
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import ComputingUnit, Stage, Task

SIZE = 1_000_000
BETA = 0.25  # calibration.yaml batching.beta
A100_SPEED = 4.46
#: (profile, compute slices, memory GB) of the partition 3g.20gb,2g.10gb,1g.5gb,1g.5gb
PARTITION = (("3g.20gb", 3, 20), ("2g.10gb", 2, 10), ("1g.5gb", 1, 5), ("1g.5gb", 1, 5))


@pytest.fixture(scope="module")
def costs() -> CostModel:
    return CostModel()


def slices(capacity: int = 8, **running) -> list[ComputingUnit]:
    return [ComputingUnit(f"gpu:0/mig{j}:{p}", "gpu", A100_SPEED * g / 7, "a100",
                          running=running.get(f"mig{j}", ()), capacity=capacity,
                          memory_mb=gb * 1024, mig_profile=p)
            for j, (p, g, gb) in enumerate(PARTITION)]


def st(name: str, task: str, ready: float = 0.0, size: int = SIZE) -> Stage:
    app = next(a.app_id for a in APPLICATIONS.values() if name in [s.name for s in a.stages])
    return Stage(task, app, name, size, APPLICATIONS[app].stage(name).gpu_capable, ready)


def encodings(n: int = 8, size: int = SIZE) -> list[Stage]:
    return [st("face_encoding", f"t{i}", 0.1 * i, size) for i in range(n)]


def batches(assignments) -> list[tuple[str, int]]:
    """(slice suffix, batch size) per unit, in the order the batches were formed."""
    out: dict[str, int] = {}
    for a in assignments:
        out[a.unit_id] = out.get(a.unit_id, 0) + 1
    return [(unit.split("/")[-1], n) for unit, n in out.items()]


def t3g(costs) -> float:
    """One face_encoding alone on the 3g.20gb slice (s): the table's unit of time T."""
    return costs.gpu_ms("face_encoding", SIZE, "a100") / 1000.0 * 7 / 3


# -- the defining decision ---------------------------------------------------------------------
# Batch latency on a slice, in T (3g alone): slice 3g 1, 2g 1.5, 1g 3; times 1 + 0.25 (b - 1):
# b=1 x1, b=2 x1.25, b=4 x1.75, b=8 x2.75. The largest batch meeting the target, then the
# smallest slice: 2.7T: b=4 fits 3g (1.75T) and 2g (2.625T), not b=8 anywhere -> 4 on 2g, then
# the other 4 on 3g. 5T: b=8 fits 2g (4.125T) -> 2g. 9T: b=8 fits the 1g (8.25T) -> the first 1g.
# 1.1T: only one stage alone on 3g meets it; the next goes alone where it finishes first (2g at
# 1.5T beats waiting for 3g until 2T); the rest wait. 0.5T: nothing meets: the same placement,
# each stage alone, never a batch.
@pytest.mark.parametrize("target_t,expected,rule", [
    (0.5, [("mig0:3g.20gb", 1), ("mig1:2g.10gb", 1)], "no batch meets"),
    (1.1, [("mig0:3g.20gb", 1), ("mig1:2g.10gb", 1)], "largest batch"),
    (2.7, [("mig1:2g.10gb", 4), ("mig0:3g.20gb", 4)], "largest batch"),
    (5.0, [("mig1:2g.10gb", 8)], "largest batch"),
    (9.0, [("mig2:1g.5gb", 8)], "largest batch"),
    (None, [("mig2:1g.5gb", 8)], "no target"),
], ids=lambda v: str(v))
def test_tight_target_small_batch_big_slice_loose_target_big_batch_small_slice(
        costs, target_t, expected, rule):
    target = None if target_t is None else target_t * t3g(costs)
    out = ElasticBatchScheduler(costs, latency_target_s=target).assign(encodings(), slices(), 0)
    assert batches(out) == expected
    assert rule in out[0].reason
    assert ("MIG slice" in out[0].reason) == (rule != "no batch meets")
    assert [a.stage.task_id for a in out] == [f"t{i}" for i in range(len(out))]  # oldest first


@pytest.mark.parametrize("target_t", [0.5, 1.1, 1.3, 1.8, 2.0, 2.7, 3.0, 5.0, 9.0])
def test_no_batch_is_ever_formed_over_its_target(costs, target_t):
    target = target_t * t3g(costs)
    out = ElasticBatchScheduler(costs, latency_target_s=target).assign(encodings(), slices(), 0)
    units = {u.unit_id: u for u in slices()}
    for unit_id, n in batches(out):
        unit = units[next(u for u in units if u.endswith(unit_id))]
        latency = costs.unit_ms("face_encoding", SIZE, unit) / 1000.0 * (1 + BETA * (n - 1))
        assert n == 1 or latency <= target * (1 + 1e-9)


def test_memory_bounds_the_batch_on_each_slice(costs):
    """3 GB stages: a 1g.5gb slice holds 1, a 2g.10gb 3 (batch 2 of the sizes), a 3g.20gb 6
    (batch 4): without a target, the largest batch first, then what each slice can hold."""
    size = 337_500_000
    assert costs.gpu_memory_mb("face_encoding", size) == pytest.approx(3000.0)
    out = ElasticBatchScheduler(costs).assign(encodings(8, size), slices(), 0)
    assert batches(out) == [("mig0:3g.20gb", 4), ("mig1:2g.10gb", 2), ("mig2:1g.5gb", 1),
                            ("mig3:1g.5gb", 1)]
    for unit in slices():
        n = sum(1 for a in out if a.unit_id == unit.unit_id)
        assert n * 3000.0 <= unit.memory_mb


def test_busy_slices_are_not_joined(costs):
    """A batch starts on an idle unit: running slices are left alone."""
    out = ElasticBatchScheduler(costs).assign(encodings(), slices(mig2=("face_encoding",)), 0)
    assert batches(out) == [("mig3:1g.5gb", 8)]


@pytest.mark.parametrize("target_factor,size", [(1.1, 1), (3.0, 8)])
def test_a_whole_gpu_without_mig_chooses_the_batch_size_only(costs, target_factor, size):
    gpu = ComputingUnit("gpu:0", "gpu", model="v100", capacity=8, memory_mb=16 * 1024)
    alone = costs.gpu_ms("face_encoding", SIZE, "v100") / 1000.0
    out = ElasticBatchScheduler(costs, latency_target_s=target_factor * alone).assign(
        encodings(), [gpu], 0)
    assert batches(out) == [("gpu:0", size)]
    assert "no MIG: batch size only" in out[0].reason


def test_cpu_only_stages_run_alone_on_cores(costs):
    ready = [st("tracking", f"t{i}") for i in range(3)]
    units = [ComputingUnit("cpu:0", "cpu"), ComputingUnit("cpu:1", "cpu"), *slices()]
    out = ElasticBatchScheduler(costs).assign(ready, units, 0)
    assert batches(out) == [("cpu:0", 1), ("cpu:1", 1)]


def test_deadline_share_sets_the_target(costs):
    """Without a setting the target is the stage's share of the time left to its deadline:
    own / (own + downstream critical path), on this node's best units."""
    units = slices()
    loose = [Task(f"t{i}", "face_recognition", SIZE, 0.0, deadline_s=100.0) for i in range(8)]
    tight = [Task(f"t{i}", "face_recognition", SIZE, 0.0, deadline_s=0.001) for i in range(8)]
    sched = ElasticBatchScheduler(costs, tasks=loose)
    stage = encodings()[0]

    def best(name):
        return min(costs.unit_ms(name, SIZE, u) for u in units)

    share = best("face_encoding") / (best("face_encoding") +
                                      downstream_tail_ms("face_recognition", "face_encoding",
                                                         best))
    target, why = sched.target_s(stage, units, 40.0)
    assert target == pytest.approx(60.0 * share) and "left to the deadline" in why
    assert batches(sched.assign(encodings(), units, 0)) == [("mig2:1g.5gb", 8)]
    tight_out = ElasticBatchScheduler(costs, tasks=tight).assign(encodings(), units, 0)
    assert {n for _, n in batches(tight_out)} == {1}
    assert ElasticBatchScheduler(costs).target_s(stage, units, 0) == (None, "no deadline")


# -- properties --------------------------------------------------------------------------------
def _random_node(rng: random.Random):
    units = [ComputingUnit(f"cpu:{i}", "cpu", running=("tracking",) if rng.random() < .3 else ())
             for i in range(rng.randint(0, 3))]
    if rng.random() < 0.5:
        units += slices(capacity=rng.choice([2, 8]),
                        **{f"mig{j}": ("face_encoding",) for j in range(4) if rng.random() < .3})
    else:
        units += [ComputingUnit(f"gpu:{i}", "gpu", model=rng.choice(["k80", "v100", "a100"]),
                                capacity=rng.choice([1, 2, 8]), memory_mb=16 * 1024)
                  for i in range(rng.randint(0, 2))]
    ready = []
    for t in range(rng.randint(0, 12)):
        app = rng.choice(list(APPLICATIONS))
        name = rng.choice([s.name for s in APPLICATIONS[app].stages])
        ready.append(Stage(f"t{t}", app, name, rng.choice([36_864, SIZE, 300_000_000]),
                           APPLICATIONS[app].stage(name).gpu_capable, rng.uniform(0, 2)))
    return units, ready


def test_property_rules_targets_memory_and_determinism(costs):
    rng = random.Random(4242)
    formed = 0
    for _ in range(150):
        units, ready = _random_node(rng)
        target = rng.choice([None, 0.001, 0.05, 1.0, 30.0])
        out = ElasticBatchScheduler(costs, latency_target_s=target).assign(ready, units, 1.0)
        validate_assignments(out, ready, units)
        assert out == ElasticBatchScheduler(costs, latency_target_s=target).assign(
            ready, units, 1.0)
        by_unit: dict[str, list[Stage]] = {}
        for a in out:
            by_unit.setdefault(a.unit_id, []).append(a.stage)
        views = {u.unit_id: u for u in units}
        for unit_id, batch in by_unit.items():
            unit = views[unit_id]
            assert not unit.running and len({s.stage for s in batch}) == 1
            if unit.kind == "gpu" and unit.memory_mb:
                assert sum(costs.gpu_memory_mb(s.stage, s.input_size) for s in batch) \
                    <= unit.memory_mb
            if len(batch) > 1:
                formed += 1
                latency = max(costs.unit_ms(s.stage, s.input_size, unit) for s in batch) \
                    / 1000.0 * (1 + BETA * (len(batch) - 1))
                assert target is None or latency <= target * (1 + 1e-9)
    assert formed > 10


def test_short_run_on_the_mig_cluster_batches_and_completes_every_task():
    from benchmarks.zoo_metrics import with_slo
    from placement.policies import make_policy
    from simulator import Simulator
    from simulator.scenarios import paper_costs, paper_mig_cluster, paper_workload
    costs, cluster = paper_costs(), paper_mig_cluster()
    tasks = with_slo(paper_workload(120, 40, seed=1), costs, 1)
    scheduler = make_node_scheduler("elastic_batch", costs, tasks=tasks, max_tasks=len(tasks))
    result = Simulator(costs).run(make_policy("mct", cluster, costs), scheduler, cluster,
                                  tasks, seed=1)
    m = result.metrics
    assert m.completed == 40 and m.oom_failures == 0
    assert m.throughput_per_min <= 1.01 * m.upper_bound_per_min
    starts: dict[tuple, int] = {}
    for e in result.events:
        if e.kind == "start":
            key = (e.time, e.node, e.unit, e.stage)
            starts[key] = starts.get(key, 0) + 1
    assert any(n > 1 for n in starts.values())                       # batches were formed
    assert any("/mig" in e.unit for e in result.events if e.kind == "start")  # slices used


# -- guards ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,message", [
    ({"batch_sizes": (2, 4)}, r"batch_sizes must be integers in \[1, 64\] including 1"),
    ({"batch_sizes": (1, 65)}, "batch_sizes"),
    ({"batch_sizes": (1, 0)}, "batch_sizes"),
    ({"batch_sizes": "1,2"}, "batch_sizes"),
    ({"batch_sizes": (1, True)}, "batch_sizes"),
    ({"latency_target_s": 0}, "latency_target_s must be a finite number > 0"),
    ({"latency_target_s": math.nan}, "latency_target_s"),
    ({"latency_target_s": True}, "latency_target_s"),
    ({"beta": 0}, r"beta must be a number in \(0, 1\]"),
    ({"beta": 1.5}, "beta"),
])
def test_bad_settings_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ElasticBatchScheduler(**kwargs)


def test_bad_inputs_raise_and_max_batch_turns_batching_on(costs):
    with pytest.raises(ValueError, match="now_s must be a finite number"):
        ElasticBatchScheduler(costs).assign([], [], math.nan)
    assert ElasticBatchScheduler(costs).max_batch == 8
    assert ElasticBatchScheduler(costs, batch_sizes=[1]).max_batch == 1  # batching stays off
    with pytest.raises(ValueError, match="unknown MIG profile"):
        bad = ComputingUnit("gpu:0/mig0:9g", "gpu", 1.0, "a100", capacity=8, mig_profile="9g")
        ElasticBatchScheduler(costs).assign(encodings(1), [bad], 0)


def test_docstring_examples_run():
    assert doctest.testmod(elastic_module).failed == 0
