"""Bounded reading of trace files with typed, line-numbered field access (private helper of the
trace readers and :mod:`simulator.carbon`).

Every conversion failure becomes a :class:`TraceFormatError` naming the file, the line and the
column, so a broken download is found at the row that is wrong instead of far downstream. Every
read is bounded (file bytes, line length, columns, rows, text and number ranges), so a hostile
or corrupt file is refused after a bounded amount of work and memory, never read whole first.

The bounds sit far above the real files (measured on the ``/work/shared/data`` copies): the
largest CSV is 2.07 MB (the GenAI ``qps.csv`` member), the longest has 26,823 rows
(``lora_request_trace.csv``), the longest line 180 characters, the widest header 11 columns and
the longest text field 38 characters.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import stat
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import BinaryIO, TextIO

from .datadir import DataNotFound, TraceFormatError

__all__ = ["CsvRow", "MAX_COLUMNS", "MAX_FILE_BYTES", "MAX_LINE_CHARS", "MAX_ROWS",
           "MAX_TEXT_CHARS", "MAX_TRACE_SPAN", "SpanCheck", "bounded_lines", "member_text",
           "open_bounded", "parse_decimal", "parse_timestamp", "read_csv", "shown"]

#: Bytes (characters, once decoded) one trace file may hold: 30x the largest real one (2.07 MB).
MAX_FILE_BYTES = 64 * 2**20
#: Characters in one line, newline included: 360x the longest real line (180). Lines are read
#: with this limit, so a huge file without a newline is refused after 64 KiB, not read whole.
MAX_LINE_CHARS = 64 * 2**10
#: Header columns: the real files have 3 to 11.
MAX_COLUMNS = 256
#: Data rows per file: 9x the largest real file (26,823). Parsed rows cost ~1 KB each in memory,
#: so this also caps a reader at a few hundred MB.
MAX_ROWS = 250_000
#: Characters in one text field (names, ids, labels): the real maximum is 38.
MAX_TEXT_CHARS = 1024
#: Longest stretch of time one request trace may cover: the real ones cover 23 days (GenAI) and
#: one hour (Azure). A year is ample, and a single mistyped year is refused instead of squeezing
#: every other arrival into an instant of the replay.
MAX_TRACE_SPAN = timedelta(days=366)
#: Calendar years a wall-clock timestamp may have (the traces are from 2023 and 2024).
YEARS = (1990, 2100)

_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,9})?", re.ASCII)
# ASCII decimal only: float() alone would also take "1_000", "\u0664\u0662" (Arabic-Indic
# digits), "infinity" and "nan". Three exponent digits reach past the float range (-> inf,
# refused as not finite) without letting a long exponent through.
_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d{1,3})?", re.ASCII)
_NOT_FINITE = {"nan": "NaN", "+nan": "NaN", "-nan": "NaN", "inf": "infinite",
               "+inf": "infinite", "-inf": "infinite", "infinity": "infinite",
               "+infinity": "infinite", "-infinity": "infinite"}
_EPOCH = datetime(1970, 1, 1)


def shown(value, limit: int = 100) -> str:
    """``repr`` of a value from a file, cut to ``limit`` characters for a one-line message."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def parse_decimal(text: str) -> float:
    """A finite float from ASCII decimal text; ``ValueError`` saying what is wrong otherwise.

    >>> parse_decimal("1e3"), parse_decimal(" -0.5")
    (1000.0, -0.5)
    """
    text = text.strip()
    kind = _NOT_FINITE.get(text.lower())
    if kind:
        raise ValueError(f"{shown(text)} is {kind}, not a finite number")
    if not _DECIMAL.fullmatch(text):
        raise ValueError(f"{shown(text)} is not a number")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{shown(text)} is beyond the float range, not a finite number")
    return value


class CsvRow:
    """One data row: ``row.integer("gpu", min_value=0, max_value=64)`` ... with checks."""

    __slots__ = ("path", "line", "_values")

    def __init__(self, path: str, line: int, values: dict[str, str]):
        self.path = path
        self.line = line
        self._values = values

    def error(self, problem: str) -> TraceFormatError:
        return TraceFormatError(self.path, self.line, problem)

    def text(self, column: str, *, optional: bool = False) -> str | None:
        """The stripped text; an empty value gives ``None`` if optional, else an error."""
        value = self._values[column].strip()
        if value == "":
            if optional:
                return None
            raise self.error(f"column {column!r} is empty")
        if len(value) > MAX_TEXT_CHARS:
            raise self.error(f"column {column!r}: {shown(value)} is longer than "
                             f"{MAX_TEXT_CHARS} characters")
        return value

    def number(self, column: str, *, min_value: float, max_value: float,
               optional: bool = False) -> float | None:
        """A finite number in ``[min_value, max_value]``: every numeric field has both bounds."""
        text = self.text(column, optional=optional)
        if text is None:
            return None
        try:
            value = parse_decimal(text)
        except ValueError as exc:
            raise self.error(f"column {column!r}: {exc}") from None
        if value < min_value:
            raise self.error(f"column {column!r}: {shown(text)} is below {min_value}")
        if value > max_value:
            raise self.error(f"column {column!r}: {shown(text)} is above {max_value:g}, "
                             f"the most this column may plausibly hold")
        return value

    def integer(self, column: str, *, min_value: int, max_value: int,
                optional: bool = False) -> int | None:
        # Some traces write counts as "30.0" (pandas float columns); accept only integral values.
        value = self.number(column, optional=optional, min_value=min_value, max_value=max_value)
        if value is None:
            return None
        if value != int(value):
            text = self._values[column].strip()
            raise self.error(f"column {column!r}: {shown(text)} is not an integer")
        return int(value)


def open_bounded(path: str | Path, max_bytes: int | None = None) -> BinaryIO:
    """Open a regular file for binary reading, refusing other kinds of file and ones larger
    than ``max_bytes`` (default ``MAX_FILE_BYTES``).

    Opened non-blocking first, so a FIFO is refused instead of waiting for a writer. A missing
    file raises :class:`DataNotFound`, any other failure :class:`TraceFormatError`.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise DataNotFound(f"{path}: no such file", f"{path} is missing") from None
    except OSError as exc:
        raise TraceFormatError(path, None, f"cannot open: {exc.strerror or exc}") from None
    max_bytes = MAX_FILE_BYTES if max_bytes is None else max_bytes
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TraceFormatError(path, None, "not a regular file")
        if info.st_size > max_bytes:
            raise TraceFormatError(path, None, f"{info.st_size} bytes, more than the "
                                               f"{max_bytes} a trace file may have")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def member_text(raw: BinaryIO) -> TextIO:
    """Decode a binary stream (e.g. an archive member) as UTF-8 text for :func:`read_csv`,
    incrementally (never the whole member at once); a leading byte-order mark is dropped."""
    return io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")


class _Lines:
    """Lines of a text stream, each read with a length limit, with a running count and total."""

    def __init__(self, name: str, max_chars: int):
        self.name = name
        self.max_chars = max_chars
        self.number = 0
        self.total = 0

    def __call__(self, stream: TextIO) -> Iterator[str]:
        while line := stream.readline(MAX_LINE_CHARS + 1):
            self.number += 1
            if len(line) > MAX_LINE_CHARS:
                raise TraceFormatError(self.name, self.number,
                                       f"line longer than {MAX_LINE_CHARS} characters")
            self.total += len(line)
            if self.total > self.max_chars:
                raise TraceFormatError(self.name, self.number,
                                       f"more than {self.max_chars} characters of text")
            if "\x00" in line:
                raise TraceFormatError(self.name, self.number, "NUL byte in the line")
            yield line


def bounded_lines(stream: TextIO, name: str | Path,
                  max_chars: int | None = None) -> Iterator[str]:
    """The lines of ``stream`` for ``csv.reader``, refusing an over-long line (without reading
    past the limit), more than ``max_chars`` (default ``MAX_FILE_BYTES``) in all, NUL bytes."""
    return _Lines(str(name), MAX_FILE_BYTES if max_chars is None else max_chars)(stream)


def read_csv(path: str | Path, required_columns: Iterable[str], *,
             text: TextIO | None = None) -> Iterator[CsvRow]:
    """Yield the data rows of a CSV file with a header, checking columns and field counts.

    ``text`` reads from an open text stream instead (e.g. :func:`member_text` of a tar member);
    ``path`` then only names it in errors. Blank lines are skipped; a file with no data rows,
    more than ``MAX_ROWS`` rows or any line, header or size over the bounds above is refused.
    """
    name = str(path)
    lines = _Lines(name, MAX_FILE_BYTES)
    try:
        if text is not None:
            yield from _rows(name, csv.reader(lines(text)), tuple(required_columns))
            return
        with member_text(open_bounded(path)) as stream:
            yield from _rows(name, csv.reader(lines(stream)), tuple(required_columns))
    except csv.Error as exc:
        raise TraceFormatError(name, lines.number, f"CSV error: {exc}") from None
    except UnicodeError as exc:
        # Text is decoded in chunks, so the bad byte is on the next line or a few lines later.
        raise TraceFormatError(name, None, f"not UTF-8 text (at or after line "
                                           f"{lines.number + 1}): "
                                           f"{getattr(exc, 'reason', exc)}") from None
    except MemoryError:
        raise TraceFormatError(name, lines.number, "out of memory while reading") from None
    except DataNotFound:
        raise
    except OSError as exc:
        raise TraceFormatError(name, lines.number,
                               f"cannot read: {exc.strerror or exc}") from None


def _header(name: str, reader, required: tuple[str, ...]) -> list[str]:
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise TraceFormatError(name, 1, "file is empty, expected a header line") from None
    if header:
        header[0] = header[0].removeprefix("\ufeff")  # a BOM left by a caller's own decoding
    if len(header) > MAX_COLUMNS:
        raise TraceFormatError(name, 1, f"header has {len(header)} columns, more than "
                                        f"{MAX_COLUMNS}")
    repeated = sorted({h for h in header if header.count(h) > 1})
    if repeated:
        raise TraceFormatError(name, 1, f"header repeats column(s) {shown(repeated)}")
    missing = [c for c in required if c not in header]
    if missing:
        raise TraceFormatError(name, 1, f"header lacks column(s) {missing}; "
                                        f"found {shown(header)}")
    return header


def _rows(name: str, reader, required: tuple[str, ...]) -> Iterator[CsvRow]:
    header = _header(name, reader, required)
    width, count = len(header), 0
    for fields in reader:
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            continue
        if len(fields) != width:
            raise TraceFormatError(name, reader.line_num,
                                   f"expected {width} fields, found {len(fields)}")
        count += 1
        if count > MAX_ROWS:
            raise TraceFormatError(name, reader.line_num, f"more than {MAX_ROWS} data rows")
        yield CsvRow(name, reader.line_num, dict(zip(header, fields)))
    if not count:
        raise TraceFormatError(name, None, "no data rows (only a header)")


def parse_timestamp(row: CsvRow, column: str) -> datetime:
    """``YYYY-MM-DD HH:MM:SS[.fraction]`` with 1-9 fraction digits (Azure writes 7), in YEARS."""
    text = row.text(column)
    try:
        # Strict shape: fromisoformat alone would also take dates, "HH:MM" or time zones.
        if not _TIMESTAMP.fullmatch(text):
            raise ValueError(text)
        base, _, fraction = text.partition(".")
        stamp = datetime.fromisoformat(base)
        if fraction:
            # Keep microseconds exact; digits beyond the 6th (100 ns) are below any use here.
            stamp += timedelta(microseconds=round(int(fraction) / 10 ** (len(fraction) - 6)))
    except (ValueError, OverflowError):
        raise row.error(f"column {column!r}: {shown(text)} is not a "
                        f"'YYYY-MM-DD HH:MM:SS' timestamp") from None
    if not YEARS[0] <= stamp.year < YEARS[1]:
        raise row.error(f"column {column!r}: {shown(text)} is outside the years "
                        f"{YEARS[0]}-{YEARS[1] - 1}")
    return stamp


class SpanCheck:
    """Refuses a trace whose timestamps (datetimes, or seconds) spread over more than ``limit``,
    naming the row that widened the span too far and the row at the other end."""

    def __init__(self, path: str | Path, limit: timedelta = MAX_TRACE_SPAN):
        self.path = str(path)
        self.limit_s = limit.total_seconds()
        self.low: tuple[float, int] | None = None
        self.high: tuple[float, int] | None = None

    def add(self, stamp: datetime | float, line: int) -> None:
        seconds = (stamp - _EPOCH).total_seconds() if isinstance(stamp, datetime) else stamp
        if self.low is None or seconds < self.low[0]:
            self.low = (seconds, line)
        if self.high is None or seconds > self.high[0]:
            self.high = (seconds, line)
        if self.high[0] - self.low[0] > self.limit_s:
            other = self.low if line == self.high[1] else self.high
            days = (self.high[0] - self.low[0]) / 86400
            raise TraceFormatError(self.path, line, f"timestamp lies {days:.0f} days from the "
                                   f"one on line {other[1]}; a trace may span at most "
                                   f"{self.limit_s / 86400:.0f} days")
