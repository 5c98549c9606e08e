"""The record router's brain, without Flink: node view, in-flight counts, policy, model refresh.

The Flink operator (:class:`pyflink_jobs.hook.RouterFunction`) is a thin shell around
:class:`Router`, so everything here is plain Python and unit-tested without a JVM.

Per task, :meth:`Router.decide` builds the paper's observation from

- the latest NodeFeedback of every node (utilisations; stale by the feedback interval),
  turned into numbers by :func:`workload.feedback.node_state_from_feedback`, the rule the
  placement service's learner uses too, and
- the router's OWN count of tasks it sent to each node and has not yet seen completed in the
  feedback (exact, so a burst of records cannot all herd onto the node that looked idle in the
  last report), and the estimated seconds of work they hold (``backlog_s``),
- each node's measured speed: how much longer than the cost model's estimate its tasks really
  take (:class:`placement.speed.ObservedSpeed`, from the timings in the feedback),

drops nodes whose queue is full (``instances x capacity`` tasks in flight), and asks the policy:
a local copy of the current LDWP model evaluated with numpy (:class:`NumpyLDWPPolicy`), or any
rule of ``placement.policies``. A background thread polls the placement service for new model
versions and swaps them in; when the service is unreachable the router keeps the last model, and
with no model at all it uses the fallback rule (least-loaded), so routing never stops.

With ``RouterSettings.tenant_quotas`` set, the router also counts each tenant's tasks in flight
and demotes (lowers the priority of) a task whose tenant is over its fair share; the rule lives
in :mod:`pyflink_jobs.tenant_quotas`, the router only feeds it (routed, completed, expired) and
forwards the demoted priority (:meth:`Router.route_task_event`). Without it nothing changes.

Example::

    >>> from pyflink_jobs.router import Router, RouterSettings, RouterNode
    >>> router = Router(RouterSettings(nodes=[RouterNode("tm_a", cpu_cores=2),
    ...                                       RouterNode("tm_b", cpu_cores=1)],
    ...                                policy="least_outstanding"))
    >>> router.decide_event({"task_id": "t1", "app_id": "video_synopsis", "input_size": 4096}).node
    'tm_a'
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field

from placement.ldwp.compiled import decision_path
from placement.measured_costs import MeasuredCosts
from placement.service.interleaved_trial import candidate_trial
from placement.speed import ObservedSpeed, timing_sample
from pyflink_jobs.decision_hold import DecisionHold, checked_hold_in_flight, hold_limits
from pyflink_jobs.decision_timing import DecisionTimer
from pyflink_jobs.in_flight import InFlightLedger
from pyflink_jobs.keep_rule import MAX_KEPT_LINES, KeepRule
from pyflink_jobs.model_trial import ServedModels, plausible_version
from pyflink_jobs.routed import DecisionContext
from pyflink_jobs.task_event_routing import TaskEventRouting
from pyflink_jobs.tenant_quotas import QuotaSettings, QuotaVerdict, TenantQuotas
from workload.feedback import feedback_age_s, feedback_emitted_at_ms, node_state_from_feedback
from workload.limits import MAX_MODEL_VERSION, short_repr, wait_seconds
from workload.model import (DEFAULT_GPU_MODEL, ClusterSpec, Decision, NodeSpec, NodeState,
                            Observation, Policy, Task, offered_nodes, taskmanager_node)

__all__ = ["RouterNode", "RouterSettings", "Router", "ModelRefresher", "MAX_KEPT_LINES"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RouterNode:
    """A TaskManager the router may send tasks to, with what the cost model needs of it."""

    node_id: str
    cpu_cores: int = 1
    work_multiplier: float = 1.0
    instances: int = 1            # executor instances the plan gives it
    gpus: int = 0
    link_mbps: float = 1000.0     # to express feedback byte rates as link utilisation: the
    #                               downlink (and the uplink unless uplink_mbps says otherwise)
    uplink_mbps: float | None = None
    memory_gb: float = 16.0       # host memory the cost model assumes (the spec's heap + managed)
    gpu_model: str = DEFAULT_GPU_MODEL   # what the cost model assumes each of ``gpus`` is

    def __post_init__(self) -> None:
        # checked where the node is made (the job's submission), not in the router's open() on
        # a TaskManager, where a bad number failed the job again at every restart
        from workload.estimates import check_gpu_model
        try:
            if self.gpus:   # a node without GPUs never reads its gpu_model
                check_gpu_model(self.gpu_model)
            self.spec()
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"RouterNode {short_repr(self.node_id)}: {exc}") from None

    def spec(self) -> NodeSpec:
        """The cost model's view of this node, by the placement service's rule
        (:func:`workload.model.taskmanager_node`: cores + GPUs as units, GPU stage times), so
        a model the service trained reads the same features here; its slots are the executor
        instances the plan gives it."""
        return taskmanager_node(self.node_id, max(1, int(self.cpu_cores)), gpus=self.gpus,
                                memory_gb=self.memory_gb, work_multiplier=self.work_multiplier,
                                slots=max(1, self.instances), gpu_model=self.gpu_model,
                                uplink_mbps=self.uplink_mbps or self.link_mbps,
                                downlink_mbps=self.link_mbps)


@dataclass
class RouterSettings:
    """Everything the router needs; the hook fills it from the plan and the cluster spec."""

    nodes: list[RouterNode] = field(default_factory=list)
    policy: str = "ldwp"                 # "ldwp" or a placement.policies name
    fallback: str = "least_loaded"       # used while no LDWP model is available
    initial_model: bytes | None = None   # model file bytes to start from (else: the service's)
    service_url: str = ""                # "" = no service (fixed policy or initial model only)
    service_token: str = ""
    refresh_interval_s: float = 2.0      # how often to ask the service for a new model version
    executor_capacity: int = 16          # async capacity of one executor instance
    routers: int = 1                     # parallel router instances: each may fill 1/routers
    #                                      of every executor's capacity (its own in-flight view)
    in_flight_timeout_s: float = 300.0   # forget a sent task never reported complete (lost
    #                                      feedback) after this long, so counts cannot drift up
    latency_samples: int = 20_000        # decision latencies kept for p50/p99
    tenant_quotas: QuotaSettings | None = None   # None: no quotas (pyflink_jobs.tenant_quotas)
    # A router that runs on a node itself (routing "colocated") keeps a task there without
    # asking the policy when the task's measured work there is below this: moving a record to
    # another TaskManager costs about one more PyFlink crossing, ~0.1-0.3 ms of CPU on this
    # project's machine (benchmarks/hook_profile.py), more than such a task's work. 0 = never.
    keep_local_below_ms: float = 0.25
    # Decide late (pyflink_jobs.decision_hold): while every node holds this many times its
    # capacity share in flight, wait for a completion before deciding (at most hold_max_s a
    # record); 0 = decide every record as it comes. Needs completions reported on the
    # feedback tail's thread (the hook's router_feedback "topic").
    hold_in_flight: float = 0.0
    hold_max_s: float = 1.0

    def __post_init__(self) -> None:
        ids = [n.node_id for n in self.nodes]
        if not ids:
            raise ValueError("the router needs at least one node")
        if len(set(ids)) != len(ids):
            raise ValueError(f"node ids must be unique, got {ids}")
        if isinstance(self.routers, bool) or not isinstance(self.routers, int) or self.routers < 1:
            raise ValueError(f"routers must be an int >= 1, got {self.routers!r}")
        if not 0.0 <= self.keep_local_below_ms <= 1000.0:  # NaN fails too
            raise ValueError(f"keep_local_below_ms must be in [0, 1000], got "
                             f"{self.keep_local_below_ms!r}")
        self.hold_in_flight = checked_hold_in_flight(self.hold_in_flight)

    def capacity_share(self, node: RouterNode) -> int:
        """The in-flight records one router instance may hold on ``node``: its share of the
        node's executor capacity (at least one, so every router can reach every node)."""
        return max(1, -(-node.instances * self.executor_capacity // self.routers))

    def hold_limits(self) -> dict[str, int]:
        """Per node, the in-flight count at which a router deciding late has no room there
        (:func:`pyflink_jobs.decision_hold.hold_limits` of the capacity shares); only with
        ``hold_in_flight`` above 0."""
        return hold_limits({n.node_id: self.capacity_share(n) for n in self.nodes},
                           self.hold_in_flight)


class Router(ServedModels, TaskEventRouting):
    """Decides a node per task; see the module docstring."""

    def __init__(self, settings: RouterSettings, clock=time.time):
        from placement.policies import make_policy
        self.settings = settings
        self.clock = clock
        self.node_ids = tuple(n.node_id for n in settings.nodes)
        self._nodes = {n.node_id: n for n in settings.nodes}
        self.cluster = ClusterSpec(tuple(n.spec() for n in settings.nodes), name="flink")
        self._states: dict[str, NodeState] = {n: NodeState(n) for n in self.node_ids}
        self._feedback_at_ms: dict[str, int] = {}  # emission time of each node's last report
        self.quotas = (TenantQuotas.from_settings(settings.tenant_quotas)
                       if settings.tenant_quotas is not None else None)
        # what each node still holds from us (pyflink_jobs.in_flight)
        self.ledger = InFlightLedger(self.node_ids, settings.in_flight_timeout_s, self.quotas)
        self._capacity = {n.node_id: settings.capacity_share(n) for n in settings.nodes}
        # Work times learned per (task type, node) from the feedback, with the hand-made cost
        # model of the built-in apps as an optional prior: users' operators have none.
        from workload.estimates import CostModel
        self.costs = MeasuredCosts(self.cluster, prior=CostModel(colocation=None))
        self.speeds = ObservedSpeed(self.cluster, self.costs)
        # a Condition: a record held for room (decision_hold) waits on it for a completion
        self._lock = threading.Condition(threading.Lock())
        self.hold = (DecisionHold(settings.hold_limits(),
                                  settings.hold_max_s) if settings.hold_in_flight else None)
        self.fallback: Policy = make_policy(settings.fallback, self.cluster, costs=self.costs)
        self.model_policy = None
        self.model_version: int | None = None
        self.candidate = None          # a version on trial beside the model (ServedModels)
        self.candidate_decisions = 0
        self.fixed_policy: Policy | None = None
        if settings.policy != "ldwp":
            self.fixed_policy = make_policy(settings.policy, self.cluster, costs=self.costs)
        elif settings.initial_model:
            self.install_model(settings.initial_model)
        self.routed = {n: 0 for n in self.node_ids}
        # routing "colocated": what stays on the router's own node unasked (keep_local)
        self.keeping = KeepRule(settings, self.costs, self.routed, self.quotas)
        self.fallback_decisions = 0
        self.full_skips = 0
        self.feedback_records = 0
        self.seeded_cost_fits = 0   # fits adopted from the service at start (seed_costs)
        # wall time per phase and sampled thread CPU time (pyflink_jobs.decision_timing)
        self.timing = DecisionTimer(settings.latency_samples)

    # -- model ------------------------------------------------------------------------------
    def seed_costs(self, snapshot) -> int:
        """Start from the placement service's measured work times (``GET /costs``,
        :mod:`placement.cost_snapshot`): adopts its fits for this router's nodes and the pairs
        it has not measured itself; refusals are logged. Returns the fits adopted."""
        from placement.cost_snapshot import seed_costs
        with self._lock:
            adopted, refused = seed_costs(self.costs, snapshot, self.node_ids)
            self.seeded_cost_fits += adopted
        if refused:
            log.warning("cost fits from the placement service refused: %s", "; ".join(refused))
        return adopted

    @property
    def policy(self) -> Policy:
        return self.fixed_policy or self.model_policy or self.fallback

    # -- node view --------------------------------------------------------------------------
    def on_feedback(self, feedback: dict) -> None:
        """A NodeFeedback record (decoded): refresh the node's numbers, retire completed tasks.
        Duplicates are harmless: a task id already retired is ignored. A report retires only
        tasks in flight on the reporting node: one naming another node's task (a forged or
        confused report) leaves that task counted where it is, and its timing teaches nothing.
        The other timings teach the reporting node's work times whoever routed the task (other
        routers' tasks too: the robust fits of ``placement.measured_costs`` bound what one
        sample can move)."""
        node_id = feedback.get("node_id") if isinstance(feedback, dict) else None
        self.feedback_records += 1
        if not isinstance(node_id, str) or node_id not in self._nodes:
            # a node outside this job's plan (another job's executor on the same topic, or a
            # forged report): its numbers are not this job's, and it retires none of its tasks
            return
        observe = getattr(self.fixed_policy, "observe_completion", None)
        timings = _task_timings(feedback.get("completed"))
        with self._lock:
            samples, retired = [], False
            for timing in timings:
                ran_here, entry = self.ledger.report(timing["task_id"], self.clock(), node_id)
                retired = retired or entry is not None
                if entry is not None and observe is not None:  # rules that learn from
                    # outcomes (e.g. liquid)
                    observe(timing["task_id"], max(0.0, self.clock() - entry[1]), entry[0])
                if ran_here:  # (type, size, work s); None when implausible
                    samples.append(timing_sample(timing))
            if retired and self.hold is not None:  # some of ours retired: room, perhaps
                self.hold.completed(self._lock)
            for sample in samples:
                if sample is not None:
                    self.speeds.observe(node_id, *sample)
            node = self._nodes[node_id]
            # The age is the observation's business (decision time), not the report's.
            self._states[node_id] = node_state_from_feedback(
                feedback, node.uplink_mbps or node.link_mbps, node.link_mbps)
            self._feedback_at_ms[node_id] = feedback_emitted_at_ms(feedback)

    def reported_state(self, node_id: str) -> NodeState:
        """``node_id``'s numbers as its last NodeFeedback gave them (before the router's own
        in-flight count, backlog and speed replace those parts in :meth:`observation`), aged
        as of now; a zero state before its first report."""
        with self._lock:
            state = self._states[node_id]
            return dataclasses.replace(state, age_s=self._age_s(node_id, self.clock()))

    def _age_s(self, node_id: str, now_s: float) -> float:
        at_ms = self._feedback_at_ms.get(node_id)
        return 0.0 if at_ms is None else feedback_age_s(at_ms, now_s * 1000.0)

    def in_flight(self) -> dict[str, int]:
        return dict(self.ledger.count)

    def backlog_s(self) -> dict[str, float]:
        return dict(self.ledger.backlog_s)

    def observation(self, task: Task) -> Observation:
        now = self.clock()
        offered, skipped = offered_nodes(self.node_ids, self.ledger.count, self._capacity)
        self.full_skips += skipped
        # every queue full: all are offered, with the same numbers as always: the feedback's
        # utilisations too. (Without them the model saw rows it was never trained on, all
        # utilisations zero, whenever the router ran ahead.)
        return Observation(task, tuple(self._node_state(n, now) for n in offered), now)

    def _node_state(self, node_id: str, now: float) -> NodeState:
        """What a decision sees of ``node_id``: its last report's utilisations with this
        router's own in-flight count, backlog, report age and measured speed."""
        base = self._states[node_id]
        return NodeState(node_id, base.cpu_util, base.gpu_util, base.host_mem_util,
                         base.gpu_mem_util, base.uplink_util, base.downlink_util,
                         queue_depth=self.ledger.count[node_id],
                         backlog_s=self.ledger.backlog_s[node_id],
                         age_s=self._age_s(node_id, now),
                         speed_factor=self.speeds.factor(node_id))

    # -- deciding ---------------------------------------------------------------------------
    def decide(self, task: Task) -> Decision:
        """The node for ``task`` (see :meth:`route`, which also says what the decision saw)."""
        return self.route(task)[0]

    def route(self, task: Task) -> tuple[Decision, DecisionContext]:
        """Decide a node for ``task`` and count it in flight there; returns the decision and
        what it saw on the chosen node (reported back in the feedback, so the service learns
        latency against the same numbers the router sees). With quotas, ``task.tenant`` /
        ``task.priority`` are counted and a demotion is appended to the decision's reason."""
        decision, context, _ = self._route(task)
        return decision, context

    def keep_local(self, task: Task, node: str) -> float | None:
        """For a router that runs tasks on its own ``node`` (routing "colocated"): the
        measured milliseconds of ``task``'s work there when it is below
        ``keep_local_below_ms`` (kept: counted routed to ``node``, not in flight, the caller
        runs it at once), else None (then :meth:`route`; a task the policy sends to ``node``
        the caller runs too, then calls :meth:`ran_inline`). Only trusted fits count (a new
        type goes to the policy, which explores); never with tenant quotas (they count every
        task; :mod:`pyflink_jobs.keep_rule`). Not in the decision timings."""
        return self.keeping.kept_ms(task.app_id, task.input_size, node)

    def kept_decision(self, node: str, work_ms: float) -> tuple[Decision, DecisionContext]:
        """The decision :meth:`keep_local` made, in words, with what it saw on ``node``."""
        with self._lock:
            context = self.ledger.context(node, self.speeds.factor(node))
        return Decision(node, f"kept on {node}, where it runs: {work_ms:.3f} ms of work, "
                              f"below the {self.settings.keep_local_below_ms:g} ms a move "
                              "costs"), context

    def ran_inline(self, task_id: str) -> None:
        """``task_id`` ran to its end where it was routed from: no longer in flight."""
        with self._lock:
            self.ledger.complete(task_id, self.clock())

    def _route(self, task: Task) -> tuple[Decision, DecisionContext, QuotaVerdict | None]:
        if self.hold is not None:   # decide late: not in the decision's timings
            with self._lock:
                self.hold.wait(self._lock, self.ledger.count)
        cpu_started = time.thread_time() if self.timing.samples_cpu() else None
        started = time.perf_counter()
        with self._lock:
            locked = time.perf_counter()
            now = self.clock()
            self.ledger.expire(now)
            observation = self.observation(task)
            policy = self.policy
            # which of the service's versions decides (the service's version trial tells its
            # arms apart by it); -1 for the fallback rule or a fixed policy
            version = self.model_version if policy is self.model_policy and \
                self.model_version is not None else -1
            candidate = self.candidate
            if candidate is not None and self.fixed_policy is None and \
                    candidate.decides(task.task_id):
                policy, version = candidate.policy, candidate.version
                self.candidate_decisions += 1
            observed = time.perf_counter()
            if policy is self.fallback and self.settings.policy == "ldwp":
                self.fallback_decisions += 1
            try:
                decision = policy.decide(observation)
            except Exception as exc:  # noqa: BLE001 - a bad model must not stop routing
                log.warning("policy %s failed (%s); using %s", policy.name, exc,
                            self.fallback.name)
                self.fallback_decisions += 1
                decision = self.fallback.decide(observation)
                version = -1
            decided = time.perf_counter()
            node = decision.node
            speed = self.speeds.factor(node)
            work_s = self.speeds.estimate_s(node, task.app_id, task.input_size) * speed
            verdict = None
            if self.quotas is not None:
                self.ledger.forget(task.task_id)  # a replay: released before it is admitted
                verdict = self.quotas.admit(task.tenant, task.priority, now)
                if verdict.demoted:
                    decision = dataclasses.replace(
                        decision, reason=f"{decision.reason}; demoted: {verdict.reason}")
            # (a replayed record's earlier entry is retired first: it counts once)
            context = self.ledger.add(task.task_id, node, now, work_s,
                                      None if verdict is None else verdict.tenant, speed)
            if version >= 0:
                context = dataclasses.replace(context, model_version=version)
            self.routed[decision.node] += 1
        finished = time.perf_counter()
        self.timing.add(started, (locked, observed, decided, finished),
                        None if cpu_started is None else time.thread_time() - cpu_started)
        return decision, context, verdict

    def latency_percentile_us(self, q: float) -> float:
        """Percentile ``q`` of the whole decision's wall time (µs; 0.0 before any)."""
        return self.timing.percentile_us("total", q)

    def stats_decision_path(self) -> str:
        """Which path the current policy decides on (placement.ldwp.compiled.decision_path)."""
        return decision_path(self.policy)

    def stats(self) -> dict:
        """Counts, speeds, latencies and the model in use, for gauges and benchmarks."""
        return _router_stats(self)


def _router_stats(router: Router) -> dict:
    """Router.stats (kept outside the class: what it reports, not how it decides)."""
    return {"routed": dict(router.routed), "in_flight": router.in_flight(),
            "backlog_s": router.backlog_s(), "speed_factors": router.speeds.factors(),
            "reported_slowness": router.speeds.reported_factors(),
            "model_version": router.model_version, "policy": router.policy.name,
            "candidate_version": None if router.candidate is None else router.candidate.version,
            "candidate_decisions": router.candidate_decisions,
            "decision_path": router.stats_decision_path(),
            "fallback_decisions": router.fallback_decisions, "full_skips": router.full_skips,
            "feedback_records": router.feedback_records,
            "seeded_cost_fits": router.seeded_cost_fits,
            **({"hold": router.hold.stats()} if router.hold is not None else {}),
            "decision_p50_us": router.latency_percentile_us(50),
            "decision_p99_us": router.latency_percentile_us(99),
            "decision_timing_us": router.timing.summary(),
            **({"tenants": router.quotas.stats(), "demoted": router.quotas.demoted_total}
               if router.quotas is not None else {})}


def _task_timings(completed) -> list:
    """A report's completed-task timings that name a task (a dict with a text ``task_id``);
    the rest is skipped one by one, so that one malformed entry (the Avro decoder rules them
    out; a caller of ``on_feedback`` may not) does not drop the report's other timings and
    its node numbers."""
    if not isinstance(completed, (list, tuple)):
        return []
    return [t for t in completed if isinstance(t, dict) and isinstance(t.get("task_id"), str)]




class ModelRefresher(threading.Thread):
    """Polls the placement service for new model versions and installs them in a router,
    every ``interval_s`` after the caller's own first :meth:`poll_once` (see
    ``pyflink_jobs.router_function.start_refresher``).

    Failures (service down, bad download, tampered file) are counted and logged; the router
    keeps its last model. ``stop()`` ends the thread within one poll interval."""

    def __init__(self, router: Router, client, interval_s: float = 2.0):
        seconds = wait_seconds("the model refresh interval (refresh_interval_s)", interval_s,
                               most=threading.TIMEOUT_MAX)
        super().__init__(name="streamplace-model-refresher", daemon=True)
        self.router = router
        self.client = client
        self.interval_s = seconds
        self.failures = 0
        self.installed = 0
        self.refused = 0              # model files refused (tampered, non-finite, mismatched)
        self.refused_versions: set[int] = set()
        self.last_error = ""
        self._stop = threading.Event()

    def poll_once(self) -> bool:
        """One check; True when a new version was installed (a candidate on an interleaved
        trial too: :mod:`pyflink_jobs.model_trial`)."""
        try:
            latest = self.client.latest()
            if not latest:
                return False
            version = latest["version"]
            if not plausible_version(version):
                raise ValueError(f"the service's latest version is not an int in [0, "
                                 f"{MAX_MODEL_VERSION}]: {short_repr(version)}")
            router, current = self.router, self.router.model_version
            if current is not None and version <= int(current) or \
                    version in self.refused_versions:
                return False
            try:
                trial = candidate_trial(latest)
            except ValueError as exc:   # a share or champion it cannot read: never served
                self._refuse(version, exc)
                return False
            if trial is None:
                return self._install(version, router.install_model)
            if router.candidate is not None and router.candidate.version == version:
                return False
            # the champion first: the candidate decides only its share beside it
            champion = trial.champion_version
            if champion >= 0 and champion != current and (
                    champion in self.refused_versions or
                    not self._install(champion, router.install_model)):
                return False
            return self._install(version, lambda data, v: router.install_candidate(
                data, v, trial.share))
        except Exception as exc:  # noqa: BLE001 - keep routing on the last model
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            if self.failures == 1 or self.failures % 100 == 0:   # said, not flooded
                log.warning("model refresh failed %d time(s), keeping version %s: %s",
                            self.failures, self.router.model_version, self.last_error,
                            exc_info=self.failures == 1)
            return False

    def _install(self, version: int, install) -> bool:
        """Download ``version`` and ``install(data, version)`` it; a file the router must not
        use (non-finite weights, a header that does not match its arrays, metadata a loader
        chokes on) is refused for good and the last good model kept."""
        data = self.client.download(version)
        try:
            install(data, version)
        except Exception as exc:  # noqa: BLE001 - ModelFileError, or any other failure
            self._refuse(version, exc)
            return False
        self.installed += 1
        return True

    def _refuse(self, version: int, exc: Exception) -> None:
        if len(self.refused_versions) < 1024:
            self.refused_versions.add(version)
        self.refused += 1
        self.last_error = f"model version {version} refused: {exc}"
        log.warning("model version %d refused, keeping version %s: %s", version,
                    self.router.model_version, exc)

    def run(self) -> None:
        # the first poll is the caller's, before the first record
        # (pyflink_jobs.router_function.start_refresher): the thread waits one interval first
        while not self._stop.wait(self.interval_s):
            self.poll_once()

    def stop(self) -> None:
        self._stop.set()
