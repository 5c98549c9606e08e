"""Test doubles shared by the unit and integration suites (as fixtures: the two folders are not
packages and import nothing from each other)."""

import pytest


class PassingBurstCheck:
    """A burst check that passes every version, unjudged: for tests whose synthetic feedback
    measures too few drain rates for the real check (which holds such versions;
    tests/unit/test_burst_check.py tests it), so that what they test is what comes after it."""

    def observe_task(self, task, states=None):
        pass

    def check(self, *args):
        from placement.service.burst_check import BurstVerdict
        return BurstVerdict(True, "not judged: a test double")


@pytest.fixture(scope="session")
def passing_burst_check() -> PassingBurstCheck:
    """A :class:`PassingBurstCheck` (stateless, so one serves every test)."""
    return PassingBurstCheck()
