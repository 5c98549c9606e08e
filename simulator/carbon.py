"""Carbon of a simulated run: its energy over time against a grid carbon-intensity series.

Post-hoc and off by default, like :mod:`simulator.energy`: :func:`grams_co2` takes the
:class:`~simulator.energy.EnergyInterval` list of an energy report and a :class:`CarbonSeries`
(gCO2 per kWh over time) and integrates: every interval's energy is spread evenly over it and
each piece is weighed by the intensity in force at that time.

A series is a step function: each row's intensity holds from its timestamp until the next row's
(public grid data is published as hourly or 5-minute averages, which is what a step means). The
last row holds until ``end_s`` (None: for ever). Energy before the first timestamp or after
``end_s`` is refused, never extrapolated. ``offset_s`` places simulation time 0 on the series
(e.g. ``9 * 3600`` to start the run at 09:00 of the series' first day).

Sources: :meth:`CarbonSeries.from_csv` reads ``timestamp_s, g_per_kwh`` rows from a file, by
default ``<data dir>/carbon-intensity/carbon_intensity.csv`` where ``<data dir>`` is an explicit
path or ``$STREAMPLACE_DATA_DIR`` (``workload.traces.datadir``; no such file ships with the
repository); :func:`synthetic_series` draws a seeded daily sine (settings: ``carbon.synthetic``
in ``workload/calibration.yaml``, all assumptions).

Example::

    >>> from simulator.energy import EnergyInterval
    >>> series = CarbonSeries((0.0, 3600.0), (100.0, 300.0))
    >>> kwh_each_hour = EnergyInterval(1800.0, 5400.0, 7.2e6, "busy", "n1", "gpu:0", "t1")
    >>> grams_co2([kwh_each_hour], series).total_g   # 1 kWh at 100 + 1 kWh at 300
    400.0
"""

from __future__ import annotations

import bisect
import csv
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from workload.estimates import load_calibration
# The trace readers' bounded reading (line length, file size, NUL bytes, ASCII numbers).
from workload.traces._parse import bounded_lines, member_text, open_bounded, parse_decimal
from workload.traces.datadir import DataNotFound, DataSource, TraceFormatError, find_data_file

__all__ = ["CarbonSeries", "CarbonReport", "grams_co2", "synthetic_series", "CARBON_SOURCE",
           "CARBON_FILE", "MAX_ROWS", "MAX_G_PER_KWH", "JOULES_PER_KWH"]

#: Most rows a series may have (a year at 1-minute resolution is ~525,600).
MAX_ROWS = 1_000_000
#: Largest timestamp magnitude accepted (s): ~3,000 years, beyond epoch seconds for any grid
#: data and the longest synthetic series (MAX_ROWS steps of a day, 8.64e10 s), yet far enough
#: from the float limit that differences and offsets of times stay finite.
MAX_ABS_TIME_S = 1e11
#: Highest intensity accepted (g/kWh): the dirtiest grids are ~1,000-1,200 (lignite); far above
#: is a unit error (g/MWh, kg/kWh).
MAX_G_PER_KWH = 5_000.0
JOULES_PER_KWH = 3.6e6
#: Where a real series is looked for under the data dir (only the folder's name and a pointer).
CARBON_SOURCE = DataSource(
    folder="carbon-intensity",
    title="Grid carbon-intensity series",
    url="https://www.electricitymaps.com/data-portal (or any grid operator's published "
        "gCO2/kWh series), converted to columns timestamp_s,g_per_kwh",
    license="per the provider of the series")
CARBON_FILE = "carbon_intensity.csv"
_COLUMNS = ("timestamp_s", "g_per_kwh")


def _finite(value: float, where: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"carbon: {where} must be a finite number in [{low:g}, {high:g}], "
                         f"got {value!r}")
    return float(value)


@dataclass(frozen=True)
class CarbonSeries:
    """A step function of grid carbon intensity (gCO2/kWh) over time (s), validated: at least
    one row, at most ``MAX_ROWS``, strictly increasing finite times, finite values in
    ``[0, MAX_G_PER_KWH]``, ``end_s`` (if given) after the last timestamp.

    >>> CarbonSeries((0.0, 60.0), (200.0, 250.0)).at(59.9)
    200.0
    """

    timestamps_s: tuple[float, ...]
    g_per_kwh: tuple[float, ...]
    end_s: float | None = None
    source: str = "given"

    def __post_init__(self) -> None:
        times, values = tuple(self.timestamps_s), tuple(self.g_per_kwh)
        if not 1 <= len(times) <= MAX_ROWS or len(values) != len(times):
            raise ValueError(f"carbon: a series needs 1-{MAX_ROWS} rows and one value per "
                             f"timestamp, got {len(times)} timestamps and {len(values)} values")
        for i, (t, g) in enumerate(zip(times, values)):
            _finite(t, f"timestamp_s[{i}]", -MAX_ABS_TIME_S, MAX_ABS_TIME_S)
            _finite(g, f"g_per_kwh[{i}]", 0.0, MAX_G_PER_KWH)
            if i and t <= times[i - 1]:
                raise ValueError(f"carbon: timestamps must strictly increase; row {i} has "
                                 f"{t} after {times[i - 1]}")
        if self.end_s is not None and not (math.isfinite(self.end_s) and self.end_s > times[-1]):
            raise ValueError(f"carbon: end_s {self.end_s!r} must be finite and after the last "
                             f"timestamp {times[-1]}")
        object.__setattr__(self, "timestamps_s", tuple(float(t) for t in times))
        object.__setattr__(self, "g_per_kwh", tuple(float(g) for g in values))

    def _check_covered(self, start: float, end: float) -> None:
        if start < self.timestamps_s[0] or (self.end_s is not None and end > self.end_s):
            raise ValueError(f"carbon: energy at {start}..{end} s (series time) lies outside the "
                             f"series {self.timestamps_s[0]}.."
                             f"{'open end' if self.end_s is None else self.end_s}; "
                             f"choose offset_s or a longer series")

    def at(self, time_s: float) -> float:
        """Intensity in force at ``time_s`` (the last row at or before it)."""
        self._check_covered(time_s, time_s)
        return self.g_per_kwh[bisect.bisect_right(self.timestamps_s, time_s) - 1]

    def mean_over(self, start_s: float, end_s: float) -> float:
        """Time-weighted mean intensity over ``[start_s, end_s]`` (``at(start_s)`` if empty)."""
        if end_s <= start_s:
            return self.at(start_s)
        self._check_covered(start_s, end_s)
        times, values = self.timestamps_s, self.g_per_kwh
        i = bisect.bisect_right(times, start_s) - 1
        total, now = 0.0, start_s
        while now < end_s:
            step_end = min(end_s, times[i + 1]) if i + 1 < len(times) else end_s
            total += values[i] * (step_end - now)
            now, i = step_end, i + 1
        return total / (end_s - start_s)

    @classmethod
    def from_csv(cls, path: str | Path | None = None, data_dir: str | Path | None = None,
                 filename: str = CARBON_FILE, end_s: float | None = None,
                 max_rows: int = MAX_ROWS) -> CarbonSeries:
        """Read ``timestamp_s, g_per_kwh`` rows (header required, other columns ignored) from
        ``path``, or from ``<data dir>/carbon-intensity/<filename>`` (``DataNotFound`` naming
        where it looked when absent). Malformed rows raise ``TraceFormatError`` with the line;
        more than ``max_rows`` rows are refused without reading the rest."""
        if not 1 <= max_rows <= MAX_ROWS:
            raise ValueError(f"carbon: max_rows must be in 1..{MAX_ROWS}, got {max_rows!r}")
        file = Path(path) if path is not None else find_data_file(CARBON_SOURCE, filename,
                                                                  data_dir)
        times, values = _read_rows(file, max_rows)
        if not times:
            raise TraceFormatError(file, None, "no rows")
        return cls(tuple(times), tuple(values), end_s, source=str(file))


def _read_rows(file: Path, max_rows: int) -> tuple[list[float], list[float]]:
    """The series' rows, read with the trace readers' bounds; every failure (encoding, CSV,
    I/O, memory) a TraceFormatError naming the file (and the line when known)."""
    times: list[float] = []
    values: list[float] = []
    reader = None
    try:
        with member_text(open_bounded(file)) as handle:
            reader = csv.DictReader(bounded_lines(handle, file), skipinitialspace=True)
            missing = [c for c in _COLUMNS if c not in (reader.fieldnames or ())]
            if missing:
                raise TraceFormatError(file, 1, f"missing columns {missing}; need {_COLUMNS}")
            for row in reader:
                if len(times) >= max_rows:
                    raise TraceFormatError(file, reader.line_num, f"more than {max_rows} rows")
                t, g = _row_values(file, reader.line_num, row)
                if times and t <= times[-1]:
                    raise TraceFormatError(file, reader.line_num, f"timestamp_s {t} does not "
                                           f"increase (previous row {times[-1]})")
                times.append(t)
                values.append(g)
    except csv.Error as exc:
        raise TraceFormatError(file, reader and reader.line_num, f"CSV error: {exc}") from None
    except UnicodeError as exc:
        raise TraceFormatError(file, None, f"not UTF-8 text: "
                                           f"{getattr(exc, 'reason', exc)}") from None
    except DataNotFound:
        raise
    except (OSError, MemoryError) as exc:
        raise TraceFormatError(file, None, f"cannot read: {exc}") from None
    return times, values


def _row_values(file: Path, line: int, row: dict) -> tuple[float, float]:
    try:
        t, g = (_decimal(row, column) for column in _COLUMNS)
        _finite(t, "timestamp_s", -MAX_ABS_TIME_S, MAX_ABS_TIME_S)
        _finite(g, "g_per_kwh", 0.0, MAX_G_PER_KWH)
    except ValueError as exc:
        raise TraceFormatError(file, line, str(exc)) from None
    return t, g


def _decimal(row: dict, column: str) -> float:
    text = row.get(column)
    if text is None:
        raise ValueError(f"carbon: the row has no {column} field")
    try:
        return parse_decimal(text)
    except ValueError as exc:
        raise ValueError(f"carbon: {column}: {exc}") from None


def synthetic_series(hours: float, seed: int, mean: float | None = None,
                     daily_amplitude: float | None = None, noise: float | None = None,
                     trough_hour: float | None = None, step_s: float | None = None,
                     calibration=None) -> CarbonSeries:
    """A seeded stand-in for a solar-heavy grid: one value per ``step_s`` over ``hours``,
    ``max(0, mean - daily_amplitude * cos(2 pi (h - trough_hour) / 24) + N(0, noise))`` at hour
    of day ``h`` (lowest around solar noon, highest around midnight). Each setting left None
    comes from ``carbon.synthetic`` in the calibration (all assumptions). Same arguments, same
    series (``random.Random(seed)``, platform independent).

    >>> s = synthetic_series(24, seed=0, mean=300, daily_amplitude=100, noise=0,
    ...                      trough_hour=12, step_s=3600)
    >>> s.g_per_kwh[12], s.g_per_kwh[0], s.end_s
    (200.0, 400.0, 86400.0)
    """
    settings = _synthetic_settings(calibration) if None in (
        mean, daily_amplitude, noise, trough_hour, step_s) else {}
    pick = (lambda given, key: settings[key] if given is None else given)
    mean = _finite(pick(mean, "mean_g_per_kwh"), "mean", 0.0, MAX_G_PER_KWH)
    amplitude = _finite(pick(daily_amplitude, "daily_amplitude_g_per_kwh"), "daily_amplitude",
                        0.0, MAX_G_PER_KWH)
    noise = _finite(pick(noise, "noise_g_per_kwh"), "noise", 0.0, MAX_G_PER_KWH)
    trough = _finite(pick(trough_hour, "trough_hour"), "trough_hour", 0.0, 24.0)
    step = _finite(pick(step_s, "step_s"), "step_s", 1.0, 86_400.0)
    span = _finite(hours, "hours", 1e-9, MAX_ROWS * step / 3600.0) * 3600.0
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"carbon: seed must be an int, got {seed!r}")
    rng = random.Random(seed)
    count = max(1, math.ceil(span / step - 1e-9))
    times, values = [], []
    for i in range(count):
        hour_of_day = (i * step / 3600.0) % 24.0
        value = mean - amplitude * math.cos(2 * math.pi * (hour_of_day - trough) / 24.0)
        value += rng.gauss(0.0, noise) if noise > 0 else 0.0
        times.append(i * step)
        # Clamped: a grid cannot emit negative carbon; rounded so tests can write the numbers.
        values.append(round(min(MAX_G_PER_KWH, max(0.0, value)), 9))
    return CarbonSeries(tuple(times), tuple(values), end_s=span,
                        source=f"synthetic(hours={hours}, seed={seed})")


def _synthetic_settings(calibration) -> dict:
    if calibration is None:
        calibration = load_calibration()
    raw = getattr(calibration, "raw", calibration)
    section = (raw.get("carbon") or {}).get("synthetic") if isinstance(raw, dict) else None
    if not isinstance(section, dict):
        raise ValueError("carbon: calibration has no carbon.synthetic section")
    return section


@dataclass(frozen=True)
class CarbonReport:
    """Grams of CO2: total, of the idle energy, and per task (busy + idle share)."""

    total_g: float
    idle_g: float
    per_task_g: dict[str, float]


def grams_co2(energy_intervals: Iterable, series: CarbonSeries, offset_s: float = 0.0,
              share_idle_over: Sequence[str] = ()) -> CarbonReport:
    """Integrate energy against intensity: ``sum(joules / 3.6e6 * mean intensity over the
    interval)``. ``energy_intervals``: :class:`~simulator.energy.EnergyInterval` items (or
    ``EnergyReport.intervals``); ``offset_s`` is added to their times to read the series.
    Per task: each task's busy intervals, plus the idle grams split evenly over
    ``share_idle_over`` (pass ``EnergyReport.completed`` for the energy report's own rule)."""
    offset = _finite(offset_s, "offset_s", -math.inf, math.inf)
    total = idle = 0.0
    per_task: dict[str, float] = {}
    for interval in energy_intervals:
        joules = _finite(interval.joules, "interval joules", 0.0, math.inf)
        start, end = interval.start_s + offset, interval.end_s + offset
        if not (math.isfinite(start) and math.isfinite(end)) or end < start:
            raise ValueError(f"carbon: interval {interval.start_s}..{interval.end_s} is not "
                             f"a finite forward interval")
        grams = joules / JOULES_PER_KWH * series.mean_over(start, end)
        total += grams
        if interval.kind == "idle" or not interval.task_id:
            idle += grams
        else:
            per_task[interval.task_id] = per_task.get(interval.task_id, 0.0) + grams
    sharers = tuple(dict.fromkeys(share_idle_over))
    for task in sharers:
        per_task[task] = per_task.get(task, 0.0) + idle / len(sharers)
    return CarbonReport(total, idle, per_task)
