"""The SubTask Description Matrix (STDM) of IAWP: what is known about each stage type.

Rows are stage types (the paper's "subtasks"; Gavel job types work the same), columns the
paper's profile metrics plus the speed-up (time on CPU / time on GPU). Only some entries are
measured: the paper's sparse online profiling measures two random entries of each new stage
(:meth:`STDM.sparse_profile`), and a completion model (``interference.ncf``) fills the rest.

Values are kept in their measured units; :meth:`STDM.normalized` scales each column to [0, 1]
(min-max over its observed entries, or fixed ``bounds``) for the completion models, and
:meth:`STDM.denormalize` maps completed values back.

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

from collections.abc import Callable, Iterable, Mapping

import numpy as np

__all__ = ["STDM", "STDM_METRICS", "GPU_METRICS"]

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
    ``bounds``: optional fixed ``{column: (low, high)}`` for :meth:`normalized`.
    """

    def __init__(self, rows: Iterable[str] = (), columns: Iterable[str] = STDM_METRICS,
                 bounds: Mapping[str, tuple[float, float]] | None = None) -> None:
        self.columns: list[str] = list(columns)
        if len(set(self.columns)) != len(self.columns) or not self.columns:
            raise ValueError(f"columns must be unique and non-empty, got {self.columns}")
        self.bounds = dict(bounds or {})
        unknown = sorted(set(self.bounds) - set(self.columns))
        if unknown:
            raise ValueError(f"bounds name unknown columns {unknown}")
        self.rows: list[str] = []
        self._values = np.full((0, len(self.columns)), np.nan)
        self._mask = np.zeros((0, len(self.columns)), dtype=bool)
        for row in rows:
            self.add_row(row)

    # ------------------------------------------------------------------ shape and indexing
    @property
    def shape(self) -> tuple[int, int]:
        return self._mask.shape

    @property
    def mask(self) -> np.ndarray:
        """Observed entries (a copy)."""
        return self._mask.copy()

    def add_row(self, row: str) -> int:
        """Index of ``row``, appended (all unobserved) if it is new."""
        if row in self.rows:
            return self.rows.index(row)
        self.rows.append(row)
        self._values = np.vstack([self._values, np.full((1, len(self.columns)), np.nan)])
        self._mask = np.vstack([self._mask, np.zeros((1, len(self.columns)), dtype=bool)])
        return len(self.rows) - 1

    def row_index(self, row: str | int) -> int:
        if isinstance(row, (int, np.integer)):
            if not 0 <= row < len(self.rows):
                raise IndexError(f"row {row} outside 0..{len(self.rows) - 1}")
            return int(row)
        try:
            return self.rows.index(row)
        except ValueError:
            raise KeyError(f"unknown row {row!r}; rows: {self.rows}") from None

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
    def observe(self, row: str | int, column: str | int, value: float) -> None:
        """Record one measured entry (a new row name is added; a repeat overwrites)."""
        value = float(value)
        if not np.isfinite(value):
            raise ValueError(f"measured value must be finite, got {value!r}")
        r = self.add_row(row) if isinstance(row, str) else self.row_index(row)
        c = self.column_index(column)
        self._values[r, c] = value
        self._mask[r, c] = True

    def sparse_profile(self, row: str, rng: np.random.Generator, entries: int = 2, *,
                       measure: Callable[[str, str], float]) -> dict[str, float]:
        """The paper's sparse online profiling: measure ``entries`` random unobserved metrics of
        ``row`` with ``measure(row, column)`` and record them. Returns ``{column: value}``.

        A new row gets exactly ``entries`` measurements (fewer only if the row has fewer
        unobserved columns); ``rng`` makes the choice reproducible.
        """
        if entries < 0:
            raise ValueError(f"entries must be >= 0, got {entries}")
        r = self.add_row(row)
        free = np.flatnonzero(~self._mask[r])
        chosen = rng.choice(free, size=min(entries, free.size), replace=False)
        measured = {}
        for c in sorted(int(c) for c in chosen):
            column = self.columns[c]
            measured[column] = float(measure(row, column))
            self.observe(r, c, measured[column])
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
