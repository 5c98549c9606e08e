"""Record types shared by the trace readers and the built-in generators.

Readers of real files and generators return the same types, so code written against a
generated trace runs unchanged on the real one. Every container carries ``source``: the file it
was read from, or ``"generated: <why>"``.
"""

from __future__ import annotations

import ast
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple, Union

__all__ = [
    "ColocationStats",
    "ColocationTable",
    "InferenceRequest",
    "JobKey",
    "NodeInventory",
    "NodeTable",
    "PodRecord",
    "PodTrace",
    "RequestTrace",
    "percentile",
    "time_compress",
]


# --------------------------------------------------------------------------------------- nodes
@dataclass(frozen=True, slots=True)
class NodeInventory:
    """One machine of a cluster inventory (Alibaba v2023 node list or generated).

    ``gpu_model`` is the string as in the file (``"T4"``, ``"V100M16"``, internal codes such as
    ``"G2"``); it is ``""`` for CPU-only nodes, which also have ``gpu_count == 0``.
    """

    name: str
    cpu_milli: int        # 1000 = one core
    memory_mib: int
    gpu_count: int
    gpu_model: str

    @property
    def has_gpu(self) -> bool:
        return self.gpu_count > 0

    @property
    def cpu_cores(self) -> float:
        return self.cpu_milli / 1000.0


@dataclass(frozen=True)
class NodeTable:
    """A node inventory plus where it came from.

    Example::

        >>> t = NodeTable((NodeInventory("n0", 32000, 131072, 2, "T4"),), source="demo")
        >>> len(t), t.model_counts()
        (1, {'T4': 1})
    """

    nodes: tuple[NodeInventory, ...]
    source: str

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[NodeInventory]:
        return iter(self.nodes)

    def __getitem__(self, index: int) -> NodeInventory:
        return self.nodes[index]

    def model_counts(self) -> dict[str, int]:
        """Nodes per GPU model, most frequent first (``""`` = CPU-only)."""
        return dict(Counter(n.gpu_model for n in self.nodes).most_common())


# ---------------------------------------------------------------------------------------- pods
@dataclass(frozen=True, slots=True)
class PodRecord:
    """One pod of the Alibaba v2023 trace (or generated); times are seconds on the trace clock.

    ``gpu_milli`` is the share of EACH requested GPU (1000 = a whole GPU; below 1000 = a
    fractional, shared GPU); ``gpu_spec`` lists the GPU models the pod may run on (empty = any).
    ``scheduled_s`` is ``None`` for pods never scheduled (phase ``Pending``).
    """

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...]
    qos: str
    phase: str
    creation_s: int
    deletion_s: int | None
    scheduled_s: int | None

    @property
    def gpu_request(self) -> float:
        """GPUs requested in total, e.g. 0.46 for a 460-milli share of one GPU."""
        return self.num_gpu * self.gpu_milli / 1000.0

    @property
    def fractional_gpu(self) -> bool:
        return 0 < self.gpu_milli < 1000

    @property
    def lifetime_s(self) -> int | None:
        return None if self.deletion_s is None else self.deletion_s - self.creation_s


@dataclass(frozen=True)
class PodTrace:
    """Pods in creation order plus where they came from.

    Example::

        >>> p = PodRecord("p", 1000, 1024, 1, 500, (), "BE", "Running", 30, 90, 31)
        >>> PodTrace((p,), source="demo").arrivals()
        [0.0]
    """

    pods: tuple[PodRecord, ...]
    source: str

    def __len__(self) -> int:
        return len(self.pods)

    def __iter__(self) -> Iterator[PodRecord]:
        return iter(self.pods)

    def __getitem__(self, index: int) -> PodRecord:
        return self.pods[index]

    def arrivals(self) -> list[float]:
        """Sorted creation times in seconds from the first pod's creation."""
        times = sorted(p.creation_s for p in self.pods)
        return [float(t - times[0]) for t in times] if times else []


# ------------------------------------------------------------------------------------ requests
@dataclass(frozen=True, slots=True)
class InferenceRequest:
    """One inference request of a serving trace (Alibaba GenAI, Azure LLM, or generated).

    Fields a source does not have are ``None``: GenAI requests carry ``exec_time_ms``, ``steps``,
    ``model_id`` ...; Azure LLM requests carry ``context_tokens`` and ``generated_tokens``.
    ``request_id`` is ``<trace name>-<line number in the file>`` for real traces.
    """

    request_id: str
    arrival_s: float                 # seconds since the trace's first request
    kind: str                        # GenAI predict_type, or "code" / "conv" for Azure
    exec_time_ms: float | None = None
    steps: int | None = None
    model_id: str | None = None
    status: str | None = None
    group_id: str | None = None
    prompt_length: int | None = None
    negative_prompt_length: int | None = None
    images: int | None = None
    num_lora: int | None = None
    context_tokens: int | None = None
    generated_tokens: int | None = None


@dataclass(frozen=True)
class RequestTrace:
    """Requests sorted by arrival, plus the trace name, its source and its wall-clock start.

    Example::

        >>> r = RequestTrace("demo", (InferenceRequest("demo-0", 0.0, "code"),), source="demo")
        >>> r.arrivals(), r.duration_s
        ([0.0], 0.0)
    """

    name: str
    requests: tuple[InferenceRequest, ...]
    source: str
    start: datetime | None = None    # wall-clock time of arrival_s == 0 (None when generated)

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[InferenceRequest]:
        return iter(self.requests)

    def __getitem__(self, index: int) -> InferenceRequest:
        return self.requests[index]

    def arrivals(self) -> list[float]:
        """Arrival times in seconds from the first request, ascending."""
        return [r.arrival_s for r in self.requests]

    @property
    def duration_s(self) -> float:
        return self.requests[-1].arrival_s - self.requests[0].arrival_s if self.requests else 0.0

    def filter(self, keep: Callable[[InferenceRequest], bool]) -> RequestTrace:
        """A trace with only the requests for which ``keep`` is true (arrivals unchanged)."""
        return RequestTrace(self.name, tuple(r for r in self.requests if keep(r)),
                            self.source, self.start)


def trace_from_timestamps(name: str, stamped: list[tuple[datetime, dict]],
                          source: str) -> RequestTrace:
    """Build a trace from ``(timestamp, InferenceRequest fields)`` pairs (readers' helper)."""
    stamped = sorted(stamped, key=lambda item: item[0])  # stable: file order among equal times
    start = stamped[0][0] if stamped else None
    requests = tuple(InferenceRequest(arrival_s=(stamp - start).total_seconds(), **fields)
                     for stamp, fields in stamped)
    return RequestTrace(name, requests, source, start)


def time_compress(arrivals: Sequence[float], factor: float) -> list[float]:
    """Replay a trace ``factor`` times faster: gaps shrink by ``factor``, the first time stays.

    Example::

        >>> time_compress([10.0, 20.0, 40.0], 10)
        [10.0, 11.0, 13.0]
    """
    if not (factor > 0 and math.isfinite(factor)):
        raise ValueError(f"factor must be a positive finite number, got {factor!r}")
    if not arrivals:
        return []
    origin = arrivals[0]
    return [origin + (t - origin) / factor for t in arrivals]


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), ``q`` in [0, 100].

    Example::

        >>> percentile([1.0, 2.0, 3.0, 4.0], 50)
        2.5
    """
    if not values:
        raise ValueError("percentile of an empty sequence")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


# ---------------------------------------------------------------------------------- colocation
class JobKey(NamedTuple):
    """A Gavel job: model (e.g. ``"ResNet-50 (batch size 64)"``) and scale factor (#GPUs)."""

    model: str
    scale: int = 1


JobLike = Union[JobKey, tuple, str]


def as_job_key(job: JobLike) -> JobKey:
    """Accept ``JobKey``, ``(model, scale)``, a model name (scale 1) or Gavel's key text.

    Example::

        >>> as_job_key("('A3C', 1)"), as_job_key("A3C"), as_job_key(("A3C", 2))
        (JobKey(model='A3C', scale=1), JobKey(model='A3C', scale=1), JobKey(model='A3C', scale=2))
    """
    if isinstance(job, JobKey):
        return job
    if isinstance(job, tuple) and len(job) == 2:
        return JobKey(str(job[0]), int(job[1]))
    if isinstance(job, str):
        if job.startswith("("):
            parsed = ast.literal_eval(job)  # Gavel writes keys as Python tuple text
            if (isinstance(parsed, tuple) and len(parsed) == 2 and isinstance(parsed[0], str)
                    and isinstance(parsed[1], int)):
                return JobKey(parsed[0], parsed[1])
            raise ValueError(f"not a (model, scale) key: {job!r}")
        return JobKey(job, 1)
    raise TypeError(f"not a job: {job!r}")


@dataclass(frozen=True)
class ColocationStats:
    """Summary of one GPU type's pairs (see :meth:`ColocationTable.stats`)."""

    gpu_type: str
    pairs: int
    infeasible: int
    normalized_p10: float     # one job's co-located / isolated throughput, feasible pairs
    normalized_p50: float
    normalized_p90: float
    combined_p10: float       # sum over both jobs of the normalized throughput, feasible pairs
    combined_p50: float
    combined_p90: float

    @property
    def feasible(self) -> int:
        return self.pairs - self.infeasible

    @property
    def infeasible_fraction(self) -> float:
        return self.infeasible / self.pairs if self.pairs else 0.0


def _ratio(throughput: float, alone: float) -> float:
    return throughput / alone if alone else 0.0  # a job that cannot run alone has no share


@dataclass(frozen=True)
class ColocationTable:
    """Isolated and pairwise co-located throughputs per GPU type (Gavel, or generated).

    ``isolated[gpu][job]`` is the job's throughput alone (0: it cannot run there);
    ``colocated[gpu][(job, partner)]`` is ``(throughput of job, throughput of partner)`` when both
    share the GPU(s), ``(0, 0)`` when the pair cannot co-run. Pairs are ordered and stored as in
    the source (Gavel lists both orders and each job with itself).

    Example::

        >>> a, b = JobKey("A"), JobKey("B")
        >>> t = ColocationTable({"v100": {a: 10.0, b: 4.0}},
        ...                     {"v100": {(a, b): (6.0, 3.0), (b, a): (3.0, 6.0)}}, source="demo")
        >>> t.normalized("A", "B", "v100"), t.feasible("A", "B", "v100")
        ((0.6, 0.75), True)
    """

    isolated: Mapping[str, Mapping[JobKey, float]]
    colocated: Mapping[str, Mapping[tuple[JobKey, JobKey], tuple[float, float]]]
    source: str
    _normalized: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Normalise once: the interference model asks for these in tight loops.
        norm: dict[str, dict[tuple[JobKey, JobKey], tuple[float, float]]] = {}
        for gpu, pairs in self.colocated.items():
            iso = self.isolated[gpu]
            norm[gpu] = {(j, p): (_ratio(thr[0], iso[j]), _ratio(thr[1], iso[p]))
                         for (j, p), thr in pairs.items()}
        object.__setattr__(self, "_normalized", norm)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(self.isolated)

    def jobs(self, gpu_type: str) -> tuple[JobKey, ...]:
        """Jobs measured on ``gpu_type``, in file order."""
        return tuple(self.isolated[gpu_type])

    def isolated_throughput(self, job: JobLike, gpu_type: str) -> float:
        return self.isolated[gpu_type][as_job_key(job)]

    def pairs(self, gpu_type: str, *, feasible_only: bool = False) -> list[tuple[JobKey, JobKey]]:
        """Ordered (job, partner) pairs measured on ``gpu_type`` (``feasible_only``: co-runnable).

        Example::

            >>> # table.pairs("v100", feasible_only=True)[0] -> (JobKey(model=..., scale=1), ...)
        """
        pairs = self.colocated[gpu_type]
        return [k for k, thr in pairs.items() if not feasible_only or thr != (0.0, 0.0)]

    def normalized(self, job: JobLike, partner: JobLike, gpu_type: str) -> tuple[float, float]:
        """(job's, partner's) co-located throughput / isolated throughput; (0, 0) if infeasible."""
        return self._normalized[gpu_type][(as_job_key(job), as_job_key(partner))]

    def feasible(self, job: JobLike, partner: JobLike, gpu_type: str) -> bool:
        """Whether the pair can co-run on ``gpu_type`` (KeyError if it was never measured)."""
        return self.colocated[gpu_type][(as_job_key(job), as_job_key(partner))] != (0.0, 0.0)

    def combined(self, job: JobLike, partner: JobLike, gpu_type: str) -> float:
        """Sum of both normalized throughputs: > 1 means sharing beats running one at a time."""
        a, b = self.normalized(job, partner, gpu_type)
        return a + b

    def speed_factor(self, job: JobLike, gpu_type: str, reference: str = "k80") -> float:
        """Isolated throughput on ``gpu_type`` / on ``reference``: the GPU's speed for this job.

        Example::

            >>> # table.speed_factor("ResNet-50 (batch size 64)", "v100")  ->  about 3-10
        """
        key = as_job_key(job)
        base = self.isolated[reference][key]
        if base == 0:
            raise ValueError(f"{key} cannot run on the reference GPU {reference!r}")
        return self.isolated[gpu_type][key] / base

    def stats(self, gpu_type: str, *, unordered: bool = False) -> ColocationStats:
        """Infeasible count and p10/p50/p90 of normalized and combined throughput.

        ``unordered=True`` counts each {job, partner} once (Gavel lists both orders and the
        pair with itself); the default counts ordered pairs as stored.
        """
        entries = self._normalized[gpu_type]
        keys = list(entries)
        if unordered:
            seen: set[frozenset] = set()
            kept = []
            for k in keys:
                s = frozenset(k)
                if s not in seen:
                    seen.add(s)
                    kept.append(k)
            keys = kept
        feasible = [entries[k] for k in keys if self.colocated[gpu_type][k] != (0.0, 0.0)]
        if not feasible:
            raise ValueError(f"no feasible pairs on {gpu_type!r}")
        own = [a for a, _ in feasible]
        both = [a + b for a, b in feasible]
        return ColocationStats(
            gpu_type=gpu_type, pairs=len(keys), infeasible=len(keys) - len(feasible),
            normalized_p10=percentile(own, 10), normalized_p50=percentile(own, 50),
            normalized_p90=percentile(own, 90),
            combined_p10=percentile(both, 10), combined_p50=percentile(both, 50),
            combined_p90=percentile(both, 90),
        )

