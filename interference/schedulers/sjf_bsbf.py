"""SJF-BSBF at node level: shortest remaining work first, sharing a GPU only with the partner of
the best sharing benefit.

Paper: "Scheduling Deep Learning Jobs in Multi-Tenant GPU Clusters via Wise Resource Sharing"
(Luo, Wang, Shi, Lai, Qi, Zhang & Wang, IWQoS 2024).

What it decides, at every scheduling instant on one node:

1. ready stages go in order of their task's estimated remaining work, shortest first;
2. a stage takes an idle GPU alone; with none idle it shares the busy GPU whose pair has the best
   predicted sharing benefit, if that benefit reaches ``benefit_threshold``;
3. otherwise it takes its earliest estimated finish on a core, or waits for a busy GPU (MCT).

Adapted for streaming tasks and stages, and why:

- The paper's job is a training job with a known number of iterations; ours is a streaming
  task whose stages become ready as their DAG advances. A task's remaining work is the summed
  best-unit estimate (``CostModel.unit_ms`` over this node's unit kinds) of its ready stages and
  everything downstream of them in the application DAG: what is certainly not done yet (stages
  running now are not visible per task and are left out).
- Sharing benefit of a stage ``a`` beside a running ``b`` = r(a|b) + r(b|a), each the stage's
  throughput while sharing over its throughput alone: the pair's combined throughput against
  running them one after the other (= 1). The paper compares the pair's completion times with
  and without sharing; with rates, the steady-state form of that test is "benefit >= 1".
  Several partners: the worst pair decides.
- Predictions: ``CostModel`` holds no pair predictions, so the prior comes from its public GPU
  profiles (the STDM metrics): a resource whose two demands sum above 1 is shared in proportion,
  so both run at 1 / max(1, max_k (p_a[k] + p_b[k])). Rates measured by ``observe_corun`` (the
  stage's estimate alone over its elapsed time; 0 for a launch that failed next to that partner)
  override the prior for that (stage, partner, GPU model) once ``min_observations`` are in.
- The paper tunes the batch size of sharing jobs so the pair fits in GPU memory; a stage's clip
  is indivisible, so instead a stage shares only if its predicted device memory fits.
- A GPU-capable stage that would run faster on an idle core than on the chosen GPU (tiny stages
  such as face_compare) takes the core: the GPU stays free for the work that needs it.

Parameters (constructor settings): ``benefit_threshold`` (1.0: share only when sharing loses
no throughput against taking turns, the paper's "beneficial" test); ``min_observations`` (1: one
measurement overrides the prior, as the paper trusts measured interference over estimates).

Example::

    >>> from workload.model import ComputingUnit, Stage
    >>> units = [ComputingUnit("gpu:0", "gpu", model="k80")]
    >>> ready = [Stage("t1", "face_recognition", "face_detection", 76_800_000),
    ...          Stage("t2", "face_recognition", "face_compare", 76_800_000, ready_at_s=1.0)]
    >>> [(a.stage.task_id, a.unit_id) for a in SjfBsbfScheduler().assign(ready, units, 2.0)]
    [('t2', 'gpu:0')]
"""

from __future__ import annotations

from collections.abc import Sequence

from interference.schedulers._checks import BaseNodeScheduler, can_run, free_slots, ready_order
from interference.schedulers.vapor import fits_memory, rest_by_earliest_finish
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import Assignment, ComputingUnit, Stage

__all__ = ["SjfBsbfScheduler", "downstream"]


def downstream(app_id: str, stage: str) -> tuple[str, ...]:
    """Every stage of the application that (transitively) needs ``stage``; () if unknown."""
    app = APPLICATIONS.get(app_id)
    if app is None:
        return ()
    found = {stage}
    for s in app.stages:  # topological order: one pass sees every path
        if any(d in found for d in s.deps):
            found.add(s.name)
    found.discard(stage)
    return tuple(s.name for s in app.stages if s.name in found)


class SjfBsbfScheduler(BaseNodeScheduler):
    """Shortest remaining work first; share a GPU only with the best-benefit partner."""

    name = "sjf_bsbf"

    def __init__(self, costs: CostModel | None = None, seed: int = 0, *,
                 benefit_threshold: float = 1.0, min_observations: int = 1) -> None:
        super().__init__(costs, seed)
        if not benefit_threshold > 0:
            raise ValueError(f"benefit_threshold must be positive, got {benefit_threshold}")
        if isinstance(min_observations, bool) or not isinstance(min_observations, int) \
                or min_observations < 1:
            raise ValueError(f"min_observations must be an integer >= 1, got {min_observations!r}")
        self.benefit_threshold = float(benefit_threshold)
        self.min_observations = min_observations
        #: (stage, partner, gpu model) -> [count, summed measured rate]
        self.measured: dict[tuple[str, str, str], list[float]] = {}

    # -- predictions -----------------------------------------------------------------------
    def prior_rate(self, stage: str, partner: str) -> float:
        """Throughput of ``stage`` beside ``partner`` over alone, from the public profiles."""
        try:
            mine = self.costs.stage(stage).gpu_profile
            theirs = self.costs.stage(partner).gpu_profile
        except KeyError:
            mine = theirs = None
        if not mine or not theirs:
            return 0.5  # unknown pressure: assume taking turns (benefit 1.0)
        peak = max(a + b for a, b in zip(mine, theirs))
        return 1.0 / max(1.0, peak)

    def rate(self, stage: str, partner: str, gpu_model: str) -> tuple[float, str]:
        """(predicted rate, 'measured' or 'prior')."""
        count, total = self.measured.get((stage, partner, gpu_model), (0, 0.0))
        if count >= self.min_observations:
            return total / count, "measured"
        return self.prior_rate(stage, partner), "prior"

    def benefit(self, stage: str, partner: str, gpu_model: str) -> tuple[float, float, str]:
        """(combined throughput of the pair, the stage's own rate, source of the numbers)."""
        mine, src_a = self.rate(stage, partner, gpu_model)
        theirs, src_b = self.rate(partner, stage, gpu_model)
        source = "measured" if "measured" in (src_a, src_b) else "prior"
        return mine + theirs, mine, source

    def observe_corun(self, stage: str, partner: str, gpu_model: str,
                      measured_rate: float) -> None:
        # Clipped to [0, 1]: sharing never speeds a stage up; above 1 is the task's own noise.
        entry = self.measured.setdefault((stage, partner, gpu_model), [0, 0.0])
        entry[0] += 1
        entry[1] += min(1.0, max(0.0, float(measured_rate)))

    def remaining_work_s(self, ready: Sequence[Stage], units: Sequence[ComputingUnit]
                         ) -> dict[str, float]:
        """Per task: summed best-unit estimate of its ready stages and their successors."""
        kinds = list({(u.kind, u.speed, u.model): u for u in units}.values())
        stages: dict[str, dict[str, int]] = {}
        for s in ready:
            names = stages.setdefault(s.task_id, {})
            for name in (s.stage, *downstream(s.app_id, s.stage)):
                names[name] = s.input_size
        work: dict[str, float] = {}
        for task, names in stages.items():
            total = 0.0
            for name, size in names.items():
                times = [t for t in (self._unit_ms(name, size, u) for u in kinds) if t is not None]
                total += min(times) if times else self._unit_ms(name, size, None) or 0.0
            work[task] = total / 1000.0
        return work

    def _unit_ms(self, stage: str, size: int, unit: ComputingUnit | None) -> float | None:
        try:
            return self.costs.unit_ms(stage, size, unit) if unit is not None \
                else self.costs.cpu_ms(stage, size)
        except KeyError:  # unknown stage type or GPU model: no estimate there
            return None

    # -- the rules -------------------------------------------------------------------------
    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        work = self.remaining_work_s(ready, units)
        arrival = ready_order(ready)
        order = sorted(arrival, key=lambda s: work[s.task_id])  # stable: ties keep arrival order
        gpus = [u for u in units if u.kind == "gpu"]
        cores = [u for u in units if u.kind == "cpu" and free_slots(u) > 0]
        running = {u.unit_id: list(u.running) for u in units}
        room = {u.unit_id: free_slots(u) for u in units}
        used_mb = {u.unit_id: u.memory_util * u.memory_mb for u in units}
        free_at = {u.unit_id: max(now_s, u.free_at_s) for u in units}
        out: list[Assignment] = []
        left: list[Stage] = []
        for stage in order:
            w = work[stage.task_id]
            open_gpus = [g for g in gpus if room[g.unit_id] > 0 and can_run(stage, g)
                         and fits_memory(self.costs, stage, g, used_mb[g.unit_id])
                         and self._unit_ms(stage.stage, stage.input_size, g) is not None]
            # The fastest idle core, if it left the GPUs alone (optimistic: cores are handed out
            # later, in rule 3, where an earlier stage may take it first).
            core_ms = min((self._unit_ms(stage.stage, stage.input_size, c) or float("inf")
                           for c in cores), default=float("inf"))
            idle = [g for g in open_gpus if not running[g.unit_id]]
            if idle:
                gpu = min(idle, key=lambda g: self._unit_ms(stage.stage, stage.input_size, g))
                ms = self._unit_ms(stage.stage, stage.input_size, gpu)
                if ms <= core_ms:
                    self._place(out, stage, gpu, running, room, used_mb, free_at, ms,
                                f"SJF-BSBF: remaining work {w:.1f}s, idle {gpu.unit_id} alone "
                                f"(est. {ms:.0f} ms)")
                    continue
            shares = []
            for g in open_gpus:
                if not running[g.unit_id]:
                    continue
                pairs = [(*self.benefit(stage.stage, p, g.model), p) for p in running[g.unit_id]]
                worst = min(pairs, key=lambda p: p[0])
                if worst[0] >= self.benefit_threshold:
                    shares.append((worst, g))
            if shares:
                # max keeps the first of equal benefits: unit order breaks ties.
                (benefit, own, source, partner), gpu = max(shares, key=lambda s: s[0][0])
                ms = self._unit_ms(stage.stage, stage.input_size, gpu)
                shared_ms = ms / own if own > 0 else float("inf")
                if shared_ms <= core_ms:
                    self._place(out, stage, gpu, running, room, used_mb, free_at, ms,
                                f"SJF-BSBF: remaining work {w:.1f}s, best sharing benefit "
                                f"{benefit:.2f} >= {self.benefit_threshold:.2f} beside {partner} "
                                f"({source}) -> {gpu.unit_id}")
                    continue
            left.append(stage)

        def reason(stage: Stage, unit: ComputingUnit, start: float, finish: float,
                   candidates: int) -> str:
            return (f"SJF-BSBF: remaining work {work[stage.task_id]:.1f}s, no idle GPU or "
                    f"beneficial share; earliest est. completion {finish:.3f}s of {candidates} "
                    f"units -> {unit.unit_id}")

        out += rest_by_earliest_finish(left, units, running, free_at, now_s, self.costs, reason)
        return out

    def _place(self, out, stage, gpu, running, room, used_mb, free_at, ms, why) -> None:
        running[gpu.unit_id].append(stage.stage)
        room[gpu.unit_id] -= 1
        used_mb[gpu.unit_id] += self.costs.gpu_memory_mb(stage.stage, stage.input_size)
        free_at[gpu.unit_id] += ms / 1000.0  # booked after what runs, as MCT books a queue
        out.append(Assignment(stage, gpu.unit_id, why))
