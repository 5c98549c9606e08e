"""Stages on units in the simulator: the node scheduler's decisions and their true durations.

Once a task's input (and model) is at its node, its stages become ready as their dependencies
finish. Whenever a node has ready stages, the node scheduler under test is shown them and the
node's units (``ComputingUnit`` views: what runs where, until when) and answers which stage
starts on which unit; its answer is checked, never repaired.

A started stage runs for its true time: the public estimate (``CostModel.unit_ms``) times the
hidden per-task noise and the hidden per-type factor of the node. A CPU core runs one stage at a
time; a GPU up to ``gpu_max_corun``. Two stages on one GPU progress at the measured co-location
rates of the ground truth; more share it equally. A stage that does not fit in the GPU's memory,
or whose pair was measured as unable to co-run, fails with out-of-memory and is ready again
``oom_retry_s`` later.

Batching (off unless the scheduler has an integer ``max_batch`` >= 2, ``simulator.mig``): a GPU
unit then takes up to ``max_batch`` stages of one stage type, which progress as one batch at
``batch_rate(n, beta)`` each; stages of mixed types still co-run at most ``gpu_max_corun``.
"""

from __future__ import annotations

import math

from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import Assignment, ComputingUnit, NodeScheduler, Stage, Task

from simulator.events import OOM_RETRY, STAGE_DONE, EventQueue
from simulator.ground_truth import GroundTruth
from simulator.links import LinkTransfers
from simulator.mig import batch_beta, batch_rate
from simulator.runtime import Node, Run, TaskState, Unit, advance
from simulator.utilisation import UtilisationMeter

__all__ = ["StageRunner"]


class StageRunner:
    """Starts, times and finishes the stages of every node's tasks on its CPU cores and GPUs."""

    def __init__(self, queue: EventQueue, nodes: dict[str, Node], meter: UtilisationMeter,
                 links: LinkTransfers, scheduler: NodeScheduler, costs: CostModel,
                 truth: GroundTruth, hidden_task_type_factors: tuple[tuple[str, str, float], ...],
                 oom_retry_s: float):
        self.queue, self.nodes, self.meter, self.links = queue, nodes, meter, links
        self.scheduler = scheduler
        self.costs = costs
        self.truth = truth
        # (node id, app id) -> factor on the true time of that app's stages on that node.
        self.type_factor = {(n, t): float(f) for n, t, f in hidden_task_type_factors}
        self.oom_retry_s = oom_retry_s
        self.oom_failures = 0
        self.gpu_useful_s = 0.0        # reference-GPU seconds of finished GPU stages
        # The cross-node stage placement axis (simulator.stage_split), set by the engine; only
        # called for a task a policy split over nodes.
        self.split = None
        # The batching axis: on only when the scheduler asks for batches of 2 or more.
        max_batch = getattr(scheduler, "max_batch", None)
        self.max_batch = max_batch if isinstance(max_batch, int) and max_batch >= 2 else None
        self.batch_beta = batch_beta(costs.calibration) if self.max_batch else None

    def true_best_s(self, node: Node, task: Task, stage: str) -> float:
        """True seconds of a stage on the node's best unit, alone (hidden noise included)."""
        return (self.costs.stage_best_ms(stage, task.input_size, node.spec) / 1000.0
                * self.truth.noise(task.task_id, stage)
                * self.type_factor.get((node.spec.node_id, task.app_id), 1.0))

    # -- events ------------------------------------------------------------------------------
    def inputs_ready(self, node_id: str, task_id: str) -> None:
        """The task's input (and model) is at the node: its first stages become ready."""
        node = self.nodes[node_id]
        state = node.tasks[task_id]
        for stage in APPLICATIONS[state.task.app_id].stages:
            if not stage.deps and stage.name in state.waiting_deps:  # a split task: its part
                self._make_ready(node, state, stage)
        if state.stage_nodes is not None:  # entry stages on other nodes get the input forwarded
            self.split.forward_input(node, state)
        self.schedule(node_id)

    def retry(self, node_id: str, stage: Stage) -> None:
        """Handle an ``OOM_RETRY`` event: the stage is ready again."""
        self.nodes[node_id].ready.append(stage)
        self.schedule(node_id)

    def stage_done(self, node_id: str, unit_id: str, key: tuple, version: int) -> None:
        """Handle a ``STAGE_DONE`` event (ignored unless it is the run's latest timing)."""
        node = self.nodes[node_id]
        unit = next(u for u in node.units if u.view.unit_id == unit_id)
        run = next((r for r in unit.runs if r.key == key), None)
        if run is None or run.version != version:
            return
        self.meter.accumulate(node)
        now = self.queue.now
        advance(unit.runs, unit.last_update_s, now)
        unit.last_update_s = now
        unit.runs.remove(run)
        self.gpu_useful_s += run.reference_gpu_s
        if unit.is_gpu and len(run.partners) == 1 and now > run.started_s:
            # What an executor can measure: its estimate of the stage alone over the time it
            # took. Only stages that shared the GPU with one partner type report a slowdown.
            observe = getattr(self.scheduler, "observe_corun", None)
            if observe is not None:
                observe(run.stage, next(iter(run.partners)), unit.view.model,
                        run.estimate_s / (now - run.started_s))
        self._reschedule_unit(node, unit)
        task_id, stage_name = key
        state = node.tasks[task_id]
        state.done.add(stage_name)
        state.stage_runs.append((stage_name, unit_id, run.busy_share_s))
        done_s = self.true_best_s(node, state.task, stage_name)
        state.true_left_s -= done_s
        node.true_left_s = max(0.0, node.true_left_s - done_s)
        state.estimate_left_s = max(0.0, state.estimate_left_s - self.costs.stage_best_ms(
            stage_name, state.task.input_size, node.spec) / 1000.0)
        self.queue.log("finish", task_id, stage_name, node_id, unit_id)
        app = APPLICATIONS[state.task.app_id]
        for stage in app.stages:
            # A consumer on another node (a split task) hears of it through self.split below.
            if stage_name in stage.deps and stage.name in state.waiting_deps:
                state.waiting_deps[stage.name] -= 1
                if state.waiting_deps[stage.name] == 0:
                    self._make_ready(node, state, stage)
        if state.stage_nodes is not None:
            self.split.stage_finished(node, state, stage_name)
        elif len(state.done) == len(app.stages):
            self.links.send_result(node, state.task)
        self.schedule(node_id)

    def make_ready(self, node_id: str, task_id: str, stage_name: str) -> None:
        """A split task's stage got its last input from another node: ready on ``node_id``."""
        node = self.nodes[node_id]
        state = node.tasks[task_id]
        self._make_ready(node, state, APPLICATIONS[state.task.app_id].stage(stage_name))

    # -- the node scheduler ------------------------------------------------------------------
    def schedule(self, node_id: str) -> None:
        """Ask the node scheduler to place the node's ready stages, and start what it chose."""
        node = self.nodes[node_id]
        if not node.ready:
            return
        node.ready.sort(key=lambda s: (s.ready_at_s, s.task_id, s.stage))
        views = self._unit_views(node)
        assignments = self.scheduler.assign(list(node.ready), views, self.queue.now)
        by_id = {u.view.unit_id: u for u in node.units}
        room = {v.unit_id: v.capacity - len(v.running) for v in views}
        types = {v.unit_id: list(v.running) for v in views}
        started = set()
        for assignment in assignments:
            self._check(assignment, by_id, room, started)
            if self.max_batch:
                self._check_batch(assignment, by_id, types)
            room[assignment.unit_id] -= 1
            started.add((assignment.stage.task_id, assignment.stage.stage))
            node.ready.remove(assignment.stage)
            self._start_stage(node, by_id[assignment.unit_id], assignment.stage)

    def _make_ready(self, node: Node, state: TaskState, stage_def) -> None:
        # A stage no GPU of the node could hold even alone is CPU work there: schedulers that
        # only launch what fits (SchedTune, IAWP) would otherwise keep it waiting for ever.
        gpu_capable = stage_def.gpu_capable and self._fits_a_gpu(
            node, self.costs.gpu_memory_mb(stage_def.name, state.task.input_size))
        node.ready.append(Stage(state.task.task_id, state.task.app_id, stage_def.name,
                                state.task.input_size, gpu_capable, self.queue.now))

    @staticmethod
    def _fits_a_gpu(node: Node, memory_mb: float) -> bool:
        return any(memory_mb <= unit.memory_mb for unit in node.units if unit.is_gpu)

    def _unit_views(self, node: Node) -> list[ComputingUnit]:
        # What the scheduler sees of each unit: what runs there and when it would be free.
        now = self.queue.now
        views = []
        for unit in node.units:
            advance(unit.runs, unit.last_update_s, now)
            unit.last_update_s = now
            free_at = now + max((r.remaining / r.rate if r.rate > 0 else 0.0
                                 for r in unit.runs), default=0.0)
            v = unit.view
            capacity = max(v.capacity, self.max_batch) if self.max_batch and unit.is_gpu \
                else v.capacity
            views.append(ComputingUnit(v.unit_id, v.kind, v.speed, v.model,
                                       tuple(r.stage for r in unit.runs), capacity, free_at,
                                       1.0 if unit.runs else 0.0,
                                       (sum(r.memory_mb for r in unit.runs) / unit.memory_mb)
                                       if unit.memory_mb else 0.0, unit.memory_mb,
                                       v.mig_profile))
        return views

    def _check_batch(self, a: Assignment, by_id: dict, types: dict) -> None:
        # With batching on, a GPU unit holds one batch of one type (up to max_batch) or mixed
        # co-runners (up to gpu_max_corun), never a larger mixed group.
        unit = by_id[a.unit_id]
        types[a.unit_id].append(a.stage.stage)
        on_unit = types[a.unit_id]
        if unit.is_gpu and len(set(on_unit)) > 1 and len(on_unit) > unit.view.capacity:
            raise ValueError(f"node scheduler {self.scheduler.name!r} put {len(on_unit)} stages "
                             f"of mixed types on {a.unit_id} (a batch is one stage type; mixed "
                             f"co-runners at most {unit.view.capacity})")

    def _check(self, a: Assignment, by_id: dict, room: dict, started: set) -> None:
        # A scheduler under test may be wrong: refuse its answer rather than run it.
        name = self.scheduler.name
        if a.unit_id not in by_id:
            raise ValueError(f"node scheduler {name!r} used unknown unit {a.unit_id!r}")
        if room[a.unit_id] <= 0:
            raise ValueError(f"node scheduler {name!r} over-filled {a.unit_id}")
        if (a.stage.task_id, a.stage.stage) in started:
            raise ValueError(f"node scheduler {name!r} started {a.stage.stage} twice")
        if by_id[a.unit_id].is_gpu and not a.stage.gpu_capable:
            raise ValueError(f"node scheduler {name!r} put CPU-only {a.stage.stage} on a GPU")

    # -- units -------------------------------------------------------------------------------
    def _start_stage(self, node: Node, unit: Unit, stage: Stage) -> None:
        self.meter.accumulate(node)
        now = self.queue.now
        state = node.tasks[stage.task_id]
        if state.first_start_s is None:
            state.first_start_s = now
        est_ms = self.costs.unit_ms(stage.stage, stage.input_size, unit.view)
        true_s = (est_ms / 1000.0 * self.truth.noise(stage.task_id, stage.stage)
                  * self.type_factor.get((node.spec.node_id, stage.app_id), 1.0))
        memory = self.costs.gpu_memory_mb(stage.stage, stage.input_size) if unit.is_gpu else 0.0
        if unit.is_gpu and self._oom(unit, stage.stage, memory):
            self.oom_failures += 1
            observe = getattr(self.scheduler, "observe_corun", None)
            if observe is not None and len(unit.runs) == 1:
                # The executor sees the launch fail next to that partner: rate 0.
                observe(stage.stage, unit.runs[0].stage, unit.view.model, 0.0)
            self.queue.log("oom", stage.task_id, stage.stage, node.spec.node_id,
                           unit.view.unit_id)
            # A stage larger than every GPU of the node, alone, would fail there for ever
            # (an input of 10^9 pixels on an 8 GB P4, a 2 GB GPU): it is retried on a core.
            fits_a_gpu = self._fits_a_gpu(node, memory)
            self.queue.push(now + self.oom_retry_s, OOM_RETRY,
                            (node.spec.node_id, Stage(stage.task_id, stage.app_id, stage.stage,
                                                      stage.input_size,
                                                      stage.gpu_capable and fits_a_gpu,
                                                      stage.ready_at_s)))
            return
        reference_s = 0.0
        if unit.is_gpu:
            ref_ms = self.costs.gpu_ms(stage.stage, stage.input_size,
                                       self.costs.calibration.raw["stage_gpu_speedup"]
                                       ["reference_gpu"])
            reference_s = (ref_ms or 0.0) / 1000.0 * self.truth.noise(stage.task_id, stage.stage)
        advance(unit.runs, unit.last_update_s, now)
        unit.last_update_s = now
        unit.runs.append(Run((stage.task_id, stage.stage), true_s, started_s=now,
                             work_s=true_s, reference_gpu_s=reference_s, memory_mb=memory,
                             stage=stage.stage, estimate_s=est_ms / 1000.0))
        self.queue.log("start", stage.task_id, stage.stage, node.spec.node_id, unit.view.unit_id)
        self._reschedule_unit(node, unit)

    def _oom(self, unit: Unit, stage: str, memory_mb: float) -> bool:
        if sum(r.memory_mb for r in unit.runs) + memory_mb > unit.memory_mb:
            return True
        # A batch member is not a co-runner: a measured "cannot co-run" pair of its own type
        # does not apply to it (its memory, n x per-stage memory, is checked above).
        return any(self.truth.corun_rates(stage, r.stage, unit.view.model) == (0.0, 0.0)
                   for r in unit.runs if not (self.max_batch and r.stage == stage))

    def _reschedule_unit(self, node: Node, unit: Unit) -> None:
        # New rates for the unit's runs and new finish events; older events carry an older
        # version and are ignored when they fire.
        if self.max_batch and unit.is_gpu and len(unit.runs) > 1 \
                and len({r.stage for r in unit.runs}) == 1:
            # One stage type together on the unit: a batch (simulator.mig), not co-runners.
            for run in unit.runs:
                run.rate = batch_rate(len(unit.runs), self.batch_beta)
        elif unit.is_gpu and len(unit.runs) == 2:
            a, b = unit.runs
            rate_a, rate_b = self.truth.corun_rates(a.stage, b.stage, unit.view.model)
            a.rate, b.rate = rate_a, rate_b
            a.partners.add(b.stage)
            b.partners.add(a.stage)
        else:
            # Alone (or, beyond measured pairs, time-sliced equally).
            for run in unit.runs:
                run.rate = 1.0 / len(unit.runs)
        now = self.queue.now
        for run in unit.runs:
            run.version += 1
            finish = now + (run.remaining / run.rate if run.rate > 0 else math.inf)
            self.queue.push(finish, STAGE_DONE, (node.spec.node_id, unit.view.unit_id, run.key,
                                                 run.version))
