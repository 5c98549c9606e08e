"""The trained LDWP model files that ship with streamplace (``placement/models/``).

Each one is rebuilt bit-for-bit by the command in its row (same code, same seeds); the file's
metadata records the training and tuning seeds and the checkpoint chosen. Found through
``importlib.resources``, so an installed wheel has them too.

============= ================================== ====================================================
name          file                               rebuilt by
============= ================================== ====================================================
residual      ``ldwp_residual_paper.spm``        ``python -m benchmarks.ship_models --models residual``
size_agnostic ``ldwp_size_agnostic_paper.spm``   ``... --models size_agnostic``
paper         ``ldwp_paper_network_paper.spm``   ``... --models paper`` (11 output rows: the paper
                                                 cluster's nodes; other clusters via transfer)
energy        ``ldwp_energy_paper.spm``          ``... --models energy`` (the residual LDWP with
                                                 the energy-aware reward, ``energy_weight``)
============= ================================== ====================================================

``make models`` rebuilds every one.

Example::

    >>> shipped_model("residual").name
    'ldwp_residual_paper.spm'
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["SHIPPED_MODELS", "shipped_model"]

#: name -> file in ``placement/models/``
SHIPPED_MODELS = {"residual": "ldwp_residual_paper.spm",
                  "size_agnostic": "ldwp_size_agnostic_paper.spm",
                  "paper": "ldwp_paper_network_paper.spm",
                  "energy": "ldwp_energy_paper.spm"}


def shipped_model(name: str = "residual") -> Path:
    """Path of a shipped model file; ValueError naming the known ones for an unknown name."""
    if name not in SHIPPED_MODELS:
        raise ValueError(f"no shipped model {name!r}; shipped: {', '.join(sorted(SHIPPED_MODELS))}")
    path = Path(str(resources.files("placement") / "models" / SHIPPED_MODELS[name]))
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: rebuild it with "
                                f"`python -m benchmarks.ship_models --models {name}`")
    return path
