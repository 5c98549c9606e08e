"""Completion models for the STDM and for (job, partner) interference matrices.

One model per module, one small interface (:class:`interference.ncf._base.CompletionModel`):
``fit(matrix, mask, seed) -> self``, ``predict(rows, cols)``, ``complete()``,
``online_update(rows, cols, values, steps)``. torch is imported only inside these modules.

======================  ================================================================
name                    model
======================  ================================================================
per_job_mean            baseline: a row's mean of its observed entries
matrix_factorization    biases + latent dot product (squared error + L2, Adam)
paper_ncf               the paper's NCF: embeddings, concat, MLP 128-64-32, sigmoid; trained
                        towards an MF prior fitted on the same observed entries
neumf                   NeuMF: GMF and MLP towers fused
======================  ================================================================

Example::

    >>> import numpy as np
    >>> model = make_completion_model("per_job_mean")
    >>> model.fit(np.array([[0.5, np.nan]]), np.array([[True, False]])).complete().tolist()
    [[0.5, 0.5]]
"""

from __future__ import annotations

from interference.ncf._base import CompletionModel
from interference.ncf.matrix_factorization import MatrixFactorization, MatrixFactorizationSettings
from interference.ncf.neumf import NeuMF, NeuMFSettings
from interference.ncf.paper_ncf import PaperNCF, PaperNCFSettings
from interference.ncf.per_job_mean import PerJobMean, PerJobMeanSettings

__all__ = ["COMPLETION_MODELS", "make_completion_model", "CompletionModel", "PerJobMean",
           "PerJobMeanSettings", "MatrixFactorization", "MatrixFactorizationSettings", "PaperNCF",
           "PaperNCFSettings", "NeuMF", "NeuMFSettings"]

#: Registry name -> completion model class (the name is also the class's ``name``).
COMPLETION_MODELS: dict[str, type[CompletionModel]] = {
    cls.name: cls for cls in (PerJobMean, MatrixFactorization, PaperNCF, NeuMF)
}


def make_completion_model(name: str, **settings) -> CompletionModel:
    """Build the model registered as ``name`` with setting overrides (unknown ones raise)."""
    key = name.strip().lower()
    if key not in COMPLETION_MODELS:
        raise ValueError(f"unknown completion model {name!r}; known: "
                         f"{', '.join(sorted(COMPLETION_MODELS))}")
    return COMPLETION_MODELS[key](**settings)
