"""The benchmark's per-operator time sampler on a hand-written REST double (no Flink needed)."""

import time

import pytest

from benchmarks.vertex_time import VertexTime


class _Rest:
    """Answers Flink's aggregated subtask metrics from a table the test sets per vertex."""

    def __init__(self):
        self.answers = {}
        self.paths = []
        self.broken = False

    def get(self, path):
        if self.broken:
            raise ConnectionError("JobManager gone")
        self.paths.append(path)
        vertex = path.split("/vertices/")[1].split("/")[0]
        return self.answers.get(vertex, [])


def _answer(busy, idle, back):
    return [{"id": "busyTimeMsPerSecond", "avg": busy},
            {"id": "idleTimeMsPerSecond", "avg": idle},
            {"id": "backPressuredTimeMsPerSecond", "avg": back}]


def test_window_averages_each_vertexs_shares_over_the_samples_inside_it():
    rest, now = _Rest(), [0.0]
    sampler = VertexTime(rest, "job1", {"v1": "router", "v2": "executor-tm_a"},
                         clock=lambda: now[0])
    for t, router, executor in ((0.0, (100, 0, 900), (200, 800, 0)),
                                (1.0, (300, 0, 700), (400, 600, 0)),
                                (5.0, (1000, 0, 0), (1000, 0, 0))):   # after the window
        now[0] = t
        rest.answers = {"v1": _answer(*router), "v2": _answer(*executor)}
        sampler.sample()
    got = sampler.window(0.0, 2.0)
    assert got["router"] == {"busy": 0.2, "idle": 0.0, "back_pressured": 0.8, "samples": 2}
    assert got["executor-tm_a"] == {"busy": 0.3, "idle": 0.7, "back_pressured": 0.0,
                                    "samples": 2}
    assert rest.paths[0] == ("/jobs/job1/vertices/v1/subtasks/metrics?get=busyTimeMsPerSecond,"
                             "idleTimeMsPerSecond,backPressuredTimeMsPerSecond&agg=avg")


@pytest.mark.parametrize("body", [
    None, "not a list", [{"id": "busyTimeMsPerSecond", "avg": "NaN"}],
    [{"id": "busyTimeMsPerSecond", "avg": None}], [{"id": "somethingElse", "avg": 5}], [7]])
def test_malformed_answers_give_no_share_not_a_crash(body):
    rest, now = _Rest(), [0.0]
    sampler = VertexTime(rest, "j", {"v": "router"}, clock=lambda: now[0])
    rest.answers = {"v": body}
    sampler.sample()
    assert sampler.window(-1.0, 1.0) == {} and sampler.error == ""


def test_shares_are_bounded_and_a_failing_rest_is_kept_as_an_error():
    rest, now = _Rest(), [0.0]
    sampler = VertexTime(rest, "j", {"v": "router"}, clock=lambda: now[0])
    rest.answers = {"v": _answer(5000, -3, 1e300)}     # out of range: bounded to [0, 1]
    sampler.sample()
    assert sampler.window(0.0, 0.0)["router"] == {"busy": 1.0, "idle": 0.0,
                                                  "back_pressured": 1.0, "samples": 1}
    rest.broken = True
    sampler.sample()
    assert len(sampler.samples) == 1 and "JobManager gone" in sampler.error


def test_the_thread_samples_until_the_block_ends():
    rest = _Rest()
    rest.answers = {"v": _answer(500, 500, 0)}
    with VertexTime(rest, "j", {"v": "router"}, interval_s=0.01) as sampler:
        deadline = time.monotonic() + 10.0
        while len(sampler.samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
    assert len(sampler.samples) >= 3 and not sampler._thread.is_alive()
