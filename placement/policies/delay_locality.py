"""Network-sensitive delay scheduling: accept a little more wait for a node (or rack) that has
the task's model loaded, with the delay timers tuned online.

Paper: Aakash Sharma, Vivek M. Bhasi, Sonali Singh, George Kesidis, Mahmut T. Kandemir and
Chita R. Das, "GPU Cluster Scheduling for Network-Sensitive Deep Learning" (arXiv:2401.16492,
2024): delay scheduling over locality levels for consolidation, network-sensitive preemption,
and an auto-tuner of the delay timers.

What it decides, per task:

- the best node (minimum estimated completion time, exactly as ``mct``) at three locality
  levels: *same node* (the app's model is warm there), *same link* (a node of the same
  ``rack=<name>`` label has it warm) and *anywhere*;
- the most local level whose wait penalty (its estimate minus the anywhere-best's) is below that
  level's delay timer; otherwise the anywhere-best;
- the timers, online: each completion says whether waiting for locality paid off.

Adapted for streaming tasks and stages:

- The paper delays a distributed training job *in time* until GPUs at a closer level free up.
  A streaming record is placed on arrival (the router holds no queue), so the delay becomes
  *accepted extra estimated completion time*: the timers are seconds of penalty, and the wait
  happens in the chosen node's queue.
- What a task needs close by is its application's model, not its gradient partners: locality is
  the model warm-set of ``simulator.locality`` (a cold node loads the model from a rack peer or
  the model store first). Observations carry no warmth, so the policy keeps its own estimate
  from its decisions and ``observe_completion`` (same ``warm_ttl_s`` meaning: warm while a task
  of the app is at the node and ``warm_ttl_s`` after the last one left).
- Auto-tuner: the *surprise* ``latency - estimate`` is averaged (EWMA) per locality class of
  the chosen node (warm / rack peer / remote). Each completion gives a level a locality-gain
  sample: for a task that took the level over a different anywhere-best, that node's class
  average minus this task's surprise (how much sooner it finished than the alternative would
  have, penalty aside); for a refused local option, this task's surprise minus that option's
  class average. The timer rises by ``tune_step_s`` when the sample exceeds it (waiting would
  have won even at a penalty as large as the timer) and falls otherwise, so it tracks the median
  break-even penalty, within ``[0, timer_max_s]``. Our rule, not the paper's tuner: a router
  sees one latency per task, not the job-level measurements the paper tunes from.
- Not adopted: the sensitivity classifier and preemption (every app needs its model; a
  streaming task is short and is never preempted).
- Trade-off (as in the paper, consolidation is not free): the penalty is mct's estimate, which
  spreads a node's backlog over all its units, so piling one app on its warm nodes queues more
  than estimated. Where models go cold between tasks it loads far less and wins median latency
  and throughput; its p99 can be worse, and where every model stays warm anyway (saturated
  nodes, locality off) it only costs balance, and the tuner reacts only once completions
  come back.

Parameters (constructor settings): ``node_timer_s`` = 2.0 and ``rack_timer_s`` = 1.0 (the
paper's per-level delay timers, starting values in seconds of penalty; kept low because the
tuner raises them once it has seen what a cold load costs); ``warm_ttl_s`` = 60.0
(how long a model stays warm after its last task, as ``LocalityConfig``); ``tune_step_s`` = 0.5
(auto-tuner step; 0 turns it off); ``timer_max_s`` = 60.0 (upper bound of both timers);
``min_samples`` = 3 (completions a class needs before it is trusted); ``smoothing`` = 0.1 (EWMA
weight). With both timers 0 and the tuner off it decides exactly as ``mct``. Nothing is random:
``seed`` is accepted for the common constructor only; ties go to observation order (as mct).

Example::

    >>> from workload.model import ClusterSpec, NodeSpec, NodeState, Observation, Task
    >>> cluster = ClusterSpec((NodeSpec("tm_a", 4, 16), NodeSpec("tm_b", 4, 16)))
    >>> policy = DelayLocalityPolicy(cluster)
    >>> task = Task("t1", "video_synopsis", 1_000_000)
    >>> policy.decide(Observation(task, (NodeState("tm_a"), NodeState("tm_b")), 0.0)).node
    'tm_a'
    >>> busier = NodeState("tm_a", backlog_s=4.0)   # 1 s of queue per unit; tm_a has the model
    >>> decision = policy.decide(Observation(Task("t2", "video_synopsis", 1_000_000),
    ...                                      (busier, NodeState("tm_b")), 1.0))
    >>> decision.node, decision.reason.split(":")[1].split(",")[0].strip()
    ('tm_a', 'node-local tm_a')
"""

from __future__ import annotations

from dataclasses import dataclass

from placement.policies.base import EstimatingPolicy, first_and_second
from placement.policies.mct import parallel_units
from workload.estimates import CostModel
from workload.model import ClusterSpec, Decision, NodeSpec, Observation

__all__ = ["DelayLocalityPolicy", "rack_of", "LEVELS"]

#: Locality levels, most local first ("anywhere" has no timer).
LEVELS = ("node", "rack", "anywhere")
_CLASS = {"node": "warm", "rack": "rack peer", "anywhere": "remote"}


def rack_of(node: NodeSpec) -> str:
    """The node's ``rack=<name>`` label, else a rack of its own (as ``simulator.locality``;
    placement does not import the simulator)."""
    for label in node.labels:
        if label.startswith("rack=") and len(label) > 5:
            return label[5:]
    return f"node:{node.node_id}"


@dataclass
class _Pending:
    """What a decision expected, kept until its completion is observed."""

    arrival_s: float
    node: str
    app: str
    level: str                  # the level that won
    estimate_s: float
    cls: str                    # locality class of the chosen node (warm / rack peer / remote)
    waited_over: str | None     # class of the anywhere-best when a local level won over it
    refused: tuple              # ((level, class), ...) of the local options not taken


class DelayLocalityPolicy(EstimatingPolicy):
    """Scores: ``mct``'s estimated completion time per node (lowest is best); the reason names
    the level taken, its penalty and the timer it was held against."""

    name = "delay_locality"
    _PENDING_LIMIT = 100_000  # decisions awaiting feedback (a router without feedback: bounded)

    def __init__(self, cluster: ClusterSpec, costs: CostModel | None = None, seed: int = 0, *,
                 node_timer_s: float = 2.0, rack_timer_s: float = 1.0, warm_ttl_s: float = 60.0,
                 tune_step_s: float = 0.5, timer_max_s: float = 60.0, min_samples: int = 3,
                 smoothing: float = 0.1) -> None:
        numbers = {"node_timer_s": node_timer_s, "rack_timer_s": rack_timer_s,
                   "warm_ttl_s": warm_ttl_s, "tune_step_s": tune_step_s,
                   "timer_max_s": timer_max_s}
        for key, value in numbers.items():
            if not isinstance(value, (int, float)) or value != value or value < 0:
                raise ValueError(f"{key} must be a number >= 0, got {value!r}")
        if max(node_timer_s, rack_timer_s) > timer_max_s:
            raise ValueError(f"timers ({node_timer_s}, {rack_timer_s}) must not exceed "
                             f"timer_max_s ({timer_max_s})")
        if not isinstance(min_samples, int) or min_samples < 1:
            raise ValueError(f"min_samples must be an integer >= 1, got {min_samples!r}")
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing!r}")
        self.timers = {"node": float(node_timer_s), "rack": float(rack_timer_s)}
        self.warm_ttl_s, self.tune_step_s, self.timer_max_s = warm_ttl_s, tune_step_s, timer_max_s
        self.min_samples, self.smoothing = min_samples, smoothing
        # (node, app) -> [tasks sent there and not yet completed, last time one was sent/left]
        self._warm: dict[tuple[str, str], list] = {}
        self._pending: dict[str, _Pending] = {}
        self.surprise: dict[str, float] = {}   # class -> EWMA of latency - estimate (s)
        self._samples: dict[str, int] = {}
        self.level_counts = {level: 0 for level in LEVELS}
        super().__init__(cluster, costs, seed)

    def _cluster_changed(self) -> None:
        super()._cluster_changed()
        self._units = {n.node_id: parallel_units(n) for n in self.cluster.nodes}
        self._rack = {n.node_id: rack_of(n) for n in self.cluster.nodes}

    # -- the warm-set estimate ---------------------------------------------------------------
    def remember(self, node_id: str, app_id: str, now_s: float) -> None:
        """Count a task of ``app_id`` as sent to ``node_id`` at ``now_s`` (decide does this;
        public so a router restarting can replay its recent placements)."""
        entry = self._warm.setdefault((node_id, app_id), [0, now_s])
        entry[0] += 1
        entry[1] = max(entry[1], now_s)

    def is_warm(self, node_id: str, app_id: str, now_s: float) -> bool:
        entry = self._warm.get((node_id, app_id))
        return entry is not None and (entry[0] > 0 or now_s - entry[1] <= self.warm_ttl_s)

    # -- decision ------------------------------------------------------------------------------
    def decide(self, observation: Observation) -> Decision:
        ids, left_out = self.known_ids(observation)
        states = self.states(observation)
        task, units, now = observation.task, self._units, observation.now_s
        # mct's score, same arithmetic, so that timers of 0 reproduce mct bit for bit.
        ready = {nid: states[nid].backlog_s / units[nid] for nid in ids}
        scores = {nid: ready[nid] + self.task_ms(task, nid) * states[nid].speed_factor / 1000.0
                  for nid in ids}
        warm = [nid for nid in ids if self.is_warm(nid, task.app_id, now)]
        warm_racks = {self._rack[nid] for nid in warm}
        members = {"node": warm, "rack": [nid for nid in ids if self._rack[nid] in warm_racks]}

        def cls(nid: str) -> str:
            return "warm" if nid in warm else \
                "rack peer" if self._rack[nid] in warm_racks else "remote"

        best_any, _ = first_and_second(ids, scores.__getitem__)
        node, level, refused, why = best_any, "anywhere", [], ""
        for candidate_level in ("node", "rack"):
            if not members[candidate_level]:
                continue
            best, _ = first_and_second(members[candidate_level], scores.__getitem__)
            penalty = scores[best] - scores[best_any]
            timer = self.timers[candidate_level]
            if penalty < timer:  # strict: a timer of 0 never delays, as mct
                node, level = best, candidate_level
                why = (f"penalty {penalty:.2f} s < {candidate_level} timer {timer:.2f} s over "
                       f"anywhere-best {best_any} {scores[best_any]:.2f} s")
                break
            if all(best != nid for _, nid, _ in refused):  # one verdict per refused node
                refused.append((candidate_level, best, penalty))
        if level == "anywhere":
            notes = [f"refused {lv}-local {nid} (penalty {p:.2f} s >= timer "
                     f"{self.timers[lv]:.2f} s)" for lv, nid, p in refused]
            why = "; ".join(notes) if notes else f"{task.app_id} warm on no node"
        self.level_counts[level] += 1
        self.remember(node, task.app_id, now)
        self._track(task.task_id, _Pending(
            now, node, task.app_id, level, scores[node], cls(node),
            cls(best_any) if level != "anywhere" and node != best_any else None,
            tuple((lv, cls(nid)) for lv, nid, _ in refused if nid != node)))
        where = "anywhere" if level == "anywhere" else f"{level}-local"
        return Decision(node, f"delay scheduling: {where} {node}, completion "
                              f"{scores[node]:.2f} s ({cls(node)}), {why}{left_out}", scores)

    def _track(self, task_id: str, pending: _Pending) -> None:
        if len(self._pending) >= self._PENDING_LIMIT:
            self._pending.pop(next(iter(self._pending)))  # the oldest: its feedback is lost
        self._pending[task_id] = pending

    # -- feedback: warm-set upkeep and the timer auto-tuner ----------------------------------------
    def observe_completion(self, task_id: str, latency_s: float, node_id: str) -> None:
        """The task finished ``latency_s`` after it arrived: the model stays warm from then on,
        its class learns how far latency strays from the estimate, and the timers move."""
        pending = self._pending.get(task_id)
        if pending is None:
            return  # not decided by this policy (or dropped): nothing to learn from
        if pending.node != node_id:
            return  # another node claims it (a forged or confused report): it stays pending
        del self._pending[task_id]
        done_s = pending.arrival_s + latency_s
        entry = self._warm.get((pending.node, pending.app))
        if entry is not None:
            entry[0] = max(0, entry[0] - 1)
            entry[1] = max(entry[1], done_s)
        surprise = latency_s - pending.estimate_s  # how far this task strayed from its estimate
        # A locality gain sample: how much more the other class strays than this task did. The
        # timer tracks the median gain (a step up when a sample beats it, down otherwise), i.e.
        # the penalty at which waiting breaks even.
        if pending.waited_over is not None and self._trusted(pending.waited_over):
            self._step(pending.level, self.surprise[pending.waited_over] - surprise)
        for level, cls in pending.refused:
            if self._trusted(cls):
                self._step(level, surprise - self.surprise[cls])
        old = self.surprise.get(pending.cls)
        self.surprise[pending.cls] = surprise if old is None else \
            old + self.smoothing * (surprise - old)
        self._samples[pending.cls] = self._samples.get(pending.cls, 0) + 1

    def _trusted(self, cls: str) -> bool:
        """A class is compared against only after ``min_samples`` completions."""
        return self._samples.get(cls, 0) >= self.min_samples

    def _step(self, level: str, gain_s: float) -> None:
        change = self.tune_step_s if gain_s > self.timers[level] else -self.tune_step_s
        self.timers[level] = min(self.timer_max_s, max(0.0, self.timers[level] + change))
