"""Virtual multi-channel GPU fair scheduling at node level: tenants share the node's GPUs by
credits, in proportion to their weights.

Paper: "A virtual multi-channel GPU fair scheduling method for virtual machines".

What it decides, at every scheduling instant on one node:

1. each tenant (a virtual machine in the paper) holds credits; every ``period_s`` each tenant
   gets ``period_s x GPU slots x weight / total weight`` (GPU slots: the summed capacity of the
   node's GPUs; total weight: over the active tenants, those with a GPU stage ready, and itself),
   capped at ``cap_periods`` such allotments, so a tenant that sat idle cannot hoard; a tenant
   seen for the first time starts with one allotment. Active tenants thus split the GPU time of
   a period by weight: a tenant alone uses every slot without running into debt (the scheduler
   is work-conserving and does not punish the use of idle time later);
2. while a GPU has room and some GPU-capable stage is ready, the slot goes to the oldest ready
   stage of the tenant with the most credits left (ties: the tenant whose oldest ready stage
   arrived first, then its name), on the least-loaded GPU that fits it (then fastest, then unit
   order); the tenant pays the stage's estimated GPU time (s) on that GPU. Credits may go
   negative (a debt repaid by later allotments), so over time each tenant's GPU time follows
   its weight;
3. CPU-only stages go FCFS to free cores; so do GPU-capable stages that no GPU of this node can
   ever take (no GPU, no estimate, or too big for an empty GPU's memory). Other GPU-capable
   stages wait for a GPU slot rather than run on a core: the GPU is the shared resource.

Adapted for streaming tasks and stages, and why:

- The paper multiplexes one physical GPU's channels among VMs; here a tenant is
  ``Task.tenant`` (from the :class:`~interference.schedulers.task_directory.TaskDirectory`; an
  unknown task is tenant ``""``) and a channel is one co-run slot of a GPU (``capacity``).
- The paper charges measured GPU time; a node scheduler decides before the stage runs, so it
  charges the public estimate (``CostModel.unit_ms``, alone), the same for every tenant.
- One scheduler object may serve several nodes (the simulator shares it): the credits are then
  per tenant across those nodes, i.e. fairness over the pooled GPUs.
- Memory: tenants whose state is exactly one full allotment carry nothing a fresh start would
  not, so over :data:`MAX_TRACKED_TENANTS` such idle tenants are forgotten.

Parameters (constructor settings): ``tasks`` (None, a TaskDirectory or a list of Task);
``max_tasks`` (the directory's bound when built from a list); ``weights`` (tenant -> positive
weight; unlisted tenants get ``default_weight``, 1.0: equal shares, the paper's default);
``period_s`` (1.0 s, ASSUMPTION: the paper's replenish period is a VM time slice; streaming
stages run for ~0.01-10 s); ``cap_periods`` (1.0, ASSUMPTION, as credit schedulers cap unused
credit at about one period).

Example::

    >>> from workload.model import ComputingUnit, Stage, Task
    >>> tasks = [Task("a1", "face_recognition", 1000, tenant="a"),
    ...          Task("b1", "face_recognition", 1000, tenant="b")]
    >>> sched = VgpuFairScheduler(tasks=tasks, weights={"a": 1.0, "b": 3.0})
    >>> ready = [Stage("a1", "face_recognition", "face_detection", 1000),
    ...          Stage("b1", "face_recognition", "face_detection", 1000, ready_at_s=1.0)]
    >>> [a.stage.task_id for a in sched.assign(ready, [ComputingUnit("gpu:0", "gpu",
    ...                                                                model="k80")], 1.0)]
    ['b1']
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from interference.schedulers._checks import BaseNodeScheduler, free_slots, ready_order
from interference.schedulers.task_directory import DEFAULT_MAX_ENTRIES, TaskDirectory
from interference.schedulers.vapor import fits_memory
from workload.estimates import CostModel
from workload.model import Assignment, ComputingUnit, Stage
from workload.task_attributes import MAX_TENANTS

__all__ = ["VgpuFairScheduler", "MAX_TRACKED_TENANTS"]

#: Most tenants whose credits are kept before idle, full ones are forgotten.
MAX_TRACKED_TENANTS = MAX_TENANTS
#: Largest accepted weight (a bound on a setting, not a physical limit).
MAX_WEIGHT = 1e6


def _finite_positive(value, what: str, upper: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0 < value <= upper:
        raise ValueError(f"{what} must be a finite number in (0, {upper:g}], got {value!r:.80}")
    return float(value)


class VgpuFairScheduler(BaseNodeScheduler):
    """GPU slots to the tenant with the most credits; credits replenished by weight."""

    name = "vgpu_fair"

    def __init__(self, costs: CostModel | None = None, seed: int = 0, *, tasks=None,
                 max_tasks: int = DEFAULT_MAX_ENTRIES, weights: Mapping[str, float] | None = None,
                 default_weight: float = 1.0, period_s: float = 1.0,
                 cap_periods: float = 1.0) -> None:
        super().__init__(costs, seed)
        if weights is not None and not isinstance(weights, Mapping):
            raise ValueError(f"weights must map tenant -> weight, got {weights!r:.80}")
        self.weights = {}
        for tenant, weight in (weights or {}).items():
            if not isinstance(tenant, str):
                raise ValueError(f"weights: tenant names must be strings, got {tenant!r:.80}")
            self.weights[tenant] = _finite_positive(weight, f"weight of tenant {tenant!r:.40}",
                                                    MAX_WEIGHT)
        self.default_weight = _finite_positive(default_weight, "default_weight", MAX_WEIGHT)
        self.period_s = _finite_positive(period_s, "period_s", 86_400.0)
        self.cap_periods = _finite_positive(cap_periods, "cap_periods", 1e6)
        self.directory = TaskDirectory.coerce(tasks, max_tasks)
        #: tenant -> credits left (GPU-seconds); insertion order = first seen.
        self.credits: dict[str, float] = {}
        self.last_replenish_s: float | None = None
        #: tenant -> GPU starts so far (what the fairness tests count).
        self.gpu_starts: dict[str, int] = {}

    def weight(self, tenant: str) -> float:
        return self.weights.get(tenant, self.default_weight)

    def allotment(self, tenant: str, gpu_slots: int, active: Sequence[str]) -> float:
        """Credits (GPU-seconds) the tenant gets per period on ``gpu_slots`` slots: its weight's
        share among the ``active`` tenants (those with a GPU stage ready), counting itself."""
        total = sum(self.weight(t) for t in active if t != tenant) + self.weight(tenant)
        return self.period_s * gpu_slots * self.weight(tenant) / total

    def _replenish(self, active: Sequence[str], gpu_slots: int, now_s: float) -> None:
        for tenant in [t for t in active if t not in self.credits]:
            self.credits[tenant] = self.allotment(tenant, gpu_slots, active)
        if self.last_replenish_s is None or now_s < self.last_replenish_s:
            self.last_replenish_s = now_s  # first call (or a clock that went back): start here
            return
        # + 1e-9: a boundary reached by summed float times (k x c) still counts as reached.
        periods = math.floor((now_s - self.last_replenish_s) / self.period_s + 1e-9)
        if periods <= 0:
            return
        self.last_replenish_s += periods * self.period_s
        for tenant in self.credits:
            share = self.allotment(tenant, gpu_slots, active)
            self.credits[tenant] = min(self.credits[tenant] + periods * share,
                                       self.cap_periods * share)
        if len(self.credits) > MAX_TRACKED_TENANTS:
            for tenant in [t for t in self.credits if t not in active]:
                if len(self.credits) <= MAX_TRACKED_TENANTS:
                    break
                if self.credits[tenant] >= self.allotment(tenant, gpu_slots, active):
                    del self.credits[tenant]

    def _gpu_ms(self, stage: Stage, gpu: ComputingUnit) -> float | None:
        try:
            return self.costs.unit_ms(stage.stage, stage.input_size, gpu)
        except KeyError:  # unknown stage type or GPU model: no estimate there
            return None

    def _gpu_able(self, stage: Stage, gpus: Sequence[ComputingUnit]) -> bool:
        """Some GPU of the node could ever take the stage (when empty)."""
        return stage.gpu_capable and any(
            self._gpu_ms(stage, g) is not None and fits_memory(self.costs, stage, g, 0.0)
            for g in gpus)

    # -- the rules -------------------------------------------------------------------------
    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        if isinstance(now_s, bool) or not isinstance(now_s, (int, float)) \
                or not math.isfinite(now_s):
            raise ValueError(f"now_s must be a finite number, got {now_s!r}")
        gpus = [u for u in units if u.kind == "gpu"]
        order = ready_order(ready)
        tenant_of = {s.task_id: self.directory.get(s.task_id).tenant for s in order}
        gpu_stages = [s for s in order if self._gpu_able(s, gpus)]
        queues: dict[str, list[Stage]] = {}
        for s in gpu_stages:
            queues.setdefault(tenant_of[s.task_id], []).append(s)
        slots = sum(g.capacity for g in gpus)
        self._replenish(list(queues), slots, now_s)
        room = {u.unit_id: free_slots(u) for u in units}
        load = {u.unit_id: len(u.running) for u in units}
        used_mb = {u.unit_id: u.memory_util * u.memory_mb for u in units}
        out: list[Assignment] = []
        rank = {id(s): i for i, s in enumerate(order)}
        while queues:
            picked = None
            # Credits equal to 1e-9 GPU-s are a tie (sums of stage times round differently).
            for tenant in sorted(queues, key=lambda t: (-round(self.credits[t], 9),
                                                        rank[id(queues[t][0])], t)):
                for stage in queues[tenant]:
                    fits = [g for g in gpus if room[g.unit_id] > 0
                            and self._gpu_ms(stage, g) is not None
                            and fits_memory(self.costs, stage, g, used_mb[g.unit_id])]
                    if fits:
                        gpu = min(fits, key=lambda g: (load[g.unit_id], self._gpu_ms(stage, g)))
                        picked = tenant, stage, gpu
                        break
                if picked:
                    break
            if picked is None:
                break  # every GPU slot is taken, or nothing left fits one now: they wait
            tenant, stage, gpu = picked
            cost_s = self._gpu_ms(stage, gpu) / 1000.0
            before = self.credits[tenant]
            self.credits[tenant] -= cost_s
            self.gpu_starts[tenant] = self.gpu_starts.get(tenant, 0) + 1
            queues[tenant].remove(stage)
            if not queues[tenant]:
                del queues[tenant]
            room[gpu.unit_id] -= 1
            load[gpu.unit_id] += 1
            used_mb[gpu.unit_id] += self.costs.gpu_memory_mb(stage.stage, stage.input_size)
            out.append(Assignment(stage, gpu.unit_id, (
                f"vGPU fair: tenant {tenant!r} (weight {self.weight(tenant):g}) has the most "
                f"credits, {before:.3f} GPU-s; pays est. {cost_s:.3f}s on {gpu.unit_id}")))
        able = {id(s) for s in gpu_stages}
        cores = [u for u in units if u.kind == "cpu"]
        for stage in order:  # FCFS on cores: CPU-only stages and those no GPU can ever take
            if id(stage) in able:
                continue
            core = next((c for c in cores if room[c.unit_id] > 0), None)
            if core is None:
                break
            room[core.unit_id] -= 1
            what = "CPU-only stage" if not stage.gpu_capable else "no GPU here can take it"
            out.append(Assignment(stage, core.unit_id,
                                  f"vGPU fair: {what}, FCFS -> first free core {core.unit_id}"))
        return out
