"""The SubTask Description Matrix (STDM) of IAWP: what is known about each stage type.

Rows are stage types (the paper's "subtasks"; Gavel job types work the same), columns the
paper's profile metrics plus the speed-up (time on CPU / time on GPU). Only some entries are
measured: the paper's sparse online profiling measures two random entries of each new stage
(:meth:`STDM.sparse_profile`), and a completion model (``interference.ncf``) fills the rest.

Values are kept in their measured units; :meth:`STDM.normalized` scales each column to [0, 1]
(min-max over its observed entries, or fixed ``bounds``) for the completion models, and
:meth:`STDM.denormalize` maps completed values back.

What is measured must be plausible (:meth:`STDM.observe` raises ValueError and records
nothing otherwise): a real number, not a bool or a text, finite, in [0, ``max_value``] (every
metric is a usage, an amount, a size or a ratio; the default bound, :data:`MAX_VALUE`, is
above an input of 10^9 pixels). Why: one 1e12 reading made a min-max column map every other
row to 0.

Example::

    >>> import numpy as np
    >>> stdm = STDM(["face_encoding", "frame_difference"])
    >>> stdm.observe("face_encoding", "gpu_sm", 0.9)
    >>> stdm.observe("frame_difference", "speedup", 6.0)
    >>> measured = stdm.sparse_profile("tracking", np.random.default_rng(0),
    ...                                measure=lambda row, col: 1.0)
    >>> len(measured), stdm.rows, int(stdm.mask.sum())
    (2, ['face_encoding', 'frame_difference', 'tracking'], 4)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from workload.limits import finite_real

__all__ = ["STDM", "STDM_METRICS", "GPU_METRICS", "MAX_VALUE"]

#: default largest measured value (see the module docstring)
MAX_VALUE = 1e10

#: The paper's profile metrics (columns), then the speed-up.
STDM_METRICS: tuple[str, ...] = (
    "cpu_usage", "host_memory", "gpu_sm", "l1_cache", "l2_cache", "texture_cache",
    "device_memory", "global_load_throughput", "global_store_throughput", "input_size",
    "speedup",
)

#: The GPU metrics, in ``calibration.yaml``'s ``stage_gpu_profile`` order: the vectors whose
#: cosine similarity drives IAWP's GPU-queue priority.
GPU_METRICS: tuple[str, ...] = STDM_METRICS[2:9]


class STDM:
    """A partially observed (row type x metric) matrix with named rows and columns.

    ``rows``: initial row names (more are added by :meth:`add_row`, :meth:`observe` and
    :meth:`sparse_profile`); ``columns``: metric names (default :data:`STDM_METRICS`);
    ``bounds``: optional fixed ``{column: (low, high)}`` for :meth:`normalized`;
    ``max_value``: the largest measured value accepted.

    Rows live in arrays that double when full and are found through a dict: adding n rows
    costs O(n), not the O(n^2) of stacking one row at a time (8,000 rows took 1.7 s).
    """

    def __init__(self, rows: Iterable[str] = (), columns: Iterable[str] = STDM_METRICS,
                 bounds: Mapping[str, tuple[float, float]] | None = None,
                 max_value: float = MAX_VALUE) -> None:
        self.columns: list[str] = list(columns)
        if len(set(self.columns)) != len(self.columns) or not self.columns:
            raise ValueError(f"columns must be unique and non-empty, got {self.columns}")
        self.bounds = dict(bounds or {})
        unknown = sorted(set(self.bounds) - set(self.columns))
        if unknown:
            raise ValueError(f"bounds name unknown columns {unknown}")
        if not (isinstance(max_value, (int, float)) and 0 < max_value < math.inf):
            raise ValueError(f"max_value must be a finite number > 0, got {max_value!r}")
        self.max_value = float(max_value)
        self.rows: list[str] = []
        self._index: dict[str, int] = {}
        self._store = np.full((8, len(self.columns)), np.nan)   # rows beyond len(rows): spare
        self._seen = np.zeros((8, len(self.columns)), dtype=bool)
        for row in rows:
            self.add_row(row)

    # ------------------------------------------------------------------ shape and indexing
    @property
    def _values(self) -> np.ndarray:
        return self._store[:len(self.rows)]

    @property
    def _mask(self) -> np.ndarray:
        return self._seen[:len(self.rows)]

    @property
    def shape(self) -> tuple[int, int]:
        return self._mask.shape

    @property
    def mask(self) -> np.ndarray:
        """Observed entries (a copy)."""
        return self._mask.copy()

    def add_row(self, row: str) -> int:
        """Index of ``row``, appended (all unobserved) if it is new."""
        if row in self._index:
            return self._index[row]
        n = len(self.rows)
        if n == self._store.shape[0]:   # full: double the room (amortised O(1) per row)
            self._store = np.vstack([self._store, np.full(self._store.shape, np.nan)])
            self._seen = np.vstack([self._seen, np.zeros(self._seen.shape, dtype=bool)])
        self.rows.append(row)
        self._index[row] = n
        return n

    def row_index(self, row: str | int) -> int:
        if isinstance(row, (int, np.integer)):
            if not 0 <= row < len(self.rows):
                raise IndexError(f"row {row} outside 0..{len(self.rows) - 1}")
            return int(row)
        try:
            return self._index[row]
        except (KeyError, TypeError):
            raise KeyError(f"unknown row {row!r}; rows: {self.rows[:20]}") from None

    def column_index(self, column: str | int) -> int:
        if isinstance(column, (int, np.integer)):
            if not 0 <= column < len(self.columns):
                raise IndexError(f"column {column} outside 0..{len(self.columns) - 1}")
            return int(column)
        try:
            return self.columns.index(column)
        except ValueError:
            raise KeyError(f"unknown column {column!r}; columns: {self.columns}") from None

    # ------------------------------------------------------------------ measuring
    def check_value(self, value) -> float:
        """``value`` as a float if it is a plausible measurement (module docstring), else
        ValueError."""
        number = finite_real(value)   # None for bools, text, NaN and inf; 10**400 clamps
        if number is None or not 0.0 <= number <= self.max_value:
            raise ValueError(f"measured value must be a number in [0, {self.max_value:g}], "
                             f"got {repr(value)[:40]}")
        return number

    def observe(self, row: str | int, column: str | int, value: float) -> None:
        """Record one measured entry (a new row name is added; a repeat overwrites). A value
        :meth:`check_value` refuses, an unknown column or row index raise and record nothing."""
        value = self.check_value(value)
        c = self.column_index(column)
        if isinstance(row, str):
            r = self.add_row(row)
        elif isinstance(row, (int, np.integer)) and not isinstance(row, bool):
            r = self.row_index(row)
        else:
            raise KeyError(f"a row is a name or an index, got {repr(row)[:40]}")
        self._store[r, c] = value
        self._seen[r, c] = True

    def sparse_profile(self, row: str, rng: np.random.Generator, entries: int = 2, *,
                       measure: Callable[[str, str], float]) -> dict[str, float]:
        """The paper's sparse online profiling: measure ``entries`` random unobserved metrics of
        ``row`` with ``measure(row, column)`` and record them. Returns ``{column: value}``.

        A new row gets exactly ``entries`` measurements (fewer only if the row has fewer
        unobserved columns); ``rng`` makes the choice reproducible.
        """
        if entries < 0:
            raise ValueError(f"entries must be >= 0, got {entries}")
        known = self._index.get(row)
        free = (np.flatnonzero(~self._mask[known]) if known is not None
                else np.arange(len(self.columns)))
        chosen = rng.choice(free, size=min(entries, free.size), replace=False)
        # every measurement is checked before any is recorded: all or nothing
        measured = {self.columns[c]: self.check_value(measure(row, self.columns[c]))
                    for c in sorted(int(c) for c in chosen)}
        r = self.add_row(row)
        for column, value in measured.items():
            self.observe(r, column, value)
        return measured

    # ------------------------------------------------------------------ views
    def to_numpy(self) -> np.ndarray:
        """Measured values in their units, NaN where unobserved (a copy)."""
        return self._values.copy()

    def column_range(self, column: str | int) -> tuple[float, float]:
        """(low, high) used to normalise ``column``: its ``bounds``, else min/max observed."""
        c = self.column_index(column)
        name = self.columns[c]
        if name in self.bounds:
            return tuple(map(float, self.bounds[name]))
        seen = self._values[self._mask[:, c], c]
        return (float(seen.min()), float(seen.max())) if seen.size else (0.0, 1.0)

    def normalized(self) -> tuple[np.ndarray, np.ndarray]:
        """(matrix scaled per column to [0, 1] (clipped), observed mask). Unobserved entries
        are NaN. A column whose observed values are all equal maps them to 0."""
        out = np.full(self.shape, np.nan)
        for c in range(len(self.columns)):
            low, high = self.column_range(c)
            span = high - low if high > low else 1.0
            observed = self._mask[:, c]
            out[observed, c] = np.clip((self._values[observed, c] - low) / span, 0.0, 1.0)
        return out, self.mask

    def denormalize(self, matrix: np.ndarray) -> np.ndarray:
        """Map a [0, 1] matrix (e.g. a completed :meth:`normalized`) back to measured units."""
        matrix = np.asarray(matrix, dtype=np.float64)
        if matrix.shape != self.shape:
            raise ValueError(f"expected shape {self.shape}, got {matrix.shape}")
        out = np.empty_like(matrix)
        for c in range(len(self.columns)):
            low, high = self.column_range(c)
            span = high - low if high > low else 1.0
            out[:, c] = low + matrix[:, c] * span
        return out

    def __repr__(self) -> str:
        return (f"STDM({len(self.rows)} rows x {len(self.columns)} columns, "
                f"{int(self._mask.sum())} observed)")
