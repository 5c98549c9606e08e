"""What hostile feedback can make the placement service keep is bounded: report keys for at
most Deduplicator.max_nodes nodes, at most max_pending queued examples (drops counted), and a
bounded copy of each node's latest report (no per-task arrays, a few stage rows, short text)."""

from __future__ import annotations

import pytest

from placement.measured_costs import MeasuredCosts
from placement.service.examples import (MAX_KEPT_STAGE_BATCHES, MAX_KEPT_TEXT,
                                        MAX_NODE_ID_CHARS, FeedbackExamples, NodeHistory)
from placement.service.feedback import Deduplicator, FeedbackIngest
from placement.service.metrics import ServiceMetrics
from workload.model import ClusterSpec, NodeSpec, NodeState

CLUSTER = ClusterSpec((NodeSpec("tm_a", 2, 8.0), NodeSpec("tm_b", 2, 8.0)))
T0 = 1_700_000_000_000


def report(node: str, sequence: int, completed=(), **extra) -> dict:
    return {"node_id": node, "emitted_at_ms": T0 + sequence, "cpu_util": 0.1, "gpu_util": 0.0,
            "host_mem_util": 0.0, "gpu_mem_util": 0.0, "uplink_bytes_per_s": 0.0,
            "downlink_bytes_per_s": 0.0, "queue_depth": 0, "in_flight": 0, "backpressure": 0.0,
            "completed": list(completed), "sequence": sequence, **extra}


def timing(task_id: str) -> dict:
    return {"task_id": task_id, "app_id": "video_synopsis", "input_size": 4096,
            "queue_ms": 1.0, "service_ms": 200.0, "finished_at_ms": T0 + 500}


# -- Deduplicator -------------------------------------------------------------------------------
def test_the_deduplicator_forgets_the_least_recent_node_beyond_its_bound():
    dedup = Deduplicator(max_nodes=4)
    assert dedup.filter(report("keep", 1)) is not None
    for i in range(20):
        dedup.filter(report(f"ghost-{i}", 1))
        dedup.filter(report("keep", 100 + i))   # "keep" reports all along: never evicted
    assert len(dedup._reports) == 4 and dedup.nodes_forgotten == 17
    assert dedup.filter(report("keep", 1)) is None          # still remembered: a repeat
    assert dedup.filter(report("ghost-0", 1)) is not None   # forgotten: taken again


def test_twenty_thousand_ghost_nodes_keep_the_default_bound():
    ingest = FeedbackIngest(type("Null", (), {"take": lambda self, records: 0})())
    for i in range(20_000):
        ingest.ingest([report(f"ghost-{i}", 1)])
    assert len(ingest.dedup._reports) == Deduplicator.MAX_NODES


# -- queued examples ----------------------------------------------------------------------------
def test_the_training_queue_drops_its_oldest_example_beyond_max_pending():
    metrics = ServiceMetrics()
    examples = FeedbackExamples(CLUSTER, MeasuredCosts(CLUSTER), metrics, max_pending=50)
    queued = sum(examples.take([report("tm_a", s, [timing(f"t{s}-{j}") for j in range(20)])])
                 for s in range(5))
    assert queued == 100 and examples.pending() == 50 and examples.examples_dropped == 50
    assert metrics.value("learning_rejections_total", kind="queue_full") == 50
    assert examples.pop().task.task_id == "t2-10"   # the newest 50 are kept, oldest first


def test_under_max_pending_nothing_is_dropped():
    examples = FeedbackExamples(CLUSTER, MeasuredCosts(CLUSTER), max_pending=50)
    examples.take([report("tm_a", 1, [timing(f"t{j}") for j in range(50)])])
    assert examples.pending() == 50 and examples.examples_dropped == 0


# -- the latest report kept per node ------------------------------------------------------------
STAGE = {"stage": "s", "unit_kind": "cpu", "batch_size": 1, "batches": 1, "mean_inputs": 1.0,
         "p99_ms": 1.0}


@pytest.mark.parametrize("label,extra,check", [
    ("340k stage rows", {"stage_batches": [STAGE] * 340_000},
     lambda kept: len(kept["stage_batches"]) == MAX_KEPT_STAGE_BATCHES),
    ("a 1 MB stage name", {"stage_batches": [{**STAGE, "stage": "s" * (1 << 20)}]},
     lambda kept: len(kept["stage_batches"][0]["stage"]) == MAX_KEPT_TEXT),
    ("a 1 MB power_source", {"power_source": "p" * (1 << 20)},
     lambda kept: len(kept["power_source"]) == MAX_KEPT_TEXT),
    ("100k per-task values", {"routed_queue": [1] * 100_000,
                              "completed_tenant": ["x"] * 100_000},
     lambda kept: "routed_queue" not in kept and "completed_tenant" not in kept),
    ("a huge unknown list", {"extra": list(range(100_000))}, lambda kept: kept["extra"] is None),
    ("a plain report", {"stage_batches": [STAGE], "power_w": 12.5},
     lambda kept: kept["stage_batches"] == [STAGE] and kept["power_w"] == 12.5
     and kept["cpu_util"] == 0.1 and "completed" not in kept),
])
def test_the_latest_report_kept_is_bounded(label, extra, check):
    history = NodeHistory()
    history.add(report("tm_a", 1, [timing("t1")], **extra), NodeState("tm_a"))
    assert check(history.latest_record("tm_a"))


@pytest.mark.parametrize("node,accepted", [("tm_x", True), ("n" * MAX_NODE_ID_CHARS, True),
                                           ("n" * (MAX_NODE_ID_CHARS + 1), False), ("", False),
                                           (5, False)])
def test_node_ids_beyond_the_api_bound_are_not_learned(node, accepted):
    examples = FeedbackExamples(CLUSTER, MeasuredCosts(CLUSTER))
    examples.take([report(node, 1)])
    assert (node in examples.node_ids()) == accepted


# -- one report must not pin a node's view or teach a model numbers no router sends ------------
def test_a_report_stamped_in_the_future_does_not_pin_the_nodes_latest_state():
    """One report stamped 2^63 - 1 ms (queue 1,000,000) stayed the node's newest state for good:
    /decide without nodes then sent it nothing. Beyond clock skew a stamp reads as the epoch."""
    history = NodeHistory()
    now = T0 + 10_000
    history.add(report("tm_a", 1, emitted_at_ms=2**63 - 1), NodeState("tm_a", queue_depth=10**6),
                now_ms=now)
    history.add(report("tm_a", 2), NodeState("tm_a", queue_depth=1), now_ms=now)
    assert history.latest("tm_a", now_ms=now).queue_depth == 1
    assert history.latest_record("tm_a")["sequence"] == 2
    history.add(report("tm_a", 3, emitted_at_ms=now + 30_000), NodeState("tm_a", queue_depth=2),
                now_ms=now)   # within the skew a host's clock may have: taken as stamped
    assert history.latest("tm_a", now_ms=now).queue_depth == 2


@pytest.mark.parametrize("arrays, learned", [
    ({"routed_queue": [3], "routed_backlog_ms": [1500.0], "routed_speed_factor": [1.2]}, True),
    ({"routed_queue": [-1], "routed_backlog_ms": [1e308]}, True),      # no queue: nothing used
    ({"routed_queue": [3], "routed_backlog_ms": [1e308]}, False),
    ({"routed_queue": [3], "routed_speed_factor": [1e-300]}, False),
    ({"routed_queue": [3], "routed_speed_factor": [1e300]}, False),
    ({"routed_queue": [2**31 - 1]}, False),
    ({"routed_queue": [3], "routed_backlog_ms": [float("nan")]}, False),
], ids=["honest", "no-queue", "backlog-1e308", "speed-1e-300", "speed-1e300", "queue-2^31",
        "backlog-nan"])
def test_a_timing_with_router_numbers_no_router_sends_is_not_learned(arrays, learned):
    examples = FeedbackExamples(CLUSTER, MeasuredCosts(CLUSTER))
    assert examples.take([report("tm_a", 1, [timing("t1")], **arrays)]) == int(learned)
    assert examples.timings_rejected == int(not learned)
    if learned and arrays["routed_queue"][0] == 3:
        chosen = next(s for s in examples.pop().states if s.node_id == "tm_a")
        assert chosen.queue_depth == 3 and chosen.backlog_s == pytest.approx(1.5)
