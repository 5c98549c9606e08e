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

from ._parse import open_bounded, shown
from .datadir import DataNotFound, DataSource, TraceFormatError, find_data_file, load_or_generate
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

# Bounds of a Gavel file, far outside the two real files (values in brackets). Parsed JSON costs
# 10-20x its size in memory, so the byte bound is what keeps a hostile file cheap.
#: File size [1.24 MB].
MAX_GAVEL_BYTES = 16 * 2**20
#: GPU types [6], jobs per GPU type [83], (job, partner) pairs over all types [10,338].
MAX_GPU_TYPES = 64
MAX_JOBS = 1_000
MAX_PAIRS = 500_000
#: Characters of a GPU type or job key [19 and 39], and a job's scale factor (#GPUs) [1-8].
MAX_KEY_CHARS = 200
MAX_SCALE = 1024
#: Isolated throughput in steps/s when the job can run at all [0.347 - 699]: a subnormal or
#: huge value would turn co-run rates and speed factors into inf/NaN downstream.
ISOLATED_RANGE = (1e-4, 1e5)
#: A job's co-located / isolated throughput in a feasible pair [0.0084 (physical file; 0.091 in
#: the simulation file) - 1.012]. A job running 1000x slower next to a partner is not a
#: measurement; ratios near 1e-6 made a simulation run without end.
RATIO_RANGE = (1e-3, 2.0)
#: Relative tolerance between a pair and its mirror (the real files mirror exactly).
MIRROR_TOLERANCE = 1e-9


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_object(pairs: list[tuple[str, object]]) -> dict:
    # json keeps the last of two equal keys silently; a second measurement of a pair is an error.
    obj: dict = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


def _line_of(text: str, keys: list[str]) -> int | None:
    # JSON parsing forgets positions; find the nested key in the (pretty-printed) text instead.
    pos = 0
    for key in keys:
        found = text.find(json.dumps(key), pos)
        if found < 0:
            return None
        pos = found
    return text.count("\n", 0, pos) + 1


def _load_json(path: str | Path) -> tuple[str, object]:
    """The file's text and parsed JSON, read within MAX_GAVEL_BYTES; every failure (encoding,
    syntax, duplicate keys, nesting, digit limits, memory, I/O) as a TraceFormatError."""
    try:
        with open_bounded(path, MAX_GAVEL_BYTES) as handle:
            data = handle.read(MAX_GAVEL_BYTES + 1)
    except (DataNotFound, TraceFormatError):
        raise
    except (OSError, MemoryError) as exc:
        raise TraceFormatError(path, None, f"cannot read: {shown(str(exc))}") from None
    if len(data) > MAX_GAVEL_BYTES:
        raise TraceFormatError(path, None, f"more than {MAX_GAVEL_BYTES} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TraceFormatError(path, line, f"not UTF-8 text: {exc.reason}") from None
    try:
        return text, json.loads(text, object_pairs_hook=_unique_object)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(path, exc.lineno, f"invalid JSON: {exc.msg}") from None
    except _DuplicateKey as exc:
        raise TraceFormatError(path, None, f"key {shown(exc.key)} appears twice in one "
                                           f"object") from None
    except RecursionError:
        raise TraceFormatError(path, None, "JSON nested too deeply") from None
    except (ValueError, MemoryError) as exc:  # e.g. an integer over Python's digit limit
        raise TraceFormatError(path, None, f"invalid JSON: {shown(str(exc))}") from None


def _not_a_throughput(value) -> str | None:
    """Why ``value`` is no throughput >= 0 (NaN and infinities named), or None if it is one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{shown(value)} is not a number"
    if math.isnan(value):
        return "NaN is not a number"
    if math.isinf(value):
        return f"{value} is not finite"
    if value < 0:
        return f"{value!r} is negative"
    return None


def _plain_name(name: str) -> bool:
    return 0 < len(name) <= MAX_KEY_CHARS and not any(ord(c) < 32 for c in name)


def _job_key(job_text: str) -> JobKey:
    """Gavel's ``"('<job type>', <scale>)"`` key, or ValueError saying what is wrong."""
    generic = "job key is not \"('<job type>', <scale>)\""
    if len(job_text) > MAX_KEY_CHARS or not job_text.startswith("("):
        raise ValueError(generic)
    try:
        job = as_job_key(job_text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise ValueError(generic) from None
    if isinstance(job.scale, bool) or not 1 <= job.scale <= MAX_SCALE:
        raise ValueError(f"scale {job.scale!r} is not a GPU count in 1..{MAX_SCALE}")
    if not _plain_name(job.model):
        raise ValueError("job type is empty or holds control characters")
    return job


class _GavelReader:
    """One file's checks; ``fail`` names the file, the line of the key and the key path."""

    def __init__(self, path: str | Path, text: str):
        self.path, self.text = path, text
        self.pair_count = 0

    def fail(self, keys: list[str], problem: str) -> TraceFormatError:
        where = " / ".join(k if len(k) <= 100 else shown(k) for k in keys)
        return TraceFormatError(self.path, _line_of(self.text, keys), f"{where}: {problem}")

    def isolated(self, gpu: str, jobs: dict) -> tuple[dict[JobKey, float], dict[str, JobKey]]:
        if len(jobs) > MAX_JOBS:
            raise self.fail([gpu], f"{len(jobs)} jobs, more than {MAX_JOBS}")
        iso: dict[JobKey, float] = {}
        keyed: dict[str, JobKey] = {}
        low, high = ISOLATED_RANGE
        for job_text, entry in jobs.items():
            try:
                job = _job_key(job_text)
            except ValueError as exc:
                raise self.fail([gpu, job_text], str(exc)) from None
            if job in iso:
                raise self.fail([gpu, job_text], f"names the same job as an earlier key {job}")
            # 0 alone means the job cannot run on this GPU type at all (e.g. K80 memory).
            if not isinstance(entry, dict) or "null" not in entry:
                raise self.fail([gpu, job_text], "needs \"null\": isolated throughput >= 0")
            value = entry["null"]
            problem = _not_a_throughput(value)
            if problem is None and value != 0 and not low <= value <= high:
                problem = f"{value!r} is outside [{low:g}, {high:g}] steps/s (0: cannot run)"
            if problem:
                raise self.fail([gpu, job_text, "null"], f"isolated throughput: {problem}")
            iso[job] = float(value)
            keyed[job_text] = job
        return iso, keyed

    def pairs(self, gpu: str, jobs: dict, iso: dict[JobKey, float],
              keyed: dict[str, JobKey]) -> dict[tuple[JobKey, JobKey], tuple[float, float]]:
        pairs: dict[tuple[JobKey, JobKey], tuple[float, float]] = {}
        for job_text, entry in jobs.items():
            for partner_text, value in entry.items():
                if partner_text == "null":
                    continue
                where = [gpu, job_text, partner_text]
                if partner_text not in keyed:
                    raise self.fail(where, f"partner is not a job measured on {shown(gpu)}")
                self.pair_count += 1
                if self.pair_count > MAX_PAIRS:
                    raise self.fail(where, f"more than {MAX_PAIRS} pairs in the file")
                job, partner = keyed[job_text], keyed[partner_text]
                pairs[(job, partner)] = self.pair(where, value, iso[job], iso[partner])
        self.mirrors(gpu, pairs, {job: text for text, job in keyed.items()})
        return pairs

    def pair(self, where: list[str], value, alone: float,
             partner_alone: float) -> tuple[float, float]:
        if not isinstance(value, list) or len(value) != 2:
            raise self.fail(where, f"expected [this_job, partner] throughputs >= 0, "
                                   f"got {shown(value)}")
        for v in value:
            problem = _not_a_throughput(v)
            if problem:
                raise self.fail(where, f"expected [this_job, partner] throughputs >= 0: "
                                       f"{problem}")
        if not any(value):
            return (0.0, 0.0)  # the pair cannot co-run
        if alone == 0 or partner_alone == 0:
            raise self.fail(where, "a job that cannot run alone (isolated 0) cannot co-run")
        low, high = RATIO_RANGE
        for which, ratio in (("this job", value[0] / alone),
                             ("the partner", value[1] / partner_alone)):
            if not low <= ratio <= high:
                raise self.fail(where, f"{which} keeps {ratio:.3g} of its isolated "
                                       f"throughput, outside [{low:g}, {high:g}] "
                                       f"([0, 0] marks a pair that cannot co-run)")
        return (float(value[0]), float(value[1]))

    def mirrors(self, gpu: str, pairs: dict, texts: dict[JobKey, str]) -> None:
        # Gavel lists (a, b) and (b, a); both must describe the same measurement.
        for (job, partner), (a, b) in pairs.items():
            mirror = pairs.get((partner, job))
            if mirror is not None and not (
                    math.isclose(mirror[0], b, rel_tol=MIRROR_TOLERANCE)
                    and math.isclose(mirror[1], a, rel_tol=MIRROR_TOLERANCE)):
                raise self.fail([gpu, texts[job], texts[partner]],
                                f"[{a!r}, {b!r}] disagrees with the mirrored pair's "
                                f"{list(mirror)!r}")


def read_gavel(path: str | Path) -> ColocationTable:
    """Read a Gavel throughputs JSON file from an explicit path.

    A structural problem, or a number outside the plausible ranges above, raises
    :class:`TraceFormatError` naming the file, the line of the offending key and the key path
    (GPU type / job / partner).

    Example::

        >>> # read_gavel(".../simulation_throughputs.json").gpu_types[:3] -> ('k80', 'p100', 'v100')
    """
    text, raw = _load_json(path)
    if not isinstance(raw, dict) or not raw:
        raise TraceFormatError(path, 1, "expected a non-empty object {gpu_type: {job: {...}}}")
    if len(raw) > MAX_GPU_TYPES:
        raise TraceFormatError(path, 1, f"{len(raw)} GPU types, more than {MAX_GPU_TYPES}")
    reader = _GavelReader(path, text)
    isolated: dict[str, dict[JobKey, float]] = {}
    colocated: dict[str, dict[tuple[JobKey, JobKey], tuple[float, float]]] = {}
    for gpu, jobs in raw.items():
        if not _plain_name(gpu):
            raise reader.fail([gpu], f"GPU type is empty, longer than {MAX_KEY_CHARS} "
                                     f"characters or holds control characters")
        if not isinstance(jobs, dict):
            raise reader.fail([gpu], "expected an object of jobs")
        isolated[gpu], keyed = reader.isolated(gpu, jobs)
        colocated[gpu] = reader.pairs(gpu, jobs, isolated[gpu], keyed)
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
