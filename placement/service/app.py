"""The placement service: HTTP API (FastAPI), feedback consumer, online learner, model store.

The service is the learner, never on the per-record path: routers decide locally and pull the
newest weights from here; non-Flink clients may ask ``POST /decide`` directly. Endpoints (all
JSON unless said; OpenAPI at ``/openapi.json``; with a token set, every endpoint except
``/health`` needs ``Authorization: Bearer <token>``):

==============================  ===========================================================
``GET /health``                 status, model version, feedback counts (no token needed)
``GET /cluster``                TaskManagers from Flink REST merged with the latest feedback
``GET /models``                 every kept model version's metadata
``GET /models/latest``          the newest version's metadata (404 while there is none)
``GET /models/{v}``             one version's metadata
``GET /models/{v}/weights``     the model file (application/octet-stream, ETag = sha256)
``POST /decide``                batch placement decisions for non-Flink clients (a body
                                over 16 MiB is refused with 413 before it is parsed)
``GET /plan``                   executor instances per TaskManager (the slot-level plan)
``GET /costs``                  measured work-time fits per (task type, node): a new router
                                starts from them (:mod:`placement.cost_snapshot`)
``GET /metrics``                Prometheus text
==============================  ===========================================================

Python API::

    service = PlacementService(ServiceSettings(port=0, model_dir="/tmp/models")).start()
    PlacementClient(service.url).health()
    service.stop()          # stops the HTTP server, the consumer (closed) and the learner

and the pure slot planner :func:`plan_executors` (unit-tested with a scenario table).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import secrets
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path as PathParam, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, FiniteFloat,
                      field_validator)

from placement.cost_snapshot import cost_snapshot
from placement.ldwp.modelfile import ModelFileError
from placement.service.feedback import FeedbackConsumer, FeedbackIngest, consumer_config
from placement.service.flink_rest import (MAX_TASKMANAGER_SLOTS, FlinkRestClient, FlinkRestError,
                                          FlinkUnreachable, registered_taskmanager)
from placement.service.interleaved_trial import candidate_trial
from placement.service.http_limits import (MAX_BODY_BYTES, BodySizeLimit, bounded_echo,
                                           text_safe)
from placement.service.learner import OnlineLearner, to_cluster_spec
from placement.service.metrics import CONTENT_TYPE_LATEST, ServiceMetrics
from placement.service.settings import ServiceSettings
from placement.service.store import ModelStore, UnknownVersion
from placement.service.tenants import TenantReport
from workload.estimates import gpu_spec_speed
from workload.feedback import MAX_AGE_S, MAX_QUEUE_DEPTH
from workload.limits import finite_real
from workload.model import ClusterSpec, NodeState, Observation, Task

__all__ = ["PlacementService", "create_app", "plan_executors", "Plan", "NodeCapacity",
           "node_capacities", "unlisted_capacities", "ServingPolicy"]

log = logging.getLogger(__name__)


# -- the slot-level plan -------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeCapacity:
    """What the plan knows of one TaskManager from the cluster spec."""

    node_id: str
    capacity: float   # static service capacity: cpu_cores / work_multiplier (+ GPUs)
    slots: int        # amount of its external resource: the most executor instances it hosts
    cores: float


@dataclass(frozen=True)
class Plan:
    nodes: dict[str, int]
    total: int
    reason: str


def node_capacities(cluster_spec) -> list[NodeCapacity]:
    """Capacities from a local cluster spec (``.taskmanagers``: cpu_cores, work_multiplier,
    slots) or a ``workload.model.ClusterSpec`` (cores x cpu_speed + GPU speeds, task_slots)."""
    if isinstance(cluster_spec, ClusterSpec):
        return [NodeCapacity(n.node_id, n.cpu_cores * n.cpu_speed
                             + sum(gpu_spec_speed(g) for g in n.gpus),
                             n.task_slots, float(n.cpu_cores)) for n in cluster_spec.nodes]
    return [NodeCapacity(tm.id, float(tm.cpu_cores) / float(tm.work_multiplier)
                         + len(getattr(tm, "gpu_ids", ())), int(tm.slots), float(tm.cpu_cores))
            for tm in cluster_spec.taskmanagers]


#: Most TaskManagers taken from Flink's REST answer for the plan (as the hook's
#: pyflink_jobs.live_cluster reads them)
MAX_UNLISTED_NODES = 1024


def unlisted_capacities(taskmanagers, listed) -> list[NodeCapacity]:
    """The registered TaskManagers (``FlinkRestClient.taskmanagers()``) that the spec's ids
    ``listed`` lack, as capacities from what REST says of them: their cores (one unit each,
    speed unknown), and as slots the amount of the external resource named after their id
    (what the hook pins executors with), else their task slots. An entry that is not that
    shape, or whose id is not a usable node name (``workload.cluster_spec.NODE_ID_PATTERN``:
    Flink's generated ids are not), is skipped; at most :data:`MAX_UNLISTED_NODES`, by id."""
    from workload.cluster_spec import NODE_ID_PATTERN
    listed, out = set(listed), {}
    for tm in map(registered_taskmanager, list(taskmanagers or ())[:MAX_UNLISTED_NODES]):
        if (tm is None or tm.node_id in listed or tm.node_id in out
                or not NODE_ID_PATTERN.fullmatch(tm.node_id)):
            continue
        slots = int(min(MAX_TASKMANAGER_SLOTS, tm.own_resource)) if tm.own_resource >= 1 \
            else tm.slots
        # GPUs count as units, as node_capacities counts a spec's
        out[tm.node_id] = NodeCapacity(tm.node_id, float(tm.cpu_cores + tm.gpus), slots,
                                       float(tm.cpu_cores))
    return [out[node] for node in sorted(out)]


def plan_executors(cluster_spec, measured_rates: dict[str, float] | None = None,
                   alive_nodes=None, max_total: int | None = None,
                   unlisted: list[NodeCapacity] = ()) -> Plan:
    """How many executor instances each TaskManager hosts.

    - Candidates: the spec's nodes, minus those not in ``alive_nodes`` (the TaskManagers Flink
      REST lists; None when Flink is unreachable: keep them all). Alive nodes the spec lacks
      are left out, unless none of the spec's nodes is alive: then the plan is for the
      ``unlisted`` ones (:func:`unlisted_capacities`, from REST), as the hook then places on
      the cluster's own TaskManagers (``pyflink_jobs.live_cluster``).
    - Rate of a node: its measured service rate (``measured_rates``, tasks/s) when known; a node
      without a measurement gets its static capacity (cpu_cores / work_multiplier) scaled by the
      median measured/static ratio of the measured nodes, so both kinds compare.
    - Total: ``max_total`` (default: one instance per core, at most the slots) raised to the
      node count (every alive node keeps one instance) and capped by the sum of slots.
    - Counts: one each, then one more at a time to the node with the highest rate per instance
      (``rate / count``, D'Hondt; ties in spec order), never beyond a node's ``slots``. The
      counts are thus proportional to rate as far as whole instances and the bounds allow.
    """
    capacities = node_capacities(cluster_spec)
    alive = None if alive_nodes is None else set(alive_nodes)
    nodes = [c for c in capacities if alive is None or c.node_id in alive]
    from_rest = not nodes and alive is not None and bool(unlisted)
    if from_rest:   # a spec of another cluster: plan the TaskManagers Flink has
        nodes = [c for c in unlisted if c.node_id in alive]
    if not nodes:
        return Plan({}, 0, "no TaskManager of the cluster spec is alive in Flink"
                    if alive is not None else "the cluster spec has no TaskManagers")
    measured = {n.node_id: float(measured_rates[n.node_id]) for n in nodes
                if measured_rates and measured_rates.get(n.node_id, 0) > 0}
    scale = (statistics.median(measured[n.node_id] / n.capacity for n in nodes
                               if n.node_id in measured) if measured else 1.0)
    rate = {n.node_id: measured.get(n.node_id, n.capacity * scale) for n in nodes}
    slots_total = sum(n.slots for n in nodes)
    wanted = (max_total if max_total is not None
              else sum(min(n.slots, max(1, round(n.cores))) for n in nodes))
    total = min(slots_total, max(len(nodes), wanted))
    counts = {n.node_id: 1 for n in nodes}
    for _ in range(total - len(nodes)):
        open_nodes = [n for n in nodes if counts[n.node_id] < n.slots]
        best = max(open_nodes, key=lambda n: rate[n.node_id] / counts[n.node_id])
        counts[best.node_id] += 1  # max() keeps the first of equals: spec order on ties
    static = "REST's cores" if from_rest else "spec"
    parts = [f"{n.node_id} {counts[n.node_id]}/{n.slots} slots "
             f"(rate {rate[n.node_id]:.2f}, {'measured' if n.node_id in measured else static})"
             for n in nodes]
    notes = []
    if from_rest:
        notes.append("none of the cluster spec's nodes is in Flink: planned for Flink's own "
                     "TaskManagers (start the service with the cluster's spec to describe "
                     "them)")
    if max_total is not None and max_total < len(nodes):
        notes.append(f"max_total {max_total} raised to {len(nodes)}: one instance per alive node")
    if max_total is not None and max_total > slots_total:
        notes.append(f"max_total {max_total} capped at the {slots_total} slots")
    if alive is not None:
        left = [c.node_id for c in capacities if c.node_id not in alive]
        if left:
            notes.append(f"not in Flink, left out: {', '.join(left)}")
    reason = ("proportional to service rate: " + "; ".join(parts)
              + (". " + "; ".join(notes) if notes else ""))
    return Plan(counts, total, reason)


# -- decisions from the newest published model --------------------------------------------------
class ServingPolicy:
    """The policy ``/decide`` uses: the newest published model (reloaded when a new version
    appears), else the fallback rule. Decisions never explore."""

    def __init__(self, store: ModelStore, cluster: ClusterSpec, costs, fallback: str):
        from placement.policies import make_policy
        self.store, self.cluster, self.costs = store, cluster, costs
        self.fallback = make_policy(fallback, cluster, costs)
        self.version: int | None = None
        #: the newest version that failed to load: not tried again on every request (a bad
        #: file stays bad; a newer version is tried when it appears)
        self.refused_version: int | None = None
        self._policy = None
        self._lock = threading.Lock()

    def current(self):
        """(policy, source, version): source is "model" or "fallback". A version that fails
        to load, for whatever reason, is refused once (logged) and the previous model or the
        fallback keeps answering: a bad file must not turn every /decide into a 500. While
        the newest version is a candidate on an interleaved trial, the champion answers: the
        trial bounds the candidate to its share of the routers' tasks, and /decide's callers
        report no outcomes it could judge."""
        wanted = self._served_version(self.store.latest())
        if wanted is not None and wanted not in (self.version, self.refused_version):
            with self._lock:
                if wanted not in (self.version, self.refused_version):
                    self._load(wanted)
        if self._policy is None:
            return self.fallback, "fallback", None
        return self._policy, "model", self.version

    @staticmethod
    def _served_version(latest: dict | None) -> int | None:
        """The version /decide serves: the newest, or its trial's champion (None: none, or an
        entry whose trial cannot be read: what serves now keeps serving)."""
        if latest is None:
            return None
        try:
            trial = candidate_trial(latest)
        except ValueError:
            return None
        if trial is None:
            return latest["version"]
        return trial.champion_version if trial.champion_version >= 0 else None

    def _load(self, version: int) -> None:
        """Switch to stored ``version``, or refuse it and keep what serves now (lock held)."""
        from placement.ldwp.agent import LDWPPolicy
        try:
            policy = LDWPPolicy.from_file(self.store.path(version), self.cluster, self.costs,
                                          training=False)
        except (UnknownVersion, OSError) as exc:  # may pass (pruned, a disk hiccup): retried
            log.error("cannot load model version %s (%s); keeping version %s", version, exc,
                      self.version)
            return
        except ModelFileError as exc:
            reason = str(exc)
        except Exception as exc:  # noqa: BLE001 - any failure refuses the file, never a 500
            reason = f"{type(exc).__name__}: {exc}"
        else:
            self._policy, self.version = policy, version
            return
        self.refused_version = version
        log.error("refusing model version %s (%s); keeping %s", version, reason[:500],
                  f"version {self.version}" if self.version is not None else "the fallback rule")


# -- request and response bodies ----------------------------------------------------------------
#: Upper bounds of the numbers a request may carry. Far beyond any real value, they keep hostile
#: or broken input out of the cost model and the network (huge values overflow float32 features
#: into inf/NaN scores).
MAX_INPUT_SIZE = 10**12     # pixels: a terapixel; real inputs are megapixels at most
# MAX_QUEUE_DEPTH (tasks at one node) and MAX_AGE_S (about 116 days) are the bounds the
# feedback's node states are clamped to (workload.feedback), so a state the service saw in the
# feedback is always a valid request body too.
MAX_BACKLOG_S = 1e6         # about 11.6 days of estimated work queued at one node
MAX_NODES = 1_000           # node states in one /decide body
MAX_NAME = 256              # characters of a node id
MAX_VERSION = 10**9         # model versions in paths


def _printable(value: str) -> str:
    """Names (node ids, task ids, task types) are printable text: no control characters (tab,
    newline, NUL, ANSI escapes), no line or paragraph separators, not blank."""
    if not value.strip():
        raise ValueError("must not be blank")
    if not value.isprintable():
        position, bad = next((i, c) for i, c in enumerate(value) if not c.isprintable())
        raise ValueError(f"must be printable text without control characters "
                         f"(found {bad!r} at position {position})")
    return value


def _name(max_length: int, description: str):
    return Annotated[str, Field(min_length=1, max_length=max_length, strict=True,
                                description=description), AfterValidator(_printable)]


NodeId = _name(MAX_NAME, "a node (TaskManager) id the service knows: the cluster spec's nodes "
                         "and nodes seen in feedback; printable, at most 256 characters")
TaskId = _name(512, "the caller's task id; printable, at most 512 characters")
TaskType = _name(128, "task type (application id), e.g. face_recognition; any printable name: "
                      "users place their own operators too")


def _integral_float_to_int(value):
    """JSON Schema's integer includes 7273.0: take it as 7273 (a strict int would refuse it);
    booleans, strings and fractions stay refused."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class TaskIn(BaseModel):
    """One task to place (the paper's TID and TSize)."""

    model_config = ConfigDict(extra="forbid")
    task_id: TaskId
    app_id: TaskType
    input_size: Annotated[int, BeforeValidator(_integral_float_to_int)] = Field(
        ge=0, le=MAX_INPUT_SIZE, strict=True,
        description="input size in pixels (TSize), at most 10^12")


class NodeStateIn(BaseModel):
    """A node's state as the caller sees it (fractions in [0, 1]; every number finite)."""

    # strict: a number must be a JSON number (not true, not "0.5"), as the spec says
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)
    node_id: NodeId
    cpu_util: float = Field(0.0, ge=0, le=1)
    gpu_util: float = Field(0.0, ge=0, le=1)
    host_mem_util: float = Field(0.0, ge=0, le=1)
    gpu_mem_util: float = Field(0.0, ge=0, le=1)
    uplink_util: float = Field(0.0, ge=0, le=1)
    downlink_util: float = Field(0.0, ge=0, le=1)
    queue_depth: Annotated[int, BeforeValidator(_integral_float_to_int)] = Field(
        0, ge=0, le=MAX_QUEUE_DEPTH,
                             description="tasks at the node (queued + running)")
    backlog_s: float = Field(0.0, ge=0, le=MAX_BACKLOG_S,
                             description="estimated work (s) queued at the node")
    age_s: float = Field(0.0, ge=0, le=MAX_AGE_S, description="how stale these numbers are")


class DecideRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tasks: list[TaskIn] = Field(min_length=1, max_length=10_000)
    nodes: list[NodeStateIn] | None = Field(
        None, min_length=1, max_length=MAX_NODES, description="node states to decide on, "
        "each a node the service knows; default: the service's latest view (cluster spec + "
        "feedback)")

    @field_validator("nodes")
    @classmethod
    def _unique_nodes(cls, nodes):
        if nodes is not None:
            counts = Counter(n.node_id for n in nodes)
            repeated = sorted(i for i, c in counts.items() if c > 1)
            if repeated:
                raise ValueError(f"node ids must be unique; repeated: {_names(repeated)}")
        return nodes


class ErrorOut(BaseModel):
    """The body of an error this service raises itself (404, 422, 500, 503)."""

    detail: str


def _errors(**statuses: str) -> dict:
    """``responses=`` for the routes: each status with its description and ErrorOut body."""
    return {int(code[1:]): {"model": ErrorOut, "description": text}
            for code, text in statuses.items()}


#: /decide's 422: the validation errors of a bad body, or ErrorOut (unknown node ids, a rule
#: that cannot place a task)
_DECIDE_422 = {"description": "an invalid body, unknown node ids, or a task the rule cannot "
               "place", "content": {"application/json": {"schema": {"anyOf": [
                   {"$ref": "#/components/schemas/HTTPValidationError"},
                   {"$ref": "#/components/schemas/ErrorOut"}]}}}}


class DecisionOut(BaseModel):
    task_id: str
    node: str
    reason: str
    scores: dict[str, FiniteFloat] = Field(
        description="node -> the policy's score (higher is better); always finite numbers")
    policy: str = Field(description="'ldwp v<version>' or the fallback rule's name")


class PlanOut(BaseModel):
    nodes: dict[str, int]
    total: int
    reason: str
    flink: dict
    measured_rates: dict[str, FiniteFloat] = Field(
        description="node -> measured tasks/s (finite, positive; nodes without one left out)")


class CostFitOut(BaseModel):
    task_type: str
    node: str
    fixed_s: FiniteFloat = Field(description="seconds at size 0")
    per_unit_s: FiniteFloat = Field(description="seconds per unit of task size")
    mean_size: FiniteFloat
    samples: int


class CostsOut(BaseModel):
    fits: list[CostFitOut]


# -- helpers of the endpoints --------------------------------------------------------------------
def _names(ids, limit: int = 10, width: int = 64) -> str:
    """A bounded listing of names for messages: at most ``limit``, each cut to ``width``."""
    ids = list(ids)
    shown = [repr(i if len(i) <= width else i[:width] + "...") for i in ids[:limit]]
    more = f", ... ({len(ids) - limit} more)" if len(ids) > limit else ""
    return "[" + ", ".join(shown) + more + "]"


def _json_safe(value):
    """``value`` with every non-finite float (NaN, inf: JSON has none) replaced by None, and
    every string UTF-8 can encode (a lone surrogate written as its escape text)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return text_safe(value)
    if isinstance(value, dict):
        return {_json_safe(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


class SafeJSONResponse(JSONResponse):
    """JSON without NaN/inf and with encodable text (Starlette's JSONResponse raises on
    either: a 500)."""

    def render(self, content) -> bytes:
        return super().render(_json_safe(content))


def _finite_rates(rates: dict) -> dict[str, float]:
    """Measured rates fit for the plan and its answer: finite and positive only."""
    return {n: r for n, v in rates.items() if (r := finite_real(v)) is not None and r > 0}


def _request_nodes(service: "PlacementService", body: DecideRequest) -> list[NodeState]:
    """The nodes a /decide batch chooses from: the body's (each one the service knows: the
    cluster spec's or seen in feedback; else 422) or the service's latest view (503 if empty)."""
    if body.nodes is None:
        nodes = service.learner.node_states()
        if not nodes:
            raise HTTPException(503, "the service knows no nodes: the cluster spec lists none "
                                "and no feedback has arrived; pass 'nodes' in the body")
        return nodes
    known = list(dict.fromkeys([*service.cluster.node_ids, *service.learner.node_ids()]))
    known_set = set(known)
    unknown = [n.node_id for n in body.nodes if n.node_id not in known_set]
    if unknown:
        lead = "no spec for any observed node: " if len(unknown) == len(body.nodes) else ""
        raise HTTPException(422, f"{lead}unknown node ids {_names(unknown)}: neither in the "
                            f"cluster spec nor seen in feedback; the service knows "
                            f"{_names(known, limit=20)}")
    return [NodeState(**n.model_dump()) for n in body.nodes]


def _usable(decision, offered: dict[str, int]) -> tuple[dict[str, float] | None, str, str]:
    """``(scores, "", "")`` when a policy's decision may be returned: it picks an offered node
    and its scores are finite numbers for offered nodes; else ``(None, problem label, what is
    wrong)``."""
    node = getattr(decision, "node", None)
    if not isinstance(node, str) or node not in offered:
        return None, "unknown_node", f"chose {str(node)[:80]!r}, not one of the offered nodes"
    try:
        scores = {k: finite_real(v)
                  for k, v in dict(getattr(decision, "scores", None) or {}).items()}
    except (TypeError, ValueError):
        return None, "non_finite_scores", "gave scores that are not a node -> number mapping"
    if any(v is None for v in scores.values()):
        return None, "non_finite_scores", "gave non-finite scores"
    stray = [str(k) for k in scores if k not in offered]
    if stray:
        return None, "unknown_node", f"scored nodes it was not offered {_names(stray)}"
    return scores, "", ""


def _fallback_decision(service: "PlacementService", observation: Observation, who: str,
                       problem: tuple[str, str], offered: dict[str, int], retry: bool):
    """The fallback rule's decision for a task whose policy decision was unusable
    (``problem``: metric label, text); 503 when there is none to return."""
    fallback = service.serving.fallback
    service.metrics.unusable_decisions.labels(problem=problem[0]).inc()
    task_id = observation.task.task_id
    if not retry:   # the fallback rule itself gave it
        raise HTTPException(503, f"cannot place task {task_id!r}: {who} {problem[1]}; no "
                            "decision is returned")
    try:
        decision = fallback.decide(observation)
    except Exception as exc:  # noqa: BLE001 - whatever it is, the answer is a 503
        raise HTTPException(503, f"cannot place task {task_id!r}: {who} {problem[1]} and the "
                            f"fallback {fallback.name} failed too ({type(exc).__name__}: "
                            f"{exc}); no decision is returned") from None
    scores, _label, second = _usable(decision, offered)
    if scores is None:
        raise HTTPException(503, f"cannot place task {task_id!r}: {who} {problem[1]} and the "
                            f"fallback {fallback.name} {second}; no decision is returned")
    return decision, scores, f"{who} {problem[1]}; fallback {fallback.name}: {decision.reason}"


def _decide(service: "PlacementService", body: DecideRequest) -> list[DecisionOut]:
    """What POST /decide answers (see the endpoint). A decision the policy gets wrong (a
    non-finite score, a node not offered) is taken from the fallback rule instead."""
    policy, source, version = service.serving.current()
    nodes = _request_nodes(service, body)
    label = f"ldwp v{version}" if source == "model" else policy.name
    who = f"model v{version}" if source == "model" else f"fallback {policy.name}"
    index = {n.node_id: i for i, n in enumerate(nodes)}
    out, sources, problems = [], Counter(), []
    now = time.time()
    for task in body.tasks:
        observation = Observation(Task(task.task_id, task.app_id, task.input_size),
                                  tuple(nodes), now)
        raised = None
        try:
            decision = policy.decide(observation)
        except (KeyError, ValueError) as exc:  # e.g. a rule that needs specs of nodes
            message = exc.args[0] if exc.args else str(exc)
            raise HTTPException(422, f"cannot place task {task.task_id!r} with "
                                f"{label} on nodes {_names(index)}: {message}") from None
        except Exception as exc:  # noqa: BLE001 - e.g. a model whose numbers overflow: its
            # decision is unusable like a non-finite one (the fallback's, or a 503), never a 500
            raised = ("raised", f"raised {type(exc).__name__}: {str(exc)[:160]}")
        scores, kind, problem = (None, *raised) if raised else _usable(decision, index)
        if scores is not None:
            used, used_label = source, label
            reason = decision.reason if source == "model" else \
                f"no model version yet, fallback {policy.name}: {decision.reason}"
        else:
            decision, scores, reason = _fallback_decision(
                service, observation, who, (kind, problem), index, retry=source == "model")
            used, used_label = "fallback", service.serving.fallback.name
            problems.append(f"{task.task_id[:80]!r}: {problem}")
        out.append(DecisionOut(task_id=task.task_id, node=decision.node, reason=reason,
                               scores=scores, policy=used_label))
        sources[used] += 1
        i = index[decision.node]
        nodes[i] = dataclasses.replace(nodes[i], queue_depth=nodes[i].queue_depth + 1)
    for used, count in sources.items():
        service.metrics.decisions.labels(source=used).inc(count)
    if problems:  # one line per request: a poisoned model must not flood the log
        log.warning("%s gave unusable decisions for %d of %d tasks (first: %s); decided them "
                    "with the fallback %s", who, len(problems), len(body.tasks), problems[0],
                    service.serving.fallback.name)
    return out


def _cluster_view(service: "PlacementService") -> dict:
    """What GET /cluster answers; non-finite numbers (hostile feedback) become null."""
    try:
        taskmanagers = {tm["id"]: tm for tm in service.flink.taskmanagers()}
        flink = {"reachable": True, "url": service.flink.base_url}
    except (FlinkUnreachable, FlinkRestError) as exc:
        taskmanagers = None
        flink = {"reachable": False, "url": service.flink.base_url, "error": str(exc)}
    feedback = service.learner.latest_feedback()
    spec = {c.node_id: c for c in node_capacities(service.spec)}
    now_ms = int(time.time() * 1000)
    ids = list(dict.fromkeys([*(taskmanagers or {}), *spec, *feedback]))
    nodes = []
    for node in ids:
        tm = (taskmanagers or {}).get(node)
        record = feedback.get(node)
        emitted = None if record is None else finite_real(record.get("emitted_at_ms"))
        nodes.append({
            "node": node,
            "in_flink": None if taskmanagers is None else tm is not None,
            "flink": tm,
            "spec": dataclasses.asdict(spec[node]) if node in spec else None,
            "feedback": None if record is None else {
                **record, "age_s": None if emitted is None else
                round((now_ms - emitted) / 1000.0, 3)}})
    return _json_safe({"nodes": nodes, "flink": flink})


def _check_token(settings: ServiceSettings, given: str | None) -> None:
    if not settings.token:
        return
    if given is None or not secrets.compare_digest(given.encode(), settings.token.encode()):
        raise HTTPException(401, "missing or wrong bearer token: send 'Authorization: "
                            "Bearer <service.token>'", headers={"WWW-Authenticate": "Bearer"})


def _token_dependency(settings: ServiceSettings):
    """The dependency guarding every endpoint but /health. With a token set, it goes through
    ``HTTPBearer``, so the OpenAPI spec declares the bearer scheme on those endpoints; without
    one, it declares nothing (no auth is required), yet still enforces a token set later."""
    if settings.token:
        bearer = HTTPBearer(auto_error=False, description="service.token")

        def check_bearer(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)):
            _check_token(settings, None if credentials is None else credentials.credentials)
        return check_bearer

    def check_header(request: Request) -> None:
        if settings.token:  # set after the app was built: enforced, though not in the spec
            scheme, value = get_authorization_scheme_param(request.headers.get("authorization"))
            _check_token(settings, value if scheme.lower() == "bearer" and value else None)
    return check_header


# -- the app --------------------------------------------------------------------------------------
#: most validation errors a 422 lists (a 10k-task body can have one per task)
MAX_ERRORS_SHOWN = 20


def _validation_handler(_request: Request, exc: RequestValidationError) -> JSONResponse:
    # json.loads accepts NaN, Infinity and lone surrogates in a body, and the errors echo the
    # input: each echo is bounded (http_limits.bounded_echo) and the JSON made safe
    found = exc.errors()
    errors = [{key: bounded_echo(value) if key in ("input", "ctx") else value
               for key, value in error.items()}
              for error in found[:MAX_ERRORS_SHOWN]]
    errors = jsonable_encoder(errors, custom_encoder={Exception: str})
    summary = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body')}: "
                        f"{e.get('msg')}" for e in errors)
    if len(found) > MAX_ERRORS_SHOWN:
        summary += f"; ... ({len(found) - MAX_ERRORS_SHOWN} more errors)"
    return SafeJSONResponse({"detail": errors, "message": f"invalid request: {summary}"},
                            status_code=422)


def create_app(service: "PlacementService") -> FastAPI:
    """The FastAPI app over a service's components (``service.settings``, ``.store``,
    ``.learner``, ``.ingest``, ``.consumer``, ``.flink``, ``.metrics``, ``.spec``)."""
    settings = service.settings
    app = FastAPI(title="streamplace placement service",
                  description="Learns LDWP placement from Kafka feedback and serves model "
                              "versions, decisions and the slot-level plan.",
                  version="1", openapi_url=None, docs_url=None, redoc_url=None)
    app.add_exception_handler(RequestValidationError, _validation_handler)
    # every body is bounded before it is parsed (413 over MAX_BODY_BYTES)
    app.add_middleware(BodySizeLimit, limit=MAX_BODY_BYTES)
    started = time.monotonic()
    api = APIRouter(dependencies=[Depends(_token_dependency(settings))])

    @app.get("/health", tags=["service"])
    def health() -> dict:
        """Liveness and progress; needs no token (load balancers, `streamplace doctor`)."""
        latest = service.store.latest()
        consumer = service.consumer
        status = {"status": "ok", "model_version": latest["version"] if latest else None,
                  "feedback_records": service.learner.records_taken,
                  "records_trained": service.learner.records_trained,
                  "pending_records": service.learner.pending(),
                  "feedback_messages": service.ingest.messages,
                  "duplicates_dropped": dict(service.ingest.dedup.dropped),
                  "undecodable_messages": service.ingest.undecodable,
                  "consumer": None if consumer is None else {
                      "running": consumer.running, "topic": consumer.topic,
                      "last_error": consumer.last_error},
                  "learner": {"running": service.learner.running,
                              "last_error": service.learner.last_error,
                              "timings_rejected": service.learner.timings_rejected,
                              "examples_dropped": service.learner.examples.examples_dropped,
                              "models_rejected": service.learner.models_rejected,
                              "versions_held": service.learner.versions_held,
                              "cpu_share": service.learner.loop.cpu_share,
                              "paused_s": service.learner.loop.paused_s,
                              "trials": None if service.learner.trials is None
                              else service.learner.trials.stats()},
                  "nodes": service.learner.node_ids(),
                  "uptime_s": round(time.monotonic() - started, 3)}
        return _json_safe(status)

    @api.get("/openapi.json", include_in_schema=False)
    def openapi() -> JSONResponse:
        return SafeJSONResponse(app.openapi())

    @api.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=app.title)

    @api.get("/cluster", tags=["cluster"])
    def cluster() -> dict:
        """TaskManagers from Flink REST merged with each node's latest NodeFeedback (and its
        age); when Flink is unreachable, the feedback view and ``flink.reachable: false``.
        Numbers that are not finite (hostile feedback) are null."""
        return _cluster_view(service)

    @api.get("/tenants", tags=["cluster"])
    def tenants() -> dict:
        """Per tenant (a TaskEvent's ``tenant`` attribute), from the executors' feedback:
        completed tasks, mean and p99 latency from the router's decision (ms, the newest
        2,000), deadlines known and missed; Jain's fairness index of the tenants' mean
        latencies. Tasks without a tenant: ``(none)``; beyond 256 tenants: ``(other)``."""
        return service.tenants.summary()

    @api.get("/models", tags=["models"])
    def models() -> dict:
        """Metadata of every kept version, oldest first."""
        return {"versions": service.store.versions()}

    @api.get("/models/latest", tags=["models"], responses=_errors(s404="no model version yet"))
    def latest_model() -> dict:
        latest = service.store.latest()
        if latest is None:
            raise HTTPException(404, "no model version yet: the service publishes the first "
                                f"after {settings.min_records_first_version} feedback task "
                                "records (or set service.initial_model)")
        return latest

    def _meta(version: int) -> dict:
        try:
            return service.store.metadata(version)
        except UnknownVersion as exc:
            raise HTTPException(404, str(exc)) from None

    @api.get("/models/{version}", tags=["models"],
             responses=_errors(s404="no such model version"))
    def model(version: int = PathParam(ge=1, le=MAX_VERSION)) -> dict:
        return _meta(version)

    @api.get("/models/{version}/weights", tags=["models"],
             response_class=Response,
             responses={200: {"content": {"application/octet-stream": {}}},
                        304: {"description": "If-None-Match matched the ETag"},
                        **_errors(s404="no such model version",
                                  s500="the stored file fails its sha256 check")})
    def weights(request: Request, version: int = PathParam(ge=1, le=MAX_VERSION)) -> Response:
        """The model file (placement.ldwp.modelfile format); ETag is its sha256."""
        meta = _meta(version)
        etag = f'"{meta["sha256"]}"'
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers={"ETag": etag})
        try:
            data = service.store.read_bytes(version)
        except (UnknownVersion, FileNotFoundError) as exc:
            raise HTTPException(404, f"model version {version} is gone: {exc}") from None
        except ModelFileError as exc:
            raise HTTPException(500, str(exc)) from None
        return Response(data, media_type="application/octet-stream", headers={
            "ETag": etag, "Content-Disposition": f'attachment; filename="{meta["filename"]}"'})

    @api.post("/decide", tags=["placement"], response_model=list[DecisionOut],
              responses={**_errors(s400="the body cannot be parsed",
                                   s413="the body is over the 16 MiB limit (MAX_BODY_BYTES)",
                                   s503="no node is known, or no usable decision"),
                         422: _DECIDE_422})
    def decide(body: DecideRequest) -> list[DecisionOut]:
        """Place a batch of tasks. Each decision counts one more task in flight on its node
        for the rest of the batch (optimistic, as a router does between feedback reports).
        Given ``nodes`` must be nodes the service knows (422 naming the unknown ones). A model
        decision with a non-finite score or a node not offered is replaced by the fallback
        rule's (the reason says so); 503 when even that fails."""
        return _decide(service, body)

    @api.get("/plan", tags=["placement"], response_model=PlanOut)
    def plan(max_total: int | None = Query(None, ge=1, le=10_000, description="instances "
                                           "in all (default: one per core)")) -> PlanOut:
        """Executor instances per TaskManager: proportional to capacity (measured service
        rate once feedback exists), at least 1, at most the node's slots; TaskManagers absent
        from Flink are left out when Flink is reachable."""
        try:
            registered = service.flink.taskmanagers()
            alive = [tm["id"] for tm in registered]
            flink = {"reachable": True}
        except (FlinkUnreachable, FlinkRestError) as exc:
            registered, alive, flink = [], None, {"reachable": False, "error": str(exc)}
        rates = _finite_rates(service.learner.measured_rates())
        unlisted = unlisted_capacities(registered, [c.node_id for c in
                                                    node_capacities(service.spec)])
        result = plan_executors(service.spec, rates, alive, max_total, unlisted)
        return PlanOut(nodes=result.nodes, total=result.total, reason=result.reason,
                       flink=flink, measured_rates=rates)

    @api.get("/costs", tags=["placement"], response_model=CostsOut)
    def costs() -> dict:
        """The learner's trusted work-time fits, ``{"fits": [{task_type, node, fixed_s,
        per_unit_s, mean_size, samples}]}`` (at most 512, the newest types'): routers adopt
        them at start for the pairs they have not measured (placement.cost_snapshot)."""
        return cost_snapshot(service.learner.costs)

    @api.get("/metrics", tags=["service"], response_class=Response)
    def metrics() -> Response:
        now_ms = int(time.time() * 1000)
        for node, record in service.learner.latest_feedback().items():
            emitted = finite_real(record.get("emitted_at_ms"))
            service.metrics.feedback_age.labels(node=node).set(
                math.nan if emitted is None else (now_ms - emitted) / 1000.0)
            service.metrics.set_node_feedback(node, record)
        service.metrics.set_tenants(service.tenants.summary())
        return Response(service.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    app.include_router(api)
    return app


# -- the service ---------------------------------------------------------------------------------
def _load_spec(name: str):
    # Imported here: only a service built without a spec reads one (pydantic + yaml, which a
    # caller handing a ClusterSpec never needs).
    from workload.cluster_spec import load_cluster_spec
    return load_cluster_spec(name)


def spec_of_live_cluster(spec, taskmanagers) -> tuple[object, str]:
    """(the spec to serve, a note): ``spec`` (a LocalClusterSpec) as it is, unless Flink lists
    TaskManagers (``FlinkRestClient.taskmanagers()``; None: not reachable) and none of them is
    one of its nodes; then a spec of those TaskManagers as REST describes them (cores and
    slots from :func:`unlisted_capacities`; GPUs and memory as
    ``flink_rest.registered_taskmanager`` reads them), the rule the hook follows for its own nodes
    (``pyflink_jobs.live_cluster``). Only for a spec nobody chose (``"default"``): the caller
    decides that."""
    from workload.cluster_spec import LocalClusterSpec
    listed = [tm.id for tm in spec.taskmanagers]
    if not taskmanagers or any(isinstance(tm, dict) and tm.get("id") in listed
                               for tm in taskmanagers):
        return spec, ""
    live = unlisted_capacities(taskmanagers, listed)
    if not live:
        return spec, ""
    registered = {tm.node_id: tm for tm in map(registered_taskmanager, taskmanagers)
                  if tm is not None}

    def described(c: NodeCapacity) -> dict:   # GPUs and memory as the hook reads them
        tm = registered[c.node_id]
        return {"id": c.node_id, "cpu_cores": c.cores, "slots": c.slots,
                "gpu_ids": list(range(tm.gpus)),
                **({"task_heap_mb": tm.memory_mb[0], "managed_mb": tm.memory_mb[1]}
                   if tm.memory_mb else {})}

    return LocalClusterSpec.model_validate({
        "taskmanagers": [described(c) for c in live],
        "source": "Flink REST (none of the default spec's nodes is registered)"}), (
        f"none of the default cluster spec's nodes {listed} is registered in Flink: serving "
        f"its TaskManagers {[c.node_id for c in live]} as REST describes them (cores, "
        "slots, GPUs of Flink's 'gpu' resource, memory; "
        "set service.cluster_spec to describe them fully)")


class PlacementService:
    """Everything ``streamplace serve`` runs, as one object.

    ``cluster_spec``: a ``LocalClusterSpec`` or ``workload.model.ClusterSpec`` (default: load
    ``settings.cluster_spec``); ``flink``: a :class:`FlinkRestClient` (default from settings).
    ``start()`` runs the learner, the consumer and uvicorn in background threads (tests, demo);
    ``serve_forever()`` runs uvicorn in the calling thread until Ctrl-C (the CLI).
    """

    def __init__(self, settings: ServiceSettings | None = None, cluster_spec=None,
                 flink: FlinkRestClient | None = None):
        self.settings = settings or ServiceSettings()
        self.settings.check_security()
        import torch
        torch.set_num_threads(self.settings.torch_threads)  # process-wide; see the setting
        self.flink = flink or FlinkRestClient(self.settings.flink_rest_url,
                                              self.settings.flink_timeout_s)
        self.spec = cluster_spec if cluster_spec is not None else \
            self._spec_from_settings()
        self.cluster = to_cluster_spec(self.spec, self.settings.gpu_model)
        self.metrics = ServiceMetrics()
        self.store = ModelStore(self.settings.resolved_model_dir(), keep=self.settings.max_models)
        self.learner = OnlineLearner(
            self.cluster, self.store, self.settings.learning,
            publish_every=self.settings.publish_every,
            min_records_first_version=self.settings.min_records_first_version,
            initial_model=self.settings.initial_model, metrics=self.metrics,
            history_per_node=self.settings.history_per_node, judge=self.settings.judge,
            trial=self.settings.version_trial(), publish_prior=self.settings.publish_prior,
            cpu_share=self.settings.learner_cpu_share,
            absent_after_s=self.settings.absent_after_s)
        self.tenants = TenantReport()
        self.ingest = FeedbackIngest(self.learner, self.metrics, self.settings.dedup_capacity,
                                     reports=[self.tenants])
        self.consumer = None
        if self.settings.consume_feedback:
            self.consumer = FeedbackConsumer(
                consumer_config(self.settings.bootstrap_servers, self.settings.group_id),
                self.settings.feedback_topic, self.ingest, self.settings.poll_timeout_s,
                self.settings.consume_batch)
        self.serving = ServingPolicy(self.store, self.cluster, self.learner.costs,
                                     self.settings.fallback)
        observe = getattr(self.serving.fallback, "observe_completion", None)
        if observe is not None:  # a rule that learns from outcomes (liquid, dual_agent, ...)
            self.ingest.observers.append(observe)
        self.app = create_app(self)
        self._server = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None

    def _spec_from_settings(self):
        """``settings.cluster_spec``; when that is the default nobody chose and Flink lists
        none of its nodes, the cluster's own TaskManagers (:func:`spec_of_live_cluster`)."""
        spec = _load_spec(self.settings.cluster_spec)
        if self.settings.cluster_spec != "default":
            return spec
        try:
            registered = self.flink.taskmanagers()
        except (FlinkUnreachable, FlinkRestError) as exc:
            # not up yet: the spec, and /plan follows the cluster when it is; the spec is
            # not looked at again, so say what to do if the cluster is another one
            log.warning("placement service: Flink's REST API (%s) did not answer (%s): serving "
                        "the default cluster spec %s; if the cluster's TaskManagers are "
                        "others, start the service after the cluster or set "
                        "service.cluster_spec", self.settings.flink_rest_url, exc,
                        [tm.id for tm in spec.taskmanagers])
            return spec
        try:
            spec, note = spec_of_live_cluster(spec, registered)
        except ValueError as exc:   # an answer no spec can be made of: the spec, as it is
            log.warning("placement service: the TaskManagers Flink lists make no spec (%s); "
                        "serving %s", exc, self.settings.cluster_spec)
            return spec
        if note:
            log.warning("placement service: %s", note)
        return spec

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("the service is not started")
        host = self.settings.host
        host = "127.0.0.1" if host in ("0.0.0.0", "") else host
        return f"http://{host if ':' not in host else f'[{host}]'}:{self.port}"

    def _uvicorn(self):
        import uvicorn
        config = uvicorn.Config(self.app, host=self.settings.host, port=self.settings.port,
                                log_level="warning", access_log=False, lifespan="off")
        return uvicorn.Server(config)

    def _start_workers(self) -> None:
        self.learner.start()
        if self.consumer is not None:
            self.consumer.start()

    def _stop_workers(self) -> None:
        if self.consumer is not None:
            self.consumer.stop()
        self.learner.stop()

    def start(self, timeout_s: float = 30.0) -> "PlacementService":
        """Run everything in background threads; returns once the HTTP port is open."""
        if self._thread is not None:
            return self
        self._start_workers()
        self._server = self._uvicorn()
        self._thread = threading.Thread(target=self._server.run, name="streamplace-http",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the placement service did not start on "
                                   f"{self.settings.host}:{self.settings.port} (port in use?)")
            time.sleep(0.02)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the HTTP server, then the consumer (which closes its Kafka consumer) and the
        learner; safe to call twice."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self._server = None
        self._stop_workers()

    def serve_forever(self) -> None:
        """The CLI's foreground mode: uvicorn in this thread (Ctrl-C ends it cleanly)."""
        self._start_workers()
        try:
            self._server = self._uvicorn()
            self.port = self.settings.port
            self._server.run()
        except KeyboardInterrupt:
            # uvicorn shut down gracefully on SIGINT and re-raised it for the default handler
            pass
        finally:
            self._server = None
            self._stop_workers()

    def __enter__(self) -> "PlacementService":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
