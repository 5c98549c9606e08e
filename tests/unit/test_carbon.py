"""Carbon axis (simulator.carbon): hand-computed grams for tiny series, CSV refusals, the seeded
generator. 1 kWh = 3.6e6 J, so 3.6e6 J at 500 g/kWh is 500 g."""

from __future__ import annotations

import pytest

from simulator.carbon import (CARBON_FILE, CARBON_SOURCE, MAX_ROWS, CarbonSeries, grams_co2,
                              synthetic_series)
from simulator.energy import EnergyInterval
from workload.traces.datadir import DataNotFound, TraceFormatError


def _busy(start, end, joules, task="t1"):
    return EnergyInterval(start, end, joules, "busy", "n1", "gpu:0", task)


def _idle(start, end, joules):
    return EnergyInterval(start, end, joules, "idle", "n1", "cpu:0")


# name, series (timestamps, values, end_s), intervals, offset_s, expected total grams
CASES = [
    # A constant series: grams = kWh x intensity, whatever the timing.
    ("constant", ((0.0,), (500.0,), None), [_busy(0.0, 10.0, 3.6e6)], 0.0, 500.0),
    ("constant, two intervals", ((0.0,), (250.0,), None),
     [_busy(0.0, 1.0, 1.8e6), _busy(5.0, 9.0, 5.4e6)], 0.0, 0.5 * 250 + 1.5 * 250),
    # 2 kWh spread over 1800..5400 s: half before the 3600 s step (100), half after (300).
    ("straddles a step", ((0.0, 3600.0), (100.0, 300.0), None), [_busy(1800.0, 5400.0, 7.2e6)],
     0.0, 100.0 + 300.0),
    # The same interval read 1800 s later lies entirely after the step: 2 kWh * 300.
    ("offset", ((0.0, 3600.0), (100.0, 300.0), None), [_busy(1800.0, 5400.0, 7.2e6)],
     1800.0, 600.0),
    # A zero-length interval takes the intensity in force at its instant.
    ("instant", ((0.0, 3600.0), (100.0, 300.0), None), [_busy(3600.0, 3600.0, 3.6e6)], 0.0,
     300.0),
]


@pytest.mark.parametrize("name,series,intervals,offset,expected", CASES,
                         ids=[c[0] for c in CASES])
def test_grams_of_hand_written_intervals(name, series, intervals, offset, expected):
    times, values, end = series
    report = grams_co2(intervals, CarbonSeries(times, values, end), offset_s=offset)
    assert report.total_g == pytest.approx(expected)


def test_per_task_grams_and_idle_share():
    # t1: 1 kWh at 100; t2: 1 kWh at 300; idle: 2 kWh over 0..7200 = 1 kWh at 100 + 1 at 300
    # = 400 g, split over the two completed tasks (200 each).
    series = CarbonSeries((0.0, 3600.0), (100.0, 300.0))
    intervals = [_busy(0.0, 3600.0, 3.6e6, "t1"), _busy(3600.0, 7200.0, 3.6e6, "t2"),
                 _idle(0.0, 7200.0, 7.2e6)]
    report = grams_co2(intervals, series, share_idle_over=("t1", "t2"))
    assert report.idle_g == pytest.approx(400.0)
    assert report.per_task_g == pytest.approx({"t1": 300.0, "t2": 500.0})
    assert report.total_g == pytest.approx(800.0)


@pytest.mark.parametrize("name,series,interval", [
    ("before the series", ((100.0,), (300.0,), None), _busy(0.0, 200.0, 1.0)),
    ("after end_s", ((0.0,), (300.0,), 100.0), _busy(50.0, 150.0, 1.0)),
    ("backwards interval", ((0.0,), (300.0,), None), _busy(5.0, 1.0, 1.0)),
])
def test_energy_outside_the_series_is_refused(name, series, interval):
    with pytest.raises(ValueError):
        grams_co2([interval], CarbonSeries(*series))


def _write(tmp_path, rows, header="timestamp_s,g_per_kwh"):
    path = tmp_path / "series.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


@pytest.mark.parametrize("name,rows,header,max_rows,message", [
    ("non-monotonic time", ["0,100", "60,120", "30,110"], None, MAX_ROWS, "does not increase"),
    ("repeated time", ["0,100", "0,120"], None, MAX_ROWS, "does not increase"),
    ("negative value", ["0,100", "60,-5"], None, MAX_ROWS, "g_per_kwh"),
    ("nan value", ["0,nan"], None, MAX_ROWS, "g_per_kwh"),
    ("inf time", ["inf,100"], None, MAX_ROWS, "timestamp_s"),
    ("not a number", ["0,lots"], None, MAX_ROWS, "lots"),
    ("implausible value (g/MWh?)", ["0,400000"], None, MAX_ROWS, "g_per_kwh"),
    ("too many rows", ["0,1", "1,1", "2,1", "3,1"], None, 3, "more than 3 rows"),
    ("missing column", ["0,100"], "time,g_per_kwh", MAX_ROWS, "missing columns"),
    ("no rows", [], None, MAX_ROWS, "no rows"),
])
def test_bad_csv_is_refused(tmp_path, name, rows, header, max_rows, message):
    path = _write(tmp_path, rows, header or "timestamp_s,g_per_kwh")
    with pytest.raises(TraceFormatError, match=message):
        CarbonSeries.from_csv(path, max_rows=max_rows)


def test_row_bound_is_one_million_and_cannot_be_raised(tmp_path):
    assert MAX_ROWS == 1_000_000
    with pytest.raises(ValueError, match="max_rows"):
        CarbonSeries.from_csv(_write(tmp_path, ["0,1"]), max_rows=MAX_ROWS + 1)


def test_csv_found_in_the_data_dir_from_the_environment(tmp_path, monkeypatch):
    folder = tmp_path / CARBON_SOURCE.folder
    folder.mkdir()
    (folder / CARBON_FILE).write_text("timestamp_s, g_per_kwh, note\n0, 200, a\n3600, 400, b\n")
    monkeypatch.setenv("STREAMPLACE_DATA_DIR", str(tmp_path))
    series = CarbonSeries.from_csv()
    assert series.timestamps_s == (0.0, 3600.0) and series.g_per_kwh == (200.0, 400.0)
    # 1 kWh at 200 + 1 kWh at 400.
    assert grams_co2([_busy(0.0, 7200.0, 7.2e6)], series).total_g == pytest.approx(600.0)


def test_missing_csv_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMPLACE_DATA_DIR", str(tmp_path))
    with pytest.raises(DataNotFound, match="carbon-intensity"):
        CarbonSeries.from_csv()


def test_generator_is_deterministic_for_a_seed():
    a = synthetic_series(72, seed=7)
    assert a == synthetic_series(72, seed=7)
    assert a.g_per_kwh != synthetic_series(72, seed=8).g_per_kwh
    assert len(a.g_per_kwh) == 72 and a.end_s == 72 * 3600.0
    assert min(a.g_per_kwh) >= 0.0


@pytest.mark.parametrize("mean,amplitude,hour,expected", [
    # No noise: mean - amplitude * cos(2 pi (h - trough) / 24) with trough 13.
    (400.0, 150.0, 13, 250.0),     # the trough: mean - amplitude
    (400.0, 150.0, 1, 550.0),      # 12 h away: mean + amplitude
    (400.0, 150.0, 19, 400.0),     # 6 h away: cos = 0
    (50.0, 150.0, 13, 0.0),        # clamped: a grid cannot emit negative carbon
])
def test_generator_shape_without_noise(mean, amplitude, hour, expected):
    series = synthetic_series(24, seed=0, mean=mean, daily_amplitude=amplitude, noise=0.0,
                              trough_hour=13.0, step_s=3600.0)
    assert series.g_per_kwh[hour] == pytest.approx(expected, abs=1e-6)


def test_generator_defaults_come_from_the_calibration():
    raw = {"carbon": {"synthetic": {"mean_g_per_kwh": 100.0, "daily_amplitude_g_per_kwh": 0.0,
                                    "noise_g_per_kwh": 0.0, "trough_hour": 12.0,
                                    "step_s": 1800.0}}}
    series = synthetic_series(2, seed=0, calibration=raw)
    assert series.g_per_kwh == (100.0,) * 4 and series.timestamps_s[1] == 1800.0


@pytest.mark.parametrize("kwargs", [
    {"hours": 0}, {"hours": float("nan")}, {"mean": -1.0}, {"noise": float("inf")},
    {"trough_hour": 25.0}, {"seed": 1.5},
])
def test_generator_refuses_bad_settings(kwargs):
    args = {"hours": 24, "seed": 0, **kwargs}
    with pytest.raises(ValueError):
        synthetic_series(**args)


def test_energy_report_to_grams_end_to_end():
    # One CPU stage 1..3 s on a 1-core node (idle 2 W, busy 10 W), task done at 4 s:
    # 8 J idle + 16 J busy = 24 J; at a constant 1,800 g/kWh that is 24 / 3.6e6 * 1800 = 0.012 g,
    # all of it the one completed task's.
    from simulator.energy import PowerModel, energy_report
    from simulator.engine import EventRecord
    from workload.model import ClusterSpec, NodeSpec
    entry = {"idle_w": 2.0, "busy_w": 10.0, "frequencies_mhz": [1000], "source": "assumed",
             "idle_source": "assumed", "citation": "test"}
    power = PowerModel.from_calibration({"gpu_models": {}, "power": {
        "dvfs_exponent": 3.0, "cpu_core": entry, "gpus": {}}})
    events = [EventRecord(0.0, "decide", "t1", node="n1"),
              EventRecord(1.0, "start", "t1", "a", "n1", "cpu:0"),
              EventRecord(3.0, "finish", "t1", "a", "n1", "cpu:0"),
              EventRecord(4.0, "complete", "t1", node="n1")]
    report = energy_report(events, ClusterSpec((NodeSpec("n1", 1, 8),)), power)
    grams = grams_co2(report.intervals, CarbonSeries((0.0,), (1800.0,)),
                      share_idle_over=report.completed)
    assert grams.total_g == pytest.approx(0.012)
    assert grams.per_task_g == pytest.approx({"t1": 0.012})
    assert grams.idle_g == pytest.approx(8 / 3.6e6 * 1800)
