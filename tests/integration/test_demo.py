"""`make demo QUICK=1`'s code path on the test stack, so the demo cannot rot unnoticed."""

from __future__ import annotations

import json


def test_quick_demo_replays_the_trace_through_both_placements(stack_config, flink_cluster,
                                                               capsys):
    from streamplace.demo import DEMO_VARIANTS, run_demo
    assert run_demo(stack_config, quick=True) == 0
    out = capsys.readouterr().out
    assert "comparison" in out and "throughput, hook / Flink default" in out
    document = json.loads((stack_config.home / "demo" / "demo.json").read_text())
    assert [r["variant"] for r in document["runs"]] == [label for label, _ in DEMO_VARIANTS]
    for run in document["runs"]:
        assert run["results"] == run["distinct"] == document["tasks"] == run["delivered"]
        assert run["failed"] == 0 and run["throughput_per_s"] > 0
    hook = document["runs"][-1]
    assert set(hook["per_node"]) <= {"tm_a", "tm_b", "tm_c"}
    assert (stack_config.home / "demo" / "demo.png").stat().st_size > 10_000
    # The service the demo started is stopped again; the session's broker and cluster are not.
    assert flink_cluster.status().jobmanager_running
