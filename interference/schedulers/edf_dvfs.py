"""EDF-DVFS at node level: earliest deadline first, each stage on the unit and frequency level
with the lowest estimated energy that still meets its task's deadline.

Paper: "Energy-aware non-preemptive task scheduling with deadlines in DVFS-enabled heterogeneous
clusters".

What it decides, at every scheduling instant on one node:

1. ready stages go in earliest-deadline-first order: their task's absolute deadline (arrival +
   ``Task.deadline_s``, from the :class:`~interference.schedulers.task_directory.TaskDirectory`);
   a stage without one goes after every stage with one; ties keep arrival order;
2. for each, every (unit with room, DVFS level) pair is a candidate; its estimated time at level
   ``f`` is ``time at max / (f / f_max)``, its energy ``busy power at f x that time``; the
   cheapest candidate whose estimated finish meets the deadline wins (ties: earlier finish, then
   unit order). A stage without a deadline meets any: it simply takes the cheapest;
3. if no candidate meets the deadline, the fastest unit with room at its highest level
   (non-preemptive: a late stage is finished as soon as possible, never dropped).

Adapted for streaming tasks and stages, and why:

- The paper schedules independent non-preemptive tasks; ours are DAGs whose deadline belongs to
  the whole task. With ``reserve_downstream`` a stage must finish by ``deadline - tail``, where
  tail is its downstream critical path on this node's best unit kinds at the highest level, so
  picking a slow level for an early stage does not doom the later ones.
- Power (``simulator.energy.PowerModel``, the calibration's ``power:``): busy power at ``f`` is
  ``idle_w + (busy_w - idle_w) (f / f_max) ** dvfs_exponent``. With the idle part counted, the
  cheapest level is not always the lowest (a CPU core's is 1800 MHz: idle power over a longer
  run outweighs the dynamic saving), the "critical frequency" of DVFS energy models.
- Time at max: the public estimate (``CostModel.unit_ms``); on a GPU already running ``k``
  stages it is multiplied by ``k + 1`` (ASSUMPTION: processor sharing, for the deadline test
  only; the energy stays the stage's alone energy, as the energy report splits co-run power).
- The simulator does not slow stages at a lower level (``simulator/energy.py``'s note), so the
  level only changes the energy estimate: it is written in the reason and kept in
  ``chosen_levels[(task_id, stage)] -> MHz`` for an energy report; a GPU model without a power
  entry uses the reference GPU's (named in the reason).

Parameters (constructor settings): ``tasks`` (None, a TaskDirectory or a list of Task: where
deadlines come from; an unknown task has none); ``max_tasks`` (the directory's bound when built
from a list); ``power`` (a PowerModel; None: the cost model's calibration); ``reserve_downstream``
(True, ASSUMPTION: the paper has no DAGs); ``max_recorded`` (bound of ``chosen_levels``, oldest
dropped first; ASSUMPTION, 100 000).

Example::

    >>> from workload.model import ComputingUnit, Stage, Task
    >>> tasks = [Task("t1", "face_recognition", 76_800_000, 0.0, deadline_s=100.0),
    ...          Task("t2", "face_recognition", 76_800_000, 0.0, deadline_s=1.0)]
    >>> units = [ComputingUnit("gpu:0", "gpu", model="k80")]
    >>> ready = [Stage("t1", "face_recognition", "face_compare", 76_800_000),
    ...          Stage("t2", "face_recognition", "face_compare", 76_800_000)]
    >>> [a.stage.task_id for a in EdfDvfsScheduler(tasks=tasks).assign(ready, units, 0.0)]
    ['t2']
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

from interference.schedulers._checks import BaseNodeScheduler, can_run, free_slots, ready_order
from interference.schedulers.task_directory import DEFAULT_MAX_ENTRIES, TaskDirectory
from interference.schedulers.vapor import fits_memory
from simulator.energy import PowerModel, PowerSpec
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel, load_calibration
from workload.model import Assignment, ComputingUnit, Stage

__all__ = ["EdfDvfsScheduler", "downstream_tail_ms"]

#: Slack for "meets the deadline" (s): below the event log's resolution.
_TOLERANCE_S = 1e-9


def downstream_tail_ms(app_id: str, stage: str, best_ms) -> float:
    """Longest path (ms) through the stages that need ``stage`` (not counting it), with
    ``best_ms(name)`` per stage; 0 for a last stage or an unknown application."""
    app = APPLICATIONS.get(app_id)
    if app is None:
        return 0.0
    tail: dict[str, float] = {}
    for s in reversed(app.stages):  # reverse topological order: successors first
        after = [tail[c.name] + best_ms(c.name) for c in app.stages if s.name in c.deps]
        tail[s.name] = max(after, default=0.0)
    return tail.get(stage, 0.0)


class EdfDvfsScheduler(BaseNodeScheduler):
    """Earliest deadline first; the lowest-energy (unit, DVFS level) that meets the deadline."""

    name = "edf_dvfs"

    def __init__(self, costs: CostModel | None = None, seed: int = 0, *, tasks=None,
                 max_tasks: int = DEFAULT_MAX_ENTRIES, power: PowerModel | None = None,
                 reserve_downstream: bool = True,
                 max_recorded: int = DEFAULT_MAX_ENTRIES) -> None:
        super().__init__(costs, seed)
        if power is not None and not isinstance(power, PowerModel):
            raise ValueError(f"power must be a simulator.energy.PowerModel, got {power!r:.80}")
        if not isinstance(reserve_downstream, bool):
            raise ValueError(f"reserve_downstream must be True or False, got "
                             f"{reserve_downstream!r}")
        if isinstance(max_recorded, bool) or not isinstance(max_recorded, int) \
                or max_recorded < 1:
            raise ValueError(f"max_recorded must be an integer >= 1, got {max_recorded!r}")
        self.directory = TaskDirectory.coerce(tasks, max_tasks)
        self._power = power
        self.reserve_downstream = reserve_downstream
        self.max_recorded = max_recorded
        #: (task_id, stage) -> chosen DVFS level (MHz), oldest first; bounded by max_recorded.
        self.chosen_levels: OrderedDict[tuple[str, str], float] = OrderedDict()

    @property
    def power(self) -> PowerModel:
        if self._power is None:
            calibration = getattr(self.costs, "calibration", None) or load_calibration()
            self._power = PowerModel.from_calibration(calibration)
        return self._power

    def power_spec(self, unit: ComputingUnit) -> tuple[PowerSpec, str]:
        """(the unit's power spec, a note: "" or which GPU's power was assumed)."""
        if unit.kind == "cpu":
            return self.power.cpu_core, ""
        spec = self.power.gpus.get(unit.model)
        if spec is not None:
            return spec, ""
        reference = self.costs.reference_gpu
        return self.power.gpus[reference], f" (no power entry for {unit.model!r}: {reference}'s)"

    def _alone_ms(self, stage: str, size: int, unit: ComputingUnit) -> float | None:
        try:
            return self.costs.unit_ms(stage, size, unit)
        except KeyError:  # unknown stage type or GPU model: no estimate there
            return None

    def options(self, stage: Stage, unit: ComputingUnit, co_runners: int, now_s: float
                ) -> list[tuple[float, float, float, float]]:
        """Per DVFS level of ``unit``: (energy J, estimated finish s, level MHz, time s)."""
        alone = self._alone_ms(stage.stage, stage.input_size, unit)
        if alone is None:
            return []
        spec, _ = self.power_spec(unit)
        shared_s = alone / 1000.0 * (1 + co_runners)
        out = []
        for f in spec.frequencies_mhz:
            stretch = spec.max_mhz / f
            watts = spec.idle_w + spec.dynamic_w(f, self.power.dvfs_exponent)
            out.append((watts * alone / 1000.0 * stretch, now_s + shared_s * stretch, f,
                        shared_s * stretch))
        return out

    def latest_finish_s(self, stage: Stage, units: Sequence[ComputingUnit]
                        ) -> tuple[float | None, float]:
        """(when the stage must finish, the downstream time reserved), from its task's deadline."""
        deadline = self.directory.get(stage.task_id).deadline_at_s
        if deadline is None:
            return None, 0.0
        if not self.reserve_downstream:
            return deadline, 0.0

        def best_ms(name: str) -> float:
            times = [t for t in (self._alone_ms(name, stage.input_size, u) for u in units)
                     if t is not None]
            return min(times, default=0.0)

        tail_s = downstream_tail_ms(stage.app_id, stage.stage, best_ms) / 1000.0
        return deadline - tail_s, tail_s

    # -- the rules -------------------------------------------------------------------------
    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        if isinstance(now_s, bool) or not isinstance(now_s, (int, float)) \
                or not math.isfinite(now_s):
            raise ValueError(f"now_s must be a finite number, got {now_s!r}")
        info = {s.task_id: self.directory.get(s.task_id) for s in ready}
        order = sorted(ready_order(ready), key=lambda s: (
            info[s.task_id].deadline_at_s is None, info[s.task_id].deadline_at_s or 0.0))
        room = {u.unit_id: free_slots(u) for u in units}
        co_runners = {u.unit_id: len(u.running) for u in units}
        used_mb = {u.unit_id: u.memory_util * u.memory_mb for u in units}
        out: list[Assignment] = []
        for stage in order:
            open_units = [u for u in units if room[u.unit_id] > 0 and can_run(stage, u)
                          and (u.kind == "cpu" or fits_memory(self.costs, stage, u,
                                                              used_mb[u.unit_id]))]
            candidates = [(opt, i, u) for i, u in enumerate(open_units)
                          for opt in self.options(stage, u, co_runners[u.unit_id], now_s)]
            if not candidates:
                continue  # no unit with room can run it now: it waits for one
            latest, tail_s = self.latest_finish_s(stage, units)
            meets = [c for c in candidates
                     if latest is None or c[0][1] <= latest + _TOLERANCE_S]
            if meets:
                (joules, finish, mhz, took), _, unit = min(
                    meets, key=lambda c: (c[0][0], c[0][1], c[1]))
                if latest is None:
                    why = "no deadline"
                else:
                    why = (f"deadline {info[stage.task_id].deadline_at_s:.3f}s (finish by "
                           f"{latest:.3f}s, {tail_s:.3f}s kept for downstream)")
                rule = (f"lowest energy of {len(candidates)} options" if latest is None else
                        f"lowest energy of the {len(meets)}/{len(candidates)} options meeting it")
            else:
                fastest = [c for c in candidates
                           if c[0][2] == self.power_spec(c[2])[0].max_mhz]
                (joules, finish, mhz, took), _, unit = min(
                    fastest, key=lambda c: (c[0][1], c[1]))
                why = (f"deadline {info[stage.task_id].deadline_at_s:.3f}s cannot be met "
                       f"(finish by {latest:.3f}s)")
                rule = "fastest unit at its highest level"
            _, note = self.power_spec(unit)
            out.append(Assignment(stage, unit.unit_id,
                                  f"EDF-DVFS: {why}; {rule} -> {unit.unit_id} @ {mhz:g} MHz, "
                                  f"est. {took:.3f}s, {joules:.3g} J{note}"))
            self._record((stage.task_id, stage.stage), mhz)
            room[unit.unit_id] -= 1
            co_runners[unit.unit_id] += 1
            if unit.kind == "gpu":
                used_mb[unit.unit_id] += self.costs.gpu_memory_mb(stage.stage, stage.input_size)
        return out

    def _record(self, key: tuple[str, str], mhz: float) -> None:
        self.chosen_levels[key] = mhz
        self.chosen_levels.move_to_end(key)
        while len(self.chosen_levels) > self.max_recorded:
            self.chosen_levels.popitem(last=False)
