"""The trained interference models that ship with streamplace (``interference/models/``).

One file per (completion model, GPU type): the matrix factorisation and the paper's NCF fitted
on every feasible entry of Gavel's measured co-location matrix of that GPU type (26 scale-1
job types; entry (job, partner) = the job's throughput while sharing the GPU with the partner
over its throughput alone). Rebuilt bit for bit by ``python -m benchmarks.ship_models --models
ncf`` (seed 0; ``make models`` rebuilds everything); each file's metadata names the command,
the seed, the job types of its rows and columns and ``training_data_sha256`` (the matrix it
was fitted on: Gavel's file, or the generated stand-in on a machine without it).

Example::

    >>> model, meta = load_shipped_ncf("paper_ncf", "v100")        # doctest: +SKIP
    >>> meta["jobs"][:1], model.complete().shape                   # doctest: +SKIP
    (['A3C'], (26, 26))
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["SHIPPED_NCF_MODELS", "SHIPPED_GPU_TYPES", "shipped_ncf_model", "load_shipped_ncf"]

#: completion models shipped, and the GPU types each is shipped for
SHIPPED_NCF_MODELS = ("matrix_factorization", "paper_ncf")
SHIPPED_GPU_TYPES = ("k80", "p100", "v100")


def shipped_ncf_model(model: str, gpu_type: str) -> Path:
    """Path of the shipped file; ValueError naming what ships for an unknown pair."""
    if model not in SHIPPED_NCF_MODELS or gpu_type not in SHIPPED_GPU_TYPES:
        raise ValueError(f"no shipped interference model ({model!r}, {gpu_type!r}); shipped: "
                         f"{', '.join(SHIPPED_NCF_MODELS)} x {', '.join(SHIPPED_GPU_TYPES)}")
    path = Path(str(resources.files("interference") / "models" / f"{model}_{gpu_type}.spncf"))
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: rebuild it with "
                                f"`python -m benchmarks.ship_models --models ncf`")
    return path


def load_shipped_ncf(model: str, gpu_type: str):
    """(fitted completion model, its metadata) of a shipped file."""
    from interference.ncf.modelfile import parse_completion_model
    path = shipped_ncf_model(model, gpu_type)
    return parse_completion_model(path.read_bytes(), str(path))
