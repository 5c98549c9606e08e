"""The decision replay (benchmarks/replay_decisions.py): measured drain rates, drain times,
reading feedback files, and splits that are deterministic and reproduce the committed result;
the policy's correction scale (0: the prior alone, as MCT decides)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.replay_decisions import busy_rates, drain_s, read_feedback, replay_split
from placement.ldwp.inference import NumpyLDWPPolicy

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
RUN = RESULTS / "replay" / "hosts_2026-12-03"


def report(node, at_ms, spans=()):
    """A report of ``node`` at ``at_ms`` whose timings have these (decided, finished) spans."""
    return {"node_id": node, "emitted_at_ms": at_ms, "in_flight": 0, "queue_depth": 0,
            "completed": [{"task_id": f"{node}-{at_ms}-{i}", "app_id": "op", "input_size": 10,
                           "queue_ms": float(finished - decided) - 2.0, "service_ms": 2.0,
                           "finished_at_ms": finished}
                          for i, (decided, finished) in enumerate(spans)]}


def test_busy_rates_are_the_services_rule_over_every_record():
    """The service's DrainRates over the spans from each task's decision: per busy period,
    the finishes after its first over its first-to-last finish time."""
    records = [report("a", 1000, [(0, 400), (0, 1000)]), report("a", 2000, [(0, 1500)]),
               report("a", 90_000, [(89_000, 89_500), (89_000, 90_000)]),   # a second period
               report("b", 1000, [(0, 900)])]                  # one finish: no pace to measure
    assert busy_rates(records) == {"a": pytest.approx(3 / 1.6)}


@pytest.mark.parametrize("split,rates,expected", [
    ({"a": 10, "b": 4}, {"a": 5.0, "b": 1.0}, 4.0),     # b is the bottleneck
    ({"a": 10, "b": 0}, {"a": 5.0}, 2.0),               # a node given nothing needs no rate
    ({"a": 10, "b": 1}, {"a": 5.0}, None),              # b got work, its rate is unknown
])
def test_drain_time_is_the_slowest_nodes_share_over_its_rate(split, rates, expected):
    assert drain_s(split, rates) == expected


def test_feedback_files_skip_what_is_not_a_report_and_come_back_in_time_order(tmp_path):
    path = tmp_path / "fb.jsonl.gz"
    with gzip.open(path, "wt") as out:
        out.write(json.dumps(report("a", 2000)) + "\n")
        out.write("not json\n")
        out.write(json.dumps({"node_id": 5, "emitted_at_ms": 1}) + "\n")
        out.write(json.dumps([1, 2]) + "\n")
        out.write(json.dumps(report("b", 1000)) + "\n")
    assert [r["node_id"] for r in read_feedback(path)] == ["b", "a"]


@pytest.fixture(scope="module")
def recorded():
    return read_feedback(RUN / "feedback.jsonl.gz")


def test_the_prior_alone_decides_as_mct_with_the_same_costs(recorded):
    model = (RUN / "models" / "v000024.spmodel").read_bytes()
    prior = replay_split(recorded, model, "hosts", 300, correction_scale=0.0)
    assert prior == replay_split(recorded, None, "hosts", 300)       # MCT
    assert replay_split(recorded, model, "hosts", 300) != prior      # the correction moves it


def test_a_replay_reproduces_the_committed_result(recorded):
    committed = json.loads((RESULTS / "replay_decisions_hosts.json").read_text())
    row = next(r for r in committed["rows"] if r["model"] == "v000024.spmodel")
    data = (RUN / "models" / row["model"]).read_bytes()
    for kind, scale in (("trained", 1.0), ("prior_only", 0.0)):
        split = replay_split(recorded, data, committed["spec"], committed["burst"], scale,
                             committed["cost_smoothing"])
        assert split == row[kind]["split"]
        assert sum(split.values()) == committed["burst"]


def test_the_correction_scale_is_checked_and_zero_leaves_the_prior():
    policy = NumpyLDWPPolicy.from_file(RUN / "models" / "v000024.spmodel", _hosts_cluster())
    for bad in (-0.1, 1.5, float("nan"), "1"):
        with pytest.raises(ValueError, match="correction scale"):
            policy.set_correction_scale(bad)
    from workload.model import NodeState, Observation, Task
    rng = np.random.default_rng(1)
    for i in range(30):
        states = tuple(NodeState(n, cpu_util=float(rng.random()),
                                 queue_depth=int(rng.integers(0, 500)),
                                 backlog_s=float(rng.random() * 3)) for n in ("tm_a", "tm_b",
                                                                                "tm_c"))
        obs = Observation(Task(f"t{i}", "tokenize+TextNet+to_label", 200), states, 0.0)
        policy.set_correction_scale(0.0)
        ids, q, _ = policy.fast_q_values(obs)
        _, _, costs, _ = policy.fast_encode(obs)
        np.testing.assert_allclose(q, -np.log1p(costs.sum(axis=1)), rtol=1e-9)
        policy.set_correction_scale(1.0)
        assert not np.allclose(policy.fast_q_values(obs)[1], q)


def _hosts_cluster():
    from pyflink_jobs.hook import nodes_from_cluster_spec
    from pyflink_jobs.router import Router, RouterSettings
    return Router(RouterSettings(nodes=nodes_from_cluster_spec("hosts"), policy="mct")).cluster


def test_steadier_cost_fits_split_the_recorded_burst_better(recorded):
    """benchmarks/cost_smoothing.py's claim at the end of the recorded run: with the default
    smoothing MCT drains the burst faster than with the old 0.05 (4.97 s), and both beat
    round-robin's equal split at the measured rates."""
    from benchmarks.cost_smoothing import burst_drains
    from placement.measured_costs import COST_SMOOTHING
    rates = busy_rates(recorded)
    old, = burst_drains(recorded, 0.05, 2000, rates=rates, cuts=(1.0,))
    new, = burst_drains(recorded, COST_SMOOTHING, 2000, rates=rates, cuts=(1.0,))
    equal = drain_s({n: 2000 / 3 for n in rates}, rates)
    assert new < 0.9 * old < old < equal
    with pytest.raises(ValueError, match="cost_smoothing"):
        replay_split(recorded[:10], None, "hosts", 10, cost_smoothing=0.0)
