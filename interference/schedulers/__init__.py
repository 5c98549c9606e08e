"""Node-level schedulers: which ready stage starts on which CPU core or GPU of one node.

Every scheduler implements :class:`workload.model.NodeScheduler` and is built as
``Scheduler(costs: CostModel | None = None, seed: int = 0, **settings)``; all are deterministic,
break ties by arrival order (ready_at_s, then task_id) and unit order, and word a short reason
for each assignment. The rules they all obey are checked by
:func:`interference.schedulers._checks.validate_assignments`.

=========  ==========================================================================
name       rule
=========  ==========================================================================
fcfs       arrival order, first unit with room (GPU first for GPU-capable stages)
mct        minimum estimated completion time per stage; may wait for a busy fast unit
pats       highest predicted speedup to an idle GPU, lowest to an idle core
heft       decreasing upward rank in the stage's DAG, earliest estimated finish
mystic     GPU whose running stages are least similar (cosine of GPU profiles)
iawp       the paper's IAWP: NCF-predicted profiles and interference, batched co-runs
=========  ==========================================================================

Related GPU-cluster systems, adapted to stages (each module's docstring names the paper):

================  ===================================================================
vapor             Vapor: co-run stages whose copy and compute phases overlap
sjf_bsbf          SJF-BSBF: shortest first, paired with the best sharing benefit
schedtune         SchedTune: predicted memory and time per GPU type, best fit, no OOM
gpu_share         fractional GPU requests, best-fit packing of GPU fractions
opportunistic     fewest GPUs under a memory bound and a predicted-slowdown bound
comm_aware        slowdown- and communication-aware GPU mapping
dual_agent_order  dual-agent RL: a bandit over stage-ordering rules
edf_dvfs          EDF order; lowest-energy unit and DVFS level that meets the deadline
vgpu_fair         tenants' credit-based fair shares of the GPUs (virtual channels)
sjf_bco_order     SJF-BCO: the smallest estimated task's stages first, first fit
elastic_batch     ElasticBatch: per stage type, batch size x MIG slice under a latency target
================  ===================================================================

Example::

    >>> from workload.model import ComputingUnit, Stage
    >>> scheduler = make_node_scheduler("fcfs")
    >>> units = [ComputingUnit("cpu:0", "cpu")]
    >>> ready = [Stage("t1", "intrusion_detection", "tracking", 1000, gpu_capable=False)]
    >>> [a.unit_id for a in scheduler.assign(ready, units, now_s=0.0)]
    ['cpu:0']
"""

from __future__ import annotations

from interference.schedulers._checks import validate_assignments
from interference.schedulers.comm_aware import CommAwareScheduler
from interference.schedulers.dual_agent_order import DualAgentOrderScheduler
from interference.schedulers.edf_dvfs import EdfDvfsScheduler
from interference.schedulers.elastic_batch import ElasticBatchScheduler
from interference.schedulers.fcfs import FcfsScheduler
from interference.schedulers.gpu_share import GpuShareScheduler
from interference.schedulers.heft import HeftScheduler
from interference.schedulers.iawp import IawpScheduler
from interference.schedulers.mct_unit import MctUnitScheduler
from interference.schedulers.mystic import MysticScheduler
from interference.schedulers.opportunistic import OpportunisticScheduler
from interference.schedulers.pats import PatsScheduler
from interference.schedulers.schedtune import SchedTuneScheduler
from interference.schedulers.sjf_bco_order import SjfBcoOrderScheduler
from interference.schedulers.sjf_bsbf import SjfBsbfScheduler
from interference.schedulers.vapor import VaporScheduler
from interference.schedulers.vgpu_fair import VgpuFairScheduler
from workload.estimates import CostModel
from workload.model import NodeScheduler

__all__ = ["NODE_SCHEDULERS", "make_node_scheduler", "validate_assignments", "FcfsScheduler",
           "MctUnitScheduler", "PatsScheduler", "HeftScheduler", "MysticScheduler",
           "IawpScheduler", "VaporScheduler", "SjfBsbfScheduler", "SchedTuneScheduler",
           "GpuShareScheduler", "OpportunisticScheduler", "CommAwareScheduler",
           "DualAgentOrderScheduler", "EdfDvfsScheduler", "VgpuFairScheduler",
           "SjfBcoOrderScheduler", "ElasticBatchScheduler"]

#: Registry name -> scheduler class (the name is also the class's ``name``).
NODE_SCHEDULERS: dict[str, type[NodeScheduler]] = {
    cls.name: cls
    for cls in (FcfsScheduler, MctUnitScheduler, PatsScheduler, HeftScheduler, MysticScheduler,
                IawpScheduler, VaporScheduler, SjfBsbfScheduler, SchedTuneScheduler,
                GpuShareScheduler, OpportunisticScheduler, CommAwareScheduler,
                DualAgentOrderScheduler, EdfDvfsScheduler, VgpuFairScheduler,
                SjfBcoOrderScheduler, ElasticBatchScheduler)
}


def make_node_scheduler(name: str, costs: CostModel | None = None, seed: int = 0,
                        **settings) -> NodeScheduler:
    """Build the scheduler registered as ``name`` (case-insensitive). Unknown settings raise
    ``TypeError`` from the scheduler's constructor."""
    key = name.strip().lower()
    if key not in NODE_SCHEDULERS:
        raise ValueError(f"unknown node scheduler {name!r}; known: "
                         f"{', '.join(sorted(NODE_SCHEDULERS))}")
    return NODE_SCHEDULERS[key](costs=costs, seed=seed, **settings)
