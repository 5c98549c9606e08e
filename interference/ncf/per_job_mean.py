"""Baseline: predict each row's mean of its observed entries.

A row ("job", "stage") with no observed entry gets the global mean of all observed entries
(``fallback="global"``) or its columns' means (``fallback="column"``: what the other rows saw
with that partner / metric). No learning, no randomness: ``seed`` is accepted and ignored.

Example::

    >>> import numpy as np
    >>> m = np.array([[0.2, 0.4], [0.9, 0.0]]); mask = np.array([[True, True], [True, False]])
    >>> PerJobMean().fit(m, mask).complete().round(2).tolist()
    [[0.3, 0.3], [0.9, 0.9]]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from interference.ncf._base import CompletionModel, as_index_arrays, check_observations

__all__ = ["PerJobMean", "PerJobMeanSettings"]


@dataclass(frozen=True)
class PerJobMeanSettings:
    fallback: str = "global"   # row with nothing observed: "global" mean or "column" means

    def __post_init__(self) -> None:
        if self.fallback not in ("global", "column"):
            raise ValueError(f"fallback must be 'global' or 'column', got {self.fallback!r}")


class PerJobMean(CompletionModel):
    """Row mean of the observed entries; global (or column) mean for rows never observed."""

    name = "per_job_mean"
    Settings = PerJobMeanSettings

    def fit(self, matrix: np.ndarray, mask: np.ndarray, seed: int = 0) -> PerJobMean:
        matrix, mask = check_observations(matrix, mask)
        self._store(matrix, mask)
        self._refresh()
        return self

    def _refresh(self) -> None:
        values = np.where(self.mask, self.matrix, 0.0)
        counts = self.mask.sum(axis=1)
        total = self.mask.sum()
        self.global_mean = float(values.sum() / total) if total else 0.0
        col_counts = self.mask.sum(axis=0)
        self.column_means = np.where(col_counts > 0, values.sum(axis=0) / np.maximum(col_counts, 1),
                                     self.global_mean)
        self.row_means = np.where(counts > 0, values.sum(axis=1) / np.maximum(counts, 1), np.nan)

    def predict(self, rows, cols) -> np.ndarray:
        rows, cols = as_index_arrays(rows, cols, self.shape)
        means = self.row_means[rows]
        fallback = (np.full(rows.shape, self.global_mean) if self.settings.fallback == "global"
                    else self.column_means[cols])
        return np.where(np.isnan(means), fallback, means)

    def online_update(self, rows, cols, values, steps: int | None = None) -> PerJobMean:
        """Records the entries and recomputes the means (``steps`` is ignored)."""
        self._record(rows, cols, values)
        self._refresh()
        return self
