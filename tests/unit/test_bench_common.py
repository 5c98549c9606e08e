"""Benchmark helpers with no simulation behind them: the bar-with-interval plot shared by
paper_setting, generalisation and zoo, and generalisation's merge of reused result files.

Example: ``bar_with_ci(ax, ["MCT"], [10.0], [(9.0, 12.0)])`` draws one bar 10 high with an
error bar from 9 to 12.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from benchmarks._common import bar_with_ci  # noqa: E402
from benchmarks.generalisation import fine_tune_walls, merge_reused  # noqa: E402


@pytest.fixture
def ax():
    figure = plt.figure()
    yield figure.gca()
    plt.close(figure)


def extents(bars, horizontal=False):
    """(low, high) of each drawn error bar, along the value axis."""
    segments = bars.errorbar.lines[2][0].get_segments()
    axis = 0 if horizontal else 1
    return [(float(s[0][axis]), float(s[1][axis])) for s in segments]


@pytest.mark.parametrize("horizontal", [False, True], ids=["vertical", "horizontal"])
def test_bars_stand_at_the_means_with_the_interval_as_error_bar(ax, horizontal):
    bars = bar_with_ci(ax, ["a", "b", "c"], [10.0, 20.0, 5.0],
                       [(8.0, 13.0), (19.0, 21.0), (5.0, 5.0)],
                       colours=["tab:red", "tab:blue", "tab:gray"], horizontal=horizontal)
    sizes = [b.get_width() if horizontal else b.get_height() for b in bars]
    assert sizes == [10.0, 20.0, 5.0]
    assert extents(bars, horizontal) == [(8.0, 13.0), (19.0, 21.0), (5.0, 5.0)]
    assert [matplotlib.colors.to_hex(b.get_facecolor()) for b in bars] == [
        matplotlib.colors.to_hex(c) for c in ("tab:red", "tab:blue", "tab:gray")]
    labels = ax.get_yticklabels() if horizontal else ax.get_xticklabels()
    assert [t.get_text() for t in labels] == ["a", "b", "c"]


def test_a_mean_outside_its_interval_gets_no_negative_arm(ax):
    # matplotlib raises on a negative error; the arm on that side is drawn at length 0
    bars = bar_with_ci(ax, ["above", "below"], [10.0, 3.0], [(8.0, 9.5), (4.0, 6.0)])
    assert extents(bars) == [(8.0, 10.0), (3.0, 6.0)]


def test_without_colours_the_bars_take_matplotlibs_default(ax):
    bars = bar_with_ci(ax, ["a"], [1.0], [(0.5, 1.5)])
    assert matplotlib.colors.to_hex(bars[0].get_facecolor()) == matplotlib.colors.to_hex("C0")


# -- generalisation --reuse ------------------------------------------------------------------
def _runs(cluster, policies, seeds=(1, 2)):
    return [{"cluster": cluster, "policy": p, "seed": s, "throughput_per_min": 1.0}
            for p in policies for s in seeds]


def _document(runs, walls, tasks=300, seeds=(1, 2)):
    return {"tasks": tasks, "seeds": list(seeds), "git_commit": "c",
            "fine_tune": {"tasks": 1500, "seed": 150, "wall_s": walls}, "runs": runs}


def test_each_clusters_fine_tuning_time_comes_from_the_file_whose_runs_are_kept():
    # the transfer file fine-tuned alibaba_17; the later file fine-tuned nothing (wall_s None):
    # reading the last file's wall time (the old bug) would lose alibaba_17's
    transfer = _document(_runs("alibaba_17", ("mct", "paper_transferred")), {"alibaba_17": 20.9})
    learned = _document(_runs("paper_training", ("size_agnostic",)), None)
    kept, walls = merge_reused([("transfer.json", transfer), ("learned.json", learned)],
                               300, [1, 2], ["ldwp"], keep_all=True)
    assert len(kept) == 6
    assert walls == {"alibaba_17": 20.9}
    # and the other order: the file that ran the fine-tuning is still the one named
    _, walls = merge_reused([("learned.json", learned), ("transfer.json", transfer)],
                            300, [1, 2], ["ldwp"], keep_all=True)
    assert walls == {"alibaba_17": 20.9}


def test_the_first_file_holding_a_run_wins_and_its_fine_tuning_time_with_it():
    first = _document(_runs("alibaba_17", ("paper_transferred",)), {"alibaba_17": 20.0})
    second = _document(_runs("alibaba_17", ("paper_transferred",), seeds=(1, 2))
                       + _runs("two_cpu_3x", ("paper_transferred",)),
                       {"alibaba_17": 99.0, "two_cpu_3x": 3.0})
    kept, walls = merge_reused([("a", first), ("b", second)], 300, [1, 2], [], keep_all=True)
    assert [(r["cluster"], r["seed"]) for r in kept] == [
        ("alibaba_17", 1), ("alibaba_17", 2), ("two_cpu_3x", 1), ("two_cpu_3x", 2)]
    assert walls == {"alibaba_17": 20.0, "two_cpu_3x": 3.0}


def test_without_reuse_the_rerun_policies_are_dropped_with_their_fine_tuning_time():
    document = _document(_runs("alibaba_17", ("mct", "paper_transferred")), {"alibaba_17": 20.0})
    kept, walls = merge_reused([("g", document)], 300, [1, 2], ["paper_transferred"],
                               keep_all=False)
    assert {r["policy"] for r in kept} == {"mct"}
    assert walls == {}


def test_a_kept_cluster_its_file_did_not_time_is_recorded_as_unknown():
    document = _document(_runs("alibaba_100", ("paper_transferred",)), {"alibaba_17": 20.0})
    assert merge_reused([("g", document)], 300, [1, 2], [], keep_all=True)[1] == {
        "alibaba_100": None}


def test_a_file_with_other_tasks_or_seeds_is_refused_by_name():
    with pytest.raises(ValueError, match="old.json has other tasks or seeds"):
        merge_reused([("old.json", _document([], None, tasks=1500))], 300, [1, 2], [], True)
    with pytest.raises(ValueError, match="old.json"):
        merge_reused([("old.json", _document([], None, seeds=(1,)))], 300, [1, 2], [], True)


def test_this_runs_fine_tuning_time_counts_only_where_this_run_evaluated_it():
    reused = {"alibaba_17": 20.0}
    tuned = {"alibaba_17": 9.0, "two_cpu_3x": 3.0, "paper_training": 1.0}
    assert fine_tune_walls(reused, tuned, {"two_cpu_3x", "paper_training"}) == {
        "two_cpu_3x": 3.0, "alibaba_17": 20.0, "paper_training": 1.0}  # CLUSTERS order
    assert fine_tune_walls(reused, tuned, {"alibaba_17"}) == {"alibaba_17": 9.0}
    assert fine_tune_walls({}, {}, set()) is None  # no fine-tuned runs: recorded as null


def test_the_helpers_usage_examples_run():
    import doctest

    from benchmarks import _common
    assert doctest.testmod(_common).failed == 0
