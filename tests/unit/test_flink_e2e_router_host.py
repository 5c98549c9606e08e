"""The engine benchmark's pinned router (``--router-host``): the hook variants' router, source
and sinks on one TaskManager in every run, so runs differ only by their policy, and each run
records where Flink put its operators."""

from types import SimpleNamespace

import pytest

from benchmarks.flink_e2e import (MIRRORED_VARIANT, OVERHEAD_VARIANTS, VARIANTS, Bench, main,
                                  output_name)
from pyflink_jobs.hook import HookSettings
from pyflink_jobs.task_pipeline import HOOK_FIELD_NAMES, PipelineSettings, parse_args


def _bench(router_host=""):
    bench = Bench("hosts", payloads=True, router_host=router_host)
    bench.service = SimpleNamespace(url="http://service:8000")
    return bench


@pytest.mark.parametrize("variant", VARIANTS + OVERHEAD_VARIANTS + [MIRRORED_VARIANT],
                         ids=lambda v: v[0])
def test_only_the_measured_hook_variants_get_the_pinned_router(variant):
    label, _, settings = variant
    pinned = _bench("tm_b").job_settings(settings)
    loose = _bench().job_settings(settings)
    measured_hook = settings.get("placement") == "hook" and settings.get("executor") != "checksum"
    assert pinned.get("router_host") == ("tm_b" if measured_hook else None)
    assert "router_host" not in loose
    # everything else is the same either way
    assert {k: v for k, v in pinned.items() if k != "router_host"} == loose


def test_a_router_host_that_is_no_taskmanager_is_refused(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--spec", "hosts", "--router-host", "tm_x", "--replot"])
    assert stop.value.code == 2
    assert "tm_x" in capsys.readouterr().err


def test_pinned_results_have_their_own_name():
    assert output_name("hosts", False, True, "tm_b") == "flink_e2e_hosts-payload_router-tm_b"
    assert output_name("hosts", False, True) == "flink_e2e_hosts-payload"


def test_the_pipeline_hands_the_router_host_to_the_hook():
    settings = parse_args(["--placement", "hook", "--router-host", "tm_b"])
    assert HookSettings.from_fields(settings, HOOK_FIELD_NAMES).router_host == "tm_b"
    assert PipelineSettings(placement="hook").router_host == ""


@pytest.mark.parametrize("placement", ["single", "rebalance"])
def test_a_router_host_without_the_hook_is_refused(placement):
    # only the hook has a router: a pinned host asked of Flink's own placement would be ignored
    with pytest.raises(ValueError, match="router_host"):
        PipelineSettings(placement=placement, router_host="tm_b")


@pytest.mark.parametrize("per_node,expected", [
    ({"tm_a": 1500, "tm_b": 0, "tm_c": 0}, {"tm_a": 2}),            # all on one 2-slot host
    ({"tm_a": 0, "tm_b": 500, "tm_c": 1000}, {"tm_b": 1, "tm_c": 2}),
    ({"tm_a": 500, "tm_b": 500, "tm_c": 500}, {"tm_a": 1, "tm_b": 1, "tm_c": 1}),
])
def test_the_mirrored_hook_runs_only_where_rebalance_ran(per_node, expected):
    """Before 2026-12-05 the mirrored plan named only the hosts rebalance used, and the hook
    gave every other host one executor: the "same layout" run was spread over all three."""
    from benchmarks.flink_e2e import mirrored_plan
    from pyflink_jobs.hook import parse_plan
    from pyflink_jobs.router import RouterNode
    plan = mirrored_plan(per_node, capacity={"tm_a": 2, "tm_b": 2, "tm_c": 2})
    settings = HookSettings(nodes=[RouterNode(n) for n in sorted(per_node)],
                            plan=parse_plan(plan))
    assert {n.node_id: n.instances for n in settings.resolved_nodes()} == expected
