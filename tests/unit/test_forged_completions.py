"""A completion report naming a task that was sent to another node (forged, or a confused
executor) must not change what a rule that learns from completions decides next: the rules
that hear completions (the router's ledger already checks the node; the service tells every
report to its ``/decide`` rule) keep the task pending on the node it was sent to, and the
service's de-duplication keys a task by its node, so a forged first claim cannot hide the real
timing. Scenario tables on small hand-written clusters."""

from __future__ import annotations

import pytest

from placement.policies import make_policy
from placement.service.feedback import Deduplicator
from workload.estimates import CostModel
from workload.model import ClusterSpec, GpuSpec, NodeSpec, NodeState, Observation, Task

CLUSTER = ClusterSpec((NodeSpec("tm_a", 4, 16, gpus=(GpuSpec("p4", 8),)),
                       NodeSpec("tm_b", 4, 16), NodeSpec("tm_c", 8, 32, cpu_speed=0.7)))
APPS = ("video_synopsis", "face_recognition", "intrusion_detection")
#: the rules that learn from or keep books on completions
LEARNING_RULES = ("liquid", "least_similar", "sjf_bco", "delay_locality", "dual_agent")


def _observation(i: int) -> Observation:
    states = tuple(NodeState(n, queue_depth=i % 3, backlog_s=float((i * 7 + k) % 5))
                   for k, n in enumerate(CLUSTER.node_ids))
    return Observation(Task(f"t{i}", APPS[i % 3], 1_000_000 + 50_000 * i), states, float(i))


def _decisions(rule: str, forge: bool, honest: bool) -> list[str]:
    """Place 12 tasks; with ``honest`` each finishes (reported by its own node) at 1.3 s;
    with ``forge`` every one is first claimed by another node with an absurd latency. Then 30
    more decisions."""
    policy = make_policy(rule, CLUSTER, CostModel(), seed=0)
    sent = {f"t{i}": policy.decide(_observation(i)).node for i in range(12)}
    for task_id, node in sent.items():
        if forge:
            liar = next(n for n in CLUSTER.node_ids if n != node)
            policy.observe_completion(task_id, 3000.0, liar)
        if honest:
            policy.observe_completion(task_id, 1.3, node)
    return [policy.decide(_observation(i)).node for i in range(12, 42)]


@pytest.mark.parametrize("honest", [True, False], ids=["then-the-real-report", "nothing-else"])
@pytest.mark.parametrize("rule", LEARNING_RULES)
def test_a_forged_completion_from_another_node_changes_no_later_decision(rule, honest):
    assert _decisions(rule, True, honest) == _decisions(rule, False, honest)


def test_a_forged_first_claim_of_a_task_id_does_not_hide_the_real_timing():
    dedup = Deduplicator()
    forged = dedup.filter({"node_id": "evil", "sequence": 1, "emitted_at_ms": 5,
                           "completed": [{"task_id": "job-42"}]})
    real = dedup.filter({"node_id": "tm_a", "sequence": 1, "emitted_at_ms": 6,
                         "completed": [{"task_id": "job-42"}]})
    again = dedup.filter({"node_id": "tm_a", "sequence": 2, "emitted_at_ms": 7,
                          "completed": [{"task_id": "job-42"}]})
    assert len(forged["completed"]) == 1 and len(real["completed"]) == 1
    assert again["completed"] == [] and dedup.dropped == {"sequence": 0, "task_id": 1}
