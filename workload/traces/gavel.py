"""Gavel's measured co-location throughputs: GPU interference ground truth (OSDI'20, MIT).

Files (under ``<data dir>/gavel-colocation-throughputs/``): ``simulation_throughputs.json``
(the values Gavel's simulator uses; default) and ``physical_cluster_throughputs.json`` (the
same structure, measured on the physical cluster, slightly different values)::

    {gpu_type: {"('ResNet-50 (batch size 64)', 1)": {"null": alone_steps_per_s,
                                                     "<partner key>": [this_job, partner], ...}}}

``gpu_type`` is ``k80``, ``p100``, ``v100`` plus ``*_unconsolidated`` variants (multi-GPU jobs
spread over servers). Keys are (job type, scale factor = #GPUs): 26 job types at scale 1 and 19
of them also at scales 2, 4 and 8, i.e. 83 jobs per GPU type (77 on ``k80_unconsolidated``).
Jobs pair only with jobs of the same scale; ``[0, 0]`` means the pair cannot co-run. An isolated
throughput of 0 means the job cannot run on that GPU type at all (3 jobs on ``k80`` in the
simulation file, 4 in the physical one); its pairs are all ``[0, 0]``.

Example::

    >>> from workload.traces import load_or_generate_colocation
    >>> table = load_or_generate_colocation()           # real file if present, else generated
    >>> s = table.stats("v100")                          # doctest: +SKIP
    >>> round(s.combined_p50, 2), round(s.infeasible_fraction, 2)          # doctest: +SKIP
    (1.37, 0.64)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .datadir import DataSource, TraceFormatError, find_data_file, load_or_generate
from .records import ColocationStats, ColocationTable, JobKey, as_job_key

__all__ = [
    "GAVEL",
    "GAVEL_FILES",
    "ColocationStats",
    "ColocationTable",
    "JobKey",
    "load_gavel",
    "load_or_generate_colocation",
    "read_gavel",
]

GAVEL = DataSource(
    folder="gavel-colocation-throughputs",
    title="Gavel co-location throughputs",
    url="https://github.com/stanford-futuredata/gavel (scheduler/simulation_throughputs.json, "
        "scheduler/physical_cluster_throughputs.json)",
    license="MIT, Copyright (c) 2020 Stanford Future Data Systems",
)

#: ``measurements`` argument of :func:`load_gavel` -> file name.
GAVEL_FILES = {"simulation": "simulation_throughputs.json",
               "physical": "physical_cluster_throughputs.json"}


def _line_of(text: str, keys: list[str]) -> int | None:
    # JSON parsing forgets positions; find the nested key in the (pretty-printed) text instead.
    pos = 0
    for key in keys:
        found = text.find(json.dumps(key), pos)
        if found < 0:
            return None
        pos = found
    return text.count("\n", 0, pos) + 1


def _number(value, *, positive: bool) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and (value > 0 if positive else value >= 0))


def read_gavel(path: str | Path) -> ColocationTable:
    """Read a Gavel throughputs JSON file from an explicit path.

    A structural problem raises :class:`TraceFormatError` naming the file, the line of the
    offending key and the key path (GPU type / job / partner).

    Example::

        >>> # read_gavel(".../simulation_throughputs.json").gpu_types[:3] -> ('k80', 'p100', 'v100')
    """
    text = Path(path).read_text(encoding="utf-8")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(path, exc.lineno, f"invalid JSON: {exc.msg}") from None

    def fail(keys: list[str], problem: str) -> TraceFormatError:
        return TraceFormatError(path, _line_of(text, keys), f"{' / '.join(keys)}: {problem}")

    if not isinstance(raw, dict) or not raw:
        raise TraceFormatError(path, 1, "expected a non-empty object {gpu_type: {job: {...}}}")
    isolated: dict[str, dict[JobKey, float]] = {}
    colocated: dict[str, dict[tuple[JobKey, JobKey], tuple[float, float]]] = {}
    for gpu, jobs in raw.items():
        if not isinstance(jobs, dict):
            raise fail([gpu], "expected an object of jobs")
        iso: dict[JobKey, float] = {}
        keyed: dict[str, JobKey] = {}
        for job_text, entry in jobs.items():
            try:
                if not job_text.startswith("("):
                    raise ValueError(job_text)
                job = as_job_key(job_text)
            except (ValueError, SyntaxError):
                raise fail([gpu, job_text], "job key is not \"('<job type>', <scale>)\"") from None
            # 0 alone means the job cannot run on this GPU type at all (e.g. K80 memory).
            if not isinstance(entry, dict) or not _number(entry.get("null"), positive=False):
                raise fail([gpu, job_text], "needs \"null\": isolated throughput >= 0")
            iso[job] = float(entry["null"])
            keyed[job_text] = job
        pairs: dict[tuple[JobKey, JobKey], tuple[float, float]] = {}
        for job_text, entry in jobs.items():
            for partner_text, value in entry.items():
                if partner_text == "null":
                    continue
                where = [gpu, job_text, partner_text]
                if partner_text not in keyed:
                    raise fail(where, f"partner is not a job measured on {gpu!r}")
                if (not isinstance(value, list) or len(value) != 2
                        or not all(_number(v, positive=False) for v in value)):
                    raise fail(where,
                               f"expected [this_job, partner] throughputs >= 0, got {value!r}")
                job, partner = keyed[job_text], keyed[partner_text]
                if (iso[job] == 0 or iso[partner] == 0) and any(value):
                    raise fail(where, "a job that cannot run alone (isolated 0) cannot co-run")
                pairs[(job, partner)] = (float(value[0]), float(value[1]))
        isolated[gpu] = iso
        colocated[gpu] = pairs
    return ColocationTable(isolated, colocated, source=str(path))


def load_gavel(data_dir: str | Path | None = None, *,
               measurements: str = "simulation") -> ColocationTable:
    """Gavel's table: ``measurements="simulation"`` (default) or ``"physical"``.

    Example::

        >>> t = load_gavel()                                                # doctest: +SKIP
        >>> t.normalized("ResNet-50 (batch size 64)", "A3C", "v100")        # doctest: +SKIP
        (0.86..., 0.90...)
    """
    if measurements not in GAVEL_FILES:
        raise ValueError(f"measurements must be one of {sorted(GAVEL_FILES)}, got {measurements!r}")
    return read_gavel(find_data_file(GAVEL, GAVEL_FILES[measurements], data_dir))


def load_or_generate_colocation(data_dir: str | Path | None = None, *,
                                measurements: str = "simulation", seed: int = 0,
                                n_jobs: int = 26) -> ColocationTable:
    """:func:`load_gavel`, or a synthetic low-rank table on k80/p100/v100 if the file is missing.

    Example::

        >>> t = load_or_generate_colocation("/nonexistent", n_jobs=6)
        >>> t.gpu_types, t.source.startswith("generated: ")
        (('k80', 'p100', 'v100'), True)
    """
    from .generators import generate_colocation_table

    return load_or_generate(lambda: load_gavel(data_dir, measurements=measurements),
                            lambda: generate_colocation_table(n_jobs, seed=seed))
