"""Prometheus metrics of the placement service, on a private registry per service instance.

A private :class:`prometheus_client.CollectorRegistry` (not the process-global default) lets
several services, and the unit tests, live in one process without "duplicated timeseries" errors.

Example::

    metrics = ServiceMetrics()
    metrics.feedback_messages.inc()
    text = metrics.render()   # what GET /metrics returns
    metrics.value("feedback_messages_total")   # 1.0 (sample names end in _total)
"""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from workload.refusals import refused_total

__all__ = ["ServiceMetrics", "CONTENT_TYPE_LATEST"]


def _number(value) -> float:
    """A finite float, or NaN (Prometheus' "no valid value") for anything else: hostile or
    broken feedback must not break /metrics."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan
    return number if math.isfinite(number) else math.nan


class ServiceMetrics:
    """Every metric the service exposes (names start with ``streamplace_service_``)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        p = "streamplace_service_"
        self.feedback_messages = Counter(
            p + "feedback_messages", "NodeFeedback messages consumed from Kafka (decoded)",
            registry=r)
        self.feedback_records = Counter(
            p + "feedback_records", "completed-task records (TaskTiming) handed to the learner",
            registry=r)
        self.duplicates = Counter(
            p + "duplicates_dropped", "re-delivered feedback dropped, by what identified it: "
            "kind=sequence (a whole NodeFeedback seen before), kind=task_id (a TaskTiming seen "
            "before)", ["kind"], registry=r)
        self.undecodable = Counter(
            p + "undecodable_messages", "feedback messages that are not a NodeFeedback "
            "(skipped)", registry=r)
        self.commit_failures = Counter(
            p + "commit_failures", "offset commits that failed (messages will be re-read, "
            "duplicates dropped)", registry=r)
        self.decisions = Counter(
            p + "decisions", "placement decisions served by POST /decide, by source",
            ["source"], registry=r)
        self.unusable_decisions = Counter(
            p + "unusable_decisions", "policy decisions POST /decide did not return, by "
            "problem: problem=non_finite_scores (NaN/inf scores, e.g. a poisoned model), "
            "problem=unknown_node (a node it was not offered), problem=raised (the policy "
            "raised, e.g. a model whose numbers overflow); each was decided again by the "
            "fallback rule (or answered 503 when that failed too)", ["problem"], registry=r)
        self.model_version = Gauge(
            p + "model_version", "newest published model version (0: none yet)", registry=r)
        self.training_steps = Counter(
            p + "training_steps", "gradient steps taken by the online learner", registry=r)
        self.records_trained = Counter(
            p + "records_trained", "task records the online learner trained on", registry=r)
        self.learning_rejections = Counter(
            p + "learning_rejections", "what the online learner refused: kind=timing (a "
            "timing with missing, non-finite or implausible fields, not learned from), "
            "kind=model (a candidate model with non-finite or implausible outputs or a "
            "held-back error far above the last good version's; rolled back, not published), "
            "kind=queue_full (the oldest queued example dropped: the training queue was full)",
            ["kind"], registry=r)
        self.queue_depth = Gauge(
            p + "node_queue_depth", "tasks at each node (queued + in flight) in its latest "
            "NodeFeedback", ["node"], registry=r)
        # The rest of each node's latest NodeFeedback, for dashboards (docker/grafana): set
        # from the newest report per node whenever /metrics is read.
        self.node_cpu_util = Gauge(
            p + "node_cpu_util", "CPU utilisation in [0, 1] of each node (its TaskManager and "
            "Python workers) in its latest NodeFeedback", ["node"], registry=r)
        self.node_gpu_util = Gauge(
            p + "node_gpu_util", "GPU utilisation in [0, 1] of each node's GPUs (NVML; 0 without "
            "GPUs) in its latest NodeFeedback", ["node"], registry=r)
        self.node_gpu_mem_util = Gauge(
            p + "node_gpu_mem_util", "GPU memory utilisation in [0, 1] of each node in its "
            "latest NodeFeedback", ["node"], registry=r)
        self.node_host_mem_util = Gauge(
            p + "node_host_mem_util", "memory utilisation in [0, 1] of each node in its latest "
            "NodeFeedback", ["node"], registry=r)
        self.feedback_age = Gauge(
            p + "node_feedback_age_seconds", "age of each node's latest NodeFeedback when last "
            "read", ["node"], registry=r)
        self.node_learning_refused = Gauge(
            p + "node_learning_refused", "observations a node's online learners refused to "
            "learn from (non-finite or implausible; per learner and reason in GET /cluster), from "
            "its latest feedback", ["node"], registry=r)
        # Per tenant (placement.service.tenants: at most 256 tenants + 3 pools, so the label
        # set is bounded), set from the report whenever /metrics is read.
        self.tenant_completed = Gauge(
            p + "tenant_completed", "tasks completed per tenant (TaskEvent 'tenant' "
            "attribute; (none): no tenant)", ["tenant"], registry=r)
        self.tenant_p99_latency = Gauge(
            p + "tenant_p99_latency_seconds", "p99 latency from the router's decision of "
            "each tenant's newest 2,000 completed tasks", ["tenant"], registry=r)
        self.tenant_deadline_misses = Gauge(
            p + "tenant_deadline_misses", "completed tasks of each tenant that missed their "
            "deadline_ms", ["tenant"], registry=r)
        self.tenant_fairness = Gauge(
            p + "tenant_jain_mean_latency", "Jain's fairness index of the tenants' mean "
            "latencies (1: alike; NaN: fewer than one tenant with latencies)", registry=r)
        # Make the labelled counters show up (at 0) before the first event.
        for kind in ("sequence", "task_id"):
            self.duplicates.labels(kind=kind)
        for source in ("model", "fallback"):
            self.decisions.labels(source=source)
        for problem in ("non_finite_scores", "unknown_node", "raised"):
            self.unusable_decisions.labels(problem=problem)

    def set_node_feedback(self, node: str, record) -> None:
        """Export a node's latest NodeFeedback (queue depth = queued + in flight, utilisations);
        a missing, non-numeric or non-finite value is exported as NaN."""
        self.queue_depth.labels(node=node).set(_number(record.get("in_flight")) +
                                               _number(record.get("queue_depth")))
        self.node_cpu_util.labels(node=node).set(_number(record.get("cpu_util")))
        self.node_gpu_util.labels(node=node).set(_number(record.get("gpu_util")))
        self.node_gpu_mem_util.labels(node=node).set(_number(record.get("gpu_mem_util")))
        self.node_host_mem_util.labels(node=node).set(_number(record.get("host_mem_util")))
        self.node_learning_refused.labels(node=node).set(
            refused_total(record.get("learning_refused")))

    def set_tenants(self, summary: dict) -> None:
        """Export a :meth:`TenantReport.summary` (missing numbers as NaN)."""
        for tenant, figures in summary.get("tenants", {}).items():
            self.tenant_completed.labels(tenant=tenant).set(_number(figures.get("completed")))
            p99 = _number(figures.get("p99_latency_ms"))
            self.tenant_p99_latency.labels(tenant=tenant).set(p99 / 1000.0)
            self.tenant_deadline_misses.labels(tenant=tenant).set(
                _number(figures.get("deadlines_missed")))
        self.tenant_fairness.set(_number(summary.get("jain_mean_latency")))

    def render(self) -> bytes:
        """The Prometheus text exposition format."""
        return generate_latest(self.registry)

    def value(self, name: str, **labels) -> float:
        """A sample's current value, e.g. ``value("duplicates_dropped_total", kind="sequence")``."""
        sample = self.registry.get_sample_value("streamplace_service_" + name, labels or None)
        return float(sample or 0.0)
