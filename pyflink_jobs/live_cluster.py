"""The TaskManagers a hooked job's cluster really runs, read from its REST API when the job is
built, and what the hook does when its cluster spec names other ones.

Why: the hook pins one executor operator to each node of its cluster spec (``HookSettings.
cluster_spec``, "default" unless set). On a cluster started from another spec, or a user's own
cluster whose TaskManagers have other ids, those pins request external resources that no
TaskManager offers, and the job waited for slots that never came (Flink's slot request timeout,
then restarts), with nothing saying why. Now, when the job is built (``flink run``, not the local
mini cluster):

- the job's own configuration says where the JobManager's REST API is (``rest.address`` /
  ``rest.port``, which ``flink run`` puts there); an explicitly set ``rest_url`` is the fallback.
  Without either, or when it does not answer within :data:`LIVE_READ_TIMEOUT_S`, nothing changes;
- when some of the spec's nodes are registered, nothing changes either (the others may still be
  starting; a warning names them);
- when none is, and the spec is the default one that nobody chose, the hook places on the live
  TaskManagers that can host its executors (a warning says so); when the spec or the nodes were
  chosen, the job is refused with both lists and the fix.

A TaskManager can host pinned executors when it offers an external resource named after its own
id, amount at least 1 (what ``streamplace cluster start`` gives each one, and what ``streamplace
doctor`` checks); ``routing="rest_partitioner"`` needs only its id.

Example::

    live = read_live_taskmanagers("http://127.0.0.1:8081")   # None: not reachable
    nodes, note = fit_nodes_to_cluster(spec_nodes, live, "pinned", chosen=False)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from placement.service.flink_rest import (RegisteredTaskManager, listed_taskmanager,
                                          registered_taskmanager)
from pyflink_jobs.flink_ops import ROUTER_RESOURCE
from pyflink_jobs.router import RouterNode
from workload.model import DEFAULT_GPU_MODEL

__all__ = ["LiveTaskManager", "LIVE_READ_TIMEOUT_S", "MAX_LIVE_TASKMANAGERS",
           "fit_nodes_to_cluster", "job_rest_url", "live_taskmanagers_from",
           "read_live_taskmanagers", "read_live_taskmanagers_of", "drop_unknown_plan",
           "retire_unregistered"]

log = logging.getLogger(__name__)

#: Seconds the REST read may take while the job is built: a JobManager that does not answer
#: must not hold up a submission that worked without this check.
LIVE_READ_TIMEOUT_S = 2.0
#: TaskManagers read at most (a hostile or broken endpoint cannot make the hook build a job of
#: millions of operators); more are refused as an unusable answer.
MAX_LIVE_TASKMANAGERS = 1024
#: ``HookSettings.rest_url``'s default: not used to read TaskManagers unless set on purpose, since
#: a default address on the submitting machine may be another cluster's
DEFAULT_REST_URL = "http://127.0.0.1:8081"


@dataclass(frozen=True)
class LiveTaskManager:
    """One registered TaskManager: its id, the amount of the external resource named after
    it (0: none, so it cannot host pinned executors), its CPU cores as REST reports them, its
    units of the colocated routers' resource, and for the cost model its GPUs (Flink's GPU
    plugin's ``gpu`` resource) and host memory (task heap + managed, the spec's rule)."""

    node_id: str
    own_resource: float = 0.0
    cpu_cores: int = 1
    router_resource: float = 0.0   # units of streamplace_router (routing "colocated")
    gpus: int = 0
    #: REST silent: the cluster spec's default task heap + managed memory (256 + 256 MB), as
    #: the service's spec of this TaskManager has
    memory_gb: float = RegisteredTaskManager("").memory_gb

    @property
    def hosts_pinned_executors(self) -> bool:
        return self.own_resource >= 1


def live_taskmanagers_from(answer) -> list[LiveTaskManager] | None:
    """``GET /taskmanagers``'s JSON as :class:`LiveTaskManager` s, sorted by id; None when the
    answer is not that shape (too many, ids that are not short strings, duplicates)."""
    entries = answer.get("taskmanagers") if isinstance(answer, dict) else None
    if not isinstance(entries, list) or len(entries) > MAX_LIVE_TASKMANAGERS:
        return None
    live = {}
    for entry in entries:
        tm = registered_taskmanager(listed_taskmanager(entry))   # the service's reading too
        if tm is None or tm.node_id in live:
            return None
        live[tm.node_id] = LiveTaskManager(tm.node_id, tm.own_resource, tm.cpu_cores,
                                           tm.resource(ROUTER_RESOURCE), tm.gpus,
                                           tm.memory_gb)
    return [live[k] for k in sorted(live)]


def read_live_taskmanagers(rest_url: str, timeout_s: float = LIVE_READ_TIMEOUT_S
                           ) -> list[LiveTaskManager] | None:
    """The cluster's registered TaskManagers, or None when its REST API cannot be read (down,
    wrong address, not JSON, an unusable answer): the caller then changes nothing."""
    from placement.service.flink_rest import FlinkRestClient, FlinkRestError, FlinkUnreachable
    try:
        answer = FlinkRestClient(rest_url, timeout_s=timeout_s).get("/taskmanagers")
    except (FlinkUnreachable, FlinkRestError, ValueError) as exc:
        log.info("streamplace hook: TaskManagers not read from %s (%s): the cluster spec's "
                 "nodes are used as they are", rest_url, exc)
        return None
    live = live_taskmanagers_from(answer)
    if live is None:
        log.warning("streamplace hook: %s/taskmanagers did not answer a usable list: the "
                    "cluster spec's nodes are used as they are", rest_url)
    return live


def job_rest_url(env, explicit_url: str = "") -> str:
    """Where the job's JobManager answers REST: ``rest.address`` / ``rest.port`` of the job's
    configuration (``flink run`` puts the cluster's there), else ``explicit_url``; "" when
    neither is known (then nothing is read: a default address could be another cluster's)."""
    from pyflink_jobs.flink_ops import job_option
    address = job_option(env, "rest.address")
    port = job_option(env, "rest.port") or "8081"
    if address and port.isdigit() and 0 < int(port) < 65536:
        host = f"[{address}]" if ":" in address and not address.startswith("[") else address
        return f"http://{host}:{int(port)}"
    return explicit_url


def read_live_taskmanagers_of(env, rest_url: str = "") -> list[LiveTaskManager] | None:
    """:func:`read_live_taskmanagers` of the job's cluster (:func:`job_rest_url`; ``rest_url``
    counts only when it is not the default); None when its address is not known."""
    url = job_rest_url(env, "" if rest_url == DEFAULT_REST_URL else rest_url)
    return read_live_taskmanagers(url) if url else None


def fit_nodes_to_cluster(nodes: list[RouterNode], live: list[LiveTaskManager] | None,
                         routing: str, chosen: bool, spec: str = "default",
                         gpu_model: str = DEFAULT_GPU_MODEL) -> tuple[list[RouterNode], str]:
    """``nodes`` (from the spec or the settings) checked against the ``live`` TaskManagers:
    the nodes to build the job for, and a note for the log ("" when nothing is worth saying).

    ``chosen``: the spec or the nodes were set by the user (refuse a mismatch instead of
    replacing their nodes). Raises ValueError when no node the hook would use is live and the
    cluster offers nothing it could use instead, or the nodes were chosen. Nodes made from
    ``live`` carry its GPUs as ``gpu_model`` (the hook's setting) and its memory."""
    if live is None or not live:   # unknown, or no TaskManager registered yet: nothing to say
        return nodes, ""
    chosen_nodes, note = _fit(nodes, live, routing, chosen, spec, gpu_model)
    if routing == "colocated":
        by_id = {tm.node_id: tm for tm in live}
        without = [n.node_id for n in chosen_nodes
                   if n.node_id in by_id and by_id[n.node_id].router_resource < 1]
        if without:
            raise ValueError(
                f"routing='colocated' runs one router on each node, each needing one unit of "
                f"the {ROUTER_RESOURCE} external resource there; {without} have none: add "
                f"{ROUTER_RESOURCE} to their external-resources with -D external-resource."
                f"{ROUTER_RESOURCE}.amount=1 (streamplace doctor checks it), or use "
                "routing='pinned'")
    return chosen_nodes, note


def _registered_split(wanted: list[str], live: list[LiveTaskManager], pinned: bool
                      ) -> tuple[dict[str, LiveTaskManager], list[str], list[str]]:
    """(the ``live`` TaskManagers the hook can place on, by id; the ``wanted`` ids among them;
    the ``wanted`` ids not among them): the one rule of :func:`fit_nodes_to_cluster` and
    :func:`retire_unregistered`. Pinned routing needs a TaskManager's own resource; an id the
    hook cannot name its operators and resources after (Flink's generated ids hold ':' and
    '-') is never usable."""
    from workload.cluster_spec import NODE_ID_PATTERN
    usable = {tm.node_id: tm for tm in live if (tm.hosts_pinned_executors or not pinned)
              and NODE_ID_PATTERN.fullmatch(tm.node_id)}
    return (usable, [n for n in wanted if n in usable],
            [n for n in wanted if n not in usable])


def _fit(nodes: list[RouterNode], live: list[LiveTaskManager], routing: str, chosen: bool,
         spec: str, gpu_model: str) -> tuple[list[RouterNode], str]:
    """:func:`fit_nodes_to_cluster` for a known, non-empty ``live``, before the colocated
    routers' check."""
    pinned = routing != "rest_partitioner"
    wanted = [n.node_id for n in nodes]
    usable, present, missing = _registered_split(wanted, live, pinned)
    if present:
        note = (f"nodes {missing} of the cluster spec are not registered TaskManagers with "
                f"their own resource (yet?); the cluster has {sorted(usable)}; their executors "
                "wait for them") if missing else ""
        return nodes, note
    what = ("TaskManagers offering an external resource named after their own id (amount "
            ">= 1)" if pinned else "TaskManagers") + " with ids of letters, digits and '_'"
    there = ", ".join(f"{tm.node_id} (resource {tm.own_resource:g})" for tm in live)
    if chosen or not usable:
        fix = ("Set the hook's cluster_spec (STREAMPLACE_HOOK_CLUSTER_SPEC, or "
               "StreamplaceHook.create(..., cluster_spec=...)) to the spec the cluster was "
               "started with, or give its nodes")
        if not usable and pinned:
            fix += ("; a cluster without streamplace's per-TaskManager resources can route "
                    "with routing='rest_partitioner', or start each TaskManager with "
                    "-D external-resources=<id> -D external-resource.<id>.amount=<slots> "
                    "(streamplace doctor checks it)")
        raise ValueError(f"the hook would place on {wanted} (cluster spec {spec!r}), but none "
                         f"of them is among the cluster's {what}; registered: {there}. {fix}")
    fitted = [RouterNode(tm.node_id, cpu_cores=tm.cpu_cores, instances=1, gpus=tm.gpus,
                         memory_gb=tm.memory_gb, gpu_model=gpu_model)
              for tm in usable.values()]
    return fitted, (f"none of the default cluster spec's nodes {wanted} is registered; the "
                    f"hook places on the cluster's {sorted(usable)} instead (set cluster_spec "
                    "to describe them: cores, GPUs, links)")


def retire_unregistered(spec_ids: list[str], live: list[LiveTaskManager] | None
                        ) -> dict[str, str]:
    """For a spec nobody chose, with pinned routing: the spec's nodes that are not registered
    TaskManagers with their own resource, each retired onto a registered one (round robin, in
    spec order), when at least one of the spec's nodes is registered; {} otherwise.

    Why: the job's graph is fixed when it is built, and an executor pinned to a TaskManager
    that is not there waits for a slot forever, so on a cluster of tm_a and tm_b the default
    spec's tm_c held up the whole job. A retired node keeps its executor (and its uid, so the
    tasks a savepoint holds in flight there still finish) on its host, fed nothing new: the
    job runs on the nodes it has (``HookSettings.retired``)."""
    if not live:
        return {}
    _, present, missing = _registered_split(spec_ids, live, pinned=True)
    if not present or not missing:
        return {}
    return {node: present[i % len(present)] for i, node in enumerate(missing)}


def drop_unknown_plan(plan: dict[str, int], nodes: list[RouterNode], source: str
                      ) -> dict[str, int]:
    """A plan the user did not write (the service's): the counts of the nodes this job has;
    the nodes it names that the job lacks are left out, with a warning (a node the plan does
    not name gets one executor)."""
    known = {n.node_id for n in nodes}
    unknown = sorted(set(plan) - known)
    if unknown:
        log.warning("streamplace hook: the %s's plan names nodes this job lacks %s: those are "
                    "left out; the job's nodes not in it get one executor each", source,
                    unknown[:20])
    return {node: count for node, count in plan.items() if node in known}
