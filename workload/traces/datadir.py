"""Where the real third-party traces live, and the errors raised when they are absent or broken.

The traces are never part of the repository. They are looked up, in this order, in:

1. the ``data_dir`` argument a caller passes explicitly;
2. the folder named by the environment variable ``STREAMPLACE_DATA_DIR``;
3. ``<repository checkout>/../shared/data`` (the layout of the development machines);
4. ``./data`` relative to the current working directory.

An explicit argument or a set environment variable is authoritative: when it names a folder that
does not exist, resolution stops there (returns ``None``) instead of silently reading another copy.

Commands (``streamplace replay|demo|simulate``, ``python -m workload.traces``) go further with
:func:`check_named_data_dir`: a folder the user *named* must exist, be a folder and hold at least
one of the data-set sub-folders (:data:`KNOWN_FOLDERS`), else :class:`DataDirError` says what is
wrong before anything is read or started. A path inside a data set that is there but is not a
regular file (a directory, a symbolic link loop or dangling link, a FIFO) raises
:class:`TraceFormatError` from :func:`find_data_file`: it is never taken for a missing file, so it
never falls back to a generator.

Example::

    >>> from workload.traces.datadir import resolve_data_dir
    >>> resolve_data_dir("/nonexistent/folder") is None
    True
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

__all__ = [
    "DATA_DIR_ENV",
    "DataDirError",
    "DataNotFound",
    "DataSource",
    "TraceFormatError",
    "KNOWN_FOLDERS",
    "check_named_data_dir",
    "checkout_data_dir",
    "describe_data_error",
    "find_data_file",
    "load_or_generate",
    "resolve_data_dir",
]

#: Environment variable naming the folder that holds the trace sub-folders.
DATA_DIR_ENV = "STREAMPLACE_DATA_DIR"

logger = logging.getLogger(__name__)

#: The data-set sub-folders a data folder holds (``DataSource.folder`` of every reader; a test
#: keeps this list equal to them). A named data folder must hold at least one.
KNOWN_FOLDERS = (
    "alibaba-genai-v2026-requests",
    "alibaba-gpu-v2023",
    "azure-llm-inference-2023",
    "gavel-colocation-throughputs",
    "carbon-intensity",
)

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


class DataDirError(ValueError):
    """A data folder the user named (an argument, ``--data-dir`` or ``$STREAMPLACE_DATA_DIR``) is
    unusable: empty, missing, not a folder, unreadable, or holding none of :data:`KNOWN_FOLDERS`.

    Example::

        >>> check_named_data_dir("/nonexistent", option="--data-dir")   # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        workload.traces.datadir.DataDirError: --data-dir /nonexistent is not a folder (...)
    """


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


def _named(option: str, value: str) -> str:
    return f"{option}={value!r}" if option.startswith("$") else f"{option} {value}"


def check_named_data_dir(explicit: str | Path | None = None, *,
                         option: str = "the data_dir argument") -> Path | None:
    """The data folder a command reads, checked when the user named it; raises
    :class:`DataDirError` with one line saying what is wrong.

    ``explicit`` (``option`` says how the user gave it, e.g. ``"--data-dir"``) or else a set
    ``$STREAMPLACE_DATA_DIR`` is *named*: it must not be the empty string, must exist, be a folder
    (symbolic links to one are fine) and hold at least one of :data:`KNOWN_FOLDERS` or nothing at
    all (an empty folder: the generators, which say so; docker-compose's mount on a host without
    the data); a named folder never falls back to the search. With nothing named, the search of
    :func:`resolve_data_dir` runs (``<checkout>/../shared/data``, ``./data``) and ``None`` (no
    folder: generators, which say so) is no error.

    Example::

        >>> check_named_data_dir("", option="--data-dir")   # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        workload.traces.datadir.DataDirError: --data-dir is the empty string: ...
    """
    if explicit is not None:
        text = str(explicit)
        if not text.strip():
            raise DataDirError(
                f"{option} is the empty string: name the folder that holds the data-set "
                f"folders, or leave it out to use ${DATA_DIR_ENV}, {checkout_data_dir()} or ./data")
    else:
        option = f"${DATA_DIR_ENV}"
        text = os.environ.get(DATA_DIR_ENV, "").strip()
        if not text:
            return resolve_data_dir()
    path = Path(text).expanduser()
    named = _named(option, text)
    try:
        info = path.stat()
    except FileNotFoundError:
        why = ("a symbolic link to a missing target" if path.is_symlink() else
               "it does not exist")
        raise DataDirError(f"{named} is not a folder ({why})") from None
    except NotADirectoryError:
        raise DataDirError(f"{named} is not a folder (a part of the path is a file)") from None
    except OSError as exc:
        raise DataDirError(f"{named} cannot be used: {_os_reason(exc)}") from None
    if not stat.S_ISDIR(info.st_mode):
        kind = "a file" if stat.S_ISREG(info.st_mode) else "not a regular folder"
        raise DataDirError(f"{named} is not a folder (it is {kind})")
    try:
        present = [name for name in KNOWN_FOLDERS if (path / name).is_dir()]
        empty = not present and next(path.iterdir(), None) is None
    except OSError as exc:
        raise DataDirError(f"{named} cannot be read: {_os_reason(exc)}") from None
    if empty:
        # An empty folder holds no data set, and the generators say so: docker-compose mounts
        # the host's data folder at /data and names it in $STREAMPLACE_DATA_DIR, and on a host
        # without the data that mount is an empty folder (the stack must still run).
        return path
    if not present:
        layout = ", ".join(f"{name}/" for name in KNOWN_FOLDERS)
        hint = (f"; {path.name} is itself a data-set folder: name its parent, {path.parent}"
                if path.name in KNOWN_FOLDERS else "")
        raise DataDirError(
            f"{named} holds none of the data-set folders ({layout}): name the folder above "
            f"them (docs/data.md){hint}")
    return path


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a symbolic link loop"
    return exc.strerror or str(exc)


def describe_data_error(exc: BaseException) -> str:
    """One line for an error met while reading data: the message with its line breaks folded;
    an :class:`OSError` with a file as ``cannot read <file>: <reason>``.

    Example::

        >>> describe_data_error(PermissionError(13, "Permission denied", "/d/x.csv"))
        'cannot read /d/x.csv: Permission denied'
    """
    if isinstance(exc, OSError) and not isinstance(exc, DataNotFound) and exc.filename:
        text = f"cannot read {exc.filename}: {_os_reason(exc)}"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def _not_a_file(path: Path) -> str | None:
    """Why ``path`` is there but is no readable trace file, or ``None`` when it is absent.
    Raises the :class:`OSError` of a path that cannot be examined (permission denied)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            return f"is a symbolic link to {os.readlink(path)!r}, which does not exist"
        return None
    except NotADirectoryError:
        return f"cannot be there: {path.parent} is not a folder"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link loop, not a file"
        raise
    if stat.S_ISDIR(info.st_mode):
        return "is a directory, not a file"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file (a FIFO, socket or device)"
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
        problem = _not_a_file(path)
        if problem is not None:   # there, but no file: say so; never a generator's stand-in
            raise TraceFormatError(path, None, f"{problem}; {source.title} expects the file "
                                               f"{filename!r} here")
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
