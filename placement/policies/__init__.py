"""Every cluster-level baseline policy, one module each, behind ``workload.model.Policy``.

Each policy is built as ``PolicyClass(cluster, costs=None, seed=0, **settings)`` and answers
``decide(observation) -> Decision(node, reason, scores)``; see ``base.py`` for the shared rules
(decide among ``observation.node_ids``, specs by node id, deterministic ties and seeds).

============================  ==============================================================
name                          rule
============================  ==============================================================
``random``                    uniform over nodes (the paper's Random)
``round_robin``               next node id in the cycle
``weighted_round_robin``      smooth weighted round-robin, weight = node capacity
``least_loaded``              lowest Load_i (the paper's load)
``least_outstanding``         fewest tasks in flight (per slot by default)
``met``                       minimum execution time (ignores load)
``mct``                       minimum completion time, the paper's ETC (alias ``etc``)
``mct_drain``                 MCT with each backlog over the node's measured drain rate
``flink_slot_filling``        Flink's default: fill one TaskManager before the next
``flink_tasks_balance``       Flink ``taskmanager.load-balance.mode: TASKS``
``kubernetes``                kube-scheduler fit filter + LeastAllocated + BalancedAllocation
============================  ==============================================================

Related GPU-cluster systems, adapted to streaming tasks (each module's docstring names the paper,
the adaptation and its parameters; ``benchmarks/zoo.py`` compares them all):

============================  ==============================================================
``liquid``                    Liquid: regression-estimated demand, network-compact placement
``placement_aware``           placement-aware heterogeneous: throughput per (unit type, span)
``delay_locality``            network-sensitive delay scheduling by locality level
``dual_agent``                dual-agent RL: placement agent with online machine speeds
``least_similar``             interference-aware parallelisation: least-similar node
``powerflow``                 PowerFlow: seconds gained per joule under an energy budget
``greenflow``                 GreenFlow: PowerFlow's walk in grams CO2 under a carbon budget
``hived``                     HiveD: tenants' virtual clusters of buddy cells, guarantees
``gai``                       GAI: smallest fitting subtree of racks/nodes, priorities
``sjf_bco``                   SJF-BCO: link contention (own + shared rack links) vs overhead
``pipe_torch``                Pipe-Torch: stages split over nodes, least pipeline bottleneck
``iot_partition``             IoT partitioning: memory-bound split, least end-to-end latency
============================  ==============================================================

Example::

    >>> from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_a", 4, 16), NodeSpec("tm_b", 4, 16)))
    >>> policy = make_policy("least_outstanding", cluster, per_slot=False)
    >>> obs = Observation(Task("t1", "video_synopsis", 1000),
    ...                   (NodeState("tm_a", queue_depth=2), NodeState("tm_b")), 0.0)
    >>> policy.decide(obs).node
    'tm_b'
"""

from __future__ import annotations

from placement.policies.base import ClusterPolicy, EstimatingPolicy
from placement.policies.delay_locality import DelayLocalityPolicy
from placement.policies.dual_agent import DualAgentPolicy
from placement.policies.flink_slot_filling import FlinkSlotFillingPolicy
from placement.policies.flink_tasks_balance import FlinkTasksBalancePolicy
from placement.policies.gai import GaiPolicy
from placement.policies.greenflow import GreenFlowPolicy
from placement.policies.hived import HiveDPolicy
from placement.policies.iot_partition import IoTPartitionPolicy
from placement.policies.kubernetes import KubernetesPolicy
from placement.policies.least_loaded import LeastLoadedPolicy
from placement.policies.least_outstanding import LeastOutstandingPolicy
from placement.policies.least_similar import LeastSimilarPolicy
from placement.policies.liquid import LiquidPolicy
from placement.policies.mct import MinimumCompletionTimePolicy
from placement.policies.mct_drain import MeasuredDrainMCTPolicy
from placement.policies.met import MinimumExecutionTimePolicy
from placement.policies.pipe_torch import PipeTorchPolicy
from placement.policies.placement_aware import PlacementAwarePolicy
from placement.policies.powerflow import PowerFlowPolicy
from placement.policies.random_policy import RandomPolicy
from placement.policies.round_robin import RoundRobinPolicy
from placement.policies.sjf_bco import SjfBcoPolicy
from placement.policies.weighted_round_robin import WeightedRoundRobinPolicy
from workload.estimates import CostModel
from workload.model import ClusterSpec, Policy

__all__ = ["POLICIES", "ALIASES", "make_policy", "ClusterPolicy", "EstimatingPolicy",
           "RandomPolicy", "RoundRobinPolicy", "WeightedRoundRobinPolicy", "LeastLoadedPolicy",
           "LeastOutstandingPolicy", "MinimumExecutionTimePolicy", "MinimumCompletionTimePolicy",
           "MeasuredDrainMCTPolicy",
           "FlinkSlotFillingPolicy", "FlinkTasksBalancePolicy", "KubernetesPolicy",
           "LiquidPolicy", "PlacementAwarePolicy", "DelayLocalityPolicy", "DualAgentPolicy",
           "LeastSimilarPolicy", "PowerFlowPolicy", "GreenFlowPolicy", "HiveDPolicy", "GaiPolicy",
           "SjfBcoPolicy", "PipeTorchPolicy", "IoTPartitionPolicy"]

#: Registry: policy name -> class (the key is the class's ``name``).
POLICIES: dict[str, type[Policy]] = {cls.name: cls for cls in (
    RandomPolicy, RoundRobinPolicy, WeightedRoundRobinPolicy, LeastLoadedPolicy,
    LeastOutstandingPolicy, MinimumExecutionTimePolicy, MinimumCompletionTimePolicy,
    MeasuredDrainMCTPolicy, FlinkSlotFillingPolicy, FlinkTasksBalancePolicy, KubernetesPolicy,
    LiquidPolicy, PlacementAwarePolicy, DelayLocalityPolicy, DualAgentPolicy, LeastSimilarPolicy,
    PowerFlowPolicy, GreenFlowPolicy, HiveDPolicy, GaiPolicy, SjfBcoPolicy, PipeTorchPolicy,
    IoTPartitionPolicy)}

#: Other names people use for the same rules.
ALIASES: dict[str, str] = {"etc": "mct"}


def make_policy(name: str, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0,
                **settings) -> Policy:
    """Build the policy registered as ``name`` (or an alias); unknown names raise ValueError."""
    key = ALIASES.get(name, name)
    try:
        cls = POLICIES[key]
    except KeyError:
        known = sorted([*POLICIES, *ALIASES])
        raise ValueError(f"unknown policy {name!r}; known policies: {', '.join(known)}") from None
    return cls(cluster, costs=costs, seed=seed, **settings)
