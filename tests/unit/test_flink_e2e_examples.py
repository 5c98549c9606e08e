"""The examples benchmark's pure parts: the goals read from a summary, and how the hooked jobs
reach the placement service on emulated hosts (no cluster needed)."""

from types import SimpleNamespace

import pytest

from benchmarks.flink_e2e_examples import VARIANTS, service_access, verdict


def _row(label, mean):
    return {"variant": label, "records_per_s": None if mean is None else {"mean": mean}}


@pytest.mark.parametrize("means, expected", [
    # LDWP, default distribution, MCT, batching off, plain -> the four ratios
    ((30.0, 20.0, 25.0, 15.0, 10.0), (1.5, 3.0, 1.2, 2.0)),
    ((10.0, 20.0, 20.0, 20.0, 20.0), (0.5, 0.5, 0.5, 0.5)),
    # a variant that was not run (--only) or has no rate gives no ratio, not a crash
    ((10.0, None, 20.0, None, 5.0), (None, 2.0, 0.5, None)),
    ((None, 20.0, 20.0, 20.0, 20.0), (None, None, None, None)),
])
def test_verdict_ratios(means, expected):
    ldwp, default, mct, off, plain = means
    summary = [_row(VARIANTS[0][0], default), _row("MCT at measured speeds", mct),
               _row("LDWP + IAWP", ldwp), _row("LDWP + IAWP, batching off", off),
               _row("plain job (Flink places its map; see docstring)", plain)]
    got = verdict(summary)
    assert (got["ldwp_over_flink_default_distribution"], got["ldwp_over_plain_job"],
            got["ldwp_over_mct"], got["batching_on_over_off"]) == pytest.approx(expected)


def _cluster(emulated, head="10.213.0.1"):
    return SimpleNamespace(isolation=SimpleNamespace(emulated=emulated, head_address=head))


def test_service_stays_on_loopback_without_emulated_hosts():
    assert service_access(_cluster(False), False) == ({}, {})
    # a named spec in the cpuset fallback: the jobs still read their nodes from it
    assert service_access(_cluster(False), "hosts") == ({"CLUSTER_SPEC": "hosts"}, {})


def test_service_binds_head_address_with_a_token_on_emulated_hosts():
    env, binding = service_access(_cluster(True), "hosts")
    assert binding["host"] == "10.213.0.1"
    assert len(binding["token"]) == 32 and env["SERVICE_TOKEN"] == binding["token"]
    assert env["CLUSTER_SPEC"] == "hosts"
    # a fresh secret per benchmark, never a fixed one
    assert service_access(_cluster(True), "hosts")[1]["token"] != binding["token"]
