"""Dual-agent RL, ordering agent: a learned choice of the order in which ready stages are placed.

Paper: "A Dual-Agent Scheduler for Distributed Deep Learning Jobs on Public Cloud via
Reinforcement Learning" (Xing, Mao, Yin, Pan, Zhang, Xiao, Long; KDD 2023).

What it decides: the order of the node's ready stages, by one of four rules (``oldest``: arrival
order; ``shortest`` / ``longest``: estimated time on the stage's best unit here; ``speedup``:
GPU-over-CPU speed-up, highest first), chosen per epoch by an epsilon-greedy bandit; then each
stage in that order goes to its earliest-finishing unit, exactly as MCT places (``mct_unit``).

Adapted for streaming tasks and stages, and why:

- The paper's ordering agent scores waiting DL jobs with a neural policy (squeeze-and-communicate
  over the queue) trained jointly with the placement agent by multi-agent RL. A node here sees a
  few ready stages per call and must answer in microseconds, so the agent learns which ordering
  *rule* works instead of a score per stage: a bandit over rules, numpy-free and bounded.
- Reward (what a node scheduler can observe): per epoch of ``epoch_calls`` calls, the reference
  work started (CPU-ms at speed 1 of the stages it assigned: a common currency, so a stage is
  not worth more for being on a slow unit) per second of the time between the epoch's first call
  and the call after its last (calls come when stages finish, so the gaps carry the true
  speeds and interference), times the mean measured co-run rate ``observe_corun`` reported in
  the epoch (capped at 1; 0 for a failed launch), so a rule that packs clashing stages loses.
- One instance may serve every node of a simulated cluster; the signal is then cluster-wide,
  which is still the throughput the rule achieves.
- Before any epoch ends it orders ``rules[0]`` (default ``oldest``: MCT's own order), so it
  works before learning; untried rules are each tried for one epoch, in ``rules`` order.

Settings (the paper's RL parameters, named here): ``rules`` (the arms; default all four),
``epoch_calls=40``, ``epsilon=0.2`` per epoch, ``epsilon_decay=0.9``, ``epsilon_floor=0.02``
(never above ``epsilon``), ``learning_rate=0.2`` (step of each rule's moving value),
``wait_for_busy=True`` and ``reserve_waiting=True`` (MCT's placement settings). Non-finite
co-run rates and times are refused (``refused``), never learned from; when time goes backwards
(a new run) the open epoch is dropped. Ties: arrival order, then unit order.

Example::

    >>> from workload.model import ComputingUnit, Stage
    >>> units = [ComputingUnit("cpu:0", "cpu"), ComputingUnit("gpu:0", "gpu", model="k80")]
    >>> ready = [Stage("t1", "face_recognition", "face_compare", 1_000_000),
    ...          Stage("t2", "face_recognition", "face_detection", 1_000_000, ready_at_s=0.1)]
    >>> out = DualAgentOrderScheduler(rules=("speedup",)).assign(ready, units, now_s=0.2)
    >>> [(a.stage.stage, a.unit_id) for a in out]
    [('face_detection', 'gpu:0'), ('face_compare', 'cpu:0')]
    >>> out[0].reason.split(";")[0]
    'dual-agent order: rule speedup (only rule)'
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from interference.schedulers._checks import BaseNodeScheduler, ready_order
from interference.schedulers.mct_unit import earliest_finish_placement
from workload.estimates import CostModel
from workload.model import Assignment, ComputingUnit, Stage

__all__ = ["DualAgentOrderScheduler", "RuleBandit", "ORDER_RULES"]

#: The arms of the ordering agent.
ORDER_RULES = ("oldest", "shortest", "longest", "speedup")


class RuleBandit:
    """Epsilon-greedy over named rules: untried rules first (in order), then the best moving
    value, or with probability epsilon a uniform draw from the seeded RNG. Ties: rule order."""

    def __init__(self, rules: Sequence[str], rng: random.Random, *, epsilon: float,
                 epsilon_decay: float, epsilon_floor: float, learning_rate: float) -> None:
        self.rules, self.rng = tuple(rules), rng
        self.epsilon0, self.epsilon_decay, self.epsilon_floor = epsilon, epsilon_decay, \
            epsilon_floor
        self.epsilon, self.learning_rate = epsilon, learning_rate
        self.values: dict[str, float | None] = dict.fromkeys(self.rules)
        self.counts: dict[str, int] = dict.fromkeys(self.rules, 0)
        self.updates = 0

    def update(self, rule: str, reward: float) -> bool:
        """Learn one epoch's reward; False (nothing learned) for a non-finite one."""
        if rule not in self.values or not math.isfinite(reward):
            return False
        old, n = self.values[rule], self.counts[rule]
        # plain average over the first samples, then a moving average (rewards drift with load)
        step = max(self.learning_rate, 1.0 / (n + 1))
        self.values[rule] = reward if old is None else old + step * (reward - old)
        self.counts[rule] = n + 1
        self.updates += 1
        self.epsilon = min(self.epsilon0, max(self.epsilon_floor,
                                              self.epsilon0 * self.epsilon_decay ** self.updates))
        return True

    def choose(self) -> tuple[str, str]:
        """(rule, why in words)."""
        if len(self.rules) == 1:
            return self.rules[0], "only rule"
        untried = [r for r in self.rules if self.values[r] is None]
        if untried:
            return untried[0], "trying each rule once"
        draw = self.rng.random()  # drawn only once every rule has a value: reproducible
        best = max(self.rules, key=lambda r: (self.values[r], -self.rules.index(r)))
        if draw < self.epsilon:
            rule = self.rules[self.rng.randrange(len(self.rules))]
            return rule, f"explore, draw {draw:.2f} < epsilon {self.epsilon:.2f}; best {best}"
        return best, f"best value {self.values[best]:.3g} work-s/s, epsilon {self.epsilon:.2f}"


class DualAgentOrderScheduler(BaseNodeScheduler):
    """A bandit-chosen ordering rule, then MCT placement of the stages in that order."""

    name = "dual_agent_order"

    def __init__(self, costs: CostModel | None = None, seed: int = 0, *,
                 rules: Sequence[str] = ORDER_RULES, epoch_calls: int = 40,
                 epsilon: float = 0.2, epsilon_decay: float = 0.9, epsilon_floor: float = 0.02,
                 learning_rate: float = 0.2, wait_for_busy: bool = True,
                 reserve_waiting: bool = True) -> None:
        super().__init__(costs, seed)
        rules = tuple(rules) if not isinstance(rules, str) else (rules,)
        if not rules or len(set(rules)) != len(rules) or set(rules) - set(ORDER_RULES):
            raise ValueError(f"rules must be distinct names from {ORDER_RULES}, got {rules}")
        if not isinstance(epoch_calls, int) or epoch_calls < 1:
            raise ValueError(f"epoch_calls must be an integer >= 1, got {epoch_calls!r}")
        for what, value, ok in (("epsilon", epsilon, 0.0 <= epsilon <= 1.0),
                                ("epsilon_decay", epsilon_decay, 0.0 < epsilon_decay <= 1.0),
                                ("epsilon_floor", epsilon_floor, 0.0 <= epsilon_floor <= 1.0),
                                ("learning_rate", learning_rate, 0.0 < learning_rate <= 1.0)):
            if not ok:  # NaN fails every comparison, so it lands here too
                raise ValueError(f"{what} must be in [0, 1] (decay and learning_rate above 0), "
                                 f"got {value!r}")
        self.epoch_calls = epoch_calls
        self.wait_for_busy, self.reserve_waiting = wait_for_busy, reserve_waiting
        self.bandit = RuleBandit(rules, random.Random(seed), epsilon=epsilon,
                                 epsilon_decay=epsilon_decay, epsilon_floor=epsilon_floor,
                                 learning_rate=learning_rate)
        self.rule, self.why = self.bandit.choose()
        self.refused = 0
        self._start: float | None = None   # time of the epoch's first call
        self._last = -math.inf             # time of the latest call
        self._calls = 0
        self._work_s = 0.0                 # reference work started in the epoch (s)
        self._corun_sum, self._corun_n = 0.0, 0
        self.last_waiting: dict[tuple[str, str], str] = {}

    # -- the signals -------------------------------------------------------------------------
    def observe_corun(self, stage: str, partner: str, gpu_model: str,
                      measured_rate: float) -> None:
        """A co-run stage finished at ``measured_rate`` of its alone speed (0: launch failed)."""
        try:
            rate = float(measured_rate)
        except (TypeError, ValueError, OverflowError):
            rate = math.nan
        if not (math.isfinite(rate) and rate >= 0.0):
            self.refused += 1
            return
        self._corun_sum += min(1.0, rate)
        self._corun_n += 1

    def _reset_epoch(self, now_s: float) -> None:
        self._start, self._calls, self._work_s = now_s, 0, 0.0
        self._corun_sum, self._corun_n = 0.0, 0

    def _tick(self, now_s: float) -> None:
        """Close the epoch when it is full and time has passed; then pick the next rule."""
        if not math.isfinite(now_s):
            self.refused += 1  # no clock, no rate: this call is not counted
            return
        if self._start is None or now_s < self._last:
            self._reset_epoch(now_s)  # first call, or a new run started: drop the open epoch
        elif self._calls >= self.epoch_calls and now_s > self._start:
            efficiency = self._corun_sum / self._corun_n if self._corun_n else 1.0
            reward = self._work_s / (now_s - self._start) * efficiency
            if not self.bandit.update(self.rule, reward):
                self.refused += 1
            self.rule, self.why = self.bandit.choose()
            self._reset_epoch(now_s)
        self._last = now_s

    # -- ordering ----------------------------------------------------------------------------
    def _best_ms(self, stage: Stage, units: Sequence[ComputingUnit]) -> float:
        times = [self.costs.unit_ms(stage.stage, stage.input_size, u) for u in units
                 if u.kind == "cpu" or stage.gpu_capable]
        times = [t for t in times if t is not None]
        return min(times) if times else self.costs.cpu_ms(stage.stage, stage.input_size)

    def _speedup(self, stage: Stage, units: Sequence[ComputingUnit]) -> float:
        cost = self.costs.stage(stage.stage)
        if not stage.gpu_capable or cost.gpu_speedup is None:
            return 0.0
        cpu_speed = max((u.speed for u in units if u.kind == "cpu"), default=1.0)
        gpus = [self.costs.gpu_ms(stage.stage, stage.input_size, m, speed)
                for m, speed in dict.fromkeys((u.model, u.speed) for u in units
                                              if u.kind == "gpu")]
        gpus = [t for t in gpus if t is not None]
        if not gpus:
            return cost.gpu_speedup / cpu_speed  # no GPU here: the calibrated reference
        best = min(gpus)
        return self.costs.cpu_ms(stage.stage, stage.input_size, cpu_speed) / best if best > 0 \
            else math.inf

    def order(self, rule: str, ready: Sequence[Stage],
              units: Sequence[ComputingUnit]) -> list[Stage]:
        """The ready stages in ``rule``'s order; ties keep arrival order (a stable sort)."""
        if rule not in ORDER_RULES:
            raise ValueError(f"unknown ordering rule {rule!r}; rules are {ORDER_RULES}")
        base = ready_order(ready)
        if rule == "oldest":
            return base
        if rule == "speedup":
            return sorted(base, key=lambda s: -self._speedup(s, units))
        sign = 1.0 if rule == "shortest" else -1.0
        return sorted(base, key=lambda s: sign * self._best_ms(s, units))

    def assign(self, ready: Sequence[Stage], units: Sequence[ComputingUnit],
               now_s: float) -> list[Assignment]:
        self._tick(now_s)
        rule, why = self.rule, self.why
        ordered = self.order(rule, ready, units)
        rank = {id(s): i for i, s in enumerate(ordered, 1)}

        def reason(stage: Stage, unit: ComputingUnit, start: float, finish: float,
                   candidates: int) -> str:
            return (f"dual-agent order: rule {rule} ({why}); #{rank[id(stage)]} of "
                    f"{len(ordered)} ready; MCT est. completion {finish:.3f}s of {candidates} "
                    f"units -> {unit.unit_id}")

        out, self.last_waiting = earliest_finish_placement(
            ordered, units, now_s, self.costs, wait_for_busy=self.wait_for_busy,
            reserve_waiting=self.reserve_waiting, reason=reason)
        if math.isfinite(now_s):
            self._calls += 1
            self._work_s += sum(self.costs.cpu_ms(a.stage.stage, a.stage.input_size)
                                for a in out) / 1000.0
        return out
