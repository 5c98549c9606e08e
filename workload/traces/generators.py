"""Built-in generators with the same output types and realistic shapes as the real traces.

Used when the third-party data is absent (see ``load_or_generate_*``) and in tests. Every
generator is deterministic for its ``seed``; shapes (model mix, size distributions, burstiness,
co-location gains) are approximations measured on the real files, see ``docs/data.md``.

Example::

    >>> from workload.traces.generators import bursty_arrivals, poisson_arrivals
    >>> steady = poisson_arrivals(2.0, n=1000, seed=1)       # about 500 s of arrivals
    >>> bursts = bursty_arrivals(2.0, n=1000, seed=1)        # same mean rate, clustered
    >>> steady[0], len(bursts)
    (0.0, 1000)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .records import (
    ColocationTable,
    InferenceRequest,
    JobKey,
    NodeInventory,
    NodeTable,
    PodRecord,
    PodTrace,
    RequestTrace,
)

__all__ = [
    "ALIBABA_NODE_PROFILES",
    "DEFAULT_GPU_PROFILES",
    "bursty_arrivals",
    "generate_colocation_table",
    "generate_nodes",
    "generate_pods",
    "generate_requests",
    "lognormal_sizes",
    "mmpp_arrivals",
    "poisson_arrivals",
]

#: (gpu model, gpus, cpu milli, memory MiB, nodes) of the Alibaba v2023 ``all_node`` inventory:
#: the generated inventory draws node configurations with these frequencies.
ALIBABA_NODE_PROFILES: tuple[tuple[str, int, int, int, int], ...] = (
    ("", 0, 32000, 65536, 10), ("", 0, 32000, 131072, 23), ("", 0, 32000, 262144, 129),
    ("", 0, 64000, 131072, 4), ("", 0, 64000, 262144, 8), ("", 0, 64000, 524288, 22),
    ("", 0, 96000, 393216, 30), ("", 0, 96000, 524288, 59), ("", 0, 96000, 786432, 1),
    ("", 0, 104000, 196608, 1), ("", 0, 104000, 524288, 20), ("", 0, 104000, 786432, 3),
    ("A10", 1, 128000, 1048576, 2), ("G2", 8, 96000, 393216, 549),
    ("G3", 8, 128000, 786432, 39), ("P100", 1, 8000, 61440, 3), ("P100", 2, 8000, 61440, 2),
    ("P100", 2, 16000, 122880, 107), ("P100", 2, 64000, 262144, 22),
    ("T4", 2, 104000, 524288, 387), ("T4", 4, 96000, 393216, 17),
    ("V100M16", 1, 8000, 32768, 19), ("V100M16", 4, 32000, 131072, 28),
    ("V100M16", 8, 64000, 262144, 7), ("V100M16", 8, 82000, 344064, 1),
    ("V100M32", 4, 48000, 376832, 9), ("V100M32", 8, 96000, 786432, 21),
)

#: GPU type -> (median speed relative to k80, mean and spread of one job's co-location
#: slowdown), from Gavel's simulation file: speeds are median isolated-throughput ratios (p100
#: 3.2x, v100 4.8x); a job keeps p10/p50/p90 = 0.40/0.54/0.69 of its throughput on k80,
#: 0.42/0.59/0.79 on p100, 0.31/0.68/1.00 on v100 (V100 shares best but most unevenly).
DEFAULT_GPU_PROFILES: dict[str, tuple[float, float, float]] = {
    "k80": (1.0, 0.46, 0.11), "p100": (3.2, 0.41, 0.145), "v100": (4.8, 0.32, 0.27),
}


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _check_n_or_duration(n: int | None, duration_s: float | None) -> None:
    if (n is None) == (duration_s is None):
        raise ValueError("give exactly one of n (number of arrivals) or duration_s")
    if n is not None and n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if duration_s is not None and not duration_s > 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")


def poisson_arrivals(rate_per_s: float, *, n: int | None = None, duration_s: float | None = None,
                     seed: int = 0) -> list[float]:
    """Poisson arrivals at ``rate_per_s``: ``n`` of them, or all within ``duration_s``.

    Times are seconds from the first arrival (which is at 0.0), like the trace readers'.

    Example::

        >>> a = poisson_arrivals(10.0, n=5, seed=0)
        >>> len(a), a[0], a == sorted(a)
        (5, 0.0, True)
    """
    return mmpp_arrivals([rate_per_s], [1.0], n=n, duration_s=duration_s, seed=seed)


def mmpp_arrivals(rates_per_s: Sequence[float], mean_dwell_s: Sequence[float], *,
                  n: int | None = None, duration_s: float | None = None,
                  seed: int = 0) -> list[float]:
    """Markov-modulated Poisson arrivals: state ``i`` lasts Exp(``mean_dwell_s[i]``) seconds
    with Poisson rate ``rates_per_s[i]``, then the process jumps to another state uniformly.

    Example::

        >>> a = mmpp_arrivals([0.5, 20.0], [60.0, 5.0], n=200, seed=2)
        >>> len(a), a[0]
        (200, 0.0)
    """
    _check_n_or_duration(n, duration_s)
    if len(rates_per_s) != len(mean_dwell_s) or not rates_per_s:
        raise ValueError("rates_per_s and mean_dwell_s need the same, non-zero length")
    if any(r < 0 for r in rates_per_s) or not any(r > 0 for r in rates_per_s):
        raise ValueError(f"rates must be >= 0 and not all zero, got {list(rates_per_s)}")
    if any(d <= 0 for d in mean_dwell_s):
        raise ValueError(f"mean dwell times must be > 0, got {list(mean_dwell_s)}")
    rng = _rng(seed)
    states = len(rates_per_s)
    state = int(rng.integers(states))
    clock, chunks, count = 0.0, [], 0
    # The chain advances one dwell at a time; the arrivals inside a dwell are uniform given
    # their Poisson count, which keeps this vectorised inside each dwell.
    while (n is not None and count < n) or (duration_s is not None and clock < duration_s):
        if states > 1:
            dwell = rng.exponential(mean_dwell_s[state])
        else:  # plain Poisson: one chunk normally covers everything (loop tops up if short)
            dwell = n / rates_per_s[0] + 10.0 / rates_per_s[0] if n is not None else duration_s
        k = rng.poisson(rates_per_s[state] * dwell)
        if k:
            chunks.append(np.sort(clock + rng.uniform(0.0, dwell, size=k)))
            count += k
        clock += dwell
        if states > 1:
            state = (state + 1 + int(rng.integers(states - 1))) % states
    times = np.concatenate(chunks) if chunks else np.empty(0)
    if n is not None:
        times = times[:n]
    if times.size:
        times = times - times[0]
    if duration_s is not None:
        times = times[times < duration_s]
    return [float(t) for t in times]


def bursty_arrivals(rate_per_s: float, *, n: int | None = None, duration_s: float | None = None,
                    burst_ratio: float = 20.0, burst_share: float = 0.1,
                    mean_burst_s: float | None = None, seed: int = 0) -> list[float]:
    """Two-state MMPP with mean rate ``rate_per_s``: bursts ``burst_ratio`` times the quiet rate
    for a ``burst_share`` of the time, lasting ``mean_burst_s`` on average (default: 100 mean
    inter-arrival gaps). Inter-arrival gaps of the real traces have a coefficient of variation
    of 12-13 (GenAI, Azure code; Azure conv 1.1, Poisson 1); these defaults give about 2 while
    keeping the span of ``n`` arrivals within roughly +-30% of ``n / rate_per_s``. Raise
    ``burst_ratio`` and ``mean_burst_s`` for burstier, less predictable streams.

    Example::

        >>> a = bursty_arrivals(1.0, duration_s=600.0, seed=4)
        >>> all(t < 600.0 for t in a)
        True
    """
    if not (rate_per_s > 0 and burst_ratio >= 1 and 0 < burst_share < 1):
        raise ValueError("need rate_per_s > 0, burst_ratio >= 1, 0 < burst_share < 1")
    quiet = rate_per_s / (1 - burst_share + burst_ratio * burst_share)
    burst_s = mean_burst_s if mean_burst_s is not None else 100.0 / rate_per_s
    quiet_s = burst_s * (1 - burst_share) / burst_share
    return mmpp_arrivals([quiet, quiet * burst_ratio], [quiet_s, burst_s], n=n,
                         duration_s=duration_s, seed=seed)


def lognormal_sizes(n: int, *, median: float, sigma: float, seed: int = 0) -> list[float]:
    """``n`` lognormal work sizes with the given median and log-space standard deviation.

    Example::

        >>> s = lognormal_sizes(1001, median=23.0, sigma=0.57, seed=0)
        >>> 20 < sorted(s)[500] < 26
        True
    """
    if median <= 0 or sigma < 0:
        raise ValueError("median must be > 0 and sigma >= 0")
    return [float(x) for x in _rng(seed).lognormal(np.log(median), sigma, size=n)]


def generate_nodes(n_nodes: int = 64, *, seed: int = 0, cpu_only: bool = True) -> NodeTable:
    """A heterogeneous inventory drawn from the Alibaba v2023 node configurations.

    ``cpu_only=False`` leaves out CPU-only nodes (like the ``gpu_node`` file).

    Example::

        >>> t = generate_nodes(100, seed=0)
        >>> len(t), len(t.model_counts()) > 3
        (100, True)
    """
    profiles = [p for p in ALIBABA_NODE_PROFILES if cpu_only or p[1] > 0]
    weights = np.array([p[4] for p in profiles], dtype=float)
    picks = _rng(seed).choice(len(profiles), size=n_nodes, p=weights / weights.sum())
    nodes = tuple(
        NodeInventory(name=f"gen-node-{i:04d}", cpu_milli=profiles[k][2],
                      memory_mib=profiles[k][3], gpu_count=profiles[k][1],
                      gpu_model=profiles[k][0])
        for i, k in enumerate(picks)
    )
    return NodeTable(nodes, source=f"generated: generate_nodes({n_nodes}, seed={seed})")


def _choice(rng: np.random.Generator, options: Mapping, size: int) -> list:
    keys = list(options)
    p = np.array([options[k] for k in keys], dtype=float)
    return [keys[i] for i in rng.choice(len(keys), size=size, p=p / p.sum())]


def generate_pods(n_pods: int = 1000, *, seed: int = 0,
                  duration_s: float = 149 * 86400.0) -> PodTrace:
    """Pods shaped like Alibaba v2023 ``default``: bursty creation over ``duration_s``,
    lognormal lifetimes (median ~9 min), 86% one-GPU pods, 44% of those on a fractional share.

    Example::

        >>> p = generate_pods(200, seed=0)
        >>> len(p), any(x.fractional_gpu for x in p), p.arrivals()[0]
        (200, True, 0.0)
    """
    rng = _rng(seed)
    created = bursty_arrivals(n_pods / duration_s, n=n_pods, seed=seed + 1)
    num_gpu = _choice(rng, {1: 0.857, 0: 0.134, 8: 0.0054, 2: 0.002, 4: 0.0018}, n_pods)
    shares = _choice(rng, {810: 1078, 470: 750, 320: 328, 650: 253, 230: 140, 460: 128,
                           590: 75, 160: 74, 550: 72, 220: 62}, n_pods)
    fractional = rng.random(n_pods) < 0.44
    cpu = np.maximum(500, np.round(rng.lognormal(np.log(11300), 0.69, n_pods) / 500) * 500)
    mem = np.round(rng.lognormal(np.log(41500), 0.8, n_pods))
    life = rng.lognormal(6.3, 1.9, n_pods)
    qos = _choice(rng, {"LS": 0.57, "BE": 0.417, "Burstable": 0.012, "Guaranteed": 0.001},
                  n_pods)
    phase = _choice(rng, {"Running": 0.637, "Failed": 0.229, "Pending": 0.11,
                          "Succeeded": 0.024}, n_pods)
    delay = rng.exponential(2.0, n_pods)
    pods = []
    for i in range(n_pods):
        start = int(created[i])
        g = num_gpu[i]
        milli = 0 if g == 0 else (shares[i] if g == 1 and fractional[i] else 1000)
        pods.append(PodRecord(
            name=f"gen-pod-{i:04d}", cpu_milli=int(cpu[i]), memory_mib=int(mem[i]), num_gpu=g,
            gpu_milli=milli, gpu_spec=(), qos=qos[i], phase=phase[i], creation_s=start,
            deletion_s=start + int(life[i]),
            scheduled_s=None if phase[i] == "Pending" else start + int(delay[i]),
        ))
    return PodTrace(tuple(pods), source=f"generated: generate_pods({n_pods}, seed={seed})")


# Mean arrival rates of the real traces: GenAI 26,823 requests / 23 days, Azure code 8,819 / h.
_STYLE_RATE = {"genai": 26823 / (23.0 * 86400), "llm": 8819 / 3600.0}


def generate_requests(n_requests: int = 1000, *, seed: int = 0, style: str = "genai",
                      bursty: bool = True, rate_per_s: float | None = None,
                      duration_s: float | None = None, name: str | None = None) -> RequestTrace:
    """Inference requests shaped like a real trace.

    ``style="genai"``: Stable-Diffusion-like (exec time lognormal, median 23 s; 30 steps mostly;
    Zipf-like model popularity over 87 ids). ``style="llm"``: Azure-like (context tokens median
    ~1,500, generated ~13-130). Arrivals are bursty (MMPP) or Poisson at ``rate_per_s``, or at
    ``n_requests / duration_s``, or at the real trace's mean rate.

    Example::

        >>> t = generate_requests(100, seed=0, style="llm", duration_s=60.0)
        >>> len(t), t[0].context_tokens is not None, t.source
        (100, True, 'generated: generate_requests(100, seed=0, style=llm)')
    """
    if style not in _STYLE_RATE:
        raise ValueError(f"style must be 'genai' or 'llm', got {style!r}")
    rate = rate_per_s or (n_requests / duration_s if duration_s else _STYLE_RATE[style])
    make = bursty_arrivals if bursty else poisson_arrivals
    arrivals = make(rate, n=n_requests, seed=seed + 1) if n_requests else []
    rng = _rng(seed)
    label = name or style
    if style == "genai":
        kinds = _choice(rng, {"TXT_2_IMG": 0.911, "IMG_2_IMG": 0.082, "INPAINTING": 0.007},
                        n_requests)
        status = _choice(rng, {"SUCCEED": 0.984, "FAILED": 0.015, "PENDING": 0.001}, n_requests)
        exec_ms = rng.lognormal(np.log(23000.0), 0.57, n_requests)
        steps = _choice(rng, {30: 0.907, 40: 0.051, 28: 0.007, 50: 0.005, 25: 0.004, 20: 0.026},
                        n_requests)
        popularity = 1.0 / np.arange(1, 88) ** 1.1  # a few base models dominate, as in the trace
        models = rng.choice(87, size=n_requests, p=popularity / popularity.sum())
        images = _choice(rng, {1: 0.578, 4: 0.192, 8: 0.148, 2: 0.082}, n_requests)
        loras = _choice(rng, {0: 0.832, 1: 0.156, 2: 0.012}, n_requests)
        groups = rng.zipf(1.5, n_requests) % 4247
        prompt = rng.lognormal(np.log(90.0), 0.6, n_requests)
        requests = tuple(InferenceRequest(
            request_id=f"{label}-{i}", arrival_s=arrivals[i], kind=kinds[i],
            exec_time_ms=float(exec_ms[i]), steps=steps[i], model_id=f"M{models[i]:04d}",
            status=status[i], group_id=f"G{groups[i]:04d}", prompt_length=int(prompt[i]),
            images=images[i], num_lora=loras[i],
        ) for i in range(n_requests))
    else:
        context = np.clip(rng.lognormal(np.log(1500.0), 1.2, n_requests), 2, 14000).astype(int)
        generated = np.clip(rng.lognormal(np.log(40.0), 1.0, n_requests), 1, 2000).astype(int)
        requests = tuple(InferenceRequest(
            request_id=f"{label}-{i}", arrival_s=arrivals[i], kind=label,
            context_tokens=int(context[i]), generated_tokens=int(generated[i]),
        ) for i in range(n_requests))
    return RequestTrace(label, requests,
                        source=f"generated: generate_requests({n_requests}, seed={seed}, "
                               f"style={style})")


def generate_colocation_table(
    n_jobs: int = 26, *, seed: int = 0,
    gpu_types: Sequence[str] | Mapping[str, tuple[float, float, float]] = ("k80", "p100", "v100"),
    rank: int = 3, noise: float = 0.05, infeasible_fraction: float = 0.64,
) -> ColocationTable:
    """A synthetic co-location table: low-rank interference + noise + memory-like infeasibility.

    Job ``j`` keeps ``1 - mean_g - spread_g * z[j, k] + noise`` of its isolated throughput next
    to ``k``, where ``z`` is the standardised product ``sensitivity_j . pressure_k`` of rank
    ``rank`` non-negative factors (clipped to [0.02, 1]);
    a pair cannot co-run when the two jobs' memory footprints exceed a threshold chosen so that
    about ``infeasible_fraction`` of the ordered pairs (self-pairs included, as in Gavel) are
    ``(0, 0)``. Isolated throughputs are lognormal, scaled per GPU type by a per-job speed
    around the type's median speed. ``gpu_types`` are names from ``DEFAULT_GPU_PROFILES`` or a
    mapping ``{name: (median speed, mean slowdown, slowdown spread)}``.

    Example::

        >>> t = generate_colocation_table(8, seed=0)
        >>> s = t.stats("v100")
        >>> s.pairs, 0.4 < s.infeasible_fraction < 0.8
        (64, True)
    """
    if n_jobs < 2 or rank < 1 or not 0 <= infeasible_fraction < 1:
        raise ValueError("need n_jobs >= 2, rank >= 1, 0 <= infeasible_fraction < 1")
    profiles = (dict(gpu_types) if isinstance(gpu_types, Mapping)
                else {g: DEFAULT_GPU_PROFILES[g] for g in gpu_types})
    rng = _rng(seed)
    jobs = [JobKey(f"synthetic-{i:02d}", 1) for i in range(n_jobs)]
    sensitivity = rng.uniform(0.0, 1.0, (n_jobs, rank))
    pressure = rng.uniform(0.0, 1.0, (n_jobs, rank))
    raw = sensitivity @ pressure.T                           # [j, k]: how much k slows j
    z = (raw - raw.mean()) / raw.std()
    footprint = rng.uniform(0.1, 1.0, n_jobs)
    together = footprint[:, None] + footprint[None, :]
    limit = np.quantile(together, 1.0 - infeasible_fraction) if infeasible_fraction else np.inf
    infeasible = together > limit
    base = rng.lognormal(np.log(10.0), 1.0, n_jobs)          # steps/s on the reference type
    isolated: dict[str, dict[JobKey, float]] = {}
    colocated: dict[str, dict[tuple[JobKey, JobKey], tuple[float, float]]] = {}
    for gpu, (speed, mean_slowdown, spread) in profiles.items():
        per_job_speed = speed * rng.lognormal(0.0, 0.25 if speed != 1.0 else 0.0, n_jobs)
        iso = base * per_job_speed
        share = np.clip(1.0 - mean_slowdown - spread * z
                        + rng.normal(0.0, noise, (n_jobs, n_jobs)), 0.02, 1.0)
        isolated[gpu] = {job: float(iso[i]) for i, job in enumerate(jobs)}
        colocated[gpu] = {
            (jobs[j], jobs[k]): ((0.0, 0.0) if infeasible[j, k]
                                 else (float(share[j, k] * iso[j]), float(share[k, j] * iso[k])))
            for j in range(n_jobs) for k in range(n_jobs)
        }
    return ColocationTable(isolated, colocated,
                           source=f"generated: generate_colocation_table({n_jobs}, seed={seed})")
