"""benchmarks/zoo.py: its system table, the comparison's own checks, and the README table; and
benchmarks/zoo_metrics.py: tenants and deadlines on the zoo's tasks, part 2's systems' settings,
energy / carbon / fairness / deadline metrics of a run (tiny runs, one seed: seconds)."""

from __future__ import annotations

import math

import pytest

from benchmarks import zoo_metrics
from benchmarks.zoo import (RELATED, RELATED_2, SYSTEMS, compass, readme_table, router_latency,
                            run_one, summarise)
from benchmarks.zoo import METRICS
from benchmarks.zoo_metrics import PART2_METRICS


def test_every_system_names_a_registered_policy_and_scheduler():
    from interference.schedulers import NODE_SCHEDULERS
    from placement.policies import POLICIES
    for label, policy, scheduler, family in SYSTEMS:
        assert policy in POLICIES or policy in {"oracle", "ldwp", "ldwp_energy"}, label
        assert scheduler in NODE_SCHEDULERS, label
        assert family in {"baseline", "related", "related2", "ours", "oracle"}
    labels = [s[0] for s in SYSTEMS]
    assert len(labels) == len(set(labels))
    # the ten related systems, each by its own module (Dual-agent and the interference-aware
    # parallelisation decide at both levels)
    assert len(RELATED) == 10


# part 2: (label, cluster policy, node scheduler): cluster-level systems over FCFS, node-level
# ones under MCT, as the zoo pairs part 1's
PART_2 = [("PowerFlow+FCFS", "powerflow", "fcfs"), ("GreenFlow+FCFS", "greenflow", "fcfs"),
          ("HiveD+FCFS", "hived", "fcfs"), ("GAI+FCFS", "gai", "fcfs"),
          ("EDF-DVFS", "mct", "edf_dvfs"), ("vGPU fair", "mct", "vgpu_fair"),
          ("SJF-BCO", "sjf_bco", "sjf_bco_order"),
          ("Pipe-Torch", "pipe_torch", "heft"), ("IoT-Partition", "iot_partition", "heft"),
          ("ElasticBatch", "mct", "elastic_batch")]


def test_the_system_list_holds_part_1_part_2_and_ours_in_one_table():
    assert [s[:3] for s in RELATED_2] == PART_2
    assert all(s in SYSTEMS for s in RELATED + RELATED_2)
    families = [s[3] for s in SYSTEMS]
    assert families.count("related") == 10 and families.count("related2") == 10
    assert {"LDWP+IAWP (ours)"} <= {s[0] for s in SYSTEMS}


def run(system, seed, throughput, bound=100.0, rate=None):
    return {"scenario": "paper", "rate": rate, "system": system, "seed": seed,
            "throughput_per_min": throughput, "latency_p99_s": 10.0, "gpu_utilisation": 0.5,
            "useful_gpu_work_per_gpu_second": 1.0, "oom_failures": 0,
            "upper_bound_per_min": bound}


def test_the_compass_flags_a_run_above_the_bound_and_a_repeat_that_differs():
    runs = [run("A", 1, 50.0), run("B", 1, 120.0)]
    checks = compass(runs, [run("A", 1, 50.0), run("B", 1, 119.0)])
    assert len(checks["above_upper_bound"]) == 1 and "B" in checks["above_upper_bound"][0]
    assert checks["not_deterministic"] == ["B seed 1"]
    assert compass([run("A", 1, 100.5)], [run("A", 1, 100.5)]) == {
        "above_upper_bound": [], "repeated_runs": 1, "not_deterministic": []}


def test_the_readme_table_bolds_the_best_real_system_per_setting():
    label_a, label_oracle = SYSTEMS[0][0], next(s[0] for s in SYSTEMS if s[3] == "oracle")
    rows = summarise([run(label_a, 1, 40.0), run(label_a, 2, 44.0),
                      run(label_oracle, 1, 90.0), run(label_oracle, 2, 90.0)])
    table = readme_table(rows, [("paper saturated", "paper", None)])
    line = next(row for row in table.splitlines() if row.startswith(f"| {label_a} |"))
    assert line.startswith(f"| {label_a} | **42.0 [")  # the oracle is not a system one can run
    assert f"| {label_oracle} | 90.0 [90.0, 90.0] |" in table


def test_one_related_system_runs_deterministically_on_the_paper_cluster():
    job = ("paper", None, "Vapor", "mct", "vapor", 3, 40, "unused")
    first, second = run_one(job), run_one(job)
    assert first["throughput_per_min"] > 0
    assert first["throughput_per_min"] <= first["upper_bound_per_min"]
    assert {k: v for k, v in first.items() if k != "wall_s"} == \
        {k: v for k, v in second.items() if k != "wall_s"}


@pytest.mark.parametrize("policy", ["mct", "liquid", "dual_agent"])
def test_router_latency_is_measured_through_the_router(policy):
    row = router_latency(policy, decisions=300, nodes=4)
    assert row["decisions"] == 300 and 0 < row["p50_us"] <= row["p99_us"]
    assert math.isfinite(row["p99_us"])


# -- part 2 ------------------------------------------------------------------------------------

def tiny(label, policy, scheduler, scenario="paper", rate=30, seed=1001, tasks=30):
    return run_one((scenario, rate, label, policy, scheduler, seed, tasks, "unused"))


def test_the_workload_gets_tenants_priorities_and_deadlines_per_seed_and_keeps_its_tasks():
    from simulator.scenarios import paper_costs, paper_workload
    costs = paper_costs()
    bare = paper_workload(30, 40, seed=1001)
    tasks = zoo_metrics.with_slo(bare, costs, seed=1001)
    assert [(t.task_id, t.app_id, t.input_size, t.arrival_s) for t in tasks] == \
        [(t.task_id, t.app_id, t.input_size, t.arrival_s) for t in bare]
    assert {t.tenant for t in tasks} == set(zoo_metrics.TENANT_WEIGHTS)
    assert all(t.priority == (1 if t.tenant == "tenant-a" else 0) for t in tasks)
    assert all(t.deadline_s is not None and 0 < t.deadline_s < 3600 for t in tasks)
    assert zoo_metrics.with_slo(bare, costs, seed=1001) == tasks          # fixed by the seed
    other = zoo_metrics.with_slo(bare, costs, seed=1002)
    assert [t.tenant for t in other] != [t.tenant for t in tasks]


@pytest.mark.parametrize("label, policy, scheduler", [("ETC", "mct", "mct"),
                                                      ("SJF-BSBF", "mct", "sjf_bsbf")])
def test_systems_that_do_not_read_tenants_or_deadlines_are_unaffected(label, policy, scheduler):
    from interference.schedulers import make_node_scheduler
    from placement.policies import make_policy
    from simulator import Simulator
    from simulator.scenarios import paper_cluster, paper_costs, paper_workload
    costs, cluster = paper_costs(), paper_cluster()
    bare = paper_workload(30, 30, seed=1001)  # no tenant, no deadline, priority 0
    m = Simulator(costs).run(make_policy(policy, cluster, costs, seed=1001),
                             make_node_scheduler(scheduler, costs, seed=1001), cluster, bare,
                             seed=1001).metrics
    row = tiny(label, policy, scheduler)
    assert {k: row[k] for k in METRICS} == {k: getattr(m, k) for k in METRICS}


@pytest.mark.parametrize("label, policy, scheduler, scenario, rate", [
    ("ETC", "mct", "mct", "paper", 30),
    ("PowerFlow+FCFS", "powerflow", "fcfs", "paper", 30),
    ("EDF-DVFS", "mct", "edf_dvfs", "alibaba", 120),
])
def test_a_tiny_run_reports_energy_carbon_fairness_and_deadline_misses(label, policy, scheduler,
                                                                       scenario, rate):
    row = tiny(label, policy, scheduler, scenario, rate)
    assert set(PART2_METRICS) <= set(row) and row["part2_notes"] == ""
    energy, grams = row["energy_per_task_j"], row["g_co2_per_task"]
    assert math.isfinite(energy) and energy > 0
    # grams = joules at the series' intensities: within its first day's range (offset 09:00)
    series = zoo_metrics.carbon_series()
    day = series.g_per_kwh[:24]
    assert min(day) / 3.6e6 <= grams / energy <= max(day) / 3.6e6
    assert 0 < row["jain_fairness"] <= 1 and 0 < row["jain_share_at_last_arrival"] <= 1
    assert 0 <= row["deadline_miss_rate"] <= 1
    if policy == "powerflow":
        assert row["energy_budget_j"] > 0
    assert {k: v for k, v in tiny(label, policy, scheduler, scenario, rate).items()
            if k != "wall_s"} == {k: v for k, v in row.items() if k != "wall_s"}


def test_the_energy_budget_lies_between_the_frugal_and_the_fastest_choice():
    from simulator.scenarios import paper_cluster, paper_costs, paper_workload
    costs, cluster = paper_costs(), paper_cluster()
    tasks = paper_workload(30, 20, seed=1001)
    power, _ = zoo_metrics.power_model(costs)
    frugal, half, fastest = (zoo_metrics.energy_budget_j(cluster, costs, tasks, power, f)
                             for f in (0.0, 0.5, 1.0))
    assert frugal < half < fastest and half == pytest.approx((frugal + fastest) / 2)
    for bad in (-0.1, 1.5, math.nan, True):
        with pytest.raises(ValueError):
            zoo_metrics.energy_budget_j(cluster, costs, tasks, power, bad)
    green = zoo_metrics.policy_settings("greenflow", cluster, costs, tasks, power)
    assert green["offset_s"] == zoo_metrics.CARBON_OFFSET_S and green["carbon_budget_g"] > 0


@pytest.mark.parametrize("scenario, quotas", [("paper", {"tenant-a": 5, "tenant-b": 5}),
                                              ("alibaba", {"tenant-a": 8, "tenant-b": 8})])
def test_hived_quotas_split_the_node_cells_by_tenant_weight(scenario, quotas):
    from simulator.scenarios import alibaba_cluster, paper_cluster, paper_costs
    cluster = paper_cluster() if scenario == "paper" else alibaba_cluster(16, seed=0)
    assert zoo_metrics.policy_settings("hived", cluster, paper_costs(), []) == {"quotas": quotas}
    assert zoo_metrics.policy_settings("mct", cluster, paper_costs(), []) == {}


def test_node_schedulers_of_part_2_get_the_workload():
    from simulator.scenarios import paper_costs, paper_workload
    tasks = zoo_metrics.with_slo(paper_workload(30, 5, seed=1), paper_costs(), seed=1)
    assert zoo_metrics.scheduler_settings("edf_dvfs", tasks)["tasks"] == tasks
    assert zoo_metrics.scheduler_settings("vgpu_fair", tasks)["weights"] == \
        dict(zoo_metrics.TENANT_WEIGHTS)
    assert zoo_metrics.scheduler_settings("fcfs", tasks) == {}


def test_a_gpu_model_without_power_records_none_and_why_and_skips_power_systems(monkeypatch):
    import dataclasses
    from simulator.scenarios import paper_costs
    power, _ = zoo_metrics.power_model(paper_costs())
    no_p4 = dataclasses.replace(power, gpus={k: v for k, v in power.gpus.items() if k != "p4"})
    monkeypatch.setattr(zoo_metrics, "power_model", lambda costs: (no_p4, ""))
    plain = tiny("ETC", "mct", "mct")
    assert plain["throughput_per_min"] > 0 and plain["jain_fairness"] > 0
    assert plain["energy_per_task_j"] is None and plain["g_co2_per_task"] is None
    assert "'p4'" in plain["part2_notes"]
    skipped = tiny("PowerFlow+FCFS", "powerflow", "fcfs")
    assert skipped["throughput_per_min"] is None and "p4" in skipped["skipped"]
    rows = summarise([plain, skipped])
    by = {r["system"]: r for r in rows}
    assert by["ETC"]["energy_per_task_j"] == {"mean": None, "ci95": [None, None], "n": 0}
    assert by["ETC"]["throughput_per_min"]["n"] == 1
    table = readme_table(rows, [("paper 30/min", "paper", 30)])
    assert "| PowerFlow+FCFS | - | - | - |" in table
    assert compass([plain, skipped], [plain, skipped])["not_deterministic"] == []


def test_the_readme_table_gains_the_part_2_columns():
    def part2_run(system, seed, joules, miss):
        return dict(run(system, seed, 40.0, rate=30), energy_per_task_j=joules,
                    g_co2_per_task=joules / 1e4, jain_fairness=0.9,
                    deadline_miss_rate=miss, jain_share_at_last_arrival=1.0)
    label = SYSTEMS[0][0]
    rows = summarise([part2_run(label, 1, 100.0, 0.1), part2_run(label, 2, 300.0, 0.3)])
    table = readme_table(rows, [("paper 30/min", "paper", 30)])
    header, _, line = table.splitlines()[:3]
    assert header.endswith("| J/task, paper 30/min | g CO2/task, paper 30/min | "
                           "Jain (slowdown), paper 30/min | deadline miss rate, paper 30/min |")
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[0] == label and cells[2].startswith("200 [") and cells[4] == "0.900 [0.900, 0.900]"
    assert cells[5].startswith("0.200 [")


def test_the_compass_flags_a_repeat_whose_part_2_metric_differs_but_not_nan():
    a = dict(run("A", 1, 50.0), deadline_miss_rate=0.25, jain_fairness=math.nan)
    assert compass([a], [dict(a)])["not_deterministic"] == []
    assert compass([a], [dict(a, deadline_miss_rate=0.3)])["not_deterministic"] == ["A seed 1"]


def test_the_zoo_metrics_docstring_example_runs():
    import doctest
    assert doctest.testmod(zoo_metrics, optionflags=doctest.ELLIPSIS).failed == 0
