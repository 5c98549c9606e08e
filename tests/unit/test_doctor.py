"""`streamplace doctor`'s judgement of TaskManager resources and its report, without a cluster."""

from __future__ import annotations

import pytest

from streamplace.doctor import MISSING, OK, Check, check_taskmanager_resources, format_checks, \
    run_checks


def tm(tm_id, extended):
    return {"id": tm_id, "totalResource": {"cpuCores": 1.0, "extendedResources": extended}}


# Scenario table: TaskManager resources -> expected status.
CASES = [
    ("own resource", tm("tm_a", {"tm_a": 4.0}), OK),
    ("no external resource", tm("tm_a", {}), MISSING),
    ("only a GPU resource", tm("tm_a", {"gpu": 1.0}), MISSING),
    ("resource named after another node", tm("tm_a", {"tm_b": 2.0}), MISSING),
    ("zero amount", tm("tm_a", {"tm_a": 0.0}), MISSING),
]


@pytest.mark.parametrize("name,record,expected", CASES, ids=[c[0] for c in CASES])
def test_taskmanager_resource_check(name, record, expected):
    check = check_taskmanager_resources([record])[0]
    assert check.status == expected, check
    assert check.name == "resource:tm_a"
    if expected == MISSING:
        assert "external-resource" in check.fix


def test_a_taskmanager_without_the_router_resource_is_a_warning_for_colocated_routing():
    from streamplace.doctor import WARN
    checks = check_taskmanager_resources([tm("tm_a", {"tm_a": 2.0, "streamplace_router": 1.0}),
                                          tm("tm_b", {"tm_b": 2.0})])
    assert [c.status for c in checks] == [OK, OK, WARN]
    assert "tm_b" in checks[2].detail and "tm_a" not in checks[2].detail
    assert "colocated" in checks[2].detail and "streamplace_router" in checks[2].fix
    spread = check_taskmanager_resources([tm("tm_a", {"tm_a": 1.0, "streamplace_router": 1.0})])
    assert [c.status for c in spread] == [OK]


def test_report_shows_fixes_only_for_problems_and_an_unreachable_cluster_is_missing():
    text = format_checks([Check("a", OK, "fine", "never shown"), Check("b", MISSING, "bad", "do x")])
    assert "never shown" not in text and "fix: do x" in text
    (check,) = run_checks("http://127.0.0.1:9", timeout_s=0.5)  # port 9: nothing listens
    assert check.status == MISSING and check.name == "jobmanager"
