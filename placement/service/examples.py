"""Feedback to training examples: the first two steps of the service's online learner.

See :mod:`placement.service.learner` for what each NodeFeedback record becomes (node states in
a short per-node history, one contextual-bandit example per completed task timing) and the
approximations stated there. This module is that part, on the consumer thread's side: cheap,
bounded and hostile-input safe; the learner's thread pops the examples and trains.

Example::

    examples = FeedbackExamples(cluster_spec, MeasuredCosts(cluster_spec))
    examples.take(records)          # consumer thread
    examples.pop()                  # learner thread: a TrainingExample or None
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from placement.ldwp.features import is_live_costs
from placement.service.burst_check import DrainRates
from placement.service.drain_judge import JUDGES, DrainJudge
from placement.service.latency_bounds import LatencyBounds
from placement.speed import SPEED_FACTOR_LIMITS, ObservedSpeed, timing_sample
from workload.feedback import (DEFAULT_LINK_MBPS, PER_TASK_ARRAYS, feedback_age_s,
                               feedback_emitted_at_ms, node_state_from_feedback,
                               timing_latency)
from workload.limits import MAX_MODEL_VERSION
from workload.model import ClusterSpec, NodeSpec, NodeState, Task
from workload.refusals import bounded_refusals

__all__ = ["FeedbackExamples", "TrainingExample", "NodeHistory", "RATE_WINDOW",
           "RATE_MIN_SAMPLES", "MAX_PENDING", "MAX_KEPT_STAGE_BATCHES", "MAX_KEPT_TEXT",
           "MAX_NODE_ID_CHARS", "ABSENT_AFTER_S", "nodes_in_use"]

log = logging.getLogger(__name__)

RATE_WINDOW = 200       # service times kept per node for the measured service rate
RATE_MIN_SAMPLES = 20   # below this, the plan uses the spec's capacity for the node
#: Examples queued for the trainer at most (~1.25 KB each: ~25 MB). Intake does not wait for
#: training, so a stalled trainer or a flood of timings would otherwise grow it without
#: bound; beyond it the oldest example is dropped and counted (``examples_dropped``).
MAX_PENDING = 20_000
#: ``stage_batches`` rows kept of a node's latest report: what the executors publish at most
#: (``pyflink_jobs.feedback.MAX_STAGE_BATCHES``); one 8 MB report of 340k rows pinned ~129 MB.
MAX_KEPT_STAGE_BATCHES = 64
#: Longest text kept of a node's latest report (stage names, power_source, ...); executors cut
#: stage names at 200 characters.
MAX_KEPT_TEXT = 200
#: The most a router's per-task numbers may say (``routed_queue``, ``routed_backlog_ms``): a
#: million tasks queued at one node, a day of estimated work; beyond them a report is broken or
#: hostile, and its example is not learned (the speed factor's bound is the routers' own clip)
MAX_ROUTED_QUEUE = 1_000_000
MAX_ROUTED_BACKLOG_MS = 86_400_000.0
#: How far ahead of the service's clock a report's ``emitted_at_ms`` may be (hosts' clocks
#: differ); later stamps read as the epoch (NodeHistory.add)
MAX_CLOCK_SKEW_MS = 60_000
#: Longest node id learned from (the API's bound on node ids, ``app.MAX_NAME``).
MAX_NODE_ID_CHARS = 256
#: How long after the first report a cluster-spec node that has never reported is taken to be
#: absent from the cluster (e.g. ``tm_c`` of the default spec on a cluster of ``tm_a`` and
#: ``tm_b``): every executor of a running hooked job reports every feedback interval, idle or
#: not (half a second by default), so after this a silent node is not in the job, and an
#: observation that shows it idle would draw decisions and training examples to a node
#: nothing runs on.
ABSENT_AFTER_S = 30.0
#: Fields of a report not kept as the node's latest: the completed timings (queued as
#: examples) and the arrays aligned with them (``workload.feedback.PER_TASK_ARRAYS``).
_NOT_KEPT = frozenset(("completed", *PER_TASK_ARRAYS))


def _kept_record(record: Mapping) -> dict:
    """What NodeHistory keeps of a report: bounded, whatever the report's size (see
    :data:`MAX_KEPT_STAGE_BATCHES`, :data:`MAX_KEPT_TEXT`)."""
    kept = {}
    for key, value in record.items():
        if key in _NOT_KEPT:
            continue
        if key == "learning_refused":  # keys cut, counts checked (workload.refusals)
            kept[key] = bounded_refusals(value)
            continue
        if key == "stage_batches":
            rows = value[:MAX_KEPT_STAGE_BATCHES] if isinstance(value, list) else []
            value = [{k: _short(v) for k, v in row.items()} if isinstance(row, Mapping)
                     else None for row in rows]
        kept[key] = _short(value)
    return kept


def _short(value):
    """Text cut at MAX_KEPT_TEXT; a list or object (a field this module does not know) kept
    only when small. Numbers pass."""
    if isinstance(value, str):
        return value[:MAX_KEPT_TEXT]
    if isinstance(value, (list, dict)) and len(value) > MAX_KEPT_STAGE_BATCHES:
        return None
    return value


def _feedback_state(record: Mapping, spec: NodeSpec | None = None) -> NodeState:
    """The ``NodeState`` a NodeFeedback record describes, by the shared rule
    (:func:`workload.feedback.node_state_from_feedback`), with link rates as fractions of the
    node's links from ``spec`` (:data:`~workload.feedback.DEFAULT_LINK_MBPS` when unknown);
    age 0 (:class:`NodeHistory` ages it when asked).

    Example::

        _feedback_state({"node_id": "tm_a", "cpu_util": 2.0}).cpu_util   # 1.0
    """
    if spec is None:
        return node_state_from_feedback(record, DEFAULT_LINK_MBPS, DEFAULT_LINK_MBPS)
    return node_state_from_feedback(record, spec.uplink_mbps, spec.downlink_mbps)


class NodeHistory:
    """The last ``size`` states of each node, by emission time, to answer "what did node X
    report as of time t" (``state_at``) and "what is its newest report" (``latest``). Of the
    newest report it keeps a bounded copy (:func:`_kept_record`): no completed timings or
    per-task arrays, at most MAX_KEPT_STAGE_BATCHES stage rows, text cut."""

    def __init__(self, size: int = 512):
        self.size = size
        self._times: dict[str, list[int]] = {}
        self._states: dict[str, list[NodeState]] = {}
        self._records: dict[str, dict] = {}
        self._record_at: dict[str, int] = {}  # emission time of each node's newest record

    def add(self, record: Mapping, state: NodeState, now_ms: int | None = None) -> None:
        # An unusable emission time reads as the epoch (workload.feedback): oldest, stalest.
        # So does one from the future beyond clock skew: kept as the newest, one forged report
        # stamped 2^63 - 1 ms pinned the node's view (queue, utilisation, age 0) for good.
        node, at = record["node_id"], _plausible_emission_ms(record, now_ms)
        times = self._times.setdefault(node, [])
        states = self._states.setdefault(node, [])
        i = bisect.bisect_right(times, at)  # usually the end: reports arrive in order
        times.insert(i, at)
        states.insert(i, state)
        if len(times) > self.size:
            del times[0], states[0]
        newest_at = self._record_at.get(node)
        if newest_at is None or at >= newest_at:
            self._records[node] = _kept_record(record)
            self._record_at[node] = at

    def nodes(self) -> list[str]:
        return list(self._times)

    def state_at(self, node: str, at_ms: int) -> NodeState:
        """Newest state emitted at or before ``at_ms`` (with its age then); a zero state when
        the node had not reported yet (what a router saw then too)."""
        times = self._times.get(node)
        if times:
            i = bisect.bisect_right(times, at_ms) - 1
            if i >= 0:
                state = self._states[node][i]
                return _with_age(state, feedback_age_s(times[i], at_ms))
        return NodeState(node)

    def latest(self, node: str, now_ms: int | None = None) -> NodeState:
        times = self._times.get(node)
        if not times:
            return NodeState(node)
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        return _with_age(self._states[node][-1], feedback_age_s(times[-1], now_ms))

    def latest_record(self, node: str) -> dict | None:
        """The newest NodeFeedback of ``node`` without its completed list and per-task
        arrays, bounded (see the class docstring)."""
        record = self._records.get(node)
        return dict(record) if record else None


def _plausible_emission_ms(record: Mapping, now_ms: int | None = None) -> int:
    """The report's emission time as :class:`NodeHistory` reads it: the epoch when unusable or
    beyond MAX_CLOCK_SKEW_MS ahead of the service's clock."""
    at = feedback_emitted_at_ms(record)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return 0 if at > now_ms + MAX_CLOCK_SKEW_MS else at


def _with_age(state: NodeState, age_s: float) -> NodeState:
    return dataclasses.replace(state, age_s=max(0.0, age_s))


@dataclass(frozen=True)
class TrainingExample:
    """One completed task, ready to train on: the context and the outcome."""

    task: Task
    node: str
    latency_ms: float
    decided_at_ms: int
    states: tuple[NodeState, ...]
    estimates_s: dict | None = None   # per node, the learned cost model's before this timing
    decided_by_version: int = -1      # the service's model version the router decided with


def _routed_context(queues, backlogs, speeds, i: int) -> dict | None:
    """What the router saw of the chosen node when it decided the ``i``-th timing's task, as
    NodeState fields ({} when the report does not say); None when it says something no router
    sends: a queue over MAX_ROUTED_QUEUE, a backlog over MAX_ROUTED_BACKLOG_MS, a speed factor
    outside the routers' own clip (``ObservedSpeed``'s limits), or a non-number. One report's
    ``routed_backlog_ms`` of 1e308 was learned before 2026-12-05 (it changed 7 of 200 later
    decisions of the published model)."""
    if i >= len(queues) or not _real(queues[i]) or queues[i] < 0:
        return {}
    if queues[i] > MAX_ROUTED_QUEUE:
        return None
    chosen = {"queue_depth": int(queues[i])}
    if i < len(backlogs) and _real(backlogs[i]) and backlogs[i] >= 0:
        if backlogs[i] > MAX_ROUTED_BACKLOG_MS:
            return None
        chosen["backlog_s"] = float(backlogs[i]) / 1000.0
    elif i < len(backlogs) and not _real(backlogs[i]):
        return None
    if i < len(speeds) and _real(speeds[i]) and speeds[i] > 0:
        low, high = SPEED_FACTOR_LIMITS
        if not low <= speeds[i] <= high:
            return None
        chosen["speed_factor"] = float(speeds[i])
    elif i < len(speeds) and not _real(speeds[i]):
        return None
    return chosen


def _routed_version(versions, i: int) -> int:
    """The model version the ``i``-th timing's router decided with (``routed_model_version``):
    an int in [0, 2**53], else -1 (not said, or nothing a service publishes). A wrong number
    only moves the task between the version trial's windows
    (:mod:`placement.service.version_trial`); it teaches nothing else."""
    value = versions[i] if i < len(versions) else -1
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and \
        0 <= value <= MAX_MODEL_VERSION else -1


def _real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)


def nodes_in_use(known: list[str], spec_ids, reported: list[str], waited: bool) -> list[str]:
    """The nodes that observations (training examples, decisions, the burst check) are over,
    of the ``known`` ones in order. Before any report: all of them (the spec's). Then the
    nodes that ``reported``, as soon as none of the spec's (``spec_ids``) is among them (the
    service was started with another cluster's spec), else once the service ``waited``
    ``absent_after_s`` since the first report (a spec node still silent is not in this
    cluster: the default spec's ``tm_c`` beside ``tm_a`` and ``tm_b``); until then all.

    >>> nodes_in_use(["a", "b", "c"], {"a", "b", "c"}, ["a", "b"], waited=True)
    ['a', 'b']
    """
    if not reported:
        return list(known)
    if waited or not any(n in spec_ids for n in reported):
        heard = set(reported)
        return [n for n in known if n in heard]
    return list(known)


class FeedbackExamples:
    """Steps 1 and 2 of :mod:`placement.service.learner`: NodeFeedback records in, node
    histories and queued :class:`TrainingExample` out. Thread-safe: ``take`` runs on the
    consumer thread, ``pop`` and the views on others; ``wake`` is set when examples arrive.

    ``costs`` is the learner's cost model (a MeasuredCosts is taught by every timing);
    ``max_unknown_nodes``, ``max_latency_s`` and ``max_task_size`` bound what hostile feedback
    can make it learn from. ``judge``: what an example's outcome is, "drain" (default: the
    time its node took to work off what it had when the task was sent, plus the task,
    :mod:`placement.service.drain_judge`; examples wait for it) or "latency" (the task's own).

    Example::

        examples = FeedbackExamples(cluster_spec, MeasuredCosts(cluster_spec))
        examples.take(feedback_records)      # how many timings were queued
        example = examples.pop()             # the oldest, or None
    """

    def __init__(self, cluster: ClusterSpec, costs, metrics=None, history_per_node: int = 512,
                 max_unknown_nodes: int = 64, max_latency_s: float = 3600.0,
                 max_task_size: int = 10**11, max_pending: int = MAX_PENDING,
                 judge: str = "drain", absent_after_s: float = ABSENT_AFTER_S,
                 clock=time.monotonic):
        if judge not in JUDGES:
            raise ValueError(f"judge must be one of {JUDGES}, got {judge!r}")
        self.cluster = cluster
        self.specs = {n.node_id: n for n in cluster.nodes}
        self.costs = costs
        self.metrics = metrics
        self.max_unknown_nodes = max_unknown_nodes
        # a timing beyond these is implausible (a clock jump, a hostile record): not learned
        self.max_latency_ms, self.max_task_size = 1000.0 * max_latency_s, max_task_size
        self.timings_rejected = 0   # timings skipped: fields missing, not finite or negative
        self.nodes_ignored = 0      # records skipped: beyond max_unknown_nodes
        self.records_taken = 0
        self.max_pending = max_pending
        self.examples_dropped = 0   # oldest queued examples dropped: over max_pending
        self.history = NodeHistory(history_per_node)
        self._node_order: list[str] = list(cluster.node_ids)
        self._pending: deque[TrainingExample] = deque()
        self._service_s: dict[str, deque] = {}
        # the same measured speeds the routers keep (same timings, same rule), for the nodes
        # whose decision-time numbers the feedback does not carry; with a MeasuredCosts it
        # feeds that model and every factor is 1 (the learned estimates hold the speeds)
        self.speeds = ObservedSpeed(cluster, costs)
        self.drain = DrainRates()             # tasks/s while it had work (burst_check)
        # what one latency may teach: within 10x of its node and type's recent median
        self.latency_bounds = LatencyBounds()
        self.judge = DrainJudge(max_ms=self.max_latency_ms) if judge == "drain" else None
        # and what one drain time may teach, by the same rule (a forged finish far in the past
        # makes its own task's drain an hour)
        self.drain_bounds = LatencyBounds()
        self._lock = threading.Lock()        # guards history, pending queue, rates
        self.wake = threading.Event()
        # on the service's own clock, not the reports' stamps (nodes_in_use)
        self.absent_after_s, self._clock = absent_after_s, clock
        self._first_report_s: float | None = None

    def take(self, records: Iterable[Mapping]) -> int:
        """Record node states and queue every completed task of these NodeFeedback records
        (already de-duplicated) for training; returns how many task records were accepted
        (queued now, or waiting for their drain time: ``judge``)."""
        queued = 0
        with self._lock:
            records = [r for r in records if self._accept_node(r.get("node_id"))]
            if records and self._first_report_s is None:
                self._first_report_s = self._clock()
            reported = [_feedback_state(r, self.specs.get(r["node_id"])) for r in records]
            for record, state in zip(records, reported):
                self.history.add(record, state)
            for record, state in zip(records, reported):
                node = record["node_id"]
                # no task of a report finished after the report was sent: the drain judge's
                # clock for this node never runs past it (one forged finish a day ahead would
                # otherwise judge every later task of the node a day long)
                sent_ms = _plausible_emission_ms(record)
                queues = record.get("routed_queue") or []
                backlogs = record.get("routed_backlog_ms") or []
                speeds = record.get("routed_speed_factor") or []
                versions = record.get("routed_model_version") or []
                for i, timing in enumerate(record.get("completed") or ()):
                    sample, fields_ = timing_sample(timing), timing_latency(timing)
                    if sample is None or fields_ is None or fields_[1] > self.max_latency_ms \
                            or sample[1] > self.max_task_size:
                        self.reject_timing()
                        continue
                    task_id, latency, finished = fields_
                    # The router's own numbers for the chosen node when it decided: the queue,
                    # backlog and speed its observation showed (the executor's feedback only
                    # knows the few tasks inside the executor, not those buffered on the way).
                    chosen = _routed_context(queues, backlogs, speeds, i)
                    if chosen is None:   # numbers no router sends: the example is not learned
                        self.reject_timing()
                        continue
                    decided = int(finished - latency)
                    states = tuple(self._state_at(n, decided) for n in self._nodes_in_use())
                    if chosen:
                        states = tuple(dataclasses.replace(st, **chosen)
                                       if st.node_id == node else st for st in states)
                    task = Task(task_id, sample[0], sample[1])
                    estimates = None
                    if is_live_costs(self.costs):  # before this timing teaches the model
                        estimates = self.costs.estimates_s(
                            [n for n in self._node_order if n in self.specs], task.app_id,
                            task.input_size)
                    work_s = self._work_s(node, task)   # before this timing teaches it
                    self.speeds.observe(node, *sample)
                    self.drain.add_task(node, decided, finished)   # the routers' view
                    learned_ms = self.latency_bounds.bound(node, task.app_id, latency)
                    example = TrainingExample(task, node, learned_ms, decided, states,
                                              estimates, _routed_version(versions, i))
                    if self.judge is None:
                        self._queue(example)
                    else:   # judged by drain time: waits until its node has worked it off
                        self._queue_judged(self.judge.add(example, min(finished, sent_ms),
                                                          work_s, chosen.get("backlog_s")))
                    rates = self._service_s.setdefault(node, deque(maxlen=RATE_WINDOW))
                    rates.append(max(1e-3, float(timing["service_ms"]) / 1000.0))
                    queued += 1
                if self.judge is not None and state.queue_depth == 0:
                    self._queue_judged(self.judge.idle(node))   # it worked everything off
                if self.metrics is not None:  # the bounded count the history keeps
                    self.metrics.queue_depth.labels(node=node).set(state.queue_depth)
            self.records_taken += queued
        if queued:
            self.wake.set()
        return queued

    def _queue(self, example: TrainingExample) -> None:
        """Queue one example for the trainer (the oldest dropped when full). Lock held."""
        if len(self._pending) >= self.max_pending:
            self._pending.popleft()
            self._drop_example()
        self._pending.append(example)

    def _queue_judged(self, judged: list[TrainingExample]) -> None:
        """Queue examples the drain judge settled, each drain time bounded by its (node, task
        type)'s recent ones (``drain_bounds``). Lock held."""
        for example in judged:
            self._queue(dataclasses.replace(example, latency_ms=self.drain_bounds.bound(
                example.node, example.task.app_id, example.latency_ms)))

    def _work_s(self, node: str, task: Task) -> float | None:
        """The task's estimated work on ``node`` as a router counts it in its backlog
        (``pyflink_jobs.router``: estimate times measured speed); None when unknown."""
        if self.judge is None or node not in self.specs:
            return None
        work = self.speeds.estimate_s(node, task.app_id, task.input_size) * \
            self.speeds.factor(node)
        return work if math.isfinite(work) and work >= 0 else None

    def reject_timing(self) -> None:
        self.timings_rejected += 1
        if self.timings_rejected == 1 or self.timings_rejected % 1000 == 0:
            # logged, not per record: hostile feedback must not flood the log either
            log.warning("feedback timings refused so far: %d (missing, non-finite or "
                        "implausible fields; counted in learning_rejections{kind=\"timing\"})",
                        self.timings_rejected)
        if self.metrics is not None:
            self.metrics.learning_rejections.labels(kind="timing").inc()

    def _drop_example(self) -> None:
        """Count one queued example dropped (the queue is full). Called with the lock held."""
        self.examples_dropped += 1
        if self.examples_dropped == 1 or self.examples_dropped % 10_000 == 0:
            log.warning("training queue full (%d examples): dropped the oldest, %d so far "
                        "(counted in learning_rejections{kind=\"queue_full\"})",
                        self.max_pending, self.examples_dropped)
        if self.metrics is not None:
            self.metrics.learning_rejections.labels(kind="queue_full").inc()

    def _nodes_in_use(self) -> list[str]:
        """:func:`nodes_in_use` now. Called with the lock held."""
        waited = self._first_report_s is not None and \
            self._clock() - self._first_report_s >= self.absent_after_s
        return nodes_in_use(self._node_order, self.specs, self.history.nodes(), waited)

    def _accept_node(self, node) -> bool:
        """Whether records of ``node`` are learned from (adds a new node outside the spec
        while fewer than ``max_unknown_nodes`` are known). Called with the lock held."""
        if not isinstance(node, str) or not 0 < len(node) <= MAX_NODE_ID_CHARS:
            return False
        if node in self.specs or node in self._node_order:
            return True
        if len(self._node_order) - len(self.specs) >= self.max_unknown_nodes:
            if not self.nodes_ignored:  # once: hostile feedback must not flood the log either
                log.warning("feedback from node %r ignored: already %d nodes outside the "
                            "cluster spec (counting the rest in nodes_ignored)", node[:80],
                            self.max_unknown_nodes)
            self.nodes_ignored += 1
            return False
        self._node_order.append(node)  # a node the spec does not know: learn anyway
        return True

    def _state_at(self, node: str, at_ms: int) -> NodeState:
        """Node ``node`` as of ``at_ms``: its newest report then, with its measured speed.

        Tried and reverted (2026-12-01): filling the in-flight count and backlog of the nodes
        a task was NOT sent to from the routers' newest earlier stamps on them. In the real-engine
        benchmark the model trained that way sent 65% of a backlog to the slow tm_c (33.5
        tasks/s against 67-71 without it), so those nodes keep their reports' numbers."""
        return dataclasses.replace(self.history.state_at(node, at_ms),
                                   speed_factor=self.speeds.factor(node))

    def pop(self) -> TrainingExample | None:
        """The oldest queued example, or None."""
        with self._lock:
            return self._pending.popleft() if self._pending else None

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    # -- views for the API -------------------------------------------------------------------
    def node_ids(self) -> list[str]:
        with self._lock:
            return self._nodes_in_use()

    def node_states(self, now_ms: int | None = None) -> list[NodeState]:
        """Every known node's newest state (a zero state for nodes that never reported), with
        its measured speed factor (what the model was trained with)."""
        with self._lock:
            return [dataclasses.replace(self.history.latest(n, now_ms),
                                        speed_factor=self.speeds.factor(n))
                    for n in self._nodes_in_use()]

    def latest_feedback(self) -> dict[str, dict]:
        """node -> its newest NodeFeedback (without the completed list)."""
        with self._lock:
            return {n: r for n in self.history.nodes()
                    if (r := self.history.latest_record(n)) is not None}

    def drain_rates(self) -> dict[str, float]:
        """node -> tasks finished per second while it had work
        (:class:`placement.service.burst_check.DrainRates`)."""
        with self._lock:
            return self.drain.rates()

    def measured_rates(self) -> dict[str, float]:
        """node -> measured service rate in tasks/s: its parallel units (cores + GPUs) over the
        mean service time of its last tasks; only nodes with enough samples. Approximate: it
        mixes the applications and sizes the node happened to get."""
        with self._lock:
            rates = {}
            for node, times in self._service_s.items():
                if len(times) >= RATE_MIN_SAMPLES:
                    spec = self.specs.get(node)
                    units = spec.cpu_cores + len(spec.gpus) if spec else 1
                    rates[node] = units * len(times) / sum(times)
            return rates
