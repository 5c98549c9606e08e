"""LDWP's outcome rewards: decisions judged later, from what the completions report.

With ``reward="task_latency"`` or ``"drain_time"`` a decision's reward is known only when work
completes (the simulator's completions, or the feedback topic through the placement service),
after the agent has moved on. :class:`OutcomeRewards` keeps the bookkeeping between the two:

- ``task_latency``: the task's own latency, when the task completes.
- ``drain_time``: the time until the chosen node has completed (estimated) work equal to its
  backlog at the decision plus this task: a level of the node's completed-work counter, reached
  whatever order the node scheduler runs the stages in.
- ``energy_weight`` > 0 (either reward): ``latency reward - lambda x E / energy_scale_j``, E the
  task's busy joules from its stage timings, joined once both parts are known (either may come
  first).

An outcome that arrives before the agent's ``learn`` call for that decision waits in
``early``; a decision whose outcome is not known yet waits in ``awaiting``. Every table is
bounded: entries of decisions made while not training would otherwise never leave.

Example::

    outcomes = OutcomeRewards(settings, cluster, costs, store=replay_and_train)
    outcomes.await_outcome("t1", (state, action, next_state, False))
    outcomes.completed("t1", latency_s=2.0, node_id="tm_a")      # stores the transition
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from workload.model import ClusterSpec, Observation

__all__ = ["OutcomeRewards", "PENDING_LIMIT"]

#: Most entries any of the waiting tables holds before it is cleared (decisions made while not
#: training never get their other half).
PENDING_LIMIT = 100_000


class OutcomeRewards:
    """Outcome rewards of one agent; ``store`` receives each finished (s, a, r, s', done)."""

    def __init__(self, settings, cluster: ClusterSpec, costs,
                 store: Callable[[tuple], None]):
        self.settings = settings
        self.cluster = cluster
        self.costs = costs
        self.store = store
        self.awaiting: dict[str, tuple] = {}   # task id -> (s, a, s', done), reward unknown
        self.early: dict[str, float] = {}      # task id -> reward, known before learn()
        # drain_time: estimated work completed per node (from completions), the decisions
        # waiting for their node to reach a work level, and what each task placed.
        self.done_work: dict[str, float] = {}
        self.drain_waits: dict[str, list] = {}
        self.placed: dict[str, tuple] = {}
        self._work_cache: dict = {}
        # energy_weight: a task's busy joules and its latency reward, whichever came first
        self.energy_j: dict[str, float] = {}
        self.latency_parts: dict[str, float] = {}
        self._power = None

    # -- the decision's side ---------------------------------------------------------------
    def await_outcome(self, task_id: str, transition: tuple) -> None:
        """``learn`` has (s, a, s', done) for ``task_id``: store it now if its reward came
        first, else keep it until the reward does."""
        reward = self.early.pop(task_id, None)
        if reward is None:
            self.awaiting[task_id] = transition
        else:
            state, action, next_state, done = transition
            self.store((state, action, reward, next_state, done))

    def register_drain(self, observation: Observation, index: int) -> None:
        """drain_time: remember the work level at which this decision is judged."""
        node = observation.nodes[index]
        task = observation.task
        work = self.task_work_s(task, node.node_id)
        level = self.done_work.get(node.node_id, 0.0) + node.backlog_s + work
        self.drain_waits.setdefault(node.node_id, []).append(
            (level, observation.now_s, task.task_id))
        self.placed[task.task_id] = (node.node_id, work, task.arrival_s)

    def task_work_s(self, task, node_id: str) -> float:
        """Estimated unit-seconds of the task on the node (what NodeState.backlog_s sums)."""
        key = (task.app_id, task.input_size, node_id)
        version = getattr(self.costs, "version", None)  # a learned model changes: re-ask it
        if version != self._work_cache.get("version"):
            self._work_cache = {"version": version}
        work = self._work_cache.get(key)
        if work is None:
            spec = next((n for n in self.cluster.nodes if n.node_id == node_id), None)
            work = self.costs.task_work_ms(task, spec) / 1000.0 if spec is not None else 0.0
            if len(self._work_cache) > PENDING_LIMIT:
                self._work_cache = {"version": version}
            self._work_cache[key] = work
        return work

    # -- the completion's side --------------------------------------------------------------
    def completed(self, task_id: str, latency_s: float, node_id: str) -> None:
        """A placed task finished: judge the decisions this completion settles."""
        if self.settings.reward == "task_latency":
            self._judged(task_id, self.latency_reward(latency_s))
        elif self.settings.reward == "drain_time":
            placed = self.placed.pop(task_id, None)
            if placed is None:
                return  # placed while not training
            node_id, work, arrival_s = placed
            now = arrival_s + latency_s
            done = self.done_work.get(node_id, 0.0) + work
            self.done_work[node_id] = done
            waits = self.drain_waits.get(node_id, [])
            reached = [w for w in waits if w[0] <= done + 1e-9]
            if reached:
                self.drain_waits[node_id] = [w for w in waits if w[0] > done + 1e-9]
                for _, decided_s, decided_task in reached:
                    self._judged(decided_task, self.latency_reward(now - decided_s))

    def stage_runs(self, task_id: str, node_id: str, stage_runs) -> None:
        """A placed task's stage timings at its completion: its energy term."""
        energy = self.task_energy_j(node_id, stage_runs)
        latency = self.latency_parts.pop(task_id, None)
        if latency is not None:
            self._outcome(task_id, latency - self.energy_penalty(energy))
            return
        if len(self.energy_j) > PENDING_LIMIT:
            self.energy_j.clear()  # energies of tasks placed while not training
        self.energy_j[task_id] = energy

    def task_energy_j(self, node_id: str, stage_runs) -> float:
        """Busy joules of a task from its stage timings (simulator.energy's rule)."""
        from simulator.energy import PowerModel, task_busy_energy_j
        if self._power is None:
            self._power = PowerModel.from_calibration(self.costs.calibration)
        spec = next((n for n in self.cluster.nodes if n.node_id == node_id), None)
        return task_busy_energy_j(spec, stage_runs, self._power) if spec is not None else 0.0

    def energy_penalty(self, energy_j: float) -> float:
        """What ``energy_j`` busy joules take off an outcome reward."""
        return self.settings.energy_weight * energy_j / self.settings.energy_scale_j

    def latency_reward(self, latency_s: float) -> float:
        """The reward for ``latency_s`` seconds (task latency, or drain time)."""
        if self.settings.latency_transform == "log":
            return -float(np.log1p(max(0.0, latency_s)))
        return -latency_s / self.settings.latency_scale_s

    def _judged(self, task_id: str, reward: float) -> None:
        """An outcome reward; with ``energy_weight`` the task's energy term joins it once both
        are known (without it, the reward as it is)."""
        if self.settings.energy_weight == 0:
            self._outcome(task_id, reward)
            return
        energy = self.energy_j.pop(task_id, None)
        if energy is None:
            if len(self.latency_parts) > PENDING_LIMIT:
                self.latency_parts.clear()
            self.latency_parts[task_id] = reward
        else:
            self._outcome(task_id, reward - self.energy_penalty(energy))

    def _outcome(self, task_id: str, reward: float) -> None:
        pending = self.awaiting.pop(task_id, None)
        if pending is None:
            if len(self.early) > PENDING_LIMIT:
                self.early.clear()  # outcomes of decisions made while not training
            self.early[task_id] = reward
            return
        state, action, next_state, done = pending
        self.store((state, action, reward, next_state, done))
