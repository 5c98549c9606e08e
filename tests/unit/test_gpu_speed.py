"""GpuSpec.speed means something (issue 14, item 3).

- Where a spec carries exactly its model's calibrated speed (the shipped scenarios) nothing
  changed: metrics recorded from the code before the change are reproduced to the last bit.
- A GPU whose spec says 3x its model's calibrated speed runs GPU stages 3x faster, in the
  estimates, the exact simulator, the fast simulator and the upper bound.
- A GPU model the calibration does not know (an "h200") simulates from its spec and MCT prefers it.
- Weighted round-robin's capacities and the estimates rank GPU nodes the same way.
"""

from __future__ import annotations

import math
import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml

from interference.schedulers import make_node_scheduler
from interference.schedulers.fcfs import FcfsScheduler
from placement.policies import make_policy
from placement.policies.weighted_round_robin import node_capacity
from simulator import Simulator
from simulator.fast import FastSimulator
from simulator.ground_truth import GroundTruth
from simulator.scenarios import alibaba_cluster, paper_cluster, paper_costs, saturated_workload
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel, load_calibration
from workload.model import (ClusterSpec, ComputingUnit, GpuSpec, NodeSpec, NodeState, Observation,
                            Task)

#: Calibrated speeds (workload/calibration.yaml gpu_models) of the models used below.
T4, V100, K80 = 1.85, 3.7, 1.0

#: Data the recorded metrics were produced with: other data (a generated stand-in) gives other
#: numbers, and then the regression check has nothing to compare against.
RECORDED_SOURCES = ("simulation_throughputs.json", "openb_node_list_gpu_node.csv")

#: Recorded with the code BEFORE GpuSpec.speed scaled GPU times (same commands, unmodified
#: workload/estimates.py and simulator/), by run_pair below: (cluster, policy, scheduler) ->
#: throughput/min, GPU utilisation, p99 s, p50 s, mean wait s, useful GPU work per GPU second,
#: load balancing degree, OOM failures, upper bound/min, events.
RECORDED = {
    ("paper", "mct", "fcfs"): (22.053748967455274, 0.17607329805834027, 355.13538248534866,
                               101.72300320266231, 13.729856810672018, 1.1896852231896247,
                               0.9502847288463889, 8, 171.3813169281828, 1958),
    ("paper", "random", "pats"): (21.254582407203173, 0.1763955580001333, 344.41767212410883,
                                  90.44107757857313, 15.582166313080412, 1.1421994796589234,
                                  0.9329943692711112, 0, 171.3813169281828, 1950),
    ("paper", "least_loaded", "mystic"): (22.653989485170005, 0.1814196953234854,
                                          380.25775846077397, 112.43169345462282,
                                          27.057125363086506, 1.1975230240201835,
                                          0.9480182501671021, 14, 171.3813169281828, 1964),
    ("alibaba", "mct", "fcfs"): (24.727773753598584, 0.03152996198243683, 330.0032849409912,
                                 28.200444155058264, 0.24114785350008722, 3.8329764023386597,
                                 0.9755557226594676, 0, 431.1625881669458, 1950),
    ("alibaba", "random", "pats"): (18.59999922603551, 0.026025156570751513, 352.2069383751142,
                                    30.931560473217814, 0.2270330515023845, 2.915731784100549,
                                    0.970092420553562, 0, 431.1625881669458, 1950),
    ("alibaba", "least_loaded", "mystic"): (23.20870948153138, 0.02977920190510634,
                                            354.8451602515191, 60.14621824057049,
                                            3.2222083321439707, 3.0344658732726675,
                                            0.9459069614979622, 0, 431.1625881669458, 1950),
}
#: The fast simulator (least_loaded, same workload, seed 3) before the change: throughput/min,
#: p99 s, makespan s.
RECORDED_FAST = {"paper": (38.83153402492626, 171.44199801408928, 231.77039553015933),
                 "alibaba": (92.13272802767094, 74.3070581848227, 97.68515697588983)}
METRICS = ("throughput_per_min", "gpu_utilisation", "latency_p99_s", "latency_p50_s",
           "mean_wait_s", "useful_gpu_work_per_gpu_second", "load_balancing_degree",
           "oom_failures", "upper_bound_per_min")
SEED = 3


def _cluster(name: str) -> ClusterSpec:
    return paper_cluster() if name == "paper" else alibaba_cluster(16, seed=0)


def run_pair(cluster: ClusterSpec, policy: str, scheduler: str, tasks: list[Task],
             costs: CostModel | None = None):
    """One baseline pair, as benchmarks.baselines.run_one runs it."""
    costs = costs or paper_costs()
    return Simulator(costs).run(make_policy(policy, cluster, costs, seed=SEED),
                                make_node_scheduler(scheduler, costs, seed=SEED), cluster, tasks,
                                seed=SEED)


def _require_recorded_data():
    from workload.traces import load_or_generate_nodes
    from workload.traces.gavel import load_or_generate_colocation
    sources = (load_or_generate_colocation().source,
               load_or_generate_nodes(which="gpu").source)
    if not all(str(s).endswith(f) for s, f in zip(sources, RECORDED_SOURCES)):
        pytest.skip(f"recorded with the Gavel and Alibaba files, here {sources}")


def node(node_id: str, *gpus: GpuSpec, cores: int = 4) -> NodeSpec:
    return NodeSpec(node_id, cores, 64, gpus=tuple(gpus))


# -- nothing changed where speeds match the calibration -----------------------------------------

@pytest.mark.parametrize("key", sorted(RECORDED))
def test_calibrated_speeds_reproduce_the_metrics_recorded_before_the_change(key):
    _require_recorded_data()
    cluster_name, policy, scheduler = key
    result = run_pair(_cluster(cluster_name), policy, scheduler,
                      saturated_workload(150, seed=SEED))
    m = result.metrics
    got = tuple(getattr(m, k) for k in METRICS) + (len(result.events),)
    assert m.completed == 150
    assert got == pytest.approx(RECORDED[key], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("cluster_name", sorted(RECORDED_FAST))
def test_fast_mode_reproduces_its_recorded_metrics(cluster_name):
    _require_recorded_data()
    costs, cluster = paper_costs(), _cluster(cluster_name)
    result = FastSimulator(costs).run(make_policy("least_loaded", cluster, costs, seed=SEED),
                                      cluster, saturated_workload(150, seed=SEED), seed=SEED)
    got = (result.throughput_per_min, result.latency_p99_s, result.makespan_s)
    assert got == pytest.approx(RECORDED_FAST[cluster_name], rel=1e-9)


def test_the_shipped_scenarios_carry_exactly_the_calibrated_speeds():
    """The premise of 'unchanged': a spec at the calibrated speed is a factor of exactly 1."""
    costs = CostModel()
    for cluster in (paper_cluster(), alibaba_cluster(16, seed=0)):
        for spec in cluster.nodes:
            for gpu in spec.gpus:
                assert gpu.speed == costs.calibrated_gpu_speed(gpu.model)
                assert costs.gpu_speed("face_detection", gpu.model, gpu.speed) == \
                    costs.gpu_speed("face_detection", gpu.model)


# -- the spec's speed scales GPU time -----------------------------------------------------------

@pytest.fixture(scope="module")
def costs():
    return CostModel()


def test_estimates_scale_with_the_spec_speed(costs):
    for stage in ("face_detection", "gmm_background", "face_compare"):
        calibrated = costs.gpu_ms(stage, 2_000_000, "t4")
        assert costs.gpu_ms(stage, 2_000_000, "t4", T4) == calibrated
        assert calibrated / costs.gpu_ms(stage, 2_000_000, "t4", 3 * T4) == pytest.approx(3.0)
        unit = ComputingUnit("gpu:0", "gpu", speed=3 * T4, model="t4")
        assert costs.unit_ms(stage, 2_000_000, unit) == costs.gpu_ms(stage, 2_000_000, "t4",
                                                                     3 * T4)
    assert costs.gpu_ms("tracking", 10, "t4", 3 * T4) is None  # CPU-only stays CPU-only


def test_node_estimates_and_their_cache_see_the_spec_speed(costs):
    slow, fast = node("slow", GpuSpec("t4", 16, T4)), node("fast", GpuSpec("t4", 16, 3 * T4))
    task = Task("t", "face_recognition", 5_000_000)
    # Same shape but for the speed: a cache keyed by model alone would hand back slow's table.
    slow_table = costs.task_time_coefficients(slow)
    fast_table = costs.task_time_coefficients(fast)
    assert fast_table["face_recognition"][1] < slow_table["face_recognition"][1]
    assert costs.task_ms_on(task, fast) < costs.task_ms_on(task, slow)
    assert costs.task_work_ms(task, fast) < costs.task_work_ms(task, slow)
    gpu_bound = [s.name for s in APPLICATIONS["face_recognition"].stages
                 if costs.gpu_ms(s.name, task.input_size, "t4", T4) is not None
                 and costs.gpu_ms(s.name, task.input_size, "t4", T4)
                 < costs.cpu_ms(s.name, task.input_size)]
    assert gpu_bound
    for stage in gpu_bound:
        assert costs.stage_best_ms(stage, task.input_size, slow) / costs.stage_best_ms(
            stage, task.input_size, fast) == pytest.approx(3.0)
    # A node with two GPUs of one model at different speeds counts its faster one.
    mixed = node("mixed", GpuSpec("t4", 16, T4), GpuSpec("t4", 16, 3 * T4))
    assert costs.stage_best_ms(gpu_bound[0], task.input_size, mixed) == \
        costs.stage_best_ms(gpu_bound[0], task.input_size, fast)


def _gpu_stage_spans(cluster: ClusterSpec, tasks: list[Task]) -> dict[tuple, float]:
    events = run_pair(cluster, "mct", "fcfs", tasks, CostModel()).events
    starts = {(e.task_id, e.stage): e.time for e in events
              if e.kind == "start" and e.unit.startswith("gpu")}
    return {key: e.time - starts[key] for e in events
            if e.kind == "finish" and (key := (e.task_id, e.stage)) in starts}


def test_a_gpu_whose_spec_says_3x_finishes_a_gpu_stage_3x_faster():
    tasks = [Task("t0", "face_recognition", 3_000_000)]   # alone: no co-location
    calibrated = _gpu_stage_spans(ClusterSpec((node("n", GpuSpec("t4", 16, T4)),)), tasks)
    tripled = _gpu_stage_spans(ClusterSpec((node("n", GpuSpec("t4", 16, 3 * T4)),)), tasks)
    assert calibrated and calibrated.keys() == tripled.keys()
    for key, span in calibrated.items():
        # Event times are logged rounded to 1 ns: tiny stages need an absolute tolerance.
        assert span == pytest.approx(3.0 * tripled[key], rel=1e-9, abs=4e-9), key


def test_faster_specs_raise_throughput_and_the_upper_bound():
    costs = CostModel()
    tasks = saturated_workload(40, seed=SEED)
    clusters = {s: ClusterSpec((node("n", GpuSpec("t4", 16, s), cores=2),)) for s in (T4, 4 * T4)}
    results = {s: run_pair(c, "mct", "fcfs", tasks, costs).metrics for s, c in clusters.items()}
    assert results[4 * T4].throughput_per_min > results[T4].throughput_per_min
    for m in results.values():
        assert m.completed == 40 and m.throughput_per_min <= m.upper_bound_per_min + 1e-9
    # All at once (the arrival rate does not cap the bound) and all GPU-capable stages (the
    # CPU-only ones do not cap it either): only GPU capacity counts.
    burst = [Task(f"b{i}", "face_recognition", 3_000_000) for i in range(20)]
    assert all(s.gpu_capable for s in APPLICATIONS["face_recognition"].stages)
    bound = {s: Simulator(costs).upper_bound_per_min(c, burst) for s, c in clusters.items()}
    assert bound[4 * T4] > bound[T4]


def test_the_fast_simulator_sees_the_spec_speed():
    costs = CostModel()
    tasks = saturated_workload(60, seed=SEED)

    def makespan(speed: float) -> float:
        cluster = ClusterSpec((node("n", GpuSpec("t4", 16, speed), cores=2),))
        return FastSimulator(costs, noise_sigma=0.0).run(
            make_policy("least_loaded", cluster, costs), cluster, tasks, seed=SEED).makespan_s

    assert makespan(3 * T4) < makespan(T4)


# -- a GPU model the calibration does not know --------------------------------------------------

H200 = GpuSpec("h200", 141, 8.0)


def test_an_unknown_model_runs_the_reference_profile_scaled_by_its_spec(costs):
    assert costs.calibrated_gpu_speed("h200") is None
    for stage in ("face_detection", "gmm_background"):
        assert costs.gpu_ms(stage, 10_000, "h200", 8.0) == pytest.approx(
            costs.gpu_ms(stage, 10_000, costs.reference_gpu) / 8.0)
    with pytest.raises(ValueError, match="h200"):   # no spec speed: nothing to scale
        costs.gpu_ms("face_detection", 10_000, "h200")
    truth = GroundTruth(costs, 0)
    assert truth.interference_source("h200") == truth.interference_source(costs.reference_gpu)
    assert truth.corun_rates("face_detection", "face_encoding", "h200") == \
        truth.corun_rates("face_detection", "face_encoding", costs.reference_gpu)


def test_an_unseen_gpu_type_simulates_and_mct_prefers_it():
    base = paper_cluster(nodes=4)
    shape = base.nodes[0]

    def like_shape(node_id: str, gpu: GpuSpec) -> NodeSpec:
        return NodeSpec(node_id, shape.cpu_cores, shape.host_memory_gb, gpus=(gpu,),
                        uplink_mbps=shape.uplink_mbps, downlink_mbps=shape.downlink_mbps)

    # The h200 node and its twin with a stock V100 differ only in the GPU.
    cluster = ClusterSpec(base.nodes + (like_shape("tm_v100", GpuSpec("v100", 16, V100)),
                                        like_shape("tm_h200", H200)))
    costs = paper_costs()
    tasks = saturated_workload(60, seed=SEED)
    policy = make_policy("mct", cluster, costs, seed=SEED)
    # Idle cluster: the first task goes to the h200 (fastest estimate), whatever else is there.
    idle = Observation(tasks[0], tuple(NodeState(n.node_id) for n in cluster.nodes), 0.0)
    assert policy.decide(idle).node == "tm_h200"
    result = run_pair(cluster, "mct", "fcfs", tasks, costs)
    m = result.metrics
    assert m.completed == 60 and math.isfinite(m.upper_bound_per_min)
    assert m.per_node_tasks["tm_h200"] > m.per_node_tasks["tm_v100"]
    assert any(e.node == "tm_h200" and e.unit.startswith("gpu") for e in result.events
               if e.kind == "start")


class _RecordingFcfs(FcfsScheduler):
    """FCFS that remembers the GPU views it was shown."""

    def __init__(self, costs):
        super().__init__(costs)
        self.gpu_views = []

    def assign(self, ready, units, now_s):
        self.gpu_views += [u for u in units if u.kind == "gpu"]
        return super().assign(ready, units, now_s)


def test_an_unknown_gpu_has_the_memory_and_speed_of_its_spec():
    costs = CostModel()
    scheduler = _RecordingFcfs(costs)
    cluster = ClusterSpec((NodeSpec("g", 1, 64, gpus=(H200,)),))
    tasks = [Task("t0", "face_recognition", 2_000_000)]
    m = Simulator(costs).run(make_policy("mct", cluster, costs), scheduler, cluster, tasks,
                             seed=SEED).metrics
    assert m.completed == 1
    assert {(v.model, v.speed, v.memory_mb) for v in scheduler.gpu_views} == \
        {("h200", 8.0, 141 * 1024)}


# -- weighted round-robin and the estimates agree ----------------------------------------------

def test_weighted_round_robin_and_the_estimates_rank_gpu_nodes_alike(costs):
    nodes = (node("tm_t4", GpuSpec("t4", 16, T4)), node("tm_t4x3", GpuSpec("t4", 16, 3 * T4)),
             node("tm_h200", H200))
    task = Task("t", "face_recognition", 5_000_000)
    by_capacity = sorted(nodes, key=node_capacity)
    by_estimate = sorted(nodes, key=lambda n: -costs.task_ms_on(task, n))
    assert [n.node_id for n in by_capacity] == [n.node_id for n in by_estimate]
    # Between two GPUs of one model, stage time is inversely proportional to the speed WRR
    # counts.
    slow, fast = nodes[0].gpus[0], nodes[1].gpus[0]
    assert costs.gpu_ms("face_detection", task.input_size, "t4", slow.speed) / costs.gpu_ms(
        "face_detection", task.input_size, "t4", fast.speed) == pytest.approx(fast.speed
                                                                              / slow.speed)
    # And WRR sends the most tasks where the estimates say work finishes soonest.
    policy = make_policy("weighted_round_robin", ClusterSpec(nodes), costs, gpu_weight=4.0)
    obs = Observation(task, tuple(NodeState(n.node_id) for n in nodes), 0.0)
    counts = Counter(policy.decide(obs).node for _ in range(60))
    assert counts["tm_t4"] < counts["tm_t4x3"] < counts["tm_h200"]


# -- refusals ----------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_a_non_finite_or_non_positive_spec_speed_is_refused(costs, bad):
    # NodeSpec refuses non-positive speeds itself; the cost model refuses NaN and infinity.
    with pytest.raises(ValueError, match="positive"):
        costs.stage_best_ms("face_detection", 10_000, node("n", GpuSpec("t4", 16, bad)))


@pytest.mark.parametrize("field_name,bad", [("speed", 0), ("speed", ".nan"),
                                            ("memory_gb", -4), ("speed", "fast")])
def test_a_calibration_with_a_bad_gpu_model_is_refused(tmp_path, field_name, bad):
    root = Path(__file__).resolve().parents[2] / "workload"
    raw = yaml.safe_load((root / "calibration.yaml").read_text())
    raw["gpu_models"]["t4"][field_name] = bad
    profile = raw["stage_cpu_times"]["profile_file"]
    (tmp_path / profile).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(root / profile, tmp_path / profile)
    path = tmp_path / "calibration.yaml"
    path.write_text(yaml.safe_dump(raw).replace("'.nan'", ".nan"))   # a YAML NaN, not a string
    with pytest.raises(ValueError, match=f"gpu_models.t4.{field_name}"):
        load_calibration(path)


# -- a spec without a speed is the stock model ---------------------------------------------------

def test_a_spec_without_a_speed_is_the_stock_model_everywhere(costs):
    from workload.estimates import gpu_spec_speed
    stock, explicit = GpuSpec("v100", 16), GpuSpec("v100", 16, 3.7)
    assert gpu_spec_speed(stock) == 3.7 and gpu_spec_speed(explicit) == 3.7
    a, b = node("a", stock), node("b", explicit)
    task = Task("t", "face_recognition", 2_000_000)
    assert costs.task_ms_on(task, a) == costs.task_ms_on(task, b)
    assert node_capacity(a) == node_capacity(b)
    # a hand-made unit without a speed: the calibrated model (a core without one: speed 1)
    unit = ComputingUnit("gpu:0", "gpu", model="v100")
    assert costs.unit_ms("face_encoding", 10_000, unit) == costs.gpu_ms("face_encoding",
                                                                       10_000, "v100")
    assert ComputingUnit("cpu:0", "cpu").speed == 1.0


def test_an_unknown_model_without_a_speed_is_a_clear_error():
    from workload.estimates import gpu_spec_speed
    # (h100: not calibrated; a100 is, since the MIG axis)
    with pytest.raises(ValueError, match="'h100' is not in the calibration.*give its speed"):
        gpu_spec_speed(GpuSpec("h100", 80))
    cluster = ClusterSpec((node("n", GpuSpec("h100", 80)),))
    with pytest.raises(ValueError, match="h100"):
        Simulator().run(make_policy("mct", cluster), FcfsScheduler(), cluster,
                        [Task("t", "video_synopsis", 10_000)], seed=1)
    with pytest.raises(ValueError, match="finite positive"):
        GpuSpec("v100", 16, float("nan"))


@pytest.mark.parametrize("scheduler", ["pats", "iawp", "vapor", "opportunistic", "heft",
                                       "dual_agent_order", "schedtune", "gpu_share"])
def test_every_node_scheduler_runs_a_cluster_with_an_unseen_gpu_type(scheduler):
    cluster = ClusterSpec((node("h", H200), node("k", GpuSpec("k80", 12))))
    tasks = saturated_workload(30, seed=5)
    metrics = run_pair(cluster, "mct", scheduler, tasks).metrics
    assert metrics.completed == len(tasks)
