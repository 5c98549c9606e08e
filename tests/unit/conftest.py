"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def count_stage_calls(monkeypatch):
    """``count(app_ids)`` wraps every stage operator of those built-in applications so each
    call is counted (and still runs); returns the {stage name: calls} dict it fills."""
    from workload.apps.registry import OPERATORS
    from workload.catalog import APPLICATIONS

    def count(*app_ids: str) -> dict[str, int]:
        counts: dict[str, int] = {}

        def counting(name):
            real = OPERATORS[name]

            def wrapper(frames, inputs, **options):
                counts[name] = counts.get(name, 0) + 1
                return real(frames, inputs, **options)
            return wrapper

        for app in app_ids:
            for stage in APPLICATIONS[app].stages:
                monkeypatch.setitem(OPERATORS, stage.name, counting(stage.name))
        return counts
    return count
