"""What one reported latency may teach the service's model (placement.service.latency_bounds):
scenario tables of hand-written latencies, and the bound applied to the queued examples."""

from __future__ import annotations

import doctest

import pytest

from placement.measured_costs import MeasuredCosts
from placement.service import latency_bounds
from placement.service.examples import FeedbackExamples
from placement.service.latency_bounds import LatencyBounds
from workload.model import ClusterSpec, NodeSpec

T0 = 1_700_000_000_000


def test_the_module_example_runs():
    assert doctest.testmod(latency_bounds).failed == 0


# (name, earlier latencies of (tm_a, op) then the new one, what is learned of the new one)
SCENARIOS = [
    ("an hour after a second's latencies", [1000.0] * 8, 3_600_000.0, 10_000.0),
    ("a microsecond after a second's", [1000.0] * 8, 0.001, 100.0),
    ("within ten times: kept", [1000.0] * 8, 9000.0, 9000.0),
    ("too few samples and a new type: kept", [1000.0] * 7, 3_600_000.0, 3_600_000.0),
]


@pytest.mark.parametrize("name, earlier, latest, learned", SCENARIOS,
                         ids=[s[0] for s in SCENARIOS])
def test_one_latency_is_kept_within_ten_times_its_pairs_median(name, earlier, latest, learned):
    bounds = LatencyBounds()
    for ms in earlier:
        assert bounds.bound("tm_a", "op", ms) == ms
    assert bounds.bound("tm_a", "op", latest) == pytest.approx(learned)


def test_a_nodes_first_latency_is_judged_against_the_type_on_other_nodes():
    bounds = LatencyBounds()
    for _ in range(8):
        bounds.bound("tm_a", "op", 1000.0)
    assert bounds.bound("tm_b", "op", 3_600_000.0) == 50_000.0    # 50x: nodes differ in speed
    assert bounds.bound("tm_b", "other_op", 3_600_000.0) == 3_600_000.0   # nothing known of it


@pytest.mark.parametrize("slower, followed_after", [(20, 40), (200, 80)])
def test_a_node_that_really_got_slower_is_followed_half_a_window_per_tenfold(slower,
                                                                             followed_after):
    bounds = LatencyBounds()
    for _ in range(64):
        bounds.bound("tm_a", "op", 100.0)
    learned = [bounds.bound("tm_a", "op", 100.0 * slower) for _ in range(followed_after)]
    assert learned[0] == 1000.0 and learned[-1] == 100.0 * slower


def test_memory_is_bounded_whatever_the_node_and_type_names():
    bounds = LatencyBounds(window=4, min_samples=2)
    for i in range(latency_bounds.MAX_PAIRS + 100):
        bounds.bound(f"node-{i}", f"type-{i % 3000}", 1.0)
    assert len(bounds._pairs) == latency_bounds.MAX_PAIRS
    assert len(bounds._types) == latency_bounds.MAX_TYPES


def test_the_service_queues_the_bounded_latency_for_training():
    cluster = ClusterSpec((NodeSpec("tm_a", 2, 8.0),))
    examples = FeedbackExamples(cluster, MeasuredCosts(cluster))

    def report(sequence: int, service_ms: float) -> dict:
        return {"node_id": "tm_a", "emitted_at_ms": T0 + 1000 * sequence, "sequence": sequence,
                "cpu_util": 0.1, "gpu_util": 0.0, "host_mem_util": 0.0, "gpu_mem_util": 0.0,
                "uplink_bytes_per_s": 0.0, "downlink_bytes_per_s": 0.0, "queue_depth": 0,
                "in_flight": 0, "backpressure": 0.0,
                "completed": [{"task_id": f"t{sequence}", "app_id": "video_synopsis",
                               "input_size": 4096, "queue_ms": 0.0, "service_ms": service_ms,
                               "finished_at_ms": T0 + 1000 * sequence}]}
    for sequence in range(10):
        examples.take([report(sequence, 200.0)])
    examples.take([report(10, 60_000.0)])
    latencies = [examples.pop().latency_ms for _ in range(11)]
    assert latencies[:10] == [200.0] * 10 and latencies[10] == 2000.0
