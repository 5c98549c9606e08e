"""The synthetic TaskEvent stream the benchmarks and ``streamplace produce`` send: its
applications are drawn at random (seeded), not cycled, so a round-robin placement over as many
TaskManagers as there are applications does not send each application to one of them."""

from __future__ import annotations

from collections import Counter

import pytest

from streamplace.kafka_io import synthetic_task_events
from workload.catalog import app_ids


def _apps(count, seed):
    return [e["app_id"] for e in synthetic_task_events(count, seed=seed)]


@pytest.mark.parametrize("nodes", [2, 3, 4, 6])
def test_round_robin_gives_every_node_every_application(nodes):
    events = _apps(3000, seed=100)
    for node in range(nodes):
        mix = Counter(events[node::nodes])
        share = {app: mix[app] / sum(mix.values()) for app in app_ids()}
        assert all(0.2 < s < 0.47 for s in share.values()), (node, share)


def test_the_stream_is_the_same_for_a_seed_and_another_for_another_seed():
    assert _apps(200, seed=7) == _apps(200, seed=7)
    assert _apps(200, seed=7) != _apps(200, seed=8)


def test_the_application_draw_leaves_the_sizes_of_earlier_runs():
    # sizes come from their own generator, as before the applications were drawn (these are
    # the sizes the cycling stream gave for seed 1)
    assert [e["input_size"] for e in synthetic_task_events(5, seed=1)] == \
        [59039, 35904, 97219, 81828, 27745]


def test_every_application_appears_about_equally_often():
    mix = Counter(_apps(3000, seed=3))
    assert set(mix) == set(app_ids())
    assert max(mix.values()) - min(mix.values()) < 200
