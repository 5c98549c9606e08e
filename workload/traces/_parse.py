"""CSV reading with typed, line-numbered field access (private helper of the trace readers).

Every conversion failure becomes a :class:`TraceFormatError` naming the file, the line and the
column, so a broken download is found at the row that is wrong instead of far downstream.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import TextIO

from .datadir import TraceFormatError

__all__ = ["CsvRow", "parse_timestamp", "read_csv", "text_member"]


_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?")


class CsvRow:
    """One data row: ``row.integer("gpu")``, ``row.number("x", optional=True)`` ... with checks."""

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
        return value

    def number(self, column: str, *, optional: bool = False, min_value: float | None = None):
        text = self.text(column, optional=optional)
        if text is None:
            return None
        try:
            value = float(text)
        except ValueError:
            raise self.error(f"column {column!r}: {text!r} is not a number") from None
        if not math.isfinite(value):
            raise self.error(f"column {column!r}: {text!r} is not a finite number")
        if min_value is not None and value < min_value:
            raise self.error(f"column {column!r}: {text!r} is below {min_value}")
        return value

    def integer(self, column: str, *, optional: bool = False, min_value: int | None = None):
        # Some traces write counts as "30.0" (pandas float columns); accept only integral values.
        value = self.number(column, optional=optional, min_value=min_value)
        if value is None:
            return None
        if value != int(value):
            text = self._values[column].strip()
            raise self.error(f"column {column!r}: {text!r} is not an integer")
        return int(value)


def read_csv(path: str | Path, required_columns: Iterable[str], *,
             text: TextIO | None = None) -> Iterator[CsvRow]:
    """Yield the data rows of a CSV file with a header, checking columns and field counts.

    ``text`` reads from an open text stream instead (e.g. a tar member); ``path`` then only
    names it in errors. Blank lines are skipped.
    """
    name = str(path)
    stream = text if text is not None else open(path, newline="", encoding="utf-8")
    try:
        reader = csv.reader(stream)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise TraceFormatError(name, 1, "file is empty, expected a header line") from None
        missing = [c for c in required_columns if c not in header]
        if missing:
            raise TraceFormatError(name, 1, f"header lacks column(s) {missing}; found {header}")
        width = len(header)
        for fields in reader:
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                continue
            if len(fields) != width:
                raise TraceFormatError(name, reader.line_num,
                                       f"expected {width} fields, found {len(fields)}")
            yield CsvRow(name, reader.line_num, dict(zip(header, fields)))
    except csv.Error as exc:
        line = getattr(reader, "line_num", None)
        raise TraceFormatError(name, line, f"CSV error: {exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceFormatError(name, None, f"not UTF-8 text: {exc}") from None
    finally:
        if text is None:
            stream.close()


def parse_timestamp(row: CsvRow, column: str) -> datetime:
    """``YYYY-MM-DD HH:MM:SS[.fraction]`` with any number of fraction digits (Azure writes 7)."""
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
    except ValueError:
        raise row.error(
            f"column {column!r}: {text!r} is not a 'YYYY-MM-DD HH:MM:SS' timestamp") from None
    return stamp


def text_member(data: bytes) -> TextIO:
    """Wrap bytes read from an archive as a text stream for :func:`read_csv`."""
    return io.StringIO(data.decode("utf-8"), newline="")
