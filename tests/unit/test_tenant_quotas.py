"""Tenant quotas and fair share in the router (issue 17, part 3): scenario tables of the rule,
the router feeding it, the demoted priority forwarded to the executor, settings, and no change
at all without quotas."""

from __future__ import annotations

import pytest

from pyflink_jobs.hook import HookSettings, StreamplaceHook
from pyflink_jobs.router import Router, RouterNode, RouterSettings
from pyflink_jobs.router_function import RouterFunction
from pyflink_jobs.task_pipeline import HOOK_FIELD_NAMES, PipelineSettings, parse_args
from pyflink_jobs.tenant_quotas import (OVERFLOW, QuotaSettings, TenantQuotas,
                                        event_tenant_and_priority, forwarded_event,
                                        parse_tenant_shares)
from workload.codec import decode, encode
from workload.task_attributes import MIN_PRIORITY, task_slo_from_attributes
from flink_fakes import FakeContext, MetricsContext

NODES = [RouterNode("tm_a", cpu_cores=2), RouterNode("tm_b", cpu_cores=1)]


class FakeClock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def flags(verdicts) -> str:
    return "".join("D" if v.demoted else "." for v in verdicts)


# -- the rule on its own: scenario tables ----------------------------------------------------

# (name, shares, tenants in routing order (nothing completes), expected: D = demoted)
SCENARIOS = [
    ("1:1, alternating evenly: nobody demoted", {"a": 1, "b": 1}, "abababab", "........"),
    ("1:1, b alternating first: nobody demoted", {"a": 1, "b": 1}, "babababa", "........"),
    ("1:1, a floods after b: a's tasks beyond its share demoted, b's not",
     {"a": 1, "b": 1}, "baaaaaab", "....DDD."),
    ("1:1, a floods between b's tasks: b never demoted",
     {"a": 1, "b": 1}, "baaaaaabaaab", "....DDD.DDD."),
    ("3:1 alternating: b demoted from its third task, a never",
     {"a": 3, "b": 1}, "abababab", ".....D.D"),
    ("3:1, a floods: a may hold three quarters", {"a": 3, "b": 1}, "b" + "a" * 12,
     "." * 11 + "DD"),
    ("alone (b never seen): a holds everything", {"a": 1, "b": 1}, "aaaaaaaaaa", ".........."),
    ("unknown tenant c, default weight 1 like a", {"a": 1}, "acccccc", "....DDD"),
    ("unknown tenant c with *=3: holds three quarters", {"a": 1, "*": 3}, "acccccc", "......."),
    ("no tenant attribute counts as tenant '' (default weight)", {"a": 1}, "a" + "_" * 6,
     "....DDD"),
]


@pytest.mark.parametrize("name,shares,order,expected", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_fair_share_scenarios(name, shares, order, expected):
    quotas = TenantQuotas(shares)
    verdicts = [quotas.admit("" if t == "_" else t, 0, now_s=0.0) for t in order]
    assert flags(verdicts) == expected
    # Demoted or not, every task is counted in flight under its tenant.
    assert quotas.total_in_flight == len(order)


def test_a_demoted_task_loses_the_step_of_priority_floored_at_the_minimum_and_says_why():
    quotas = TenantQuotas({"a": 1, "b": 1}, demotion_step=50)
    for t in "baaa":
        assert not quotas.admit(t, 0, 0.0).demoted
    verdict = quotas.admit("a", 7, 0.0)
    assert (verdict.demoted, verdict.requested, verdict.priority) == (True, 7, -43)
    assert verdict.reason == ("tenant 'a' over its fair share: 4 of 5 in flight > 50% + slack; "
                              "priority 7 -> -43")
    assert quotas.admit("a", -90, 0.0).priority == MIN_PRIORITY
    assert quotas.admit("b", 5, 0.0).priority == 5  # in quota: untouched


def test_completions_free_the_share():
    quotas = TenantQuotas({"a": 1, "b": 1})
    assert flags(quotas.admit(t, 0, 0.0) for t in "baaaa") == "....D"
    for _ in range(3):
        quotas.release("a", latency_s=0.5)
    assert flags([quotas.admit("a", 0, 0.0)]) == "."  # 2 of 3 in flight: within the share
    stats = quotas.stats()["a"]
    assert (stats["in_flight"], stats["routed"], stats["demoted"], stats["completed"]) == \
        (2, 5, 1, 3)
    assert stats["mean_latency_ms"] == pytest.approx(500.0)
    quotas.release("a")  # expired: no completion, no latency
    assert quotas.stats()["a"]["completed"] == 3 and quotas.in_flight("a") == 1
    quotas.release("nobody")  # unknown keys are ignored
    assert quotas.total_in_flight == 2


def test_a_tenant_keeps_its_share_for_the_window_after_its_last_task():
    quotas = TenantQuotas({"a": 1, "b": 1}, window_s=10.0)
    quotas.admit("b", 0, now_s=0.0)
    quotas.release("b", latency_s=0.1)  # b has nothing in flight now
    within = flags(quotas.admit("a", 0, now_s=5.0) for _ in range(5))
    assert within == "..DDD"  # b still active: a holds half (+ slack + grace)
    for _ in range(5):
        quotas.release("a")
    after = flags(quotas.admit("a", 0, now_s=20.0) for _ in range(5))
    assert after == "....."  # b idle for longer than the window: a alone


def test_the_table_is_bounded_lru_of_idle_tenants_then_overflow():
    quotas = TenantQuotas({"a": 1}, max_tenants=2)
    assert quotas.admit("x", 0, 0.0).tenant == "x"
    assert quotas.admit("y", 0, 0.0).tenant == OVERFLOW  # a is configured, x busy: refused
    quotas.release("x")
    assert quotas.admit("z", 0, 0.0).tenant == "z"  # x idle: evicted (LRU)
    assert set(quotas.stats()) == {"a", "z", OVERFLOW} and quotas.evicted == 1
    assert quotas.admit("a", 0, 0.0).tenant == "a"  # configured tenants are always tracked
    for i in range(100):  # a flood of new names never grows the table
        quotas.admit(f"t{i}", 0, 0.0)
    assert len(quotas.stats()) <= 3


BAD_SHARES = [
    ("no weight", "a"), ("empty weight", "a="), ("zero", "a=0"), ("negative", "a=-1"),
    ("nan", "a=nan"), ("infinite", "a=inf"), ("huge", "a=1e7"), ("not a number", "a=x"),
    ("twice", "a=1,a=2"), ("bad name", "a b=1"), ("non-ascii name", "é=1"),
    ("long name", "x" * 65 + "=1"), ("empty name", "=1"),
]


@pytest.mark.parametrize("name,text", BAD_SHARES, ids=[b[0] for b in BAD_SHARES])
def test_bad_tenant_shares_are_refused_everywhere(name, text):
    with pytest.raises(ValueError):
        parse_tenant_shares(text)
    with pytest.raises(ValueError):
        HookSettings(tenant_shares=text)
    with pytest.raises(ValueError):
        HookSettings.from_env({"STREAMPLACE_HOOK_TENANT_SHARES": text})
    with pytest.raises(ValueError):
        PipelineSettings(placement="hook", tenant_shares=text)


@pytest.mark.parametrize("changes", [{"window_s": -1.0}, {"slack": float("nan")}, {"grace": -1},
                                     {"demotion_step": 0}, {"max_tenants": 0},
                                     {"default_weight": 0.0}, {"shares": {"bad name": 1.0}}])
def test_bad_quota_settings_are_refused(changes):
    with pytest.raises(ValueError):
        QuotaSettings(**{"shares": {"a": 1.0}, **changes})


def test_settings_travel_from_the_pipeline_and_the_environment_to_the_router():
    assert parse_tenant_shares(" a = 3 , b=1,, *=0.5 ") == {"a": 3.0, "b": 1.0, "*": 0.5}
    assert QuotaSettings.from_text("") is None
    settings = parse_args(["--placement", "hook", "--tenant-shares", "a=3,b=1"])
    hook_settings = HookSettings.from_fields(settings, HOOK_FIELD_NAMES)
    assert hook_settings.tenant_shares == {"a": 3.0, "b": 1.0}
    hook = StreamplaceHook(HookSettings(nodes=NODES, tenant_shares="a=3,*=2"))
    hook.nodes = NODES
    quotas = hook.router_settings().tenant_quotas
    assert (dict(quotas.shares), quotas.default_weight) == ({"a": 3.0}, 2.0)
    env = HookSettings.from_env({"STREAMPLACE_HOOK_TENANT_SHARES": "a=1"})
    assert env.tenant_shares == {"a": 1.0}
    with pytest.raises(ValueError, match="placement='hook'"):
        PipelineSettings(tenant_shares="a=1")  # only the hook's router can enforce them
    # Off by default everywhere.
    hook = StreamplaceHook(HookSettings(nodes=NODES))
    hook.nodes = NODES
    assert hook.router_settings().tenant_quotas is None and PipelineSettings().tenant_shares == ""


# -- the router -------------------------------------------------------------------------------

def task_event(i, tenant=None, priority=None, **attributes):
    if tenant is not None:
        attributes["tenant"] = tenant
    if priority is not None:
        attributes["priority"] = str(priority)
    return {"task_id": f"t{i}", "app_id": "video_synopsis", "input_size": 4096,
            "submitted_at_ms": 0, "expected_work_ms": None, "attributes": attributes}


def feedback(node, completed, at_ms=1_000_000):
    return {"node_id": node, "emitted_at_ms": at_ms, "cpu_util": 0.0, "gpu_util": 0.0,
            "host_mem_util": 0.1, "gpu_mem_util": 0.0, "uplink_bytes_per_s": 0.0,
            "downlink_bytes_per_s": 0.0, "queue_depth": 0, "in_flight": 0,
            "completed": [{"task_id": t, "app_id": "video_synopsis", "input_size": 4096,
                           "queue_ms": 1.0, "service_ms": 2.0, "finished_at_ms": at_ms}
                          for t in completed], "sequence": at_ms}


def quota_router(shares="a=1,b=1", **kw):
    return Router(RouterSettings(nodes=NODES, policy="least_outstanding",
                                 tenant_quotas=QuotaSettings.from_text(shares), **kw),
                  clock=FakeClock())


def test_the_router_demotes_a_flooding_tenant_and_forwards_the_lowered_priority():
    router = quota_router()
    order = ["b"] + ["a"] * 6 + ["b"]
    forwarded, decisions = [], []
    for i, tenant in enumerate(order):
        event = task_event(i, tenant, priority=3)
        decision, _, out = router.route_task_event(router_task(event), event)
        decisions.append(decision)
        forwarded.append(out)
        assert event["attributes"]["priority"] == "3"  # the input event is never changed
    priorities = [task_slo_from_attributes(e["attributes"]).priority for e in forwarded]
    assert priorities == [3, 3, 3, 3, -97, -97, -97, 3]
    assert [d.node for d in decisions] == ["tm_a", "tm_b"] * 4  # routed as usual
    assert "demoted: tenant 'a' over its fair share" in decisions[4].reason
    assert "demoted" not in decisions[3].reason
    stats = router.stats()
    assert stats["demoted"] == 3
    assert {t: (s["in_flight"], s["routed"], s["demoted"]) for t, s in stats["tenants"].items()} \
        == {"a": (6, 6, 3), "b": (2, 2, 0)}


def router_task(event):
    from workload.model import Task
    return Task(event["task_id"], event["app_id"], int(event["input_size"]))


def test_feedback_completions_free_the_share_and_are_reported_per_tenant():
    router = quota_router()
    node_of = {}
    for i, tenant in enumerate("baaaa"):
        decision, _ = router.route_event(task_event(i, tenant))
        node_of[f"t{i}"] = decision.node
    assert router.stats()["tenants"]["a"]["demoted"] == 1
    router.clock.now += 0.25
    for node in ("tm_a", "tm_b"):  # each node reports its own tasks
        router.on_feedback(feedback(node, [t for t in ("t1", "t2", "t3") if node_of[t] == node]))
    router.on_feedback(feedback(node_of["t1"], ["t1"]))  # a duplicate report: counted once
    a = router.stats()["tenants"]["a"]
    assert (a["in_flight"], a["completed"]) == (1, 3)
    assert a["mean_latency_ms"] == pytest.approx(250.0)
    event = task_event(9, "a")
    _, _, out = router.route_task_event(router_task(event), event)
    assert out is event  # within its share again: forwarded untouched


def test_expiry_and_replays_keep_the_tenant_counts_exact():
    router = quota_router(in_flight_timeout_s=10.0)
    router.route_event(task_event(1, "a"))
    router.route_event(task_event(1, "a"))  # replayed record: counted once
    assert router.stats()["tenants"]["a"]["in_flight"] == 1
    router.clock.now += 11.0
    router.route_event(task_event(2, "b"))  # the expiry runs at the next decision
    tenants = router.stats()["tenants"]
    assert (tenants["a"]["in_flight"], tenants["a"]["completed"]) == (0, 0)
    assert router.quotas.total_in_flight == 1


def test_invalid_attributes_count_as_no_tenant_and_are_forwarded_untouched():
    assert event_tenant_and_priority({"attributes": {"tenant": "a b"}}) == ("", 0, False)
    assert event_tenant_and_priority({}) == ("", 0, True)
    router = quota_router()
    event = task_event(1, "a", priority=None, deadline_ms="nan")
    _, _, out = router.route_task_event(router_task(event), event)
    assert out is event and router.stats()["tenants"][""]["in_flight"] == 1
    assert forwarded_event(event, None) is event


def test_without_quotas_nothing_is_counted_and_the_routed_events_are_unchanged_byte_for_byte():
    function = RouterFunction(RouterSettings(nodes=NODES, policy="least_outstanding"))
    function.open(FakeContext())
    assert function.router.quotas is None and "tenants" not in function.router.stats()
    for i in range(12):
        raw = encode("TaskEvent", task_event(i, "a", priority=5))
        [(_, routed)] = list(function.process_element((raw, "tasks", 0, i), FakeContext()))
        assert encode("TaskEvent", routed.record) == raw
        assert "demoted" not in routed.record.get("attributes", {}).get("priority", "")
    assert all(len(entry) == 3 for entry in function.router.ledger.entries.values())
    function.close()


def test_the_router_function_forwards_demoted_events_and_registers_tenant_gauges():
    function = RouterFunction(RouterSettings(nodes=NODES, policy="least_outstanding",
                                             tenant_quotas=QuotaSettings.from_text("a=1,b=1")))
    context = MetricsContext()
    function.open(context)
    raws, outs = [], []
    for i, tenant in enumerate("baaaa"):
        raws.append(encode("TaskEvent", task_event(i, tenant)))
        [(_, routed)] = list(function.process_element((raws[-1], "tasks", 0, i), FakeContext()))
        outs.append(routed)
    assert [encode("TaskEvent", r.record) == raw for r, raw in zip(outs, raws)] == \
        [True, True, True, True, False]  # only the demoted one changes
    demoted = decode("TaskEvent", encode("TaskEvent", outs[-1].record))  # survives Avro
    assert task_slo_from_attributes(demoted["attributes"]).priority == -100
    gauges = {name: fn() for name, fn in context.metrics.gauges.items()
              if name.startswith("streamplace_tenant")}
    assert gauges == {"streamplace_tenants_demoted": 1, "streamplace_tenants_in_flight": 5,
                      "streamplace_tenant_in_flight_a": 4, "streamplace_tenant_routed_a": 4,
                      "streamplace_tenant_demoted_a": 1, "streamplace_tenant_completed_a": 0,
                      "streamplace_tenant_in_flight_b": 1, "streamplace_tenant_routed_b": 1,
                      "streamplace_tenant_demoted_b": 0, "streamplace_tenant_completed_b": 0}
    function.close()


def test_user_operator_records_count_as_one_untenanted_tenant_and_are_never_changed():
    router = quota_router()
    from workload.model import Task
    for i in range(10):
        decision, _ = router.route(Task(f"r{i}", "enrich", 10))
        assert "demoted" not in decision.reason
    assert router.stats()["tenants"][""]["in_flight"] == 10
