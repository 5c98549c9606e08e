"""ElasticBatch at node level: per stage type, the batch size and the MIG slice that give the
most throughput per slice of GPU while the batch's predicted latency meets its target.

Paper: "ElasticBatch: elastic scheduling for batch inference on MIG" (batch size x MIG slice
per model under a latency SLO).

What it decides, at every scheduling instant on one node: ready stages are grouped by stage type
(groups in arrival order of their oldest stage); for the oldest ``b`` stages of a group, every
idle unit and preferred batch size ``b`` is a candidate whose predicted latency is
``t(1) x (1 + beta (b - 1))`` (``t(1)``: the slowest member alone on that unit, whose speed is
the slice's ``g/7`` of the GPU). Among the candidates that meet the target and fit the unit's
memory (``b`` x per-stage memory) it takes the largest batch (with ``beta < 1`` the most stages
per GPU-second), then the smallest slice (most throughput per compute slice: bigger slices stay
free for tighter targets), then the shortest latency, then unit order. So a tight target gives a
small batch on a big slice, a loose one a big batch on a small slice. A batch that would break
the target is never formed: if no candidate meets it, one stage goes alone to the unit where it
is estimated to finish first (waiting if that unit is busy). On a GPU without MIG it chooses the
batch size only (the reason says so); CPU cores run batches of one.

Adapted for streaming tasks and stages, and why:

- The paper batches requests of one model; here a batch is ``b`` ready stages of one stage
  type started together on one idle unit (the simulator's batching axis, ``simulator.mig``:
  the same ``t(1) (1 + beta (b - 1))`` law, on only because this scheduler sets ``max_batch``).
  It does not hold stages back to grow a batch (Triton's queue delay 0): streams keep arriving.
- The paper's per-model SLO becomes a per-stage target: ``latency_target_s`` if set, else the
  stage's share of the time left to its task's deadline, in proportion to its best alone time
  over the rest of the task's critical path on this node (the rest is left to later stages).
  The target bounds the batch's run time; the wait before it is whatever the units' backlog is.
- GPU-capable stages prefer GPUs; a CPU core is used when it meets a target (a batch of one) or
  when it is where the stage finishes first. The slice choice is per batch (partitions are
  fixed by the node's ``mig=`` label: re-partitioning a GPU is out of scope).

Parameters (constructor settings): ``batch_sizes`` ((1, 2, 4, 8), ASSUMPTION: the power-of-two
sizes of Triton's ``preferred_batch_size`` examples; must contain 1, at most
``MAX_BATCH_SIZE``); ``latency_target_s``
(None: from deadlines); ``tasks`` / ``max_tasks`` (where deadlines come from, a
:class:`~interference.schedulers.task_directory.TaskDirectory` or a list of Task); ``beta``
(None: the calibration's ``batching.beta``, the law the simulator uses).

Example::

    >>> from workload.model import ComputingUnit, Stage
    >>> units = [ComputingUnit("gpu:0/mig0:3g.20gb", "gpu", 1.9, "a100", capacity=8,
    ...                        memory_mb=20480, mig_profile="3g.20gb"),
    ...          ComputingUnit("gpu:0/mig1:1g.5gb", "gpu", 0.64, "a100", capacity=8,
    ...                        memory_mb=5120, mig_profile="1g.5gb")]
    >>> ready = [Stage(f"t{i}", "face_recognition", "face_compare", 1000) for i in range(4)]
    >>> sorted({a.unit_id for a in ElasticBatchScheduler().assign(ready, units, 0.0)})
    ['gpu:0/mig1:1g.5gb']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from interference.schedulers._checks import BaseNodeScheduler, can_run, ready_order
from interference.schedulers.edf_dvfs import downstream_tail_ms
from interference.schedulers.task_directory import DEFAULT_MAX_ENTRIES, TaskDirectory
from simulator.mig import MigCatalog, batch_beta
from workload.estimates import CostModel, load_calibration
from workload.model import Assignment, ComputingUnit, Stage

__all__ = ["ElasticBatchScheduler", "BatchOption", "DEFAULT_BATCH_SIZES", "MAX_BATCH_SIZE"]

#: ASSUMPTION: Triton's preferred batch sizes in its examples (powers of two up to 8).
DEFAULT_BATCH_SIZES = (1, 2, 4, 8)
#: Largest batch size accepted (a bound against runaway settings, ASSUMPTION: 8x the default).
MAX_BATCH_SIZE = 64
#: Slack for "meets the target" (s): below the event log's resolution.
_TOLERANCE_S = 1e-9


@dataclass(frozen=True)
class BatchOption:
    """One candidate: the oldest ``size`` stages of a group as one batch on ``unit``."""

    unit: ComputingUnit
    index: int                # the unit's position (the last tie-break)
    size: int
    latency_s: float          # predicted batch latency t(1) (1 + beta (size - 1))
    fraction: float           # compute fraction of a GPU (slice g/7; whole GPU or core: 1)
    meets: bool


class _LazyTargets(dict):
    """Stage -> (target, source), computed on first use: a long ready queue only pays for the
    stages that head a group or join a candidate batch."""

    def __init__(self, compute) -> None:
        super().__init__()
        self._compute = compute

    def __missing__(self, stage: Stage):
        self[stage] = value = self._compute(stage)
        return value


class ElasticBatchScheduler(BaseNodeScheduler):
    """Per stage type: the largest batch on the smallest slice that meets the latency target."""

    name = "elastic_batch"

    def __init__(self, costs: CostModel | None = None, seed: int = 0, *,
                 batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
                 latency_target_s: float | None = None, tasks=None,
                 max_tasks: int = DEFAULT_MAX_ENTRIES, beta: float | None = None) -> None:
        super().__init__(costs, seed)
        sizes = tuple(batch_sizes) if isinstance(batch_sizes, (list, tuple)) else ()
        if not sizes or any(isinstance(b, bool) or not isinstance(b, int)
                            or not 1 <= b <= MAX_BATCH_SIZE for b in sizes) or 1 not in sizes:
            raise ValueError(f"batch_sizes must be integers in [1, {MAX_BATCH_SIZE}] including "
                             f"1, got {batch_sizes!r}")
        if latency_target_s is not None and (
                isinstance(latency_target_s, bool)
                or not isinstance(latency_target_s, (int, float))
                or not math.isfinite(latency_target_s) or latency_target_s <= 0):
            raise ValueError(f"latency_target_s must be a finite number > 0 or None, got "
                             f"{latency_target_s!r}")
        if beta is not None and (isinstance(beta, bool) or not isinstance(beta, (int, float))
                                 or not math.isfinite(beta) or not 0 < beta <= 1):
            raise ValueError(f"beta must be a number in (0, 1] or None, got {beta!r}")
        self.batch_sizes = tuple(sorted(set(sizes)))
        #: The simulator's batching axis reads this: batches of up to this many stages.
        self.max_batch = max(self.batch_sizes)
        self.latency_target_s = latency_target_s
        self.directory = TaskDirectory.coerce(tasks, max_tasks)
        self._beta = beta
        self._catalog: MigCatalog | None = None

    @property
    def beta(self) -> float:
        if self._beta is None:
            self._beta = batch_beta(self._calibration())
        return self._beta

    def _calibration(self):
        # Measured executor costs (MeasuredStageCosts) carry no calibration: the shipped one.
        return getattr(self.costs, "calibration", None) or load_calibration()

    def compute_fraction(self, unit: ComputingUnit) -> float:
        """A MIG slice's share of its GPU; 1 for a whole GPU or a core."""
        if not unit.mig_profile:
            return 1.0
        if self._catalog is None:
            self._catalog = MigCatalog.from_calibration(self._calibration())
        return self._catalog.profile(unit.model, unit.mig_profile).compute_fraction

    def target_s(self, stage: Stage, units: Sequence[ComputingUnit], now_s: float
                 ) -> tuple[float | None, str]:
        """(the stage's latency target in s or None, where it comes from)."""
        if self.latency_target_s is not None:
            return float(self.latency_target_s), "per-stage latency target"
        deadline = self.directory.get(stage.task_id).deadline_at_s
        if deadline is None:
            return None, "no deadline"

        def best_ms(name: str) -> float:
            times = [t for t in (self._alone_ms(name, stage.input_size, u) for u in units)
                     if t is not None]
            return min(times, default=0.0)

        own = best_ms(stage.stage)
        tail = downstream_tail_ms(stage.app_id, stage.stage, best_ms)
        share = own / (own + tail) if own + tail > 0 else 1.0
        left = deadline - now_s
        return left * share, f"{share:.2f} of the {left:.3f}s left to the deadline"

    def _alone_ms(self, stage: str, size: int, unit: ComputingUnit) -> float | None:
        try:
            return self.costs.unit_ms(stage, size, unit)
        except KeyError:  # unknown stage type or GPU model: no estimate there
            return None

    def options(self, batch_pool: Sequence[Stage], units: Sequence[ComputingUnit],
                idle: set[str], target: dict) -> list[BatchOption]:
        """Every (idle unit, batch size) candidate for the oldest stages of ``batch_pool``."""
        out = []
        for index, unit in enumerate(units):
            if unit.unit_id not in idle or not can_run(batch_pool[0], unit):
                continue
            for size in self.batch_sizes:
                if size > len(batch_pool) or size > unit.capacity \
                        or (size > 1 and unit.kind != "gpu"):
                    continue
                batch = batch_pool[:size]
                alone = [self._alone_ms(s.stage, s.input_size, unit) for s in batch]
                if None in alone or not self._fits(batch, unit):
                    continue
                latency = max(alone) / 1000.0 * (1 + self.beta * (size - 1))
                targets = [target[s][0] for s in batch if target[s][0] is not None]
                limit = min(targets) if targets else None
                meets = (latency <= limit + _TOLERANCE_S) if limit is not None \
                    else unit.kind == "gpu"  # no target: any GPU batch; a core only as fallback
                out.append(BatchOption(unit, index, size, latency, self.compute_fraction(unit),
                                       meets))
        return out

    def _fits(self, batch: Sequence[Stage], unit: ComputingUnit) -> bool:
        # An idle unit: the batch's members' memory (each its own, n x per-stage) must fit.
        if unit.kind != "gpu" or not unit.memory_mb:
            return True
        need = sum(self.costs.gpu_memory_mb(s.stage, s.input_size) for s in batch)
        return need <= unit.memory_mb

    # -- the rules -------------------------------------------------------------------------
    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        if isinstance(now_s, bool) or not isinstance(now_s, (int, float)) \
                or not math.isfinite(now_s):
            raise ValueError(f"now_s must be a finite number, got {now_s!r}")
        idle = {u.unit_id for u in units if not u.running}
        free_at = {u.unit_id: max(now_s, u.free_at_s) if u.running else now_s for u in units}
        groups: dict[str, list[Stage]] = {}
        for stage in ready_order(ready):
            groups.setdefault(stage.stage, []).append(stage)
        target = _LazyTargets(lambda s: self.target_s(s, units, now_s))  # only stages looked at
        out: list[Assignment] = []
        for pool in groups.values():
            while pool and idle:
                chosen = self._choose(pool, units, idle, free_at, target, now_s)
                if chosen is None:
                    break  # the head's best unit is busy: the group waits for it
                option, why = chosen
                batch, pool = pool[:option.size], pool[option.size:]
                out.extend(Assignment(s, option.unit.unit_id, why) for s in batch)
                idle.discard(option.unit.unit_id)
                free_at[option.unit.unit_id] = now_s + option.latency_s
        return out

    def _choose(self, pool, units, idle, free_at, target, now_s):
        """(the option, the reason) for the oldest stages of ``pool``; None to wait."""
        head = pool[0]
        options = self.options(pool, units, idle, target)
        meeting = [o for o in options if o.meets]
        gpus = [o for o in meeting if o.unit.kind == "gpu"]
        limit, source = target[head]
        if gpus or meeting:
            best = min(gpus or meeting,
                       key=lambda o: (-o.size, o.fraction, o.latency_s, o.index))
            return best, self._reason(best, limit, source, len(meeting), len(options))
        # Nothing meets the target: one stage alone, where it is estimated to finish first.
        finishes = [(free_at[u.unit_id] + t / 1000.0, i, u) for i, u in enumerate(units)
                    if can_run(head, u) and self._fits([head], u)
                    and (t := self._alone_ms(head.stage, head.input_size, u)) is not None]
        if not finishes:
            return None
        finish, index, unit = min(finishes, key=lambda f: (f[0], f[1]))
        if unit.unit_id not in idle:
            return None
        alone = BatchOption(unit, index, 1, finish - now_s, self.compute_fraction(unit), False)
        why = (f"ElasticBatch: {head.stage}: no batch meets the target "
               f"({'none' if limit is None else f'{limit:.3f}s'}, {source}); one stage alone "
               f"where it finishes first -> {unit.unit_id}, est. {alone.latency_s:.3f}s")
        return alone, why

    def _reason(self, option: BatchOption, limit, source: str, meeting: int, total: int) -> str:
        unit = option.unit
        if unit.kind == "cpu":
            where = f"core {unit.unit_id} (batch of one)"
        elif unit.mig_profile:
            where = (f"MIG slice {unit.unit_id} ({unit.mig_profile}, {option.fraction:.2f} of "
                     f"the GPU)")
        else:
            where = f"whole GPU {unit.unit_id} (no MIG: batch size only)"
        bound = "no target" if limit is None else f"target {limit:.3f}s ({source})"
        return (f"ElasticBatch: batch of {option.size} on {where}, est. {option.latency_s:.3f}s,"
                f" {bound}; largest batch, then smallest slice, of the {meeting}/{total} "
                f"options meeting it")
