"""Power of one node and energy of one finished task, for the node's feedback.

Issue 17 (build item 3): energy per task from NVML power readings where a GPU is present, and a
stated CPU estimate otherwise. Two numbers come from here:

**Node power** (``power_w`` of a NodeFeedback, :func:`node_power`):

- each of the node's GPUs: ``nvmlDeviceGetPowerUsage`` (milliwatts, the board's draw) read in
  the telemetry sample (:func:`read_gpu_power_w`). A reading that is not a finite number in
  [0, :data:`MAX_GPU_WATTS`] W, or that raises ``NVMLError`` (no power sensor, a MIG instance,
  a lost GPU), is ignored and counted, never published;
- the node's CPUs: an ESTIMATE, not a measurement (no portable per-process CPU power counter
  exists; RAPL is root-only and per socket): ``cores x (idle_w + (busy_w - idle_w) x util)``
  with the per-core watts of ``power: cpu_core`` in ``workload/calibration.yaml`` and the
  cgroup / process CPU utilisation the telemetry already has (:func:`cpu_power_estimate_w`).

``power_source`` says which: :data:`SOURCE_NVML_CPU` ("nvml+cpu-estimate") when at least one
GPU reading was valid, :data:`SOURCE_CPU` ("cpu-estimate") otherwise (a GPU node whose every
reading was refused reports the CPU estimate alone and counts the refusals), :data:`SOURCE_NVML`
("nvml") for GPU readings alone when the calibration gave no CPU watts, and :data:`SOURCE_NONE`
("", with ``power_w`` = -1) when there is neither.

**Energy per task** (a NodeFeedback's ``completed_energy_j``: one entry per task of its
``completed`` array, same order; :func:`task_energies_j`): each stage's busy time on its unit x
that unit's power share, summed over the task's stages (a reader uses the array only when it
is as long as ``completed``: a writer before it sends none):

- unit power: a GPU's measured power (mean of the readings at the start and end of the report
  interval when both are valid, else the one there is), else the calibration's ``busy_w`` of its
  GPU model; a CPU unit (a worker thread, one core busy) the per-core ``busy_w``;
- share: stages of the tasks reported together that overlap on one unit split the unit's power
  equally over the overlap (as :mod:`simulator.energy` splits dynamic power), so the energies
  of one report never add up to more than the units drew. A stage overlapping one reported in
  ANOTHER report is not seen as co-running and is charged the unit's whole power: an
  over-estimate, bounded by the unit's power x the stage's time.

Unlike the simulator (idle baseline + dynamic power + an even idle share), a measured GPU
reading already includes the board's idle draw, so a task's energy here is the board power
while it ran; the two agree when one task at a time runs on a unit.

Example::

    >>> from simulator.energy import PowerSpec
    >>> core = PowerSpec("cpu_core", 4.0, 14.0, (2400.0,))
    >>> cpu_power_estimate_w(0.5, 2, core)          # 2 x (4 + 10 x 0.5)
    18.0
    >>> task_energies_j({"t1": [("gpu:0", 0, 1000)], "t2": [("gpu:0", 500, 1000),
    ...                                                  ("cpu:0", 0, 2000)]},
    ...                 {"gpu:0": 200.0, "cpu": 14.0})
    {'t1': 150.0, 't2': 78.0}
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Hashable, Iterable, Mapping

from workload.limits import finite_real

__all__ = ["MAX_GPU_WATTS", "MAX_NODE_WATTS", "MAX_TASK_JOULES", "MAX_STAGE_MS",
           "SOURCE_NVML_CPU", "SOURCE_CPU", "SOURCE_NVML", "SOURCE_NONE", "POWER_SOURCES",
           "NOT_REPORTED", "read_gpu_power_w", "cpu_power_estimate_w", "node_power",
           "cpu_power_spec", "gpu_busy_w", "task_energies_j", "bounded_power", "bounded_energy",
           "bounded_watts"]

log = logging.getLogger(__name__)

#: Highest power believed of one GPU (W), the simulator's ``MAX_UNIT_WATTS``: the largest boards
#: draw ~1 kW; more is a unit error (a reading in mW read as W) or a broken sensor.
MAX_GPU_WATTS = 5_000.0
#: Highest node power published (W): 64 such GPUs; a larger sum is a bug, not a node.
MAX_NODE_WATTS = 64 * MAX_GPU_WATTS
#: Longest stage charged (ms, one day): a longer one is a clock jump, its energy not reported.
MAX_STAGE_MS = 86_400_000.0
#: Most energy one task may report (J): MAX_NODE_WATTS over MAX_STAGE_MS.
MAX_TASK_JOULES = MAX_NODE_WATTS * MAX_STAGE_MS / 1000.0
#: The schema's "not reported" value of ``power_w`` and of a ``completed_energy_j`` entry.
NOT_REPORTED = -1.0
SOURCE_NVML_CPU, SOURCE_CPU, SOURCE_NVML, SOURCE_NONE = \
    "nvml+cpu-estimate", "cpu-estimate", "nvml", ""
POWER_SOURCES = (SOURCE_NVML_CPU, SOURCE_CPU, SOURCE_NVML, SOURCE_NONE)


def read_gpu_power_w(nvml, handle) -> tuple[float | None, str | None]:
    """(watts, None) of one GPU from ``nvml.nvmlDeviceGetPowerUsage`` (milliwatts), or
    (None, why) when the call raised ``NVMLError`` or gave no finite number in
    [0, :data:`MAX_GPU_WATTS`] W.

    Example::

        >>> class FakeNvml:
        ...     class NVMLError(Exception): pass
        ...     @staticmethod
        ...     def nvmlDeviceGetPowerUsage(handle): return handle
        >>> read_gpu_power_w(FakeNvml, 71_500), read_gpu_power_w(FakeNvml, -5)[0]
        ((71.5, None), None)
    """
    try:
        milliwatts = nvml.nvmlDeviceGetPowerUsage(handle)
    except nvml.NVMLError as exc:  # no sensor (some MIG / vGPU setups), GPU lost
        return None, f"NVMLError: {exc}"
    number = finite_real(milliwatts)
    if number is None:
        return None, f"not a finite number: {milliwatts!r}"
    watts = number / 1000.0
    if not 0.0 <= watts <= MAX_GPU_WATTS:
        return None, f"{watts:g} W outside [0, {MAX_GPU_WATTS:g}]"
    return watts, None


def cpu_power_estimate_w(util: float, cores: float, spec) -> float:
    """ESTIMATED power (W) of ``cores`` CPU cores at utilisation ``util`` (clamped to [0, 1];
    not finite: 0): ``cores x (idle_w + (busy_w - idle_w) x util)`` with ``spec`` a
    :class:`~simulator.energy.PowerSpec` (``power: cpu_core``). Cores not finite or <= 0: 0."""
    u = finite_real(util)
    u = 0.0 if u is None else min(1.0, max(0.0, u))
    n = finite_real(cores)
    if n is None or n <= 0:
        return 0.0
    return n * (spec.idle_w + (spec.busy_w - spec.idle_w) * u)


def node_power(gpu_watts: Iterable[float | None], cpu_w: float | None) -> tuple[float, str]:
    """(power_w, power_source) of a node from its GPUs' readings (None: refused) and its CPU
    estimate (None: not available); see the module doc for the sources. Bounded by
    :data:`MAX_NODE_WATTS`; out of bounds: (-1, "").

    Example::

        >>> node_power([200.5, None], 30.0), node_power([None], 30.0), node_power([], None)
        ((230.5, 'nvml+cpu-estimate'), (30.0, 'cpu-estimate'), (-1.0, ''))
    """
    measured = [w for w in gpu_watts if w is not None]
    if cpu_w is None and not measured:
        return NOT_REPORTED, SOURCE_NONE
    total = sum(measured) + (cpu_w or 0.0)
    source = (SOURCE_NVML_CPU if cpu_w is not None else SOURCE_NVML) if measured else SOURCE_CPU
    return bounded_power(total, source)


def bounded_power(power_w, source) -> tuple[float, str]:
    """(power_w, source) fit to publish: a finite number in [0, :data:`MAX_NODE_WATTS`] with a
    known non-empty source; anything else (-1, "") (not reported)."""
    watts = finite_real(power_w)
    if watts is None or not 0.0 <= watts <= MAX_NODE_WATTS or source not in POWER_SOURCES \
            or source == SOURCE_NONE:
        return NOT_REPORTED, SOURCE_NONE
    return watts, source


def bounded_watts(value) -> float | None:
    """One unit's watts fit to use: a finite number in [0, :data:`MAX_GPU_WATTS`], else None.

    >>> bounded_watts(70), bounded_watts(float("nan")), bounded_watts(-1.0), bounded_watts("9")
    (70.0, None, None, None)
    """
    watts = finite_real(value)
    return watts if watts is not None and 0.0 <= watts <= MAX_GPU_WATTS else None


def bounded_energy(joules) -> float:
    """A task's energy fit to publish: finite, in [0, :data:`MAX_TASK_JOULES`]; else -1."""
    value = finite_real(joules)
    return value if value is not None and 0.0 <= value <= MAX_TASK_JOULES else NOT_REPORTED


@functools.lru_cache(maxsize=1)
def _power_model():
    # Imported here: the simulator's parser is the one validator of the power: section, and
    # YAML is read once per process (the telemetry of every node of a process shares it).
    from importlib import resources

    import yaml

    from simulator.energy import PowerModel
    raw = yaml.safe_load((resources.files("workload") / "calibration.yaml").read_text())
    return PowerModel.from_calibration(raw)


def cpu_power_spec():
    """The calibration's ``power: cpu_core`` :class:`~simulator.energy.PowerSpec`, or None
    (logged once) when the calibration has no valid power section."""
    try:
        return _power_model().cpu_core
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("power: no CPU power estimate (calibration power: section: %s)", exc)
        return None


def gpu_busy_w(model_key: str) -> float | None:
    """The calibration's ``busy_w`` of GPU model ``model_key`` (``t4``, ``a10`` ...), None when
    it has none (a GPU without a valid reading then has no energy)."""
    try:
        spec = _power_model().gpus.get(model_key)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return spec.busy_w if spec is not None else None


def _unit_watts(unit: str, unit_power_w: Mapping[str, float]) -> float | None:
    """Watts of unit ``unit`` (``cpu:<i>`` / ``gpu:<i>``): its own entry, else the ``cpu``
    (per-core) entry for a CPU unit; None when unknown or not a finite number >= 0."""
    kind = unit.partition(":")[0]
    value = unit_power_w.get(unit)
    if value is None and kind == "cpu":
        value = unit_power_w.get("cpu")
    return bounded_watts(value)


def task_energies_j(stages: Mapping[Hashable, Iterable[tuple[str, float, float]]],
                    unit_power_w: Mapping[str, float]) -> dict[Hashable, float]:
    """Energy (J) of each task of one report: ``stages`` maps a task (its id, or its position
    in the report, since a re-executed task may appear twice) to its stages as
    ``(unit, started_at_ms, finished_at_ms)``; ``unit_power_w`` maps ``gpu:<i>`` to that GPU's
    watts and ``cpu`` (or ``cpu:<i>``) to one busy core's. Stages overlapping on one unit split
    its power equally over the overlap (module doc). A task with no stage, a stage on a unit of
    unknown power or with unusable times (not finite, end before start, longer than
    :data:`MAX_STAGE_MS`) gets -1 (not reported)."""
    energies: dict[Hashable, float] = {}
    by_unit: dict[str, list[tuple[float, float, Hashable]]] = {}
    for task_id, rows in stages.items():
        energies[task_id] = 0.0
        rows = list(rows)
        if not rows:
            energies[task_id] = NOT_REPORTED
        for unit, start, end in rows:
            s, e = finite_real(start), finite_real(end)
            if s is None or e is None or not 0.0 <= e - s <= MAX_STAGE_MS \
                    or _unit_watts(str(unit), unit_power_w) is None:
                energies[task_id] = NOT_REPORTED
                continue
            by_unit.setdefault(str(unit), []).append((s, e, task_id))
    for unit, intervals in by_unit.items():
        watts = _unit_watts(unit, unit_power_w)
        for task_id, ms in _shared_ms(intervals).items():
            if energies[task_id] != NOT_REPORTED:
                energies[task_id] += watts * ms / 1000.0
    return {t: bounded_energy(j) if j != NOT_REPORTED else NOT_REPORTED
            for t, j in energies.items()}


def _shared_ms(intervals: list[tuple[float, float, Hashable]]) -> dict[Hashable, float]:
    """Each task's share (ms) of one unit: a sweep over the stage boundaries; a stretch where
    k stages run gives each of them 1/k of it. Costs O(n log n + n x k) for n stages of which
    at most k overlap (k is the unit's stream count, a few), not O(n^2)."""
    # at a tie, ends (0) before starts; an empty stage (e == s) has no share and no events
    events = sorted((t, kind, i) for i, (s, e, _) in enumerate(intervals) if e > s
                    for t, kind in ((s, 1), (e, 0)))
    share: dict[Hashable, float] = {t: 0.0 for _, _, t in intervals}
    active: set[int] = set()
    last = events[0][0] if events else 0.0
    for at, kind, i in events:
        if active and at > last:
            piece = (at - last) / len(active)
            for j in active:
                share[intervals[j][2]] += piece
        last = at
        if kind:
            active.add(i)
        else:
            active.discard(i)
    return share
