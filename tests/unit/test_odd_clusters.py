"""Clusters and inputs nobody trained on (found by an outside probe): the simulator finishes
or says why, and specs and settings that make no sense are refused when they are made."""

from __future__ import annotations

import math
import time

import pytest

from interference.schedulers import make_node_scheduler
from placement.policies import make_policy
from simulator import SimulationConfig, Simulator
from simulator.scenarios import paper_cluster, paper_costs, saturated_workload
from workload.model import (Assignment, ClusterSpec, GpuSpec, NodeScheduler, NodeSpec, Task)


@pytest.fixture(scope="module")
def costs():
    return paper_costs()


def _run(costs, cluster, tasks, policy="mct", scheduler="fcfs", **config):
    return Simulator(costs, SimulationConfig(**config)).run(
        make_policy(policy, cluster, costs, seed=1), make_node_scheduler(scheduler, costs, seed=1),
        cluster, tasks, seed=1)


def test_a_task_too_big_for_every_gpu_runs_on_cores(costs):
    """10^9 pixels need 8.3 GB on a GPU: an 8 GB P4 failed the launch for ever (a hang)."""
    result = _run(costs, paper_cluster(), [Task("t0", "face_recognition", 10**9)])
    assert result.metrics.completed == 1


@pytest.mark.parametrize("scheduler", ["fcfs", "schedtune", "iawp", "pats", "heft"])
def test_a_gpu_too_small_for_any_stage_leaves_them_to_the_cores(costs, scheduler):
    cluster = ClusterSpec((NodeSpec("a", 4, 32, gpus=(GpuSpec("p4", 0.25),)),))
    result = _run(costs, cluster, saturated_workload(6, seed=1), scheduler=scheduler)
    assert result.metrics.completed == 6


class NeverStarts(NodeScheduler):
    name = "never"

    def assign(self, ready, units, now_s) -> list[Assignment]:
        return []


def test_a_scheduler_that_never_starts_a_stage_is_named_not_waited_for(costs):
    cluster = ClusterSpec((NodeSpec("a", 2, 8),))
    with pytest.raises(RuntimeError, match="'never' leaves these ready stages unstarted"):
        Simulator(costs).run(make_policy("mct", cluster, costs), NeverStarts(), cluster,
                             saturated_workload(2, seed=1), seed=1)


def test_arrivals_at_epoch_seconds_run_as_soon_as_at_zero(costs):
    """A replayed trace's times: the run sampled the idle cluster every 2 s from 0 first."""
    cluster = ClusterSpec((NodeSpec("a", 4, 32), NodeSpec("b", 4, 32)))
    base = saturated_workload(4, seed=1)
    shifted = [Task(t.task_id, t.app_id, t.input_size, arrival_s=1.7e9 + t.arrival_s)
               for t in base]
    started = time.perf_counter()
    late = _run(costs, cluster, shifted)
    assert time.perf_counter() - started < 10
    early = _run(costs, cluster, base)
    assert late.metrics.completed == early.metrics.completed == 4
    assert [d.node for _, d in late.decisions] == [d.node for _, d in early.decisions]


def test_an_idle_gap_skips_samples_but_not_the_ones_decisions_read(costs):
    """Tasks 10 minutes apart: the samples taken are those of one-by-one sampling, minus the
    idle ones, so every decision sees what it saw before."""
    cluster = ClusterSpec((NodeSpec("a", 4, 32), NodeSpec("b", 4, 32, gpus=(GpuSpec("p4", 8),))))
    tasks = [Task(f"t{i}", "face_recognition", 2_000_000, arrival_s=600.0 * i) for i in range(3)]
    result = _run(costs, cluster, tasks, record_samples=True)
    times = sorted({t for t, _ in result.samples})
    interval = SimulationConfig().feedback_interval_s or 2.0
    assert len(times) < 3 * 600 / interval / 2          # the idle ones were skipped
    grid = [round(t / 2.0, 6) for t in times]           # all on the same 2 s grid
    assert all(g == int(g) for g in grid)
    assert result.metrics.completed == 3


def test_a_node_without_host_memory_figures_runs(costs):
    cluster = ClusterSpec((NodeSpec("a", 4, 0), NodeSpec("b", 4, 32)))
    assert _run(costs, cluster, saturated_workload(5, seed=1)).metrics.completed == 5


@pytest.mark.parametrize("fields, words", [
    ({"cpu_cores": 2.5}, "cpu_cores must be a whole number"),
    ({"cpu_cores": math.nan}, "cpu_cores must be a whole number"),
    ({"cpu_cores": True}, "cpu_cores must be a whole number"),
    ({"slots": -1}, "slots must be a whole number >= 0"),
    ({"gpus": GpuSpec("p4", 8)}, "gpus must be a tuple of GpuSpec"),
    ({"gpus": ("p4",)}, "gpus must be a tuple of GpuSpec"),
    ({"node_id": None}, "a node id must be a string"),
])
def test_a_node_spec_that_makes_no_sense_is_refused(fields, words):
    spec = {"node_id": "a", "cpu_cores": 4, "host_memory_gb": 8, **fields}
    with pytest.raises(ValueError, match=words):
        NodeSpec(**spec)


def test_a_list_of_gpus_is_kept_as_a_tuple():
    spec = NodeSpec("a", 4, 8, gpus=[GpuSpec("p4", 8)])
    assert spec.gpus == (GpuSpec("p4", 8),) and hash(spec)


@pytest.mark.parametrize("field, value", [
    ("feedback_interval_s", 0), ("feedback_interval_s", -1.0), ("reward_window_s", 0.0),
    ("oom_retry_s", math.inf), ("service_noise_sigma", math.nan), ("result_fraction", -1),
    ("gpu_max_corun", 0), ("gpu_max_corun", 1.5),
])
def test_simulation_settings_that_make_no_sense_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        SimulationConfig(**{field: value})


def test_an_unknown_gpu_model_without_a_speed_is_a_value_error(costs):
    with pytest.raises(ValueError, match="unknown GPU model 'mystery'"):
        costs._calibrated_stage_speed("face_locations", "mystery")


def test_the_numpy_loader_refuses_a_paper_model_for_other_nodes_when_loaded():
    from placement.ldwp.inference import NumpyLDWPPolicy
    from placement.ldwp.shipped import shipped_model
    with pytest.raises(ValueError, match="paper-layout model was built for nodes"):
        NumpyLDWPPolicy.from_file(shipped_model("paper"), ClusterSpec((NodeSpec("a", 4, 8),)))


@pytest.mark.parametrize("size, arrival", [(-1, 0.0), (math.nan, 0.0), (math.inf, 0.0),
                                           (10, math.nan), (True, 0.0)])
def test_a_task_with_a_size_or_time_that_is_no_number_is_refused(costs, size, arrival):
    cluster = ClusterSpec((NodeSpec("a", 2, 8),))
    with pytest.raises(ValueError, match="input_size must be a finite number"):
        _run(costs, cluster, [Task("t0", "video_synopsis", size, arrival_s=arrival)])
