"""A cost model learned from finished tasks: any task type, any node, no calibration needed.

The hand-made :class:`workload.estimates.CostModel` knows only the built-in video-analytics
apps. A user's own operator has task types and sizes nobody profiled (the hook's defaults: the
operator's name and the record's length in bytes), so :class:`MeasuredCosts` learns, per
(task type, node), how many seconds of work a task of a given size takes there, from the
``TaskTiming`` records the executors report (:func:`placement.speed.timing_sample`).

**The fit.** Per (type, node), an exponentially weighted least-squares fit of
``seconds = a + b * size`` with ``a, b >= 0`` (:class:`AffineFit`). Why this and not a mean of
``seconds`` and of ``seconds / size``: a task's time is usually a fixed part (decode, model
call, Python overhead) plus a part that grows with the input, and which one dominates differs
per operator; the affine law covers both ends, is exact for the built-in apps' cost structure,
and its sufficient statistics are six floats. The weights decay (``smoothing``) so the fit
follows a node that gets slower.

**One sample moves a fit only so far** (a freak task, a first call that loads a model, or a
forged report on the feedback topic). Once the pair is trusted, a sample is clipped to within
``min(outlier_ratio, 1 + max_sample_influence * w)`` of the current estimate at its size first
(``w``: the fit's decayed weight, about its sample count early on; the band widened by the
sample's size over the fit's mean size, so a larger record is not mistaken for an outlier
while the slope is unknown), so a single sample moves the estimate by at most
``max_sample_influence`` of it early and much less later. And when a pair reaches
``min_samples``, its fit is rebuilt from those first samples, each clipped to within
``1 + max_sample_influence * (min_samples - 1)`` of the median one (widened by their sizes'
ratio, so a law ``a + b * size`` is never clipped): one forged first report of an hour (or a
microsecond) leaves the trusted fit within a third of the truth with the defaults, where it
used to leave it hundreds of times off, and a node looking that slow got no task to correct it.
Sizes that barely vary leave the slope undetermined: the fit is then a constant (the mean); so
does a single record at a size far from all others (the slope is used once two samples came
off the running mean size, ``AffineFit.MIN_OFF_MEAN``), and a trusted pair keeps a record at a
size far from those it has seen (more than ``AffineFit.FAR_SPREADS`` of their standard
deviations from their mean; any size off the mean while they have not varied) aside until a
second one comes: one forged record of size 0 and a microsecond among 20 of size 1,000 made the
estimate 10x off at 10x the usual size before 2026-12-05, one of size 10^11 and an hour would
have moved its constant to 180 s, and on a pair whose sizes vary (500 to 1,450) one record at
size 10,000 and an hour made every estimate 85x (before 2026-12-05, second session).

**Fallbacks**, for a pair with no samples of its own, in order:

1. the type's fits on other nodes, scaled by how much slower this node measured on the types
   both have run (geometric mean of the ratios of their fits, refreshed every
   ``speed_refresh_samples`` samples);
2. the optional ``prior`` (a ``CostModel``) for the built-in apps it knows;
3. the type's fits on other nodes scaled by the node specs' ``cpu_speed`` ratio;
4. ``default_s`` divided by the node's ``cpu_speed``.

**Exploration (cold start).** A pair with fewer than ``min_samples`` samples is *untrusted*.
For estimate-driven policies (:meth:`task_ms_on`, :meth:`estimate_s` with ``explore=True``), an
untrusted pair of a type that some node already runs trusted gets
``min(plain estimate, optimism * the best trusted estimate of that type at this size)``, so
MCT tries every node ``min_samples`` times for a new type before trusting the numbers (a slow
node costs at most ``min_samples`` slow tasks per type). The plain estimate of an untrusted
pair is the fallback chain's, moved toward its own partial fit by at most a factor
``1 + max_sample_influence * samples`` (:meth:`PairFits.bounded`): before 2026-12-05 it was the
partial fit itself, and one forged microsecond for a slow node tripled the work a cold router
sent there. ``explore=False`` (what the router counts as work sent to a node,
:meth:`task_work_ms`) never lowers an estimate.

**Bounds.** At most ``max_types`` types (least recently observed evicted) and
``max_nodes_per_type`` nodes per type; type and node names longer than ``max_key_chars`` are
folded into a digest. A sample whose time is not finite, not positive or above ``max_work_s``,
or whose size is not a finite number in ``[0, max_size]``, is refused and changes nothing.
Estimates are always finite, in ``[min_estimate_s, max_work_s]``.

It answers what policies and LDWP ask of a ``CostModel`` (``task_ms_on``, ``task_work_ms``,
``task_time_coefficients``; stage-level questions go to the prior) and is thread-safe (the
service's consumer thread feeds it while ``/decide`` reads it).

Example::

    >>> from workload.model import ClusterSpec, NodeSpec
    >>> costs = MeasuredCosts(ClusterSpec((NodeSpec("a", 1, 8.0), NodeSpec("b", 1, 8.0))),
    ...                       min_samples=3)
    >>> for size in (100, 200, 300):
    ...     _ = costs.observe("a", "my_op", size, 0.5 + 0.01 * size)
    >>> round(costs.estimate_s("a", "my_op", 400), 3)
    4.5
    >>> round(costs.estimate_s("b", "my_op", 400), 3)        # untried: optimistic
    2.25
    >>> round(costs.estimate_s("b", "my_op", 400, explore=False), 3)
    4.5
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Iterable

from workload.limits import finite_real
from workload.model import ClusterSpec, NodeSpec, Task

__all__ = ["MeasuredCosts", "AffineFit", "PairFits", "COST_SMOOTHING"]

#: Default weight decay per sample of a (type, node) fit: about the last 200 tasks count. It was
#: 0.05 (about 20) until 2026-12-03: on a CPU-quota-throttled host one task in a few waits out a
#: throttled period, 20 tasks are too few to average that, and MCT's bursts drained 12% slower
#: on the run it was chosen on (4.55 against 4.01 s) and 5% on a held-out one
#: (``python -m benchmarks.cost_smoothing``). A node that really gets slower is followed
#: within a few hundred of its tasks.
COST_SMOOTHING = 0.005

#: CostModel attributes about the built-in apps' stages; MeasuredCosts hands them to its prior.
_PRIOR_ATTRIBUTES = frozenset({"cpu_ms", "gpu_ms", "unit_ms", "stage_best_ms", "gpu_memory_mb",
                               "transfer_s", "stage", "gpu_speed", "calibration", "colocation",
                               "work_scale"})


class AffineFit:
    """Exponentially weighted least squares of ``seconds = a + b * size``, ``a, b >= 0``.

    Keeps weighted means and centred (co)variances (numerically safe for sizes up to 1e11);
    each sample first decays the old weights by ``1 - smoothing``. The constrained optimum is
    the unconstrained one when feasible, else the better of the two faces ``b = 0`` (the mean)
    and ``a = 0`` (through the origin), which is exact for this two-variable problem.

    Example::

        >>> fit = AffineFit(smoothing=0.1)
        >>> for size in (10, 20, 30):
        ...     fit.add(size, 1.0 + 0.5 * size)
        >>> [round(c, 6) for c in fit.coefficients()]
        [1.0, 0.5]
    """

    __slots__ = ("decay", "min_spread", "count", "weight", "mean_x", "mean_y", "sxx", "sxy",
                 "syy", "off_mean", "_coef")

    #: decayed count of samples whose size was off the running mean size (by more than
    #: ``min_spread``) below which the slope is not used: one record at a size far from all
    #: others (a forged size 0 and a microsecond) alone set the slope, and with it every
    #: estimate at other sizes, 10x off at 10x the usual size
    MIN_OFF_MEAN = 1.5
    #: weighted standard deviations of the sizes seen beyond which a size is far from them
    #: (:meth:`is_far`): such a record alone would pull the whole line through itself (one
    #: forged record at 10x the usual sizes and an hour made every estimate 85x)
    FAR_SPREADS = 3.0

    def __init__(self, smoothing: float, min_spread: float = 0.05):
        # min_spread: the weighted std of sizes, relative to their mean, below which the slope
        # is noise (records of nearly one length) and the fit is the mean time instead
        self.decay = 1.0 - smoothing
        self.min_spread = min_spread
        self.count = 0
        self.weight = self.mean_x = self.mean_y = self.sxx = self.sxy = self.syy = 0.0
        self.off_mean = 0.0
        self._coef = (0.0, 0.0)

    def add(self, size: float, seconds: float) -> None:
        decay = self.decay
        weight = decay * self.weight + 1.0
        share = 1.0 / weight
        dx, dy = size - self.mean_x, seconds - self.mean_y
        self.off_mean = decay * self.off_mean + (1.0 if self.is_off_mean(size) else 0.0)
        keep = 1.0 - share
        self.mean_x += share * dx
        self.mean_y += share * dy
        self.sxx = decay * self.sxx + keep * dx * dx
        self.sxy = decay * self.sxy + keep * dx * dy
        self.syy = decay * self.syy + keep * dy * dy
        self.weight = weight
        self.count += 1
        self._coef = self._solve()

    def is_off_mean(self, size: float) -> bool:
        """Whether ``size`` is off the running mean size (by more than ``min_spread``)."""
        return self.count > 0 and abs(size - self.mean_x) > self.min_spread * max(self.mean_x,
                                                                                     1.0)

    def is_far(self, size: float) -> bool:
        """Whether ``size`` is off the mean (:meth:`is_off_mean`) and more than
        :data:`FAR_SPREADS` standard deviations of the sizes seen from it (any size off the
        mean of a pair whose sizes have not varied)."""
        if not self.is_off_mean(size):
            return False
        spread = math.sqrt(max(self.sxx, 0.0) / self.weight) if self.weight > 0 else 0.0
        return abs(size - self.mean_x) > self.FAR_SPREADS * spread

    def sizes_vary(self) -> bool:
        """Whether enough samples came at sizes off the mean for the slope to be used."""
        return self.off_mean >= self.MIN_OFF_MEAN

    def coefficients(self) -> tuple[float, float]:
        """(a, b): seconds at size 0, seconds per size unit."""
        return self._coef

    def predict(self, size: float) -> float:
        a, b = self._coef
        return a + b * size

    def _sse(self, a: float, b: float) -> float:
        gap = self.mean_y - a - b * self.mean_x
        return self.syy + self.weight * gap * gap - 2.0 * b * self.sxy + b * b * self.sxx

    def _solve(self) -> tuple[float, float]:
        w, mx, my = self.weight, self.mean_x, self.mean_y
        spread = self.min_spread * max(mx, 1.0)
        if self.sxx <= spread * spread * w or not self.sizes_vary():
            return (my, 0.0)
        b = self.sxy / self.sxx
        a = my - b * mx
        if a >= 0.0 and b >= 0.0:
            return (a, b)
        origin_xx = self.sxx + w * mx * mx
        b0 = max(0.0, (self.sxy + w * mx * my) / origin_xx) if origin_xx > 0 else 0.0
        return min(((my, 0.0), (0.0, b0)), key=lambda c: self._sse(*c))


class PairFits:
    """The (task type, node) fits, bounded (least recently observed types and nodes evicted),
    each damped against single samples (the module docstring: a pair's first ``min_samples``
    samples are clipped around their median when it becomes trusted, later ones around its
    estimate), and what is read across its trusted fits (a pair's fit, a type's best
    estimate, two nodes' relative speed). Not thread-safe: :class:`MeasuredCosts` holds its
    lock around every call."""

    def __init__(self, smoothing: float, min_samples: int, outlier_ratio: float,
                 max_sample_influence: float, max_types: int, max_nodes_per_type: int,
                 min_estimate_s: float):
        self.smoothing, self.min_samples, self.outlier_ratio = smoothing, min_samples, \
            outlier_ratio
        self.max_sample_influence, self.min_estimate_s = max_sample_influence, min_estimate_s
        self.max_types, self.max_nodes_per_type = max_types, max_nodes_per_type
        self.fits: OrderedDict[str, OrderedDict[str, AffineFit]] = OrderedDict()
        # (type, node) -> its first samples until it is trusted (one entry per untrusted fit)
        self._first: dict[tuple[str, str], list[tuple[float, float]]] = {}
        # (type, node) -> one sample at a size off all the others', until a second one comes
        self._held: dict[tuple[str, str], tuple[float, float]] = {}

    def add(self, type_key: str, node_key: str, size: float, seconds: float) -> None:
        """One accepted sample (already checked to be plausible) of (type, node)."""
        fits = self.fits.get(type_key)
        if fits is None:
            fits = self.fits[type_key] = OrderedDict()
            if len(self.fits) > self.max_types:
                gone, gone_fits = self.fits.popitem(last=False)  # least recently observed
                for gone_node in gone_fits:
                    self._first.pop((gone, gone_node), None)
                    self._held.pop((gone, gone_node), None)
        else:
            self.fits.move_to_end(type_key)
        fit = fits.get(node_key)
        if fit is None:
            fit = fits[node_key] = AffineFit(self.smoothing)
            self._first[(type_key, node_key)] = []
            if len(fits) > self.max_nodes_per_type:
                evicted, _ = fits.popitem(last=False)
                self._first.pop((type_key, evicted), None)
                self._held.pop((type_key, evicted), None)
        else:
            fits.move_to_end(node_key)
        if fit.count >= self.min_samples:  # a trusted pair: damp a single outlier
            key = (type_key, node_key)
            if fit.is_far(size):
                # one record at a size far from all the others': kept aside until a second
                # one comes, so no single record sets a slope or moves the constant (one of
                # size 10^11 and an hour made a 0.1 s pair's estimate 180 s; one at 10x the
                # sizes of a pair whose sizes vary, every estimate 85x)
                held = self._held.pop(key, None)
                if held is None:
                    self._held[key] = (size, seconds)
                    return
                self._add_trusted(fit, *held)
            self._add_trusted(fit, size, seconds)
            return
        first = self._first.setdefault((type_key, node_key), [])
        first.append((size, seconds))
        fit.add(size, seconds)
        if fit.count >= self.min_samples:  # trusted from now on: built from robust samples
            fits[node_key] = self._robust_start(first)
            del self._first[(type_key, node_key)]

    def _add_trusted(self, fit: AffineFit, size: float, seconds: float) -> None:
        ratio = min(self.outlier_ratio, 1.0 + self.max_sample_influence * fit.weight)
        guess = max(self.min_estimate_s, fit.predict(size))
        fit.add(size, _clip(seconds, guess, ratio, size, fit.mean_x))

    def bounded(self, fit: AffineFit, reference_s: float, size: float) -> float:
        """An untrusted pair's estimate at ``size``: its partial fit, kept within
        ``1 + max_sample_influence * samples`` (at most ``outlier_ratio``) of what the fallback
        chain says without it (``reference_s``), so its first sample moves it by at most
        ``max_sample_influence`` of that and only ``min_samples`` samples make it the pair's own."""
        ratio = min(self.outlier_ratio, 1.0 + self.max_sample_influence * fit.count)
        reference_s = max(self.min_estimate_s, reference_s)
        return min(reference_s * ratio, max(reference_s / ratio, fit.predict(size)))

    def fit(self, type_key: str | None, node_key: str | None) -> AffineFit | None:
        """The fit of (type, node), trusted or not; None when unknown (or a key is None)."""
        fits = self.fits.get(type_key) if type_key is not None else None
        return fits.get(node_key) if fits and node_key is not None else None

    def best_trusted(self, fits, size: float) -> float | None:
        """The lowest trusted estimate at ``size`` among one type's ``fits`` (node -> fit), at
        least ``min_estimate_s``; None when none is trusted."""
        if not fits:
            return None
        values = [f.predict(size) for f in fits.values() if f.count >= self.min_samples]
        return max(self.min_estimate_s, min(values)) if values else None

    def log_ratio(self, node: str | None, other: str | None) -> tuple[float, int]:
        """(mean log(time on node / time on other), shared trusted types): each type both run
        trusted compared at the mean of the two fits' mean sizes."""
        total, shared = 0.0, 0
        for fits in self.fits.values():
            mine, theirs = fits.get(node), fits.get(other)
            if mine is None or theirs is None or mine.count < self.min_samples or \
                    theirs.count < self.min_samples:
                continue
            size = 0.5 * (mine.mean_x + theirs.mean_x)
            total += math.log(max(self.min_estimate_s, mine.predict(size))
                              / max(self.min_estimate_s, theirs.predict(size)))
            shared += 1
        return (total / shared if shared else 0.0), shared

    def _robust_start(self, first: list[tuple[float, float]]) -> AffineFit:
        """A pair's fit from its first samples, each clipped (:func:`_clip`) to within
        ``1 + max_sample_influence * (len - 1)`` of the median-time sample."""
        median_size, median_s = sorted(first, key=lambda sample: sample[1])[len(first) // 2]
        ratio = min(self.outlier_ratio, 1.0 + self.max_sample_influence * (len(first) - 1))
        fit = AffineFit(self.smoothing)
        for size, seconds in first:
            fit.add(size, _clip(seconds, median_s, ratio, size, median_size))
        return fit


class _TableSetting:
    """A MeasuredCosts setting that lives on its PairFits table (one copy, so setting it on
    MeasuredCosts changes what the table does)."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, costs, owner=None):
        return self if costs is None else getattr(costs._table, self.name)

    def __set__(self, costs, value) -> None:
        setattr(costs._table, self.name, value)


class MeasuredCosts:
    """Per (task type, node) work-time fits with fallbacks and exploration (module docstring).

    ``cluster``: node specs (their ``cpu_speed`` scales the default and spec-based transfers;
    their shapes key the prior). ``prior``: a ``CostModel`` for the built-in apps, or None.
    ``min_samples``: samples before a pair is trusted. ``optimism``: fraction of the type's
    best trusted estimate an untrusted pair gets (None: no exploration). ``smoothing``: weight
    decay per sample (about the last ``1 / smoothing`` samples count). Memory and sample
    bounds as documented above.
    """

    def __init__(self, cluster: ClusterSpec | None = None, prior=None, *,
                 default_s: float = 0.1, min_samples: int = 3, optimism: float | None = 0.5,
                 smoothing: float = COST_SMOOTHING, outlier_ratio: float = 10.0,
                 max_sample_influence: float = 0.5, max_types: int = 256,
                 max_nodes_per_type: int = 64, max_work_s: float = 3600.0,
                 max_size: int = 10**11, min_estimate_s: float = 1e-6,
                 max_key_chars: int = 200, speed_refresh_samples: int = 32):
        if not 0.0 < smoothing <= 1.0:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        if min_samples < 1 or max_types < 1 or max_nodes_per_type < 1:
            raise ValueError("min_samples, max_types and max_nodes_per_type must be >= 1")
        if optimism is not None and not 0.0 < optimism <= 1.0:
            raise ValueError(f"optimism must be in (0, 1] or None, got {optimism}")
        if not (0.0 < min_estimate_s < default_s <= max_work_s and outlier_ratio > 1.0
                and 0.0 < max_sample_influence <= 10.0):
            raise ValueError("need 0 < min_estimate_s < default_s <= max_work_s, "
                             "outlier_ratio > 1 and max_sample_influence in (0, 10]")
        self.prior, self.default_s, self.optimism = prior, float(default_s), optimism
        self.max_work_s, self.max_size = float(max_work_s), max_size
        self.max_key_chars = max_key_chars
        self.speed_refresh_samples = speed_refresh_samples
        self.version = 0      # accepted samples so far: caches of estimates compare it
        self.rejected = 0     # samples refused (hostile or broken)
        self._table = PairFits(smoothing, min_samples, outlier_ratio, max_sample_influence,
                               max_types, max_nodes_per_type, min_estimate_s)
        self._fits = self._table.fits   # type -> node -> fit (the table's own, not a copy)
        self._ratios: dict[tuple[str, str], tuple[int, float, int]] = {}
        self._prior_tables: dict[str, dict] = {}
        self._lock = threading.Lock()
        self.set_cluster(cluster)

    # The fit table's settings, kept in one place: set on MeasuredCosts, they apply to the table
    # (``smoothing`` to the fits created from then on; existing fits keep their decay).
    smoothing = _TableSetting("smoothing")
    min_samples = _TableSetting("min_samples")
    outlier_ratio = _TableSetting("outlier_ratio")
    max_sample_influence = _TableSetting("max_sample_influence")
    max_types = _TableSetting("max_types")
    max_nodes_per_type = _TableSetting("max_nodes_per_type")
    min_estimate_s = _TableSetting("min_estimate_s")

    def set_cluster(self, cluster: ClusterSpec | None) -> None:
        """Adopt new node specs (nodes joined or left); what was learned stays. Without specs
        every node counts as ``cpu_speed`` 1 and the prior is not asked."""
        with self._lock:
            self._specs = {n.node_id: n for n in cluster.nodes} if cluster is not None else {}
            self._prior_tables = {}

    # -- learning ---------------------------------------------------------------------------
    def observe(self, node: str, task_type: str, size, work_s) -> bool:
        """One finished task: ``work_s`` seconds of work for a task of ``size`` on ``node``.
        Returns False (and changes nothing but ``rejected``) for a sample it refuses."""
        node_key, type_key = self._key(node), self._key(task_type)
        size_f, seconds = _number(size), _number(work_s)
        if node_key is None or type_key is None or not 0.0 <= size_f <= self.max_size or \
                not 0.0 < seconds <= self.max_work_s:
            self.rejected += 1
            return False
        with self._lock:
            self._table.add(type_key, node_key, size_f, seconds)
            self.version += 1
        return True

    # -- estimates --------------------------------------------------------------------------
    def estimate_s(self, node: str, task_type: str, size, explore: bool = True,
                   spec: NodeSpec | None = None) -> float:
        """Seconds of work of a ``task_type`` task of ``size`` on ``node`` (always finite)."""
        return self.estimates_s((node,), task_type, size, explore, {node: spec} if spec else
                                None)[node]

    def estimates_s(self, nodes: Iterable[str], task_type: str, size, explore: bool = True,
                    specs: dict | None = None) -> dict[str, float]:
        """:meth:`estimate_s` for several nodes at once (one lock, one search for the type's
        best trusted node): what LDWP's encoder calls once per routed record."""
        size_f = min(float(self.max_size), max(0.0, _number(size, 0.0)))
        type_key = self._key(task_type)
        with self._lock:
            fits = self._fits.get(type_key) if type_key is not None else None
            best = self._table.best_trusted(fits, size_f) if explore and self.optimism else None
            out = {}
            for node in nodes:
                node_key = self._key(node)
                spec = (specs or {}).get(node) or self._specs.get(node)
                fit = fits.get(node_key) if fits else None
                if fit is not None and fit.count >= self.min_samples:
                    value = fit.predict(size_f)
                else:
                    value = self._fallback(task_type, fits, node_key, size_f, spec)
                    if fit is not None:  # its own few samples, trusted only so far
                        value = self._table.bounded(fit, value, size_f)
                    if best is not None:
                        value = min(value, self.optimism * best)
                out[node] = min(self.max_work_s, max(self.min_estimate_s, value))
            return out

    def samples(self, node: str, task_type: str) -> int:
        """Samples learned for (type, node) (those evicted count as 0)."""
        type_key, node_key = self._key(task_type), self._key(node)
        with self._lock:
            fit = self._table.fit(type_key, node_key)
            return fit.count if fit is not None else 0

    def trusted_line(self, node: str, task_type: str) -> tuple[float, float] | None:
        """(seconds at size 0, seconds per size unit) of a trusted (type, node) fit, None
        when untrusted or unknown: what a caller that asks per record keeps between samples
        (``version`` says when to ask again)."""
        type_key, node_key = self._key(task_type), self._key(node)
        with self._lock:
            fit = self._table.fit(type_key, node_key)
            return fit.coefficients() if fit is not None and fit.count >= self.min_samples \
                else None

    def trusted_fits(self) -> list[tuple[str, str, float, float, float, int]]:
        """(type, node, fixed_s, per_unit_s, mean size, samples) of every trusted pair, least
        recently observed type first (what :mod:`placement.cost_snapshot` hands on)."""
        with self._lock:
            return [(type_key, node_key, *fit.coefficients(), fit.mean_x, fit.count)
                    for type_key, fits in self._fits.items()
                    for node_key, fit in fits.items() if fit.count >= self.min_samples]

    def task_types(self) -> list[str]:
        """Type keys learned, least recently observed first."""
        with self._lock:
            return list(self._fits)

    def relative_speed(self, node: str, other: str) -> float | None:
        """How many times longer ``node`` takes than ``other`` on the types both run trusted
        (None when they share none)."""
        with self._lock:
            log_ratio, shared = self._log_ratio(self._key(node), self._key(other))
        return math.exp(log_ratio) if shared else None

    # -- what policies and LDWP ask of a cost model -------------------------------------------
    def task_ms_on(self, task: Task, node: NodeSpec) -> float:
        """Milliseconds ``task`` takes on ``node`` as policies should see it (exploring)."""
        return 1000.0 * self.estimate_s(node.node_id, task.app_id, task.input_size, True, node)

    def task_work_ms(self, task: Task, node: NodeSpec) -> float:
        """Milliseconds of work ``task`` puts on ``node`` (never lowered for exploration). The
        measured time is work time already, so this is :meth:`task_ms_on` without optimism."""
        return 1000.0 * self.estimate_s(node.node_id, task.app_id, task.input_size, False, node)

    def task_time_coefficients(self, node: NodeSpec) -> dict[str, tuple[float, float]]:
        """A snapshot ``{type: (fixed_s, per_unit_s)}`` of the node's own fits, over the prior's
        table. Live users (the router, LDWP) call :meth:`estimates_s` instead."""
        with self._lock:
            table = dict(self._prior_table(node.node_id, node))
            key = self._key(node.node_id)
            for type_key, fits in self._fits.items():
                if key in fits:
                    table[type_key] = fits[key].coefficients()
            return table

    def __getattr__(self, name: str):
        # Stage-level questions about the built-in apps (e.g. the kubernetes policy's) are the
        # prior's; without a prior there is nothing to answer them with.
        prior = self.__dict__.get("prior")
        if name in _PRIOR_ATTRIBUTES and prior is not None:
            return getattr(prior, name)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}"
                             + (" (a prior CostModel answers it)" if name in _PRIOR_ATTRIBUTES
                                else ""))

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_lock"]  # a lock does not travel; a new one is made on arrival
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # -- internals (the lock is held) ---------------------------------------------------------
    def _key(self, name) -> str | None:
        if not isinstance(name, str):
            return None
        if len(name) <= self.max_key_chars:
            return name
        digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=16)
        return f"{name[:self.max_key_chars // 2]}#{digest.hexdigest()}"

    def _fallback(self, task_type: str, fits, node_key: str, size: float,
                  spec: NodeSpec | None) -> float:
        trusted = [(m, f) for m, f in fits.items()
                   if m != node_key and f.count >= self.min_samples] if fits else []
        measured = []
        for other, fit in trusted:  # 1. other nodes, scaled by measured relative speed
            log_ratio, shared = self._log_ratio(node_key, other)
            if shared:
                measured.append(math.log(max(self.min_estimate_s, fit.predict(size)))
                                + log_ratio)
        if measured:
            return math.exp(sum(measured) / len(measured))
        if self.prior is not None and spec is not None:  # 2. the hand-made prior
            coefficients = self._prior_table(spec.node_id, spec).get(task_type)
            if coefficients is not None:
                return coefficients[0] + coefficients[1] * size
        speed = spec.cpu_speed if spec is not None else 1.0
        if trusted:  # 3. other nodes, scaled by the specs' CPU speeds
            logs = [math.log(max(self.min_estimate_s, fit.predict(size)))
                    + math.log(_spec_speed(self._specs.get(other)) / speed)
                    for other, fit in trusted]
            return math.exp(sum(logs) / len(logs))
        return self.default_s / speed  # 4. nothing known

    def _prior_table(self, node_id: str, spec: NodeSpec) -> dict:
        if self.prior is None:
            return {}
        table = self._prior_tables.get(node_id)
        if table is None:
            if len(self._prior_tables) > 4096:
                self._prior_tables.clear()
            table = self._prior_tables[node_id] = self.prior.task_time_coefficients(spec)
        return table

    def _log_ratio(self, node: str | None, other: str | None) -> tuple[float, int]:
        """(mean log(time on node / time on other), shared trusted types), cached for
        ``speed_refresh_samples`` samples."""
        cached = self._ratios.get((node, other))
        if cached is not None and self.version - cached[0] < self.speed_refresh_samples:
            return cached[1], cached[2]
        value, shared = self._table.log_ratio(node, other)
        if len(self._ratios) > 4096:
            self._ratios.clear()
        self._ratios[(node, other)] = (self.version, value, shared)
        return value, shared


def _clip(seconds: float, reference_s: float, ratio: float, size: float,
          reference_size: float) -> float:
    """``seconds`` kept within ``ratio`` of ``reference_s`` (a sample of ``reference_size``),
    the band widened by the sizes' ratio: a task ``k`` times larger may take up to ``ratio * k``
    times as long and one ``k`` times smaller down to ``1 / (ratio * k)``, so samples that
    follow a law ``a + b * size`` (``a, b >= 0``) are never clipped."""
    larger = max(size, 1.0) / max(reference_size, 1.0)
    high = reference_s * ratio * max(1.0, larger)
    low = reference_s / (ratio * max(1.0, 1.0 / larger))
    return min(high, max(low, seconds))


def _number(value, bad: float = math.nan) -> float:
    """``value`` as a float; ``bad`` for what is not a finite real number."""
    number = finite_real(value)
    return bad if number is None else number


def _spec_speed(spec: NodeSpec | None) -> float:
    return spec.cpu_speed if spec is not None else 1.0
