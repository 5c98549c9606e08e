"""Where the real third-party traces live, and the errors raised when they are absent or broken.

The traces are never part of the repository. They are looked up, in this order, in:

1. the ``data_dir`` argument a caller passes explicitly;
2. the folder named by the environment variable ``STREAMPLACE_DATA_DIR``;
3. ``<repository checkout>/../shared/data`` (the layout of the development machines);
4. ``./data`` relative to the current working directory.

An explicit argument or a set environment variable is authoritative: when it names a folder that
does not exist, resolution stops there (returns ``None``) instead of silently reading another copy.

Example::

    >>> from workload.traces.datadir import resolve_data_dir
    >>> resolve_data_dir("/nonexistent/folder") is None
    True
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

__all__ = [
    "DATA_DIR_ENV",
    "DataNotFound",
    "DataSource",
    "TraceFormatError",
    "checkout_data_dir",
    "find_data_file",
    "load_or_generate",
    "resolve_data_dir",
]

#: Environment variable naming the folder that holds the trace sub-folders.
DATA_DIR_ENV = "STREAMPLACE_DATA_DIR"

logger = logging.getLogger(__name__)

# datadir.py -> traces -> workload -> <checkout>; the shared data sits next to the checkout.
_CHECKOUT_DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data"


class DataNotFound(FileNotFoundError):
    """A trace file is missing; the message names the path and where to obtain the data.

    ``reason`` is the short form (which path is missing) used in ``"generated: <why>"`` sources.
    """

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason or message


class TraceFormatError(ValueError):
    """A trace file is malformed; names the file, the line (when known) and what was wrong.

    Example::

        >>> str(TraceFormatError("nodes.csv", 7, "column 'gpu': 'x' is not an integer"))
        "nodes.csv, line 7: column 'gpu': 'x' is not an integer"
    """

    def __init__(self, path: str | Path, line: int | None, problem: str):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}, line {line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class DataSource:
    """One public data set: its folder under the data dir and how to obtain it."""

    folder: str          # sub-folder of the data dir, e.g. "alibaba-gpu-v2023"
    title: str           # human name, e.g. "Alibaba cluster-trace-gpu-v2023"
    url: str             # public source to download the files from
    license: str         # short license statement, see docs/data.md


def checkout_data_dir() -> Path:
    """``<repository checkout>/../shared/data``, whether or not it exists.

    Example::

        >>> checkout_data_dir().name
        'data'
    """
    return _CHECKOUT_DATA_DIR


def resolve_data_dir(explicit: str | Path | None = None) -> Path | None:
    """The folder holding the trace sub-folders, or ``None`` when there is none.

    Order: ``explicit`` argument, env ``STREAMPLACE_DATA_DIR``, ``<checkout>/../shared/data``,
    ``./data``. An explicit argument or a set env var that names a missing folder gives ``None``.

    Example::

        >>> import os
        >>> d = resolve_data_dir()          # e.g. PosixPath('/work/shared/data') or None
        >>> d is None or d.is_dir()
        True
    """
    if explicit is not None:
        path = Path(explicit).expanduser()
        return path if path.is_dir() else None
    from_env = os.environ.get(DATA_DIR_ENV, "").strip()
    if from_env:
        path = Path(from_env).expanduser()
        return path if path.is_dir() else None
    for candidate in (checkout_data_dir(), Path.cwd() / "data"):
        if candidate.is_dir():
            return candidate
    return None


def _describe_lookup(explicit: str | Path | None) -> str:
    if explicit is not None:
        return f"the data_dir argument {str(explicit)!r}"
    from_env = os.environ.get(DATA_DIR_ENV, "").strip()
    if from_env:
        return f"${DATA_DIR_ENV}={from_env!r}"
    return f"{checkout_data_dir()} and {Path.cwd() / 'data'} (set ${DATA_DIR_ENV} to choose)"


def find_data_file(source: DataSource, filename: str, data_dir: str | Path | None = None) -> Path:
    """Path of ``<data dir>/<source.folder>/<filename>``; raises :class:`DataNotFound` if absent.

    Example::

        >>> src = DataSource("demo", "Demo trace", "https://example.org/demo", "MIT")
        >>> find_data_file(src, "x.csv", "/nonexistent")        # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        workload.traces.datadir.DataNotFound: Demo trace: ...
    """
    root = resolve_data_dir(data_dir)
    if root is not None:
        path = root / source.folder / filename
        if path.is_file():
            return path
        looked = f"{path} does not exist"
    else:
        looked = f"no data folder found (looked at {_describe_lookup(data_dir)})"
    raise DataNotFound(
        f"{source.title}: {looked}. Obtain {filename!r} from {source.url} and put it in "
        f"<data dir>/{source.folder}/, where <data dir> is the data_dir argument or "
        f"${DATA_DIR_ENV}; or call the load_or_generate_* variant to use the built-in generator.",
        reason=f"{source.title} {filename}: {looked}",
    )


T = TypeVar("T")


def load_or_generate(load: Callable[[], T], generate: Callable[[], T]) -> T:
    """``load()``, or, if its file is missing, ``generate()`` with ``source="generated: <why>"``.

    Only a missing file falls back; a malformed one still raises :class:`TraceFormatError`.
    The fallback is logged as one warning line.

    Example::

        >>> from workload.traces import load_alibaba_nodes, generate_nodes
        >>> t = load_or_generate(lambda: load_alibaba_nodes("/nonexistent"),
        ...                      lambda: generate_nodes(8, seed=1))
        >>> t.source.startswith("generated: ")
        True
    """
    try:
        return load()
    except DataNotFound as exc:
        generated = generate()
        how = generated.source.removeprefix("generated: ")
        source = f"generated: {exc.reason}; built-in generator {how}"
        logger.warning("%s", source)
        return replace(generated, source=source)
